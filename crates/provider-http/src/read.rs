//! `resources/read` through the mount's cache: a fresh entry is served as is, a stale one with
//! validators is revalidated (304 serves the cached body), anything else is fetched; then
//! the body becomes text (JSON and other text types), Markdown (HTML on web mounts, through
//! the bounded [`crate::html`] conversion) or a blob.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use http::header::CONTENT_TYPE;
use mcpr_core::{CacheHints, CacheScope, ContentsBody, Error, Result};

use crate::cache::{Body, Entry, Policy, Validators};
use crate::config::{HtmlMode, HttpKind};
use crate::fetch::{Outcome, Request};
use crate::provider::Inner;

/// Whether a fresh cache entry may answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A read: a fresh entry answers without asking the upstream.
    Read,
    /// A change check: always ask the upstream (conditionally when it can).
    Check,
}

/// What a read serves.
pub(crate) struct Served {
    pub(crate) body: Arc<Body>,
    pub(crate) etag: Option<String>,
    pub(crate) hints: CacheHints,
}

/// Serve `uri`, fetching at most `limit` bytes of body.
pub(crate) async fn serve(inner: &Inner, uri: &str, limit: u64, mode: Mode) -> Result<Served> {
    let target = inner.target(uri)?;
    let endpoint = target.endpoint.map(|i| &inner.endpoints[i].endpoint);
    let credentials = endpoint.is_some_and(|e| e.has_credentials());
    let fresh = |e: &Option<Entry>| e.as_ref().is_some_and(|e| e.remaining() > Duration::ZERO);
    let mut cached = inner.cache.get(uri);
    // Held until this fetch is stored, so readers of the same URI wait for it.
    let _lead = if mode == Mode::Read && !fresh(&cached) {
        let lead = inner.flights.join(uri).await;
        if lead.is_none() {
            cached = inner.cache.get(uri);
        }
        lead
    } else {
        None
    };
    if mode == Mode::Read
        && let Some(e) = cached.as_ref().filter(|_| fresh(&cached))
    {
        inner.stats.hit();
        return served(uri, e, limit);
    }
    let validators = cached.as_ref().map(|e| &e.validators).filter(|v| v.any());
    // What became of the request tells whether its host is out (`crate::health`), also
    // when the caller gives up on it first.
    let attempt = inner.hosts.attempt(uri, &target.url);
    let (outcome, reached) = inner
        .fetcher
        .get(Request {
            uri,
            url: target.url,
            headers: endpoint.map_or(&[], |e| e.headers.as_slice()),
            validators,
            limit,
        })
        .await;
    attempt.finish(reached, outcome.as_ref().err());
    let outcome = outcome?;
    let default_ttl = inner.config.default_ttl;
    match outcome {
        Outcome::NotModified { headers } => {
            inner.stats.revalidated();
            let Some(old) = cached else {
                return Err(Error::internal(format!(
                    "{uri}: the upstream answered 304 to a request that was not conditional"
                )));
            };
            let policy = Policy::of(&headers);
            let mut validators = Validators::of(&headers);
            if !validators.any() {
                validators = old.validators.clone();
            }
            let entry = Entry {
                body: old.body.clone(),
                validators,
                private: old.private || policy.private || credentials,
                fresh_until: Instant::now() + policy.freshness(default_ttl),
            };
            keep(inner, uri, &policy, &entry);
            served(uri, &entry, limit)
        }
        Outcome::Full { headers, body, url } => {
            inner.stats.miss();
            let policy = Policy::of(&headers);
            let mime_override = endpoint.and_then(|e| e.mime_type.clone());
            let markdown =
                inner.config.kind == HttpKind::Web && inner.config.html == HtmlMode::Markdown;
            let convert = markdown.then_some(Convert {
                inner,
                uri,
                url,
                limit,
            });
            let body = build_body(&headers, body, mime_override, convert).await?;
            let entry = Entry {
                body: Arc::new(body),
                validators: Validators::of(&headers),
                private: policy.private || credentials,
                fresh_until: Instant::now() + policy.freshness(default_ttl),
            };
            keep(inner, uri, &policy, &entry);
            served(uri, &entry, limit)
        }
    }
}

/// Keep the entry unless the upstream said `no-store`.
fn keep(inner: &Inner, uri: &str, policy: &Policy, entry: &Entry) {
    if policy.no_store {
        inner.cache.invalidate(uri);
    } else {
        inner.cache.insert(uri.to_owned(), entry.clone());
    }
}

fn served(uri: &str, e: &Entry, limit: u64) -> Result<Served> {
    let len = e.body.len();
    if len > limit {
        return Err(crate::fetch::body_too_large(uri, Some(len), limit));
    }
    Ok(Served {
        body: e.body.clone(),
        etag: e.validators.etag.clone(),
        hints: CacheHints {
            ttl_ms: e.remaining().as_millis() as u64,
            scope: if e.private {
                CacheScope::Private
            } else {
                CacheScope::Public
            },
        },
    })
}

/// The MIME type without parameters, lower case.
fn essence(v: &str) -> String {
    v.split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Types served as text when their bytes are UTF-8.
fn is_text(mime: &str) -> bool {
    mime.starts_with("text/")
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
        || mime.ends_with("+yaml")
        || matches!(
            mime,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/ecmascript"
                | "application/x-ndjson"
                | "application/yaml"
                | "application/x-yaml"
                | "application/toml"
                | "application/graphql"
                | "application/sql"
                | "image/svg+xml"
        )
}

/// What an HTML body is converted with, on a web mount that serves Markdown.
struct Convert<'a> {
    inner: &'a Inner,
    uri: &'a str,
    /// The URL that answered, after redirects: the base of relative links.
    url: reqwest::Url,
    /// The read limit, which the Markdown is held to as well.
    limit: u64,
}

/// Text, Markdown or bytes, with the MIME type served.
async fn build_body(
    headers: &HeaderMap,
    bytes: Vec<u8>,
    mime_override: Option<String>,
    convert: Option<Convert<'_>>,
) -> Result<Body> {
    let upstream = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(essence);
    let mime = mime_override.or(upstream);
    let is_html = matches!(
        mime.as_deref(),
        Some("text/html") | Some("application/xhtml+xml")
    );
    if is_html && let Some(c) = convert {
        let md = c
            .inner
            .converter
            .markdown(c.uri, bytes, c.url, c.limit)
            .await?;
        return Ok(Body {
            mime_type: Some("text/markdown".into()),
            content: ContentsBody::Text(md),
        });
    }
    let text_ok = mime.as_deref().is_none_or(is_text);
    let content = if text_ok {
        match String::from_utf8(bytes) {
            Ok(t) => ContentsBody::Text(t),
            Err(e) => ContentsBody::Blob(e.into_bytes()),
        }
    } else {
        ContentsBody::Blob(bytes)
    };
    Ok(Body {
        mime_type: mime,
        content,
    })
}
