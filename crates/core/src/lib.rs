//! The vocabulary of mcp-resources: what a provider is, how resources are named, paged,
//! read, completed and watched, and the one error type every layer speaks.
//!
//! Nothing in this crate knows about JSON-RPC, sessions, protocol eras or the network:
//! the `server` crate translates between this vocabulary and MCP.

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
pub use cursor::{CursorCodec, CursorError, PageCursor};
pub use deny::{DEFAULT_DENY, DenyList};
pub use error::{Error, ErrorKind, Result};
pub use provider::{
    CacheHints, CacheScope, Completion, CompletionRequest, Contents, ContentsBody, Counter,
    FolderDetails, MAX_LEFT_OUT, Page, PageRequest, Provider, ProviderInfo, ReadLimits, ReadOutput,
    ResourceMeta, TemplateMeta, template_index,
};
pub use provider::{DIRECTORY_MIME_TYPE, not_a_directory};
pub use redact::{redact_url, redact_urls_in};
pub use template::UriTemplate;
pub use uri::ResourceUri;
pub use window::Window;
