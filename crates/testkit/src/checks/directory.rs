//! `Provider::read_directory` (SEP-2640 directory reads): every page of every directory from
//! the fixture's root, at several page sizes, without a gap or a duplicate, in one stable
//! order; subfolders marked `inode/directory`; the files found are exactly the expected
//! resources under the root; a file is not a directory.

use std::collections::BTreeSet;

use mcpr_core::{DIRECTORY_MIME_TYPE, ErrorKind, PageRequest, Provider, ResourceMeta};

use crate::Fixture;
use crate::checks::{assert_under_prefixes, parse, under_prefix};

/// How deep the check follows subfolders: fixtures are small trees.
const MAX_DEPTH: usize = 16;

/// Every child of `dir` at `limit` per page, checking each page as it comes.
async fn children(provider: &dyn Provider, dir: &str, limit: usize) -> Vec<ResourceMeta> {
    let uri = parse(dir);
    let mut out = Vec::new();
    let mut after = None;
    for _ in 0..100_000 {
        let request = PageRequest {
            after: after.clone(),
            limit,
        };
        let page = provider
            .read_directory(&uri, request.clone())
            .await
            .unwrap_or_else(|e| panic!("directory read of {dir}: a page must load: {e}"));
        assert!(
            page.items.len() <= limit,
            "directory read of {dir}: a page of {} exceeds the limit {limit}",
            page.items.len()
        );
        assert!(
            page.next.is_none() || !page.items.is_empty(),
            "directory read of {dir} (page size {limit}): an empty page must be the last"
        );
        let again = provider
            .read_directory(&uri, request)
            .await
            .unwrap_or_else(|e| panic!("directory read of {dir}: a page must load: {e}"));
        assert_eq!(
            again, page,
            "directory read of {dir}: the same position must give the same page"
        );
        out.extend(page.items);
        match page.next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
    panic!("directory read of {dir}: pagination did not end");
}

/// Whether `uri` is `dir` itself.
fn same(uri: &str, dir: &str) -> bool {
    uri.trim_end_matches('/') == dir.trim_end_matches('/')
}

/// Read the fixture's directories (the first one is the root of the tree the fixture
/// expects) and every subfolder under them.
pub(crate) async fn check_directories(provider: &dyn Provider, fixture: &dyn Fixture) {
    let dirs = fixture.directories();
    let Some(root) = dirs.first().cloned() else {
        return;
    };
    let expected: BTreeSet<String> = fixture
        .expected()
        .into_iter()
        .map(|(u, _)| u)
        .filter(|u| under_prefix(u, &root) && !same(u, &root))
        .collect();
    let mut files = BTreeSet::new();
    let mut pending: Vec<(String, usize)> = dirs.iter().map(|d| (d.clone(), 0)).collect();
    let mut seen_dirs = BTreeSet::new();
    while let Some((dir, depth)) = pending.pop() {
        if !seen_dirs.insert(dir.clone()) {
            continue;
        }
        let whole = children(provider, &dir, 1000).await;
        for limit in [1, 2, 3] {
            let paged = children(provider, &dir, limit).await;
            let a: Vec<&str> = whole.iter().map(|m| m.uri.as_str()).collect();
            let b: Vec<&str> = paged.iter().map(|m| m.uri.as_str()).collect();
            assert_eq!(
                a, b,
                "directory read of {dir}: pages of {limit} must give the entries of one large \
                 page, in the same order, without a gap or a duplicate"
            );
        }
        let unique: BTreeSet<&str> = whole.iter().map(|m| m.uri.as_str()).collect();
        assert_eq!(
            unique.len(),
            whole.len(),
            "directory read of {dir}: an entry was read twice"
        );
        for m in &whole {
            assert_under_prefixes(provider, &m.uri, "directory entry");
            assert!(
                under_prefix(&m.uri, &dir) && !same(&m.uri, &dir),
                "directory read of {dir}: entry {} is not under the directory",
                m.uri
            );
            if m.mime_type.as_deref() == Some(DIRECTORY_MIME_TYPE) {
                assert!(
                    m.size.is_none(),
                    "directory read of {dir}: subfolder {} has a size",
                    m.uri
                );
                assert!(
                    depth < MAX_DEPTH,
                    "directory read: deeper than {MAX_DEPTH} under {root}"
                );
                pending.push((m.uri.clone(), depth + 1));
            } else {
                files.insert(m.uri.clone());
            }
        }
    }
    let missing: Vec<_> = expected.difference(&files).collect();
    let extra: Vec<_> = files.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "directory reads under {root} must show exactly the expected resources under it: \
         missing {missing:?}, unexpected {extra:?}"
    );
    // A file is not a directory, and a directory that is not there is not found (or, for
    // a source whose URIs say nothing about kind, not a directory).
    if let Some(file) = expected.iter().next() {
        let e = provider
            .read_directory(
                &parse(file),
                PageRequest {
                    after: None,
                    limit: 10,
                },
            )
            .await
            .expect_err("a directory read of a file must fail");
        assert_eq!(
            e.kind,
            ErrorKind::InvalidParams,
            "a directory read of the file {file} must answer invalid params (not a \
             directory): {e}"
        );
    }
    for uri in fixture.forbidden_uris() {
        let Ok(parsed) = mcpr_core::ResourceUri::parse(&uri) else {
            continue;
        };
        if let Ok(page) = provider
            .read_directory(
                &parsed,
                PageRequest {
                    after: None,
                    limit: 10,
                },
            )
            .await
        {
            assert!(
                page.items.is_empty(),
                "a directory read of forbidden {uri} showed {:?}",
                page.items
            );
        }
    }
}
