//! A bounded in-memory event store, so a legacy client whose SSE stream dropped can resume
//! with `Last-Event-ID` and receive what was sent while it was away.
//!
//! Memory is bounded: the oldest events are dropped first. A resume from an event that has
//! already been dropped is refused (the client must re-sync) rather than silently skipping.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::transport::streamable_http_server::session::{
    EventStore, EventStoreError, EventStream, ServerSseMessage,
};

struct Stored {
    id: u64,
    stream: String,
    event: ServerSseMessage,
}

/// Keeps the last `capacity` SSE events of all streams.
pub struct BoundedEventStore {
    capacity: usize,
    next: AtomicU64,
    events: Mutex<VecDeque<Stored>>,
}

impl BoundedEventStore {
    /// A store holding at most `capacity` events.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            next: AtomicU64::new(1),
            events: Mutex::new(VecDeque::new()),
        }
    }

    /// Events currently held.
    pub fn len(&self) -> usize {
        self.events.lock().expect("event store lock").len()
    }

    /// Whether no event is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait::async_trait]
impl EventStore for BoundedEventStore {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<String, EventStoreError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut event = event.clone();
        event.event_id = Some(id.to_string());
        let mut events = self.events.lock().expect("event store lock");
        if events.len() == self.capacity {
            events.pop_front();
        }
        events.push_back(Stored {
            id,
            stream: stream_id.to_owned(),
            event,
        });
        Ok(id.to_string())
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let last: u64 = last_event_id.parse().map_err(|_| {
            std::io::Error::other(format!(
                "Last-Event-ID {last_event_id:?} was not issued by this server"
            ))
        })?;
        let events = self.events.lock().expect("event store lock");
        let Some(pos) = events.iter().position(|e| e.id == last) else {
            return Err(Box::new(std::io::Error::other(format!(
                "event {last} is no longer held (the store keeps the last {} events); re-synchronise",
                self.capacity
            ))));
        };
        let stream = events[pos].stream.clone();
        let replay: Vec<ServerSseMessage> = events
            .iter()
            .skip(pos + 1)
            .filter(|e| e.stream == stream)
            .map(|e| e.event.clone())
            .collect();
        Ok(Box::pin(futures::stream::iter(replay)))
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt as _;

    use super::*;

    fn ev() -> ServerSseMessage {
        ServerSseMessage::default()
    }

    #[tokio::test]
    async fn replays_one_stream_after_an_id_and_forgets_the_oldest() {
        let s = BoundedEventStore::new(3);
        let a1 = s.store_event("a", &ev()).await.unwrap();
        let _b1 = s.store_event("b", &ev()).await.unwrap();
        let a2 = s.store_event("a", &ev()).await.unwrap();
        let got: Vec<_> = s.replay_events_after(&a1).await.unwrap().collect().await;
        assert_eq!(
            got.iter()
                .map(|e| e.event_id.clone().unwrap())
                .collect::<Vec<_>>(),
            vec![a2.clone()]
        );
        s.store_event("a", &ev()).await.unwrap();
        assert_eq!(s.len(), 3);
        assert!(s.replay_events_after(&a1).await.is_err(), "a1 was evicted");
        assert!(s.replay_events_after("junk").await.is_err());
    }
}
