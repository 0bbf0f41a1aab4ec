//! The cursor codec: a cursor minted from any (mount, position) decodes back to it, and no
//! string other than a minted cursor verifies: not a tampered one, not one from another
//! build or mount layout, not arbitrary input.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpr_core::cursor::MAX_CURSOR_LEN;
use mcpr_core::{CursorCodec, CursorSecret, PageCursor};

fuzz_target!(|data: &[u8]| {
    let secret = CursorSecret::new(b"fuzz secret");
    let codec = CursorCodec::new("fuzz-build", b"mounts: files file:///srv", &secret);
    // Any input as a client's cursor string: it verifies only if it is exactly what the codec
    // mints for what it decodes to.
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(cursor) = codec.decode(text)
    {
        assert_eq!(
            codec.encode(&cursor),
            text,
            "a cursor that was not minted verified"
        );
    }
    // Any input as a (mount, position) to mint.
    let (mount, position) = match data {
        [a, b, c, d, rest @ ..] => (u32::from_be_bytes([*a, *b, *c, *d]), rest.to_vec()),
        _ => (0, data.to_vec()),
    };
    let cursor = PageCursor { mount, position };
    let minted = codec.encode(&cursor);
    if minted.len() > MAX_CURSOR_LEN {
        assert!(codec.decode(&minted).is_err());
        return;
    }
    assert_eq!(codec.decode(&minted).as_ref(), Ok(&cursor));
    // Another build, another mount layout or another secret refuses it.
    assert!(
        CursorCodec::new("fuzz-build-2", b"mounts: files file:///srv", &secret)
            .decode(&minted)
            .is_err()
    );
    assert!(
        CursorCodec::new("fuzz-build", b"mounts: files file:///srv2", &secret)
            .decode(&minted)
            .is_err()
    );
    assert!(
        CursorCodec::new(
            "fuzz-build",
            b"mounts: files file:///srv",
            &CursorSecret::new(b"another")
        )
        .decode(&minted)
        .is_err()
    );
    // Every one-character change, truncation and extension is refused.
    let bytes = minted.as_bytes();
    let at = data.first().map_or(0, |&b| b as usize) % bytes.len();
    for replacement in [b'A', b'_', b'-', b'z', b'0'] {
        if bytes[at] == replacement {
            continue;
        }
        let mut changed = bytes.to_vec();
        changed[at] = replacement;
        let changed = String::from_utf8(changed).expect("base64url is ASCII");
        assert!(
            codec.decode(&changed).is_err(),
            "tampered cursor {changed} verified"
        );
    }
    assert!(codec.decode(&minted[..minted.len() - 1]).is_err());
    assert!(codec.decode(&format!("{minted}A")).is_err());
});
