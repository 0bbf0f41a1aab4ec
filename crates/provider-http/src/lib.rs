//! The `api://` and `https://` providers: HTTP APIs (`kind = "api"`, configured endpoints
//! with RFC 6570 URL templates) and web pages (`kind = "web"`, URLs under allow prefixes,
//! HTML as Markdown), read-only.
//!
//! Safe by construction: template values cannot add structure to the upstream URL, every
//! host and every redirect hop is checked against the address policy with the checked
//! addresses handed to the connection (no second lookup), and secrets stay out of answers
//! and logs. Answers are cached per mount by bytes under the HTTP freshness rules, and
//! subscribed URIs are polled. See `docs.md` for the capability checklist.

mod budget;
mod cache;
mod config;
mod error;
mod fetch;
mod health;
mod html;
mod list;
mod net;
mod provider;
mod read;
mod target;
mod tokenize;
mod watch;

pub use budget::{ConversionBudget, Permit, Share};
pub use cache::CacheCounts;
pub use config::{
    CACHE_MAX_BYTES, DEFAULT_TTL_MS, Endpoint, Header, HtmlMode, HttpConfig, HttpFactory, HttpKind,
    MAX_CONVERSIONS, MAX_CONVERT_BYTES, MAX_HTML_DEPTH, MAX_REDIRECTS, POLL_INTERVAL_MS, ParamSpec,
    TIMEOUT_MS,
};
pub use net::{HostResolver, SystemResolver, is_public};
pub use provider::HttpProvider;

/// An api endpoint's URI-to-upstream-URL step alone, for the fuzz targets in `fuzz/`: not an
/// API.
#[doc(hidden)]
pub mod fuzzing {
    use mcpr_core::Result;

    /// The upstream URL `uri` reads from among `endpoints`, as a read computes it.
    pub fn api_url(endpoints: &[crate::Endpoint], uri: &str) -> Result<url::Url> {
        let compiled = endpoints
            .iter()
            .map(crate::target::Compiled::new)
            .collect::<Result<Vec<_>>>()?;
        crate::target::api_target(&compiled, uri).map(|t| t.url)
    }
}
