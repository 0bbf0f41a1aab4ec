//! Stateless, signed pagination cursors.
//!
//! A cursor names the mount a page came from and the provider's opaque keyset position
//! (for files: the last path served). It is authenticated with an HMAC keyed by the server
//! build and its mount layout, so a tampered, truncated or foreign cursor is rejected
//! instead of silently resuming somewhere else. The server keeps no per-cursor state, so
//! any replica of the same build and configuration can serve the next page.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The format version, bumped whenever the payload layout changes.
const VERSION: u8 = 1;
/// Bytes of the MAC kept: 128 bits is far beyond what guessing could hit.
const TAG_LEN: usize = 16;
/// The longest cursor accepted, so decoding cost is bounded for hostile input.
pub const MAX_CURSOR_LEN: usize = 8 * 1024;

/// A decoded cursor: which mount, and where in it to resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageCursor {
    /// Index of the mount in the server's mount list.
    pub mount: u32,
    /// The provider's keyset position, opaque to everyone but that provider.
    pub position: Vec<u8>,
}

/// Why a cursor was refused. Every case maps to "invalid params" on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    /// Not base64url, or longer than [`MAX_CURSOR_LEN`].
    #[error("cursor is not a cursor this server issued (malformed encoding)")]
    Malformed,
    /// Too short to hold a header and a tag.
    #[error("cursor is truncated")]
    Truncated,
    /// Wrong version byte or the MAC does not verify.
    #[error("cursor was modified or comes from another server build or configuration")]
    Forged,
}

/// Encodes and verifies cursors for one server instance.
#[derive(Clone)]
pub struct CursorCodec {
    key: [u8; 32],
}

impl std::fmt::Debug for CursorCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorCodec { .. }")
    }
}

impl CursorCodec {
    /// A codec keyed by the server build and a fingerprint of its configuration (mount kinds
    /// and prefixes). Two servers with the same build and mounts accept each other's cursors;
    /// anything else rejects them.
    pub fn new(build_id: &str, fingerprint: &[u8]) -> Self {
        use sha2::Digest as _;
        let mut h = Sha256::new();
        h.update(b"mcp-resources cursor key v1\0");
        h.update((build_id.len() as u64).to_le_bytes());
        h.update(build_id.as_bytes());
        h.update(fingerprint);
        Self {
            key: h.finalize().into(),
        }
    }

    fn tag(&self, payload: &[u8]) -> [u8; TAG_LEN] {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC accepts keys of any length");
        mac.update(payload);
        let full = mac.finalize().into_bytes();
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(&full[..TAG_LEN]);
        out
    }

    /// Encode a cursor as an opaque URL-safe string.
    pub fn encode(&self, cursor: &PageCursor) -> String {
        let mut buf = Vec::with_capacity(1 + 4 + cursor.position.len() + TAG_LEN);
        buf.push(VERSION);
        buf.extend_from_slice(&cursor.mount.to_be_bytes());
        buf.extend_from_slice(&cursor.position);
        let tag = self.tag(&buf);
        buf.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(buf)
    }

    /// Decode and verify a cursor string from a client.
    pub fn decode(&self, s: &str) -> Result<PageCursor, CursorError> {
        if s.len() > MAX_CURSOR_LEN {
            return Err(CursorError::Malformed);
        }
        let buf = URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| CursorError::Malformed)?;
        if buf.len() < 1 + 4 + TAG_LEN {
            return Err(CursorError::Truncated);
        }
        let (payload, tag) = buf.split_at(buf.len() - TAG_LEN);
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC accepts keys of any length");
        mac.update(payload);
        // verify_truncated_left compares in constant time, so the tag leaks nothing.
        mac.verify_truncated_left(tag)
            .map_err(|_| CursorError::Forged)?;
        if payload[0] != VERSION {
            return Err(CursorError::Forged);
        }
        let mount = u32::from_be_bytes(payload[1..5].try_into().expect("4 bytes"));
        Ok(PageCursor {
            mount,
            position: payload[5..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejections() {
        let c = CursorCodec::new("build-1", b"mounts");
        let cur = PageCursor {
            mount: 3,
            position: b"a/b/c.txt".to_vec(),
        };
        let s = c.encode(&cur);
        assert_eq!(c.decode(&s).unwrap(), cur);
        assert!(c.decode(&s[..s.len() - 2]).is_err());
        assert!(c.decode(&s[..s.len() - 4]).is_err());
        assert_eq!(c.decode("AAAA"), Err(CursorError::Truncated));
        assert_eq!(c.decode("not base64!"), Err(CursorError::Malformed));
        let other = CursorCodec::new("build-2", b"mounts");
        assert_eq!(other.decode(&s), Err(CursorError::Forged));
        let other = CursorCodec::new("build-1", b"other mounts");
        assert_eq!(other.decode(&s), Err(CursorError::Forged));
    }
}
