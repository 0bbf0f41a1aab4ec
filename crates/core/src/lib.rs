//! The vocabulary of mcp-resources: what a provider is, how resources are named, paged,
//! read, completed and watched, and the one error type every layer speaks.
//!
//! Nothing in this crate knows about JSON-RPC, sessions, protocol eras or the network:
//! the `server` crate translates between this vocabulary and MCP.

// Every crate of the workspace builds on this one, so this is where a build on another
// operating system stops, before it fails somewhere less clear. The files provider opens
// paths with openat2 (RESOLVE_BENEATH: no escape through a symlink or `..`) and reads them
// with statx; directories are watched with inotify; network and FUSE filesystems are found
// with statfs; the stdio transport reopens its pipes through /proc/self/fd. None has a
// portable equivalent that keeps the same sandbox and the same bounds.
#[cfg(not(target_os = "linux"))]
compile_error!(
    "mcp-resources runs on Linux only: its file sandbox needs openat2 (RESOLVE_BENEATH) and statx, \
     change watching needs inotify, and it relies on statfs and /proc; build it on Linux \
     (a container or a VM will do)"
);

pub mod blocking;
pub mod capabilities;
pub mod change;
pub mod config;
pub mod cursor;
pub mod deny;
pub mod error;
pub mod mime;
pub mod poll;
pub mod provider;
pub mod redact;
pub mod spare;
pub mod sync;
pub mod template;
pub mod uri;
pub mod window;

pub use blocking::run_blocking;
pub use capabilities::Capabilities;
pub use change::{
    ChangeBus, ChangeEvent, ChangeFeed, ChangeSink, ClusterStatus, FeedItem, Interest, LocalBus,
    LocalWatching, WatchGuard, Watching,
};
pub use cursor::{CursorCodec, CursorError, CursorSecret, PageCursor};
pub use deny::{DEFAULT_DENY, DenyList};
pub use error::{Error, ErrorKind, Limit, Result};
pub use provider::{
    CacheHints, CacheScope, Completion, CompletionRequest, Contents, ContentsBody, Counter,
    FolderDetails, MAX_LEFT_OUT, Page, PageRequest, Provider, ProviderInfo, ReadLimits, ReadOutput,
    RelayedSkill, RelayedSkillFile, ResourceMeta, TemplateMeta, addresses, template_index,
};
pub use provider::{DIRECTORY_MIME_TYPE, not_a_directory};
pub use redact::{redact_url, redact_urls_in};
pub use template::UriTemplate;
pub use uri::ResourceUri;
pub use window::Window;
