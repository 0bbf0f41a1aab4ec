//! Fault injection on an api mount: an upstream that hangs before answering, resets the
//! connection, or answers bytes that are not HTTP, each in turn under a subscription, then
//! recovers. Each fault must be a clear error within the mount's timeout, and the
//! subscription made before the faults must report the upstream's next change once it is
//! healthy again. A host that hangs puts the mount out (its listing and readiness fail
//! naming the host) until it answers again, costing nothing to the mount's other host.
//!
//! The upstream is a raw TCP server rather than the axum one in `common/`, since these
//! faults are exactly what a well-behaved HTTP server cannot be made to do.

mod common;

use std::future::Future;
use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{TestResolver, loopback};
use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeSink, ContentsBody, ErrorKind, LocalBus, Provider, ReadLimits,
    ResourceUri,
};
use mcpr_provider_http::{Endpoint, HttpConfig, HttpProvider};

const HEALTHY: u8 = 0;
const HANG: u8 = 1;
const RESET: u8 = 2;
const GARBAGE: u8 = 3;

/// The upstream: its behaviour for the next connections, and the document version it
/// serves when healthy.
struct Faulty {
    port: u16,
    mode: Arc<AtomicU8>,
    version: Arc<AtomicU64>,
    /// Requests received so far.
    requests: Arc<AtomicU64>,
}

impl Faulty {
    fn start() -> Self {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (mode, version) = (
            Arc::new(AtomicU8::new(HEALTHY)),
            Arc::new(AtomicU64::new(1)),
        );
        let requests = Arc::new(AtomicU64::new(0));
        let (m, v, r) = (mode.clone(), version.clone(), requests.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut s) = conn else { return };
                let (m, v, r) = (m.clone(), v.clone(), r.clone());
                std::thread::spawn(move || serve(&mut s, &m, &v, &r));
            }
        });
        Self {
            port,
            mode,
            version,
            requests,
        }
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }
}

/// One connection: requests until the client closes it (keep-alive), each answered
/// according to the mode at the time it arrives.
fn serve(s: &mut std::net::TcpStream, mode: &AtomicU8, version: &AtomicU64, requests: &AtomicU64) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if mode.load(Ordering::SeqCst) == RESET {
            // Closing a socket whose received data was never read makes the kernel answer
            // with a RST rather than a FIN: wait for the request, leave it unread, close.
            let _ = s.peek(&mut chunk);
            return;
        }
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.clear();
        requests.fetch_add(1, Ordering::SeqCst);
        match mode.load(Ordering::SeqCst) {
            HANG => {
                // Hold the connection without a byte of answer, well past the mount's timeout.
                std::thread::sleep(Duration::from_secs(20));
                return;
            }
            GARBAGE => {
                let _ = s.write_all(b"\x00\xff\xfeSSH-2.0-not-http\r\n\r\n\x1b[31mgarbage");
                return;
            }
            _ => {
                let v = version.load(Ordering::SeqCst);
                let body = format!("{{\"version\":{v}}}");
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\netag: \"{v}\"\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_hangs_resets_and_answers_garbage_then_recovers() {
    let up = Faulty::start();
    let mut c = HttpConfig::api(
        "f",
        vec![Endpoint::new(
            "api://f/doc",
            format!("http://up.test:{}/doc", up.port),
        )],
    );
    c.timeout = Duration::from_millis(800);
    c.poll_interval = Duration::from_millis(100);
    // Every read goes to the upstream: a cached answer would hide the faults.
    c.default_ttl = Duration::ZERO;
    let p = HttpProvider::with_network(c, Arc::new(TestResolver), loopback()).unwrap();
    let uri = ResourceUri::parse("api://f/doc").unwrap();
    let limits = ReadLimits { max_bytes: 1 << 20 };
    let text = |c: Vec<mcpr_core::Contents>| match &c[0].body {
        ContentsBody::Text(t) => t.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        text(p.read(&uri, &limits).await.unwrap().contents),
        r#"{"version":1}"#
    );
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let _g = p
        .watch(&uri, ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    for (mode, name, kind, words) in [
        (HANG, "hangs", ErrorKind::Timeout, "timed out after 800 ms"),
        (RESET, "resets", ErrorKind::Unavailable, "up.test"),
        (
            GARBAGE,
            "answers garbage",
            ErrorKind::Unavailable,
            "up.test",
        ),
    ] {
        up.set(mode);
        let started = Instant::now();
        let e = tokio::time::timeout(Duration::from_secs(5), p.read(&uri, &limits))
            .await
            .unwrap_or_else(|_| panic!("a read hung while the upstream {name}"))
            .expect_err(name);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the upstream {name}: the error took {:?}",
            started.elapsed()
        );
        assert_eq!(e.kind, kind, "the upstream {name}: {e}");
        assert!(e.message.contains(words), "the upstream {name}: {e}");
        // The polls fail too; they must not be reported as changes.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    while let Ok(ev) = rx.try_recv() {
        assert!(
            !matches!(ev, ChangeEvent::Updated { .. }),
            "a failed poll was reported as a change"
        );
    }

    // Healthy again, with a new version: the subscription from before reports it.
    up.version.store(2, Ordering::SeqCst);
    up.set(HEALTHY);
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Ok(ChangeEvent::Updated { uri: u }) = rx.recv().await {
                return u;
            }
        }
    })
    .await;
    assert_eq!(
        got.ok().as_deref(),
        Some("api://f/doc"),
        "the subscription did not survive the faults"
    );
    assert_eq!(
        text(p.read(&uri, &limits).await.unwrap().contents),
        r#"{"version":2}"#
    );
}

/// `until` true within `within`, asked every 50 ms; how long it took.
async fn within<F: Future<Output = bool>>(
    within: Duration,
    mut until: impl FnMut() -> F,
) -> Duration {
    let began = Instant::now();
    while !until().await {
        assert!(began.elapsed() < within, "not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    began.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_hangs_is_out_until_it_answers_and_costs_only_itself() {
    // Two hosts: one name, two ports.
    let up = Faulty::start();
    let other = Faulty::start();
    let mut c = HttpConfig::api(
        "f",
        vec![
            Endpoint::new("api://f/doc", format!("http://up.test:{}/doc", up.port)),
            Endpoint::new(
                "api://f/items/{id}",
                format!("http://up.test:{}/items/{{id}}", up.port),
            ),
            Endpoint::new(
                "api://f/other",
                format!("http://up.test:{}/other", other.port),
            ),
        ],
    );
    c.timeout = Duration::from_millis(800);
    c.default_ttl = Duration::ZERO;
    let p = HttpProvider::with_network(c, Arc::new(TestResolver), loopback()).unwrap();
    let limits = ReadLimits { max_bytes: 1 << 20 };
    let uri = |u: &str| ResourceUri::parse(u).unwrap();
    let first = mcpr_core::PageRequest {
        after: None,
        limit: 10,
    };

    // The first readiness check asks each host once (nothing has asked them yet); while
    // they answer, listings and further checks ask nothing.
    p.readiness().await.unwrap();
    within(Duration::from_secs(3), || async {
        (up.requests(), other.requests()) == (1, 1)
    })
    .await;
    p.read(&uri("api://f/items/7"), &limits).await.unwrap();
    for _ in 0..5 {
        assert_eq!(p.list(first.clone()).await.unwrap().items.len(), 2);
        p.readiness().await.unwrap();
    }
    assert_eq!((up.requests(), other.requests()), (2, 1));

    // A read its caller gives up on before the mount's own timeout (the server's request
    // timeout can be the shorter): the probe resource is read on its own, times out, and
    // the host is out.
    up.set(HANG);
    let given_up = tokio::time::timeout(
        Duration::from_millis(200),
        p.read(&uri("api://f/items/8"), &limits),
    )
    .await;
    assert!(given_up.is_err(), "the read answered: {given_up:?}");
    let noticed = within(Duration::from_secs(5), || async {
        p.readiness().await.is_err()
    })
    .await;
    let e = p.readiness().await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(
        e.message.contains(&format!(
            "the upstream http://up.test:{} has been unavailable",
            up.port
        )) && e.message.contains("api://f/doc")
            && e.message.contains("timed out after 800 ms")
            && !e.message.contains(&format!("up.test:{}", other.port)),
        "{e}"
    );
    // The listing fails with the same reason, without waiting on the host for long.
    let began = Instant::now();
    let listed = p.list(first.clone()).await.unwrap_err();
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(listed.kind, ErrorKind::Unavailable);
    assert!(
        listed.message.contains(&format!("up.test:{}", up.port)),
        "{listed}"
    );
    // The other host's endpoint reads on.
    p.read(&uri("api://f/other"), &limits).await.unwrap();
    // Probes of the host are one at a time and at most one a second, however often asked.
    let (before, began) = (up.requests(), Instant::now());
    for _ in 0..10 {
        let _ = p.list(first.clone()).await;
    }
    let probes = up.requests() - before;
    let most = began.elapsed().as_secs_f64().ceil() as u64 + 1;
    assert!(
        probes <= most,
        "{probes} probes for 10 listings in {:?}",
        began.elapsed()
    );

    // Healthy again: the next listing's probe answers, the mount lists and is ready, with no
    // read in between.
    up.set(HEALTHY);
    let back = within(Duration::from_secs(4), || async {
        p.list(first.clone()).await.is_ok()
    })
    .await;
    p.readiness().await.unwrap();
    p.read(&uri("api://f/doc"), &limits).await.unwrap();
    eprintln!("noticed out in {noticed:?} after the check began, back in {back:?}");
}
