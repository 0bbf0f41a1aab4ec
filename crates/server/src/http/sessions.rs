//! A thin wrapper around rmcp's `LocalSessionManager` that makes `Last-Event-ID` mean "after
//! this event": rmcp's resume replays from the event named, that one included, so the
//! wrapper records which events of each session's notification stream reached the client
//! and shifts a resume past them (the mirror of rmcp's numbering and the rule are in
//! [`crate::wire::resume`]).
//!
//! With a [`SessionHub`](super::hub::SessionHub) (sessions roaming between replicas), the
//! notification stream and its resumption are the hub's instead: see `roaming.rs`.

use std::sync::Arc;

use futures::{Stream, StreamExt as _};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::RestoreOutcome;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};

use crate::wire::resume::Delivered;

/// See the module docs.
pub struct ResumeAfter {
    inner: Arc<LocalSessionManager>,
    roaming: Option<Arc<super::roaming::Roaming>>,
    /// What of each session's notification stream reached the client.
    delivered: Arc<Delivered>,
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
}

impl SessionManager for ResumeAfter {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // Sessions that expired on their own never pass through `close_session`; forget them
        // now and then so the map stays as small as the set of live sessions.
        if self.delivered.len() > 1024 {
            let live = self.inner.sessions.read().await;
            self.delivered.retain(|k| live.contains_key(k));
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
        self.delivered.forget(id);
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
        Ok(self.delivered.track(id, stream).right_stream())
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // The notification stream's ids are the log's there; a request stream's (`n/m`)
        // stay this process's.
        if let Some(r) = &self.roaming
            && let Some(after) = super::hub::EventId::parse(&last_event_id)
        {
            return Ok(r.open(id, Some(after)).await.left_stream());
        }
        let shifted = self.delivered.resume_from(id, last_event_id);
        let stream = self.inner.resume(id, shifted).await?;
        Ok(self.delivered.track(id, stream).right_stream())
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.inner.restore_session(id).await
    }
}
