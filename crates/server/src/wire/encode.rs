//! The JSON encoder of answers: byte for byte what `serde_json::to_vec` writes (and so what
//! rmcp's transports write), with the large contents of a `resources/read` answer spliced in
//! and escaped a chunk at a time; and the answers a transport gives itself, whose null id
//! rmcp would leave out.

use std::io;

use rmcp::model::{JsonRpcMessage, ResourceContents, ServerResult};
use rmcp::service::{RoleServer, TxJsonRpcMessage};

/// One message as JSON, byte for byte what `serde_json::to_vec` writes, with large read
/// contents escaped a chunk at a time (see [`SPLICE_FROM`]): every answer of the stdio
/// transport, and the HTTP direct path's body.
pub(crate) fn to_json(item: TxJsonRpcMessage<RoleServer>) -> io::Result<Vec<u8>> {
    to_json_with(item, RawBlobs::default())
}

/// [`to_json`] of a read answer whose large blobs were kept out of it as bytes (`blobs`, see
/// [`RawBlobs`]): their base64 is written straight into the answer, so the JSON is what
/// `serde_json::to_vec` writes of the answer with the blobs encoded in place.
pub(crate) fn to_json_with(
    mut item: TxJsonRpcMessage<RoleServer>,
    blobs: RawBlobs,
) -> io::Result<Vec<u8>> {
    let taken = take_contents(&mut item, blobs)?;
    // With contents taken out this is the small skeleton; `splice_contents` sizes the answer.
    let mut bytes = Vec::with_capacity(512);
    serde_json::to_writer(&mut bytes, &item)?;
    if !taken.is_empty() {
        bytes = splice_contents(&bytes, taken)?;
    }
    Ok(bytes)
}

/// The bytes of a read answer's large blobs, kept out of its `BlobResourceContents` (whose
/// `blob` is left empty) until the answer is encoded by [`to_json_with`].
///
/// A blob in the answer is a `String` of its base64: for an 8 MiB file that is an 11 MB
/// buffer made, written, copied into the answer and freed on every read, on top of the
/// answer itself; and with jemalloc every buffer of 8 MiB and more comes back as fresh pages
/// to fault in. Encoded in place, the answer is the only buffer of that size besides the
/// file's bytes.
#[derive(Default)]
pub(crate) struct RawBlobs(Vec<(usize, Vec<u8>)>);

impl RawBlobs {
    /// Keep `bytes` out of the answer as the blob of `contents[index]`; `false` (nothing
    /// kept) when the bytes are small enough to go through serde_json as they are or as many
    /// blobs as can be spliced are already kept.
    pub(crate) fn keep(&mut self, index: usize, bytes: &mut Vec<u8>) -> bool {
        if bytes.len() < SPLICE_FROM || self.0.len() == MAX_SPLICED {
            return false;
        }
        self.0.push((index, std::mem::take(bytes)));
        true
    }
}

/// What goes in place of a marker.
enum Body {
    /// Text or a blob that was in the answer: escaped as JSON.
    Escaped(String),
    /// Bytes kept out of the answer ([`RawBlobs`]): their base64, which needs no escaping.
    Base64(Vec<u8>),
}

impl Body {
    /// The most bytes it takes in the answer, quotes aside (more when text needs escaping).
    fn len_hint(&self) -> usize {
        match self {
            Self::Escaped(s) => s.len(),
            Self::Base64(b) => base64_len(b.len()),
        }
    }
}

/// The length of the padded base64 of `n` bytes.
const fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Contents from this size on are escaped by [`escape_into`] instead of serde_json.
///
/// serde_json escapes a string one byte at a time through a table; for an 8 MiB blob (11 MB
/// of base64) that scan alone costs more than the rest of the read. The resource's text or
/// blob is taken out of the answer and replaced by a marker, the rest is serialised by
/// serde_json as before, and the marker is then replaced by the contents, escaped a chunk at
/// a time. The output is byte for byte what serde_json writes (tested).
const SPLICE_FROM: usize = 512;

/// Contents spliced per answer; any further contents (a directory of many files) are
/// escaped by serde_json as before.
const MAX_SPLICED: usize = 64;

/// The markers, each with a searcher for its JSON form: no resource can forge one, as each is a
/// per-process random tag inside control characters. Built once, so an answer costs no
/// formatting.
fn markers() -> &'static [(String, memchr::memmem::Finder<'static>)] {
    use std::hash::{BuildHasher, Hasher};
    type Markers = Vec<(String, memchr::memmem::Finder<'static>)>;
    static MARKERS: std::sync::OnceLock<Markers> = std::sync::OnceLock::new();
    MARKERS.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(std::process::id().into());
        let tag = h.finish();
        (0..MAX_SPLICED)
            .map(|i| {
                let m = format!("\u{1}mcpr-{tag:016x}-{i}\u{1}");
                let json = serde_json::to_vec(&m).expect("a string serialises");
                (m, memchr::memmem::Finder::new(&json).into_owned())
            })
            .collect()
    })
}

/// Takes the large text and blob strings out of a `resources/read` answer, leaving markers,
/// and puts markers where the blobs kept in `blobs` go; each body is returned with the index
/// of its marker, in the order of the contents.
fn take_contents(
    item: &mut TxJsonRpcMessage<RoleServer>,
    blobs: RawBlobs,
) -> io::Result<Vec<(usize, Body)>> {
    let mut taken = Vec::new();
    let mut kept = blobs.0.into_iter().peekable();
    if let JsonRpcMessage::Response(r) = item
        && let ServerResult::ReadResourceResult(result) = &mut r.result
    {
        for (at, c) in result.contents.iter_mut().enumerate() {
            if taken.len() == MAX_SPLICED {
                break;
            }
            let i = taken.len();
            if let Some((_, bytes)) = kept.next_if(|(index, _)| *index == at) {
                let ResourceContents::BlobResourceContents { blob, .. } = c else {
                    return Err(io::Error::other("a kept blob's contents are not a blob"));
                };
                *blob = markers()[i].0.clone();
                taken.push((i, Body::Base64(bytes)));
                continue;
            }
            let body = match c {
                ResourceContents::TextResourceContents { text, .. } => text,
                ResourceContents::BlobResourceContents { blob, .. } => blob,
                _ => continue,
            };
            if body.len() >= SPLICE_FROM {
                let body = std::mem::replace(body, markers()[i].0.clone());
                taken.push((i, Body::Escaped(body)));
            }
        }
    }
    // A blob whose contents were not found would go out empty: refuse the answer instead.
    if kept.next().is_some() {
        return Err(io::Error::other(
            "a kept blob has no contents in the answer",
        ));
    }
    Ok(taken)
}

/// `skeleton` with each marker (as serde_json wrote it) replaced by its contents: escaped,
/// or the base64 of kept bytes.
fn splice_contents(skeleton: &[u8], taken: Vec<(usize, Body)>) -> io::Result<Vec<u8>> {
    // One byte more for the newline the stdio transport ends the line with. A large answer
    // takes a kept buffer, and the bodies are handed back once copied (mcpr_core::spare).
    let mut out = mcpr_core::spare::buffer(
        skeleton.len() + 1 + taken.iter().map(|(_, b)| b.len_hint() + 2).sum::<usize>(),
    );
    let mut rest = skeleton;
    for (i, body) in taken {
        let finder = &markers()[i].1;
        let at = finder
            .find(rest)
            .ok_or_else(|| io::Error::other("answer marker lost in serialisation"))?;
        out.extend_from_slice(&rest[..at]);
        out.push(b'"');
        match body {
            Body::Escaped(text) => {
                escape_into(&mut out, text.as_bytes());
                mcpr_core::spare::give_back(text.into_bytes());
            }
            Body::Base64(bytes) => {
                base64_into(&mut out, &bytes)?;
                mcpr_core::spare::give_back(bytes);
            }
        }
        out.push(b'"');
        rest = &rest[at + finder.needle().len()..];
    }
    out.extend_from_slice(rest);
    Ok(out)
}

/// Appends the padded base64 of `bytes`, a block at a time through a small buffer: every byte
/// of the answer is written once, where encoding into a zeroed tail would write it twice.
fn base64_into(out: &mut Vec<u8>, bytes: &[u8]) -> io::Result<()> {
    use base64::Engine as _;
    /// Input per block: a multiple of 3, so only the last block is padded.
    const BLOCK: usize = 3 * 1024;
    let mut encoded = [0u8; BLOCK / 3 * 4];
    out.reserve(base64_len(bytes.len()));
    for block in bytes.chunks(BLOCK) {
        let n = base64::engine::general_purpose::STANDARD
            .encode_slice(block, &mut encoded)
            .map_err(io::Error::other)?;
        out.extend_from_slice(&encoded[..n]);
    }
    Ok(())
}

/// JSON string escaping as serde_json does it (the same escapes, lowercase `\u00XX` for
/// other control characters), copying the runs between escapes whole.
fn escape_into(out: &mut Vec<u8>, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len());
    let mut run = 0;
    while let Some(j) = next_escape(s, run) {
        out.extend_from_slice(&s[run..j]);
        run = j + 1;
        match s[j] {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            c => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(c >> 4)],
                HEX[usize::from(c & 0xf)],
            ]),
        }
    }
    out.extend_from_slice(&s[run..]);
}

const fn needs_escape(c: u8) -> bool {
    c < 0x20 || c == b'"' || c == b'\\'
}

/// The first byte at or after `from` that JSON must escape.
///
/// A 32-byte chunk with none is skipped with one branch (the fold becomes vector compares:
/// a base64 blob is all such chunks). In a chunk with one, the byte is found eight at a time
/// ([`escape_mask`]) instead of one at a time: text has a newline every line, so most of its
/// chunks have one, and the byte loop was most of a 1 KiB read's serialisation.
fn next_escape(s: &[u8], mut from: usize) -> Option<usize> {
    while let Some(chunk) = s.get(from..from + 32) {
        if chunk.iter().fold(false, |acc, &c| acc | needs_escape(c)) {
            let hit = chunk
                .chunks_exact(8)
                .enumerate()
                .find_map(|(k, w)| {
                    let word = u64::from_le_bytes(<[u8; 8]>::try_from(w).ok()?);
                    let m = escape_mask(word);
                    (m != 0).then(|| k * 8 + (m.trailing_zeros() / 8) as usize)
                })
                .or_else(|| chunk.iter().position(|&c| needs_escape(c)));
            if let Some(at) = hit {
                return Some(from + at);
            }
        }
        from += 32;
    }
    s[from..]
        .iter()
        .position(|&c| needs_escape(c))
        .map(|at| from + at)
}

/// Bit 7 of each byte of `word` that JSON must escape (below 0x20, `"` or `\`), exactly:
/// every sum stays inside its byte, so no byte's answer leaks into its neighbour's.
const fn escape_mask(word: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const fn ones(b: u8) -> u64 {
        u64::from_ne_bytes([b; 8])
    }
    // Bit 7 ends up clear exactly in the bytes below 0x20: (b & 0x7f) + 0x60 reaches 0x80
    // from 0x20 on, and `| word` sets it for 0x80 and up.
    let below = !(((word & LOW7) + ones(0x60)) | word);
    // Bit 7 clear exactly in the zero bytes of `x`.
    const fn zero_bytes(x: u64) -> u64 {
        !(((x & LOW7) + LOW7) | x)
    }
    let quote = zero_bytes(word ^ ones(b'"'));
    let backslash = zero_bytes(word ^ ones(b'\\'));
    (below | quote | backslash) & HIGH
}

/// An answer the transport gives itself, as JSON. An error that answers no readable id
/// carries `"id": null`, as JSON-RPC 2.0 asks (rmcp leaves the member out).
pub(crate) fn own_answer_json(answer: TxJsonRpcMessage<RoleServer>) -> io::Result<Vec<u8>> {
    match answer {
        JsonRpcMessage::Error(e) if e.id.is_none() => Ok(serde_json::to_vec(
            &serde_json::json!({"jsonrpc": "2.0", "id": null, "error": e.error}),
        )?),
        other => to_json(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::RequestId;

    fn read_answer(contents: Vec<ResourceContents>) -> TxJsonRpcMessage<RoleServer> {
        TxJsonRpcMessage::<RoleServer>::response(
            ServerResult::ReadResourceResult(rmcp::model::ReadResourceResult::new(contents)),
            RequestId::String("r-1".into()),
        )
    }

    #[test]
    fn spliced_answers_are_what_serde_json_writes() {
        // Every byte value that needs escaping, at chunk edges and in runs, plus UTF-8.
        let mut nasty = String::new();
        for i in 0..2000u32 {
            let c = char::from_u32(i % 0x24).unwrap();
            nasty.push(c);
            nasty.push_str(&"é✓x".repeat((i % 40) as usize));
            if i % 7 == 0 {
                nasty.push_str("\\\"\u{7f}\u{1}mcpr-0000000000000000-0\u{1}");
            }
        }
        let blob = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            (0..100_000u32).map(|i| (i * 7) as u8).collect::<Vec<u8>>(),
        );
        let cases = vec![
            vec![ResourceContents::text(nasty.clone(), "file:///a \"q\".txt")],
            vec![
                ResourceContents::blob(blob.clone(), "file:///b.bin")
                    .with_mime_type("application/octet-stream"),
            ],
            vec![
                ResourceContents::text("short", "file:///s"),
                ResourceContents::text("x".repeat(SPLICE_FROM), "file:///edge"),
                ResourceContents::blob(blob, "file:///c"),
                ResourceContents::text(nasty, "file:///d"),
            ],
            vec![ResourceContents::text("", "file:///empty")],
        ];
        for contents in cases {
            let msg = read_answer(contents);
            let want = serde_json::to_vec(&msg).unwrap();
            let got = to_json(msg).unwrap();
            assert!(
                got == want,
                "differs:\n{}\n{}",
                String::from_utf8_lossy(&got[..got.len().min(300)]),
                String::from_utf8_lossy(&want[..want.len().min(300)])
            );
        }
    }

    #[test]
    fn kept_blobs_encode_as_the_blobs_would() {
        use base64::Engine as _;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        // Sizes around the splice threshold and every padding length, with text around.
        let bytes: Vec<Vec<u8>> = [SPLICE_FROM, SPLICE_FROM + 1, SPLICE_FROM + 2, 300_001]
            .iter()
            .map(|&n| (0..n).map(|i| (i * 31 + i / 7) as u8).collect())
            .collect();
        let text = "line \"one\"\n".repeat(200);
        let full = |i: usize| {
            ResourceContents::blob(b64(&bytes[i]), format!("file:///b{i}.bin"))
                .with_mime_type("application/octet-stream")
        };
        let want = read_answer(vec![
            full(0),
            ResourceContents::text(text.clone(), "file:///t"),
            full(1),
            ResourceContents::blob("AAEC", "file:///small"),
            full(2),
            full(3),
        ]);
        let want = serde_json::to_vec(&want).unwrap();
        let mut kept = RawBlobs::default();
        let mut contents = Vec::new();
        for (at, i) in [(0, 0), (2, 1), (4, 2), (5, 3)] {
            while contents.len() < at {
                contents.push(match contents.len() {
                    1 => ResourceContents::text(text.clone(), "file:///t"),
                    _ => ResourceContents::blob("AAEC", "file:///small"),
                });
            }
            let mut b = bytes[i].clone();
            assert!(kept.keep(at, &mut b));
            assert!(b.is_empty());
            contents.push(
                ResourceContents::blob(String::new(), format!("file:///b{i}.bin"))
                    .with_mime_type("application/octet-stream"),
            );
        }
        let got = to_json_with(read_answer(contents), kept).unwrap();
        assert!(got == want, "differs");
        // A small blob is not kept: it goes through serde_json as it is.
        let mut small = vec![1u8; SPLICE_FROM - 1];
        assert!(!RawBlobs::default().keep(0, &mut small));
        assert_eq!(small.len(), SPLICE_FROM - 1);
    }

    #[test]
    fn a_kept_blob_without_its_contents_is_an_error_not_an_empty_blob() {
        let mut kept = RawBlobs::default();
        assert!(kept.keep(3, &mut vec![0u8; SPLICE_FROM]));
        let answer = read_answer(vec![ResourceContents::blob(String::new(), "file:///a")]);
        assert!(to_json_with(answer, kept).is_err());
        let mut kept = RawBlobs::default();
        assert!(kept.keep(0, &mut vec![0u8; SPLICE_FROM]));
        let answer = read_answer(vec![ResourceContents::text("x", "file:///a")]);
        assert!(to_json_with(answer, kept).is_err());
    }

    #[test]
    fn escaping_finds_every_byte_that_needs_it_wherever_it_is() {
        // Each ASCII byte (and a two-byte character) at every offset of strings that span
        // the word and chunk edges, alone and next to a second one, against serde_json.
        let specials: Vec<String> = (0u8..0x80)
            .map(|b| char::from(b).to_string())
            .chain(["é".to_string(), "✓".to_string()])
            .collect();
        let check = |text: &str| {
            let mut got = vec![b'"'];
            escape_into(&mut got, text.as_bytes());
            got.push(b'"');
            assert_eq!(
                String::from_utf8_lossy(&got),
                serde_json::to_string(text).unwrap(),
                "{text:?}"
            );
        };
        for len in [1, 7, 8, 9, 31, 32, 33, 40, 64, 70] {
            for at in 0..len {
                for c in &specials {
                    let mut t = "a".repeat(at);
                    t.push_str(c);
                    t.push_str(&"b".repeat(len - at - 1));
                    check(&t);
                    let mut two = t.clone();
                    two.insert(at.min(two.len() - c.len()), '"');
                    check(&two);
                }
            }
        }
        check("");
        check(&"\n".repeat(100));
        check(&"\u{1f}\u{7f}\u{80}".repeat(50));
    }
}
