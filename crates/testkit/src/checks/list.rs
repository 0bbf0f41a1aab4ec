//! `Provider::list`: pagination, order, limits, prefixes, and what a bad position answers.

use std::collections::BTreeSet;

use mcpr_core::{ErrorKind, PageRequest, Provider};

use crate::Fixture;
use crate::checks::assert_under_prefixes;

/// Every URI from `after` to the end, at `limit` per page, checking each page as it comes.
async fn enumerate(provider: &dyn Provider, limit: usize, start: Option<Vec<u8>>) -> Vec<String> {
    let mut out = Vec::new();
    let mut after = start;
    // The page a cursor gave the first time; fetching it again must give the same page.
    let mut probe = None;
    for _ in 0..1_000_000 {
        let page = provider
            .list(PageRequest {
                after: after.clone(),
                limit,
            })
            .await
            .unwrap_or_else(|e| panic!("list: a page must load: {e}"));
        if let Some(first) = probe.take() {
            assert_eq!(
                page, first,
                "list: the same cursor must give the same page (stateless cursors)"
            );
        }
        assert!(
            page.items.len() <= limit,
            "list: page of {} exceeds the limit {limit}",
            page.items.len()
        );
        let next = page.next.clone();
        assert!(
            next.is_none() || !page.items.is_empty(),
            "list (page size {limit}): an empty page must be the last (`next` must be None)"
        );
        out.extend(page.items.into_iter().map(|m| m.uri));
        let Some(n) = next else { return out };
        probe = Some(
            provider
                .list(PageRequest {
                    after: Some(n.clone()),
                    limit,
                })
                .await
                .unwrap_or_else(|e| panic!("list: a page must load: {e}")),
        );
        after = Some(n);
    }
    panic!("list: pagination did not end");
}

/// The whole listing at several page sizes: complete, without duplicates, in one stable
/// order, every URI under the mount's prefixes, and `next` only when something follows.
pub(crate) async fn check_listing(provider: &dyn Provider, fixture: &dyn Fixture) {
    let expected: BTreeSet<String> = fixture.expected().into_iter().map(|(u, _)| u).collect();
    let mut order: Option<Vec<String>> = None;
    for limit in [1, 3, 100] {
        let listed = enumerate(provider, limit, None).await;
        // Before comparing with the fixture: a URI outside the mount is wrong whatever the
        // fixture expects.
        for uri in &listed {
            assert_under_prefixes(provider, uri, "listed URI");
        }
        let unique: BTreeSet<&String> = listed.iter().collect();
        assert_eq!(
            unique.len(),
            listed.len(),
            "list (page size {limit}): an entry was listed twice"
        );
        let got: BTreeSet<String> = listed.iter().cloned().collect();
        let missing: Vec<_> = expected.difference(&got).collect();
        let extra: Vec<_> = got.difference(&expected).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "list (page size {limit}): missing {missing:?}, unexpected {extra:?}"
        );
        match &order {
            None => order = Some(listed),
            Some(first) => assert_eq!(
                &listed, first,
                "list: the order must not depend on the page size (keyset order is stable)"
            ),
        }
    }
    let order = order.expect("three page sizes ran");
    // A page that holds exactly the rest of the listing is the last one: no `next` that
    // leads to an empty page. One short of it must say that more follows.
    let n = order.len();
    let whole = provider
        .list(PageRequest {
            after: None,
            limit: n.max(1),
        })
        .await
        .unwrap_or_else(|e| panic!("list: a page must load: {e}"));
    assert_eq!(
        whole.items.len(),
        n,
        "list: a page of limit {n} must hold all {n} entries"
    );
    assert!(
        whole.next.is_none(),
        "list: the last page must have `next` None (limit {n} = every entry)"
    );
    if n > 1 {
        let short = provider
            .list(PageRequest {
                after: None,
                limit: n - 1,
            })
            .await
            .unwrap_or_else(|e| panic!("list: a page must load: {e}"));
        assert!(
            short.next.is_some(),
            "list: a page of limit {} out of {n} entries must have `next`",
            n - 1
        );
    }
}

/// Bad positions: malformed ones answer `InvalidCursor` or `InvalidParams` (both mean "the
/// caller's position is wrong", both answer -32602), never a page; unknown well-formed ones
/// resume after their place, so what follows is exactly a suffix of the full listing.
pub(crate) async fn check_positions(provider: &dyn Provider, fixture: &dyn Fixture) {
    let malformed = fixture.malformed_positions();
    assert!(
        !malformed.is_empty(),
        "positions: the fixture lists no malformed position to try"
    );
    for after in malformed {
        let shown = show(&after);
        match provider
            .list(PageRequest {
                after: Some(after),
                limit: 10,
            })
            .await
        {
            Ok(page) => panic!(
                "positions: malformed position {shown} must be refused, got a page of {} entries",
                page.items.len()
            ),
            Err(e) => assert!(
                matches!(e.kind, ErrorKind::InvalidCursor | ErrorKind::InvalidParams),
                "positions: malformed position {shown} must answer InvalidCursor or \
                 InvalidParams, got {:?}: {e}",
                e.kind
            ),
        }
    }
    let unknown = fixture.unknown_positions();
    if unknown.is_empty() {
        return;
    }
    let full = enumerate(provider, 100, None).await;
    for (after, first) in unknown {
        let shown = show(&after);
        for limit in [1, 100] {
            let rest = enumerate(provider, limit, Some(after.clone())).await;
            assert!(
                full.ends_with(&rest),
                "positions: resuming after unknown position {shown} (page size {limit}) must \
                 give the rest of the listing in order; got {rest:?}"
            );
            assert_eq!(
                rest.first(),
                first.as_ref(),
                "positions: resuming after unknown position {shown} (page size {limit}) \
                 starts at the wrong entry"
            );
        }
    }
}

/// A position for a message: short ones as escaped text, long ones by length.
fn show(p: &[u8]) -> String {
    if p.len() > 64 {
        format!("<{} bytes>", p.len())
    } else {
        format!("{:?}", String::from_utf8_lossy(p))
    }
}
