//! The `git://` provider: local repositories served read-only through gix (pure Rust).
//!
//! Refs are resources, trees list recursively with keyset cursors, blobs read as text or
//! bytes, commits and path histories read as JSON, and ref moves notify subscribers only
//! when what they subscribed to changed. See `docs.md` for the capability checklist.

mod config;
mod error;
mod repo;
mod uri;

pub use config::{GitConfig, RefWatchMode};
