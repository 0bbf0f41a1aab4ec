//! The JSON encoder of answers: byte for byte what `serde_json::to_vec` writes (and so what
//! rmcp's transports write), with the large contents of a `resources/read` answer spliced in
//! and escaped a chunk at a time; and the answers a transport gives itself, whose null id
//! rmcp would leave out. The mirror of rmcp 3.11.0's answers as its transports write them
//! (`serde_json` over its `model.rs` types, after its dispatch: `handler/server.rs`). Paired
//! with rmcp's types and `serde_json` by the tests below.

use std::io;

use rmcp::model::{JsonRpcMessage, ResourceContents, ServerResult};
use rmcp::service::{RoleServer, TxJsonRpcMessage};

/// One message as JSON, byte for byte what `serde_json::to_vec` writes, with large read
/// contents escaped a chunk at a time (see [`SPLICE_FROM`]): every answer of the stdio
/// transport, and the HTTP direct path's body.
pub(crate) fn to_json(mut item: TxJsonRpcMessage<RoleServer>) -> io::Result<Vec<u8>> {
    let taken = take_contents(&mut item);
    // With contents taken out this is the small skeleton; `splice_contents` sizes the answer.
    let mut bytes = Vec::with_capacity(512);
    serde_json::to_writer(&mut bytes, &item)?;
    if !taken.is_empty() {
        bytes = splice_contents(&bytes, &taken)?;
    }
    Ok(bytes)
}

/// Contents from this size on are escaped by [`quoted_into`] instead of serde_json.
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

/// Takes the large text and blob strings out of a `resources/read` answer, leaving markers;
/// each is returned with the index of its marker.
fn take_contents(item: &mut TxJsonRpcMessage<RoleServer>) -> Vec<(usize, String)> {
    let mut taken = Vec::new();
    if let JsonRpcMessage::Response(r) = item
        && let ServerResult::ReadResourceResult(result) = &mut r.result
    {
        for c in &mut result.contents {
            if taken.len() == MAX_SPLICED {
                break;
            }
            let body = match c {
                ResourceContents::TextResourceContents { text, .. } => text,
                ResourceContents::BlobResourceContents { blob, .. } => blob,
                _ => continue,
            };
            if body.len() >= SPLICE_FROM {
                let i = taken.len();
                let body = std::mem::replace(body, markers()[i].0.clone());
                taken.push((i, body));
            }
        }
    }
    taken
}

/// `skeleton` with each marker (as serde_json wrote it) replaced by its escaped contents.
fn splice_contents(skeleton: &[u8], taken: &[(usize, String)]) -> io::Result<Vec<u8>> {
    // One byte more for the newline the stdio transport ends the line with. A large answer
    // takes a kept buffer, with its pages in (mcpr_core::spare).
    let mut out = mcpr_core::spare::buffer(
        skeleton.len() + 1 + taken.iter().map(|(_, s)| s.len() + 16).sum::<usize>(),
    );
    let mut rest = skeleton;
    for (i, body) in taken {
        let finder = &markers()[*i].1;
        let at = finder
            .find(rest)
            .ok_or_else(|| io::Error::other("answer marker lost in serialisation"))?;
        out.extend_from_slice(&rest[..at]);
        quoted_into(&mut out, body);
        rest = &rest[at + finder.needle().len()..];
    }
    out.extend_from_slice(rest);
    Ok(out)
}

/// The whole answer to a successful `resources/read` of id `id`, as rmcp's dispatch would
/// shape it for the era (`hints` for 2026-07-28: with `resultType` and the cache hints `ttl_ms`
/// and `scope`; legacy: neither) and `serde_json` would write it, built straight from the
/// provider's contents. The direct read paths used to build rmcp's result (each
/// blob base64-encoded into a `String`), wrap it in a message, serialise that skeleton and
/// splice the contents in: about a quarter of a small read's user time. The output is byte for
/// byte [`to_json`] of what [`crate::wire::era::read_message`] makes of the same read
/// (tested below, every shape of contents in both eras).
pub(crate) fn read_answer_json(
    id: &rmcp::model::RequestId,
    contents: &[mcpr_core::Contents],
    hints: Option<(u64, rmcp::model::CacheScope)>,
) -> io::Result<Vec<u8>> {
    use mcpr_core::ContentsBody;
    let room: usize = contents
        .iter()
        .map(|c| {
            c.uri.len()
                + 64
                + match &c.body {
                    ContentsBody::Text(t) => t.len() + t.len() / 8,
                    ContentsBody::Blob(b) => b.len().div_ceil(3) * 4,
                }
        })
        .sum();
    // One byte more for the newline the stdio transport ends the line with. A large answer
    // takes a kept buffer, with its pages in (mcpr_core::spare).
    let mut out = mcpr_core::spare::buffer(129 + room);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    serde_json::to_writer(&mut out, id)?;
    out.extend_from_slice(br#","result":{"#);
    if let Some((ttl_ms, scope)) = hints {
        out.extend_from_slice(br#""resultType":"complete","ttlMs":"#);
        serde_json::to_writer(&mut out, &ttl_ms)?;
        out.extend_from_slice(br#","cacheScope":"#);
        serde_json::to_writer(&mut out, &scope)?;
        out.push(b',');
    }
    out.extend_from_slice(br#""contents":["#);
    for (i, c) in contents.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"uri":"#);
        quoted_into(&mut out, &c.uri);
        if let Some(mime) = &c.mime_type {
            out.extend_from_slice(br#","mimeType":"#);
            quoted_into(&mut out, mime);
        }
        match &c.body {
            ContentsBody::Text(text) => {
                out.extend_from_slice(br#","text":"#);
                quoted_into(&mut out, text);
            }
            ContentsBody::Blob(bytes) => {
                // Base64 has nothing JSON escapes: written in place, as serde_json would.
                out.extend_from_slice(br#","blob":""#);
                base64_into(&mut out, bytes)?;
                out.push(b'"');
            }
        }
        if let Some(meta) = &c.meta {
            out.extend_from_slice(br#","_meta":"#);
            serde_json::to_writer(&mut out, meta)?;
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}}");
    Ok(out)
}

/// Appends the padded base64 of `bytes`, a block at a time through a small buffer: every byte
/// of the answer is written once, where encoding into a zeroed tail would write it twice.
fn base64_into(out: &mut Vec<u8>, bytes: &[u8]) -> io::Result<()> {
    use base64::Engine as _;
    /// Input per block: a multiple of 3, so only the last block is padded.
    const BLOCK: usize = 3 * 1024;
    let mut encoded = [0u8; BLOCK / 3 * 4];
    out.reserve(bytes.len().div_ceil(3) * 4);
    for block in bytes.chunks(BLOCK) {
        let n = base64::engine::general_purpose::STANDARD
            .encode_slice(block, &mut encoded)
            .map_err(io::Error::other)?;
        out.extend_from_slice(&encoded[..n]);
    }
    Ok(())
}

/// `s` as a JSON string, quotes included, as serde_json writes it (the same escapes,
/// lowercase `\u00XX` for the other control characters; checked below against serde_json
/// for every ASCII byte at every offset).
///
/// `json_escape_simd` (sonic-rs's kernel) finds the bytes to escape sixteen or thirty-two at
/// a time and copies the runs between them whole. Text has a newline every line, and the
/// word-at-a-time search this replaced re-scanned from each one: about 4,300 instructions
/// for the 1 KiB bench file against 1,100 (callgrind), and on a Xeon it was 7 % of the
/// server's CPU at 32 reads in flight (perf).
///
/// The kernel's stores run ahead of what it writes, so it reserves six bytes of room per
/// byte of input past the end of its output: escaping into the answer itself would grow
/// every answer (a reallocation per read) and make a 16 MiB text reserve 96 MiB. It writes
/// into a per-thread scratch buffer instead, [`ESCAPE_PIECE`] bytes of input at a time, and
/// each piece is copied into the answer without the quotes the kernel puts around it.
fn quoted_into(out: &mut Vec<u8>, s: &str) {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    out.reserve(s.len() + 2);
    out.push(b'"');
    let mut rest = s;
    while !rest.is_empty() {
        let mut end = rest.len().min(ESCAPE_PIECE);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, tail) = rest.split_at(end);
        SCRATCH.with_borrow_mut(|scratch| {
            scratch.clear();
            // The kernel's own `reserve` would double the buffer past what a piece needs.
            scratch.reserve_exact(ESCAPE_SCRATCH);
            json_escape_simd::escape_into(piece, scratch);
            // The kernel's own quotes are the first and last bytes.
            out.extend_from_slice(&scratch[1..scratch.len() - 1]);
        });
        rest = tail;
    }
    out.push(b'"');
}

/// Input escaped per call of the kernel.
const ESCAPE_PIECE: usize = 8 * 1024;
/// What the kernel asks of the scratch buffer for a whole piece (six bytes per input byte and
/// 35 more), reserved exactly, so the buffer stays this size (48 KiB) on every thread.
const ESCAPE_SCRATCH: usize = ESCAPE_PIECE * 6 + 35;

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
    fn direct_read_answers_are_what_rmcp_dispatch_and_serde_json_make() {
        use mcpr_core::{Contents, ContentsBody};
        let text = |uri: &str, mime: Option<&str>, t: &str| Contents {
            uri: uri.into(),
            mime_type: mime.map(Into::into),
            body: ContentsBody::Text(t.into()),
            meta: None,
        };
        let blob = |uri: &str, mime: Option<&str>, len: u32| Contents {
            uri: uri.into(),
            mime_type: mime.map(Into::into),
            body: ContentsBody::Blob((0..len).map(|i| (i * 31 % 251) as u8).collect()),
            meta: None,
        };
        let mut windowed = text("file:///w.log", Some("text/plain"), "line\n\"two\"\u{1}");
        windowed.meta = Some(
            serde_json::json!({"range": {"from": 10, "to": 20}, "total": 99, "é": [null, 1.5]})
                .as_object()
                .unwrap()
                .clone(),
        );
        let long = "é✓ \\ \" \t".repeat(200);
        let cases: Vec<Vec<Contents>> = vec![
            vec![text("file:///a.md", Some("text/markdown"), "# A\n")],
            vec![text("file:///a \"q\"\u{7f}.txt", None, &long)],
            vec![text("file:///empty", Some("text/plain"), "")],
            vec![blob(
                "file:///b.bin",
                Some("application/octet-stream"),
                1000,
            )],
            vec![
                blob("file:///c", None, 0),
                blob("file:///d", None, 1),
                blob("file:///e", None, 2),
            ],
            vec![
                windowed.clone(),
                text("db://x/y?z=1", Some("application/json"), "{}"),
            ],
            vec![],
        ];
        let ids = [
            RequestId::Number(7),
            RequestId::Number(-9_007_199_254_740_993),
            RequestId::String("r\"1\u{1}".into()),
        ];
        let scopes = [
            None,
            Some((0, rmcp::model::CacheScope::Public)),
            Some((86_400_000, rmcp::model::CacheScope::Private)),
        ];
        for contents in &cases {
            for id in &ids {
                for modern in scopes {
                    let mut result = rmcp::model::ReadResourceResult::new(
                        contents
                            .iter()
                            .cloned()
                            .map(crate::handler::contents_of)
                            .collect(),
                    );
                    if let Some((ttl, scope)) = modern {
                        result = result.with_ttl_ms(ttl).with_cache_scope(scope);
                    }
                    let want = to_json(crate::wire::era::read_message(
                        Ok(result.into()),
                        id.clone(),
                        if modern.is_some() {
                            crate::wire::era::Era::Modern
                        } else {
                            crate::wire::era::Era::Legacy
                        },
                    ))
                    .unwrap();
                    let got = read_answer_json(id, contents, modern).unwrap();
                    assert!(
                        got == want,
                        "differs:\n{}\n{}",
                        String::from_utf8_lossy(&got),
                        String::from_utf8_lossy(&want)
                    );
                }
            }
        }
    }

    #[test]
    fn escaping_finds_every_byte_that_needs_it_wherever_it_is() {
        // Each ASCII byte (and a two-byte character) at every offset of strings that span
        // the word and chunk edges, alone and next to a second one, against serde_json; from
        // 128 bytes on, the kernel's four-vector loop, with the byte in each of its vectors.
        let specials: Vec<String> = (0u8..0x80)
            .map(|b| char::from(b).to_string())
            .chain(["é".to_string(), "✓".to_string()])
            .collect();
        let check = |text: &str| {
            let mut got = Vec::new();
            quoted_into(&mut got, text);
            assert_eq!(
                String::from_utf8_lossy(&got),
                serde_json::to_string(text).unwrap(),
                "{text:?}"
            );
        };
        for len in [
            1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 47, 48, 49, 64, 70, 127, 128, 129, 192, 256,
        ] {
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
        // Longer than one piece of the kernel's input: characters of one to three bytes and
        // escapes on and around the piece edges.
        for shift in 0..4 {
            let mut t = "a".repeat(ESCAPE_PIECE - 2 + shift);
            t.push_str("✓\"\n é\\");
            t.push_str(&"x\ty\u{1}".repeat(ESCAPE_PIECE));
            check(&t);
        }
        check(&"é".repeat(ESCAPE_PIECE + 1));
        check(&"✓".repeat(3 * ESCAPE_PIECE + 1));
    }
}
