//! `resources/list` over a bucket of 10,000 objects at page sizes 1, 7 and 1000: every key
//! exactly once, in key order, each page one request resuming with `start-after`.

mod common;

use std::time::Instant;

use common::{config, create_bucket, moto, put_many, unique_bucket, writer};
use mcpr_core::{PageRequest, Provider};
use mcpr_provider_s3::S3Provider;

const N: usize = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_objects_at_page_sizes_1_7_and_1000() {
    let Some(m) = moto() else { return };
    let bucket = unique_bucket("ten-k");
    create_bucket(&m.endpoint(), &bucket).await;
    let w = writer(&m.endpoint(), &bucket);
    // Keys whose order is not their insertion order, with a few nested ones.
    let keys: Vec<String> = (0..N)
        .map(|i| {
            let j = (i * 7919) % N;
            if j % 1000 == 0 {
                format!("d{:02}/sub/k{j:05}", j / 1000)
            } else {
                format!("d{:02}/k{j:05}", j / 1000)
            }
        })
        .collect();
    let started = Instant::now();
    put_many(&w, keys.iter().map(|k| (k.clone(), Vec::new())).collect()).await;
    eprintln!("created {N} objects in {:?}", started.elapsed());
    let mut want = keys.clone();
    want.sort();
    let p = S3Provider::new(config(&m.endpoint(), &bucket)).await.unwrap();
    for limit in [1000, 7, 1] {
        let started = Instant::now();
        let mut got: Vec<String> = Vec::with_capacity(N);
        let mut after = None;
        let mut pages = 0usize;
        loop {
            let page = p
                .list(PageRequest {
                    after: after.clone(),
                    limit,
                })
                .await
                .unwrap_or_else(|e| panic!("page {pages} at size {limit}: {e}"));
            assert!(page.items.len() <= limit, "a page over its limit");
            pages += 1;
            got.extend(page.items.into_iter().map(|i| i.name));
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        eprintln!("page size {limit}: {pages} pages in {:?}", started.elapsed());
        assert_eq!(got.len(), N, "page size {limit}: every key once");
        assert!(got == want, "page size {limit}: a gap, a duplicate or out of order");
        assert_eq!(pages, N.div_ceil(limit), "page size {limit}: full pages");
    }
}
