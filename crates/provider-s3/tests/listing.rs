//! `resources/list` pages: every key exactly once, in key order, over a 10,000-object bucket
//! at page sizes 1000, 7 and 1, and from cursors anywhere in it.
//!
//! A list request to the store asks for 1,000 keys whatever the page size, and the keys a page
//! does not use serve the pages that follow (the read-ahead, `list.rs`), so a walk costs one
//! store request per 1,000 keys. That is what makes the full walks affordable against moto,
//! whose list request costs time proportional to the whole bucket (about 0.2 s for 1 key and
//! 1.3–2 s for 1,000 at 10,000 keys): one request per page would take over half an hour at
//! page size 1. A cursor that is not the end of the previous page (mid-bucket, near the end)
//! misses the read-ahead and resumes with the store's `start-after`.
//!
//! `s3s-fs` (crates.io, 0.14.1), the stricter server the issue names, scans, `stat`s and sorts
//! the whole bucket directory for each list request (515–838 ms at 10,000 objects on this
//! 2-vCPU machine) and took 60 minutes to `cargo install`, so it is not used here.

mod common;

use std::time::Instant;

use common::{config, create_bucket, put_many, unique_bucket, writer};
use mcpr_core::{PageRequest, Provider};
use mcpr_provider_s3::S3Provider;
use mcpr_testkit::moto::moto;

/// Keys whose order is not their insertion order, some nested.
fn keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let j = (i * 7919) % n;
            if j.is_multiple_of(100) {
                format!("d{:02}/sub/k{j:05}", j / 1000)
            } else {
                format!("d{:02}/k{j:05}", j / 1000)
            }
        })
        .collect()
}

/// Walk the listing from `after` at `limit` per page, at most `max_pages` pages.
async fn walk(
    p: &S3Provider,
    mut after: Option<Vec<u8>>,
    limit: usize,
    max_pages: usize,
) -> (Vec<String>, usize, bool) {
    let mut got = Vec::new();
    let mut pages = 0;
    while pages < max_pages {
        let page = p
            .list(PageRequest {
                after: after.clone(),
                limit,
            })
            .await
            .unwrap_or_else(|e| panic!("page {pages} at size {limit}: {e}"));
        assert!(page.items.len() <= limit, "a page over its limit");
        assert!(!page.items.is_empty(), "an empty page");
        pages += 1;
        got.extend(page.items.into_iter().map(|i| i.name));
        match page.next {
            Some(n) => after = Some(n),
            None => return (got, pages, true),
        }
    }
    (got, pages, false)
}

async fn bucket_of(n: usize, tag: &str) -> Option<(S3Provider, Vec<String>)> {
    let m = moto()?;
    let bucket = unique_bucket(tag);
    create_bucket(&m.endpoint(), &bucket).await;
    let w = writer(&m.endpoint(), &bucket);
    let keys = keys(n);
    let started = Instant::now();
    put_many(&w, keys.iter().map(|k| (k.clone(), Vec::new())).collect()).await;
    eprintln!("created {n} objects in {:?}", started.elapsed());
    let mut want = keys;
    want.sort();
    let p = S3Provider::new(config(&m.endpoint(), &bucket))
        .await
        .unwrap();
    Some((p, want))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_objects() {
    const N: usize = 10_000;
    let Some((p, want)) = bucket_of(N, "ten-k").await else {
        return;
    };
    for limit in [1000, 7, 1] {
        let started = Instant::now();
        let (got, pages, done) = walk(&p, None, limit, usize::MAX).await;
        eprintln!(
            "page size {limit}: {pages} pages in {:?}",
            started.elapsed()
        );
        assert!(done);
        assert_eq!(pages, N.div_ceil(limit), "page size {limit}: full pages");
        assert_eq!(got.len(), N, "page size {limit}: every key once");
        assert!(
            got == want,
            "page size {limit}: a gap, a duplicate or out of order"
        );
    }
    for limit in [7, 1] {
        // Resuming mid-bucket, as a cursor from an earlier walk would.
        let mid = N / 2;
        let (got, _, _) = walk(&p, Some(want[mid].clone().into_bytes()), limit, 3).await;
        assert_eq!(
            got,
            want[mid + 1..mid + 1 + 3 * limit],
            "page size {limit}: middle"
        );
        // The last pages, to the end: `next` stops exactly there.
        let from = N - 3 * limit - 1;
        let (tail, pages, done) = walk(&p, Some(want[from].clone().into_bytes()), limit, 10).await;
        assert!(
            done && pages == 3,
            "page size {limit}: {pages} pages to the end"
        );
        assert_eq!(tail, want[from + 1..], "page size {limit}: last pages");
    }
}
