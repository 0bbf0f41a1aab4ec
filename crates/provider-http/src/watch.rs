//! Change notifications: every subscribed upstream URL is re-fetched every `poll_interval_ms`
//! (with jitter) through core's [`Poller`], conditionally when the upstream gave validators,
//! and the subscribers of every URI that fetches it are told when the ETag or the body's hash
//! changed. One poller per mount, one check per upstream URL (and api endpoint) however many
//! URIs and subscribers (URIs that differ only in spelling or in a query value the URL does
//! not use fetch the same thing), stopped with the last; an upstream that fails is retried
//! with backoff and notifies nobody. The mount's checks are capped at
//! `max_poll_requests_per_second` (core's rate limit: checks over it wait their turn and are
//! counted in `mcp_poll_throttled_total`). What a watched URI's poll last saw is its change
//! token ([`Watches::token`]), so a token costs no request.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use mcpr_core::poll::{PollConfig, PollKey, PollSource, Poller, Watched, token_digest};
use mcpr_core::{ChangeSink, Counter, Error, ErrorKind, ResourceUri, Result, WatchGuard};

use crate::provider::Inner;
use crate::read::{Mode, serve};

/// What a check of one URI saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fingerprint {
    /// A body: its ETag (when the upstream sent one) and the hash of what is served.
    Body {
        etag: Option<String>,
        hash: [u8; 32],
    },
    /// 404 or 410.
    Gone,
    /// A lasting refusal (the body grew past the limit, a redirect left the allow list).
    Refused(ErrorKind, String),
}

/// The watched URIs of one mount.
pub(crate) struct Watches {
    /// The poller holds the source weakly; this keeps it as long as the mount lives.
    source: Arc<HttpSource>,
    poller: Poller<HttpSource>,
}

struct HttpSource {
    inner: Weak<Inner>,
}

impl Watches {
    pub(crate) fn new(label: &str, inner: Weak<Inner>, config: &crate::HttpConfig) -> Self {
        let interval = config.poll_interval;
        let source = Arc::new(HttpSource { inner });
        let poller = Poller::new(
            label.to_owned(),
            Arc::downgrade(&source),
            PollConfig::every(interval)
                .with_jitter(0.2)
                .with_retry(interval, interval.saturating_mul(16))
                .with_max_checks_per_second(config.max_poll_requests_per_second),
        );
        Self { source, poller }
    }

    /// Watch `uri` for `sink`; the first check is made now, so a change right after the
    /// subscription is seen by the next one. A URI whose upstream URL is already polled joins
    /// that poll without a request.
    pub(crate) async fn add(&self, uri: &ResourceUri, sink: ChangeSink) -> WatchGuard {
        let key = Watched::Resource(uri.clone());
        if let Some(guard) = self.poller.join(&key, &sink) {
            return guard;
        }
        let first = self.source.check(&key, None).await.ok();
        self.poller.watch(key, sink, first)
    }

    /// The change token of `uri` from its poll: a digest of what the last check of its
    /// upstream URL saw (the ETag when the upstream sent one, and always the hash of the
    /// body served, which is what a check compares: a `Last-Modified` that moves over the
    /// same body is no change), `gone` for a 404 or 410, a digest of a lasting refusal. No
    /// request: `None` while nobody subscribes to a URI of that URL, or while its checks
    /// fail.
    pub(crate) fn token(&self, uri: &ResourceUri) -> Option<String> {
        Some(
            match self.poller.last_seen(&Watched::Resource(uri.clone()))? {
                Fingerprint::Body { etag, hash } => token_digest(&[
                    b"http body",
                    etag.as_deref().unwrap_or_default().as_bytes(),
                    &[u8::from(etag.is_some())],
                    &hash,
                ]),
                Fingerprint::Gone => "gone".to_owned(),
                Fingerprint::Refused(kind, message) => token_digest(&[
                    b"http refused",
                    format!("{kind:?}").as_bytes(),
                    message.as_bytes(),
                ]),
            },
        )
    }

    /// The checks the rate limit deferred, for `/metrics`.
    pub(crate) fn throttled(&self) -> Counter {
        self.poller.throttled_counter()
    }

    /// Whether the poller's task runs (it must stop with the last watch).
    pub(crate) fn running(&self) -> bool {
        self.poller.is_running()
    }
}

#[async_trait]
impl PollSource for HttpSource {
    type Fingerprint = Fingerprint;

    /// The upstream URL with the endpoint that fetches it (its headers and MIME override are
    /// part of what is served); a web mount's URL has no fragment.
    fn poll_key(&self, key: &Watched) -> PollKey {
        if let (Watched::Resource(uri), Some(inner)) = (key, self.inner.upgrade())
            && let Ok(t) = inner.target(uri.as_str())
        {
            return PollKey::Object(match t.endpoint {
                Some(i) => format!("{i} {}", t.url),
                None => t.url.to_string(),
            });
        }
        PollKey::of(key)
    }

    async fn check(&self, key: &Watched, _last: Option<&Fingerprint>) -> Result<Fingerprint> {
        let inner = self
            .inner
            .upgrade()
            .ok_or_else(|| Error::internal("the http mount is gone"))?;
        let Watched::Resource(uri) = key else {
            return Err(Error::unsupported("http mounts do not report list changes"));
        };
        let limit = inner.poll_limit();
        match serve(&inner, uri.as_str(), limit, Mode::Check).await {
            Ok(s) => Ok(Fingerprint::Body {
                etag: s.etag,
                hash: s.body.hash(),
            }),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(Fingerprint::Gone),
            Err(e) if matches!(e.kind, ErrorKind::TooLarge | ErrorKind::InvalidParams) => {
                // The message names the URI this check went through, which is whichever of
                // the URIs sharing the poll key comes first and changes as they come and go:
                // without it, the same refusal compares equal whichever URI asked.
                Ok(Fingerprint::Refused(
                    e.kind,
                    e.message.replace(uri.as_str(), ""),
                ))
            }
            Err(e) => {
                tracing::debug!(uri = uri.as_str(), error = %e, "poll failed; retrying later");
                Err(e)
            }
        }
    }
}
