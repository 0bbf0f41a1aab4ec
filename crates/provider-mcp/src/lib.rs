//! The `mcp` mount kind: another MCP server's resources re-served through this one (a
//! resources gateway), over stdio or Streamable HTTP, in either protocol era, with rmcp's
//! own client.
//!
//! Every upstream URI is served as `{name}+{upstream URI}` (or unchanged under a configured
//! prefix) on every surface: listings, templates, read contents, change notices, directory
//! reads. Listings reach every upstream page through our own positions, subscriptions open
//! one upstream subscription per URI (`resources/subscribe` on a legacy upstream,
//! `subscriptions/listen` on a 2026-07-28 one), and an upstream that is down, hung or
//! hostile costs only its own mount: the connection is made again with backoff, every live
//! subscription is re-established and announced, and what the upstream sends is bounded.

mod cache;
mod config;
mod conn;
mod error;
mod frame;
pub mod guard;
mod list;
mod process;
mod provider;
mod skills;
mod stdio;
mod uri;

pub use config::{
    CACHE_MAX_BYTES, DEFAULT_CACHE_MAX_BYTES, MAX_DESCRIPTION_CHARS, MAX_MESSAGE_BYTES,
    MAX_NAME_CHARS, MAX_NOTIFICATIONS_PER_SECOND, MAX_PAGE_ENTRIES, McpConfig, McpFactory,
    Protocol, Secret, TIMEOUT_MS, Upstream,
};
pub use provider::McpProvider;
