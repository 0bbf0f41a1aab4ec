//! The answer encoder on any text, through the stdio transport as the server sends a
//! `resources/read` answer: its line must be byte for byte what `serde_json::to_vec` writes
//! for the same message. Large texts are escaped by `json_escape_simd` (SIMD, `unsafe`) a
//! piece at a time instead of serde_json, so this holds that young crate and our piece
//! splitting to serde_json's escaping of every string the fuzzer finds.

#![no_main]

use std::io::Read;
use std::os::fd::OwnedFd;

use libfuzzer_sys::fuzz_target;
use mcpr_server::stdio::StdioTransport;
use rmcp::model::{ReadResourceResult, RequestId, ResourceContents, ServerResult};
use rmcp::service::{RoleServer, TxJsonRpcMessage};
use rmcp::transport::Transport as _;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    // The first byte: how often the text repeats (so short inputs also reach the large-text
    // path, past 512 bytes, and the 8 KiB piece edges), and whether a short second content
    // follows it.
    let (shape, rest) = match data.split_first() {
        Some((b, rest)) => (*b, rest),
        None => (0, data),
    };
    let piece = String::from_utf8_lossy(rest);
    let repeat = 1 + usize::from(shape & 0x3f) * 37;
    let text = piece.repeat(repeat);
    let mut contents = vec![ResourceContents::text(text, "file:///fuzz \"q\".txt")];
    if shape & 0x40 != 0 {
        contents.push(ResourceContents::text(piece.into_owned(), "file:///small"));
    }
    let msg = TxJsonRpcMessage::<RoleServer>::response(
        ServerResult::ReadResourceResult(ReadResourceResult::new(contents)),
        RequestId::Number(7),
    );
    let mut want = serde_json::to_vec(&msg).expect("serde_json writes it");
    want.push(b'\n');

    let (server_r, client_w) = std::io::pipe().expect("a pipe");
    let (mut client_r, server_w) = std::io::pipe().expect("a pipe");
    let collector = std::thread::spawn(move || {
        let mut out = Vec::new();
        client_r.read_to_end(&mut out).expect("read the output");
        out
    });
    runtime().block_on(async {
        let mut t = StdioTransport::on_threads(OwnedFd::from(server_r), OwnedFd::from(server_w));
        t.send(msg).await.expect("the answer is sent");
        // Nothing more will be read: the transport's input ends.
        drop(client_w);
        t.close().await.expect("close");
    });
    let got = collector.join().expect("the collector");
    assert!(
        got == want,
        "the transport's answer differs from serde_json's ({} vs {} bytes), first at byte {:?}",
        got.len(),
        want.len(),
        got.iter().zip(&want).position(|(a, b)| a != b)
    );
});
