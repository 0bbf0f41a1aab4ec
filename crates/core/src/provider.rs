//! The seam between the server and a data source: the [`Provider`] trait and the plain
//! data types it speaks. A provider knows nothing about JSON-RPC, sessions or protocol eras.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::capabilities::Capabilities;
use crate::change::{ChangeSink, WatchGuard};
use crate::error::{Error, Result};
use crate::uri::ResourceUri;

/// The MIME type of a directory in a directory read (SEP-2640).
pub const DIRECTORY_MIME_TYPE: &str = "inode/directory";

/// Who may cache a result (2026-07-28 `cacheScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheScope {
    /// Any cache may keep it: the answer does not depend on who asks.
    #[default]
    Public,
    /// Only the asking client may keep it.
    Private,
}

/// Freshness hints a mount attaches to its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheHints {
    /// How long a result may be treated as fresh, in milliseconds.
    pub ttl_ms: u64,
    /// Who may cache it.
    pub scope: CacheScope,
}

impl Default for CacheHints {
    fn default() -> Self {
        Self {
            ttl_ms: 0,
            scope: CacheScope::Public,
        }
    }
}

/// Static facts about one mounted provider.
#[derive(Debug, Clone)]
pub struct ProviderInfo {
    /// The provider kind as written in config (`files`, ...).
    pub kind: &'static str,
    /// A human-readable label for logs and errors (for files: the root).
    pub label: String,
    /// URI prefixes this mount owns. A URI belongs to the mount with the longest prefix that
    /// matches at a boundary (the prefix ends in `/` or `+`, or the URI continues with `/`, `?`, `#`
    /// or ends), so `file:///srv/docs` never claims `file:///srv/docs-evil`.
    pub uri_prefixes: Vec<String>,
    /// The operations it supports.
    pub capabilities: Capabilities,
    /// Cache hints for its results.
    pub cache: CacheHints,
}

/// What a mount serves, as a reader should see it: its URI prefixes, except that a prefix
/// which is only the fixed start of a template (`db://users/` of `db://users/{status}/list`)
/// is shown as that template, since the prefix itself is no resource. (A template that only
/// adds a query to its prefix, `db://app{?cursor}`, leaves the prefix as it is: that is a
/// resource.) An opened provider gives its `uri_prefixes` and `templates`; a mount spec
/// computes the same from its settings ([`crate::config::MountSpec::addresses`]).
pub fn addresses(uri_prefixes: &[String], templates: &[TemplateMeta]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for prefix in uri_prefixes {
        let starting: Vec<&str> = templates
            .iter()
            .map(|t| t.uri_template.as_str())
            .filter(|t| {
                t.strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.starts_with('{') && !rest.starts_with("{?"))
            })
            .collect();
        let shown: Vec<String> = if starting.is_empty() {
            vec![prefix.clone()]
        } else {
            starting.into_iter().map(str::to_owned).collect()
        };
        for s in shown {
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    out
}

/// One page request: resume after `after` (a position from a previous page), at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// The keyset position of the last entry already served; `None` for the first page.
    pub after: Option<Vec<u8>>,
    /// The most entries to return (at least 1).
    pub limit: usize,
}

/// One page of results.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The entries, in the provider's stable order.
    pub items: Vec<T>,
    /// Where to resume; `None` when this was the last page.
    pub next: Option<Vec<u8>>,
    /// The page's own cache hints when its freshness is not the mount's (a gateway relays
    /// its upstream's `ttlMs`/`cacheScope`, already capped by the mount's own); `None`: the
    /// mount's [`ProviderInfo::cache`].
    pub hints: Option<CacheHints>,
}

impl CacheHints {
    /// The stricter of two: the shorter freshness, and `private` when either is.
    pub fn min(self, other: Self) -> Self {
        Self {
            ttl_ms: self.ttl_ms.min(other.ttl_ms),
            scope: if self.scope == CacheScope::Private || other.scope == CacheScope::Private {
                CacheScope::Private
            } else {
                CacheScope::Public
            },
        }
    }
}

impl<T> Page<T> {
    /// A page from up to `limit + 1` collected `(position, item)` pairs: the extra one only
    /// says that there is a next page, which then resumes after the last item kept.
    pub fn from_lookahead(mut items: Vec<(Vec<u8>, T)>, limit: usize) -> Self {
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|(p, _)| p.clone())
        } else {
            None
        };
        Self {
            items: items.into_iter().map(|(_, m)| m).collect(),
            next,
            hints: None,
        }
    }
}

/// The index of `template` among a provider's advertised templates, or the invalid-params
/// error every provider gives for a template it did not advertise.
pub fn template_index(templates: &[TemplateMeta], template: &str) -> Result<usize> {
    templates
        .iter()
        .position(|t| t.uri_template == template)
        .ok_or_else(|| Error::invalid_params(format!("unknown template {template:?}")))
}

/// The error a directory read of something that is not a directory answers: invalid
/// params (-32602), as SEP-2640 asks, with the URI.
pub fn not_a_directory(uri: &str) -> Error {
    Error::invalid_params(format!(
        "{uri} is not a directory: resources/directory/read lists directories only"
    ))
    .with_uri(uri)
}

/// A resource as listed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResourceMeta {
    /// Its URI.
    pub uri: String,
    /// Its programmatic name.
    pub name: String,
    /// A display title.
    pub title: Option<String>,
    /// What it is.
    pub description: Option<String>,
    /// Its MIME type, when known.
    pub mime_type: Option<String>,
    /// Its size in bytes, when known.
    pub size: Option<u64>,
    /// Last modification time as RFC 3339.
    pub last_modified: Option<String>,
}

/// The most left-out entries one [`Provider::folder_details`] names; past this it only counts
/// them ([`FolderDetails::more_left_out`]), so a folder of thousands of dot-files costs a
/// bounded answer and a bounded number of warnings.
pub const MAX_LEFT_OUT: usize = 64;

/// What a directory read does not say about a folder, for publishing the folder whole (a
/// skill): the permission bits of its files, and the entries the mount's rules leave out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FolderDetails {
    /// The permission bits (`0o777` at most: never setuid, setgid or sticky) of files the
    /// directory read shows, by the URI the read gives them, where the source knows them.
    pub modes: Vec<(String, u32)>,
    /// Entries the mount's rules (deny list, hidden files, ignore files) leave out of the
    /// directory read: a path for people (a folder ends in `/`) and the rule, at most
    /// [`MAX_LEFT_OUT`].
    pub left_out: Vec<(String, String)>,
    /// How many more were left out than [`FolderDetails::left_out`] names.
    pub more_left_out: usize,
}

/// A skill another MCP server publishes (SEP-2640), as a gateway mount relays it: the
/// upstream's manifest, every URI already the mount's own. The skills catalog reads each
/// file through the mount and checks its bytes against `digest` and `size` before it
/// publishes the skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayedSkill {
    /// The skill's path: its upstream `skill://` URI without the scheme and the final
    /// `/SKILL.md` (`acme/pdf-forms`).
    pub path: String,
    /// Every file of its manifest, `SKILL.md` included; `None` when the upstream says its
    /// files are dynamic (no digests to check relayed bytes against).
    pub files: Option<Vec<RelayedSkillFile>>,
}

/// One file of a [`RelayedSkill`]'s manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayedSkillFile {
    /// Its path inside the skill's folder (`SKILL.md`, `scripts/fill.py`); empty when the
    /// upstream names a file outside the skill's folder.
    pub path: String,
    /// The mount's URI of the file, which a read of the mount serves.
    pub uri: String,
    /// The upstream's `sha256:` digest of its bytes.
    pub digest: String,
    /// The upstream's size of it, in bytes.
    pub size: u64,
}

/// A URI template a provider advertises.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateMeta {
    /// The RFC 6570 template.
    pub uri_template: String,
    /// Programmatic name.
    pub name: String,
    /// Display title.
    pub title: Option<String>,
    /// What it addresses and how to fill it.
    pub description: Option<String>,
    /// MIME type shared by every expansion, when uniform.
    pub mime_type: Option<String>,
}

/// Limits that apply to one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// The most bytes of content one read may return.
    pub max_bytes: u64,
}

/// What one read returns: the contents, and cache hints of the result's own when its
/// freshness depends on the resource (an HTTP answer's `max-age`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReadOutput {
    /// The content items.
    pub contents: Vec<Contents>,
    /// Hints for this result; `None` keeps the mount's [`ProviderInfo::cache`].
    pub hints: Option<CacheHints>,
}

impl From<Vec<Contents>> for ReadOutput {
    /// Contents with the mount's cache hints.
    fn from(contents: Vec<Contents>) -> Self {
        Self {
            contents,
            hints: None,
        }
    }
}

/// The body of one content item.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentsBody {
    /// Valid UTF-8.
    Text(String),
    /// Anything else; the server base64-encodes it.
    Blob(Vec<u8>),
}

/// One item of a read result.
#[derive(Debug, Clone, PartialEq)]
pub struct Contents {
    /// The URI this item is the content of.
    pub uri: String,
    /// Its MIME type.
    pub mime_type: Option<String>,
    /// The data.
    pub body: ContentsBody,
    /// Extra facts about this item (for windows: the range actually returned).
    pub meta: Option<serde_json::Map<String, serde_json::Value>>,
}

/// A `completion/complete` request for one argument of one of the provider's templates.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    /// The template, exactly as the provider advertised it.
    pub template: String,
    /// The argument being completed.
    pub argument: String,
    /// What the user typed so far.
    pub value: String,
    /// Other arguments already resolved.
    pub context: BTreeMap<String, String>,
}

/// Completion suggestions.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Completion {
    /// At most 100 values.
    pub values: Vec<String>,
    /// How many matched in all, when known.
    pub total: Option<u32>,
    /// Whether there are more than `values` holds.
    pub has_more: bool,
}

/// A counter a provider exports on the server's `/metrics` (cache hits, upstream requests),
/// labelled there with the mount's kind and label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The metric name (`mcpr_http_cache_hits_total`).
    pub name: &'static str,
    /// Its one-line description.
    pub help: &'static str,
    /// The count so far.
    pub value: u64,
}

/// One mounted data source.
///
/// Every method that a provider does not declare in [`ProviderInfo::capabilities`] answers
/// [`Error::unsupported`] by default, never an empty result that looks real.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// Static facts: kind, URI prefixes, capabilities.
    fn info(&self) -> &ProviderInfo;

    /// Whether the source can serve requests right now.
    async fn ready(&self) -> bool {
        true
    }

    /// Like [`Provider::ready`], with the reason when the source cannot serve: an error as
    /// its requests would answer (the bucket or database named, no secret), for `/readyz`.
    /// The default says only that [`Provider::ready`] is false; a provider that can tell
    /// why overrides this one and makes `ready` its `is_ok`.
    async fn readiness(&self) -> Result<()> {
        if self.ready().await {
            Ok(())
        } else {
            Err(Error::new(
                crate::error::ErrorKind::Unavailable,
                format!("the {} mount is not ready", self.info().kind),
            ))
        }
    }

    /// One page of resources, resuming after `page.after`.
    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        let _ = page;
        Err(Error::unsupported(format!(
            "{} mounts cannot list resources",
            self.info().kind
        )))
    }

    /// The contents of `uri`, which the router has already matched to this mount, with
    /// cache hints of the result's own when its freshness depends on the resource
    /// ([`ReadOutput::hints`]; a `Vec<Contents>` converts with `into()`, keeping the mount's).
    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<ReadOutput>;

    /// [`Provider::read`] done in place, when the provider can finish it without waiting (a
    /// small local file): exactly what `read` would answer, or `None` when `read` has to be
    /// called (it would wait, or the provider cannot tell without trying). The servers' hot
    /// read paths ask this first, so a read that is ready at once costs no future: building,
    /// boxing and moving the nested futures of a read was about a tenth of a small file's
    /// CPU. The default never answers.
    ///
    /// It runs on the caller's thread, a runtime worker or the stdio reader, before any
    /// timer: no request timeout can interrupt it. Answer only what cannot block for long
    /// (local memory, a local disk), never anything that may wait on a network, a FUSE
    /// daemon or another process; those belong in `read`, which the server bounds.
    fn read_now(&self, uri: &ResourceUri, limits: &ReadLimits) -> Option<Result<ReadOutput>> {
        let _ = (uri, limits);
        None
    }

    /// One page of the direct children of directory `uri` (SEP-2640
    /// `resources/directory/read`), metadata only, in the provider's stable order: files as
    /// they are listed, subfolders with [`DIRECTORY_MIME_TYPE`], resuming after `page.after`
    /// (a position from a previous page). The entries are the ones reading the directory
    /// shows (the mount's deny, hidden and ignore rules applied). A URI that names anything
    /// but a directory answers [`not_a_directory`]; one the mount does not serve,
    /// not found.
    async fn read_directory(
        &self,
        uri: &ResourceUri,
        page: PageRequest,
    ) -> Result<Page<ResourceMeta>> {
        let _ = page;
        Err(Error::unsupported(format!(
            "{} mounts have no directories to read ({})",
            self.info().kind,
            uri.as_str()
        )))
    }

    /// For directory `uri` (one [`Provider::read_directory`] serves): the modes of the files
    /// it shows and the entries its rules leave out ([`FolderDetails`]), for publishing the
    /// folder whole. The default knows neither. Like a directory read, one bounded scan of
    /// the one folder, never below it.
    async fn folder_details(&self, uri: &ResourceUri) -> Result<FolderDetails> {
        let _ = uri;
        Ok(FolderDetails::default())
    }

    /// The URI templates this mount advertises, as they are now: shared, so that a source
    /// whose templates change (a gateway's upstream) swaps them while a caller still holds
    /// the ones it got, and a call costs a reference count, not a copy.
    fn templates(&self) -> std::sync::Arc<[TemplateMeta]> {
        static NONE: std::sync::LazyLock<std::sync::Arc<[TemplateMeta]>> =
            std::sync::LazyLock::new(|| std::sync::Arc::new([]));
        NONE.clone()
    }

    /// Suggestions for one template argument.
    async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        let _ = req;
        Err(Error::unsupported(format!(
            "{} mounts do not complete arguments",
            self.info().kind
        )))
    }

    /// Start reporting changes of `uri` to `sink` until the guard is dropped.
    /// The registry calls this once per URI however many clients subscribe.
    async fn watch(&self, uri: &ResourceUri, sink: ChangeSink) -> Result<WatchGuard> {
        let _ = (uri, sink);
        Err(Error::unsupported(format!(
            "{} mounts cannot be watched",
            self.info().kind
        )))
    }

    /// A cheap fingerprint of the resource's current state (for files: size, modification
    /// time and inode), or `None` when the provider has none. Blocking work (a `stat`) runs
    /// on the blocking pool ([`crate::run_blocking`]), never on the async runtime.
    ///
    /// The server takes one before it starts a watch and compares after, so a change made
    /// while the watch was being set up is still reported.
    async fn change_token(&self, uri: &ResourceUri) -> Option<String> {
        let _ = uri;
        None
    }

    /// For a versioned source (git), the ref whose tree the mount serves by default (its
    /// configured default ref, else the branch `HEAD` names), spelled as the ref segment of
    /// the mount's listing URIs; `None`
    /// for a source without refs. Things published from the mount at "its" version (the
    /// skills catalog) use this.
    fn default_ref(&self) -> Option<String> {
        None
    }

    /// How often the provider looks again at a source that cannot tell it of changes (s3
    /// polls every `poll_interval_ms`), or `None` when it does not poll. What a caller found
    /// by walking such a source is as fresh as the provider's own view for that long, so it
    /// may keep it that long instead of asking the source on every request (the skills
    /// catalog's walks of folders it cannot watch).
    fn poll_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// The skills the source itself publishes (a gateway mount: its upstream's SEP-2640
    /// skills), for the skills catalog: `Ok(None)` when it publishes none, as by default; an
    /// error when it cannot tell now (its upstream is down).
    async fn relayed_skills(&self) -> Result<Option<Vec<RelayedSkill>>> {
        Ok(None)
    }

    /// What the source says it is and offers, once contacted (a gateway mount's upstream:
    /// its name, version, era and what it supports), for `check-config --connect`; `None`
    /// when there is nothing to add to the label.
    fn offers(&self) -> Option<String> {
        None
    }

    /// Counters of the provider's own for `/metrics`; none by default.
    fn counters(&self) -> Vec<Counter> {
        Vec::new()
    }

    /// Start reporting changes of the set of resources to `sink` until the guard is dropped.
    async fn watch_list(&self, sink: ChangeSink) -> Result<WatchGuard> {
        let _ = sink;
        Err(Error::unsupported(format!(
            "{} mounts do not report list changes",
            self.info().kind
        )))
    }
}
