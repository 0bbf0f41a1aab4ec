//! Legacy sessions bound to the identity that created them, when requests are authenticated:
//! [`Owners`] (who created which session), the layer that refuses a session to anyone else
//! ([`SessionOwner`], before a permit is taken) and the layer that keeps the records
//! as sessions come and go ([`OwnerRecords`], next to the endpoint, where the answer
//! to an `initialize` names the session it created).

use mcpr_core::sync::lock;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use axum::extract::Request;
use axum::response::Response;
use futures::future::BoxFuture;
use http::{Method, StatusCode};
use pin_project_lite::pin_project;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::gate::Gate;
use super::step::{Inner, Step};
use super::{Kind, kind_of, refuse, session_of};
use crate::grant::{Grant, Identity};
use crate::http::roaming::PendingGrants;
use crate::http::{SessionHub, hub};
use crate::wire::{codes, http_answers};

/// Past this many records, those of sessions that ended on their own (never through DELETE)
/// are forgotten, so the map stays as small as the set of live sessions.
const PRUNE_PAST: usize = 1024;

/// Who created which legacy session, and where to ask about sessions of other replicas.
pub(crate) struct Owners {
    /// Sessions are bound only when requests are authenticated: an address is no owner.
    bound: bool,
    /// Session id → the hash of the identity that created it.
    owners: Mutex<HashMap<String, String>>,
    /// The sessions open here.
    sessions: Arc<LocalSessionManager>,
    /// Sessions roaming between replicas: the hub (owners of sessions created elsewhere,
    /// sessions this replica has not restored yet) and where GET requests leave their grant.
    cluster: Option<(Arc<dyn SessionHub>, PendingGrants)>,
}

impl Owners {
    pub(super) fn new(
        bound: bool,
        sessions: Arc<LocalSessionManager>,
        cluster: Option<(Arc<dyn SessionHub>, PendingGrants)>,
    ) -> Self {
        Self {
            bound,
            owners: Mutex::new(HashMap::new()),
            sessions,
            cluster,
        }
    }

    /// The owner record of `identity`: keyed by the cluster's secret with a hub.
    fn owner_of(&self, identity: &Identity) -> String {
        match &self.cluster {
            Some((hub, _)) => hub.owner_of(identity.as_str()),
            None => hub::owner_hash(identity),
        }
    }

    /// Whether `identity` may use session `id`, when that can be told without asking the
    /// hub: a session the edge never saw created is left to rmcp, and with a hub, `None`
    /// says the hub must be asked.
    fn may_use_now(&self, id: &str, identity: &Identity) -> Option<bool> {
        if !self.bound {
            return Some(true);
        }
        if let Some(owner) = lock(&self.owners).get(id) {
            return Some(*owner == self.owner_of(identity));
        }
        self.cluster.is_none().then_some(true)
    }

    /// Whether `identity` may use session `id`. The owner of a session created on another
    /// replica is looked up in the hub; if the hub cannot answer, the request is refused
    /// rather than risk a stranger's use.
    async fn may_use(&self, id: &str, identity: &Identity) -> bool {
        if let Some(known) = self.may_use_now(id, identity) {
            return known;
        }
        let Some((hub, _)) = &self.cluster else {
            return true;
        };
        match hub.owner(id).await {
            Ok(Some(owner)) => {
                let ok = owner == self.owner_of(identity);
                if ok {
                    lock(&self.owners).insert(id.to_owned(), owner);
                }
                ok
            }
            // No owner recorded: not a session of this cluster (rmcp answers 404).
            Ok(None) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look up a session's owner");
                false
            }
        }
    }

    /// Whether session `id` exists: open here, or with a hub, created on another replica.
    /// rmcp would accept the DELETE of a session that does not exist
    /// ([`http_answers::accepts_unknown_session`]).
    async fn exists(&self, id: &str) -> bool {
        if self.sessions.sessions.read().await.contains_key(id) {
            return true;
        }
        match &self.cluster {
            Some((hub, _)) => hub.load(id).await.is_ok_and(|s| s.is_some()),
            None => false,
        }
    }

    /// A GET (the session's stream) leaves its grant for the replica that restores the
    /// session.
    fn leave_grant(&self, id: &str, req: &Request) {
        if req.method() == Method::GET
            && let Some((_, grants)) = &self.cluster
        {
            let mut grants = lock(grants);
            if grants.len() > 4096 {
                // GETs refused before reaching the session manager leave theirs behind.
                grants.clear();
            }
            grants.insert(id.to_owned(), req.extensions().get::<Grant>().cloned());
        }
    }

    /// `req`, naming session `id`, if its caller may use it; a request rmcp would accept for
    /// a session it does not hold (a DELETE) also needs the session to exist. Refused as rmcp
    /// answers an unknown session.
    async fn admit(self: Arc<Self>, id: String, req: Request) -> Result<Request, Response> {
        let allowed = match req.extensions().get::<Identity>() {
            Some(identity) => self.may_use(&id, identity).await,
            None => false,
        };
        let unchecked_by_rmcp = http_answers::accepts_unknown_session(req.method());
        if !allowed || (unchecked_by_rmcp && !self.exists(&id).await) {
            return Err(http_answers::no_such_session());
        }
        self.leave_grant(&id, &req);
        Ok(req)
    }

    /// Remember that `identity` created session `id` (with a hub, for every replica).
    async fn bind(&self, id: &str, identity: &Identity) -> Result<(), String> {
        let owner = self.owner_of(identity);
        if let Some((hub, _)) = &self.cluster {
            hub.set_owner(id, &owner)
                .await
                .map_err(|e| format!("cannot record the session's owner: {e}"))?;
        }
        let live: Option<HashSet<String>> = if lock(&self.owners).len() > PRUNE_PAST {
            let live = self.sessions.sessions.read().await;
            Some(live.keys().map(|k| k.to_string()).collect())
        } else {
            None
        };
        let mut owners = lock(&self.owners);
        if let Some(live) = live {
            owners.retain(|k, _| live.contains(k));
        }
        owners.insert(id.to_owned(), owner);
        Ok(())
    }

    /// The session an `initialize` created is bound to its creator before the client can
    /// learn its id (the answer has not left yet); if that cannot be recorded, the session is
    /// refused.
    async fn bind_created(self: Arc<Self>, id: String, identity: Identity) -> Result<(), Response> {
        let Err(e) = self.bind(&id, &identity).await else {
            return Ok(());
        };
        tracing::warn!(error = %e, "session refused");
        if let Some((hub, _)) = &self.cluster {
            let _ = hub.delete(&id).await;
        }
        Err(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            codes::INTERNAL_ERROR,
            e,
        ))
    }
}

/// A legacy session (`Mcp-Session-Id`) is used only by the identity that created it; another
/// is told it does not exist.
#[derive(Clone)]
pub(crate) struct SessionOwner(pub(super) Arc<Owners>);

impl<S> Step<S> for SessionOwner
where
    S: Inner + Clone + Send + 'static,
{
    type Future = Gate<S, S::Future>;

    fn call(&self, inner: &mut S, req: Request) -> Self::Future {
        let Some(id) = session_of(req.headers()) else {
            return Gate::pass(inner, req);
        };
        let now = match req.extensions().get::<Identity>() {
            // A DELETE waits on the session manager's lock to learn whether the session
            // exists (rmcp would not tell); it comes once a session.
            Some(identity) if !http_answers::accepts_unknown_session(req.method()) => {
                self.0.may_use_now(id, identity)
            }
            _ => None,
        };
        match now {
            Some(true) => {
                self.0.leave_grant(id, &req);
                Gate::pass(inner, req)
            }
            Some(false) => Gate::refuse(http_answers::no_such_session()),
            None => {
                let check = self.0.clone().admit(id.to_owned(), req);
                Gate::wait(inner, Box::pin(check))
            }
        }
    }
}

/// The records follow the sessions: the session an `initialize` created is bound to its
/// creator, and a session a DELETE ended is forgotten. Only with authentication (without it
/// there are no records).
#[derive(Clone)]
pub(crate) struct OwnerRecords(pub(super) Arc<Owners>);

/// What to record once the endpoint has answered.
pub(crate) enum After {
    /// An `initialize` outside a session, by this identity.
    Bind(Arc<Owners>, Identity),
    /// The DELETE of this session.
    Forget(Arc<Owners>, String),
}

impl<S: Inner> Step<S> for OwnerRecords {
    type Future = Recorded<S::Future>;

    fn call(&self, inner: &mut S, req: Request) -> Self::Future {
        let owners = &self.0;
        let after = if !owners.bound {
            None
        } else if req.method() == Method::DELETE {
            session_of(req.headers()).map(|id| After::Forget(owners.clone(), id.to_owned()))
        } else if kind_of(&req) == Kind::Initialize {
            req.extensions()
                .get::<Identity>()
                .map(|identity| After::Bind(owners.clone(), identity.clone()))
        } else {
            None
        };
        Recorded::Calling {
            call: inner.call(req),
            after,
        }
    }
}

pin_project! {
    /// The endpoint's answer, then what it means for the records.
    #[project = RecordedProj]
    pub(crate) enum Recorded<F> {
        /// The endpoint answering.
        Calling { #[pin] call: F, after: Option<After> },
        /// A created session being bound (with a hub, recorded there): boxed, once a session.
        Binding { #[pin] bind: BoxFuture<'static, Result<(), Response>>, answer: Option<Response> },
    }
}

impl<F> Future for Recorded<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match self.as_mut().project() {
                RecordedProj::Calling { call, after } => {
                    let Ok(resp) = ready!(call.poll(cx));
                    match after.take() {
                        // rmcp accepted the DELETE (its 202, or the 204 it goes out as).
                        Some(After::Forget(owners, id)) if resp.status().is_success() => {
                            lock(&owners.owners).remove(&id);
                        }
                        Some(After::Bind(owners, identity)) => {
                            if let Some(id) = session_of(resp.headers()) {
                                let bind = owners.bind_created(id.to_owned(), identity);
                                self.set(Recorded::Binding {
                                    bind: Box::pin(bind),
                                    answer: Some(resp),
                                });
                                continue;
                            }
                        }
                        _ => {}
                    }
                    return Poll::Ready(Ok(resp));
                }
                RecordedProj::Binding { bind, answer } => {
                    let answer = match ready!(bind.poll(cx)) {
                        Ok(()) => answer.take().expect("Recorded polled after it answered"),
                        Err(refusal) => refusal,
                    };
                    return Poll::Ready(Ok(answer));
                }
            }
        }
    }
}
