//! A loopback HTTP/1.1 upstream for the `api://` scenario: std threads, keep-alive, one fixed
//! JSON document served at `/cached` (`Cache-Control: max-age=3600`) and at `/uncached`
//! (`no-store`). Deliberately minimal, so a direct GET of it measures the HTTP round trip and
//! nothing else, and the provider's overhead is the difference.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

/// The document both paths serve (1 KiB of JSON).
pub fn document() -> Vec<u8> {
    let mut s = String::from("{\"items\":[");
    let mut i = 0;
    while s.len() < 1000 {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!("{{\"id\":{i},\"name\":\"item {i}\"}}"));
        i += 1;
    }
    s.push_str("]}");
    s.into_bytes()
}

/// A running upstream; it lives as long as the process (the bench is one run).
pub struct Upstream {
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Upstream {
    /// Listen on a free loopback port and serve in the background.
    pub fn start() -> Result<Self, String> {
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
        let addr = l
            .local_addr()
            .map_err(|e| format!("local addr: {e}"))?
            .to_string();
        let doc: Arc<Vec<u8>> = Arc::new(document());
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let doc = doc.clone();
                std::thread::spawn(move || serve(s, &doc));
            }
        });
        Ok(Self { addr })
    }
}

/// Answer GET requests on one connection until the peer closes it.
fn serve(mut s: TcpStream, doc: &[u8]) {
    let _ = s.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(i) = crate::http::find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let path = head.split(' ').nth(1).unwrap_or("");
        let cache = if path == "/cached" {
            "max-age=3600"
        } else {
            "no-store"
        };
        let mut out = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncache-control: {cache}\r\ncontent-length: {}\r\n\r\n",
            doc.len()
        )
        .into_bytes();
        out.extend_from_slice(doc);
        if s.write_all(&out).is_err() {
            return;
        }
    }
}
