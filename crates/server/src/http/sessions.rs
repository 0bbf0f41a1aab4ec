//! A thin wrapper around rmcp's `LocalSessionManager` that makes `Last-Event-ID` mean "after
//! this event".
//!
//! rmcp's per-session replay starts *at* the given index, and its GET stream's priming event
//! carries id `0`, the same id the first real notification gets. So a client that saw
//! notification 0 and resumes with `Last-Event-ID: 0` would get it twice. The wrapper
//! watches which events of each session's notification stream actually reached the client;
//! a resume from an id that was a real event is shifted to the next one, while a resume from
//! the priming id (nothing received yet) replays everything held.
//!
//! With a [`SessionHub`](super::hub::SessionHub) (sessions roaming between replicas), the
//! notification stream and its resumption are the hub's instead: see `roaming.rs`.

use mcpr_core::sync::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt as _};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::RestoreOutcome;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

/// See the module docs.
pub struct ResumeAfter {
    inner: Arc<LocalSessionManager>,
    roaming: Option<Arc<super::roaming::Roaming>>,
    /// Session → highest index of its notification stream delivered to the client.
    delivered: Arc<Mutex<HashMap<SessionId, usize>>>,
}

impl ResumeAfter {
    pub(crate) fn new(
        inner: Arc<LocalSessionManager>,
        roaming: Option<Arc<super::roaming::Roaming>>,
    ) -> Self {
        Self {
            inner,
            roaming,
            delivered: Arc::default(),
        }
    }

    /// Record the plain-index ids (notification stream events) a stream hands to the client.
    fn track(
        &self,
        id: &SessionId,
        stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    ) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static {
        let delivered = self.delivered.clone();
        let id = id.clone();
        stream.inspect(move |ev| {
            if ev.message.is_some()
                && let Some(index) = ev.event_id.as_deref().and_then(|e| e.parse::<usize>().ok())
            {
                let mut d = lock(&delivered);
                let e = d.entry(id.clone()).or_insert(index);
                *e = (*e).max(index);
            }
        })
    }
}

impl SessionManager for ResumeAfter {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // Sessions that expired on their own never pass through `close_session`; forget them
        // now and then so the map stays as small as the set of live sessions.
        if lock(&self.delivered).len() > 1024 {
            let live = self.inner.sessions.read().await;
            lock(&self.delivered).retain(|k, _| live.contains_key(k));
        }
        self.inner.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        let has = self.inner.has_session(id).await?;
        if has && let Some(r) = &self.roaming {
            // Every request of a session asks this first: keep its shared records alive.
            r.touch(id);
        }
        Ok(has)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        lock(&self.delivered).remove(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        if let Some(r) = &self.roaming {
            // rmcp checked (or restored) the session before asking.
            return Ok(r.open(id, None).await.left_stream());
        }
        let stream = self.inner.create_standalone_stream(id).await?;
        Ok(self.track(id, stream).right_stream())
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // The notification stream's ids are the log's there; a request stream's (`n/m`)
        // stay this process's.
        if let Some(r) = &self.roaming
            && let Ok(after) = last_event_id.parse::<u64>()
        {
            return Ok(r.open(id, Some(after)).await.left_stream());
        }
        let shifted = match last_event_id.parse::<usize>() {
            Ok(n) if lock(&self.delivered).get(id).is_some_and(|&d| d >= n) => (n + 1).to_string(),
            _ => last_event_id,
        };
        let stream = self.inner.resume(id, shifted).await?;
        Ok(self.track(id, stream).right_stream())
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.inner.restore_session(id).await
    }
}
