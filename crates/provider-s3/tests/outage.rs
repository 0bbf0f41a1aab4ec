//! The store going away and coming back: a bucket unreachable at start leaves the mount not
//! ready (and the mount still builds), the store stopped mid-test gives clear errors that
//! name the bucket and never the credentials, and everything recovers by itself. Also the
//! errors for a missing bucket, refused credentials, and a store that keeps throttling (a
//! loopback server answering `503 SlowDown`), and a store that answers `500 InternalError`
//! for a while then recovers (a loopback proxy in front of moto), under a subscription.
//! Each moto test runs its own moto, since it stops it.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{KEY_ID, SECRET, config, create_bucket, put, unique_bucket, writer};
use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeSink, Error, ErrorKind, LocalBus, PageRequest, Provider,
    ReadLimits, ResourceUri,
};
use mcpr_provider_s3::S3Provider;
use mcpr_testkit::moto::{Moto, binary_or_skip, free_port};

const BIG: ReadLimits = ReadLimits { max_bytes: 1 << 30 };

fn u(s: &str) -> ResourceUri {
    ResourceUri::parse(s).unwrap()
}

/// The error is clear about the bucket and leaks no key.
fn assert_clear(e: &Error, bucket: &str) {
    assert!(
        e.message.contains(bucket),
        "names the bucket: {}",
        e.message
    );
    let all = format!("{e:?}");
    assert!(
        !all.contains(KEY_ID) && !all.contains(SECRET),
        "leaks a credential: {all}"
    );
}

async fn ready_within(p: &S3Provider, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if p.ready().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_at_start_then_recovers() {
    let Some(bin) = binary_or_skip() else {
        return;
    };
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let bucket = unique_bucket("late");
    let p = S3Provider::new(config(&endpoint, &bucket))
        .await
        .expect("a store that is down at start does not fail the mount");
    assert!(!p.ready().await, "not ready while the store is down");
    let e = p
        .read(&u(&format!("s3://{bucket}/a.txt")), &BIG)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert_clear(&e, &bucket);
    assert!(e.message.contains("cannot be reached"), "{}", e.message);
    let e = p
        .list(PageRequest {
            after: None,
            limit: 10,
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert_clear(&e, &bucket);
    // The store comes up on that port: the mount serves without a restart.
    let mut m = Moto::start_on(bin, port);
    create_bucket(&endpoint, &bucket).await;
    put(&writer(&endpoint, &bucket), "a.txt", b"here").await;
    assert!(ready_within(&p, Duration::from_secs(10)).await);
    let c = p
        .read(&u(&format!("s3://{bucket}/a.txt")), &BIG)
        .await
        .unwrap()
        .contents;
    assert_eq!(c.len(), 1);
    m.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_mid_test_clear_errors_then_recovery() {
    let Some(bin) = binary_or_skip() else {
        return;
    };
    let mut m = Moto::start(bin);
    let endpoint = m.endpoint();
    let bucket = unique_bucket("outage");
    create_bucket(&endpoint, &bucket).await;
    put(&writer(&endpoint, &bucket), "w.txt", b"v1").await;
    let p = Arc::new(S3Provider::new(config(&endpoint, &bucket)).await.unwrap());
    assert!(p.ready().await);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let uri = format!("s3://{bucket}/w.txt");
    let _g = p
        .watch(&u(&uri), ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    m.stop();
    // Down: clear errors, not ready, and the watch stays silent (a failed check is not a
    // change).
    let started = Instant::now();
    let e = p.read(&u(&uri), &BIG).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert_clear(&e, &bucket);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "retries are bounded: {:?}",
        started.elapsed()
    );
    assert!(!p.ready().await);
    let quiet = tokio::time::timeout(Duration::from_millis(800), rx.recv()).await;
    assert!(
        quiet.is_err(),
        "no event while the store is down: {quiet:?}"
    );
    // Back (empty: moto keeps nothing), then the object is written again with new bytes.
    m.restart();
    create_bucket(&endpoint, &bucket).await;
    put(&writer(&endpoint, &bucket), "w.txt", b"v2 after the outage").await;
    assert!(ready_within(&p, Duration::from_secs(10)).await);
    let c = p.read(&u(&uri), &BIG).await.unwrap().contents;
    assert_eq!(c.len(), 1);
    // The watch recovers with backoff and reports the change it missed.
    let deadline = Duration::from_secs(10);
    match tokio::time::timeout(deadline, rx.recv()).await {
        Ok(Ok(ChangeEvent::Updated { uri: got })) => assert_eq!(got, uri),
        other => panic!("expected an update after recovery, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_bucket_is_named() {
    let Some(bin) = binary_or_skip() else {
        return;
    };
    let m = Moto::start(bin);
    let endpoint = m.endpoint();
    // No such bucket: the mount builds, is not ready, and says what is wrong.
    let bucket = unique_bucket("absent");
    let p = S3Provider::new(config(&endpoint, &bucket)).await.unwrap();
    assert!(!p.ready().await);
    let e = p
        .read(&u(&format!("s3://{bucket}/a.txt")), &BIG)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert!(e.message.contains("does not exist"), "{}", e.message);
    assert_clear(&e, &bucket);
    let e = p
        .list(PageRequest {
            after: None,
            limit: 5,
        })
        .await
        .unwrap_err();
    assert!(e.message.contains("does not exist"), "{}", e.message);
    assert_clear(&e, &bucket);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_named_never_shown() {
    let Some(bin) = binary_or_skip() else {
        return;
    };
    // With authentication on, moto refuses keys it does not know (InvalidAccessKeyId, and
    // its error body echoes the key id: the message must not).
    let m = Moto::start_checking_credentials(bin);
    let endpoint = m.endpoint();
    let bucket = unique_bucket("denied");
    let p = S3Provider::new(config(&endpoint, &bucket)).await.unwrap();
    assert!(!p.ready().await);
    let e = p
        .read(&u(&format!("s3://{bucket}/a.txt")), &BIG)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert!(e.message.contains("denied"), "{}", e.message);
    assert_clear(&e, &bucket);
    let e = p
        .list(PageRequest {
            after: None,
            limit: 5,
        })
        .await
        .unwrap_err();
    assert!(e.message.contains("denied"), "{}", e.message);
    assert_clear(&e, &bucket);
}

/// A loopback HTTP server that answers every request with S3's throttling error, counting
/// the requests.
fn slow_down_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 8192];
            let _ = stream.read(&mut buf);
            let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
            let _ = write!(
                stream,
                "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (endpoint, hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_after_retries_is_named() {
    let (endpoint, hits) = slow_down_server();
    let bucket = unique_bucket("throttled");
    let p = S3Provider::new(config(&endpoint, &bucket)).await.unwrap();
    // Let the start-up probe finish its retries before counting.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = hits.load(std::sync::atomic::Ordering::SeqCst);
    let started = Instant::now();
    let e = p
        .read(&u(&format!("s3://{bucket}/a.txt")), &BIG)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert!(e.message.contains("throttling"), "{}", e.message);
    assert_clear(&e, &bucket);
    let tries = hits.load(std::sync::atomic::Ordering::SeqCst) - before;
    assert_eq!(
        tries,
        1 + mcpr_provider_s3::MAX_RETRIES,
        "one request and its retries"
    );
    assert!(started.elapsed() < mcpr_provider_s3::RETRY_TIMEOUT);
    let e = p
        .list(PageRequest {
            after: None,
            limit: 5,
        })
        .await
        .unwrap_err();
    assert!(e.message.contains("throttling"), "{}", e.message);
}

/// A loopback proxy in front of moto that can answer every request with S3's
/// `500 InternalError` for a while ("failing"), counting those answers, then forward again.
struct Erroring {
    endpoint: String,
    failing: Arc<std::sync::atomic::AtomicBool>,
    answered_500: Arc<std::sync::atomic::AtomicUsize>,
    /// The forwarding connections, cut when the proxy starts failing: otherwise a client's
    /// kept-alive connection would still reach moto.
    conns: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Erroring {
    async fn start(moto_port: u16) -> Self {
        use std::sync::atomic::Ordering::SeqCst;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let me = Self {
            endpoint: format!("http://{}", l.local_addr().unwrap()),
            failing: Arc::default(),
            answered_500: Arc::default(),
            conns: Arc::default(),
        };
        let (failing, answered, conns) = (
            me.failing.clone(),
            me.answered_500.clone(),
            me.conns.clone(),
        );
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = l.accept().await {
                if !failing.load(SeqCst) {
                    let t = tokio::spawn(async move {
                        if let Ok(mut out) =
                            tokio::net::TcpStream::connect(("127.0.0.1", moto_port)).await
                        {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                        }
                    });
                    conns.lock().unwrap().push(t);
                    continue;
                }
                let answered = answered.clone();
                tokio::spawn(async move {
                    // The provider only reads: its requests have no body, so the end of the
                    // headers is the end of the request.
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match inbound.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    answered.fetch_add(1, SeqCst);
                    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message></Error>";
                    let head_only = head.starts_with(b"HEAD ");
                    let answer = format!(
                        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                        body.len(),
                        if head_only { "" } else { body }
                    );
                    let _ = inbound.write_all(answer.as_bytes()).await;
                    let _ = inbound.shutdown().await;
                });
            }
        });
        me
    }

    fn fail(&self, on: bool) {
        self.failing.store(on, std::sync::atomic::Ordering::SeqCst);
        if on {
            for c in self.conns.lock().unwrap().drain(..) {
                c.abort();
            }
        }
    }

    fn answered_500(&self) -> usize {
        self.answered_500.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The next update of `uri` within `within`, skipping other events.
async fn updated_within(
    rx: &mut tokio::sync::broadcast::Receiver<ChangeEvent>,
    uri: &str,
    within: Duration,
) -> bool {
    tokio::time::timeout(within, async {
        loop {
            match rx.recv().await {
                Ok(ChangeEvent::Updated { uri: got }) if got == uri => return,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("the change bus closed: {e}"),
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_errors_then_recovery_under_a_subscription() {
    let Some(bin) = binary_or_skip() else {
        return;
    };
    let m = Moto::start(bin);
    let bucket = unique_bucket("fivehundred");
    create_bucket(&m.endpoint(), &bucket).await;
    let store = writer(&m.endpoint(), &bucket);
    put(&store, "w.txt", b"v1").await;
    let proxy = Erroring::start(m.port()).await;
    let p = S3Provider::new(config(&proxy.endpoint, &bucket))
        .await
        .unwrap();
    assert!(ready_within(&p, Duration::from_secs(10)).await);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let uri = format!("s3://{bucket}/w.txt");
    let _g = p
        .watch(&u(&uri), ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    assert_eq!(p.read(&u(&uri), &BIG).await.unwrap().contents.len(), 1);

    proxy.fail(true);
    // Reads and listings: a clear error after the bounded retries, each of which got a 500.
    let before = proxy.answered_500();
    let started = Instant::now();
    let e = p.read(&u(&uri), &BIG).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a read against a failing store took {:?}",
        started.elapsed()
    );
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert_clear(&e, &bucket);
    assert!(
        e.message.contains("500"),
        "says what the store answered: {}",
        e.message
    );
    assert!(
        proxy.answered_500() - before > mcpr_provider_s3::MAX_RETRIES,
        "the read was retried: {} answers of 500",
        proxy.answered_500() - before
    );
    let e = p
        .list(PageRequest {
            after: None,
            limit: 5,
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    assert_clear(&e, &bucket);
    assert!(!p.ready().await, "not ready while every request fails");
    // The object changes while the store is failing: a failed check is not a change, and
    // the change itself is reported once the store answers again.
    while rx.try_recv().is_ok() {}
    put(&store, "w.txt", b"v2, written during the 500s").await;
    assert!(
        !updated_within(&mut rx, &uri, Duration::from_millis(1500)).await,
        "an update was reported while the store could not be asked"
    );

    proxy.fail(false);
    assert!(ready_within(&p, Duration::from_secs(10)).await);
    assert!(
        updated_within(&mut rx, &uri, Duration::from_secs(10)).await,
        "the change made during the 500s was not reported after recovery"
    );
    let c = p.read(&u(&uri), &BIG).await.unwrap().contents;
    assert_eq!(
        c[0].body,
        mcpr_core::ContentsBody::Text("v2, written during the 500s".into())
    );
    assert!(
        p.list(PageRequest {
            after: None,
            limit: 5
        })
        .await
        .is_ok()
    );
    // And the subscription keeps working for the next change.
    put(&store, "w.txt", b"v3").await;
    assert!(
        updated_within(&mut rx, &uri, Duration::from_secs(10)).await,
        "the subscription was lost in the outage"
    );
}
