//! [`FilesProvider`]: one sandboxed root, implementing the core `Provider` trait.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, Metadata};
use mcpr_core::{
    Capabilities, ChangeSink, Completion, CompletionRequest, Error, Page, PageRequest, Provider,
    ProviderInfo, ReadLimits, ReadOutput, ResourceMeta, ResourceUri, Result, TemplateMeta,
    UriTemplate, WatchGuard, run_blocking,
};

use crate::config::{BUILTIN_DENY, FilesConfig, ListWatchMode};
use crate::path::{RelPath, RootUri};
use crate::read::{INLINE_READ_MAX, mime_by_extension, read_path};
use crate::rules::Rules;
use crate::watch::Watcher;

/// State shared by the provider's operations and its watcher threads.
pub(crate) struct Inner {
    /// The capability handle every file operation goes through.
    pub(crate) root: Dir,
    /// The root's canonical absolute path (for `/proc/self/fd` checks and inotify paths).
    pub(crate) canonical_root: PathBuf,
    pub(crate) root_uri: RootUri,
    pub(crate) rules: Rules,
    pub(crate) config: FilesConfig,
    /// Sorted entries of directories the listing walked recently (see `list::DirCache`).
    pub(crate) dir_cache: crate::list::DirCache,
    /// Permits for whole-directory scans (completion, directory reads): each reads every
    /// entry of a directory that may hold millions, so only [`DIR_SCANS`] run at once per
    /// mount and the rest wait their turn instead of piling up on the blocking pool.
    pub(crate) scans: Arc<tokio::sync::Semaphore>,
    /// Whether reads may run on the calling thread: not when the tree is on (or holds) a
    /// network or FUSE file system, where one `stat` can block for as long as the server
    /// stays silent (see `crate::remote`). Then every read goes to the blocking pool, where
    /// the request timeout bounds it.
    pub(crate) in_place: bool,
    /// Descriptors of the small files read in place last (`crate::read::Kept`).
    pub(crate) kept: Arc<crate::read::Kept>,
}

/// How far [`Inner::read_start`] took a read.
enum ReadStart {
    /// Answered in place.
    Done(Result<ReadOutput>),
    /// To be read on the blocking pool: the real path, and what `symlink_metadata` said.
    Pool {
        rel: RelPath,
        md: std::io::Result<Metadata>,
    },
    /// A mount not read in place (`Inner::in_place`): the URI's path, allowed by the rules,
    /// links not resolved yet; all of the read, from the resolving on, is the pool's.
    Remote { decoded: RelPath },
}

/// How many directory scans (completions, directory reads) of one mount run at once.
pub(crate) const DIR_SCANS: usize = 4;

impl Inner {
    /// A read up to where it would wait: small whole files (nearly every read) are read
    /// right here, since a hop to the blocking pool would cost more than the read; big
    /// files, windows and directories are left to the pool, with the path and its stat.
    fn read_start(&self, uri: &ResourceUri, limits: &ReadLimits) -> ReadStart {
        let not_found = || Error::not_found(uri.as_str());
        let Some(decoded) = self.decode_allowed(uri) else {
            return ReadStart::Done(Err(not_found()));
        };
        if !self.in_place {
            // Nothing touches the tree here: resolving the links stats it too.
            return ReadStart::Remote { decoded };
        }
        if uri.query().is_none()
            && let Some(answer) = crate::read::read_direct(self, &decoded, uri, limits)
        {
            return ReadStart::Done(answer.map(ReadOutput::from));
        }
        let Some(rel) = self.resolve_real(&decoded) else {
            return ReadStart::Done(Err(not_found()));
        };
        // `rel` is already the real path (links resolved), so not following links changes
        // nothing but the cost: a single-component path is then one `statx`, not a
        // sandboxed open, `fstat` and close. A link swapped in since is not a regular file
        // here and fails as not found.
        let md = self.root.symlink_metadata(rel.as_path());
        let small = uri.query().is_none()
            && md
                .as_ref()
                .is_ok_and(|m| m.is_file() && m.len() <= INLINE_READ_MAX);
        if small {
            // The stat just taken is the one `read_path` would take first.
            return ReadStart::Done(
                read_path(self, &rel, uri, limits, md.ok()).map(ReadOutput::from),
            );
        }
        ReadStart::Pool { rel, md }
    }

    /// Decode `uri` into the real path (symlinks resolved) the mount may serve; `None` for
    /// anything else, including a link whose target is denied or outside the root.
    pub(crate) fn resolve(&self, uri: &ResourceUri) -> Option<RelPath> {
        self.resolve_real(&self.decode_allowed(uri)?)
    }

    /// The URI's path as written, if the rules allow it (links not resolved yet).
    fn decode_allowed(&self, uri: &ResourceUri) -> Option<RelPath> {
        let rel = self.root_uri.decode(uri.without_query())?;
        (!self.denied_either(&rel)).then_some(rel)
    }

    /// `rel` (from [`Self::decode_allowed`]) with its links resolved, if the real path is
    /// allowed too.
    fn resolve_real(&self, rel: &RelPath) -> Option<RelPath> {
        let real = self.resolve_links(rel)?;
        if real != *rel && self.denied_either(&real) {
            return None;
        }
        Some(real)
    }

    /// The directory flag is unknown before a stat, so a path is refused when it would be
    /// denied as either a file or a directory (`.ssh/` only matches directories).
    fn denied_either(&self, rel: &RelPath) -> bool {
        self.rules.is_denied_either(rel)
    }

    /// Resolve every symlink on `rel`, component by component, through the sandbox handle.
    ///
    /// cap-std already follows relative links that stay beneath the root, but refuses
    /// absolute ones even when they point inside it (`docs/latest -> /srv/docs/v2`); this
    /// resolves those too. A link leading outside the root, a `..` above it, or more than 40
    /// links yields `None`. The result only names real entries, so deny rules see what
    /// would really be opened. Opening still goes through cap-std, so a link swapped after
    /// this check cannot escape either.
    pub(crate) fn resolve_links(&self, rel: &RelPath) -> Option<RelPath> {
        use std::collections::VecDeque;
        use std::os::unix::ffi::OsStrExt as _;
        let mut pending: VecDeque<Vec<u8>> = rel.components().map(<[u8]>::to_vec).collect();
        let mut done = RelPath::root();
        let mut stack: Vec<RelPath> = Vec::new();
        let mut hops = 0;
        while let Some(comp) = pending.pop_front() {
            match comp.as_slice() {
                b"." => continue,
                b".." => {
                    done = stack.pop()?;
                    continue;
                }
                _ => {}
            }
            let candidate = done.join(&comp);
            match self.root.read_link_contents(candidate.as_path()) {
                Ok(target) => {
                    hops += 1;
                    if hops > 40 {
                        return None;
                    }
                    let target = target.as_os_str().as_bytes();
                    let rest: &[u8] = if target.starts_with(b"/") {
                        // Absolute: only meaningful when it points under the root.
                        let t = std::path::Path::new(std::ffi::OsStr::from_bytes(target));
                        let under = t.strip_prefix(&self.canonical_root).ok()?;
                        done = RelPath::root();
                        stack.clear();
                        let under = under.as_os_str().as_bytes().to_vec();
                        for c in under.split(|&b| b == b'/').filter(|c| !c.is_empty()).rev() {
                            pending.push_front(c.to_vec());
                        }
                        &[]
                    } else {
                        target
                    };
                    for c in rest.split(|&b| b == b'/').filter(|c| !c.is_empty()).rev() {
                        pending.push_front(c.to_vec());
                    }
                }
                // Not a link (EINVAL) or not there: a real component, or a missing one that
                // the open will report as not found.
                Err(_) => {
                    if !crate::path::valid_component(&comp) {
                        return None;
                    }
                    stack.push(done.clone());
                    done = candidate;
                }
            }
        }
        Some(done)
    }

    /// A permit to scan a whole directory (see [`Inner::scans`]), waiting for one if
    /// [`DIR_SCANS`] scans are running.
    pub(crate) async fn scan_permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        self.scans
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::internal("directory scan permits closed"))
    }

    /// The listing entry for a regular file.
    /// `real` is where the bytes are (differs from `rel` for a symlink).
    pub(crate) fn resource_meta(
        &self,
        rel: &RelPath,
        real: &RelPath,
        md: &Metadata,
    ) -> ResourceMeta {
        // Without a telling extension, look at the first bytes, as a read would: a listing
        // must not promise a type that reading the file then contradicts.
        let mime_type = match mime_by_extension(rel.as_bytes()) {
            Some(m) => Some(m.to_owned()),
            None => crate::read::sniff_file(self, real).map(str::to_owned),
        };
        ResourceMeta {
            uri: self.root_uri.uri_of(rel),
            name: rel.display(),
            title: None,
            description: None,
            mime_type,
            size: Some(md.len()),
            last_modified: rfc3339(md),
        }
    }
}

/// Last modification time as RFC 3339 (UTC, seconds).
pub(crate) fn rfc3339(md: &Metadata) -> Option<String> {
    let t = md.modified().ok()?.into_std();
    Some(humantime::format_rfc3339_seconds(t).to_string())
}

/// The `file://` provider for one root.
pub struct FilesProvider {
    inner: Arc<Inner>,
    info: ProviderInfo,
    templates: Arc<[TemplateMeta]>,
    parsed_templates: Vec<UriTemplate>,
    watcher: Watcher,
}

impl FilesProvider {
    /// Open the root and validate the config. Fails when the root is not a readable
    /// directory or a pattern or template is malformed.
    pub fn new(config: FilesConfig) -> Result<Self> {
        Self::build(config, None)
    }

    /// [`FilesProvider::new`] as it is over a network or FUSE tree: nothing read in place.
    #[cfg(test)]
    pub(crate) fn new_as_if_remote(config: FilesConfig) -> Result<Self> {
        Self::build(config, Some("the test says so".into()))
    }

    /// [`FilesProvider::new`]; `remote` says why the tree is not to be read in place when
    /// the caller knows, else the file systems are looked at.
    fn build(config: FilesConfig, remote: Option<String>) -> Result<Self> {
        config.validate()?;
        let canonical_root = std::fs::canonicalize(&config.root).map_err(|e| {
            Error::invalid_params(format!(
                "files root {} cannot be opened: {e}",
                config.root.display()
            ))
        })?;
        if !canonical_root.is_dir() {
            return Err(Error::invalid_params(format!(
                "files root {} is not a directory",
                canonical_root.display()
            )));
        }
        let root = Dir::open_ambient_dir(&canonical_root, ambient_authority()).map_err(|e| {
            Error::invalid_params(format!(
                "files root {} cannot be opened: {e}",
                canonical_root.display()
            ))
        })?;
        let rules = Rules::new(
            BUILTIN_DENY,
            &config.deny,
            config.hidden,
            config.respect_gitignore,
        )?;
        let root_uri = RootUri::new(&canonical_root);
        let prefix = root_uri.prefix().to_owned();
        let shown = canonical_root.display().to_string();

        let mut templates = vec![
            TemplateMeta {
                uri_template: format!("{prefix}/{{+path}}"),
                name: format!("files:{shown}"),
                title: Some(format!("Files under {shown}")),
                description: Some(format!(
                    "Any file or directory under {shown}; `path` is relative to that root. A directory reads as a JSON list of its entries."
                )),
                mime_type: None,
            },
            TemplateMeta {
                uri_template: format!("{prefix}/{{+path}}{{?offset,length,head,tail}}"),
                name: format!("files-window:{shown}"),
                title: Some(format!("Part of a large file under {shown}")),
                description: Some(
                    "A window of a file: `offset` and `length` select bytes; `head` or `tail` the first or last N lines (of the byte range when one is given). Use it for files over the read limit, such as logs.".into(),
                ),
                mime_type: None,
            },
        ];
        for t in &config.templates {
            // A template without a scheme is relative to the root, so a config file does not
            // have to repeat the root's absolute path.
            let full = if t.uri_template.contains("://") {
                t.uri_template.clone()
            } else {
                format!("{prefix}/{}", t.uri_template.trim_start_matches('/'))
            };
            let parsed = UriTemplate::parse(&full).map_err(|e| {
                Error::invalid_params(format!("template {:?}: {e}", t.uri_template))
            })?;
            if !parsed.literal_prefix().starts_with(&format!("{prefix}/")) {
                return Err(Error::invalid_params(format!(
                    "template {:?} must start with this mount's root {prefix}/",
                    t.uri_template
                )));
            }
            templates.push(TemplateMeta {
                uri_template: full,
                name: t.name.clone(),
                title: None,
                description: t.description.clone(),
                mime_type: None,
            });
        }
        let parsed_templates = templates
            .iter()
            .map(|t| UriTemplate::parse(&t.uri_template))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::internal(format!("built-in template does not parse: {e}")))?;

        let info = ProviderInfo {
            kind: "files",
            label: shown,
            uri_prefixes: vec![prefix],
            capabilities: Capabilities {
                list_changed: config.list_watch != ListWatchMode::Off,
                ..Capabilities::ALL
            },
            cache: config.cache,
        };
        let remote = remote.or_else(|| crate::remote::remote_reason(&root, &canonical_root));
        if let Some(why) = &remote {
            tracing::info!(
                root = %canonical_root.display(),
                "files mount: {why}; its reads all run on the blocking pool, bounded by the \
                 request timeout, none in place"
            );
        }
        let inner = Arc::new(Inner {
            in_place: remote.is_none(),
            root,
            canonical_root,
            root_uri,
            rules,
            config,
            dir_cache: Default::default(),
            scans: Arc::new(tokio::sync::Semaphore::new(DIR_SCANS)),
            kept: crate::read::Kept::new(),
        });
        let watcher = Watcher::new(inner.clone());
        Ok(Self {
            inner,
            info,
            templates: templates.into(),
            parsed_templates,
            watcher,
        })
    }

    #[cfg(test)]
    pub(crate) fn watcher_for_tests(&self) -> Watcher {
        self.watcher.clone()
    }

    #[cfg(test)]
    pub(crate) fn inner_for_tests(&self) -> &Inner {
        &self.inner
    }

    /// The canonical root directory.
    pub fn root(&self) -> &std::path::Path {
        &self.inner.canonical_root
    }
}

#[async_trait]
impl Provider for FilesProvider {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn ready(&self) -> bool {
        // The handle opened at start keeps working after the directory is deleted or
        // replaced, so compare it with what the root path names now.
        use cap_std::fs::MetadataExt as _;
        use std::os::unix::fs::MetadataExt as _;
        let (Ok(held), Ok(now)) = (
            self.inner.root.metadata("."),
            std::fs::metadata(&self.inner.canonical_root),
        ) else {
            return false;
        };
        held.is_dir()
            && now.is_dir()
            && held.ino() == now.ino()
            && held.dev() == now.dev()
            && held.nlink() > 0
    }

    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        let inner = self.inner.clone();
        // A page reads a few directories: cheap, but still blocking I/O, so off the runtime.
        run_blocking("files listing", move || {
            crate::list::list_page(&inner, page.after.as_deref(), page.limit.max(1))
        })
        .await
    }

    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<ReadOutput> {
        let (rel, md) = match self.inner.read_start(uri, limits) {
            ReadStart::Done(answer) => return answer,
            ReadStart::Pool { rel, md } => (rel, md),
            ReadStart::Remote { decoded } => {
                let inner = self.inner.clone();
                let uri = uri.clone();
                let (rel, md) = run_blocking("files read", move || {
                    let rel = inner
                        .resolve_real(&decoded)
                        .ok_or_else(|| Error::not_found(uri.as_str()))?;
                    let md = inner.root.symlink_metadata(rel.as_path());
                    Ok((rel, md))
                })
                .await?;
                (rel, md)
            }
        };
        let scan = match &md {
            Ok(m) if m.is_dir() => Some(self.inner.scan_permit().await?),
            _ => None,
        };
        let inner = self.inner.clone();
        let uri = uri.clone();
        let limits = *limits;
        run_blocking("files read", move || {
            // Held until the scan ends, even if the request is abandoned meanwhile.
            let _scan = scan;
            read_path(&inner, &rel, &uri, &limits, None)
        })
        .await
        .map(ReadOutput::from)
    }

    fn read_now(&self, uri: &ResourceUri, limits: &ReadLimits) -> Option<Result<ReadOutput>> {
        match self.inner.read_start(uri, limits) {
            ReadStart::Done(answer) => Some(answer),
            // `read` starts again from the URI: a large file's read is worth the few calls.
            ReadStart::Pool { .. } | ReadStart::Remote { .. } => None,
        }
    }

    async fn read_directory(
        &self,
        uri: &ResourceUri,
        page: PageRequest,
    ) -> Result<Page<ResourceMeta>> {
        if uri.query().is_some() {
            return Err(Error::invalid_params(format!(
                "{} has a query; a directory read takes the directory's URI and a cursor",
                uri.as_str()
            )));
        }
        let checked = {
            let (inner, uri) = (self.inner.clone(), uri.clone());
            move || {
                let rel = inner
                    .resolve(&uri)
                    .ok_or_else(|| Error::not_found(uri.as_str()))?;
                let md = inner
                    .root
                    .metadata(rel.as_path())
                    .map_err(|e| crate::error::map_io(e, uri.as_str()))?;
                if !md.is_dir() {
                    return Err(mcpr_core::not_a_directory(uri.as_str()));
                }
                Ok(rel)
            }
        };
        // On a network or FUSE tree even the check may block: the pool's, as the scan is.
        let rel = if self.inner.in_place {
            checked()?
        } else {
            run_blocking("files directory read", checked).await?
        };
        // A directory read scans the whole directory, as a read of it does: one permit.
        let scan = self.inner.scan_permit().await?;
        let inner = self.inner.clone();
        let uri = uri.as_str().to_owned();
        run_blocking("files directory read", move || {
            let _scan = scan;
            crate::list::dir_page(&inner, &rel, &uri, page.after.as_deref(), page.limit.max(1))
        })
        .await
    }

    async fn folder_details(&self, uri: &ResourceUri) -> Result<mcpr_core::FolderDetails> {
        let inner = self.inner.clone();
        let uri = uri.clone();
        // A scan of the folder and a `stat` of each file: the blocking pool's, as a
        // directory read's scan is, under the same permit.
        let scan = self.inner.scan_permit().await?;
        run_blocking("files folder details", move || {
            let _scan = scan;
            let rel = inner
                .resolve(&uri)
                .ok_or_else(|| Error::not_found(uri.as_str()))?;
            crate::list::folder_details(&inner, &rel, uri.as_str())
        })
        .await
    }

    fn templates(&self) -> Arc<[TemplateMeta]> {
        self.templates.clone()
    }

    async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        let idx = mcpr_core::template_index(&self.templates, &req.template)?;
        let template = self.parsed_templates[idx].clone();
        let scan = self.inner.scan_permit().await?;
        let inner = self.inner.clone();
        run_blocking("files completion", move || {
            let _scan = scan;
            crate::complete::complete(&inner, &template, &req)
        })
        .await
    }

    async fn watch(&self, uri: &ResourceUri, sink: ChangeSink) -> Result<WatchGuard> {
        let rel = self
            .inner
            .resolve(uri)
            .ok_or_else(|| Error::not_found(uri.as_str()))?;
        crate::read::FileQuery::parse(uri)?;
        self.watcher.watch(uri.as_str(), rel, sink)
    }

    async fn change_token(&self, uri: &ResourceUri) -> Option<String> {
        use cap_std::fs::MetadataExt as _;
        let inner = self.inner.clone();
        let uri = uri.clone();
        // Resolving and `stat` are file system calls: the blocking pool's work.
        run_blocking("files change token", move || {
            let Some(rel) = inner.resolve(&uri) else {
                return Ok(None);
            };
            Ok(Some(match inner.root.metadata(rel.as_path()) {
                Ok(md) => {
                    let mtime = md.modified().ok().map(|t| t.into_std());
                    format!("{}:{}:{:?}", md.ino(), md.len(), mtime)
                }
                Err(_) => "absent".to_owned(),
            }))
        })
        .await
        .ok()
        .flatten()
    }

    async fn watch_list(&self, sink: ChangeSink) -> Result<WatchGuard> {
        if self.inner.config.list_watch == ListWatchMode::Off {
            return Err(Error::unsupported(
                "list change notifications are off for this mount",
            ));
        }
        // The first list watch walks the whole tree to add inotify watches: blocking work.
        let watcher = self.watcher.clone();
        run_blocking("files list watch", move || watcher.watch_list(sink)).await
    }
}
