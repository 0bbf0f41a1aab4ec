//! A real HTTP upstream on loopback (axum) for the provider's tests: documents whose body,
//! type and validators the test sets and changes, request counting per path, 304 answers to
//! matching conditional requests, redirects, any status, slow and chunked bodies, and an
//! `/echo/` route answering with the raw request line it received. Every request's line and
//! headers are recorded.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mcpr_provider_http::HostResolver;

/// What the upstream serves at one path.
#[derive(Clone, Default)]
pub struct Doc {
    pub body: Vec<u8>,
    pub content_type: String,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub cache_control: Option<String>,
    /// Send without Content-Length, in chunks of this many bytes.
    pub chunked: Option<usize>,
    /// Wait this long before each chunk.
    pub delay: Duration,
    /// Answer with this status (and a `Location` when set) instead of the body.
    pub status: Option<u16>,
    pub location: Option<String>,
    /// A chunked body that never ends (1 KiB chunks of `x`).
    pub endless: bool,
}

impl Doc {
    pub fn new(content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            body: body.into(),
            content_type: content_type.into(),
            ..Self::default()
        }
    }
}

/// One request as the upstream saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// `GET /path?query HTTP/1.1`, the target exactly as sent.
    pub line: String,
    pub headers: Vec<(String, String)>,
}

#[derive(Default)]
pub struct St {
    pub docs: Mutex<HashMap<String, Doc>>,
    pub seen: Mutex<Vec<Seen>>,
}

/// The running upstream.
pub struct Upstream {
    pub addr: SocketAddr,
    pub state: Arc<St>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    pub async fn start() -> Self {
        let state = Arc::new(St::default());
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { addr, state, task }
    }

    /// `http://up.test:PORT` (the test resolver maps `up.test` to loopback).
    pub fn base(&self) -> String {
        format!("http://up.test:{}", self.addr.port())
    }

    pub fn set(&self, path: &str, doc: Doc) {
        self.state.docs.lock().unwrap().insert(path.into(), doc);
    }

    pub fn update(&self, path: &str, f: impl FnOnce(&mut Doc)) {
        let mut docs = self.state.docs.lock().unwrap();
        f(docs.get_mut(path).expect("doc exists"));
    }

    /// Requests whose line contains `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.state
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.line.contains(needle))
            .count()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    pub fn total(&self) -> usize {
        self.state.seen.lock().unwrap().len()
    }
}

async fn handle(State(st): State<Arc<St>>, req: Request) -> Response {
    let line = format!("{} {} {:?}", req.method(), req.uri(), req.version());
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
        .collect();
    st.seen.lock().unwrap().push(Seen {
        line: line.clone(),
        headers,
    });
    let path = req.uri().path().to_owned();
    if path.starts_with("/echo/") {
        return ([(header::CONTENT_TYPE, "text/plain")], line).into_response();
    }
    let Some(doc) = st.docs.lock().unwrap().get(&path).cloned() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if let Some(code) = doc.status {
        let mut r = Response::new(Body::from(format!("upstream error page {code}")));
        *r.status_mut() = StatusCode::from_u16(code).unwrap();
        if let Some(l) = &doc.location {
            r.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_str(l).unwrap());
        }
        return r;
    }
    let inm = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());
    let ims = req
        .headers()
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok());
    let not_modified = match (&doc.etag, inm, &doc.last_modified, ims) {
        (Some(e), Some(i), _, _) => e == i,
        (_, None, Some(l), Some(i)) => l == i,
        _ => false,
    };
    let mut r = if not_modified {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else if doc.endless {
        let stream = futures::stream::repeat_with(|| {
            Ok::<_, std::io::Error>(axum::body::Bytes::from(vec![b'x'; 1024]))
        });
        Response::new(Body::from_stream(stream))
    } else if let Some(n) = doc.chunked {
        let chunks: Vec<Vec<u8>> = doc.body.chunks(n.max(1)).map(<[u8]>::to_vec).collect();
        let delay = doc.delay;
        let stream = futures::stream::unfold(chunks.into_iter(), move |mut it| async move {
            let c = it.next()?;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Some((Ok::<_, std::io::Error>(bytes_of(c)), it))
        });
        Response::new(Body::from_stream(stream))
    } else {
        Response::new(Body::from(doc.body.clone()))
    };
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&doc.content_type).unwrap(),
    );
    if let Some(e) = &doc.etag {
        h.insert(header::ETAG, HeaderValue::from_str(e).unwrap());
    }
    if let Some(l) = &doc.last_modified {
        h.insert(header::LAST_MODIFIED, HeaderValue::from_str(l).unwrap());
    }
    if let Some(c) = &doc.cache_control {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_str(c).unwrap());
    }
    r
}

fn bytes_of(v: Vec<u8>) -> axum::body::Bytes {
    axum::body::Bytes::from(v)
}

/// Maps test names to addresses: `up.test` → 127.0.0.1, `private.test` → 10.0.0.7,
/// `meta.test` → 169.254.169.254, `mixed.test` → 10.0.0.7 and 127.0.0.1.
pub struct TestResolver;

#[async_trait]
impl HostResolver for TestResolver {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        match host {
            "up.test" => Ok(vec![v4(127, 0, 0, 1)]),
            "private.test" => Ok(vec![v4(10, 0, 0, 7)]),
            "meta.test" => Ok(vec![v4(169, 254, 169, 254)]),
            "mapped.test" => Ok(vec!["::ffff:127.0.0.1".parse().unwrap()]),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no such test host {host}"),
            )),
        }
    }
}

/// Loopback, the one non-public address the tests exempt so the upstream is reachable.
pub fn loopback() -> Vec<IpAddr> {
    vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]
}
