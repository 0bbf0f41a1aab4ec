//! A watcher lease: one subject per mount in a JetStream stream that keeps one message per
//! subject and drops messages older than the lease TTL (a key-value bucket in all but name,
//! spoken to directly so it works with JetStream servers from 2.9 on). The holder renews its
//! message three times per TTL with a compare-and-set on the subject's last sequence
//! (`Nats-Expected-Last-Subject-Sequence`); the others try to write it as if it were absent
//! (expected sequence 0), which succeeds once the holder's message expired. A holder that
//! could not renew for a whole TTL stops considering itself the watcher even if NATS is
//! unreachable, so two replicas never both believe they hold it for long.
//!
//! Each record is sealed ([`Seal`]) for its subject and stamped: a record that does not
//! verify (written by another client of the NATS account) or is older than the TTL (a
//! captured record written again) counts as absent, and is overwritten with a
//! compare-and-set on its own sequence, so a stranger writing the subject cannot keep every
//! replica from watching.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::seal::{Kind, Seal};

/// See the module docs. Dropping it stops renewing (the lease then expires on its own).
pub struct Lease {
    held: watch::Receiver<bool>,
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
            Ok(()) => Ok(()),
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
        let (tx, held) = watch::channel(false);
        let subject = format!("mcpr.{cluster}.lease.{}", crate::token(mount, 12));
        let me = replica.to_owned();
        let stream = stream_name(cluster);
        let task = tokio::spawn(async move {
            let at = Place {
                client: &client,
                seal: &seal,
                stream: &stream,
                subject: &subject,
                ttl,
            };
            let period = ttl / 3;
            let mut sequence: Option<u64> = None;
            let mut renewed = tokio::time::Instant::now();
            loop {
                let expected = sequence.unwrap_or(0);
                sequence = match at.write(&me, expected, period).await {
                    Ok(seq) => {
                        renewed = tokio::time::Instant::now();
                        Some(seq)
                    }
                    // Ours expired and another replica holds it now.
                    Err(WriteError::Taken) => None,
                    // NATS is unreachable: the lease may still be ours, until a whole TTL
                    // passed since the last renewal.
                    Err(WriteError::Unreachable(e)) => {
                        tracing::debug!(error = %e, "cannot renew a watcher lease");
                        sequence.filter(|_| renewed.elapsed() < ttl)
                    }
                };
                tx.send_if_modified(|h| {
                    let now = sequence.is_some();
                    std::mem::replace(h, now) != now
                });
                tokio::time::sleep(period).await;
            }
        });
        Self { held, task }
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

fn stream_name(cluster: &str) -> String {
    format!("MCPR_{cluster}_LEASES")
}

/// Where one mount's lease record lives, and how to seal and check it.
struct Place<'a> {
    client: &'a async_nats::Client,
    seal: &'a Seal,
    stream: &'a str,
    subject: &'a str,
    ttl: Duration,
}

impl Place<'_> {
    /// Write `me` if the subject's last sequence is `expected` (0: no message); the new
    /// sequence. When another record is there, it is looked at: ours (a write whose answer
    /// was lost) is kept, a valid one of another replica means the lease is taken, and one
    /// that does not verify or is stale counts as absent and is overwritten.
    async fn write(&self, me: &str, expected: u64, within: Duration) -> Result<u64, WriteError> {
        let unreachable = |e: crate::js::JsError| WriteError::Unreachable(e.to_string());
        let put = |expected: u64| {
            let payload = self.seal.seal(self.subject, me.as_bytes());
            crate::js::publish(self.client, self.subject, payload, Some(expected), within)
        };
        let mut expected = expected;
        // A stranger writing the subject can slip a record in between our look and our
        // compare-and-set; only a valid record of another replica means the lease is taken,
        // so a lost race with a forged one is tried again (a few times: a stranger writing
        // without pause must not hold this task either).
        for _ in 0..FORGED_RETRIES {
            if let Some(seq) = put(expected).await.map_err(unreachable)? {
                return Ok(seq);
            }
            let last = crate::js::get(
                self.client,
                self.stream,
                &serde_json::json!({ "last_by_subj": self.subject }),
                within,
            )
            .await
            .map_err(unreachable)?;
            expected = match last {
                // Expired meanwhile.
                None => 0,
                Some((seq, data)) => {
                    match self.seal.open(Kind::Lease, self.subject, &data, self.ttl) {
                        Some(holder) if holder == me.as_bytes() => return Ok(seq),
                        Some(_) => return Err(WriteError::Taken),
                        None => seq,
                    }
                }
            };
        }
        // Not taken by a replica, not written either: like an unreachable NATS, the lease
        // stays ours until a whole TTL passed since the last renewal.
        Err(WriteError::Unreachable(format!(
            "the lease record changed under {FORGED_RETRIES} compare-and-sets in a row \
             (a client that is not a replica writes {})",
            self.subject
        )))
    }
}

/// How many compare-and-sets one write tries against records that do not verify.
const FORGED_RETRIES: usize = 4;
