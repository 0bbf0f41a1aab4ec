//! Mapping of gix failures to the core error kinds, in one place.

use mcpr_core::{Error, ErrorKind};

/// A failure of the object database or ref store while serving `uri`: not the caller's
/// fault, so `Internal`, with the URI attached. Missing objects and refs never get here;
/// lookups that can miss use the `try_` functions and answer not-found themselves.
pub(crate) fn internal(err: impl std::fmt::Display, uri: &str) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("git error while serving {uri}: {err}"),
    )
    .with_uri(uri)
}

/// A failure that concerns no particular URI (listing, watching).
pub(crate) fn internal_plain(err: impl std::fmt::Display, what: &str) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("git error while {what}: {err}"),
    )
}
