//! Property tests for the cursor codec: every cursor round-trips, and no modification of an
//! issued cursor (flipped character, truncation, extension, another key) is accepted.

use mcpr_core::{CursorCodec, CursorSecret, PageCursor};
use proptest::prelude::*;

fn codec() -> CursorCodec {
    CursorCodec::new(
        "mcp-resources@test",
        b"files\0file:///srv/docs\0\x01",
        &CursorSecret::new(b"a test secret"),
    )
}

proptest! {
    #[test]
    fn round_trips(mount in any::<u32>(), position in proptest::collection::vec(any::<u8>(), 0..512)) {
        let c = codec();
        let cur = PageCursor { mount, position };
        let s = c.encode(&cur);
        prop_assert!(s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        prop_assert_eq!(c.decode(&s).unwrap(), cur);
    }

    #[test]
    fn any_single_character_change_is_rejected(
        mount in any::<u32>(),
        position in proptest::collection::vec(any::<u8>(), 0..64),
        idx in any::<prop::sample::Index>(),
        replacement in prop::sample::select(b"ABCabc019-_".to_vec()),
    ) {
        let c = codec();
        let s = c.encode(&PageCursor { mount, position });
        let i = idx.index(s.len());
        let mut bytes = s.clone().into_bytes();
        prop_assume!(bytes[i] != replacement);
        bytes[i] = replacement;
        let tampered = String::from_utf8(bytes).unwrap();
        prop_assert!(c.decode(&tampered).is_err());
    }

    #[test]
    fn truncation_and_extension_are_rejected(
        position in proptest::collection::vec(any::<u8>(), 0..64),
        cut in 1usize..20,
        extra in "[A-Za-z0-9_-]{1,8}",
    ) {
        let c = codec();
        let s = c.encode(&PageCursor { mount: 1, position });
        let cut = cut.min(s.len());
        prop_assert!(c.decode(&s[..s.len() - cut]).is_err());
        let extended = format!("{s}{extra}");
        prop_assert!(c.decode(&extended).is_err());
    }

    #[test]
    fn foreign_cursors_are_rejected(position in proptest::collection::vec(any::<u8>(), 0..64), build in "[a-z0-9.@-]{1,20}") {
        let ours = codec();
        let theirs = CursorCodec::new(
            &build,
            b"files\0file:///srv/docs\0\x01",
            &CursorSecret::new(b"a test secret"),
        );
        prop_assume!(build != "mcp-resources@test");
        let s = theirs.encode(&PageCursor { mount: 0, position });
        prop_assert!(ours.decode(&s).is_err());
    }

    #[test]
    fn arbitrary_strings_never_panic(s in ".{0,200}") {
        let _ = codec().decode(&s);
    }
}
