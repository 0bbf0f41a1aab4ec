//! The blob floor: what answering a `resources/read` of a binary file costs in the
//! bytes alone, so the `blob` scenario can hold our server against it.
//!
//! For every request line: `openat`, `fstat`, one `read` of the whole file into a buffer kept
//! from the last request, `close`; the bytes base64-encoded straight into the answer buffer
//! (also kept), and one `write` of the answer line our server gives (`{"jsonrpc":"2.0","id":…,
//! "result":{"contents":[{"uri":…,"mimeType":"application/octet-stream","blob":"…"}]}}`). Its
//! stdout pipe is enlarged as our server's is. No JSON parsing (the id is cut out of the line),
//! no URI, no rules, no sandbox, no heap traffic once the buffers have grown: the file's bytes
//! crossing the kernel, the base64 and the pipe are what is left.

use std::io::{BufRead, Write};

use base64::Engine as _;

/// The capacity asked for the stdout pipe: what `mcp-resources` asks for its own
/// (`crates/server/src/stdio/mod.rs`, `PIPE_BYTES`), so both push the answer through the same pipe.
const PIPE_BYTES: usize = 1 << 20;

/// The MIME type our server gives a `.bin` file of random bytes.
const MIME: &str = "application/octet-stream";

/// Answer every line of stdin with `DIR/FILE` as a base64 `blob`, as described above.
pub fn blob_echo(dir: &str, file: &str) -> Result<(), String> {
    use rustix::fs::{Mode, OFlags};
    let root = crate::floor_io::open_dir(dir)?;
    let uri = serde_json::to_string(&format!("file://{}/{file}", dir.trim_end_matches('/')))
        .map_err(|e| e.to_string())?;
    for size in [PIPE_BYTES, PIPE_BYTES / 4] {
        if rustix::pipe::fcntl_setpipe_size(std::io::stdout(), size).is_ok() {
            break;
        }
    }
    let mut stdin = std::io::BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let mut stdout = std::io::stdout().lock();
    let mut line = Vec::with_capacity(4096);
    // Both only grow: zeroing them for every request would be work the floor does not need.
    let (mut raw, mut out) = (Vec::new(), Vec::new());
    loop {
        line.clear();
        if stdin
            .read_until(b'\n', &mut line)
            .map_err(|e| e.to_string())?
            == 0
        {
            return Ok(());
        }
        let id = request_id(&line).ok_or_else(|| {
            format!(
                "a request line without an id: {}",
                String::from_utf8_lossy(&line)
            )
        })?;
        let fd = rustix::fs::openat(&root, file, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| format!("{file}: {e}"))?;
        let size = rustix::fs::fstat(&fd).map_err(|e| e.to_string())?.st_size;
        let size = usize::try_from(size).map_err(|e| e.to_string())?;
        // One byte of room past the size, as the server reads: a short read is the end.
        if raw.len() < size + 1 {
            raw.resize(size + 1, 0);
        }
        let mut n = 0;
        // One call for a regular file in the page cache; the loop only covers a short read.
        while n < size {
            let got = rustix::io::read(&fd, &mut raw[n..=size]).map_err(|e| e.to_string())?;
            if got == 0 {
                break;
            }
            n += got;
        }
        drop(fd);
        let len = answer(&mut out, id, &uri, &raw[..n])?;
        stdout
            .write_all(&out[..len])
            .and_then(|()| stdout.flush())
            .map_err(|e| e.to_string())?;
    }
}

/// The value of the request's `"id"` member as it is written (a number or a string without
/// escapes, as the benchmark sends), cut out of the line without parsing it.
fn request_id(line: &[u8]) -> Option<&[u8]> {
    const KEY: &[u8] = b"\"id\":";
    let at = line.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = &line[at..];
    let rest = &rest[rest.iter().position(|c| !c.is_ascii_whitespace())?..];
    let end = if rest.first() == Some(&b'"') {
        1 + rest[1..].iter().position(|&c| c == b'"')? + 1
    } else {
        rest.iter()
            .position(|&c| c == b',' || c == b'}' || c.is_ascii_whitespace())?
    };
    (end > 0).then_some(&rest[..end])
}

/// Writes the answer line for `bytes` into `out` (grown if need be, never shrunk or zeroed
/// again) and returns its length.
fn answer(out: &mut Vec<u8>, id: &[u8], uri: &str, bytes: &[u8]) -> Result<usize, String> {
    let encoded = base64::encoded_len(bytes.len(), true).ok_or("the file is too large")?;
    let head = [
        &br#"{"jsonrpc":"2.0","id":"#[..],
        id,
        br#","result":{"contents":[{"uri":"#,
        uri.as_bytes(),
        br#","mimeType":""#,
        MIME.as_bytes(),
        br#"","blob":""#,
    ];
    let tail = b"\"}]}}\n";
    let len = head.iter().map(|p| p.len()).sum::<usize>() + encoded + tail.len();
    if out.len() < len {
        out.resize(len, 0);
    }
    let mut at = 0;
    for part in head {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    at += base64::engine::general_purpose::STANDARD
        .encode_slice(bytes, &mut out[at..at + encoded])
        .map_err(|e| e.to_string())?;
    out[at..at + tail.len()].copy_from_slice(tail);
    Ok(at + tail.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_cut_out_as_written() {
        let read = |id: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":"file:///x"}}}}"#
            )
        };
        assert_eq!(request_id(read("7").as_bytes()), Some(&b"7"[..]));
        assert_eq!(
            request_id(read("\"r-1\"").as_bytes()),
            Some(&b"\"r-1\""[..])
        );
        assert_eq!(request_id(br#"{"id": 12}"#), Some(&b"12"[..]));
        assert_eq!(request_id(br#"{"method":"x"}"#), None);
    }

    #[test]
    fn the_answer_is_the_json_our_server_writes() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 3) as u8).collect();
        let uri = serde_json::to_string("file:///d/blob.bin").unwrap();
        let mut out = vec![b'x'; 5000];
        let len = answer(&mut out, b"42", &uri, &bytes).unwrap();
        let want = serde_json::json!({
            "jsonrpc": "2.0",
            "id": 42,
            "result": {"contents": [{
                "uri": "file:///d/blob.bin",
                "mimeType": MIME,
                "blob": base64::engine::general_purpose::STANDARD.encode(&bytes),
            }]},
        });
        let (line, end) = out[..len].split_at(len - 1);
        assert_eq!(end, b"\n");
        assert!(!line.contains(&b'\n'));
        let got: serde_json::Value = serde_json::from_slice(line).unwrap();
        assert_eq!(got, want);
        // The members in the order rmcp writes them, so the answer is ours byte for byte.
        assert!(line.starts_with(br#"{"jsonrpc":"2.0","id":42,"result":{"contents":[{"uri":"#));
        // A shorter answer into the same buffer: only the answer's bytes count.
        let len = answer(&mut out, b"1", &uri, &bytes[..10]).unwrap();
        assert!(out[..len].ends_with(b"\"}]}}\n"));
        assert_eq!(len, out[..len].len());
    }
}
