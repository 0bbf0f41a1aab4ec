//! [`GitProvider`]: one repository, implementing the core `Provider` trait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use gix::ObjectId;
use mcpr_core::{
    Capabilities, ChangeSink, Completion, CompletionRequest, DenyList, Error, Page, PageRequest,
    Provider, ProviderInfo, ReadLimits, ReadOutput, ResourceMeta, ResourceUri, Result,
    TemplateMeta, UriTemplate, WatchGuard, run_blocking,
};

use crate::config::{GitConfig, RefWatchMode};
use crate::repo::Repo;
use crate::uri::{Bases, TreePath};
use crate::watch::Watcher;

/// State shared by the provider's operations and its watch thread.
pub(crate) struct Inner {
    pub(crate) repo: Repo,
    pub(crate) bases: Bases,
    pub(crate) config: GitConfig,
    /// (commit, path) → committer date of the commit that last changed the path.
    pub(crate) last_modified: Mutex<HashMap<(ObjectId, TreePath), Option<i64>>>,
    /// The deny list (core's defaults plus the mount's `deny`).
    pub(crate) deny: DenyList,
}

impl Inner {
    /// Whether `path` is denied, as a file or as a tree: a URI naming it answers not found
    /// before anything is looked up, so the answer does not depend on whether it exists.
    pub(crate) fn denied(&self, path: &TreePath) -> bool {
        !path.is_root() && self.deny.is_denied_either(as_path(path).as_ref())
    }

    /// Whether the tree entry at `path` (a tree when `is_tree`) is denied itself, for walks
    /// and directory reads whose parents were already kept.
    pub(crate) fn entry_denied(&self, path: &TreePath, is_tree: bool) -> bool {
        self.deny.is_entry_denied(as_path(path).as_ref(), is_tree)
    }
}

/// `path` as the deny list matches it. Names that are not UTF-8 are matched with their bad
/// bytes replaced, which no pattern (UTF-8 text) could have named anyway.
fn as_path(path: &TreePath) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(path.as_bytes())
}

/// The `git://` provider for one repository.
pub struct GitProvider {
    inner: Arc<Inner>,
    info: ProviderInfo,
    templates: Arc<[TemplateMeta]>,
    /// The variables of each template, in the same order.
    variables: Vec<Vec<String>>,
    watcher: Watcher,
}

impl GitProvider {
    /// Open the repository and validate the config. Fails when the path is not a git
    /// repository gix can read, a setting is out of range, or `default_ref` names no commit.
    pub fn new(config: GitConfig) -> Result<Self> {
        config.validate()?;
        let deny = DenyList::new(&config.deny)?;
        let repo = Repo::open(&config.repo)?;
        if let Some(r) = &config.default_ref {
            let h = repo.handle();
            if repo.resolve_rev(&h, r)?.is_none() {
                return Err(Error::invalid_params(format!(
                    "git default_ref {r:?} names no commit in {}",
                    config.repo.display()
                )));
            }
        }
        let bases = Bases::new(config.default, config.name.as_deref());
        let label = match &config.name {
            Some(n) => format!("{n} ({})", config.repo.display()),
            None => config.repo.display().to_string(),
        };
        let templates = templates(&bases, &label);
        let variables = templates
            .iter()
            .map(|t| {
                UriTemplate::parse(&t.uri_template)
                    .map(|p| p.variables().into_iter().map(str::to_owned).collect())
                    .map_err(|e| Error::internal(format!("built-in template does not parse: {e}")))
            })
            .collect::<Result<Vec<Vec<String>>>>()?;
        let watches = config.watch != RefWatchMode::Off;
        let info = ProviderInfo {
            kind: "git",
            label,
            uri_prefixes: bases.router_prefixes(),
            capabilities: Capabilities {
                watch: watches,
                list_changed: watches,
                ..Capabilities::ALL
            },
            cache: config.cache,
        };
        let inner = Arc::new(Inner {
            repo,
            bases,
            config,
            last_modified: Mutex::default(),
            deny,
        });
        let watcher = Watcher::new(inner.clone());
        Ok(Self {
            inner,
            info,
            templates: templates.into(),
            variables,
            watcher,
        })
    }

    /// The repository's git directory.
    pub fn git_dir(&self) -> &std::path::Path {
        &self.inner.repo.git_dir
    }

    /// Run `f` on the blocking pool: every gix call is blocking I/O.
    async fn blocking<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&Inner) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let inner = self.inner.clone();
        run_blocking(what, move || f(&inner)).await
    }
}

/// The templates of a mount, for each URI base it answers to.
fn templates(bases: &Bases, label: &str) -> Vec<TemplateMeta> {
    let mut out = Vec::new();
    for base in bases.all() {
        let suffix = if base == "git://" {
            String::new()
        } else {
            format!(
                ":{}",
                base.trim_start_matches("git://@").trim_end_matches('/')
            )
        };
        out.push(TemplateMeta {
            uri_template: format!("{base}{{ref}}/{{+path}}"),
            name: format!("git-file{suffix}"),
            title: Some(format!("A file or directory of {label} at a ref")),
            description: Some(
                "`ref` is a branch, tag, full ref name, HEAD or commit id (a `/` in it is sent as %2F); `path` is a path in its tree. Files read as text or bytes; directories as a JSON list of entries; symlinks as their target (never followed); submodules as JSON.".into(),
            ),
            mime_type: None,
        });
        out.push(TemplateMeta {
            uri_template: format!("{base}{{ref}}"),
            name: format!("git-commit{suffix}"),
            title: Some(format!("The commit a ref of {label} points at")),
            description: Some(
                "JSON: id, message, author, committer, dates and parents of the commit `ref` resolves to.".into(),
            ),
            mime_type: Some("application/json".into()),
        });
        out.push(TemplateMeta {
            uri_template: format!("{base}{{ref}}/{{+path}}{{?history,after,limit}}"),
            name: format!("git-history{suffix}"),
            title: Some(format!("History of a path in {label}")),
            description: Some(
                "With `history`: the first-parent commits that changed `path` (empty path: the whole tree), newest first, `limit` (1-100, default 20) per page; `after` (a commit id from the previous page's `next`) continues. Without `history`, `after` continues a directory listing after an entry name.".into(),
            ),
            mime_type: Some("application/json".into()),
        });
    }
    out
}

#[async_trait]
impl Provider for GitProvider {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    fn default_ref(&self) -> Option<String> {
        // The ref as the listing spells it (HEAD's branch when no default ref is set), so
        // that what is published at the mount's version (the skills catalog) names the
        // same URIs as the mount's own listing entries.
        let h = self.inner.repo.handle();
        let rev = self
            .inner
            .repo
            .default_rev(&h, self.inner.config.default_ref.as_deref());
        Some(crate::uri::encode_ref(&rev))
    }

    async fn ready(&self) -> bool {
        self.blocking("git ready", |inner| {
            let h = inner.repo.handle();
            Ok(inner.repo.refs_readable(&h))
        })
        .await
        .unwrap_or(false)
    }

    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        self.blocking("git listing", move |inner| {
            crate::list::list_page(inner, page.after.as_deref(), page.limit.max(1))
        })
        .await
    }

    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<ReadOutput> {
        let target = crate::uri::parse(&self.inner.bases, uri)?;
        let uri = uri.clone();
        let limits = *limits;
        self.blocking("git read", move |inner| {
            crate::read::read(inner, &uri, &target, &limits)
        })
        .await
        .map(ReadOutput::from)
    }

    async fn read_directory(
        &self,
        uri: &ResourceUri,
        page: PageRequest,
    ) -> Result<Page<ResourceMeta>> {
        let target = crate::uri::parse(&self.inner.bases, uri)?;
        let uri = uri.clone();
        self.blocking("git directory read", move |inner| {
            crate::list::dir_page(
                inner,
                &uri,
                &target,
                page.after.as_deref(),
                page.limit.max(1),
            )
        })
        .await
    }

    async fn folder_details(&self, uri: &ResourceUri) -> Result<mcpr_core::FolderDetails> {
        let target = crate::uri::parse(&self.inner.bases, uri)?;
        let uri = uri.clone();
        self.blocking("git folder details", move |inner| {
            crate::list::folder_details(inner, &uri, &target)
        })
        .await
    }

    fn templates(&self) -> Arc<[TemplateMeta]> {
        self.templates.clone()
    }

    async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        let idx = mcpr_core::template_index(&self.templates, &req.template)?;
        let variables = self.variables[idx].clone();
        self.blocking("git completion", move |inner| {
            crate::complete::complete(inner, &variables, &req)
        })
        .await
    }

    async fn watch(&self, uri: &ResourceUri, sink: ChangeSink) -> Result<WatchGuard> {
        if self.inner.config.watch == RefWatchMode::Off {
            return Err(Error::unsupported(
                "change notifications are off for this git mount",
            ));
        }
        let target = crate::uri::parse(&self.inner.bases, uri)?;
        if target.path.as_ref().is_some_and(|p| self.inner.denied(p)) {
            return Err(Error::not_found(uri.as_str()));
        }
        let watcher = self.watcher.clone();
        let uri = uri.clone();
        run_blocking("git watch", move || watcher.watch(&uri, target, sink)).await
    }

    async fn change_token(&self, uri: &ResourceUri) -> Option<String> {
        let target = crate::uri::parse(&self.inner.bases, uri).ok()?;
        if target.path.as_ref().is_some_and(|p| self.inner.denied(p)) {
            return None;
        }
        // A fingerprint reads the object database (gix): the blocking pool's work.
        self.blocking("git change token", move |inner| {
            let h = inner.repo.handle();
            Ok(
                crate::watch::fingerprint(inner, &h, &target, None, &mut HashMap::new())
                    .ok()
                    .map(|f| f.token()),
            )
        })
        .await
        .ok()
        .flatten()
    }

    async fn watch_list(&self, sink: ChangeSink) -> Result<WatchGuard> {
        if self.inner.config.watch == RefWatchMode::Off {
            return Err(Error::unsupported(
                "list change notifications are off for this git mount",
            ));
        }
        let watcher = self.watcher.clone();
        run_blocking("git list watch", move || watcher.watch_list(sink)).await
    }
}
