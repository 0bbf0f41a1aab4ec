//! The `db://` provider: SQL databases (SQLite, PostgreSQL, MySQL/MariaDB) served read-only
//! in depth.
//!
//! An overview per mount, tables as keyset-paged JSON or CSV rows, table schemas, and named
//! queries from config (fixed or templated, parameters bound, never spliced), with change
//! notifications. Every statement passes a parse-level pre-filter (`guard`), then runs in a
//! rolled-back read-only transaction under a deadline on its engine (`sqlite`/`conn`, `pg`,
//! `mysql`). See `docs.md` for the capability checklist.

// Without the `engines` feature only the pre-filter is built (for the fuzz targets), and
// what the engines use of it is unused.
#![cfg_attr(not(feature = "engines"), allow(dead_code))]

#[cfg(feature = "engines")]
mod complete;
#[cfg(feature = "engines")]
mod config;
#[cfg(feature = "engines")]
mod conn;
#[cfg(feature = "engines")]
mod db;
#[cfg(feature = "engines")]
mod engine;
#[cfg(feature = "engines")]
mod error;
mod guard;
#[cfg(feature = "engines")]
mod list;
#[cfg(feature = "engines")]
mod mysql;
#[cfg(feature = "engines")]
mod pg;
#[cfg(feature = "engines")]
mod provider;
#[cfg(feature = "engines")]
mod query;
#[cfg(feature = "engines")]
mod read;
#[cfg(feature = "engines")]
mod render;
#[cfg(feature = "engines")]
mod sqlite;
#[cfg(feature = "engines")]
mod uri;
#[cfg(feature = "engines")]
mod watch;

#[cfg(all(test, feature = "engines"))]
mod live_tests;

#[cfg(feature = "engines")]
pub use config::{NamedQuery, ParamSpec, ParamType, SqlConfig, SqlFactory, SqlKind};
#[cfg(feature = "engines")]
pub use provider::SqlProvider;

/// The parse-level pre-filter alone, for the fuzz targets in `fuzz/`: not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::guard::{Engine, check_read_only};
}
