//! `Provider::read`: exact bytes, not-found without an oracle, and the read limit; and
//! `Provider::read_now`, wherever it answers, answering exactly what `read` does.

use mcpr_core::{
    Contents, ContentsBody, ErrorKind, Provider, ReadLimits, ReadOutput, ResourceUri, Result,
};

use crate::Fixture;
use crate::checks::parse;

/// A limit no fixture resource comes near, for reads that are not about the limit.
const GENEROUS: ReadLimits = ReadLimits {
    max_bytes: 64 * 1024 * 1024,
};

fn body_bytes(c: &Contents) -> Vec<u8> {
    match &c.body {
        ContentsBody::Text(t) => t.as_bytes().to_vec(),
        ContentsBody::Blob(b) => b.clone(),
    }
}

/// `provider.read(uri, limits)`, after checking that `read_now`, when it answers, answers the
/// same (the servers' hot paths take its answer instead of `read`'s).
async fn read(
    provider: &dyn Provider,
    uri: &ResourceUri,
    limits: &ReadLimits,
) -> Result<ReadOutput> {
    let now = provider.read_now(uri, limits);
    let read = provider.read(uri, limits).await;
    if let Some(now) = now {
        assert_eq!(
            now,
            read,
            "read_now {}: must answer exactly what read does",
            uri.as_str()
        );
    }
    read
}

/// Every expected resource reads as its exact bytes (text when UTF-8) under its own URI;
/// the missing and forbidden URIs answer the same not-found, carrying the URI.
pub(crate) async fn check_reads(provider: &dyn Provider, fixture: &dyn Fixture) {
    for (uri, bytes) in fixture.expected() {
        let contents = read(provider, &parse(&uri), &GENEROUS)
            .await
            .unwrap_or_else(|e| panic!("read {uri}: {e}"))
            .contents;
        assert_eq!(contents.len(), 1, "read {uri}: one content item");
        assert_eq!(
            contents[0].uri, uri,
            "read {uri}: the content must carry the URI that was read"
        );
        assert_eq!(body_bytes(&contents[0]), bytes, "read {uri}: bytes differ");
        if let ContentsBody::Blob(_) = &contents[0].body {
            assert!(
                std::str::from_utf8(&bytes).is_err(),
                "read {uri}: valid UTF-8 must come back as text"
            );
        }
    }
    let missing = fixture.missing_uri();
    for uri in std::iter::once(missing).chain(fixture.forbidden_uris()) {
        let Ok(parsed) = mcpr_core::ResourceUri::parse(&uri) else {
            continue;
        };
        let err = read(provider, &parsed, &GENEROUS)
            .await
            .expect_err(&format!("read {uri} must fail"));
        assert_eq!(
            err.kind,
            ErrorKind::NotFound,
            "read {uri}: must answer not found, got {err}"
        );
        assert_eq!(
            err.uri.as_deref(),
            Some(uri.as_str()),
            "read {uri}: the error must carry the URI"
        );
    }
}

/// Every expected resource, read with a limit one byte below its size, answers `TooLarge`
/// naming the limit and the URI, never a truncated body presented as whole; at exactly its
/// size it answers the whole resource or `TooLarge`, nothing in between.
pub(crate) async fn check_too_large(provider: &dyn Provider, fixture: &dyn Fixture) {
    let mut checked = 0;
    let chosen = fixture.too_large_uris();
    for (uri, bytes) in fixture.expected() {
        let size = bytes.len() as u64;
        if size == 0 || !chosen.contains(&uri) {
            continue;
        }
        let parsed = parse(&uri);
        let short = ReadLimits {
            max_bytes: size - 1,
        };
        match read(provider, &parsed, &short).await {
            Ok(c) => panic!(
                "too large: read {uri} ({size} bytes) with a limit of {} bytes must answer \
                 TooLarge, got {} bytes as if whole",
                size - 1,
                c.contents.first().map_or(0, |c| body_bytes(c).len())
            ),
            Err(e) => {
                assert_eq!(
                    e.kind,
                    ErrorKind::TooLarge,
                    "too large: read {uri} ({size} bytes) with a limit of {} bytes must \
                     answer TooLarge, got {:?}: {e}",
                    size - 1,
                    e.kind
                );
                // Core's one shape, whichever provider refuses: the URI first, then the
                // limit with its unit, and the limit in the details.
                assert!(
                    e.message.starts_with(&format!("{uri}: "))
                        && e.message
                            .contains(&format!("more than the limit of {} bytes (", size - 1)),
                    "too large: the message for {uri} must start with the URI and name the \
                     limit {} bytes, as core's Error::too_large writes it: {e}",
                    size - 1
                );
                assert_eq!(
                    e.details
                        .as_ref()
                        .and_then(|d| d.get("limit"))
                        .and_then(|v| v.as_u64()),
                    Some(size - 1),
                    "too large: the details of {uri} must hold the limit"
                );
                assert_eq!(
                    e.uri.as_deref(),
                    Some(uri.as_str()),
                    "too large: the error must carry the URI {uri}"
                );
            }
        }
        // At exactly its size a provider may still refuse (SQL keeps room for a `next`
        // link it cannot size in advance), but what it returns must be the whole resource.
        let exact = ReadLimits { max_bytes: size };
        match read(provider, &parsed, &exact).await {
            Ok(c) => assert_eq!(
                body_bytes(&c.contents[0]),
                bytes,
                "too large: read {uri} at a limit of its size {size}: bytes differ"
            ),
            Err(e) => assert_eq!(
                e.kind,
                ErrorKind::TooLarge,
                "too large: read {uri} at a limit of its size {size} must answer the whole \
                 resource or TooLarge, got {:?}: {e}",
                e.kind
            ),
        }
        checked += 1;
    }
    assert!(
        checked > 0,
        "too large: the fixture has no non-empty resource to try the read limit on"
    );
}
