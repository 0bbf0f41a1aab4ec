//! The `s3://` provider: S3 and S3-compatible buckets (MinIO, R2, Ceph, moto) served
//! read-only through object_store.
//!
//! Objects are resources at `s3://{bucket}/{key}` (the key percent-encoded per segment), listed
//! a page per ListObjectsV2 request with `start-after`, read whole or in windows (ranged GETs),
//! and "directories" (keys ending in `/`) read as delimiter listings. Subscribed keys and
//! watched listings are polled. See `docs.md` for the capability checklist.

mod bounded;
mod config;
mod error;
mod list;
mod listing;
mod profile;
mod provider;
mod read;
mod uri;
mod watch;

pub use config::{POLL_INTERVAL_MS, S3Config, S3Factory};
pub use list::{COMPLETE_MAX, DIR_READ_MAX, STORE_PAGE_MAX};
pub use listing::LIST_BODY_MAX;
pub use provider::{CONNECT_TIMEOUT, MAX_RETRIES, REQUEST_TIMEOUT, RETRY_TIMEOUT, S3Provider};
pub use watch::LIST_WATCH_MAX_PAGES;
