//! `file://` URIs and the root-relative paths they name.
//!
//! URIs are the real absolute paths, percent-encoded per RFC 8089 so editors map them back to
//! files: every byte outside `A-Z a-z 0-9 - . _ ~ /` is `%XX`. Decoding is strict: a URI that
//! decodes to `.` or `..`, an encoded `/`, a NUL byte, an empty or over-long component, or
//! anything not under the root yields `None`, which the provider answers as "not found".

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str};

/// Bytes left as they are in a path: RFC 3986 unreserved characters and the separator.
const PATH_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Linux's limit on one name; longer components cannot exist, so they are not found.
const MAX_COMPONENT: usize = 255;
/// Linux's PATH_MAX.
const MAX_PATH: usize = 4096;

/// Percent-encode one path component (raw bytes, so non-UTF-8 names round-trip).
pub(crate) fn encode_component(name: &[u8]) -> String {
    percent_encoding::percent_encode(name, PATH_SET).to_string()
}

/// The `file://` URI of an absolute path.
pub fn encode_path_uri(abs: &Path) -> String {
    let mut out = String::from("file://");
    for comp in abs
        .as_os_str()
        .as_bytes()
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
    {
        out.push('/');
        out.push_str(&encode_component(comp));
    }
    if out == "file://" {
        out.push('/');
    }
    out
}

/// A path relative to a mount root, already validated: components are non-empty, contain no
/// `/` or NUL, are not `.` or `..`, and fit Linux's limits. The empty path is the root.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub(crate) struct RelPath {
    bytes: Vec<u8>,
}

impl RelPath {
    /// The root itself.
    pub(crate) fn root() -> Self {
        Self::default()
    }

    /// Build from raw bytes (`a/b/c`), validating every component.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.is_empty() {
            return Some(Self::root());
        }
        if bytes.len() > MAX_PATH {
            return None;
        }
        for comp in bytes.split(|&b| b == b'/') {
            if !valid_component(comp) {
                return None;
            }
        }
        Some(Self {
            bytes: bytes.to_vec(),
        })
    }

    /// The raw bytes, components joined by `/`.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether this is the root.
    pub(crate) fn is_root(&self) -> bool {
        self.bytes.is_empty()
    }

    /// A path cap-std accepts: `.` for the root.
    pub(crate) fn as_path(&self) -> &Path {
        if self.bytes.is_empty() {
            Path::new(".")
        } else {
            Path::new(OsStr::from_bytes(&self.bytes))
        }
    }

    /// The components in order.
    pub(crate) fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.bytes.split(|&b| b == b'/').filter(|c| !c.is_empty())
    }

    /// This path with one more (already valid) component.
    pub(crate) fn join(&self, name: &[u8]) -> Self {
        let mut bytes = Vec::with_capacity(self.bytes.len() + 1 + name.len());
        bytes.extend_from_slice(&self.bytes);
        if !bytes.is_empty() {
            bytes.push(b'/');
        }
        bytes.extend_from_slice(name);
        Self { bytes }
    }

    /// The path as text for display (`name` of a resource); lossy for non-UTF-8 names.
    pub(crate) fn display(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// A virtual absolute path under `/r`, the fixed root the gitignore matchers are built on.
    pub(crate) fn virtual_path(&self) -> PathBuf {
        let mut p = PathBuf::from("/r");
        if !self.bytes.is_empty() {
            p.push(OsStr::from_bytes(&self.bytes));
        }
        p
    }
}

/// Whether `comp` can be a real file name.
pub(crate) fn valid_component(comp: &[u8]) -> bool {
    !comp.is_empty()
        && comp.len() <= MAX_COMPONENT
        && comp != b"."
        && comp != b".."
        && !comp.contains(&b'/')
        && !comp.contains(&0)
}

/// The URI prefix of a root (`file:///srv/docs`, no trailing slash).
#[derive(Debug, Clone)]
pub(crate) struct RootUri {
    prefix: String,
}

impl RootUri {
    pub(crate) fn new(canonical_root: &Path) -> Self {
        let mut prefix = encode_path_uri(canonical_root);
        if prefix.ends_with('/') {
            prefix.pop();
        }
        Self { prefix }
    }

    /// `file:///srv/docs`.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The URI of a path under the root.
    pub(crate) fn uri_of(&self, rel: &RelPath) -> String {
        let mut out = String::with_capacity(self.prefix.len() + rel.as_bytes().len() + 8);
        out.push_str(&self.prefix);
        if rel.is_root() {
            return out;
        }
        for comp in rel.components() {
            out.push('/');
            out.push_str(&encode_component(comp));
        }
        out
    }

    /// Decode the part of a URI before its query into a root-relative path; `None` when the
    /// URI is not under this root or does not name a possible file.
    pub(crate) fn decode(&self, uri_without_query: &str) -> Option<RelPath> {
        // `file://localhost/...` is the same file as `file:///...` (RFC 8089 §2).
        let normalised;
        let uri = match uri_without_query.strip_prefix("file://localhost/") {
            Some(rest) => {
                normalised = format!("file:///{rest}");
                normalised.as_str()
            }
            None => uri_without_query,
        };
        if uri.contains('#') {
            return None;
        }
        let rest = uri.strip_prefix(&self.prefix)?;
        if rest.is_empty() {
            return Some(RelPath::root());
        }
        // The boundary check: `file:///srv/docs-evil` shares the prefix but is not under it.
        let rest = rest.strip_prefix('/')?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() {
            return Some(RelPath::root());
        }
        let mut bytes = Vec::with_capacity(rest.len());
        for (i, raw) in rest.split('/').enumerate() {
            let decoded: Vec<u8> = percent_decode_str(raw).collect();
            if !strictly_encoded(raw) || !valid_component(&decoded) {
                return None;
            }
            if i > 0 {
                bytes.push(b'/');
            }
            bytes.extend_from_slice(&decoded);
        }
        RelPath::from_bytes(&bytes)
    }
}

/// `percent_decode_str` passes malformed escapes (`%zz`, a trailing `%`) through unchanged;
/// a URI carrying one is not a URI this server minted, so it names nothing.
fn strictly_encoded(raw: &str) -> bool {
    let b = raw.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let ok = b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
            if !ok {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> RootUri {
        RootUri::new(Path::new("/srv/docs"))
    }

    #[test]
    fn encodes_like_rfc_8089() {
        assert_eq!(
            encode_path_uri(Path::new("/srv/docs/My Notes.md")),
            "file:///srv/docs/My%20Notes.md"
        );
        assert_eq!(encode_path_uri(Path::new("/")), "file:///");
        assert_eq!(
            root().uri_of(&RelPath::from_bytes("a b/ü#?%.md".as_bytes()).unwrap()),
            "file:///srv/docs/a%20b/%C3%BC%23%3F%25.md"
        );
    }

    #[test]
    fn decodes_and_refuses_escapes() {
        let r = root();
        assert_eq!(
            r.decode("file:///srv/docs/My%20Notes.md")
                .unwrap()
                .as_bytes(),
            b"My Notes.md"
        );
        assert_eq!(
            r.decode("file://localhost/srv/docs/a").unwrap().as_bytes(),
            b"a"
        );
        assert!(r.decode("file:///srv/docs").unwrap().is_root());
        assert!(r.decode("file:///srv/docs/").unwrap().is_root());
        for bad in [
            "file:///srv/docs/../etc/passwd",
            "file:///srv/docs/%2e%2e/etc/passwd",
            "file:///srv/docs/%2E%2E",
            "file:///srv/docs/a%2Fb",
            "file:///srv/docs/a%00b",
            "file:///srv/docs/a//b",
            "file:///srv/docs/./a",
            "file:///srv/docs-evil/x",
            "file:///etc/passwd",
            "file:///srv/docs/%zz",
            "file:///srv/docs/a%2",
            "file:///srv/docs/a#frag",
        ] {
            assert!(r.decode(bad).is_none(), "{bad}");
        }
        let long = format!("file:///srv/docs/{}", "a".repeat(256));
        assert!(r.decode(&long).is_none());
    }
}
