//! What polling costs, counted at a real upstream on loopback: URIs that fetch one upstream
//! URL are one request per interval however many of them are subscribed, a mount never polls
//! faster than its `max_poll_requests_per_second` (and counts what it deferred), and a change
//! still reaches every subscribed URI.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Doc, TestResolver, Upstream, loopback};
use mcpr_core::{ChangeBus, ChangeEvent, ChangeSink, LocalBus, Provider, ResourceUri};
use mcpr_provider_http::{Endpoint, HttpConfig, HttpProvider};

fn uri(s: &str) -> ResourceUri {
    ResourceUri::parse(s).unwrap()
}

fn provider(c: HttpConfig) -> HttpProvider {
    HttpProvider::with_network(c, Arc::new(TestResolver), loopback()).unwrap()
}

fn doc(v: u32) -> Doc {
    Doc {
        etag: Some(format!("\"{v}\"")),
        ..Doc::new("application/json", format!(r#"{{"v":{v}}}"#))
    }
}

/// The `updated` URIs heard so far, sorted.
fn updated(rx: &mut tokio::sync::broadcast::Receiver<ChangeEvent>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let ChangeEvent::Updated { uri } = e {
            out.push(uri);
        }
    }
    out.sort();
    out
}

/// The `updated` URIs heard until `n` distinct ones came or `limit` passed, sorted.
async fn heard_within(
    rx: &mut tokio::sync::broadcast::Receiver<ChangeEvent>,
    n: usize,
    limit: Duration,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut all = Vec::new();
    let distinct = |all: &Vec<String>| all.iter().collect::<std::collections::BTreeSet<_>>().len();
    while distinct(&all) < n && tokio::time::Instant::now() < deadline {
        all.extend(updated(rx));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A second notification of one URI would show here, and fail the comparison.
    tokio::time::sleep(Duration::from_millis(300)).await;
    all.extend(updated(rx));
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_uris_of_one_upstream_url_are_one_request_per_interval_and_all_hear_a_change() {
    let up = Upstream::start().await;
    up.set("/w/paris", doc(1));
    // `view` is part of the URI but not of the URL: every value fetches the same document.
    let mut c = HttpConfig::api(
        "w",
        vec![Endpoint::new(
            "api://w/{city}{?view}",
            format!("{}/w/{{city}}", up.base()),
        )],
    );
    c.poll_interval = Duration::from_millis(200);
    let p = provider(c);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    // Query values, and the city spelled with a needless percent-encoding.
    let mut uris: Vec<String> = (0..199)
        .map(|i| format!("api://w/paris?view={i}"))
        .collect();
    uris.push("api://w/p%61ris".into());
    let mut guards = Vec::new();
    for u in &uris {
        guards.push(
            p.watch(&uri(u), ChangeSink::new(bus.clone(), "m0"))
                .await
                .unwrap(),
        );
    }
    let at_subscribe = up.count("/w/paris");
    assert_eq!(at_subscribe, 1, "one first look for 200 URIs of one URL");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let polled = up.count("/w/paris") - at_subscribe;
    // About 10 GETs in 2.1 s at a 200 ms interval (± 20 % jitter), where a poll per URI
    // would be 2,000.
    assert!(
        (6..=15).contains(&polled),
        "{polled} GETs in 2.1 s for 200 URIs of one URL"
    );
    assert_eq!(
        updated(&mut rx),
        Vec::<String>::new(),
        "nothing changed yet"
    );
    up.set("/w/paris", doc(2));
    uris.sort();
    assert_eq!(
        heard_within(&mut rx, uris.len(), Duration::from_secs(5)).await,
        uris,
        "every subscribed URI hears the change, once"
    );
    drop(guards);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_upstream_urls_stay_under_the_mounts_request_cap_and_the_throttling_is_counted() {
    let up = Upstream::start().await;
    for i in 0..60 {
        up.set(&format!("/w/c{i}"), doc(1));
    }
    let mut c = HttpConfig::api(
        "w",
        vec![Endpoint::new(
            "api://w/{city}",
            format!("{}/w/{{city}}", up.base()),
        )],
    );
    c.poll_interval = Duration::from_millis(100);
    c.max_poll_requests_per_second = 20;
    let p = provider(c);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let mut uris: Vec<String> = (0..60).map(|i| format!("api://w/c{i}")).collect();
    let mut guards = Vec::new();
    for u in &uris {
        guards.push(
            p.watch(&uri(u), ChangeSink::new(bus.clone(), "m0"))
                .await
                .unwrap(),
        );
    }
    // One first look each, and whatever polling began while the later ones subscribed.
    let at_subscribe = up.count("/w/c");
    assert!(at_subscribe >= 60, "{at_subscribe}");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let polled = up.count("/w/c") - at_subscribe;
    // 60 URLs every 100 ms would be 1,800 GETs in 3 s; the cap allows a second's burst (20)
    // and 20 a second (60), with one round of slack for timing.
    assert!(
        (30..=85).contains(&polled),
        "{polled} GETs in 3 s under a cap of 20 a second"
    );
    let throttled = p
        .counters()
        .into_iter()
        .find(|c| c.name == "mcp_poll_throttled_total")
        .expect("the mount exports mcp_poll_throttled_total")
        .value;
    assert!(throttled >= 40, "deferred checks counted: {throttled}");
    // A change still reaches every URL's subscriber: the capped rounds go round all 60 in
    // about 3 s.
    for i in 0..60 {
        up.set(&format!("/w/c{i}"), doc(2));
    }
    uris.sort();
    assert_eq!(
        heard_within(&mut rx, uris.len(), Duration::from_secs(10)).await,
        uris,
        "every URL's change is reported"
    );
    drop(guards);
}
