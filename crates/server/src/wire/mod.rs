//! The wire: everything that mirrors rmcp, in one place. The fast paths (the stdio
//! transport's own decode and direct reads, the HTTP direct read path) answer some messages
//! without rmcp, or build on what rmcp does around them; to do so as rmcp would, they copy
//! what rmcp does, and that copy lives here. Each part is named as a mirror (its module
//! documentation says which rmcp code, of which version, it mirrors) and has beside it a
//! test that runs rmcp's own code and the copy on the same input and compares:
//!
//! - [`decode`]: the tagged decode of the hot requests (equal to rmcp's untagged decode);
//! - [`encode`]: the JSON writer of answers (equal to `serde_json`, with read contents
//!   spliced and escaped a chunk at a time) and of a transport's own answers;
//! - [`refusals`] with [`params`]: the JSON-RPC errors for lines and bodies rmcp's codec
//!   drops, refuses with a bare HTTP error, or misreads;
//! - [`http_refusals`]: the HTTP direct path's answers in place of rmcp's bare 415 and of
//!   its misread list cursor, behind rmcp's own Host and Origin check;
//! - [`lifecycle`]: the stdio direct path's mirror of rmcp's handshake (which session rmcp
//!   opened, and so which reads it would only hand to the handler);
//! - [`cancel`]: the request a `notifications/cancelled` names, whose answer rmcp drops;
//! - [`eof`]: what rmcp's serve loop still sends once input has ended;
//! - [`http_checks`]: the checks rmcp's streamable HTTP service makes before it takes a
//!   request (Host, Origin, content types, the 2026-07-28 headers) and the status it
//!   answers with: what the HTTP direct path checks, and rmcp's Host and Origin check
//!   itself, which the edge applies to the operational endpoints;
//! - [`http_answers`]: rmcp's HTTP answers word for word, for the edge and the direct path
//!   answering in its place; the DELETE rmcp accepts for a session it does not hold, which
//!   the edge answers with its 404; and the rewrite of its 202 to a DELETE;
//! - [`resume`]: how rmcp numbers and resumes a session's notification stream, and the
//!   shift that makes `Last-Event-ID` mean "after this event";
//! - [`codes`]: the JSON-RPC error codes answered outside rmcp's dispatch, and a request
//!   timeout's (-32001, which authentication's refusals share, only beside HTTP 401/403);
//! - [`era`]: what rmcp's dispatch does to an answer per protocol era;
//! - [`notify`]: the notification of a change, written once for every path that sends one.
//!
//! On an rmcp upgrade, these files are the ones to review: read rmcp's changes to its codec
//! (`transport/async_rw.rs`), its serve loop (`service.rs`), its handshake and dispatch
//! (`service/server.rs`, `handler/server.rs`), its streamable HTTP service and sessions
//! (`transport/streamable_http_server/`) and the request types' `Deserialize` (`model.rs`)
//! against the parts above, and run `cargo test -p mcpr-server`: the pairing tests here
//! (and `tests/wire_cancel.rs`), and the end-to-end comparisons of both direct paths and of
//! the HTTP edge with rmcp (`tests/stdio_direct.rs`, `tests/http_direct.rs`,
//! `tests/sessions.rs`, `tests/http_hardening.rs`), fail where rmcp no longer does what a
//! copy says. `rmcp_run.rs` (tests only) runs rmcp's serve loop and HTTP service for those tests.

pub(crate) mod cancel;
pub(crate) mod codes;
pub(crate) mod decode;
pub(crate) mod encode;
pub(crate) mod eof;
pub(crate) mod era;
pub(crate) mod http_answers;
pub(crate) mod http_checks;
pub(crate) mod http_refusals;
pub(crate) mod lifecycle;
pub(crate) mod notify;
pub(crate) mod params;
pub(crate) mod refusals;
pub(crate) mod resume;
#[cfg(test)]
pub(crate) mod rmcp_run;
