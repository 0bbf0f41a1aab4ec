//! What polling costs, counted on a loopback S3 stand-in that records every request: one
//! `HEAD` per interval per subscribed object however many subscribers and window URIs,
//! `If-None-Match` with the last ETag (answered 304), no request at all once the last
//! subscriber is gone, never more than the mount's `max_poll_requests_per_second`, and no
//! request for a change token.

mod common;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{config, unique_bucket};
use mcpr_core::{ChangeBus, ChangeEvent, ChangeSink, LocalBus, Provider, ResourceUri};
use mcpr_provider_s3::S3Provider;

/// The request lines (method and path) and whether each carried `If-None-Match`.
type Log = Arc<Mutex<Vec<(String, bool)>>>;

/// Every object's ETag (one for all, so a change changes every object).
type Etag = Arc<Mutex<String>>;

fn stand_in() -> (String, Log) {
    let (endpoint, log, _) = stand_in_with_etag();
    (endpoint, log)
}

/// Answers HEAD of any key with an object (ETag `"v1"` until the returned ETag is changed),
/// or 304 when `If-None-Match` names the current ETag; anything else (the start-up probe's
/// listing) with an empty listing.
fn stand_in_with_etag() -> (String, Log, Etag) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let log: Log = Arc::default();
    let etag: Etag = Arc::new(Mutex::new("v1".into()));
    let seen = log.clone();
    let current = etag.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let seen = seen.clone();
            let current = current.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One request at a time on a keep-alive connection: headers only.
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                    buf.drain(..end);
                    let line = head.lines().next().unwrap_or("").to_owned();
                    let tag = current.lock().unwrap().clone();
                    let inm = head.contains(&format!("if-none-match: \"{tag}\""));
                    seen.lock().unwrap().push((line.clone(), inm));
                    let reply = if line.starts_with("head ") && inm {
                        format!(
                            "HTTP/1.1 304 Not Modified\r\nETag: \"{tag}\"\r\nContent-Length: 0\r\n\r\n"
                        )
                    } else if line.starts_with("head ") {
                        format!(
                            "HTTP/1.1 200 OK\r\nETag: \"{tag}\"\r\nContent-Length: 2\r\nLast-Modified: Mon, 23 Nov 2026 10:00:00 GMT\r\n\r\n"
                        )
                    } else {
                        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>b</Name><KeyCount>0</KeyCount><MaxKeys>1</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>";
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        )
                    };
                    if stream.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (endpoint, log, etag)
}

fn heads(log: &Log, path: &str) -> Vec<bool> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(l, _)| l.starts_with("head ") && l.contains(path))
        .map(|(_, inm)| *inm)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_conditional_head_per_interval_shared_and_stopped_with_the_last_subscriber() {
    let (endpoint, log) = stand_in();
    let bucket = unique_bucket("polling");
    let mut cfg = config(&endpoint, &bucket);
    cfg.poll_interval = Duration::from_millis(200);
    let p = S3Provider::new(cfg).await.unwrap();
    let bus = Arc::new(LocalBus::default());
    let uri = ResourceUri::parse(&format!("s3://{bucket}/a.txt")).unwrap();
    let g1 = p
        .watch(&uri, ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    let g2 = p
        .watch(&uri, ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let seen = heads(&log, "/a.txt");
    // One first look (the second watch joins the poll), then one HEAD per 200 ms interval
    // (± jitter) for both subscribers together: about 10 in 2 s, where one poller per
    // subscriber would be 20.
    assert!(
        (6..=14).contains(&seen.len()),
        "{} HEADs in 2.1 s: {seen:?}",
        seen.len()
    );
    // After the first answer every check is conditional on the ETag it saw.
    assert!(
        seen[1..].iter().all(|&c| c),
        "checks without If-None-Match: {seen:?}"
    );
    drop(g1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        heads(&log, "/a.txt").len() > seen.len(),
        "one subscriber left: still polled"
    );
    drop(g2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopped = heads(&log, "/a.txt").len();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        heads(&log, "/a.txt").len(),
        stopped,
        "no request after the last subscriber left"
    );
}

/// The `updated` URIs heard so far.
fn updated(rx: &mut tokio::sync::broadcast::Receiver<ChangeEvent>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let ChangeEvent::Updated { uri } = e {
            out.push(uri);
        }
    }
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
async fn two_hundred_window_uris_of_one_object_are_one_head_per_interval_and_all_hear_a_change() {
    let (endpoint, log, etag) = stand_in_with_etag();
    let bucket = unique_bucket("windows");
    let mut cfg = config(&endpoint, &bucket);
    cfg.poll_interval = Duration::from_millis(200);
    let p = S3Provider::new(cfg).await.unwrap();
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    // Windows of every kind, and the same key spelled with a needless percent-encoding.
    let uris: Vec<String> = (0..200)
        .map(|i| match i % 4 {
            0 => format!("s3://{bucket}/logs/app.log?head={}", i + 1),
            1 => format!("s3://{bucket}/logs/app.log?tail={i}"),
            2 => format!("s3://{bucket}/logs/app.log?offset={i}&length=10"),
            _ => format!("s3://{bucket}/logs/app%2Elog?head={i}"),
        })
        .collect();
    let mut guards = Vec::new();
    for u in &uris {
        let uri = ResourceUri::parse(u).unwrap();
        guards.push(
            p.watch(&uri, ChangeSink::new(bus.clone(), "m0"))
                .await
                .unwrap(),
        );
    }
    let at_subscribe = heads(&log, "/logs/app.log").len();
    assert_eq!(at_subscribe, 1, "one first look for 200 URIs of one object");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let polled = heads(&log, "/logs/app.log").len() - at_subscribe;
    // About 10 HEADs in 2.1 s at a 200 ms interval, where a poll per URI would be 2,000.
    assert!(
        (6..=14).contains(&polled),
        "{polled} HEADs in 2.1 s for 200 URIs of one object"
    );
    assert_eq!(
        updated(&mut rx),
        Vec::<String>::new(),
        "nothing changed yet"
    );
    *etag.lock().unwrap() = "v2".into();
    let mut want = uris.clone();
    want.sort();
    assert_eq!(
        heard_within(&mut rx, want.len(), Duration::from_secs(5)).await,
        want,
        "every subscribed URI is told of the change, once"
    );
    drop(guards);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_objects_stay_under_the_mounts_request_cap_and_the_throttling_is_counted() {
    let (endpoint, log, etag) = stand_in_with_etag();
    let bucket = unique_bucket("capped");
    let mut cfg = config(&endpoint, &bucket);
    cfg.poll_interval = Duration::from_millis(100);
    cfg.max_poll_requests_per_second = 20;
    let p = S3Provider::new(cfg).await.unwrap();
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let uris: Vec<String> = (0..60)
        .map(|i| format!("s3://{bucket}/k/{i}.json"))
        .collect();
    let mut guards = Vec::new();
    for u in &uris {
        let uri = ResourceUri::parse(u).unwrap();
        guards.push(
            p.watch(&uri, ChangeSink::new(bus.clone(), "m0"))
                .await
                .unwrap(),
        );
    }
    let all_heads = |log: &Log| heads(log, "/k/").len();
    // One first look each, and whatever polling began while the later ones subscribed.
    let at_subscribe = all_heads(&log);
    assert!(at_subscribe >= 60, "{at_subscribe}");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let polled = all_heads(&log) - at_subscribe;
    // 60 objects every 100 ms would be 1,800 HEADs in 3 s; the cap allows a second's burst
    // (20) and 20 a second (60), with one round of slack for timing.
    assert!(
        (30..=85).contains(&polled),
        "{polled} HEADs in 3 s under a cap of 20 a second"
    );
    let throttled = p
        .counters()
        .into_iter()
        .find(|c| c.name == "mcp_poll_throttled_total")
        .expect("the mount exports mcp_poll_throttled_total")
        .value;
    assert!(throttled >= 40, "deferred checks counted: {throttled}");
    // A change still reaches every object's subscriber: the capped rounds go round all 60
    // objects in about 3 s.
    *etag.lock().unwrap() = "v2".into();
    let mut want = uris.clone();
    want.sort();
    assert_eq!(
        heard_within(&mut rx, want.len(), Duration::from_secs(10)).await,
        want,
        "every object's change is reported"
    );
    drop(guards);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_tokens_cost_no_request() {
    let (endpoint, log, etag) = stand_in_with_etag();
    let bucket = unique_bucket("tokens");
    let mut cfg = config(&endpoint, &bucket);
    // No poll while the tokens are counted: every HEAD seen is the first look's.
    cfg.poll_interval = Duration::from_secs(60);
    let p = S3Provider::new(cfg).await.unwrap();
    let bus = Arc::new(LocalBus::default());
    let uri = ResourceUri::parse(&format!("s3://{bucket}/a.txt")).unwrap();
    let other = ResourceUri::parse(&format!("s3://{bucket}/b.txt")).unwrap();
    let g = p
        .watch(&uri, ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    assert_eq!(heads(&log, "/a.txt").len(), 1, "the first look");
    let t = p.change_token(&uri).await.expect("subscribed");
    *etag.lock().unwrap() = "v2".into();
    for _ in 0..100 {
        // What the poll saw, though the store holds another ETag by now.
        assert_eq!(p.change_token(&uri).await.as_ref(), Some(&t));
        assert_eq!(p.change_token(&other).await, None);
    }
    assert_eq!(heads(&log, "/a.txt").len(), 1, "no HEAD for a token");
    assert!(heads(&log, "/b.txt").is_empty());
    drop(g);
}
