//! The `git://` provider: local repositories served read-only through gix (pure Rust), with
//! refs from loose files and `packed-refs` (gix) or a reftable (our own reader).
//!
//! Refs are resources, trees list recursively with keyset cursors, blobs read as text or
//! bytes, commits and path histories read as JSON, and ref moves notify subscribers only
//! when what they subscribed to changed. See `docs.md` for the capability checklist.

mod complete;
mod config;
mod error;
mod history;
mod list;
mod provider;
mod read;
mod reftable;
mod repo;
mod uri;
mod watch;

pub use config::{GitConfig, GitFactory, RefWatchMode};
pub use provider::GitProvider;
