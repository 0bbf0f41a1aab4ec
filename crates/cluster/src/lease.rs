//! A watcher lease: one subject per mount in a JetStream stream that keeps one message per
//! subject and drops messages older than the lease TTL (a key-value bucket in all but name,
//! spoken to directly so it works with JetStream servers from 2.9 on). The holder renews its
//! message three times per TTL with a compare-and-set on the subject's last sequence
//! (`Nats-Expected-Last-Subject-Sequence`); the others try to write it as if it were absent
//! (expected sequence 0), which succeeds once the holder's message expired. A holder that
//! could not renew for two thirds of a TTL, counted from when it sent its last successful renewal
//! (the record cannot have been stored earlier, so it cannot expire earlier than a TTL after
//! that), lets go even if NATS is unreachable and while a renewal is still in flight: it
//! stops watching before its record can expire and another replica can win the lease, so a
//! lease never has two holders.
//!
//! A record of a replica of the previous release (another protocol format) is never
//! overwritten: it says that replica runs, and this one stands aside (see `watch.rs`).
//!
//! Each record is sealed ([`Seal`]) for its subject and stamped: a record that does not
//! verify (written by another client of the NATS account) or is older than the TTL (a
//! captured record written again) is nobody's, and never hands the lease over. The holder
//! writes over it with a compare-and-set on its own sequence and goes on holding even when a
//! stranger writes faster than it can; the holder also says it renewed on core NATS
//! (`mcpr.<cluster>.holder.<mount>`, sealed), and another replica that heard it within the TTL
//! leaves such a record be. One that heard no holder for a TTL writes over it, so a stranger
//! writing the subject cannot keep every replica from watching either.
//!
//! A lease stream that is gone (deleted, or lost by a NATS without storage) is created again
//! by the first replica whose write finds it missing, which then writes its record as onto a
//! purged stream; a holder keeps the lease through it. Each recreation is counted
//! ([`Seal::streams_recreated`]). A purged stream (its records gone, the stream kept) is the
//! case of a record that expired: the holder's compare-and-set finds no record and writes
//! its own again. The others write nothing while they heard the holder say it renewed
//! within two thirds of a TTL (it lets go by then without a renewal), so an empty subject
//! never makes a second holder. A replica that heard the holder last tries again three
//! quarters of a TTL after that renewal (a twelfth of a TTL after the holder let go, for its
//! watches to stop), so when the holder died and its record went with the stream (deleted
//! or purged), another replica holds the lease within one TTL of the death.
//!
//! The watcher (`run_watcher` in `watch.rs`) stops at once when the lease is let go, even in
//! the middle of starting a watch, and logs each of its holdings of a mount (target
//! `mcpr_cluster::lease`, at info): "now watches the mount" with the record's revision and a
//! moment read before it starts acting, "no longer watches the mount" with why and a moment
//! read after its watches were dropped, each on the wall clock (to the microsecond) and the
//! host's monotonic clock ([`moment`]). Those intervals are what this replica can attest to;
//! the partition test proves with them that no two replicas' intervals ever overlap.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::js::JsError;
use crate::seal::{Kind, Seal, Stream};

/// What lets a replica take part in a lease ([`Lease::compete_while`]).
pub struct Allowed {
    /// The replica's standing, told on every change (its clock measured and right, no
    /// replica of the previous release heard).
    pub verdict: watch::Receiver<bool>,
    /// Whether its clock still holds, asked before every write ([`Lease::compete_while`]).
    pub clock_holds: Arc<dyn Fn() -> bool + Send + Sync>,
}

/// See the module docs. Dropping it stops renewing (the lease then expires on its own).
pub struct Lease {
    held: watch::Receiver<bool>,
    /// The revision (stream sequence) of the record this replica last wrote, and why it
    /// last let the lease go: for the watcher's log lines, set before `held` changes.
    note: Arc<std::sync::Mutex<(u64, &'static str)>>,
    /// Whether a write was tried while allowed (won, or found taken): until then, not
    /// holding says nothing of whether this replica will.
    decided: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why a write of the lease failed.
enum WriteError {
    /// Another replica's message is there (or ours expired and someone else's replaced it).
    Taken,
    /// NATS did not answer, or answered with another error.
    Unreachable(String),
    /// Not written: this replica stands aside ([`Lease::compete_while`]).
    Aside,
}

impl Lease {
    /// Create (or find, with the same settings) cluster `cluster`'s lease stream, whose
    /// messages last `ttl`. Replicas of one cluster must agree on `ttl`.
    pub async fn prepare(
        client: &async_nats::Client,
        cluster: &str,
        ttl: Duration,
    ) -> Result<(), String> {
        let config = serde_json::json!({
            "name": stream_name(cluster),
            "subjects": [format!("mcpr.{cluster}.lease.>")],
            "max_msgs_per_subject": 1,
            "max_age": u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX),
            "storage": "memory",
            "num_replicas": 1,
            "discard": "old",
        });
        // async-nats' own default for a request without a deadline.
        match crate::js::create_stream(client, &config, Duration::from_secs(10)).await {
            Ok(_) => Ok(()),
            Err(crate::js::JsError::Api { description, .. }) => Err(format!(
                "cannot create the lease stream (do all replicas use the same lease_ttl_ms?): {description}"
            )),
            Err(e) => Err(format!("cannot create the lease stream: {e}")),
        }
    }

    /// Compete for the lease of mount `mount` as `replica` (after [`Lease::prepare`]),
    /// sealing and checking records with `seal`.
    pub fn compete(
        client: async_nats::Client,
        seal: Arc<Seal>,
        cluster: &str,
        mount: &str,
        replica: &str,
        ttl: Duration,
    ) -> Self {
        let (_always, verdict) = watch::channel(true);
        let allowed = Allowed {
            verdict,
            clock_holds: Arc::new(|| true),
        };
        Self::compete_while(client, seal, cluster, mount, replica, ttl, allowed)
    }

    /// [`Lease::compete`], standing aside while `allowed` says no: a replica whose clock
    /// is too far off must not hold a lease, because the others would take its records for
    /// stale ones and overwrite them (two holders), and it would take theirs for stale ones.
    /// A holder told to stand aside lets go at once and stops renewing; its record then
    /// expires on its own.
    pub fn compete_while(
        client: async_nats::Client,
        seal: Arc<Seal>,
        cluster: &str,
        mount: &str,
        replica: &str,
        ttl: Duration,
        allowed: Allowed,
    ) -> Self {
        let Allowed {
            verdict: mut allowed,
            clock_holds,
        } = allowed;
        let (tx, held) = watch::channel(false);
        let note = Arc::new(std::sync::Mutex::new((0, "")));
        let noted = note.clone();
        let decided = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let decision = decided.clone();
        let token = crate::token(mount, 12);
        let subject = format!("mcpr.{cluster}.lease.{token}");
        let notices = format!("mcpr.{cluster}.holder.{token}");
        let me = replica.to_owned();
        let cluster = cluster.to_owned();
        let task = tokio::spawn(async move {
            let at = Place {
                client: &client,
                seal: &seal,
                cluster: &cluster,
                subject: &subject,
                ttl,
                seen: std::sync::atomic::AtomicBool::new(false),
            };
            // Without the holders' notices (NATS refused the subscription) a replica only
            // misses one reason to leave a forged record be.
            let mut heard = client.subscribe(notices.clone()).await.ok();
            // Until it has listened for a TTL, a replica cannot know that nobody holds the
            // lease: it counts as having heard a holder when it started.
            let mut other_heard: Option<Instant> = heard.as_ref().map(|_| Instant::now());
            // When another replica last said it renewed (a notice really heard, unlike the
            // start above).
            let mut notice_at: Option<Instant> = None;
            let period = ttl / 3;
            // A third of a TTL short of the record's expiry: room for the renewal after
            // next to be late under load, and for the watches to stop before another
            // replica can win.
            let hold_for = ttl * 2 / 3;
            let mut sequence: Option<u64> = None;
            // False once nobody can change `allowed` any more ([`Lease::compete`]).
            let mut allowed_live = allowed.has_changed().is_ok();
            // When the last successful write was sent: its record expires a TTL after it
            // was stored, which is no earlier than this.
            let mut renewed = Instant::now();
            loop {
                let expected = sequence.unwrap_or(0);
                let other_holds = other_heard.is_some_and(|t| t.elapsed() < ttl);
                let sent = Instant::now();
                let write = at.write(&me, expected, other_holds, period);
                // A holder that said it renewed less than two thirds of a TTL ago holds it
                // still (it lets go by then without a renewal), whatever the stream shows: a
                // purged stream has no record, and writing one would make two holders until
                // the holder's next renewal found it.
                let holder_live =
                    sequence.is_none() && notice_at.is_some_and(|t| t.elapsed() < hold_for);
                // The clock is asked at every write, not only told on a change: stepped
                // since its last measurement, it makes live records look expired at once.
                let written = if !*allowed.borrow() || !clock_holds() {
                    // Standing aside: no write, and a lease held is let go below.
                    Err(WriteError::Aside)
                } else if holder_live {
                    Err(WriteError::Taken)
                } else if sequence.is_some() {
                    // A holder waits for its renewal no longer than it may hold without one.
                    tokio::time::timeout_at(renewed + hold_for, write)
                        .await
                        .unwrap_or_else(|_| {
                            Err(WriteError::Unreachable(format!(
                                "no renewal within {} ms (two thirds of the lease TTL)",
                                hold_for.as_millis()
                            )))
                        })
                } else {
                    write.await
                };
                if !matches!(written, Err(WriteError::Aside)) {
                    decision.store(true, Ordering::SeqCst);
                }
                let why = match &written {
                    Ok(_) => "",
                    Err(WriteError::Taken) => "another replica's record is on the lease",
                    Err(WriteError::Aside) => {
                        "told to stand aside (its clock is off, or an older release runs)"
                    }
                    Err(WriteError::Unreachable(_)) => {
                        "no renewal confirmed within two thirds of the lease TTL"
                    }
                };
                let was_held = sequence.is_some();
                sequence = match written {
                    Ok(seq) => {
                        renewed = sent;
                        let notice = seal.seal(Kind::Lease, &notices, me.as_bytes());
                        if let Err(e) = client.publish(notices.clone(), notice).await {
                            tracing::debug!(error = %e, "cannot announce a watcher lease renewal");
                        }
                        Some(seq)
                    }
                    // Ours expired and another replica holds it now.
                    Err(WriteError::Taken) => None,
                    Err(WriteError::Aside) => None,
                    // NATS is unreachable: the lease may still be ours, until two thirds of a TTL
                    // passed since the last renewal was sent (see the module docs).
                    Err(WriteError::Unreachable(e)) => {
                        tracing::debug!(error = %e, "cannot renew a watcher lease");
                        let keep = sequence.filter(|_| renewed.elapsed() < hold_for);
                        if sequence.is_some() && keep.is_none() {
                            tracing::warn!(
                                error = %e,
                                "cluster: a watcher lease could not be renewed for two thirds of its TTL; \
                                 letting it go before its record can expire"
                            );
                        }
                        keep
                    }
                };
                match sequence {
                    Some(seq) => mcpr_core::sync::lock(&noted).0 = seq,
                    None if was_held => mcpr_core::sync::lock(&noted).1 = why,
                    None => {}
                }
                tx.send_if_modified(|h| {
                    let now = sequence.is_some();
                    std::mem::replace(h, now) != now
                });
                // A holder whose renewal failed tries again, and lets go, no later than
                // its deadline.
                let mut next = Instant::now() + period;
                if sequence.is_some() {
                    next = next.min(renewed + hold_for);
                } else if let Some(free) = notice_at.map(|t| t + hold_for + period / 4)
                    && free > Instant::now()
                {
                    // The holder heard last lets go two thirds of a TTL after it renewed:
                    // try then (a quarter period later, for its watches to stop), not up to
                    // a period later, so that a holder that died with its record gone (the
                    // stream deleted or purged) is replaced within one TTL.
                    next = next.min(free);
                }
                loop {
                    let notice = async {
                        match heard.as_mut() {
                            Some(sub) => sub.next().await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        () = tokio::time::sleep_until(next) => break,
                        // Allowed or told to stand aside: at once, not a period later.
                        changed = allowed.changed(), if allowed_live => {
                            allowed_live = changed.is_ok();
                            break;
                        }
                        msg = notice => match msg {
                            Some(msg) => {
                                let from = seal.receive(Kind::Lease, &msg.subject, &msg.payload);
                                if from.is_some_and(|r| r != me.as_bytes()) {
                                    other_heard = Some(Instant::now());
                                    notice_at = other_heard;
                                    // The holder's record was stored: the stream existed, so
                                    // finding it missing later is a recreation, counted
                                    // (this replica may never have written it itself).
                                    at.seen.store(true, Ordering::Relaxed);
                                }
                            }
                            None => heard = None,
                        },
                    }
                }
            }
        });
        Self {
            held,
            note,
            decided,
            task,
        }
    }

    /// The revision (stream sequence) of the record this replica last wrote.
    pub fn revision(&self) -> u64 {
        mcpr_core::sync::lock(&self.note).0
    }

    /// Why this replica last let the lease go (empty before it ever did).
    pub fn why_let_go(&self) -> &'static str {
        mcpr_core::sync::lock(&self.note).1
    }

    /// Whether this replica tried to take or keep the lease since it was allowed to: once
    /// true, [`Lease::held`] is the lease's state, not a start not yet made.
    pub fn decided(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.decided.clone()
    }

    /// Whether this replica holds the lease now.
    pub fn held(&self) -> bool {
        *self.held.borrow()
    }

    /// A receiver that changes when the lease is won or lost.
    pub fn changes(&self) -> watch::Receiver<bool> {
        self.held.clone()
    }
}

/// This moment as the watcher's log lines of its holding give it: the wall clock (RFC 3339,
/// to the microsecond) and the host's monotonic clock in microseconds. The second is the
/// same clock for every process of one host and no wall-clock step moves it (an NTP step, a
/// clock set wrong): intervals logged with it by replicas on one host compare exactly, as the
/// partition test compares them to prove that no two replicas ever watched a mount at once.
pub(crate) fn moment() -> (String, u64) {
    let wall = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let us = u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(t.tv_nsec).unwrap_or(0) / 1_000;
    (wall, us)
}

fn stream_name(cluster: &str) -> String {
    format!("MCPR_{cluster}_LEASES")
}

/// Where one mount's lease record lives, and how to seal and check it.
struct Place<'a> {
    client: &'a async_nats::Client,
    seal: &'a Seal,
    cluster: &'a str,
    subject: &'a str,
    ttl: Duration,
    /// Whether the stream answered one of this task's writes or a holder said it renewed
    /// (it existed then).
    seen: std::sync::atomic::AtomicBool,
}

impl Place<'_> {
    /// Write `me` if the subject's last sequence is `expected` (0: no message, and this
    /// replica does not hold the lease); the new sequence. When another record is there, it
    /// is looked at: ours (a write whose answer was lost) is written over, a valid one of another
    /// replica means the lease is taken, and one that does not verify or is stale is nobody's
    /// (see the module docs; `other_holds`: another replica said it renewed within the TTL).
    /// A missing stream is created again.
    async fn write(
        &self,
        me: &str,
        expected: u64,
        other_holds: bool,
        within: Duration,
    ) -> Result<u64, WriteError> {
        let unreachable = |e: JsError| WriteError::Unreachable(e.to_string());
        let holding = expected != 0;
        let put = |expected: u64| {
            let payload = self.seal.seal(Kind::Lease, self.subject, me.as_bytes());
            crate::js::publish(self.client, self.subject, payload, Some(expected), within)
        };
        let stream = stream_name(self.cluster);
        let mut expected = expected;
        let mut recreated = false;
        let mut forged = None;
        let mut tries = 0;
        // A stranger writing the subject can slip a record in between our look and our
        // compare-and-set; only a valid record of another replica means the lease is taken,
        // so a lost race with a forged one is tried again (a few times: a stranger writing
        // without pause must not hold this task either).
        while tries < FORGED_RETRIES {
            let written = match put(expected).await {
                Err(e) if crate::js::stream_missing(&e) && !recreated => {
                    // An empty subject, as after a purge: a replica that is not the holder
                    // writes only when it has not heard the holder renew for two thirds of
                    // a TTL (the caller's check), by when the holder has let go; so it
                    // writes at once, and a watcher whose holder died with the stream is
                    // elected within one TTL of the death.
                    recreated = true;
                    self.recreate().await?;
                    continue;
                }
                written => {
                    if !matches!(written, Err(JsError::Unreachable(_))) {
                        self.seen.store(true, Ordering::Relaxed);
                    }
                    written.map_err(unreachable)?
                }
            };
            if let Some(seq) = written {
                return Ok(seq);
            }
            tries += 1;
            let last = crate::js::get(
                self.client,
                &stream,
                &serde_json::json!({ "last_by_subj": self.subject }),
                within,
            )
            .await
            .map_err(unreachable)?;
            expected = match last {
                // Expired meanwhile.
                None => 0,
                Some((seq, data)) => {
                    match self
                        .seal
                        .open_record(Kind::Lease, self.subject, &data, self.ttl)
                    {
                        // Ours, but stored when? Perhaps by a write sent long before
                        // this one (a holder that let go finding its own record not yet
                        // expired): written over at once, so that the record held is one
                        // sent now, and it cannot expire earlier than the caller counts.
                        Some(holder) if holder == me.as_bytes() => seq,
                        Some(_) => return Err(WriteError::Taken),
                        // A replica of the previous release holds it: never overwritten
                        // (remembered, its replicas keep this one standing aside).
                        None if self
                            .seal
                            .previous_holder(self.subject, &data, self.ttl)
                            .is_some() =>
                        {
                            return Err(WriteError::Taken);
                        }
                        None if !holding && other_holds => return Err(WriteError::Taken),
                        None => {
                            forged = Some(seq);
                            seq
                        }
                    }
                }
            };
        }
        // Only records that are nobody's kept this write from landing: the holder goes on
        // holding (its notices keep the others off), so a stranger never hands it over.
        if holding && let Some(seq) = forged {
            return Ok(seq);
        }
        // Not taken by a replica, not written either: like an unreachable NATS, the lease
        // stays with whoever held it until a whole TTL passed since the last renewal.
        Err(WriteError::Unreachable(format!(
            "the lease record changed under {FORGED_RETRIES} compare-and-sets in a row \
             (a client that is not a replica writes {})",
            self.subject
        )))
    }

    /// Create the lease stream again (it was found missing). Named and counted only when
    /// this task knew the stream: at start a write can come before it is first prepared.
    async fn recreate(&self) -> Result<(), WriteError> {
        let known = self.seen.load(Ordering::Relaxed);
        if known {
            tracing::warn!(
                cluster = self.cluster,
                "cluster: the watcher lease stream is missing; creating it again"
            );
        } else {
            tracing::debug!(
                cluster = self.cluster,
                "cluster: creating the watcher lease stream"
            );
        }
        Lease::prepare(self.client, self.cluster, self.ttl)
            .await
            .map_err(WriteError::Unreachable)?;
        self.seen.store(true, Ordering::Relaxed);
        if known {
            self.seal.recreated_stream(Stream::Leases);
        }
        Ok(())
    }
}

/// How many compare-and-sets one write tries against records that do not verify.
const FORGED_RETRIES: usize = 4;
