//! Who asks, on the headers alone: the [`Grant`] and [`Identity`] of a valid token (both put
//! in the request's extensions, where the handler and the layers below read them), or the
//! client's address as its identity without authentication. A client that cannot
//! authenticate is refused here, before it holds a permit or makes the server wait for its
//! body.

use std::sync::Arc;

use axum::extract::Request;

use super::gate::Gate;
use super::step::{Inner, Step};
use super::{no_peer, peer};
use crate::grant::{Grant, Identity};
use crate::http::auth::{Auth, OnHeaders};

/// Authenticates every request; `None`: no authentication, the address is the identity.
#[derive(Clone)]
pub(crate) struct Authenticate(pub(super) Option<Arc<Auth>>);

impl<S> Step<S> for Authenticate
where
    S: Inner + Clone + Send + 'static,
{
    type Future = Gate<S, S::Future>;

    fn call(&self, inner: &mut S, mut req: Request) -> Self::Future {
        let Some(auth) = &self.0 else {
            let Some(peer) = peer(&req) else {
                return Gate::refuse(no_peer());
            };
            req.extensions_mut().insert(Identity::address(peer.ip()));
            return Gate::pass(inner, req);
        };
        let verdict = match auth.on_headers(req.headers()) {
            OnHeaders::Known(verdict) => verdict,
            // Only a JWT waits (its keys may have to be fetched): its check is boxed, on
            // these requests alone.
            OnHeaders::Jwt(token) => {
                let token = token.to_owned();
                let auth = auth.clone();
                return Gate::wait(
                    inner,
                    Box::pin(async move {
                        let found = auth.validate_jwt(&token).await?;
                        Ok(with_caller(req, found))
                    }),
                );
            }
        };
        Gate::decide(inner, verdict.map(|found| with_caller(req, found)))
    }
}

/// `req` with the caller's grant and identity in its extensions.
fn with_caller(mut req: Request, (grant, identity): (Grant, Identity)) -> Request {
    req.extensions_mut().insert(grant);
    req.extensions_mut().insert(identity);
    req
}
