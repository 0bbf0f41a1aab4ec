//! Mapping of I/O errors to the core error kinds, in one place.

use std::io;

use mcpr_core::{Error, ErrorKind};

/// Map an I/O error from opening or reading `uri`.
///
/// Every "you cannot have this" answer — absent, escaping the sandbox, permission denied,
/// too many symlinks, a name too long — becomes not-found, so errors are no oracle for what
/// exists outside the root or behind the deny list.
pub(crate) fn map_io(err: io::Error, uri: &str) -> Error {
    match err.kind() {
        io::ErrorKind::NotFound
        | io::ErrorKind::PermissionDenied
        | io::ErrorKind::NotADirectory
        | io::ErrorKind::IsADirectory
        | io::ErrorKind::InvalidInput
        | io::ErrorKind::InvalidFilename => Error::not_found(uri),
        _ => match err.raw_os_error() {
            // ELOOP, ENAMETOOLONG, EXDEV (RESOLVE_BENEATH refusing an escape), ENXIO (a FIFO
            // with no writer), EACCES: still "not found" for the reason above.
            Some(libc::ELOOP | libc::ENAMETOOLONG | libc::EXDEV | libc::ENXIO | libc::EACCES) => {
                Error::not_found(uri)
            }
            _ => Error::new(
                ErrorKind::Internal,
                format!("I/O error reading {uri}: {err}"),
            )
            .with_uri(uri),
        },
    }
}
