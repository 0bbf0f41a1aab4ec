//! The mirror of how rmcp 3.11.0 numbers and resumes a legacy session's notification stream
//! (the `GET` stream), and the correction `Last-Event-ID` gets here so that it means "after
//! this event", as the spec has it.
//!
//! rmcp's `LocalSessionManager` (`transport/streamable_http_server/session/local.rs`) gives
//! each event of that stream its index as id, from `0`, and `resume` replays its cache from
//! the index given, that event included (`sync`). Its HTTP service sends a priming event
//! before the stream (`tower.rs`, `ServerSseMessage::priming("0", ..)`), with id `0` too and
//! no message. So a client that got notification 0 and resumes with `Last-Event-ID: 0` would
//! get it twice, and one that only got the priming event would lose notification 0 if the
//! index were simply shifted. [`Delivered`] remembers which events of each session's stream
//! reached the client: a resume from a real event's id is shifted to the next one, a resume
//! from the priming id (nothing received yet) replays everything held.
//!
//! Paired with rmcp by the test below: rmcp's own session manager runs a session, and
//! rmcp's resume from an id is compared with this one's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt as _};
use mcpr_core::sync::lock;
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

/// Session → the highest index of its notification stream delivered to the client.
#[derive(Default)]
pub(crate) struct Delivered(Mutex<HashMap<SessionId, usize>>);

impl Delivered {
    /// `stream`, a session's notification stream, as handed to the client: the ids of the
    /// events that carry a message are recorded as they go out.
    pub(crate) fn track(
        self: &Arc<Self>,
        id: &SessionId,
        stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    ) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static {
        let delivered = self.clone();
        let id = id.clone();
        stream.inspect(move |ev| {
            if ev.message.is_some()
                && let Some(index) = ev.event_id.as_deref().and_then(|e| e.parse::<usize>().ok())
            {
                let mut d = lock(&delivered.0);
                let e = d.entry(id.clone()).or_insert(index);
                *e = (*e).max(index);
            }
        })
    }

    /// The `Last-Event-ID` to give rmcp's `resume` for the one the client sent: the next
    /// index when the client got the event `last_event_id` names, else as it is (the
    /// priming id, or a request stream's `n/m`, which is not this stream's).
    pub(crate) fn resume_from(&self, id: &SessionId, last_event_id: String) -> String {
        match last_event_id.parse::<usize>() {
            Ok(n) if lock(&self.0).get(id).is_some_and(|&d| d >= n) => (n + 1).to_string(),
            _ => last_event_id,
        }
    }

    /// Forgets a session that is gone.
    pub(crate) fn forget(&self, id: &SessionId) {
        lock(&self.0).remove(id);
    }

    /// How many sessions are remembered.
    pub(crate) fn len(&self) -> usize {
        lock(&self.0).len()
    }

    /// Keeps only the sessions `live` says are.
    pub(crate) fn retain(&self, live: impl Fn(&SessionId) -> bool) {
        lock(&self.0).retain(|k, _| live(k));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rmcp::model::ClientJsonRpcMessage;
    use rmcp::transport::streamable_http_server::SessionManager;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::{ServerHandler, ServiceExt};

    use super::*;

    struct Quiet;
    impl ServerHandler for Quiet {}

    fn message(json: &str) -> ClientJsonRpcMessage {
        serde_json::from_str(json).unwrap()
    }

    /// The ids of the events `stream` gives until it has been quiet for a moment.
    async fn ids(stream: impl Stream<Item = ServerSseMessage>) -> Vec<String> {
        let mut stream = std::pin::pin!(stream);
        let mut out = Vec::new();
        while let Ok(Some(ev)) =
            tokio::time::timeout(Duration::from_millis(200), stream.next()).await
        {
            if ev.message.is_some() {
                out.push(ev.event_id.unwrap_or_default());
            }
        }
        out
    }

    #[tokio::test]
    async fn a_resume_replays_after_the_last_event_the_client_got_where_rmcps_replays_from_it() {
        let manager = Arc::new(LocalSessionManager::default());
        let (id, transport) = manager.create_session().await.unwrap();
        let serving = tokio::spawn(Quiet.serve(transport));
        manager
            .initialize_session(
                &id,
                message(
                    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
                ),
            )
            .await
            .unwrap();
        manager
            .accept_message(
                &id,
                message(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            )
            .await
            .unwrap();
        let running = serving.await.unwrap().unwrap();
        let delivered = Arc::new(Delivered::default());

        // Nothing received yet: the priming id replays everything, as rmcp's does.
        let stream = manager.create_standalone_stream(&id).await.unwrap();
        let stream = delivered.track(&id, stream);
        assert_eq!(delivered.resume_from(&id, "0".into()), "0");
        for _ in 0..3 {
            running.peer().notify_resource_list_changed().await.unwrap();
        }
        // The client gets the first two notifications, then the connection drops.
        let got: Vec<String> = stream
            .take(2)
            .map(|ev| ev.event_id.unwrap())
            .collect()
            .await;
        assert_eq!(got, ["0", "1"]);

        // rmcp's own resume from the last id the client got replays that event again.
        let theirs = ids(manager.resume(&id, "1".into()).await.unwrap()).await;
        let ours = ids(manager
            .resume(&id, delivered.resume_from(&id, "1".into()))
            .await
            .unwrap())
        .await;
        assert_eq!(theirs, ["1", "2"], "rmcp replays from the event named");
        let not_got: Vec<String> = theirs.into_iter().filter(|e| !got.contains(e)).collect();
        assert_eq!(
            ours, not_got,
            "ours replays only what the client did not get"
        );
        // From an earlier id than the last one, the shift is the same: after it.
        let ours = ids(manager
            .resume(&id, delivered.resume_from(&id, "0".into()))
            .await
            .unwrap())
        .await;
        assert_eq!(ours, ["1", "2"]);
        delivered.forget(&id);
        assert_eq!(delivered.len(), 0);
        running.cancel().await.unwrap();
    }
}
