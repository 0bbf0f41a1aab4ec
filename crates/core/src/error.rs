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

    /// The one "too large" error, whichever provider or layer refuses: `what` (of resource
    /// `uri`) is more than `limit`. The message always reads
    /// `{uri}: {what} is [{size} {unit}, ]more than the limit of {value} {unit} ({setting})`,
    /// then `; {hint}` when there is one (what to ask instead, or what was done); the details are always
    /// `limit` and `setting`, and `size` when it is known. Nothing else builds a
    /// [`ErrorKind::TooLarge`], so a client sees one shape and one JSON-RPC code for it.
    pub fn too_large(
        uri: &str,
        what: &str,
        size: Option<u64>,
        limit: Limit,
        hint: Option<&str>,
    ) -> Self {
        let Limit {
            value,
            unit,
            setting,
        } = limit;
        let mut message = match size {
            Some(size) => format!(
                "{uri}: {what} is {size} {unit}, more than the limit of {value} {unit} ({setting})"
            ),
            None => format!("{uri}: {what} is more than the limit of {value} {unit} ({setting})"),
        };
        if let Some(hint) = hint {
            message.push_str("; ");
            message.push_str(hint);
        }
        let e = Self::new(ErrorKind::TooLarge, message)
            .with_uri(uri)
            .with_detail("limit", value)
            .with_detail("setting", setting);
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

/// The limit a "too large" error names: how much, of what, and the setting it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// The most allowed.
    pub value: u64,
    /// What `value` counts, plural: `bytes`, `rows`, `elements and attributes`.
    pub unit: &'static str,
    /// The setting that sets it, or how it follows from one (`max_read_bytes`,
    /// `4 × max_convert_bytes`), so the reader knows what to change.
    pub setting: String,
}

impl Limit {
    /// The read limit of a `resources/read`: `max_bytes` of its `ReadLimits`, which is
    /// `[server] max_read_bytes`.
    pub fn read(max_bytes: u64) -> Self {
        Self::bytes(max_bytes, "max_read_bytes")
    }

    /// `value` bytes, set by `setting`.
    pub fn bytes(value: u64, setting: impl Into<String>) -> Self {
        Self::of(value, "bytes", setting)
    }

    /// `value` of `unit` (plural), set by `setting`.
    pub fn of(value: u64, unit: &'static str, setting: impl Into<String>) -> Self {
        Self {
            value,
            unit,
            setting: setting.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
