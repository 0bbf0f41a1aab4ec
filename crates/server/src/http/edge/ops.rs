//! The edge of the operational endpoints (`/healthz`, `/readyz`, `/metrics`, the OAuth
//! metadata): rmcp's Host and Origin check of the MCP endpoint, applied as it is
//! ([`OpsGate`], the rule and its answers in `wire/`); and [`authority_as_host`], in front of
//! everything, which gives an HTTP/2 request without `Host` its `:authority` as `Host` for
//! every Host check.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::Request;
use axum::response::Response;
use futures::future::{Either, Ready, ready};
use http::HeaderValue;

use super::step::{Inner, Step, StepLayer};

use crate::wire::http_answers;
use crate::wire::http_checks::{self, AllowedHosts};

/// Which requests to the operational endpoints are refused: those the MCP endpoint's Host
/// and Origin check refuses (`http_checks::host_and_origin`, rmcp's rule), so that a web
/// page (DNS rebinding, cross-site requests) learns nothing here, with one widening: a
/// `Host` that is an IP address passes too ([`AllowedHosts::with_ip_literals`]).
#[derive(Clone)]
pub(crate) struct OpsGate(Arc<Allowed>);

struct Allowed {
    hosts: AllowedHosts,
    origins: Vec<String>,
}

impl OpsGate {
    /// The gate as a layer, for the router of the operational endpoints: `hosts` as the MCP
    /// endpoint allows them, IP addresses besides.
    pub(crate) fn layer(hosts: AllowedHosts, origins: Vec<String>) -> StepLayer<Self> {
        StepLayer(Self(Arc::new(Allowed {
            hosts: hosts.with_ip_literals(),
            origins,
        })))
    }
}

impl<S: Inner> Step<S> for OpsGate {
    type Future = Either<Ready<Result<Response, Infallible>>, S::Future>;

    fn call(&self, inner: &mut S, req: Request) -> Self::Future {
        let allowed = &self.0;
        match http_checks::host_and_origin(
            req.uri(),
            req.headers(),
            &allowed.hosts,
            &allowed.origins,
        ) {
            Ok(()) => Either::Right(inner.call(req)),
            Err(why) => Either::Left(ready(Ok(http_answers::host_or_origin(why)))),
        }
    }
}

/// An HTTP/2 (or HTTP/3) request names its host in the `:authority` pseudo-header, which
/// hyper puts in the request URI; `Host` is then optional (RFC 9113 §8.3.1). Every Host check
/// (rmcp's, the direct read path's, [`OpsGate`]) reads the `Host` header, so a request
/// without one gets its authority as `Host` here, in front of them all: the same checks then
/// apply to both protocol versions. A `Host` that is present is left as it is. Only HTTP/2
/// and later: an HTTP/1.1 request in absolute form (`GET http://h/ HTTP/1.1`) also has an
/// authority in its URI, but HTTP/1.1 requires `Host`, so one without it still fails.
///
/// A plain function of the request (a `MapRequest` layer): it runs on every request, and
/// needs neither a boxed future nor a handle on the next service.
pub fn authority_as_host(mut req: Request) -> Request {
    if req.version() >= http::Version::HTTP_2
        && !req.headers().contains_key(http::header::HOST)
        && let Some(authority) = req.uri().authority()
    {
        // `:authority` may not carry userinfo (RFC 9113 §8.3.1); if it does, it is not a host.
        let host = authority.as_str().rsplit('@').next().unwrap_or_default();
        if let Ok(v) = HeaderValue::from_str(host) {
            req.headers_mut().insert(http::header::HOST, v);
        }
    }
    req
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt as _;

    /// The gate in front of a real `/healthz`: a name outside the list and a foreign Origin
    /// get rmcp's 403s, an unreadable Host its 400, an IP literal and an allowed name pass.
    #[tokio::test]
    async fn the_ops_gate_refuses_what_rmcp_refuses() {
        let app = axum::Router::new()
            .route("/healthz", axum::routing::get(|| async { "ok\n" }))
            .layer(OpsGate::layer(
                AllowedHosts::new(&["localhost".to_owned()]),
                vec!["http://localhost:*".to_owned()],
            ));
        let get = |host: &str, origin: Option<&str>| {
            let mut b = Request::get("/healthz").header(http::header::HOST, host);
            if let Some(o) = origin {
                b = b.header(http::header::ORIGIN, o);
            }
            b.body(axum::body::Body::empty()).expect("request")
        };
        let status = |r: Response| r.status().as_u16();
        let ok = app.clone().oneshot(get("localhost:8080", None)).await;
        assert_eq!(status(ok.expect("infallible")), 200);
        let ip = app.clone().oneshot(get("10.0.0.7:8080", None)).await;
        assert_eq!(status(ip.expect("infallible")), 200);
        let named = app.clone().oneshot(get("evil.example", None)).await;
        assert_eq!(status(named.expect("infallible")), 403);
        let cross = app
            .clone()
            .oneshot(get("localhost", Some("https://evil.example")))
            .await;
        assert_eq!(status(cross.expect("infallible")), 403);
        let local = app
            .clone()
            .oneshot(get("localhost", Some("http://localhost:3000")))
            .await;
        assert_eq!(status(local.expect("infallible")), 200);
        let garbled = app.oneshot(get("bad host", None)).await;
        assert_eq!(status(garbled.expect("infallible")), 400);
    }
}
