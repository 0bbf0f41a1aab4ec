//! The suite's checks, one module per area of the `Provider` trait, and the helpers they share.

pub(crate) mod directory;
pub(crate) mod list;
pub(crate) mod read;
pub(crate) mod templates;
pub(crate) mod unsupported;
pub(crate) mod watch;

use mcpr_core::{Provider, ResourceUri};

/// Whether `uri` falls under `prefix` at a boundary: the prefix ends in `/`, or the URI ends
/// there or continues with `/`, `?` or `#`. This is the rule `ProviderInfo::uri_prefixes`
/// documents and `Router::route` in `crates/server/src/router.rs` applies; it is repeated
/// here because the suite must not depend on the server.
pub(crate) fn under_prefix(uri: &str, prefix: &str) -> bool {
    uri.strip_prefix(prefix).is_some_and(|rest| {
        prefix.ends_with('/') || rest.is_empty() || rest.starts_with(['/', '?', '#'])
    })
}

/// Panic unless `uri` is under one of the provider's prefixes: a URI outside them would be
/// routed to another mount (or nowhere) when a client reads it.
pub(crate) fn assert_under_prefixes(provider: &dyn Provider, uri: &str, what: &str) {
    let prefixes = &provider.info().uri_prefixes;
    assert!(
        prefixes.iter().any(|p| under_prefix(uri, p)),
        "prefixes: {what} {uri} is under none of the mount's prefixes {prefixes:?} \
         (at a boundary), so the router would not send it back to this mount"
    );
}

/// Parse a URI the fixture gave; a fixture URI that does not parse is a fixture bug.
pub(crate) fn parse(uri: &str) -> ResourceUri {
    ResourceUri::parse(uri).unwrap_or_else(|e| panic!("fixture URI {uri} does not parse: {e}"))
}

#[cfg(test)]
mod tests {
    use super::under_prefix;

    #[test]
    fn boundary_rule_matches_the_router() {
        assert!(under_prefix("file:///srv/docs", "file:///srv/docs"));
        assert!(under_prefix("file:///srv/docs/a", "file:///srv/docs"));
        assert!(under_prefix("file:///srv/docs?x=1", "file:///srv/docs"));
        assert!(under_prefix("file:///srv/docs#f", "file:///srv/docs"));
        assert!(!under_prefix("file:///srv/docs-evil/a", "file:///srv/docs"));
        assert!(under_prefix("git://main/x", "git://"));
        assert!(!under_prefix("db://other", "db://app"));
    }
}
