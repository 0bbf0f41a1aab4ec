//! The machine floors: our read answered with the system calls it cannot do without and
//! nothing of a Rust server stack (no serde, no hyper, no tokio, no buffered std I/O), raw
//! calls through rustix. The other floors (`min-file-echo`, `http-floor`) are floors of a
//! Rust stack; these are the machine's, as a C program would be.
//!
//! - `stdio`: read(0) into one buffer; for each line, the id and the URI found by a scan
//!   (their JSON text copied as it is), `openat`, `fstat`, `read`, `close` of the file, its
//!   text escaped by a 256-entry table, and our `resources/read` answer in one `write`.
//! - `http`: one thread, epoll, non-blocking keep-alive HTTP/1.1 connections; per POST the
//!   same scan and file calls, and the 2026-07-28 answer `mcp-resources` gives (the scenario
//!   checks it byte for byte against ours before measuring) in one `write`.

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, RawFd};

use crate::floor_io::{open_dir, read_into};
use rustix::event::epoll;
use rustix::io::Errno;

/// For each byte: 0 when it goes into a JSON string as it is, else the letter after the
/// backslash (`u` for `\u00XX`).
const ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = b'u';
        b += 1;
    }
    t[b'\n' as usize] = b'n';
    t[b'\r' as usize] = b'r';
    t[b'\t' as usize] = b't';
    t[0x08] = b'b';
    t[0x0c] = b'f';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t
};

/// `s` escaped into `out`, clean runs copied whole.
fn escape(out: &mut Vec<u8>, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, &b) in s.iter().enumerate() {
        let e = ESCAPE[b as usize];
        if e == 0 {
            continue;
        }
        out.extend_from_slice(&s[start..i]);
        match e {
            b'u' => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 15) as usize],
            ]),
            e => out.extend_from_slice(&[b'\\', e]),
        }
        start = i + 1;
    }
    out.extend_from_slice(&s[start..]);
}

/// The index just past the first `needle` in `hay`.
fn after(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + needle.len())
}

/// The JSON value after `"key":` in `msg`, as its text: a string with its quotes (escapes
/// kept), or a number up to the next `,` or `}`.
fn value<'a>(msg: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let mut at = after(msg, key)?;
    while msg.get(at)?.is_ascii_whitespace() {
        at += 1;
    }
    let rest = &msg[at..];
    if rest.first() == Some(&b'"') {
        let mut i = 1;
        loop {
            match rest.get(i)? {
                b'\\' => i += 2,
                b'"' => return Some(&rest[..=i]),
                _ => i += 1,
            }
        }
    }
    let end = rest.iter().position(|&b| matches!(b, b',' | b'}' | b' '))?;
    Some(&rest[..end])
}

/// All of `buf` to `fd`, however many calls that takes.
fn write_all(fd: impl AsFd, mut buf: &[u8]) -> Result<(), Errno> {
    while !buf.is_empty() {
        match rustix::io::write(&fd, buf) {
            Ok(n) => buf = &buf[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The stdio floor: our legacy `resources/read` answer to every line of stdin.
pub fn stdio(dir: &str, file: &str) -> Result<(), String> {
    let root = open_dir(dir)?;
    // std's handles only lend their descriptors: every call below is rustix's.
    let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
    let (stdin, stdout) = (stdin.as_fd(), stdout.as_fd());
    let (mut buf, mut text, mut out) = (vec![0u8; 1 << 16], Vec::new(), Vec::new());
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = match rustix::io::read(stdin, &mut buf[filled..]) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(format!("stdin: {e}")),
        };
        filled += n;
        let mut start = 0;
        while let Some(nl) = buf[start..filled].iter().position(|&b| b == b'\n') {
            let line = &buf[start..start + nl];
            start += nl + 1;
            let (Some(id), Some(uri)) = (value(line, b"\"id\":"), value(line, b"\"uri\":")) else {
                continue;
            };
            read_into(&root, file, &mut text)?;
            out.clear();
            out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
            out.extend_from_slice(id);
            out.extend_from_slice(br#","result":{"contents":[{"uri":"#);
            out.extend_from_slice(uri);
            out.extend_from_slice(br#","mimeType":"text/plain","text":""#);
            escape(&mut out, &text);
            out.extend_from_slice(b"\"}]}}\n");
            write_all(stdout, &out).map_err(|e| format!("stdout: {e}"))?;
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
    }
}

/// One connection of the HTTP floor: what it sent that is not answered yet.
struct Conn {
    fd: TcpStream,
    input: Vec<u8>,
}

/// The HTTP floor on `addr` until killed.
pub fn http(addr: &str, dir: &str, file: &str, mime: &str) -> Result<(), String> {
    let root = open_dir(dir)?;
    // std's listener is the same socket, bind and listen calls; reads, writes and the
    // readiness loop are rustix's.
    let listener = TcpListener::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| e.to_string())?;
    let lfd = listener.as_raw_fd();
    epoll::add(
        &ep,
        &listener,
        epoll::EventData::new_u64(lfd as u64),
        epoll::EventFlags::IN,
    )
    .map_err(|e| e.to_string())?;
    let mime = {
        let mut m = Vec::new();
        escape(&mut m, mime.as_bytes());
        m
    };
    let mut conns: HashMap<RawFd, Conn> = HashMap::new();
    let (mut text, mut body, mut out) = (Vec::new(), Vec::new(), Vec::new());
    let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        events.clear();
        match epoll::wait(&ep, rustix::buffer::spare_capacity(&mut events), None) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(e) => return Err(format!("epoll_wait: {e}")),
        }
        for ev in events.iter().copied() {
            let fd = ev.data.u64() as RawFd;
            if fd == lfd {
                loop {
                    match listener.accept() {
                        Ok((c, _)) => {
                            // As ours: small answers go out at once.
                            let _ = c.set_nodelay(true);
                            if c.set_nonblocking(true).is_err() {
                                continue;
                            }
                            let raw = c.as_raw_fd();
                            if epoll::add(
                                &ep,
                                &c,
                                epoll::EventData::new_u64(raw as u64),
                                epoll::EventFlags::IN,
                            )
                            .is_ok()
                            {
                                conns.insert(
                                    raw,
                                    Conn {
                                        fd: c,
                                        input: Vec::new(),
                                    },
                                );
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            eprintln!("mcpr-bench machine-http-floor: accept: {e}");
                            break;
                        }
                    }
                }
                continue;
            }
            let mut closed = false;
            if let Some(c) = conns.get_mut(&fd) {
                loop {
                    match rustix::io::read(&c.fd, &mut chunk) {
                        Ok(0) => {
                            closed = true;
                            break;
                        }
                        Ok(n) => c.input.extend_from_slice(&chunk[..n]),
                        Err(Errno::AGAIN) => break,
                        Err(Errno::INTR) => {}
                        Err(_) => {
                            closed = true;
                            break;
                        }
                    }
                }
                // Every whole request in the input, answered in order.
                while let Some(end) = after(&c.input, b"\r\n\r\n") {
                    let len = content_length(&c.input[..end]).unwrap_or(0);
                    if c.input.len() < end + len {
                        break;
                    }
                    let request = &c.input[end..end + len];
                    // A client that asks for the connection's end gets it after its answer.
                    let last = header(&c.input[..end], b"connection")
                        .is_some_and(|v| v.eq_ignore_ascii_case(b"close"));
                    let (Some(id), Some(uri)) =
                        (value(request, b"\"id\":"), value(request, b"\"uri\":"))
                    else {
                        let _ = write_all_nonblocking(
                            &c.fd,
                            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n",
                        );
                        closed = true;
                        break;
                    };
                    read_into(&root, file, &mut text)?;
                    body.clear();
                    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
                    body.extend_from_slice(id);
                    body.extend_from_slice(
                        br#","result":{"resultType":"complete","ttlMs":0,"cacheScope":"public","contents":[{"uri":"#,
                    );
                    body.extend_from_slice(uri);
                    body.extend_from_slice(br#","mimeType":""#);
                    body.extend_from_slice(&mime);
                    body.extend_from_slice(br#"","text":""#);
                    escape(&mut body, &text);
                    body.extend_from_slice(b"\"}]}}");
                    out.clear();
                    out.extend_from_slice(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ",
                    );
                    out.extend_from_slice(body.len().to_string().as_bytes());
                    out.extend_from_slice(b"\r\n\r\n");
                    out.extend_from_slice(&body);
                    c.input.drain(..end + len);
                    // The socket is non-blocking; an answer of a few KiB fits its buffer,
                    // and a full buffer only spins here, which a floor may do.
                    if write_all_nonblocking(&c.fd, &out).is_err() || last {
                        closed = true;
                        break;
                    }
                }
            }
            if closed && let Some(c) = conns.remove(&fd) {
                let _ = epoll::delete(&ep, &c.fd);
            }
        }
    }
}

/// All of `buf` to a non-blocking socket, retrying while its buffer is full.
fn write_all_nonblocking(fd: &TcpStream, mut buf: &[u8]) -> Result<(), Errno> {
    while !buf.is_empty() {
        match rustix::io::write(fd, buf) {
            Ok(n) => buf = &buf[n..],
            Err(Errno::INTR | Errno::AGAIN) => std::thread::yield_now(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The value of header `name` in a request head, its name in any case.
fn header<'a>(head: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    head.split(|&b| b == b'\n').find_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(name)
            .then(|| line[colon + 1..].trim_ascii())
    })
}

/// The `Content-Length` of a request head.
fn content_length(head: &[u8]) -> Option<usize> {
    std::str::from_utf8(header(head, b"content-length")?)
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_matches_serde_json_for_every_byte() {
        let mut s = String::new();
        for c in 0u8..128 {
            s.push(c as char);
        }
        s.push_str("é漢🙂\"\\");
        let mut ours = vec![b'"'];
        escape(&mut ours, s.as_bytes());
        ours.push(b'"');
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(&s).unwrap()
        );
    }

    #[test]
    fn values_are_found_as_their_json_text() {
        let m = br#"{"jsonrpc":"2.0","id":17,"method":"resources/read","params":{"uri":"file:///a \"b\"/c"}}"#;
        assert_eq!(value(m, b"\"id\":"), Some(&b"17"[..]));
        assert_eq!(value(m, b"\"uri\":"), Some(&br#""file:///a \"b\"/c""#[..]));
        let s = br#"{"id": "x,}y", "params":{}}"#;
        assert_eq!(value(s, b"\"id\":"), Some(&br#""x,}y""#[..]));
        assert_eq!(
            content_length(b"POST / HTTP/1.1\r\nContent-Length: 42\r\n\r\n"),
            Some(42)
        );
    }
}
