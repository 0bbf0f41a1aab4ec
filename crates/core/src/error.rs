//! One error type for every provider and the router, with a kind that the server maps to a
//! JSON-RPC code in exactly one place.

use std::fmt;

/// What went wrong, independent of protocol era. The server decides the wire code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// No such resource, or one the caller may not learn about (denied, outside every mount).
    /// Deliberately the same answer for both, so errors are not an existence oracle.
    NotFound,
    /// The request is malformed or names something this server cannot interpret.
    InvalidParams,
    /// A pagination cursor that was tampered with, truncated, or minted by another server.
    InvalidCursor,
    /// The resource exists but is larger than the configured read limit.
    TooLarge,
    /// The provider does not declare this operation in its capabilities.
    Unsupported,
    /// The upstream source cannot be reached right now; trying later may succeed.
    Unavailable,
    /// The operation took longer than its time limit.
    Timeout,
    /// A bug or an unexpected local failure.
    Internal,
}

impl ErrorKind {
    /// Whether retrying the same request later may succeed.
    pub fn is_temporary(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::Timeout)
    }
}

/// The error every provider returns. `uri` is the resource the error is about, when there
/// is one, so the server can put it in `data.uri` as the spec asks for not-found.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    /// The category, mapped to a JSON-RPC code by the server.
    pub kind: ErrorKind,
    /// A message for humans: what was wrong and, where there is one, what the limit is.
    pub message: String,
    /// The resource URI the error concerns.
    pub uri: Option<String>,
    /// Extra structured facts (sizes, limits) that clients may use.
    pub details: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Shorthand used across the workspace.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            uri: None,
            details: None,
        }
    }

    /// "Resource not found" for `uri`; the message never says *why* (denied, escaped, absent).
    pub fn not_found(uri: impl Into<String>) -> Self {
        let uri = uri.into();
        Self {
            kind: ErrorKind::NotFound,
            message: format!("Resource not found: {uri}"),
            uri: Some(uri),
            details: None,
        }
    }

    /// A subscription refused because `server.max_watches` (`max`) is reached, where
    /// `message` says whose budget it is. The registry and the cluster's watcher both refuse
    /// with it, and the server recognises either by these details.
    pub fn over_watch_budget(max: usize, message: impl Into<String>) -> Self {
        let mut details = serde_json::Map::new();
        details.insert("limit".into(), max.into());
        details.insert("setting".into(), "server.max_watches".into());
        let mut e = Self::new(ErrorKind::Unavailable, message);
        e.details = Some(details);
        e
    }

    /// The one "too large" error: something is more than a limit (bytes, unless `message`
    /// says otherwise). `message` says what and which setting sets the limit; the details
    /// are always `limit` and, when known, `size`, whichever provider or layer refuses. Attach the resource with
    /// [`Error::with_uri`] when there is one.
    pub fn too_large(message: impl Into<String>, size: Option<u64>, limit: u64) -> Self {
        let e = Self::new(ErrorKind::TooLarge, message).with_detail("limit", limit);
        match size {
            Some(size) => e.with_detail("size", size),
            None => e,
        }
    }

    /// Bad request parameters.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidParams, message)
    }

    /// An operation the provider does not declare.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    /// A local failure that is not the caller's fault.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// Attach the resource URI this error concerns.
    pub fn with_uri(mut self, uri: impl Into<String>) -> Self {
        self.uri = Some(uri.into());
        self
    }

    /// Attach one structured detail.
    pub fn with_detail(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.details
            .get_or_insert_with(Default::default)
            .insert(key.to_owned(), value.into());
        self
    }

    /// Whether retrying later may succeed.
    pub fn is_temporary(&self) -> bool {
        self.kind.is_temporary()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
