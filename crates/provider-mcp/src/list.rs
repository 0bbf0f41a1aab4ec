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
/// listing would never end. A cycle longer than one of our pages is caught by the walk each
/// position carries ([`Walk`]).
const MAX_UPSTREAM_PAGES: usize = 8;

/// Cycle detection over a whole listing, carried from one of our positions to the next
/// (Brent's algorithm: constant size, whatever the listing's length): the fingerprint of
/// the cursor saved last, and the steps taken since against the stretch allowed before the
/// next save. An upstream whose cursors come back to one seen (A, B, A …) meets the saved
/// one within about twice the cycle's length plus the steps before it, however many of our
/// pages that spans; a client that follows every cursor it is given (not all stop at one
/// repeated) would otherwise page forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Walk {
    saved: u64,
    power: u32,
    steps: u32,
}

impl Walk {
    /// At the listing's first page (whose cursor is `None`).
    pub(crate) fn start() -> Self {
        Self {
            saved: fingerprint(None),
            power: 1,
            steps: 1,
        }
    }

    /// The upstream sent `next`: `false` when it is the saved cursor again (a cycle).
    fn step(&mut self, next: &str) -> bool {
        let f = fingerprint(Some(next));
        if f == self.saved {
            return false;
        }
        if self.power == self.steps {
            self.saved = f;
            self.power = self.power.saturating_mul(2);
            self.steps = 0;
        }
        self.steps = self.steps.saturating_add(1);
        true
    }
}

/// A 64-bit FNV-1a of a cursor (`None`, the first page, apart from every cursor): stable
/// across builds and replicas, as a position is. A collision could only end one listing
/// early, at odds of one in 2^64 a step.
fn fingerprint(cursor: Option<&str>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let (tag, bytes) = match cursor {
        None => (0u8, &b""[..]),
        Some(c) => (1u8, c.as_bytes()),
    };
    for b in std::iter::once(&tag).chain(bytes) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Where a listing resumes: the upstream page (its cursor, `None` for the first), how
/// many of its entries were served already, and the walk so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Position {
    pub(crate) cursor: Option<String>,
    pub(crate) offset: u32,
    pub(crate) walk: Walk,
}

impl Position {
    /// `[2][offset u32 BE][saved u64 BE][power u32 BE][steps u32 BE][0 | 1 cursor bytes]`.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(22 + self.cursor.as_ref().map_or(0, String::len));
        out.push(2);
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&self.walk.saved.to_be_bytes());
        out.extend_from_slice(&self.walk.power.to_be_bytes());
        out.extend_from_slice(&self.walk.steps.to_be_bytes());
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
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        // Version 1 (before the walk) still resumes, its walk starting there.
        let (walk, rest) = match b.first() {
            Some(1) if b.len() >= 6 => (Walk::start(), 5),
            Some(2) if b.len() >= 22 => {
                let mut saved = [0u8; 8];
                saved.copy_from_slice(&b[5..13]);
                let walk = Walk {
                    saved: u64::from_be_bytes(saved),
                    power: u32_at(13),
                    steps: u32_at(17),
                };
                (walk, 21)
            }
            _ => return Err(bad()),
        };
        let offset = u32_at(1);
        let cursor = match b[rest] {
            0 if b.len() == rest + 1 => None,
            1 => Some(String::from_utf8(b[rest + 1..].to_vec()).map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        Ok(Self {
            cursor,
            offset,
            walk,
        })
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
            walk: Walk::start(),
        },
    };
    let limit = page.limit.max(1);
    let mut items = Vec::new();
    let mut walk = start.walk;
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
                    walk,
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
        if sent.iter().any(|c| c.as_deref() == Some(next.as_str())) || !walk.step(&next) {
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
        next: Some(
            Position {
                cursor,
                offset: 0,
                walk,
            }
            .encode(),
        ),
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
        // A cycle longer than one of our pages (page size 1: A, B, then A again, and a
        // longer one after a run-in), followed position by position as a client would: the
        // listing ends within a bounded number of our pages.
        for (run_in, cycle) in [(0, 2), (5, 7)] {
            let walk = move |c: Option<String>| async move {
                let at: usize = c.map_or(0, |c| c.parse().unwrap());
                let next = if at + 1 < run_in + cycle {
                    at + 1
                } else {
                    run_in
                };
                Ok(upstream_page(&next.to_string()))
            };
            let mut request = PageRequest {
                after: None,
                limit: 1,
            };
            let mut pages = 0;
            let e = loop {
                pages += 1;
                assert!(pages < 4 * (run_in + cycle) + 4, "never ended");
                match page(&shared, "resources/list", request.clone(), walk).await {
                    Ok(p) => request.after = Some(p.next.expect("a cycle has no end")),
                    Err(e) => break e,
                }
            };
            assert!(e.message.contains("never end"), "{e}");
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
                walk: Walk::start(),
            },
            Position {
                cursor: Some("abc".into()),
                offset: 7,
                walk: Walk {
                    saved: u64::MAX,
                    power: 8,
                    steps: 3,
                },
            },
            Position {
                cursor: Some(String::new()),
                offset: u32::MAX,
                walk: Walk::start(),
            },
        ] {
            assert_eq!(Position::decode(&p.encode()).unwrap(), p);
        }
        // A position of the version before the walk resumes where it said, walking anew.
        assert_eq!(
            Position::decode(b"\x01\0\0\0\x07\x01abc").unwrap(),
            Position {
                cursor: Some("abc".into()),
                offset: 7,
                walk: Walk::start(),
            }
        );
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
