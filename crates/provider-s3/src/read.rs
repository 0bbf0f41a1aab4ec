//! Reading objects: whole objects as text or blob, and windows of big ones as ranged GETs.
//!
//! A whole read is one GET: its response headers give the size, which is checked against
//! `max_read_bytes` before any of the body is taken (the body is then dropped unread), and
//! the body is counted again while it streams in and never taken past the size the headers
//! announced, so an object that grew, or a store that sends more than it said, is refused.
//! A window (`offset`/`length`, `head`, `tail`: core's [`mcpr_core::window`]) is a HEAD for
//! the size, then ranged GETs pinned to the HEAD's ETag (`If-Match`), so the bytes all come
//! from one version of the object; each ranged body is read up to the length asked for and
//! no further: a store that answers a 10-byte range with more is an error, not a bigger read.

use futures::StreamExt as _;
use mcpr_core::window::{READ_IN_WINDOWS, TailScan, TailStep, trim_to_utf8, window_meta};
use mcpr_core::{
    Contents, ContentsBody, Error, ErrorKind, Limit, ReadLimits, ResourceUri, Result, Window,
};
use object_store::path::Path;
use object_store::{Attribute, GetOptions, GetRange, GetResult, ObjectMeta, ObjectStore as _};

use crate::provider::Inner;

/// The path object_store uses for `key`; `None` for keys it cannot represent (empty, `.` or
/// `..` segments, control characters), which are then not found.
pub(crate) fn object_path(key: &str) -> Option<Path> {
    let p = Path::parse(key).ok()?;
    // `Path::parse` drops a trailing `/`; a key that changed is not the key asked for.
    (p.as_ref() == key).then_some(p)
}

/// Read the object `key` that `uri` names.
pub(crate) async fn read_object(
    inner: &Inner,
    uri: &ResourceUri,
    key: &str,
    limits: &ReadLimits,
) -> Result<Vec<Contents>> {
    let uri_s = uri.as_str();
    let window = Window::parse_with(
        uri,
        "s3 object URIs accept offset, length, head and tail (prefix listings ending in `/`: after)",
        |k, _| {
            if k == "after" {
                Err(Error::invalid_params(
                    "`after` applies to prefix listings (URIs ending in `/`) only",
                ))
            } else {
                Ok(false)
            }
        },
    )?;
    let path = object_path(key).ok_or_else(|| Error::not_found(uri_s))?;
    let what = format!("reading {uri_s}");
    let max = limits.max_bytes;
    if window.is_whole() {
        let res = inner
            .store
            .get_opts(&path, GetOptions::default())
            .await
            .map_err(|e| inner.ctx.map(e, &what, Some(uri_s)))?;
        let size = res.meta.size;
        if size > max {
            return Err(Error::too_large(
                uri_s,
                "the object",
                Some(size),
                Limit::read(max),
                Some(READ_IN_WINDOWS),
            ));
        }
        let ctype = content_type(&res);
        // `size` is what the headers announced (at most `max` here): the body is not read
        // past it, so a store that lies about the length cannot make the read any bigger.
        let bytes = collect(inner, res, size, &what).await?;
        let bytes = exact(inner, bytes, size, &what, "its headers announced")?;
        return Ok(vec![make_contents(
            uri_s,
            key,
            bytes,
            ctype.as_deref(),
            None,
        )]);
    }
    let head = inner
        .store
        .get_opts(
            &path,
            GetOptions {
                head: true,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| inner.ctx.map(e, &what, Some(uri_s)))?;
    let meta = head.meta.clone();
    let ctype = content_type(&head);
    let size = meta.size;
    let range = window.byte_range(size);
    let (from, bytes) = if let Some(n) = window.head {
        let bytes = head_lines(inner, &path, &meta, range, n, max, &what)
            .await?
            .ok_or_else(|| {
                Error::too_large(
                    uri_s,
                    "the requested head window",
                    None,
                    Limit::read(max),
                    Some("ask for less"),
                )
            })?;
        (range_start(&window, size), bytes)
    } else if let Some(n) = window.tail {
        let mut scan = TailScan::new(range.clone(), n, max);
        let from = loop {
            match scan.next_block() {
                TailStep::Read(r) => {
                    let b = get_range(inner, &path, &meta, r, &what).await?;
                    scan.feed(&b);
                }
                TailStep::Done(Some(from)) => break from,
                TailStep::Done(None) => {
                    return Err(Error::too_large(
                        uri_s,
                        "the requested tail window",
                        None,
                        Limit::read(max),
                        Some("ask for less"),
                    ));
                }
            }
        };
        (
            from,
            get_range(inner, &path, &meta, from..range.end, &what).await?,
        )
    } else {
        if range.end - range.start > max {
            return Err(Error::too_large(
                uri_s,
                "the requested length window",
                None,
                Limit::read(max),
                Some("ask for less"),
            ));
        }
        (
            range.start,
            get_range(inner, &path, &meta, range, &what).await?,
        )
    };
    let (from, bytes) = trim_to_utf8(from, bytes);
    let wmeta = window_meta(from, bytes.len() as u64, size);
    Ok(vec![make_contents(
        uri_s,
        key,
        bytes,
        ctype.as_deref(),
        Some(wmeta),
    )])
}

fn range_start(w: &Window, size: u64) -> u64 {
    w.byte_range(size).start
}

/// The stored Content-Type, when there is one.
fn content_type(res: &GetResult) -> Option<String> {
    res.attributes
        .get(&Attribute::ContentType)
        .map(|v| v.as_ref().to_owned())
}

/// The body of `res`, or `None` when it is more than `max` bytes (the rest is not taken:
/// the stream is dropped at the first chunk past `max`).
async fn collect(inner: &Inner, res: GetResult, max: u64, what: &str) -> Result<Option<Vec<u8>>> {
    let mut stream = res.into_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| inner.ctx.map(e, what, None))?;
        if (buf.len() + chunk.len()) as u64 > max {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Some(buf))
}

/// A ranged GET of the version `meta` describes. An empty range asks nothing of the store.
async fn get_range(
    inner: &Inner,
    path: &Path,
    meta: &ObjectMeta,
    range: std::ops::Range<u64>,
    what: &str,
) -> Result<Vec<u8>> {
    if range.start >= range.end {
        return Ok(Vec::new());
    }
    let want = range.end - range.start;
    let res = inner
        .store
        .get_opts(path, pinned(meta, GetRange::Bounded(range)))
        .await
        .map_err(|e| changed_or(inner, e, what))?;
    let bytes = collect(inner, res, want, what).await?;
    exact(inner, bytes, want, what, "asked for")
}

/// `bytes` when it is exactly `want` bytes long; otherwise (`None`: more than `want`) the
/// error saying the store sent another length than it should have. Neither a longer body
/// nor a shorter one is served: one is a lie, the other a partial answer.
fn exact(
    inner: &Inner,
    bytes: Option<Vec<u8>>,
    want: u64,
    what: &str,
    why: &str,
) -> Result<Vec<u8>> {
    match bytes {
        Some(b) if b.len() as u64 == want => Ok(b),
        Some(b) => Err(inner
            .ctx
            .wrong_length(what, &format!("{} bytes where {want} were {why}", b.len()))),
        None => Err(inner.ctx.wrong_length(
            what,
            &format!("more than the {want} bytes {why}; the rest was not read"),
        )),
    }
}

/// GET options for `range` of exactly the version `meta` describes.
fn pinned(meta: &ObjectMeta, range: GetRange) -> GetOptions {
    GetOptions {
        range: Some(range),
        if_match: meta.e_tag.clone(),
        ..Default::default()
    }
}

/// An object replaced between the HEAD and a ranged GET is a clear, temporary error.
fn changed_or(inner: &Inner, e: object_store::Error, what: &str) -> Error {
    if matches!(e, object_store::Error::Precondition { .. }) {
        return Error::new(
            ErrorKind::Unavailable,
            format!("the object changed while {what}; read it again"),
        );
    }
    inner.ctx.map(e, what, None)
}

/// The first `n` lines of `range`, streamed: the GET stops as soon as the lines are complete
/// or are more than `max` bytes (`None`). The same answer as core's `head_lines`.
async fn head_lines(
    inner: &Inner,
    path: &Path,
    meta: &ObjectMeta,
    range: std::ops::Range<u64>,
    n: u64,
    max: u64,
    what: &str,
) -> Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    if n == 0 || range.start >= range.end {
        return Ok(Some(buf));
    }
    let want = range.end - range.start;
    let res = inner
        .store
        .get_opts(path, pinned(meta, GetRange::Bounded(range)))
        .await
        .map_err(|e| changed_or(inner, e, what))?;
    let mut stream = res.into_stream();
    let mut lines = 0u64;
    let mut taken = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| inner.ctx.map(e, what, None))?;
        taken += chunk.len() as u64;
        if taken > want {
            return Err(inner.ctx.wrong_length(
                what,
                &format!("more than the {want} bytes asked for; the rest was not read"),
            ));
        }
        for (i, &b) in chunk.iter().enumerate() {
            if b == b'\n' {
                lines += 1;
                if lines == n {
                    buf.extend_from_slice(&chunk[..=i]);
                    return Ok((buf.len() as u64 <= max).then_some(buf));
                }
            }
        }
        buf.extend_from_slice(&chunk);
        if buf.len() as u64 > max {
            return Ok(None);
        }
    }
    Ok(Some(buf))
}

/// Content types that say "no idea": the store's defaults for an upload without one.
fn generic_type(ct: Option<&str>) -> bool {
    match ct {
        None => true,
        Some(t) => {
            let t = t.split(';').next().unwrap_or("").trim();
            t.is_empty() || t == "binary/octet-stream" || t == "application/octet-stream"
        }
    }
}

/// Content types whose UTF-8 bodies are text.
fn text_type(ct: &str) -> bool {
    let t = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    t.starts_with("text/")
        || t.ends_with("+json")
        || t.ends_with("+xml")
        || matches!(
            t.as_str(),
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-javascript"
                | "application/yaml"
                | "application/x-yaml"
                | "application/toml"
                | "application/sql"
                | "application/x-sh"
                | "application/csv"
                | "application/x-ndjson"
                | "application/graphql"
        )
}

/// Text when the bytes are UTF-8 and the stored type is a text type (or says nothing, when
/// the extension decides); otherwise a blob. The MIME type is the stored Content-Type, else
/// the extension's, else what the bytes look like.
fn make_contents(
    uri: &str,
    key: &str,
    bytes: Vec<u8>,
    ctype: Option<&str>,
    meta: Option<serde_json::Map<String, serde_json::Value>>,
) -> Contents {
    let ext = mcpr_core::mime::by_extension(key.as_bytes());
    let generic = generic_type(ctype);
    let texty = generic || ctype.is_some_and(text_type);
    match String::from_utf8(bytes) {
        Ok(text) if texty => Contents {
            uri: uri.to_owned(),
            mime_type: Some(match ctype {
                Some(t) if !generic => t.to_owned(),
                _ => ext.unwrap_or("text/plain").to_owned(),
            }),
            body: ContentsBody::Text(text),
            meta,
        },
        other => {
            let bytes = match other {
                Ok(t) => t.into_bytes(),
                Err(e) => e.into_bytes(),
            };
            let mime = match ctype {
                Some(t) if !generic => t.to_owned(),
                _ => mcpr_core::mime::of_binary(&bytes, ext).to_owned(),
            };
            Contents {
                uri: uri.to_owned(),
                mime_type: Some(mime),
                body: ContentsBody::Blob(bytes),
                meta,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_or_blob_by_type_and_bytes() {
        let c = make_contents("s3://b/a.json", "a.json", b"{}".to_vec(), None, None);
        assert_eq!(c.mime_type.as_deref(), Some("application/json"));
        assert!(matches!(c.body, ContentsBody::Text(_)));
        let c = make_contents(
            "s3://b/a",
            "a",
            b"hi".to_vec(),
            Some("binary/octet-stream"),
            None,
        );
        assert_eq!(c.mime_type.as_deref(), Some("text/plain"));
        let c = make_contents(
            "s3://b/a.png",
            "a.png",
            b"ok".to_vec(),
            Some("image/png"),
            None,
        );
        assert!(matches!(c.body, ContentsBody::Blob(_)));
        assert_eq!(c.mime_type.as_deref(), Some("image/png"));
        let c = make_contents("s3://b/a", "a", vec![0xff, 0], Some("text/plain"), None);
        assert!(matches!(c.body, ContentsBody::Blob(_)));
    }

    #[test]
    fn unrepresentable_keys_have_no_path() {
        assert!(object_path("a/b.txt").is_some());
        assert!(object_path("a b/ü #?%+").is_some());
        assert!(object_path("a//b").is_none());
        assert!(object_path("dir/").is_none());
        assert!(object_path("a/../b").is_none());
    }
}
