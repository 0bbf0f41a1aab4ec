//! A store that lies about lengths (a compromised endpoint, a path with `allow_http`): a
//! loopback stand-in whose bodies go on far past what was asked for or announced. Each read
//! stops at its limit while the body streams (the stand-in counts what it managed to send
//! before the connection was dropped) and answers a clear error; nothing is served.

mod common;

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::config;
use mcpr_core::{ErrorKind, PageRequest, Provider, ReadLimits, ResourceUri};
use mcpr_provider_s3::S3Provider;

const BUCKET: &str = "liar";
/// What the stand-in would send of a lying body at most (the reads must stop long before).
const LIE: u64 = 1 << 30;
/// The object's real size, as its `HEAD` says.
const SIZE: u64 = 100;
const LIMITS: ReadLimits = ReadLimits { max_bytes: 8 << 20 };

/// Bytes of body the stand-in sent, per request path.
type Sent = Arc<Mutex<HashMap<String, u64>>>;

/// The stand-in: `HEAD /liar/obj` tells the truth (100 bytes); every body it sends lies:
/// a ranged GET of `obj` answers the range asked for in `Content-Range` and then 1 GiB;
/// `GET /liar/small` announces 10 bytes and streams 1 GiB (chunked); a listing streams
/// 1 GiB; `GET /liar/err` is a 403 whose body is 1 GiB.
fn liar() -> (String, Sent) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let sent: Sent = Arc::default();
    let s = sent.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let s = s.clone();
            std::thread::spawn(move || serve(stream, &s));
        }
    });
    (endpoint, sent)
}

const DATED: &str = "ETag: \"e1\"\r\nLast-Modified: Wed, 25 Nov 2026 10:00:00 GMT\r\n";

fn serve(mut s: TcpStream, sent: &Sent) {
    let mut head = Vec::new();
    let mut b = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or_default().split(' ');
    let method = first.next().unwrap_or_default().to_owned();
    let target = first.next().unwrap_or_default().to_owned();
    let path = target.split('?').next().unwrap_or_default().to_owned();
    let range = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("range"))
        .and_then(|(_, v)| v.trim().strip_prefix("bytes="))
        .and_then(|r| r.split_once('-'))
        .map(|(a, z)| (a.parse::<u64>().unwrap(), z.parse::<u64>().unwrap()));
    let obj = format!("/{BUCKET}/obj");
    let small = format!("/{BUCKET}/small");
    let err = format!("/{BUCKET}/err");
    let n = match (method.as_str(), path.as_str(), range) {
        ("HEAD", p, _) if p == obj => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\n{DATED}Connection: close\r\n\r\n"
            );
            return;
        }
        ("GET", p, Some((a, z))) if p == obj => {
            let _ = write!(
                s,
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{z}/{SIZE}\r\nContent-Length: {LIE}\r\n{DATED}Connection: close\r\n\r\n"
            );
            endless(&mut s, false)
        }
        ("GET", p, None) if p == small => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n{DATED}Connection: close\r\n\r\n"
            );
            endless(&mut s, true)
        }
        ("GET", p, None) if p == err => {
            let _ = write!(
                s,
                "HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            );
            endless(&mut s, true)
        }
        ("GET", p, None) if p == format!("/{BUCKET}") => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            );
            endless(&mut s, true)
        }
        _ => {
            let _ = write!(
                s,
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            return;
        }
    };
    *sent.lock().unwrap().entry(path).or_default() += n;
}

/// Up to [`LIE`] bytes of body, until the reader goes away; how many were sent.
fn endless(s: &mut TcpStream, chunked: bool) -> u64 {
    let block = vec![b'x'; 64 * 1024];
    let mut n = 0u64;
    while n < LIE {
        let ok = if chunked {
            write!(s, "{:x}\r\n", block.len()).is_ok()
                && s.write_all(&block).is_ok()
                && s.write_all(b"\r\n").is_ok()
        } else {
            s.write_all(&block).is_ok()
        };
        if !ok {
            break;
        }
        n += block.len() as u64;
    }
    n
}

fn u(s: &str) -> ResourceUri {
    ResourceUri::parse(s).unwrap()
}

/// How much of a lying body may be sent before the reader's drop is seen: socket buffers
/// on loopback, not the body.
const SEEN_WITHIN: u64 = 64 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_longer_than_asked_are_refused_while_streaming() {
    let (endpoint, sent) = liar();
    let p = S3Provider::new(config(&endpoint, BUCKET)).await.unwrap();
    let started = Instant::now();

    // Ranged GETs: a 10-byte window, a `head` (the whole 100 bytes as one range), a `tail`.
    for (uri, asked) in [
        (format!("s3://{BUCKET}/obj?offset=0&length=10"), 10),
        (format!("s3://{BUCKET}/obj?head=3"), SIZE),
        (format!("s3://{BUCKET}/obj?tail=2"), SIZE),
    ] {
        let e = p.read(&u(&uri), &LIMITS).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{uri}: {}", e.message);
        assert!(
            e.message
                .contains(&format!("more than the {asked} bytes asked for")),
            "{uri}: {}",
            e.message
        );
        assert!(e.message.contains(BUCKET), "{uri}: {}", e.message);
    }
    // A whole GET whose body goes on past the length its headers announced.
    let e = p
        .read(&u(&format!("s3://{BUCKET}/small")), &LIMITS)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert!(
        e.message
            .contains("more than the 10 bytes its headers announced"),
        "{}",
        e.message
    );
    // A listing that never ends.
    let e = p
        .list(PageRequest {
            after: None,
            limit: 10,
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert!(e.message.contains("longer than 8 MiB"), "{}", e.message);
    // An error answer that never ends (object_store reads those whole for its message).
    let e = p
        .read(&u(&format!("s3://{BUCKET}/err")), &LIMITS)
        .await
        .unwrap_err();
    assert!(e.message.contains("longer than 64 KiB"), "{}", e.message);

    // Every lying body was dropped early: the stand-in could send little of its 1 GiB.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = sent.lock().unwrap().clone();
    for path in ["obj", "small", "err", ""] {
        let key = format!("/{BUCKET}/{path}");
        let key = key.trim_end_matches('/');
        let n = *sent
            .get(key)
            .unwrap_or_else(|| panic!("{key} was requested: {sent:?}"));
        assert!(n < 3 * SEEN_WITHIN, "{key}: {n} bytes sent");
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}
