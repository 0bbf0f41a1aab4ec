//! `text/event-stream` bodies, parsed by `sse-stream` (the parser rmcp itself uses), with what
//! resuming a dropped stream needs kept: the last event `id:` (sent back as `Last-Event-ID`)
//! and the server's `retry:` (how long to wait before reconnecting).
//!
//! The parser holds an unfinished event in its own buffer, so the bound on one event
//! (`--max-message-mib`) is kept on the bytes fed to it since the last event it gave back.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use sse_stream::{Sse, SseStream};

/// Where a stream stands, for a reconnection to pick up from.
#[derive(Debug, Default, Clone)]
pub(crate) struct Resume {
    /// The `id:` of the last event that carried one (an empty `id:` resets it, per the SSE
    /// standard).
    pub last_id: Option<String>,
    /// The server's last `retry:`, the wait before reconnecting.
    pub retry: Option<Duration>,
}

/// Why a stream stopped giving events.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The server ended the body.
    Ended,
    /// The connection broke (reset, timeout, truncated chunk): resumable.
    Broke(String),
    /// Bytes that are not an event stream: not resumable, the same bytes would come again.
    Bad(String),
    /// An event over the size limit: not resumable either, for the same reason.
    TooLarge(String),
}

/// The error the byte stream hands the parser: the network's, or ours when an event grows
/// past the limit.
#[derive(Debug)]
enum BodyError {
    Net(reqwest::Error),
    TooLarge(usize),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Net(e) => {
                // reqwest's own message is generic; its innermost cause says what happened.
                let mut last = e.to_string();
                let mut source = std::error::Error::source(e);
                while let Some(s) = source {
                    last = s.to_string();
                    source = s.source();
                }
                f.write_str(&last)
            }
            BodyError::TooLarge(max) => write!(
                f,
                "the server sent an event over {} MiB without ending it; stopped reading (--max-message-mib raises the limit)",
                max >> 20
            ),
        }
    }
}

impl std::error::Error for BodyError {}

type Events = Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

/// One response body read as events.
pub(crate) struct EventStream {
    events: Events,
    /// Bytes fed to the parser since it last gave back an event.
    held: Arc<AtomicUsize>,
}

impl EventStream {
    /// Read `resp`'s body as events of at most `max` bytes each.
    pub(crate) fn new(resp: reqwest::Response, max: usize) -> Self {
        let held = Arc::new(AtomicUsize::new(0));
        let counter = held.clone();
        let bytes = resp.bytes_stream().map(move |chunk| {
            // reqwest's error names the URL as given, query and all.
            let chunk = chunk.map_err(|e| BodyError::Net(e.without_url()))?;
            let now = counter.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len();
            if now > max {
                return Err(BodyError::TooLarge(max));
            }
            Ok(chunk)
        });
        Self {
            events: Box::pin(SseStream::from_bytes_stream(bytes)),
            held,
        }
    }

    /// The next event's `data` (empty for an event without any, such as a priming event),
    /// its `id:` and `retry:` recorded in `resume`; or why there is none.
    pub(crate) async fn next(&mut self, resume: &mut Resume) -> Result<String, Stop> {
        self.next_event(resume).await.map(|(_, data)| data)
    }

    /// [`Self::next`] with the event's type (`event:`; `None` for the default, `message`):
    /// the 2024-11-05 HTTP+SSE transport tells its `endpoint` event apart by it.
    pub(crate) async fn next_event(
        &mut self,
        resume: &mut Resume,
    ) -> Result<(Option<String>, String), Stop> {
        match self.events.next().await {
            None => Err(Stop::Ended),
            Some(Ok(event)) => {
                self.held.store(0, Ordering::Relaxed);
                if let Some(id) = event.id {
                    resume.last_id = (!id.is_empty()).then_some(id);
                }
                if let Some(ms) = event.retry {
                    resume.retry = Some(Duration::from_millis(ms));
                }
                Ok((event.event, event.data.unwrap_or_default()))
            }
            Some(Err(sse_stream::Error::Body(e))) => match e.downcast::<BodyError>() {
                Ok(e) => match *e {
                    BodyError::Net(_) => Err(Stop::Broke(e.to_string())),
                    BodyError::TooLarge(_) => Err(Stop::TooLarge(e.to_string())),
                },
                Err(e) => Err(Stop::Broke(e.to_string())),
            },
            Some(Err(e)) => Err(Stop::Bad(format!(
                "the server's event stream is malformed ({e})"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event stream from chunks, through the same parser and bound as a response body.
    fn stream(chunks: &[&'static [u8]], max: usize) -> EventStream {
        let held = Arc::new(AtomicUsize::new(0));
        let counter = held.clone();
        let bytes = futures::stream::iter(chunks.to_vec()).map(move |c| {
            let now = counter.fetch_add(c.len(), Ordering::Relaxed) + c.len();
            if now > max {
                return Err(BodyError::TooLarge(max));
            }
            Ok(c)
        });
        EventStream {
            events: Box::pin(SseStream::from_bytes_stream(bytes)),
            held,
        }
    }

    #[tokio::test]
    async fn events_split_across_chunks_keep_id_and_retry() {
        let mut s = stream(
            &[
                b": keep-alive\n\nid: 1\nretry: 250\ndata: {\"a\"",
                b":1}\r",
                b"\n\r\n",
                b"event: message\ndata: x\ndata: y\n\n",
                b"id: 7\ndata:\n\n",
            ],
            1 << 20,
        );
        let mut r = Resume::default();
        assert_eq!(s.next(&mut r).await.unwrap(), "{\"a\":1}");
        assert_eq!(r.last_id.as_deref(), Some("1"));
        assert_eq!(r.retry, Some(Duration::from_millis(250)));
        assert_eq!(s.next(&mut r).await.unwrap(), "x\ny");
        // An event without an id leaves the last one standing.
        assert_eq!(r.last_id.as_deref(), Some("1"));
        // A priming event: an id and empty data.
        assert_eq!(s.next(&mut r).await.unwrap(), "");
        assert_eq!(r.last_id.as_deref(), Some("7"));
        assert!(matches!(s.next(&mut r).await, Err(Stop::Ended)));
    }

    #[tokio::test]
    async fn an_event_past_the_limit_stops_the_stream() {
        let mut s = stream(&[b"data: 0123456789", b"0123456789", b"0123456789\n\n"], 24);
        let mut r = Resume::default();
        match s.next(&mut r).await {
            Err(Stop::TooLarge(why)) => assert!(why.contains("--max-message-mib"), "{why}"),
            other => panic!("expected the limit, got {other:?}"),
        }
    }
}
