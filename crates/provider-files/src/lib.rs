//! The `file://` provider: local directories served as MCP resources, sandboxed.
//!
//! Every open, stat and directory read goes through a `cap-std` directory handle for the
//! mount root (`openat2` with `RESOLVE_BENEATH` on Linux), so no URI can reach outside the
//! root however it is spelled. See `docs.md` for the capability checklist.

mod complete;
mod config;
mod error;
mod list;
mod list_inotify;
mod path;
mod provider;
mod read;
mod remote;
mod rules;
mod watch;

pub use config::{BUILTIN_DENY, FilesConfig, FilesFactory, ListWatchMode, TemplateConfig};
pub use path::encode_path_uri;
pub use provider::FilesProvider;
