//! The `db://` provider: SQL databases (SQLite, PostgreSQL, MySQL/MariaDB) served read-only
//! in depth.
//!
//! An overview per mount, tables as keyset-paged JSON or CSV rows, table schemas, and named
//! queries from config (fixed or templated, parameters bound, never spliced), with change
//! notifications. Every statement passes a parse-level pre-filter (`guard`), then runs in a
//! rolled-back read-only transaction under a deadline on its engine (`sqlite`/`conn`, `pg`,
//! `mysql`). See `docs.md` for the capability checklist.

mod config;
mod conn;
mod db;
mod engine;
mod guard;
mod mysql;
mod pg;
mod provider;
mod sqlite;
mod uri;
mod watch;

#[cfg(test)]
mod live_tests;

pub use config::{NamedQuery, ParamSpec, ParamType, SqlConfig, SqlFactory, SqlKind};
pub use provider::SqlProvider;
