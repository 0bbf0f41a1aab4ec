//! The HTTP floor: the least a server must do to answer our HTTP read, so our
//! figures have something to be measured against on the same machine.
//!
//! A minimal hyper 1.x server on the same runtime shape as `mcp-resources` (tokio,
//! multi-thread, 2 workers; keep-alive; `TCP_NODELAY`) that answers every POST by parsing
//! the JSON-RPC body, reading the file with the four calls any reader needs (`openat`,
//! `fstat`, `read`, `close`, as `min-file-echo` does) and writing the same
//! `application/json` answer `mcp-resources` writes for a 2026-07-28 `resources/read`. No
//! routing, no header checks, no URI resolution, sandbox or rules, no era or `_meta` checks:
//! what is left between it and us is what our server does beyond answering.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

/// What every request needs: the directory the file is opened in, the file, its type.
struct Floor {
    root: OwnedFd,
    file: String,
    mime: String,
}

/// Serve on `addr` until killed.
pub fn serve(addr: &str, dir: &str, file: &str, mime: &str) -> Result<(), String> {
    let addr: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let root = crate::floor_io::open_dir(dir)?;
    let floor = Arc::new(Floor {
        root,
        file: file.to_owned(),
        mime: mime.to_owned(),
    });
    // The shape `mcp-resources serve` runs with (crates/cli `main`).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("bind {addr}: {e}"))?;
        loop {
            let (tcp, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("mcpr-bench http-floor: accept: {e}");
                    continue;
                }
            };
            // As ours: small answers go out at once, not after the client's delayed ACK.
            let _ = tcp.set_nodelay(true);
            let floor = floor.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let floor = floor.clone();
                    async move { Ok::<_, Infallible>(floor.answer(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
        }
    })
}

impl Floor {
    async fn answer(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() != Method::POST {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "POST only\n");
        }
        let body = match req.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("body: {e}\n")),
        };
        let request: serde_json::Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return plain(StatusCode::BAD_REQUEST, &format!("not JSON: {e}\n")),
        };
        let (Some(id), Some(uri)) = (
            request.get("id"),
            request.pointer("/params/uri").and_then(|u| u.as_str()),
        ) else {
            return plain(StatusCode::BAD_REQUEST, "no id or params.uri\n");
        };
        let text = match read_file(&self.root, &self.file) {
            Ok(t) => t,
            Err(e) => return plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
        };
        let mut out = Vec::with_capacity(text.len() + 256);
        if let Err(e) = read_answer(id, uri, &self.mime, &text, &mut out) {
            return plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n"));
        }
        Response::builder()
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(out)))
            .expect("valid response")
    }
}

/// `file` beneath `root` with `openat`, `fstat` for the size, `read`, `close`, as text.
fn read_file(root: &OwnedFd, file: &str) -> Result<String, String> {
    let mut text = Vec::new();
    crate::floor_io::read_into(root, file, &mut text)?;
    String::from_utf8(text).map_err(|_| format!("{file} is not UTF-8 text"))
}

/// The answer `mcp-resources` gives a 2026-07-28 `resources/read` of a text file, field for
/// field in its order: the request's id, the 2026-07-28 result fields (`resultType`, and the
/// cache hints the files provider gives a file: `ttlMs` 0, `cacheScope` public), one text
/// content.
pub fn read_answer(
    id: &serde_json::Value,
    uri: &str,
    mime: &str,
    text: &str,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    serde_json::to_writer(&mut *out, id).map_err(|e| e.to_string())?;
    out.extend_from_slice(
        br#","result":{"resultType":"complete","ttlMs":0,"cacheScope":"public","contents":[{"uri":"#,
    );
    json(out, uri)?;
    out.extend_from_slice(br#","mimeType":"#);
    json(out, mime)?;
    out.extend_from_slice(br#","text":"#);
    json(out, text)?;
    out.extend_from_slice(b"}]}}");
    Ok(())
}

/// `s` as a JSON string.
fn json(out: &mut Vec<u8>, s: &str) -> Result<(), String> {
    serde_json::to_writer(out, s).map_err(|e| e.to_string())
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::from(text.to_owned())))
        .expect("valid response")
}
