//! The stdio direct read path's mirror of rmcp's handshake: which lifecycle rmcp chose for
//! the session, and so whether rmcp's dispatch would do nothing to a `resources/read` but
//! call the handler (then the transport may answer it itself) and for which era. Mirrors
//! rmcp 3.11.0's `service/server.rs` (`serve_server`'s handshake) and `handler/server.rs`
//! (the dispatch's checks of a request's `_meta`); paired with rmcp by
//! `tests/stdio_direct.rs`, which answers the same reads through the direct path and through
//! rmcp and compares them byte for byte, and checked by the tests below.

use rmcp::model::{ClientRequest, GetMeta as _, ProtocolVersion, RequestMetaObject};

use super::era::Era;
use crate::McpHandler;

/// The session's lifecycle as the transport sees it, from the messages it hands rmcp and
/// the answers rmcp sends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Lifecycle {
    /// rmcp is still choosing the lifecycle (its handshake reads the messages).
    Opening,
    /// An `initialize` was read and is not answered yet. The stdio reader thread reads ahead
    /// of rmcp's handshake, so what follows it is left to rmcp until its answer is queued.
    Initializing,
    /// One `initialize` answered with a version before 2026-07-28: a legacy session.
    Legacy,
    /// Opened without `initialize` by a request carrying its own 2026-07-28 `_meta`.
    Inline,
    /// Anything else (a second `initialize`, an `initialize` answered with 2026-07-28):
    /// rmcp answers everything.
    Other,
}

/// The `_meta` member that makes a request choose its own protocol version.
const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";

impl Lifecycle {
    /// rmcp answered an `initialize` with `version` (and the answer is queued): below
    /// 2026-07-28 the first one opens a legacy session; any other leaves everything to rmcp.
    pub(crate) fn initialized(&mut self, version: &ProtocolVersion) {
        *self = if matches!(self, Lifecycle::Opening | Lifecycle::Initializing)
            && version.as_str() < ProtocolVersion::V_2026_07_28.as_str()
        {
            Lifecycle::Legacy
        } else {
            Lifecycle::Other
        };
    }

    /// What `request`, about to be handed to rmcp or answered directly, tells of the
    /// lifecycle; `true` when it is the request rmcp's handshake opens an inline session
    /// with, which rmcp answers.
    pub(crate) fn saw(&mut self, request: &ClientRequest, handler: &McpHandler) -> bool {
        // The first `initialize`: nothing is taken until its answer is queued (an `initialize`
        // answered with an error leaves everything to rmcp for good). A second one may change
        // what rmcp makes of the reads behind it, and its answer goes out only after they
        // are read: from here on rmcp answers all.
        if matches!(request, ClientRequest::InitializeRequest(_)) {
            *self = if *self == Lifecycle::Opening {
                Lifecycle::Initializing
            } else {
                Lifecycle::Other
            };
            return false;
        }
        // The request rmcp's handshake opens an inline session with; rmcp answers it.
        if *self == Lifecycle::Opening && opens_inline(request, handler) {
            *self = Lifecycle::Inline;
            return true;
        }
        false
    }

    /// A message that is not a request (a notification, a response): before the lifecycle is
    /// chosen rmcp's handshake refuses it and the session never opens, so nothing after it
    /// is taken (the stdio reader thread reads ahead of that handshake).
    pub(crate) fn saw_other(&mut self) {
        if *self == Lifecycle::Opening {
            *self = Lifecycle::Other;
        }
    }

    /// Whether rmcp's dispatch would do nothing to a `resources/read` with this `_meta` but call
    /// the handler, and if so in which era it would answer it.
    /// A legacy session's request naming no version of its own is a legacy one; a request in an
    /// open session naming exactly 2026-07-28, with every `_meta` member that version requires, is
    /// a 2026-07-28 one (rmcp checks those members and takes the request's version). Anything else
    /// is left to rmcp.
    pub(crate) fn era(self, meta: Option<&RequestMetaObject>) -> Option<Era> {
        let named = meta.is_some_and(|m| m.contains_key(PROTOCOL_VERSION_KEY));
        match self {
            Lifecycle::Legacy if !named => Some(Era::Legacy),
            Lifecycle::Legacy | Lifecycle::Inline => meta
                .is_some_and(super::era::complete_2026_07_28)
                .then_some(Era::Modern),
            Lifecycle::Opening | Lifecycle::Initializing | Lifecycle::Other => None,
        }
    }
}

/// Whether rmcp's handshake opens an inline session with `request`: not a ping, `initialize`
/// or discover, with complete 2026-07-28 `_meta` naming a version the server supports.
fn opens_inline(request: &ClientRequest, handler: &McpHandler) -> bool {
    if matches!(
        request,
        ClientRequest::PingRequest(_)
            | ClientRequest::InitializeRequest(_)
            | ClientRequest::DiscoverRequest(_)
    ) {
        return false;
    }
    let meta = request.get_meta();
    meta.missing_required_keys(&ProtocolVersion::V_2026_07_28)
        .is_empty()
        && meta
            .protocol_version()
            .is_some_and(|v| rmcp::Service::supported_protocol_versions(handler).contains(&v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::JsonRpcMessage;

    /// The `_meta` of a read whose `params._meta` is `meta` (JSON), as rmcp's decode puts it
    /// in the request's extensions.
    fn meta_of(meta: Option<&str>) -> Option<RequestMetaObject> {
        let meta = meta.map_or(String::new(), |m| format!(r#","_meta":{m}"#));
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{{"uri":"file:///a"{meta}}}}}"#
        );
        let Some(JsonRpcMessage::Request(r)) = crate::wire::decode::decode_hot(line.as_bytes())
        else {
            panic!("not a request: {line}")
        };
        let ClientRequest::ReadResourceRequest(read) = r.request else {
            panic!("not a read: {line}")
        };
        read.extensions.get::<RequestMetaObject>().cloned()
    }

    const COMPLETE: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}"#;
    const VERSION_ONLY: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
    const OLDER: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}"#;

    #[test]
    fn a_read_is_taken_only_where_rmcp_would_only_call_the_handler() {
        let cases = [
            (Lifecycle::Legacy, None, Some(Era::Legacy)),
            (
                Lifecycle::Legacy,
                Some(r#"{"progressToken":1}"#),
                Some(Era::Legacy),
            ),
            (Lifecycle::Legacy, Some(COMPLETE), Some(Era::Modern)),
            (Lifecycle::Legacy, Some(VERSION_ONLY), None),
            (Lifecycle::Legacy, Some(OLDER), None),
            (Lifecycle::Inline, None, None),
            (Lifecycle::Inline, Some(COMPLETE), Some(Era::Modern)),
            (Lifecycle::Inline, Some(VERSION_ONLY), None),
            (Lifecycle::Opening, Some(COMPLETE), None),
            (Lifecycle::Other, Some(COMPLETE), None),
            (Lifecycle::Other, None, None),
        ];
        for (lifecycle, meta, want) in cases {
            let m = meta_of(meta);
            assert_eq!(lifecycle.era(m.as_ref()), want, "{lifecycle:?} {meta:?}");
        }
    }

    #[tokio::test]
    async fn what_follows_an_initialize_is_left_to_rmcp_until_it_is_answered() {
        let state = crate::ServerState::new(crate::Settings::default(), Vec::new());
        let handler = McpHandler::new(state);
        let request = |line: &str| match crate::wire::decode::rmcp_decode(line) {
            Ok(Some(JsonRpcMessage::Request(r))) => r.request,
            other => panic!("not a request: {other:?}"),
        };
        let init = request(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        );
        let inline = request(&format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{{"uri":"file:///a","_meta":{COMPLETE}}}}}"#
        ));
        let mut l = Lifecycle::Opening;
        assert!(!l.saw(&init, &handler));
        assert_eq!(l, Lifecycle::Initializing);
        // A request that would open an inline session does not, behind an `initialize`.
        assert!(!l.saw(&inline, &handler));
        assert_eq!(l, Lifecycle::Initializing);
        assert_eq!(l.era(meta_of(Some(COMPLETE)).as_ref()), None);
        assert_eq!(l.era(None), None);
        l.initialized(&ProtocolVersion::V_2025_11_25);
        assert_eq!(l, Lifecycle::Legacy);
        // Two `initialize` read before the first is answered: rmcp answers everything.
        let mut l = Lifecycle::Opening;
        l.saw(&init, &handler);
        l.saw(&init, &handler);
        assert_eq!(l, Lifecycle::Other);
        l.initialized(&ProtocolVersion::V_2025_11_25);
        assert_eq!(l, Lifecycle::Other);
        // Without an `initialize`, that request opens an inline session.
        let mut l = Lifecycle::Opening;
        assert!(l.saw(&inline, &handler));
        assert_eq!(l, Lifecycle::Inline);
        l.saw_other();
        assert_eq!(l, Lifecycle::Inline, "a notification in an open session");
        // A notification first fails rmcp's handshake: nothing after it is taken.
        let mut l = Lifecycle::Opening;
        l.saw_other();
        assert_eq!(l, Lifecycle::Other);
        assert!(!l.saw(&inline, &handler));
        assert_eq!(l.era(meta_of(Some(COMPLETE)).as_ref()), None);
    }

    #[test]
    fn only_a_first_initialize_answered_below_2026_07_28_opens_a_legacy_session() {
        let mut l = Lifecycle::Opening;
        l.initialized(&ProtocolVersion::V_2025_11_25);
        assert_eq!(l, Lifecycle::Legacy);
        l.initialized(&ProtocolVersion::V_2025_11_25);
        assert_eq!(l, Lifecycle::Other, "a second initialize");
        let mut l = Lifecycle::Opening;
        l.initialized(&ProtocolVersion::V_2026_07_28);
        assert_eq!(l, Lifecycle::Other);
    }
}
