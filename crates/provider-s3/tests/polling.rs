//! What polling costs, counted on a loopback S3 stand-in that records every request: one
//! `HEAD` per interval per subscribed key however many subscribers, `If-None-Match` with the
//! last ETag (answered 304), and no request at all once the last subscriber is gone.

mod common;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{config, unique_bucket};
use mcpr_core::{ChangeSink, LocalBus, Provider, ResourceUri};
use mcpr_provider_s3::S3Provider;

/// The request lines (method and path) and whether each carried `If-None-Match`.
type Log = Arc<Mutex<Vec<(String, bool)>>>;

/// Answers HEAD with an object (ETag `"v1"`), or 304 when `If-None-Match` names it; anything
/// else (the start-up probe's listing) with an empty listing.
fn stand_in() -> (String, Log) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let log: Log = Arc::default();
    let seen = log.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let seen = seen.clone();
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
                    let inm = head.contains("if-none-match: \"v1\"");
                    seen.lock().unwrap().push((line.clone(), inm));
                    let reply = if line.starts_with("head ") && inm {
                        "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 0\r\n\r\n"
                            .to_owned()
                    } else if line.starts_with("head ") {
                        "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nContent-Length: 2\r\nLast-Modified: Mon, 23 Nov 2026 10:00:00 GMT\r\n\r\n".to_owned()
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
    (endpoint, log)
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
    // Two first looks (one per watch call), then one HEAD per 200 ms interval (± jitter) for
    // both subscribers together: about 10 in 2 s, where one poller per subscriber would be 20.
    assert!(
        (6..=14).contains(&seen.len()),
        "{} HEADs in 2.1 s: {seen:?}",
        seen.len()
    );
    // After the first answer every check is conditional on the ETag it saw.
    assert!(
        seen[2..].iter().all(|&c| c),
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
