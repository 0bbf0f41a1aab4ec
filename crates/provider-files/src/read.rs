//! Reading files: whole files as text or blob, windows of large files, and directories.
//!
//! A window is asked for with query parameters on the file URI (see `docs.md`):
//! `offset`/`length` select a byte range, `head`/`tail` the first or last lines of the
//! (optional) range. Tail reads go backwards from the end in blocks, so the last lines of a
//! 31 GB log cost a few blocks, not the file.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;

use mcpr_core::{Contents, ContentsBody, Error, ErrorKind, ReadLimits, ResourceUri, Result};
use percent_encoding::percent_decode_str;

use crate::error::map_io;
use crate::list::dir_listing;
use crate::path::RelPath;
use crate::provider::Inner;

/// Files up to this size are read on the calling task: cheaper than a hop to the blocking
/// pool, and short enough not to stall the runtime.
pub(crate) const INLINE_READ_MAX: u64 = 256 * 1024;
/// Block size for backward (tail) scans.
const TAIL_BLOCK: u64 = 64 * 1024;

/// What the query of a file URI asks for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) offset: Option<u64>,
    pub(crate) length: Option<u64>,
    pub(crate) head: Option<u64>,
    pub(crate) tail: Option<u64>,
    /// For directories: continue after this entry name.
    pub(crate) after: Option<Vec<u8>>,
}

impl Window {
    pub(crate) fn is_whole(&self) -> bool {
        self.offset.is_none() && self.length.is_none() && self.head.is_none() && self.tail.is_none()
    }

    /// Parse the query of `uri`. Unknown or repeated keys and non-numbers are refused with a
    /// message that lists what is accepted.
    pub(crate) fn parse(uri: &ResourceUri) -> Result<Self> {
        let mut w = Window::default();
        for (key, value) in uri.query_pairs() {
            let num = |slot: &mut Option<u64>| -> Result<()> {
                if slot.is_some() {
                    return Err(Error::invalid_params(format!(
                        "query parameter `{key}` given twice in {uri}"
                    )));
                }
                let n = value.parse::<u64>().map_err(|_| {
                    Error::invalid_params(format!(
                        "query parameter `{key}` must be a non-negative integer, got {value:?}"
                    ))
                })?;
                *slot = Some(n);
                Ok(())
            };
            match key {
                "offset" => num(&mut w.offset)?,
                "length" => num(&mut w.length)?,
                "head" => num(&mut w.head)?,
                "tail" => num(&mut w.tail)?,
                "after" => w.after = Some(percent_decode_str(value).collect()),
                _ => {
                    return Err(Error::invalid_params(format!(
                        "unknown query parameter `{key}` in {uri}; file URIs accept offset, length, head and tail (directories: after)"
                    )));
                }
            }
        }
        if w.head.is_some() && w.tail.is_some() {
            return Err(Error::invalid_params(
                "ask for either `head` or `tail` lines, not both",
            ));
        }
        Ok(w)
    }
}

/// Read `rel` (the real path from `Inner::resolve`, already checked against the rules).
pub(crate) fn read_path(
    inner: &Inner,
    rel: &RelPath,
    uri: &ResourceUri,
    limits: &ReadLimits,
    stat: Option<cap_std::fs::Metadata>,
) -> Result<Vec<Contents>> {
    let uri_s = uri.as_str();
    let window = Window::parse(uri)?;
    // Stat first so a FIFO, socket or device is never opened at all (`stat` when the caller
    // has just taken it).
    let md = match stat {
        Some(md) => md,
        None => inner
            .root
            .metadata(rel.as_path())
            .map_err(|e| map_io(e, uri_s))?,
    };
    if md.is_dir() {
        if !window.is_whole() {
            return Err(Error::invalid_params(format!(
                "{uri_s} is a directory; offset, length, head and tail apply to files"
            )));
        }
        let text = dir_listing(inner, rel, uri_s, window.after.as_deref())?;
        return Ok(vec![Contents {
            uri: uri_s.to_owned(),
            mime_type: Some("application/json".into()),
            body: ContentsBody::Text(text),
            meta: None,
        }]);
    }
    if !md.is_file() {
        return Err(Error::not_found(uri_s));
    }
    if window.after.is_some() {
        return Err(Error::invalid_params("`after` applies to directories only"));
    }
    let (file, size) = open_regular(inner, rel, uri_s)?;
    let ext_mime = mime_by_extension(rel.as_bytes());
    if window.is_whole() {
        if size > limits.max_bytes {
            return Err(too_large(uri_s, size, limits.max_bytes));
        }
        let mut buf = Vec::with_capacity(size as usize);
        // +1 detects a file that grew past the limit between the stat and the read.
        file.take(limits.max_bytes + 1)
            .read_to_end(&mut buf)
            .map_err(|e| map_io(e, uri_s))?;
        if buf.len() as u64 > limits.max_bytes {
            return Err(too_large(uri_s, buf.len() as u64, limits.max_bytes));
        }
        return Ok(vec![make_contents(uri_s, buf, ext_mime, None)]);
    }
    read_window(file, size, &window, uri_s, limits, ext_mime)
}

/// The common read in five system calls: the whole of a small regular file whose path has no
/// symlink at all. `None` leaves the request to [`read_path`] (after `Inner::resolve`), which
/// handles links, directories, windows, limits and every error; so anything unusual here is
/// not an answer but a fall-back.
///
/// `rel` must be the decoded URI path with the deny rules already checked on it. The open is
/// `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`: the kernel refuses it if any
/// component is a link, so what is opened is at `rel` itself and the rules checked on `rel`
/// are the rules of the real path (no link resolution, no `/proc/self/fd` check needed). The
/// `statx` before it keeps FIFOs, sockets and devices from ever being opened; the `fstat`
/// after it catches an entry swapped in between.
pub(crate) fn read_direct(
    inner: &Inner,
    rel: &RelPath,
    uri: &ResourceUri,
    limits: &ReadLimits,
) -> Option<Result<Vec<Contents>>> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, StatxFlags};
    if rel.is_root() {
        return None;
    }
    let cap = INLINE_READ_MAX.min(limits.max_bytes);
    let path = rel.as_path();
    let st = rustix::fs::statx(
        &inner.root,
        path,
        // Never trigger an automount just to decide whether to try this path.
        AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT,
        StatxFlags::TYPE | StatxFlags::SIZE,
    )
    .ok()?;
    if FileType::from_raw_mode(st.stx_mode.into()) != FileType::RegularFile || st.stx_size > cap {
        return None;
    }
    let fd = rustix::fs::openat2(
        &inner.root,
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()?;
    let mut file = File::from(fd);
    let md = file.metadata().ok()?;
    if !md.is_file() || md.len() > cap {
        return None;
    }
    let size = md.len() as usize;
    // One byte of room past the size: a read that stops short of filling the buffer at the
    // size is the end of a regular file, so no extra read just to see 0.
    let mut buf = vec![0u8; size + 1];
    let mut len = 0;
    loop {
        let want = buf.len() - len;
        let n = match file.read(&mut buf[len..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Some(Err(map_io(e, uri.as_str()))),
        };
        len += n;
        if len == buf.len() {
            // It grew since the stat: the general path reads it under the limits.
            return None;
        }
        if n == 0 || (n < want && len >= size) {
            break;
        }
    }
    buf.truncate(len);
    let ext_mime = mime_by_extension(rel.as_bytes());
    Some(Ok(vec![make_contents(uri.as_str(), buf, ext_mime, None)]))
}

/// Open a regular file through the sandbox without blocking on FIFOs, then re-check that
/// what was opened is still a regular file whose real path the rules allow (a symlink named
/// `notes.txt` pointing at `.env` is refused here).
///
/// `rel` must be a path the rules were already checked on (a resolved URI, a listed entry):
/// when the descriptor is where `rel` says, the rules are not consulted again. Returns the
/// file and its size.
fn open_regular(inner: &Inner, rel: &RelPath, uri: &str) -> Result<(File, u64)> {
    use cap_std::fs::OpenOptionsExt as _;
    let mut opts = cap_std::fs::OpenOptions::new();
    opts.read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = inner
        .root
        .open_with(rel.as_path(), &opts)
        .map_err(|e| map_io(e, uri))?;
    let file = file.into_std();
    let md = file.metadata().map_err(|e| map_io(e, uri))?;
    if !md.is_file() {
        return Err(Error::not_found(uri));
    }
    match real_rel_of_fd(inner, &file) {
        Some(real) if real == *rel || !inner.rules.is_denied(&real, false) => Ok((file, md.len())),
        _ => Err(Error::not_found(uri)),
    }
}

/// Where `fd` really is, relative to the root, from `/proc/self/fd`.
fn real_rel_of_fd(inner: &Inner, file: &File) -> Option<RelPath> {
    use std::os::fd::AsRawFd as _;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    let rest = link.strip_prefix(&inner.canonical_root).ok()?;
    RelPath::from_bytes(rest.as_os_str().as_bytes())
}

pub(crate) fn too_large(uri: &str, size: u64, limit: u64) -> Error {
    Error::new(
        ErrorKind::TooLarge,
        format!(
            "{uri} is {size} bytes, more than the read limit of {limit} bytes (max_read_bytes); \
             read it in windows with ?offset=N&length=M, ?head=N or ?tail=N"
        ),
    )
    .with_uri(uri)
    .with_detail("size", size)
    .with_detail("limit", limit)
}

fn read_window(
    mut file: File,
    size: u64,
    w: &Window,
    uri: &str,
    limits: &ReadLimits,
    ext_mime: Option<&'static str>,
) -> Result<Vec<Contents>> {
    let start = w.offset.unwrap_or(0).min(size);
    let end = match w.length {
        Some(len) => start.saturating_add(len).min(size),
        None => size,
    };
    let io = |e| map_io(e, uri);
    let (from, bytes) = if let Some(n) = w.head {
        file.seek(SeekFrom::Start(start)).map_err(io)?;
        let mut buf = Vec::new();
        let mut reader = std::io::BufReader::with_capacity(64 * 1024, (&file).take(end - start));
        let mut lines = 0;
        while lines < n {
            let before = buf.len();
            let got = std::io::BufRead::read_until(&mut reader, b'\n', &mut buf).map_err(io)?;
            if got == 0 {
                break;
            }
            if buf.len() as u64 > limits.max_bytes {
                return Err(window_too_large(uri, limits.max_bytes, "head"));
            }
            lines += 1;
            let _ = before;
        }
        (start, buf)
    } else if let Some(n) = w.tail {
        let from = tail_start(&mut file, start, end, n, limits.max_bytes)
            .map_err(io)?
            .ok_or_else(|| window_too_large(uri, limits.max_bytes, "tail"))?;
        file.seek(SeekFrom::Start(from)).map_err(io)?;
        let mut buf = Vec::with_capacity((end - from) as usize);
        (&file).take(end - from).read_to_end(&mut buf).map_err(io)?;
        (from, buf)
    } else {
        if end - start > limits.max_bytes {
            return Err(window_too_large(uri, limits.max_bytes, "length"));
        }
        file.seek(SeekFrom::Start(start)).map_err(io)?;
        let mut buf = Vec::with_capacity((end - start) as usize);
        (&file)
            .take(end - start)
            .read_to_end(&mut buf)
            .map_err(io)?;
        (start, buf)
    };
    let (from, bytes) = trim_to_utf8(from, bytes);
    let mut meta = serde_json::Map::new();
    meta.insert("offset".into(), from.into());
    meta.insert("length".into(), (bytes.len() as u64).into());
    meta.insert("fileSize".into(), size.into());
    let mut wrapper = serde_json::Map::new();
    wrapper.insert(
        "io.github.mcp-resources/window".into(),
        serde_json::Value::Object(meta),
    );
    Ok(vec![make_contents(uri, bytes, ext_mime, Some(wrapper))])
}

fn window_too_large(uri: &str, limit: u64, what: &str) -> Error {
    Error::new(
        ErrorKind::TooLarge,
        format!("the requested {what} window of {uri} is more than the read limit of {limit} bytes (max_read_bytes); ask for less"),
    )
    .with_uri(uri)
    .with_detail("limit", limit)
}

/// The offset where the last `n` lines of `[start, end)` begin, scanning backwards in blocks.
/// `None` when those lines are longer than `max` bytes. A final newline ends the last line
/// rather than starting an empty one, as `tail` does.
fn tail_start(
    file: &mut File,
    start: u64,
    end: u64,
    n: u64,
    max: u64,
) -> std::io::Result<Option<u64>> {
    if n == 0 {
        return Ok(Some(end));
    }
    let mut pos = end;
    let mut newlines = 0u64;
    let mut block = vec![0u8; TAIL_BLOCK as usize];
    let mut first = true;
    while pos > start {
        let len = (pos - start).min(TAIL_BLOCK);
        pos -= len;
        file.seek(SeekFrom::Start(pos))?;
        let buf = &mut block[..len as usize];
        file.read_exact(buf)?;
        let mut i = buf.len();
        while i > 0 {
            i -= 1;
            if buf[i] == b'\n' {
                // The newline that ends the window's last line does not count.
                if first && pos + i as u64 + 1 == end {
                    first = false;
                    continue;
                }
                newlines += 1;
                if newlines == n {
                    let from = pos + i as u64 + 1;
                    return Ok((end - from <= max).then_some(from));
                }
            }
            first = false;
        }
        if end - pos > max {
            return Ok(None);
        }
    }
    Ok((end - start <= max).then_some(start))
}

/// A byte window may cut a UTF-8 character at either edge. When the bytes are text but for
/// such cuts, drop the partial characters (at most 3 bytes each side) so the client gets text;
/// `offset`/`length` in the content's `_meta` report exactly what was returned.
fn trim_to_utf8(from: u64, bytes: Vec<u8>) -> (u64, Vec<u8>) {
    if std::str::from_utf8(&bytes).is_ok() {
        return (from, bytes);
    }
    let lead = bytes
        .iter()
        .take(3)
        .take_while(|&&b| b & 0xC0 == 0x80)
        .count();
    let body = &bytes[lead..];
    let valid = match std::str::from_utf8(body) {
        Ok(_) => body.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => return (from, bytes),
    };
    if std::str::from_utf8(&body[..valid]).is_ok() && body.len() - valid <= 3 {
        (from + lead as u64, body[..valid].to_vec())
    } else {
        (from, bytes)
    }
}

fn make_contents(
    uri: &str,
    bytes: Vec<u8>,
    ext_mime: Option<&'static str>,
    meta: Option<serde_json::Map<String, serde_json::Value>>,
) -> Contents {
    match String::from_utf8(bytes) {
        Ok(text) => Contents {
            uri: uri.to_owned(),
            mime_type: Some(ext_mime.unwrap_or("text/plain").to_owned()),
            body: ContentsBody::Text(text),
            meta,
        },
        Err(e) => {
            let bytes = e.into_bytes();
            let mime = mcpr_core::mime::of_binary(&bytes, ext_mime);
            Contents {
                uri: uri.to_owned(),
                mime_type: Some(mime.to_owned()),
                body: ContentsBody::Blob(bytes),
                meta,
            }
        }
    }
}

/// How many leading bytes a listing looks at to type a file without a known extension.
const SNIFF_LEN: u64 = 1024;

/// The MIME type a read of `rel` would report, judged from its first bytes; for listing
/// entries without a telling extension. `None` when the file cannot be opened.
pub(crate) fn sniff_file(inner: &Inner, rel: &RelPath) -> Option<&'static str> {
    let (file, _) = open_regular(inner, rel, "").ok()?;
    let mut head = Vec::with_capacity(SNIFF_LEN as usize);
    file.take(SNIFF_LEN).read_to_end(&mut head).ok()?;
    let text = match std::str::from_utf8(&head) {
        Ok(_) => true,
        // A character cut by the 1 KiB boundary is still text.
        Err(e) => e.error_len().is_none() && head.len() as u64 == SNIFF_LEN,
    };
    Some(if text {
        "text/plain"
    } else {
        mcpr_core::mime::of_binary(&head, None)
    })
}

/// MIME type from the file name's extension, when it has a known one.
pub(crate) fn mime_by_extension(path: &[u8]) -> Option<&'static str> {
    mcpr_core::mime::by_extension(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_cut_characters_only() {
        let s = "héllo wörld".as_bytes().to_vec();
        // Cut inside 'é' at the start and inside 'ö' at the end.
        let (from, out) = trim_to_utf8(2, s[2..9].to_vec());
        assert_eq!(from, 3);
        assert_eq!(std::str::from_utf8(&out).unwrap(), "llo w");
        let bin = vec![0xff, 0xfe, 0x00, 0x41];
        assert_eq!(trim_to_utf8(0, bin.clone()), (0, bin));
    }
}
