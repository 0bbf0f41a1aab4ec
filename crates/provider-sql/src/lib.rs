//! The `db://` provider: SQL databases served read-only in depth (SQLite so far).
//!
//! An overview per mount, tables as keyset-paged JSON rows, table schemas, and named queries
//! from config (fixed or templated, parameters bound, never spliced). Every statement passes
//! a parse-level pre-filter (`guard`), then runs on a read-only, authorizer-guarded SQLite
//! connection with a deadline (`conn`). See `docs.md` for the capability checklist.

mod config;
mod conn;
mod db;
mod guard;
mod provider;
mod uri;

pub use config::{NamedQuery, ParamSpec, ParamType, SqlConfig};
pub use provider::SqlProvider;
