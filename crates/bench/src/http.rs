//! A minimal blocking HTTP/1.1 client over one keep-alive connection: enough of the protocol
//! (Content-Length and chunked bodies, SSE payloads) to drive Streamable HTTP servers while
//! costing the driver one write and usually one read per request.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One response.
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Response {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC response in the body: the body itself for JSON, else the SSE `data:`
    /// payload that carries an `id` (priming events and notifications are skipped).
    pub fn message(&self) -> Option<&[u8]> {
        let sse = self
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if !sse {
            return Some(&self.body);
        }
        self.body
            .split(|&b| b == b'\n')
            .filter_map(|l| l.strip_prefix(b"data:"))
            .map(|d| d.strip_prefix(b" ").unwrap_or(d))
            .find(|d| {
                let head = &d[..d.len().min(96)];
                !d.is_empty() && !head.windows(9).any(|w| w == b"\"method\":")
            })
    }
}

/// One keep-alive connection.
pub struct Conn {
    stream: TcpStream,
    host: String,
    buf: Vec<u8>,
    out: Vec<u8>,
}

impl Conn {
    /// Connect to `addr` (`127.0.0.1:PORT`).
    pub fn connect(addr: &str) -> Result<Self, String> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("nodelay: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| format!("timeout: {e}"))?;
        Ok(Self {
            stream,
            host: addr.to_owned(),
            buf: Vec::with_capacity(64 * 1024),
            out: Vec::with_capacity(4096),
        })
    }

    /// POST `body` to `path` with extra `headers` and read the whole response.
    pub fn post(
        &mut self,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, String> {
        self.out.clear();
        let _ = write!(
            self.out,
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\n",
            self.host,
            body.len()
        );
        for (n, v) in headers {
            let _ = write!(self.out, "{n}: {v}\r\n");
        }
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(body);
        self.stream
            .write_all(&self.out)
            .map_err(|e| format!("send: {e}"))?;
        self.read_response()
    }

    /// DELETE `path` with extra `headers` (ending a legacy session) and read the response.
    pub fn delete(&mut self, path: &str, headers: &[(&str, &str)]) -> Result<Response, String> {
        self.out.clear();
        let _ = write!(
            self.out,
            "DELETE {path} HTTP/1.1\r\nhost: {}\r\n",
            self.host
        );
        for (n, v) in headers {
            let _ = write!(self.out, "{n}: {v}\r\n");
        }
        self.out.extend_from_slice(b"\r\n");
        self.stream
            .write_all(&self.out)
            .map_err(|e| format!("send: {e}"))?;
        self.read_response()
    }

    /// GET `path` and read the whole response.
    pub fn get(&mut self, path: &str) -> Result<Response, String> {
        self.out.clear();
        let _ = write!(
            self.out,
            "GET {path} HTTP/1.1\r\nhost: {}\r\naccept: */*\r\n\r\n",
            self.host
        );
        self.stream
            .write_all(&self.out)
            .map_err(|e| format!("send: {e}"))?;
        self.read_response()
    }

    /// Fill the buffer until it holds at least `n` bytes.
    fn fill(&mut self, n: usize) -> Result<(), String> {
        let mut chunk = [0u8; 65536];
        while self.buf.len() < n {
            let k = self
                .stream
                .read(&mut chunk)
                .map_err(|e| format!("receive: {e}"))?;
            if k == 0 {
                return Err("the server closed the connection".into());
            }
            self.buf.extend_from_slice(&chunk[..k]);
        }
        Ok(())
    }

    /// Fill until `pat` occurs at or after `from`; its position.
    fn fill_until(&mut self, from: usize, pat: &[u8]) -> Result<usize, String> {
        loop {
            if let Some(i) = find(&self.buf[from.min(self.buf.len())..], pat) {
                return Ok(from + i);
            }
            let have = self.buf.len();
            self.fill(have + 1)?;
        }
    }

    fn read_response(&mut self) -> Result<Response, String> {
        let end = self.fill_until(0, b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad status line in {head:?}"))?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let mut pos = end + 4;
        let body = if let Some(len) = get("content-length") {
            let len: usize = len.parse().map_err(|_| "bad content-length")?;
            self.fill(pos + len)?;
            let b = self.buf[pos..pos + len].to_vec();
            pos += len;
            b
        } else if get("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            let mut b = Vec::new();
            loop {
                let eol = self.fill_until(pos, b"\r\n")?;
                let size_text = String::from_utf8_lossy(&self.buf[pos..eol]).into_owned();
                let size =
                    usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                        .map_err(|_| format!("bad chunk size {size_text:?}"))?;
                pos = eol + 2;
                self.fill(pos + size + 2)?;
                b.extend_from_slice(&self.buf[pos..pos + size]);
                pos += size + 2;
                if size == 0 {
                    break;
                }
            }
            b
        } else if status == 202 || status == 204 || status == 304 {
            Vec::new()
        } else {
            return Err(format!("response {status} without a length: {head:?}"));
        };
        self.buf.drain(..pos);
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

/// First position of `pat` in `hay`.
pub fn find(hay: &[u8], pat: &[u8]) -> Option<usize> {
    hay.windows(pat.len()).position(|w| w == pat)
}
