//! Mapping of gix failures to the core error kinds, in one place.

use mcpr_core::{Error, ErrorKind};

/// A failure of the object database or ref store while `what`: not the caller's fault, so
/// `Internal`. Missing objects and refs never get here: lookups that can miss use gix's
/// `try_` functions and answer not-found themselves, and callers attach the URI.
pub(crate) fn internal_plain(err: impl std::fmt::Display, what: &str) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("git error while {what}: {err}"),
    )
}
