//! Stateless, sealed pagination cursors.
//!
//! A cursor names the mount a page came from and the provider's opaque keyset position
//! (for files: the last path served; for a gateway mount: the upstream server's own cursor).
//! The position is encrypted and authenticated (ChaCha20-Poly1305, the mount index as
//! associated data) under a key derived from a secret, the server build and its mount
//! layout, so a client can neither read a position (an upstream's cursor never reaches a
//! client) nor make one up (a position it chose never reaches a provider or an upstream),
//! and a tampered, truncated or foreign cursor is rejected instead of silently resuming
//! somewhere else. The secret is random per process, or a cluster's shared secret
//! (`[cluster] secret`), so any replica of the same build and configuration can serve the
//! next page while the server keeps no per-cursor state.
//!
//! The nonce is derived from the cursor's content (a MAC of it under a key of its own, as
//! SIV modes do), so one position always gives one cursor and decoding checks the nonce
//! too: a string verifies only if it is exactly what the codec mints.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use sha2::Sha256;

/// The format version, bumped whenever the payload layout or the key derivation changes.
/// Version 1 was signed, not encrypted, under a key anyone could derive from public data.
const VERSION: u8 = 2;
/// The header: the version byte, then the mount index (4 bytes, big-endian).
const HEADER_LEN: usize = 1 + 4;
/// Bytes of the AEAD tag.
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
    /// Too short to hold a header, a nonce and a tag.
    #[error("cursor is truncated")]
    Truncated,
    /// Wrong version byte, or it does not open under this server's key.
    #[error(
        "cursor was modified, or comes from another server build, configuration or run (cursors do not outlive a restart outside a cluster): list again from the start"
    )]
    Forged,
}

/// The secret cursors are sealed under. Its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct CursorSecret(Vec<u8>);

impl CursorSecret {
    /// A secret shared by every server that must accept the others' cursors (a cluster's
    /// replicas).
    pub fn new(bytes: &[u8]) -> Self {
        Self(bytes.to_vec())
    }

    /// A random secret: cursors of this process only.
    pub fn random() -> Self {
        use ring::rand::SecureRandom as _;
        let mut b = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut b)
            .expect("the system's random source answers");
        Self(b.to_vec())
    }
}

impl std::fmt::Debug for CursorSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorSecret([redacted])")
    }
}

/// Encodes and verifies cursors for one server instance.
#[derive(Clone)]
pub struct CursorCodec {
    seal: LessSafeKey,
    nonce_key: [u8; 32],
}

impl std::fmt::Debug for CursorCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorCodec { .. }")
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

impl CursorCodec {
    /// A codec keyed by `secret`, the server build and a fingerprint of its configuration
    /// (mount kinds and prefixes). Two servers with the same secret, build and mounts accept
    /// each other's cursors; anything else rejects them.
    pub fn new(build_id: &str, fingerprint: &[u8], secret: &CursorSecret) -> Self {
        let master = hmac(
            &secret.0,
            &[
                b"mcp-resources cursor key v2\0",
                &(build_id.len() as u64).to_le_bytes(),
                build_id.as_bytes(),
                fingerprint,
            ],
        );
        let seal_key = hmac(&master, &[b"seal"]);
        let nonce_key = hmac(&master, &[b"nonce"]);
        Self {
            seal: LessSafeKey::new(
                UnboundKey::new(&CHACHA20_POLY1305, &seal_key).expect("a 32-byte key"),
            ),
            nonce_key,
        }
    }

    /// The nonce of a cursor with this header and position.
    fn nonce(&self, header: &[u8], position: &[u8]) -> [u8; NONCE_LEN] {
        let full = hmac(&self.nonce_key, &[header, position]);
        let mut out = [0u8; NONCE_LEN];
        out.copy_from_slice(&full[..NONCE_LEN]);
        out
    }

    /// Encode a cursor as an opaque URL-safe string.
    pub fn encode(&self, cursor: &PageCursor) -> String {
        let mut header = [0u8; HEADER_LEN];
        header[0] = VERSION;
        header[1..].copy_from_slice(&cursor.mount.to_be_bytes());
        let nonce = self.nonce(&header, &cursor.position);
        let mut buf = Vec::with_capacity(HEADER_LEN + NONCE_LEN + cursor.position.len() + TAG_LEN);
        buf.extend_from_slice(&header);
        buf.extend_from_slice(&nonce);
        let mut sealed = cursor.position.clone();
        self.seal
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&header),
                &mut sealed,
            )
            .expect("a position far below the AEAD's length limit");
        buf.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(buf)
    }

    /// Decode and verify a cursor string from a client.
    pub fn decode(&self, s: &str) -> Result<PageCursor, CursorError> {
        if s.len() > MAX_CURSOR_LEN {
            return Err(CursorError::Malformed);
        }
        let mut buf = URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| CursorError::Malformed)?;
        if buf.len() < HEADER_LEN + NONCE_LEN + TAG_LEN {
            return Err(CursorError::Truncated);
        }
        let (head, sealed) = buf.split_at_mut(HEADER_LEN + NONCE_LEN);
        let (header, nonce) = head.split_at(HEADER_LEN);
        if header[0] != VERSION {
            return Err(CursorError::Forged);
        }
        let nonce: [u8; NONCE_LEN] = nonce.try_into().expect("NONCE_LEN bytes");
        let position = self
            .seal
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(header),
                sealed,
            )
            .map_err(|_| CursorError::Forged)?;
        // Only the nonce this codec derives for the content is its own: another nonce that
        // opens would mean a second string for one cursor.
        if self.nonce(header, position) != nonce {
            return Err(CursorError::Forged);
        }
        let mount = u32::from_be_bytes(header[1..].try_into().expect("4 bytes"));
        Ok(PageCursor {
            mount,
            position: position.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejections() {
        let secret = CursorSecret::new(b"a secret");
        let c = CursorCodec::new("build-1", b"mounts", &secret);
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
        let other = CursorCodec::new("build-2", b"mounts", &secret);
        assert_eq!(other.decode(&s), Err(CursorError::Forged));
        let other = CursorCodec::new("build-1", b"other mounts", &secret);
        assert_eq!(other.decode(&s), Err(CursorError::Forged));
        let other = CursorCodec::new("build-1", b"mounts", &CursorSecret::new(b"another"));
        assert_eq!(other.decode(&s), Err(CursorError::Forged));
        let other = CursorCodec::new("build-1", b"mounts", &CursorSecret::random());
        assert_eq!(other.decode(&s), Err(CursorError::Forged));
    }

    #[test]
    fn the_position_cannot_be_read_from_the_cursor() {
        let c = CursorCodec::new("build-1", b"mounts", &CursorSecret::random());
        let position = b"upstream-cursor-token-0123456789".to_vec();
        let s = c.encode(&PageCursor {
            mount: 7,
            position: position.clone(),
        });
        let raw = URL_SAFE_NO_PAD.decode(&s).unwrap();
        assert!(
            !raw.windows(8).any(|w| position.windows(8).any(|p| p == w)),
            "the position shows through the cursor"
        );
        // One position, one cursor: a listing repeated gives the same cursors.
        let again = c.encode(&PageCursor { mount: 7, position });
        assert_eq!(s, again);
    }

    #[test]
    fn a_cursor_of_version_one_is_refused() {
        // What version 1 minted: version, mount, position, a 16-byte HMAC tag in clear.
        let c = CursorCodec::new("build-1", b"mounts", &CursorSecret::random());
        let mut v1 = vec![1u8, 0, 0, 0, 0];
        v1.extend_from_slice(b"docs/guides/install.md");
        v1.extend_from_slice(&[0u8; 16]);
        assert_eq!(
            c.decode(&URL_SAFE_NO_PAD.encode(v1)),
            Err(CursorError::Forged)
        );
    }

    #[test]
    fn debug_shows_no_secret() {
        let s = CursorSecret::new(b"hunter2-hunter2");
        assert!(!format!("{s:?}").contains("hunter2"));
        let c = CursorCodec::new("b", b"m", &s);
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
