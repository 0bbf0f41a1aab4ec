//! A subscriber's queue of notices, bounded by what it can hold distinct: an `updated` for a
//! URI that is already waiting, or a second `list_changed`, adds nothing.
//!
//! A client that stops reading its stream (or reads slower than its resources change) makes
//! the delivery task wait on the transport, while the registry keeps handing it notices.
//! With a plain channel they would pile up without bound, and back-pressure must not grow
//! memory. A waiting `updated` already tells the client to re-read the resource, so a
//! second one for the same URI carries nothing new: the queue holds at most one notice per
//! URI and one `list_changed`, in the order they first arrived.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::registry::Notice;

#[derive(Default)]
struct State {
    queue: VecDeque<Notice>,
    /// The URIs of the `Updated` notices in `queue`.
    waiting: HashSet<String>,
    /// Whether a `ListChanged` is in `queue`.
    list: bool,
    sender_gone: bool,
    receiver_gone: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    ready: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The lock is never held across a panic-prone call; recover the data if it was.
        mcpr_core::sync::lock(&self.state)
    }
}

/// A connected sender and receiver.
pub fn mailbox() -> (Sender, Receiver) {
    let shared = Arc::new(Shared::default());
    (Sender(shared.clone()), Receiver(shared))
}

/// The registry's end.
pub struct Sender(Arc<Shared>);

impl Sender {
    /// Queue `notice` unless the same one is already waiting; dropped if the receiver is gone.
    pub fn send(&self, notice: Notice) {
        let mut st = self.0.lock();
        if st.receiver_gone {
            return;
        }
        let fresh = match &notice {
            Notice::Updated(uri) => st.waiting.insert(uri.clone()),
            Notice::ListChanged => !std::mem::replace(&mut st.list, true),
        };
        if fresh {
            st.queue.push_back(notice);
            drop(st);
            self.0.ready.notify_one();
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.0.lock().sender_gone = true;
        self.0.ready.notify_one();
    }
}

/// The delivery task's end.
pub struct Receiver(Arc<Shared>);

impl Receiver {
    /// The next notice; `None` once the sender is gone and the queue is empty.
    pub async fn recv(&mut self) -> Option<Notice> {
        loop {
            {
                let mut st = self.0.lock();
                if let Some(n) = st.queue.pop_front() {
                    match &n {
                        Notice::Updated(uri) => {
                            st.waiting.remove(uri);
                        }
                        Notice::ListChanged => st.list = false,
                    }
                    return Some(n);
                }
                if st.sender_gone {
                    return None;
                }
            }
            // `notify_one` keeps a permit when nobody waits, so a send between the check
            // above and this wait is not missed.
            self.0.ready.notified().await;
        }
    }

    /// Notices waiting.
    pub fn len(&self) -> usize {
        self.0.lock().queue.len()
    }

    /// Whether no notice is waiting.
    pub fn is_empty(&self) -> bool {
        self.0.lock().queue.is_empty()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.receiver_gone = true;
        st.queue.clear();
        st.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reader_that_never_reads_holds_one_notice_per_uri() {
        let (tx, mut rx) = mailbox();
        for round in 0..100_000 {
            tx.send(Notice::Updated(format!("file:///r/{}", round % 10)));
            if round % 1000 == 0 {
                tx.send(Notice::ListChanged);
            }
        }
        assert_eq!(rx.len(), 11, "ten URIs and one list change");
        // First-arrival order, each once.
        assert_eq!(rx.recv().await, Some(Notice::Updated("file:///r/0".into())));
        assert_eq!(rx.recv().await, Some(Notice::ListChanged));
        for i in 1..10 {
            assert_eq!(
                rx.recv().await,
                Some(Notice::Updated(format!("file:///r/{i}")))
            );
        }
        // Once delivered, the same URI queues again.
        tx.send(Notice::Updated("file:///r/0".into()));
        assert_eq!(rx.recv().await, Some(Notice::Updated("file:///r/0".into())));
        drop(tx);
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_and_ends_with_the_sender() {
        let (tx, mut rx) = mailbox();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(n) = rx.recv().await {
                got.push(n);
            }
            got
        });
        tokio::task::yield_now().await;
        tx.send(Notice::ListChanged);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        tx.send(Notice::Updated("u".into()));
        drop(tx);
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), reader)
            .await
            .expect("the receiver must end when the sender goes")
            .unwrap();
        assert_eq!(got, [Notice::ListChanged, Notice::Updated("u".into())]);
    }

    #[test]
    fn sends_after_the_receiver_went_are_dropped() {
        let (tx, rx) = mailbox();
        drop(rx);
        tx.send(Notice::Updated("u".into()));
        assert!(tx.0.lock().queue.is_empty());
    }
}
