//! The provider behaviour suite: the checks every provider must pass against a real backend,
//! picked by the capabilities it declares.
//!
//! A provider's own tests build a real source (files in a temp dir, a database, ...), wrap it
//! in a [`Fixture`] that knows what the source holds and how to change it, and call
//! [`run_suite`]. A failure panics with a message naming the behaviour that broke.
//!
//! What runs, by declared capability (`mcpr_core::Capabilities`):
//! - always: readiness, and for every operation the provider does *not* declare, that it
//!   answers `Unsupported` (never an empty result that looks real);
//! - `list`: pagination at several page sizes (no duplicates, nothing missing, a stable order,
//!   no page over its limit, `next` only when more follows), every listed URI under one of
//!   the mount's prefixes, malformed positions refused, unknown positions resumed after;
//! - `read`: exact bytes, not-found without an oracle, `TooLarge` for a limit one byte short
//!   (never a truncated body), `change_token` stable and changed by a modification;
//! - directory reads, for the directories a fixture names: every page of every subfolder,
//!   without a gap or a duplicate, showing exactly the expected files;
//! - `templates`, `complete`, `watch`, `list_changed`: as before, plus completed values
//!   expanding to URIs under the mount's prefixes.
//!
//! [`skills`] holds the skills checks (SEP-2640) a server's tests run over files, git and s3
//! mounts, and [`moto`] moto's S3-compatible server for tests (the s3 provider's among them).

mod checks;
pub mod moto;
pub mod nats;
pub mod skills;

use std::sync::Arc;

use async_trait::async_trait;
use mcpr_core::Provider;

/// What a backend holds and how to change it, for the suite.
///
/// Only the first four methods are required; the others have defaults that either derive
/// what they need from [`Fixture::expected`] or make the provider say how it behaves.
#[async_trait]
pub trait Fixture: Send + Sync {
    /// Every resource the provider must list, with its exact bytes, in any order.
    /// The first one is the one the suite modifies (watch, change tokens).
    fn expected(&self) -> Vec<(String, Vec<u8>)>;
    /// A URI the mount owns that names nothing.
    fn missing_uri(&self) -> String;
    /// URIs that must answer not-found (escapes, denied entries): no oracle.
    fn forbidden_uris(&self) -> Vec<String> {
        Vec::new()
    }
    /// Change the resource at `uri` (its content).
    async fn modify(&self, uri: &str);
    /// Add one new resource and return its URI.
    async fn add(&self) -> String;
    /// For completion: (template, argument, typed value, a value that must be suggested).
    fn completion_case(&self) -> Option<(String, String, String, String)> {
        None
    }
    /// List positions (`PageRequest::after`) the provider must refuse with
    /// `InvalidCursor` or `InvalidParams`: the positions a forged or corrupted cursor carries.
    /// The default is what no provider's position can be: empty, bytes that are not UTF-8
    /// with a NUL, and 1 MiB of them. Fixtures add their own provider's malformed shapes to
    /// [`default_malformed_positions`].
    fn malformed_positions(&self) -> Vec<Vec<u8>> {
        default_malformed_positions()
    }
    /// Well-formed list positions that name no entry, each with the URI the listing must
    /// resume with (`None`: the listing is over). Keyset positions resume after the place the
    /// position would have, so a deleted entry does not break a client's paging; a provider
    /// that refuses unknown positions lists them in [`Fixture::malformed_positions`] instead.
    fn unknown_positions(&self) -> Vec<(Vec<u8>, Option<String>)> {
        Vec::new()
    }
    /// Whether the provider fingerprints its resources (`Provider::change_token` answers
    /// `Some`). When true, the first expected resource's token must be stable while it is
    /// unchanged and differ after [`Fixture::modify`]; when false, the provider must answer
    /// `None` for every expected resource, so it cannot start giving tokens untested.
    fn change_tokens(&self) -> bool {
        false
    }
    /// Directory URIs whose reads (`Provider::read_directory`) the suite checks, the root of
    /// the tree of [`Fixture::expected`] first: every subfolder under them is read too, at
    /// several page sizes, and the files found under the first must be exactly the expected
    /// resources under it. Empty (the default) for a provider without directories.
    fn directories(&self) -> Vec<String> {
        Vec::new()
    }
    /// The expected resources the suite reads with a limit one byte below their size, which
    /// must answer `TooLarge`. The default is every non-empty one; a fixture leaves a
    /// resource out only for a known, reported provider bug, saying which in a comment.
    fn too_large_uris(&self) -> Vec<String> {
        self.expected()
            .into_iter()
            .filter(|(_, b)| !b.is_empty())
            .map(|(u, _)| u)
            .collect()
    }
}

/// Positions no provider may accept (see [`Fixture::malformed_positions`]).
pub fn default_malformed_positions() -> Vec<Vec<u8>> {
    vec![
        Vec::new(),
        vec![0xff, 0x00, 0xfe, 0x01],
        [0xff, 0x00].repeat(512 * 1024),
    ]
}

/// Run every check the provider's capabilities call for.
pub async fn run_suite(provider: Arc<dyn Provider>, fixture: &dyn Fixture) {
    let caps = provider.info().capabilities;
    assert!(
        provider.ready().await,
        "ready: a freshly built provider over a live source must be ready"
    );
    checks::unsupported::check_undeclared(provider.as_ref(), fixture).await;
    if caps.list {
        checks::list::check_listing(provider.as_ref(), fixture).await;
        checks::list::check_positions(provider.as_ref(), fixture).await;
    }
    if caps.read {
        checks::read::check_reads(provider.as_ref(), fixture).await;
        checks::read::check_too_large(provider.as_ref(), fixture).await;
    }
    checks::directory::check_directories(provider.as_ref(), fixture).await;
    if caps.templates {
        checks::templates::check_templates(provider.as_ref(), fixture);
    }
    if caps.complete {
        checks::templates::check_completion(provider.as_ref(), fixture).await;
    }
    // Modifies the first resource: after every check that reads expected bytes.
    checks::watch::check_change_token(provider.as_ref(), fixture).await;
    if caps.watch {
        checks::watch::check_watch(provider.clone(), fixture).await;
    }
    if caps.list_changed {
        checks::watch::check_list_changed(provider.clone(), fixture).await;
    }
}
