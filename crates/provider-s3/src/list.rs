//! Listings: `resources/list` pages, prefix ("directory") reads and key completion. A page
//! costs at most two ListObjectsV2 requests (a directory read or a completion one), each
//! resuming with the store's own `start-after`, so no request walks the bucket from the start.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use mcpr_core::{
    Completion, Contents, ContentsBody, Error, ErrorKind, Page, ResourceMeta, ResourceUri, Result,
};
use percent_encoding::percent_decode_str;

use crate::listing::{Listed, ListedObject};
use crate::provider::Inner;
use crate::uri::{KEY_MAX, encode_value};

/// The most keys S3 returns for one list request.
pub const STORE_PAGE_MAX: usize = 1000;
/// Entries in one prefix-listing read; `?after=` continues it.
pub const DIR_READ_MAX: usize = 1000;
/// Suggestions in one completion answer.
pub const COMPLETE_MAX: usize = 100;

/// RFC 3339 (UTC, whole seconds) of a modification time.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// A list position: the last key a page saw, served or not (any key: the listing resumes
/// after the place it would have). Refused when it cannot be a key at all. Control
/// characters are allowed: a skipped key the store returned may hold them.
fn position(after: &[u8]) -> Result<String> {
    let bad = |why: &str| {
        Error::new(
            ErrorKind::InvalidCursor,
            format!("list cursor does not name a position: {why}"),
        )
    };
    if after.is_empty() {
        return Err(bad("empty"));
    }
    if after.len() > KEY_MAX {
        return Err(bad("longer than any S3 key"));
    }
    let s = std::str::from_utf8(after).map_err(|_| bad("not UTF-8"))?;
    Ok(s.to_owned())
}

/// The keys one list request returned beyond the page it served, kept for the page that
/// follows: a client walking the bucket in small pages costs one store request per 1,000
/// keys, not one per page. Keyed by the position the next page resumes after.
pub(crate) type ReadAheads = moka::sync::Cache<String, Arc<ReadAhead>>;

/// How long read-ahead keys serve the pages that follow: a walk goes on at once, and a
/// listing a little older than this is what a client that asked a moment earlier would have
/// seen (watched listings never use it).
pub const READ_AHEAD_TTL: Duration = Duration::from_secs(10);

pub(crate) fn read_aheads() -> ReadAheads {
    moka::sync::Cache::builder()
        // At most ~1,000 keys each: a few dozen walks in progress at once.
        .max_capacity(64)
        .time_to_live(READ_AHEAD_TTL)
        .build()
}

/// The rest of one store response, from `from` on.
pub(crate) struct ReadAhead {
    objects: Arc<Vec<ListedObject>>,
    from: usize,
    /// Whether the store had more after the response.
    truncated: bool,
    /// The last key the store returned (served or not).
    last: Option<String>,
}

/// One page of `resources/list`: the objects under the mount's prefix in key order, after
/// `after`, at most `limit` (and at most the store's 1,000) per page. At most two requests
/// (the second only when the first response ends before the page is full): each asks for
/// 1,000 keys whatever the page size, and what the page does not use serves the next pages
/// for [`READ_AHEAD_TTL`].
///
/// Folder markers (keys ending in `/`, the console's "Create folder") are not resources:
/// their URI is the prefix's listing. Keys the mount does not serve are skipped (counted and
/// logged by the lister). The page resumes after the last key the store returned, served or
/// not, so a page may be empty and still have a next one.
pub(crate) async fn list_page(
    inner: &Inner,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Page<ResourceMeta>> {
    let start_after = after.map(position).transpose()?;
    let limit = limit.clamp(1, STORE_PAGE_MAX);
    let mut ahead = match inner
        .read_ahead
        .remove(start_after.as_deref().unwrap_or_default())
    {
        Some(ahead) => ahead,
        None => Arc::new(fetch_ahead(inner, start_after).await?),
    };
    let mut items = Vec::new();
    // A page that uses up one response before it is full goes on with a second: one or two
    // store requests a page, never more.
    let mut fetched_more = false;
    loop {
        let rest = &ahead.objects[ahead.from..];
        let mut used = 0;
        for o in rest {
            if items.len() == limit {
                break;
            }
            used += 1;
            if o.key.ends_with('/') || !inner.keys.serves(&o.key) {
                continue;
            }
            items.push(ResourceMeta {
                uri: inner.keys.uri_of(&o.key),
                name: o.key.clone(),
                mime_type: mcpr_core::mime::by_extension(o.key.as_bytes()).map(str::to_owned),
                size: Some(o.size),
                last_modified: o.last_modified.map(rfc3339),
                ..Default::default()
            });
        }
        if used < rest.len() {
            // The page ends inside the response: the rest waits for the page after it.
            let last = rest[used - 1].key.clone();
            inner.read_ahead.insert(
                last.clone(),
                Arc::new(ReadAhead {
                    objects: ahead.objects.clone(),
                    from: ahead.from + used,
                    truncated: ahead.truncated,
                    last: ahead.last.clone(),
                }),
            );
            return Ok(Page {
                items,
                next: Some(last.into_bytes()),
                hints: None,
            });
        }
        let next = match (ahead.truncated, &ahead.last) {
            (false, _) => None,
            (true, Some(last)) => Some(last.clone()),
            (true, None) => {
                return Err(Error::internal(format!(
                    "s3 bucket `{}` said a listing continues but returned no key to continue after",
                    inner.config.bucket
                )));
            }
        };
        match next {
            Some(last) if items.len() < limit && !fetched_more => {
                fetched_more = true;
                ahead = Arc::new(fetch_ahead(inner, Some(last)).await?);
            }
            next => {
                return Ok(Page {
                    items,
                    next: next.map(String::into_bytes),
                    hints: None,
                });
            }
        }
    }
}

/// One store response of up to 1,000 keys after `start_after`.
async fn fetch_ahead(inner: &Inner, start_after: Option<String>) -> Result<ReadAhead> {
    let r = inner
        .list_once(
            &inner.config.prefix,
            start_after,
            STORE_PAGE_MAX,
            false,
            "listing",
        )
        .await?;
    Ok(ReadAhead {
        objects: Arc::new(r.objects),
        from: 0,
        truncated: r.truncated,
        last: r.last,
    })
}

/// A `start-after` that skips every key under the common prefix `p` (ending in `/`): `p`
/// followed by the highest code point up to S3's key length, so nothing under `p` sorts
/// after it (S3 compares UTF-8 bytes, and U+10FFFF is the highest there is).
fn past_prefix(p: &str) -> String {
    let mut s = p.to_owned();
    while s.len() + 4 <= KEY_MAX {
        s.push('\u{10FFFF}');
    }
    s
}

/// One entry of a prefix listing or a completion: a key, or a common prefix ending in `/`.
struct Entry<'a> {
    /// The full key or prefix.
    full: String,
    object: Option<&'a ListedObject>,
}

/// The keys and common prefixes of one delimiter listing, merged in key order. The folder
/// marker of the listed prefix itself (`reports/` when listing `reports/`) is not an entry.
fn entries<'a>(r: &'a Listed, prefix: &str) -> Vec<Entry<'a>> {
    let mut out: Vec<Entry<'a>> = Vec::new();
    for p in &r.prefixes {
        out.push(Entry {
            full: p.clone(),
            object: None,
        });
    }
    for o in &r.objects {
        if o.key.starts_with(prefix) && o.key.len() > prefix.len() {
            out.push(Entry {
                full: o.key.clone(),
                object: Some(o),
            });
        }
    }
    out.sort_by(|a, b| a.full.cmp(&b.full));
    out
}

/// Read a "directory" URI (ending in `/`): the objects and common prefixes directly under
/// `prefix`, as JSON in the shape of a files directory read, 1,000 entries at most, continued
/// with `?after={name}`.
pub(crate) async fn read_dir(
    inner: &Inner,
    uri: &ResourceUri,
    prefix: &str,
) -> Result<Vec<Contents>> {
    let mut after: Option<String> = None;
    for (k, v) in uri.query_pairs() {
        match k {
            "after" if after.is_none() => {
                let v = percent_decode_str(v).decode_utf8().map_err(|_| {
                    Error::invalid_params("`after` must be a percent-encoded UTF-8 entry name")
                })?;
                after = Some(v.into_owned());
            }
            "after" => {
                return Err(Error::invalid_params(format!(
                    "query parameter `after` given twice in {uri}"
                )));
            }
            "offset" | "length" | "head" | "tail" => {
                return Err(Error::invalid_params(format!(
                    "{} is a prefix listing; offset, length, head and tail apply to objects",
                    uri.without_query()
                )));
            }
            other => {
                return Err(Error::invalid_params(format!(
                    "unknown query parameter `{other}` in {uri}; prefix listings accept after"
                )));
            }
        }
    }
    let mount = &inner.config.prefix;
    // Above the mount's prefix: only the way down to it is shown.
    let (list_prefix, toward) = if inner.keys.serves(prefix) {
        (prefix.to_owned(), None)
    } else {
        let rest = &mount[prefix.len()..];
        match rest.find('/') {
            Some(i) => (String::new(), Some(format!("{prefix}{}", &rest[..=i]))),
            None => (mount.clone(), None),
        }
    };
    let mut out = Vec::new();
    let mut truncated = false;
    if let Some(dir) = toward {
        if after
            .as_deref()
            .is_none_or(|a| format!("{prefix}{a}") < dir)
        {
            out.push(dir_entry(inner, prefix, &dir));
        }
    } else {
        let start_after = after.as_ref().map(|a| {
            let full = format!("{prefix}{a}");
            if full.ends_with('/') {
                past_prefix(&full)
            } else {
                full
            }
        });
        let r = inner
            .list_once(
                &list_prefix,
                start_after,
                DIR_READ_MAX,
                true,
                "listing a prefix",
            )
            .await
            .map_err(|e| e.with_uri(uri.as_str()))?;
        let es = entries(&r, &list_prefix);
        truncated = r.truncated && !es.is_empty();
        // A folder marker (`reports/`, what the console's "Create folder" makes) is what makes
        // an otherwise empty prefix exist.
        let marker = r.objects.iter().any(|o| o.key == list_prefix);
        for e in &es {
            match e.object {
                None => out.push(dir_entry(inner, prefix, &e.full)),
                Some(o) => {
                    let mut obj = serde_json::Map::new();
                    obj.insert("name".into(), e.full[prefix.len()..].into());
                    obj.insert("uri".into(), inner.keys.uri_of(&e.full).into());
                    obj.insert("type".into(), "file".into());
                    obj.insert("size".into(), o.size.into());
                    if let Some(t) = o.last_modified {
                        obj.insert("lastModified".into(), rfc3339(t).into());
                    }
                    out.push(serde_json::Value::Object(obj));
                }
            }
        }
        if out.is_empty()
            && !marker
            && after.is_none()
            && !prefix.is_empty()
            && prefix.len() > mount.len()
        {
            // S3 has no directories: a prefix with nothing under it does not exist.
            return Err(Error::not_found(uri.as_str()));
        }
    }
    let mut doc = serde_json::Map::new();
    doc.insert("uri".into(), uri.as_str().into());
    let last = out
        .last()
        .and_then(|e| e.get("name"))
        .and_then(|n| n.as_str())
        .map(str::to_owned);
    doc.insert("entries".into(), out.into());
    doc.insert("truncated".into(), truncated.into());
    if truncated && let Some(name) = last {
        let next = format!(
            "{}?after={}",
            inner.keys.uri_of(prefix),
            encode_value(&name)
        );
        doc.insert("next".into(), next.into());
    }
    Ok(vec![Contents {
        uri: uri.as_str().to_owned(),
        mime_type: Some("application/json".into()),
        body: ContentsBody::Text(serde_json::Value::Object(doc).to_string()),
        meta: None,
    }])
}

/// One page of the objects and common prefixes directly under `prefix` (SEP-2640 directory
/// reads), the entries [`read_dir`] shows: objects as `resources/list` describes them,
/// common prefixes as [`DIRECTORY_MIME_TYPE`](mcpr_core::DIRECTORY_MIME_TYPE) with their
/// `/`-ending URI. The position is the last key or prefix the store returned, so a
/// response made only of keys this mount does not serve still moves the read on; a page
/// costs at most two list requests, like a `resources/list` page.
pub(crate) async fn dir_page(
    inner: &Inner,
    uri: &ResourceUri,
    prefix: &str,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Page<ResourceMeta>> {
    if uri.query().is_some() {
        return Err(Error::invalid_params(format!(
            "{uri} has a query; a directory read takes the directory's URI and a cursor"
        )));
    }
    let limit = limit.clamp(1, STORE_PAGE_MAX - 1);
    let after = after.map(position).transpose()?;
    let dir_meta = |full: &str| ResourceMeta {
        uri: inner.keys.uri_of(full),
        name: full.to_owned(),
        mime_type: Some(mcpr_core::DIRECTORY_MIME_TYPE.to_owned()),
        ..Default::default()
    };
    let mount = &inner.config.prefix;
    // Above the mount's prefix: only the way down to it is shown, as a read shows it.
    let (prefix, toward) = if inner.keys.serves(prefix) {
        (prefix, None)
    } else {
        let rest = &mount[prefix.len()..];
        match rest.find('/') {
            Some(i) => ("", Some(format!("{prefix}{}", &rest[..=i]))),
            None => (mount.as_str(), None),
        }
    };
    if let Some(dir) = toward {
        let items = if after.as_deref().is_none_or(|a| a < dir.as_str()) {
            vec![dir_meta(&dir)]
        } else {
            Vec::new()
        };
        return Ok(Page {
            items,
            next: None,
            hints: None,
        });
    }
    let mut items: Vec<(Vec<u8>, ResourceMeta)> = Vec::new();
    let mut start_after = after.as_ref().map(|a| {
        if a.ends_with('/') {
            past_prefix(a)
        } else {
            a.clone()
        }
    });
    let mut marker = false;
    for request in 0..2 {
        let r = inner
            .list_once(
                prefix,
                start_after.clone(),
                limit + 1 - items.len(),
                true,
                "reading a directory",
            )
            .await
            .map_err(|e| e.with_uri(uri.as_str()))?;
        marker |= r.objects.iter().any(|o| o.key == prefix);
        for e in entries(&r, prefix) {
            let meta = match e.object {
                None => dir_meta(&e.full),
                Some(o) => ResourceMeta {
                    uri: inner.keys.uri_of(&e.full),
                    name: e.full.clone(),
                    mime_type: mcpr_core::mime::by_extension(e.full.as_bytes()).map(str::to_owned),
                    size: Some(o.size),
                    last_modified: o.last_modified.map(rfc3339),
                    ..Default::default()
                },
            };
            items.push((e.full.into_bytes(), meta));
        }
        if items.len() > limit || !r.truncated {
            break;
        }
        let Some(last) = r.last else {
            return Err(Error::internal(format!(
                "s3 bucket `{}` said a listing continues but returned no key to continue after",
                inner.config.bucket
            )));
        };
        if request == 1 {
            // Two requests' worth of keys this mount does not serve: the page ends short
            // and the next one resumes after what the store returned.
            let items = items.into_iter().map(|(_, m)| m).collect();
            return Ok(Page {
                items,
                next: Some(last.into_bytes()),
                hints: None,
            });
        }
        start_after = Some(if last.ends_with('/') {
            past_prefix(&last)
        } else {
            last
        });
    }
    if items.is_empty() && !marker && after.is_none() && prefix.len() > mount.len() {
        // S3 has no directories: a prefix with nothing under it does not exist.
        return Err(Error::not_found(uri.as_str()));
    }
    Ok(Page::from_lookahead(items, limit))
}

fn dir_entry(inner: &Inner, parent: &str, full: &str) -> serde_json::Value {
    let mut obj = serde_json::Map::new();
    obj.insert("name".into(), full[parent.len()..].into());
    obj.insert("uri".into(), inner.keys.uri_of(full).into());
    obj.insert("type".into(), "directory".into());
    serde_json::Value::Object(obj)
}

/// Completion of `key`: the keys and common prefixes (ending in `/`) that start with what was
/// typed, one delimiter listing, at most 100.
pub(crate) async fn complete_key(inner: &Inner, typed: &str) -> Result<Completion> {
    let mount = &inner.config.prefix;
    let list_prefix = if typed.starts_with(mount.as_str()) {
        typed
    } else if mount.starts_with(typed) {
        mount.as_str()
    } else {
        return Ok(Completion::default());
    };
    if list_prefix.len() > KEY_MAX {
        return Ok(Completion::default());
    }
    let r = inner
        .list_once(list_prefix, None, COMPLETE_MAX, true, "completing a key")
        .await?;
    // Keys equal to the prefix itself are left out by `entries`; a typed full key is
    // still a value when it exists.
    let mut values: Vec<String> = r
        .objects
        .iter()
        .filter(|o| o.key == list_prefix && !o.key.ends_with('/'))
        .map(|o| o.key.clone())
        .collect();
    values.extend(entries(&r, list_prefix).into_iter().map(|e| e.full));
    values.sort();
    values.dedup();
    values.truncate(COMPLETE_MAX);
    Ok(Completion {
        values,
        total: None,
        has_more: r.truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_must_be_keys() {
        assert!(position(b"").is_err());
        assert!(position(&[0xff, 0x00]).is_err());
        assert!(position(&[b'a'; 1025]).is_err());
        assert_eq!(position(b"ctl\x01x").unwrap(), "ctl\u{1}x");
        assert_eq!(position(b"a/b c").unwrap(), "a/b c");
    }

    #[test]
    fn past_prefix_sorts_after_everything_under_it() {
        let p = past_prefix("reports/2024/");
        assert!(p.len() <= KEY_MAX);
        for k in [
            "reports/2024/z",
            "reports/2024/\u{10FFFF}x",
            "reports/2024/日本",
        ] {
            assert!(k.as_bytes() < p.as_bytes(), "{k}");
        }
        assert!("reports/20240".as_bytes() > p.as_bytes());
    }
}
