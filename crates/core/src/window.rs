//! Windows of large resources: `offset`/`length` select a byte range, `head`/`tail` the first
//! or last lines of it, all as query parameters on the resource's own URI.
//!
//! Any provider that can read a byte range (a file, an S3 object with a ranged GET, an HTTP
//! resource with a `Range` header) parses the query with [`Window::parse_with`], turns it into
//! a byte range with [`Window::byte_range`], and finds line boundaries with [`head_lines`] and
//! [`TailScan`]. Keeping the parsing, the messages and the arithmetic here means a window means
//! the same thing under every scheme.

use std::io::{BufRead, Read, Seek, SeekFrom};
use std::ops::Range;

use crate::error::{Error, Limit, Result};
use crate::uri::ResourceUri;

/// The key of the `_meta` entry that tells a client which bytes a window returned.
pub const WINDOW_META_KEY: &str = "io.github.mcp-resources/window";

/// Block size of a backward (tail) scan: the last lines of a 31 GB log cost a few blocks.
pub const TAIL_BLOCK: u64 = 64 * 1024;

/// What the window parameters of a URI's query ask for. All `None`: the whole resource.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First byte of the range (default 0).
    pub offset: Option<u64>,
    /// Bytes in the range (default: to the end).
    pub length: Option<u64>,
    /// The first this many lines of the range.
    pub head: Option<u64>,
    /// The last this many lines of the range.
    pub tail: Option<u64>,
}

impl Window {
    /// Whether no window parameter was given.
    pub fn is_whole(&self) -> bool {
        self.offset.is_none() && self.length.is_none() && self.head.is_none() && self.tail.is_none()
    }

    /// Parse a query that may hold only window parameters. Unknown or repeated keys,
    /// non-numbers, and `head` with `tail` are refused with `InvalidParams`.
    pub fn parse(uri: &ResourceUri) -> Result<Self> {
        Self::parse_with(
            uri,
            "this URI accepts offset, length, head and tail",
            |_, _| Ok(false),
        )
    }

    /// Parse the window parameters of `uri`'s query, offering every other key to `other`,
    /// which returns `Ok(true)` when it takes the key. A key nobody takes is refused with a
    /// message that names it and ends with `accepted` (what the URI accepts, such as "file
    /// URIs accept offset, length, head and tail (directories: after)").
    pub fn parse_with(
        uri: &ResourceUri,
        accepted: &str,
        mut other: impl FnMut(&str, &str) -> Result<bool>,
    ) -> Result<Self> {
        let mut w = Window::default();
        for (key, value) in uri.query_pairs() {
            let slot = match key {
                "offset" => &mut w.offset,
                "length" => &mut w.length,
                "head" => &mut w.head,
                "tail" => &mut w.tail,
                _ => {
                    if other(key, value)? {
                        continue;
                    }
                    return Err(Error::invalid_params(format!(
                        "unknown query parameter `{key}` in {uri}; {accepted}"
                    )));
                }
            };
            if slot.is_some() {
                return Err(Error::invalid_params(format!(
                    "query parameter `{key}` given twice in {uri}"
                )));
            }
            *slot = Some(value.parse::<u64>().map_err(|_| {
                Error::invalid_params(format!(
                    "query parameter `{key}` must be a non-negative integer, got {value:?}"
                ))
            })?);
        }
        if w.head.is_some() && w.tail.is_some() {
            return Err(Error::invalid_params(
                "ask for either `head` or `tail` lines, not both",
            ));
        }
        Ok(w)
    }

    /// The bytes `offset` and `length` select in a resource of `size` bytes, clamped to it
    /// (an offset past the end is an empty range at the end). `head`/`tail` then pick lines
    /// inside this range.
    pub fn byte_range(&self, size: u64) -> Range<u64> {
        let start = self.offset.unwrap_or(0).min(size);
        let end = match self.length {
            Some(len) => start.saturating_add(len).min(size),
            None => size,
        };
        start..end
    }

    /// Read this window of a seekable source of `size` bytes, at most `max` bytes of it.
    /// Returns where the bytes start and the bytes, as they are (see [`trim_to_utf8`]).
    /// A window over `max` is a `TooLarge` error naming `uri`; I/O errors go through `io`.
    pub fn read_from<R: Read + Seek>(
        &self,
        source: &mut R,
        size: u64,
        uri: &str,
        max: u64,
        io: impl Fn(std::io::Error) -> Error,
    ) -> Result<(u64, Vec<u8>)> {
        let range = self.byte_range(size);
        let (start, end) = (range.start, range.end);
        if let Some(n) = self.head {
            source.seek(SeekFrom::Start(start)).map_err(&io)?;
            let reader = std::io::BufReader::with_capacity(64 * 1024, source.take(end - start));
            let bytes = head_lines(reader, n, max).map_err(&io)?.ok_or_else(|| {
                Error::too_large(
                    uri,
                    "the requested head window",
                    None,
                    Limit::read(max),
                    Some("ask for less"),
                )
            })?;
            Ok((start, bytes))
        } else if let Some(n) = self.tail {
            let from = tail_start(source, range, n, max)
                .map_err(&io)?
                .ok_or_else(|| {
                    Error::too_large(
                        uri,
                        "the requested tail window",
                        None,
                        Limit::read(max),
                        Some("ask for less"),
                    )
                })?;
            Ok((from, read_exact_range(source, from..end).map_err(&io)?))
        } else {
            if end - start > max {
                return Err(Error::too_large(
                    uri,
                    "the requested length window",
                    None,
                    Limit::read(max),
                    Some("ask for less"),
                ));
            }
            Ok((start, read_exact_range(source, start..end).map_err(&io)?))
        }
    }
}

/// Read `range` of `source` (fewer bytes if it ends early).
fn read_exact_range<R: Read + Seek>(source: &mut R, range: Range<u64>) -> std::io::Result<Vec<u8>> {
    source.seek(SeekFrom::Start(range.start))?;
    let len = range.end - range.start;
    let mut buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    source.take(len).read_to_end(&mut buf)?;
    Ok(buf)
}

/// The hint of the "too large" error of a whole object (a file, an S3 object): the same
/// words from every provider that supports windows, so a client can act on it the same way.
pub const READ_IN_WINDOWS: &str = "read it in windows with ?offset=N&length=M, ?head=N or ?tail=N";

/// The first `n` lines of `reader`, or `None` when they are more than `max` bytes. The last
/// line keeps its newline; a reader that ends first gives what it had. At most `max + 1`
/// bytes are ever read, however long a line is.
pub fn head_lines<R: BufRead>(reader: R, n: u64, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut reader = reader.take(max.saturating_add(1));
    let mut buf = Vec::new();
    let mut lines = 0;
    while lines < n {
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        if buf.len() as u64 > max {
            return Ok(None);
        }
        lines += 1;
    }
    Ok(Some(buf))
}

/// The offset where the last `n` lines of `range` of a seekable source begin, or `None`
/// when those lines are more than `max` bytes. A final newline ends the last line rather than
/// starting an empty one, as `tail` does.
pub fn tail_start<R: Read + Seek>(
    source: &mut R,
    range: Range<u64>,
    n: u64,
    max: u64,
) -> std::io::Result<Option<u64>> {
    let mut scan = TailScan::new(range, n, max);
    let mut block = Vec::new();
    loop {
        match scan.next_block() {
            TailStep::Done(found) => return Ok(found),
            TailStep::Read(r) => {
                block.resize((r.end - r.start) as usize, 0);
                source.seek(SeekFrom::Start(r.start))?;
                source.read_exact(&mut block)?;
                scan.feed(&block);
            }
        }
    }
}

/// What a [`TailScan`] needs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailStep {
    /// Read these bytes and pass them to [`TailScan::feed`].
    Read(Range<u64>),
    /// The scan is over: where the lines begin, or `None` when they are over the limit.
    Done(Option<u64>),
}

/// A backward scan for the start of the last `n` lines of a byte range, one block at a time,
/// without doing any I/O itself: a file seeks and reads, an object store sends one ranged
/// GET per block. [`tail_start`] runs it over a seekable source.
#[derive(Debug, Clone)]
pub struct TailScan {
    start: u64,
    end: u64,
    n: u64,
    max: u64,
    block: u64,
    /// Where the bytes seen so far begin.
    pos: u64,
    /// The block asked for and not yet fed.
    pending: Option<Range<u64>>,
    newlines: u64,
    /// No byte looked at yet: a newline at the very end ends the last line.
    first: bool,
    done: Option<Option<u64>>,
}

impl TailScan {
    /// A scan for the last `n` lines of `range`, giving up beyond `max` bytes.
    pub fn new(range: Range<u64>, n: u64, max: u64) -> Self {
        let done = (n == 0).then_some(Some(range.end));
        Self {
            start: range.start,
            end: range.end,
            n,
            max,
            block: TAIL_BLOCK,
            pos: range.end,
            pending: None,
            newlines: 0,
            first: true,
            done,
        }
    }

    /// Read blocks of `bytes` instead of [`TAIL_BLOCK`] (at least 1).
    pub fn with_block(mut self, bytes: u64) -> Self {
        self.block = bytes.max(1);
        self
    }

    /// The next block to read, or the answer.
    pub fn next_block(&mut self) -> TailStep {
        if let Some(found) = self.done {
            return TailStep::Done(found);
        }
        if let Some(r) = &self.pending {
            return TailStep::Read(r.clone());
        }
        if self.pos <= self.start {
            let found = (self.end - self.start <= self.max).then_some(self.start);
            self.done = Some(found);
            return TailStep::Done(found);
        }
        let len = (self.pos - self.start).min(self.block);
        let r = self.pos - len..self.pos;
        self.pending = Some(r.clone());
        TailStep::Read(r)
    }

    /// The bytes of the block [`next_block`](Self::next_block) asked for.
    ///
    /// # Panics
    /// When no block was asked for or `bytes` is not as long as the block.
    pub fn feed(&mut self, bytes: &[u8]) {
        let r = self
            .pending
            .take()
            .expect("TailScan::feed without a block asked for");
        assert_eq!(
            bytes.len() as u64,
            r.end - r.start,
            "TailScan::feed: wrong block length"
        );
        self.pos = r.start;
        for (i, &b) in bytes.iter().enumerate().rev() {
            let at = r.start + i as u64;
            if b == b'\n' {
                // The newline that ends the window's last line does not count.
                if self.first && at + 1 == self.end {
                    self.first = false;
                    continue;
                }
                self.newlines += 1;
                if self.newlines == self.n {
                    let from = at + 1;
                    self.done = Some((self.end - from <= self.max).then_some(from));
                    return;
                }
            }
            self.first = false;
        }
        if self.end - self.pos > self.max {
            self.done = Some(None);
        }
    }
}

/// A byte window may cut a UTF-8 character at either edge. When the bytes are text but for
/// such cuts, drop the partial characters (at most 3 bytes each side) so the client gets text,
/// and move `from` past what was dropped at the start; other bytes come back unchanged.
pub fn trim_to_utf8(from: u64, bytes: Vec<u8>) -> (u64, Vec<u8>) {
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
    // A window with no whole character left is not text cut at its edges: it is binary, and
    // trimming it would turn bytes the client asked for into an empty text.
    if valid > 0 && std::str::from_utf8(&body[..valid]).is_ok() && body.len() - valid <= 3 {
        (from + lead as u64, body[..valid].to_vec())
    } else {
        (from, bytes)
    }
}

/// The `_meta` of a window's contents: which bytes were returned out of how many, under
/// [`WINDOW_META_KEY`].
pub fn window_meta(from: u64, len: u64, size: u64) -> serde_json::Map<String, serde_json::Value> {
    let mut meta = serde_json::Map::new();
    meta.insert("offset".into(), from.into());
    meta.insert("length".into(), len.into());
    meta.insert("fileSize".into(), size.into());
    let mut wrapper = serde_json::Map::new();
    wrapper.insert(WINDOW_META_KEY.into(), serde_json::Value::Object(meta));
    wrapper
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use proptest::prelude::*;

    use super::*;
    use crate::error::ErrorKind;

    fn uri(q: &str) -> ResourceUri {
        ResourceUri::parse(&format!("s3://bucket/key.log?{q}")).unwrap()
    }

    #[test]
    fn parses_each_key_and_refuses_with_the_same_messages() {
        let w = Window::parse(&uri("offset=10&length=20&tail=3")).unwrap();
        assert_eq!(
            w,
            Window {
                offset: Some(10),
                length: Some(20),
                head: None,
                tail: Some(3)
            }
        );
        assert!(
            Window::parse(&ResourceUri::parse("s3://b/k").unwrap())
                .unwrap()
                .is_whole()
        );
        let e = Window::parse(&uri("head=1&head=2")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParams);
        assert!(e.message.contains("`head` given twice"), "{e}");
        let e = Window::parse(&uri("offset=-1")).unwrap_err();
        assert_eq!(
            e.message,
            "query parameter `offset` must be a non-negative integer, got \"-1\""
        );
        let e = Window::parse(&uri("head=1&tail=1")).unwrap_err();
        assert_eq!(e.message, "ask for either `head` or `tail` lines, not both");
        let e = Window::parse(&uri("x=1")).unwrap_err();
        assert_eq!(
            e.message,
            "unknown query parameter `x` in s3://bucket/key.log?x=1; this URI accepts offset, length, head and tail"
        );
    }

    #[test]
    fn other_keys_go_to_the_caller() {
        let mut seen = Vec::new();
        let w = Window::parse_with(&uri("versionId=7&head=2"), "…", |k, v| {
            seen.push((k.to_owned(), v.to_owned()));
            Ok(k == "versionId")
        })
        .unwrap();
        assert_eq!(seen, [("versionId".to_owned(), "7".to_owned())]);
        assert_eq!(w.head, Some(2));
        let e = Window::parse_with(&uri("after=x"), "we accept nothing", |_, _| {
            Err(Error::invalid_params("refused by the caller"))
        })
        .unwrap_err();
        assert_eq!(e.message, "refused by the caller");
    }

    #[test]
    fn too_large_windows_say_which_parameter() {
        let data = b"aaaa\nbbbb\ncccc\n".to_vec();
        let io = |e: std::io::Error| Error::internal(e.to_string());
        let w = Window {
            length: Some(10),
            ..Window::default()
        };
        let e = w
            .read_from(&mut Cursor::new(&data), 15, "u", 5, io)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::TooLarge);
        assert_eq!(
            e.message,
            "u: the requested length window is more than the limit of 5 bytes (max_read_bytes); ask for less"
        );
        let w = Window {
            head: Some(2),
            ..Window::default()
        };
        let e = w
            .read_from(&mut Cursor::new(&data), 15, "u", 9, io)
            .unwrap_err();
        assert!(e.message.contains("head window"), "{e}");
        let w = Window {
            tail: Some(2),
            ..Window::default()
        };
        let e = w
            .read_from(&mut Cursor::new(&data), 15, "u", 9, io)
            .unwrap_err();
        assert!(e.message.contains("tail window"), "{e}");
        assert_eq!(
            w.read_from(&mut Cursor::new(&data), 15, "u", 10, io)
                .unwrap(),
            (5, b"bbbb\ncccc\n".to_vec())
        );
    }

    #[test]
    fn head_reads_no_more_than_the_limit_of_one_long_line() {
        // A reader that fails past the limit: head must never ask for those bytes.
        struct Bounded(u64);
        impl Read for Bounded {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("read past the limit"));
                }
                let n = (buf.len() as u64).min(self.0) as usize;
                buf[..n].fill(b'x');
                self.0 -= n as u64;
                Ok(n)
            }
        }
        let r = std::io::BufReader::new(Bounded(101));
        assert_eq!(head_lines(r, 1, 100).unwrap(), None);
    }

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

    #[test]
    fn a_window_of_only_partial_characters_stays_bytes() {
        for bytes in [
            vec![0x80, 0x80],
            vec![0x80, 0x80, 0x80, 0xe2],
            vec![0xe2, 0x82],
            vec![0xbf],
        ] {
            assert_eq!(trim_to_utf8(7, bytes.clone()), (7, bytes));
        }
        // One whole character between the cuts is still text.
        let (from, out) = trim_to_utf8(0, vec![0x80, b'a', 0xe2]);
        assert_eq!((from, out), (1, b"a".to_vec()));
    }

    /// The last `n` lines of `text`, as `tail` prints them: the plain definition the block
    /// scan must agree with.
    fn tail_naive(text: &[u8], n: u64) -> usize {
        if n == 0 {
            return text.len();
        }
        let body = text.strip_suffix(b"\n").unwrap_or(text);
        let mut seen = 0;
        for (i, &b) in body.iter().enumerate().rev() {
            if b == b'\n' {
                seen += 1;
                if seen == n {
                    return i + 1;
                }
            }
        }
        0
    }

    fn head_naive(text: &[u8], n: u64) -> usize {
        let mut lines = 0;
        for (i, &b) in text.iter().enumerate() {
            if lines == n {
                return i;
            }
            if b == b'\n' {
                lines += 1;
                if lines == n {
                    return i + 1;
                }
            }
        }
        text.len()
    }

    proptest! {
        #[test]
        fn byte_range_stays_inside(size in 0u64..10_000, off in proptest::option::of(0u64..20_000), len in proptest::option::of(0u64..u64::MAX)) {
            let w = Window { offset: off, length: len, ..Window::default() };
            let r = w.byte_range(size);
            prop_assert!(r.start <= r.end && r.end <= size);
            prop_assert_eq!(r.start, off.unwrap_or(0).min(size));
            if let Some(l) = len { prop_assert!(r.end - r.start <= l); }
        }

        #[test]
        fn tail_scan_agrees_with_the_definition(
            text in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'a'), Just(b'b')], 0..300),
            n in 0u64..12,
            block in 1u64..40,
            cut in 0usize..50,
        ) {
            // A range that starts inside the data, so the scan must stop at its start.
            let start = cut.min(text.len());
            let range = start as u64..text.len() as u64;
            let want = start + tail_naive(&text[start..], n);
            let mut scan = TailScan::new(range.clone(), n, u64::MAX).with_block(block);
            let found = loop {
                match scan.next_block() {
                    TailStep::Done(f) => break f,
                    TailStep::Read(r) => scan.feed(&text[r.start as usize..r.end as usize]),
                }
            };
            prop_assert_eq!(found, Some(want as u64));
            // With a limit just under the answer's size it gives up; at the size, it finds it.
            let size = text.len() - want;
            let mut c = Cursor::new(&text);
            prop_assert_eq!(tail_start(&mut c, range.clone(), n, size as u64).unwrap(), Some(want as u64));
            if size > 0 {
                prop_assert_eq!(tail_start(&mut c, range, n, size as u64 - 1).unwrap(), None);
            }
        }

        #[test]
        fn head_agrees_with_the_definition(
            text in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'a')], 0..300),
            n in 0u64..12,
        ) {
            let want = head_naive(&text, n);
            prop_assert_eq!(head_lines(&text[..], n, u64::MAX).unwrap(), Some(text[..want].to_vec()));
            prop_assert_eq!(head_lines(&text[..], n, want as u64).unwrap(), Some(text[..want].to_vec()));
            if want > 0 {
                prop_assert_eq!(head_lines(&text[..], n, want as u64 - 1).unwrap(), None);
            }
        }
    }
}
