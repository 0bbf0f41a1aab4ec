//! The stdio direct read path's mirror of rmcp's handshake: which lifecycle rmcp chose for
//! the session, and so whether rmcp's dispatch would do nothing to a `resources/read` but
//! call the handler (then the transport may answer it itself) and for which era.

use rmcp::model::{ClientRequest, GetMeta as _, ProtocolVersion, RequestMetaObject};

use crate::McpHandler;

/// The session's lifecycle as the transport sees it, from the messages it hands rmcp and
/// the answers rmcp sends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Lifecycle {
    /// rmcp is still choosing the lifecycle (its handshake reads the messages).
    Opening,
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
    /// rmcp answered an `initialize` with `version`: below 2026-07-28 the first one opens a
    /// legacy session; any other leaves everything to rmcp.
    pub(crate) fn initialized(&mut self, version: &ProtocolVersion) {
        *self = if *self == Lifecycle::Opening
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
        // A second `initialize` may change what rmcp makes of the reads behind it, and
        // its answer goes out only after they are read: from here on rmcp answers all.
        if matches!(request, ClientRequest::InitializeRequest(_)) && *self != Lifecycle::Opening {
            *self = Lifecycle::Other;
            return false;
        }
        // The request rmcp's handshake opens an inline session with; rmcp answers it.
        if *self == Lifecycle::Opening && opens_inline(request, handler) {
            *self = Lifecycle::Inline;
            return true;
        }
        false
    }

    /// Whether rmcp's dispatch would do nothing to a `resources/read` with this `_meta` but call
    /// the handler, and if so whether it would treat it as a 2026-07-28 request (`Some(true)`).
    /// A legacy session's request naming no version of its own is a legacy one; a request in an
    /// open session naming exactly 2026-07-28, with every `_meta` member that version requires, is
    /// a 2026-07-28 one (rmcp checks those members and takes the request's version). Anything else
    /// is left to rmcp.
    pub(crate) fn era(self, meta: Option<&RequestMetaObject>) -> Option<bool> {
        let named = meta.is_some_and(|m| m.contains_key(PROTOCOL_VERSION_KEY));
        match self {
            Lifecycle::Legacy if !named => Some(false),
            Lifecycle::Legacy | Lifecycle::Inline => meta
                .is_some_and(super::era::complete_2026_07_28)
                .then_some(true),
            Lifecycle::Opening | Lifecycle::Other => None,
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
