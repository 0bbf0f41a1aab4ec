//! The wire: everything that mirrors rmcp, in one place. The fast paths (the stdio
//! transport's own decode and direct reads, the HTTP direct read path) answer some messages
//! without rmcp; to answer them as rmcp would, they copy what rmcp does, and that copy lives
//! here, each part with tests that pair it with rmcp itself:
//!
//! - [`decode`]: the tagged decode of the hot requests (equal to rmcp's untagged decode);
//! - [`encode`]: the JSON writer of answers (equal to `serde_json`, with read contents
//!   spliced and escaped a chunk at a time) and of a transport's own answers;
//! - [`refusals`] with [`params`]: the JSON-RPC errors for lines and bodies rmcp's codec
//!   drops, refuses with a bare HTTP error, or misreads;
//! - [`lifecycle`]: the stdio direct path's mirror of rmcp's handshake (which session rmcp
//!   opened, and so which reads it would only hand to the handler);
//! - [`http_checks`]: the checks rmcp's streamable HTTP service makes before it takes a
//!   request (Host, Origin, content types, the 2026-07-28 headers) and the status it
//!   answers with: what the HTTP direct path and the operational endpoints check;
//! - [`http_answers`]: rmcp's HTTP answers word for word, for the edge and the direct path
//!   answering in its place, and the rewrite of its 202 to a DELETE;
//! - [`codes`]: the JSON-RPC error codes answered outside rmcp's dispatch;
//! - [`era`]: what rmcp's dispatch does to an answer per protocol era;
//! - [`notify`]: the notification of a change, written once for every path that sends one.
//!
//! On an rmcp upgrade, re-check this folder: run its tests (they compare with rmcp), the
//! pairing tests of both direct paths and of the HTTP edge against rmcp
//! (`tests/stdio_direct.rs`, `tests/http_direct.rs`, `tests/sessions.rs`,
//! `tests/http_hardening.rs`), and read rmcp's changes to its codec
//! (`transport/async_rw.rs`), its handshake and dispatch (`service/server.rs`,
//! `handler/server.rs`), its streamable HTTP checks and answers
//! (`transport/streamable_http_server`)
//! and the request types' `Deserialize` (`model.rs`) against the parts above.

pub(crate) mod codes;
pub(crate) mod decode;
pub(crate) mod encode;
pub(crate) mod era;
pub(crate) mod http_answers;
pub(crate) mod http_checks;
pub(crate) mod lifecycle;
pub(crate) mod notify;
pub(crate) mod params;
pub(crate) mod refusals;
