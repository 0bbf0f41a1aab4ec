//! Listing an upstream (`resources/list`, and SEP-2640 directory reads) through our own
//! positions (each of our pages carrying the strictest `ttlMs`/`cacheScope` of the upstream
//! pages it came from, capped by the mount's own): a position holds the upstream's cursor and the offset within that upstream
//! page, so our `page_size` applies whatever the upstream's is, every upstream page is
//! reached lazily, and no upstream cursor reaches a client (the server signs and wraps our
//! positions in its own cursors; none of ours is ever sent upstream).

use mcpr_core::{CacheHints, Error, ErrorKind, Page, PageRequest, ResourceMeta, Result};
use rmcp::model::{ListResourcesResult, Resource};

use crate::config::{MAX_PAGE_ENTRIES, MAX_UPSTREAM_CURSOR};
use crate::conn::Shared;
use crate::error;
use crate::uri::{clean_description, clean_name};

/// The most upstream pages one of our pages asks for (an upstream serving empty pages must
/// not hold a request forever); the page then ends where it got to. An upstream that sends
/// back a cursor already sent for the page (the same one again, or a cycle) is refused: its
/// listing would never end.
const MAX_UPSTREAM_PAGES: usize = 8;

/// Where a listing resumes: the upstream page (its cursor, `None` for the first) and how
/// many of its entries were served already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Position {
    pub(crate) cursor: Option<String>,
    pub(crate) offset: u32,
}

impl Position {
    /// `[1][offset u32 BE][0 | 1 cursor bytes]`.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + self.cursor.as_ref().map_or(0, String::len));
        out.push(1);
        out.extend_from_slice(&self.offset.to_be_bytes());
        match &self.cursor {
            None => out.push(0),
            Some(c) => {
                out.push(1);
                out.extend_from_slice(c.as_bytes());
            }
        }
        out
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Self> {
        let bad = || {
            Error::new(
                ErrorKind::InvalidCursor,
                "invalid cursor: not a position of this mcp mount",
            )
        };
        if b.len() < 6 || b[0] != 1 {
            return Err(bad());
        }
        let offset = u32::from_be_bytes([b[1], b[2], b[3], b[4]]);
        let cursor = match b[5] {
            0 if b.len() == 6 => None,
            1 => Some(String::from_utf8(b[6..].to_vec()).map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        Ok(Self { cursor, offset })
    }
}

/// One upstream entry as we list it; `None` when its URI does not parse (left out).
pub(crate) fn meta(shared: &Shared, r: &Resource) -> Option<ResourceMeta> {
    let uri = shared.map.ours_checked(&r.uri)?;
    Some(ResourceMeta {
        uri,
        name: clean_name(&r.name),
        title: r.title.as_deref().map(clean_name),
        description: r.description.as_deref().map(clean_description),
        mime_type: r.mime_type.as_deref().map(clean_name),
        size: r.size,
        last_modified: r
            .annotations
            .as_ref()
            .and_then(|a| a.last_modified.as_deref())
            .map(clean_name),
    })
}

/// One page of ours from upstream pages fetched by `fetch(cursor)` (`what` names the
/// request in errors).
pub(crate) async fn page<F, Fut>(
    shared: &Shared,
    what: &str,
    page: PageRequest,
    mut fetch: F,
) -> Result<Page<ResourceMeta>>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<ListResourcesResult>>,
{
    let start = match &page.after {
        Some(b) => Position::decode(b)?,
        None => Position {
            cursor: None,
            offset: 0,
        },
    };
    let limit = page.limit.max(1);
    let mut items = Vec::new();
    let mut cursor = start.cursor;
    let mut offset = start.offset as usize;
    let mut hints: Option<CacheHints> = None;
    // The cursors sent upstream for this page (at most MAX_UPSTREAM_PAGES).
    let mut sent: Vec<Option<String>> = Vec::new();
    for _ in 0..MAX_UPSTREAM_PAGES {
        sent.push(cursor.clone());
        let res = fetch(cursor.clone()).await?;
        let h = crate::provider::capped(shared.config.cache, res.ttl_ms, res.cache_scope);
        hints = Some(hints.map_or(h, |o| o.min(h)));
        if res.resources.len() > MAX_PAGE_ENTRIES {
            return Err(error::hostile(
                shared.name(),
                what,
                format!(
                    "a page of {} entries, more than the limit of {MAX_PAGE_ENTRIES}",
                    res.resources.len()
                ),
            ));
        }
        for (i, r) in res.resources.iter().enumerate().skip(offset) {
            if items.len() == limit {
                let next = Position {
                    cursor: cursor.clone(),
                    offset: i as u32,
                };
                return Ok(Page {
                    items,
                    next: Some(next.encode()),
                    hints,
                });
            }
            if let Some(m) = meta(shared, r) {
                items.push(m);
            }
        }
        let Some(next) = res.next_cursor else {
            return Ok(Page {
                items,
                next: None,
                hints,
            });
        };
        if next.len() > MAX_UPSTREAM_CURSOR {
            return Err(error::hostile(
                shared.name(),
                what,
                format!(
                    "a cursor of {} bytes, more than the limit of {MAX_UPSTREAM_CURSOR}",
                    next.len()
                ),
            ));
        }
        if sent.iter().any(|c| c.as_deref() == Some(next.as_str())) {
            return Err(error::hostile(
                shared.name(),
                what,
                "a nextCursor it had already sent for this listing (it would never end)",
            ));
        }
        cursor = Some(next);
        offset = 0;
        if items.len() == limit {
            break;
        }
    }
    Ok(Page {
        items,
        next: Some(Position { cursor, offset: 0 }.encode()),
        hints,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{McpConfig, Upstream};

    /// An upstream page of one entry whose `nextCursor` is `next`.
    fn upstream_page(next: &str) -> ListResourcesResult {
        ListResourcesResult {
            next_cursor: Some(next.to_owned()),
            ..ListResourcesResult::with_all_items(vec![
                serde_json::from_value(serde_json::json!({"uri": "x://a", "name": "a"})).unwrap(),
            ])
        }
    }

    #[tokio::test]
    async fn a_repeated_upstream_cursor_ends_the_listing_naming_the_mount() {
        let shared = Shared::new(McpConfig::new(
            "rep",
            Upstream::Stdio {
                command: "unused".into(),
                args: Vec::new(),
                env: Vec::new(),
            },
        ));
        let request = PageRequest {
            after: None,
            limit: 100,
        };
        // The same cursor again, and a cycle of two.
        let same = |_: Option<String>| async { Ok(upstream_page("same")) };
        let cycle = |c: Option<String>| async move {
            Ok(upstream_page(if c.as_deref() == Some("a") {
                "b"
            } else {
                "a"
            }))
        };
        for e in [
            page(&shared, "resources/list", request.clone(), same)
                .await
                .unwrap_err(),
            page(&shared, "resources/list", request.clone(), cycle)
                .await
                .unwrap_err(),
        ] {
            assert!(
                e.message.contains("mcp mount \"rep\"")
                    && e.message.contains("resources/list")
                    && e.message.contains("never end"),
                "{e}"
            );
        }
        // Fresh cursors end where the upstream does.
        let fresh = |c: Option<String>| async move {
            let mut p = upstream_page("next");
            if c.is_some() {
                p.next_cursor = None;
            }
            Ok(p)
        };
        let p = page(&shared, "resources/list", request, fresh)
            .await
            .unwrap();
        assert_eq!((p.items.len(), p.next), (2, None));
    }

    #[test]
    fn positions_round_trip_and_refuse_garbage() {
        for p in [
            Position {
                cursor: None,
                offset: 0,
            },
            Position {
                cursor: Some("abc".into()),
                offset: 7,
            },
            Position {
                cursor: Some(String::new()),
                offset: u32::MAX,
            },
        ] {
            assert_eq!(Position::decode(&p.encode()).unwrap(), p);
        }
        for bad in [
            &b""[..],
            b"\x02\0\0\0\0\0",
            b"\x01\0\0\0\0\x05",
            b"\x01\0\0\0\0\0x",
        ] {
            assert_eq!(
                Position::decode(bad).unwrap_err().kind,
                ErrorKind::InvalidCursor
            );
        }
    }
}
