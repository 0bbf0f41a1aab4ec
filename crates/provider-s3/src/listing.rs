//! One ListObjectsV2 request, made and parsed here rather than through object_store's
//! `list_paginated`: object_store turns every listed key into one of its paths, which fails
//! the whole response for a key with an empty, `.` or `..` segment (`a//b`, `a/./b`) and
//! silently turns a folder marker `reports/` into `reports`. Here every key arrives as the
//! store wrote it, and the rule for keys this mount does not serve (see [`served_key`]) is
//! applied per key, so one odd key never fails a page.
//!
//! The request is signed with the store's own credential provider and sent through
//! object_store's HTTP client (same TLS, proxy and timeout settings), with the same retry
//! budget as object_store's requests; failures go through the one error mapping
//! ([`crate::error::Context::map`]).

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt as _;
use object_store::aws::{AmazonS3, AwsAuthorizer};
use object_store::client::{
    HttpClient, HttpError, HttpErrorKind, HttpRequest, HttpRequestBody, HttpResponseBody,
};
use percent_encoding::percent_decode_str;
use reqwest::Url;
use serde::Deserialize;

use mcpr_core::DenyList;

use crate::error::Context;
use crate::provider::{MAX_RETRIES, RETRY_TIMEOUT};
use crate::read::object_path;
use crate::uri::encode_value;

/// One object in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedObject {
    pub(crate) key: String,
    pub(crate) size: u64,
    /// When the store says (S3 always does).
    pub(crate) last_modified: Option<SystemTime>,
}

/// What one list request returned, with the keys this mount does not serve taken out.
#[derive(Debug, Default)]
pub(crate) struct Listed {
    /// Served objects, in key order. Folder markers (keys ending in `/`) are kept here: what
    /// a caller does with them depends on the listing.
    pub(crate) objects: Vec<ListedObject>,
    /// Common prefixes (delimiter listings), each ending in `/`, in key order.
    pub(crate) prefixes: Vec<String>,
    /// Whether the store has more after this response.
    pub(crate) truncated: bool,
    /// The last key or common prefix the store returned, served or not: where the next
    /// request resumes, so a page of skipped keys still moves the listing on.
    pub(crate) last: Option<String>,
}

/// Whether a key, as the store holds it, can be served: object_store (which every read and
/// `HEAD` goes through) represents it exactly. Not served: an empty key, a leading `/`, an
/// empty segment (`a//b`), a `.` or `..` segment, control characters. A trailing `/` (a
/// folder marker) is judged by the key without it.
pub(crate) fn served_key(key: &str) -> bool {
    let body = key.strip_suffix('/').unwrap_or(key);
    !body.is_empty() && object_path(body).is_some()
}

/// The most of a ListObjectsV2 answer that is read. 1,000 keys of at most 1,024 bytes,
/// URL-encoded (3 characters a byte at worst), with their dates, sizes, ETags and owners come
/// to under 4 MiB; a longer answer is not a listing this mount asked for.
pub const LIST_BODY_MAX: usize = 8 << 20;

/// The most of a failed list request's error document kept for the message.
const ERROR_TEXT_MAX: usize = 4096;

/// Up to `max` bytes of `body`, and whether that was all of it. Reading stops at the first
/// chunk past `max`: a body that goes on is not taken into memory.
async fn read_at_most(body: HttpResponseBody, max: usize) -> Result<(Vec<u8>, bool), HttpError> {
    let mut stream = body.bytes_stream();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if out.len() + chunk.len() > max {
            let room = max - out.len();
            out.extend_from_slice(&chunk[..room]);
            return Ok((out, false));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((out, true))
}

/// The list options of one request.
pub(crate) struct ListOptions<'a> {
    pub(crate) prefix: &'a str,
    pub(crate) start_after: Option<String>,
    pub(crate) max_keys: usize,
    pub(crate) delimiter: bool,
}

/// Everything a list request needs: the store (for its credentials), its HTTP client, and
/// where the bucket is.
pub(crate) struct Lister {
    pub(crate) http: HttpClient,
    /// `{endpoint}/{bucket}` (path-style addressing, as the store is set up).
    pub(crate) bucket_url: Url,
    pub(crate) region: String,
    /// Keys the store listed that the mount does not serve, each time a listing meets one,
    /// for `/metrics`.
    pub(crate) skipped: AtomicU64,
    /// The skipped keys already logged: each is logged once, not at every listing (a watched
    /// listing meets it every interval). Bounded by [`WARNED_MAX`].
    pub(crate) warned: Mutex<HashSet<String>>,
    /// The mount's deny list: denied keys and prefixes are taken out of every listing
    /// (silently: they are hidden on purpose, not odd), and their URIs are not found.
    pub(crate) deny: DenyList,
}

impl Lister {
    /// Whether `key` (an object, or a folder marker or common prefix when it ends in `/`) is
    /// denied.
    pub(crate) fn denied(&self, key: &str) -> bool {
        match key.strip_suffix('/') {
            Some(dir) => self.deny.is_denied(dir, true),
            None => self.deny.is_denied(key, false),
        }
    }
}

/// How many distinct skipped keys are remembered as logged; past that, further ones are
/// logged at debug level only.
pub(crate) const WARNED_MAX: usize = 1000;

/// The `<ListBucketResult>` document, the fields we use.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListBucketResult {
    #[serde(default)]
    contents: Vec<Content>,
    #[serde(default)]
    common_prefixes: Vec<CommonPrefix>,
    #[serde(default)]
    is_truncated: bool,
    #[serde(default)]
    encoding_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Content {
    key: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    last_modified: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CommonPrefix {
    prefix: String,
}

impl Lister {
    /// `{endpoint}/{bucket}`.
    pub(crate) fn bucket_url(endpoint: &str, bucket: &str) -> Option<Url> {
        let mut u = Url::parse(endpoint).ok()?;
        u.path_segments_mut().ok()?.pop_if_empty().push(bucket);
        Some(u)
    }

    /// The request URL: `encoding-type=url` so that keys with characters XML cannot carry
    /// come back intact. Values are written with every byte but the unreserved ones as
    /// `%XX` (a space is `%20`, never `+`), which is also how SigV4 spells them.
    fn url(&self, o: &ListOptions<'_>) -> Url {
        let mut q = format!("list-type=2&encoding-type=url&max-keys={}", o.max_keys);
        if !o.prefix.is_empty() {
            q.push_str(&format!("&prefix={}", encode_value(o.prefix)));
        }
        if let Some(s) = &o.start_after {
            q.push_str(&format!("&start-after={}", encode_value(s)));
        }
        if o.delimiter {
            q.push_str("&delimiter=%2F");
        }
        let mut u = self.bucket_url.clone();
        u.set_query(Some(&q));
        u
    }

    /// One list request (retried as object_store retries: connection errors, timeouts, 5xx
    /// and throttling, backoff from 100 ms doubling to 2 s, within [`RETRY_TIMEOUT`]).
    pub(crate) async fn list(
        &self,
        store: &AmazonS3,
        ctx: &Context,
        o: ListOptions<'_>,
        what: &str,
    ) -> mcpr_core::Result<Listed> {
        let url = self.url(&o);
        let started = Instant::now();
        let mut backoff = Duration::from_millis(100);
        let mut retries = 0;
        let body = loop {
            let failure = match self.send(store, &url).await {
                Ok(Ok(body)) => break body,
                Ok(Err(f)) | Err(f) => f,
            };
            let retryable = match &failure {
                Failure::Transport(e) => {
                    !matches!(e.kind(), HttpErrorKind::Decode | HttpErrorKind::Unknown)
                }
                Failure::Status(s, _) => *s >= 500 || *s == 429,
                Failure::Credential(_) => false,
            };
            if !retryable || retries >= MAX_RETRIES || started.elapsed() + backoff > RETRY_TIMEOUT {
                return Err(ctx.map(failure.into_store_error(), what, None));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
            retries += 1;
        };
        let doc: ListBucketResult = quick_xml::de::from_str(&body).map_err(|e| {
            ctx.map(
                object_store::Error::Generic {
                    store: "S3",
                    source: format!("the list response is not a ListBucketResult: {e}").into(),
                },
                what,
                None,
            )
        })?;
        Ok(self.sorted(doc))
    }

    /// Signs and sends one request: the body of a 2xx answer, or what went wrong.
    async fn send(&self, store: &AmazonS3, url: &Url) -> Result<Result<String, Failure>, Failure> {
        let cred = store
            .credentials()
            .get_credential()
            .await
            .map_err(Failure::Credential)?;
        let mut req = HttpRequest::new(HttpRequestBody::empty());
        *req.uri_mut() = url
            .as_str()
            .parse()
            .map_err(|e| Failure::Transport(HttpError::new(HttpErrorKind::Unknown, e)))?;
        AwsAuthorizer::new(&cred, "s3", &self.region)
            .try_authorize(&mut req, None)
            .map_err(Failure::Credential)?;
        let res = self.http.execute(req).await.map_err(Failure::Transport)?;
        let status = res.status();
        if status.is_success() {
            let (bytes, whole) = read_at_most(res.into_body(), LIST_BODY_MAX)
                .await
                .map_err(Failure::Transport)?;
            if !whole {
                return Err(Failure::Transport(HttpError::new(
                    HttpErrorKind::Decode,
                    std::io::Error::other(format!(
                        "the list response is longer than {} MiB (1,000 keys take at most about 4 MiB); the rest was not read",
                        LIST_BODY_MAX >> 20
                    )),
                )));
            }
            Ok(Ok(String::from_utf8_lossy(&bytes).into_owned()))
        } else {
            // The start of an error document is all a message needs.
            let (bytes, whole) = read_at_most(res.into_body(), ERROR_TEXT_MAX)
                .await
                .map_err(Failure::Transport)?;
            let more = if whole { "" } else { " …" };
            let text = String::from_utf8_lossy(&bytes);
            Ok(Err(Failure::Status(
                status.as_u16(),
                format!("{status}: {text}{more}"),
            )))
        }
    }

    /// The document's keys decoded, the keys not served taken out (and counted).
    fn sorted(&self, doc: ListBucketResult) -> Listed {
        let url = doc.encoding_type.as_deref() == Some("url");
        let decode = |s: String| if url { url_decode(&s) } else { s };
        let mut out = Listed {
            truncated: doc.is_truncated,
            ..Default::default()
        };
        for c in doc.contents {
            let key = decode(c.key);
            if out.last.as_ref().is_none_or(|l| *l < key) {
                out.last = Some(key.clone());
            }
            if !served_key(&key) {
                self.skip(&key);
                continue;
            }
            if self.denied(&key) {
                continue;
            }
            out.objects.push(ListedObject {
                key,
                size: c.size,
                last_modified: c
                    .last_modified
                    .and_then(|t| humantime::parse_rfc3339_weak(&t).ok()),
            });
        }
        for p in doc.common_prefixes {
            let p = decode(p.prefix);
            if out.last.as_ref().is_none_or(|l| *l < p) {
                out.last = Some(p.clone());
            }
            if !served_key(&p) {
                self.skip(&p);
                continue;
            }
            if self.denied(&p) {
                continue;
            }
            out.prefixes.push(p);
        }
        out.objects.sort_by(|a, b| a.key.cmp(&b.key));
        out.prefixes.sort();
        out
    }

    fn skip(&self, key: &str) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
        let first = {
            let mut w = mcpr_core::sync::lock(&self.warned);
            w.len() < WARNED_MAX && w.insert(key.to_owned())
        };
        // The key itself is the bucket's data, not a secret; debug-escaped so that control
        // characters cannot forge log lines.
        if first {
            tracing::warn!(
                key = ?key,
                "s3 key not served: it has an empty, `.` or `..` segment, a leading `/` or control characters (see docs.md, URIs)"
            );
        } else {
            tracing::debug!(key = ?key, "s3 key not served (skipped again)");
        }
    }
}

/// What a list request met instead of a listing.
enum Failure {
    Credential(object_store::Error),
    Transport(HttpError),
    /// The status and `"{status}: {body}"`.
    Status(u16, String),
}

impl Failure {
    /// As object_store reports the same failure, so that one mapping serves both.
    fn into_store_error(self) -> object_store::Error {
        match self {
            Failure::Credential(e) => e,
            Failure::Transport(e) => object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            },
            Failure::Status(_, text) => object_store::Error::Generic {
                store: "S3",
                source: format!(
                    "Error performing list request: Server returned non-2xx status code: {text}"
                )
                .into(),
            },
        }
    }
}

/// S3's `encoding-type=url`: form encoding (a space may be `+`).
fn url_decode(s: &str) -> String {
    let s = s.replace('+', " ");
    percent_decode_str(&s).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lister of bucket `b` that is never asked to send.
    fn lister(endpoint: &str) -> Lister {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Lister {
            http: HttpClient::new(reqwest::Client::new()),
            bucket_url: Lister::bucket_url(endpoint, "b").unwrap(),
            region: "us-east-1".into(),
            skipped: AtomicU64::new(0),
            warned: Mutex::default(),
            deny: DenyList::new(&[]).unwrap(),
        }
    }

    #[test]
    fn served_keys() {
        for k in ["a", "a/b.txt", "reports/", "a b/ü #?%+", "x/y/"] {
            assert!(served_key(k), "{k}");
        }
        for k in [
            "", "/", "/x", "a//b", "a/./b", "a/../b", "./a", "a/..", "a\u{1}b", "a//",
        ] {
            assert!(!served_key(k), "{k:?}");
        }
    }

    #[test]
    fn parses_interleaved_contents_and_prefixes() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix></Prefix>
<KeyCount>4</KeyCount><MaxKeys>5</MaxKeys><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>
<Contents><Key>a%2F%2Fb</Key><LastModified>2026-11-23T14:00:00.000Z</LastModified><ETag>"x"</ETag><Size>3</Size></Contents>
<CommonPrefixes><Prefix>d%C3%BC/</Prefix></CommonPrefixes>
<Contents><Key>Q1+results%2Bfinal</Key><LastModified>2026-11-23T14:00:01Z</LastModified><Size>7</Size></Contents>
<Contents><Key>reports/</Key><Size>0</Size></Contents>
</ListBucketResult>"#;
        let l = lister("http://127.0.0.1:1");
        let got = l.sorted(quick_xml::de::from_str(xml).unwrap());
        let keys: Vec<&str> = got.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["Q1 results+final", "reports/"]);
        assert_eq!(got.objects[0].size, 7);
        assert!(got.objects[0].last_modified.is_some());
        assert_eq!(got.prefixes, ["dü/"]);
        assert!(got.truncated);
        assert_eq!(got.last.as_deref(), Some("reports/"));
        assert_eq!(l.skipped.load(Ordering::Relaxed), 1);
        // Met again (a watched listing's next poll): counted again, logged once.
        l.sorted(quick_xml::de::from_str(xml).unwrap());
        assert_eq!(l.skipped.load(Ordering::Relaxed), 2);
        assert_eq!(l.warned.lock().unwrap().len(), 1);
    }

    #[test]
    fn request_url() {
        let mut l = lister("http://127.0.0.1:9000/");
        l.bucket_url = Lister::bucket_url("http://127.0.0.1:9000/", "my-bucket").unwrap();
        let u = l.url(&ListOptions {
            prefix: "a b/",
            start_after: Some("a b/c+d".into()),
            max_keys: 7,
            delimiter: true,
        });
        assert_eq!(
            u.as_str(),
            "http://127.0.0.1:9000/my-bucket?list-type=2&encoding-type=url&max-keys=7&prefix=a%20b%2F&start-after=a%20b%2Fc%2Bd&delimiter=%2F"
        );
    }
}
