//! One upstream GET: the client (rustls, no proxy, no automatic redirects, the guarded
//! resolver), the redirect loop that re-checks every hop, and the body read under the limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::HeaderMap;
use http::header::{IF_MODIFIED_SINCE, IF_NONE_MATCH, LOCATION};
use mcpr_core::{Error, ErrorKind, Limit, Result};

use crate::cache::Validators;
use crate::config::{Header, HttpConfig, HttpKind};
use crate::error;
use crate::health::Reached;
use crate::net::{Guarded, HostResolver, Policy, check_host};

/// What came back.
pub(crate) enum Outcome {
    /// 304: the cached body is still current.
    NotModified { headers: HeaderMap },
    /// 2xx with the whole body, and the URL that answered (after redirects), which relative
    /// links in an HTML body are resolved against.
    Full {
        headers: HeaderMap,
        body: Vec<u8>,
        url: reqwest::Url,
    },
}

/// One request.
pub(crate) struct Request<'a> {
    /// The resource URI the request serves (for messages).
    pub(crate) uri: &'a str,
    pub(crate) url: reqwest::Url,
    pub(crate) headers: &'a [Header],
    /// Make the request conditional on these.
    pub(crate) validators: Option<&'a Validators>,
    /// The most body bytes to read.
    pub(crate) limit: u64,
}

/// The mount's HTTP client and its rules.
pub(crate) struct Fetcher {
    client: reqwest::Client,
    policy: Policy,
    timeout: Duration,
    max_redirects: u32,
    /// web: every hop must stay under these prefixes.
    allow: Option<Vec<String>>,
}

impl Fetcher {
    pub(crate) fn new(
        config: &HttpConfig,
        resolver: Arc<dyn HostResolver>,
        exempt: Vec<std::net::IpAddr>,
    ) -> Result<Self> {
        let policy = Policy {
            allow_private: config.allow_private,
            exempt,
        };
        // rustls needs a process-wide crypto provider; ring is the one the workspace builds.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would resolve and connect on its own, past the guard.
            .no_proxy()
            .dns_resolver(Arc::new(Guarded {
                inner: resolver,
                policy: policy.clone(),
            }))
            .connect_timeout(config.timeout)
            .user_agent(concat!("mcp-resources/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::internal(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            client,
            policy,
            timeout: config.timeout,
            max_redirects: config.max_redirects,
            allow: (config.kind == HttpKind::Web).then(|| config.allow.clone()),
        })
    }

    /// GET `req.url`, following redirects, within the mount's timeout; and whether the
    /// first URL's host answered ([`Reached`]), which tells an outage of that host from a
    /// failure of the request.
    pub(crate) async fn get(&self, req: Request<'_>) -> (Result<Outcome>, Reached) {
        let uri = req.uri;
        let first = req.url.clone();
        // Set once the first host's answer is whole: kept outside the exchange, which the
        // timeout drops.
        let answered = AtomicBool::new(false);
        let result = match tokio::time::timeout(self.timeout, self.exchange(req, &answered)).await {
            Ok(r) => r,
            Err(_) => Err(error::timeout(uri, &first, self.timeout)),
        };
        let reached = match &result {
            Ok(_) => Reached::Answered,
            Err(_) if answered.load(Ordering::Relaxed) => Reached::Answered,
            // Before the first host's answer was whole, only the transport and the timeout
            // fail with these (a status error comes with an answer).
            Err(e) if matches!(e.kind, ErrorKind::Timeout | ErrorKind::Unavailable) => {
                Reached::Unreachable
            }
            // Refused by the address policy or the allow list: nothing was sent.
            Err(_) => Reached::NotAsked,
        };
        (result, reached)
    }

    /// The exchange; `answered` is set once the first host's answer is whole (a status other
    /// than success, or a successful one's body read or found over the limit).
    async fn exchange(&self, req: Request<'_>, answered: &AtomicBool) -> Result<Outcome> {
        let uri = req.uri;
        let origin = req.url.origin();
        let mut url = req.url.clone();
        let mut hops = 0u32;
        let resp = loop {
            self.check_hop(uri, &url, hops)?;
            let mut b = self.client.get(url.clone());
            // Credentials go to the configured origin only, never to where it redirects.
            if url.origin() == origin {
                for h in req.headers {
                    b = b.header(h.name.as_str(), sensitive(&h.value)?);
                }
            }
            if let Some(v) = req.validators {
                if let Some(etag) = &v.etag {
                    b = b.header(IF_NONE_MATCH, etag.as_str());
                }
                if let Some(lm) = &v.last_modified {
                    b = b.header(IF_MODIFIED_SINCE, lm.as_str());
                }
            }
            tracing::debug!(uri, upstream = %error::origin(&url), hop = hops, "GET");
            let resp = b.send().await.map_err(|e| error::transport(uri, &url, e))?;
            let status = resp.status();
            if hops == 0 && !status.is_success() {
                answered.store(true, Ordering::Relaxed);
            }
            if matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308) {
                let next = resp
                    .headers()
                    .get(LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .and_then(|l| url.join(l).ok())
                    .ok_or_else(|| {
                        Error::new(
                            mcpr_core::ErrorKind::Unavailable,
                            format!(
                                "{uri}: the upstream {} answered HTTP {status} without a usable Location",
                                error::origin(&url)
                            ),
                        )
                        .with_uri(uri)
                    })?;
                hops += 1;
                url = next;
                continue;
            }
            break resp;
        };
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_MODIFIED && req.validators.is_some() {
            return Ok(Outcome::NotModified {
                headers: resp.headers().clone(),
            });
        }
        if !status.is_success() {
            return Err(error::status(uri, &url, status));
        }
        let headers = resp.headers().clone();
        let body = read_body(uri, &url, resp, req.limit).await;
        if hops == 0
            && body
                .as_ref()
                .err()
                .is_none_or(|e| e.kind == ErrorKind::TooLarge)
        {
            answered.store(true, Ordering::Relaxed);
        }
        Ok(Outcome::Full {
            headers,
            body: body?,
            url,
        })
    }

    /// Every hop: http(s) only, within the redirect budget, an allowed IP literal, and on
    /// web mounts under an allow prefix.
    fn check_hop(&self, uri: &str, url: &reqwest::Url, hops: u32) -> Result<()> {
        if hops > self.max_redirects {
            return Err(Error::new(
                mcpr_core::ErrorKind::Unavailable,
                format!(
                    "{uri}: more than {} redirects (max_redirects)",
                    self.max_redirects
                ),
            )
            .with_uri(uri));
        }
        if !matches!(url.scheme(), "http" | "https") {
            return Err(error::refused(
                uri,
                format!(
                    "redirected to a {}: URL; only http and https are fetched",
                    url.scheme()
                ),
            ));
        }
        check_host(url, &self.policy).map_err(|r| error::refused(uri, r))?;
        if let Some(allow) = &self.allow
            && !crate::target::allowed(allow, url)
        {
            return Err(error::refused(
                uri,
                format!(
                    "redirected to {}, outside the mount's allow list",
                    error::origin(url)
                ),
            ));
        }
        Ok(())
    }
}

/// A header value marked sensitive (hyper then never prints it).
fn sensitive(v: &str) -> Result<http::HeaderValue> {
    let mut hv = http::HeaderValue::from_str(v)
        .map_err(|_| Error::internal("a configured header value is not valid"))?;
    hv.set_sensitive(true);
    Ok(hv)
}

/// The body, refusing more than `limit` bytes: by `Content-Length` before reading, and while
/// streaming (a chunked body is not read past the limit).
async fn read_body(
    uri: &str,
    url: &reqwest::Url,
    mut resp: reqwest::Response,
    limit: u64,
) -> Result<Vec<u8>> {
    if let Some(len) = resp.content_length()
        && len > limit
    {
        return Err(body_too_large(uri, Some(len), limit));
    }
    let mut body = Vec::with_capacity(resp.content_length().unwrap_or(0).min(1 << 20) as usize);
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| error::transport(uri, url, e))?
    {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(body_too_large(uri, None, limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An upstream body of `uri` over the read limit `limit`, of `size` bytes when that is known
/// (announced, or already held); an unknown size means the body was read up to the limit and
/// no further, which the message says.
pub(crate) fn body_too_large(uri: &str, size: Option<u64>, limit: u64) -> Error {
    let hint = size.is_none().then_some("it was read only up to the limit");
    Error::too_large(uri, "the upstream's body", size, Limit::read(limit), hint)
}
