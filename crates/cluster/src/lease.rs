//! A watcher lease: one subject per mount in a JetStream stream that keeps one message per
//! subject and drops messages older than the lease TTL (a key-value bucket in all but name,
//! spoken to directly so it works with JetStream servers from 2.9 on). The holder renews its
//! message three times per TTL with a compare-and-set on the subject's last sequence
//! (`Nats-Expected-Last-Subject-Sequence`); the others try to write it as if it were absent
//! (expected sequence 0), which succeeds once the holder's message expired. A holder that
//! could not renew for a whole TTL stops considering itself the watcher even if NATS is
//! unreachable, so two replicas never both believe they hold it for long.

use std::time::Duration;

use tokio::sync::watch;

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

    /// Compete for the lease of mount `mount` as `replica` (after [`Lease::prepare`]).
    pub fn compete(
        client: async_nats::Client,
        cluster: &str,
        mount: &str,
        replica: &str,
        ttl: Duration,
    ) -> Self {
        let (tx, held) = watch::channel(false);
        let subject = format!("mcpr.{cluster}.lease.{}", crate::token(mount, 12));
        let me = bytes::Bytes::from(replica.to_owned());
        let task = tokio::spawn(async move {
            let period = ttl / 3;
            let mut sequence: Option<u64> = None;
            let mut renewed = tokio::time::Instant::now();
            loop {
                let expected = sequence.unwrap_or(0);
                sequence = match write(&client, &subject, &me, expected, period).await {
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

/// Write `me` on `subject` if its last sequence is `expected` (0: no message); the new one.
async fn write(
    client: &async_nats::Client,
    subject: &str,
    me: &bytes::Bytes,
    expected: u64,
    within: Duration,
) -> Result<u64, WriteError> {
    match crate::js::publish(client, subject, me.clone(), Some(expected), within).await {
        Ok(Some(seq)) => Ok(seq),
        Ok(None) => Err(WriteError::Taken),
        Err(e) => Err(WriteError::Unreachable(e.to_string())),
    }
}
