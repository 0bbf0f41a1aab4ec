//! [`HttpProvider`]: one `api` or `web` mount, implementing the core `Provider` trait.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use mcpr_core::{
    Capabilities, ChangeSink, Completion, CompletionRequest, Contents, Counter, Error, Page,
    PageRequest, Provider, ProviderInfo, ReadLimits, ReadOutput, ResourceMeta, ResourceUri, Result,
    TemplateMeta, WatchGuard,
};

use crate::budget::ConversionBudget;
use crate::cache::{CacheCounts, CacheStats, Flights, Store};
use crate::config::{HttpConfig, HttpKind};
use crate::fetch::Fetcher;
use crate::health::Hosts;
use crate::html::Converter;
use crate::net::{HostResolver, SystemResolver};
use crate::read::{Mode, serve};
use crate::target::{Compiled, Target};
use crate::watch::Watches;

/// The body limit of change checks until a read has told the mount the server's limit.
const DEFAULT_POLL_LIMIT: u64 = 16 << 20;

/// What reads and the change watcher share.
pub(crate) struct Inner {
    pub(crate) config: HttpConfig,
    pub(crate) endpoints: Vec<Compiled>,
    pub(crate) fetcher: Fetcher,
    pub(crate) cache: Store,
    pub(crate) stats: CacheStats,
    pub(crate) flights: Flights,
    /// web: HTML to Markdown, bounded.
    pub(crate) converter: Converter,
    /// api: which of its upstream hosts are out.
    pub(crate) hosts: Hosts,
    /// The read limit of the last read, which change checks use too.
    read_limit: AtomicU64,
}

impl Inner {
    /// What `uri` fetches; not found when the mount does not serve it.
    pub(crate) fn target(&self, uri: &str) -> Result<Target> {
        match self.config.kind {
            HttpKind::Api => crate::target::api_target(&self.endpoints, uri),
            HttpKind::Web => crate::target::web_url(&self.config.allow, uri)
                .map(|url| Target {
                    url,
                    endpoint: None,
                })
                .ok_or_else(|| Error::not_found(uri)),
        }
    }

    pub(crate) fn poll_limit(&self) -> u64 {
        self.read_limit.load(Ordering::Relaxed)
    }
}

/// The `api://` or `https://` provider of one mount.
pub struct HttpProvider {
    inner: Arc<Inner>,
    info: ProviderInfo,
    templates: Arc<[TemplateMeta]>,
    resources: Vec<ResourceMeta>,
    watches: Watches,
}

impl HttpProvider {
    /// A mount resolving host names through the system resolver. Fails when a setting is
    /// out of range or an endpoint is malformed.
    pub fn new(config: HttpConfig) -> Result<Self> {
        Self::with_resolver(config, Arc::new(SystemResolver))
    }

    /// A mount resolving host names through `resolver` (tests map names to loopback). The
    /// SSRF guard applies to whatever it answers.
    pub fn with_resolver(config: HttpConfig, resolver: Arc<dyn HostResolver>) -> Result<Self> {
        Self::with_network(config, resolver, Vec::new())
    }

    /// Like [`HttpProvider::with_resolver`], also letting the mount reach the non-public
    /// addresses in `exempt` (tests: the loopback upstream, while every other private
    /// address stays refused). Not reachable from configuration.
    ///
    /// These constructors give the mount a conversion budget of its own, of its
    /// `max_conversions`; [`HttpProvider::with_budget`] shares one between mounts, as the
    /// configuration file's mounts share [`ConversionBudget::process`].
    pub fn with_network(
        config: HttpConfig,
        resolver: Arc<dyn HostResolver>,
        exempt: Vec<std::net::IpAddr>,
    ) -> Result<Self> {
        let budget = ConversionBudget::new(config.max_conversions);
        Self::with_budget(config, resolver, exempt, &budget)
    }

    /// Like [`HttpProvider::with_network`], its HTML conversions taking places in `budget`,
    /// which other mounts share: at most the budget's total run at once in all of them, at
    /// most `max_conversions` in this one.
    pub fn with_budget(
        config: HttpConfig,
        resolver: Arc<dyn HostResolver>,
        exempt: Vec<std::net::IpAddr>,
        budget: &Arc<ConversionBudget>,
    ) -> Result<Self> {
        config.validate()?;
        let endpoints = config
            .endpoints
            .iter()
            .map(Compiled::new)
            .collect::<Result<Vec<_>>>()?;
        let fetcher = Fetcher::new(&config, resolver, exempt)?;
        let label = match config.kind {
            HttpKind::Api => format!("api {}", config.name),
            HttpKind::Web => format!("web {}", config.allow.join(" ")),
        };
        let templates = templates(&config);
        let resources = crate::list::resources(&config);
        let info = ProviderInfo {
            kind: config.kind.as_str(),
            label: label.clone(),
            uri_prefixes: crate::target::router_prefixes(&config),
            capabilities: Capabilities {
                list: true,
                read: true,
                templates: !templates.is_empty(),
                complete: config.kind == HttpKind::Api && !templates.is_empty(),
                watch: true,
                list_changed: false,
            },
            cache: config.cache,
        };
        let inner = Arc::new_cyclic(|me| Inner {
            cache: crate::cache::store(config.cache_max_bytes),
            converter: Converter::new(&config, budget),
            // A web mount's hosts are not tracked: its listing is its `pages`, and its URLs
            // are any under the allow prefixes.
            hosts: Hosts::new(
                &config.name,
                if config.kind == HttpKind::Api {
                    &endpoints
                } else {
                    &[]
                },
                me.clone(),
            ),
            config,
            endpoints,
            fetcher,
            stats: CacheStats::default(),
            flights: Flights::default(),
            read_limit: AtomicU64::new(DEFAULT_POLL_LIMIT),
        });
        let watches = Watches::new(&label, Arc::downgrade(&inner), &inner.config);
        Ok(Self {
            inner,
            info,
            templates: templates.into(),
            resources,
            watches,
        })
    }

    /// Cache hits, misses and revalidations so far.
    pub fn cache_counts(&self) -> CacheCounts {
        self.inner.stats.counts()
    }

    /// HTML conversions running now (at most `max_conversions`, and with the other mounts of
    /// its budget at most the budget's total); a conversion whose reader
    /// went away or ran out of time stops at its next check between elements.
    pub fn conversions_running(&self) -> usize {
        self.inner.converter.running()
    }

    /// Whether the change watcher runs (it stops with the last watch).
    pub fn watching(&self) -> bool {
        self.watches.running()
    }
}

/// An api mount's templated endpoints; a web mount's allow prefixes, `{+path}` after each.
pub(crate) fn templates(config: &HttpConfig) -> Vec<TemplateMeta> {
    match config.kind {
        HttpKind::Api => config
            .endpoints
            .iter()
            .filter(|e| e.uri.contains('{'))
            .map(|e| TemplateMeta {
                uri_template: e.uri.clone(),
                name: e.name.clone(),
                title: None,
                description: e.description.clone(),
                mime_type: e.mime_type.clone(),
            })
            .collect(),
        HttpKind::Web => config
            .allow
            .iter()
            .map(|a| {
                let sep = if a.ends_with('/') { "" } else { "/" };
                TemplateMeta {
                    uri_template: format!("{a}{sep}{{+path}}"),
                    name: format!("web:{a}"),
                    title: Some(format!("A page under {a}")),
                    description: Some(format!(
                        "Any URL under {a}; HTML is served as {}",
                        if config.html == crate::HtmlMode::Markdown {
                            "Markdown"
                        } else {
                            "HTML"
                        }
                    )),
                    mime_type: None,
                }
            })
            .collect(),
    }
}

#[async_trait]
impl Provider for HttpProvider {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn ready(&self) -> bool {
        self.readiness().await.is_ok()
    }

    /// An api mount is not ready while one of its upstream hosts is out, or once a host
    /// that nothing asked for a while fails a probe (`crate::health`).
    async fn readiness(&self) -> Result<()> {
        self.inner.hosts.check(true).await
    }

    /// An api mount's listing fails while one of its upstream hosts is out, with the reason,
    /// so the server leaves it out of listings and tells clients when it lists again.
    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        self.inner.hosts.check(false).await?;
        crate::list::page(&self.resources, &page)
    }

    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<ReadOutput> {
        self.inner
            .read_limit
            .store(limits.max_bytes, Ordering::Relaxed);
        let s = serve(&self.inner, uri.as_str(), limits.max_bytes, Mode::Read).await?;
        let contents = Contents {
            uri: uri.as_str().to_owned(),
            mime_type: s.body.mime_type.clone(),
            body: s.body.content.clone(),
            meta: None,
        };
        Ok(ReadOutput {
            contents: vec![contents],
            hints: Some(s.hints),
        })
    }

    fn templates(&self) -> Arc<[TemplateMeta]> {
        self.templates.clone()
    }

    async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        if self.inner.config.kind != HttpKind::Api {
            return Err(Error::unsupported("web mounts do not complete arguments"));
        }
        mcpr_core::template_index(&self.templates, &req.template)?;
        let Some(c) = self
            .inner
            .endpoints
            .iter()
            .find(|c| c.endpoint.uri == req.template)
        else {
            return Err(Error::invalid_params(format!(
                "unknown template {:?}",
                req.template
            )));
        };
        let Some(vars) = c.uri.as_ref().map(|t| t.variables()) else {
            return Ok(Completion::default());
        };
        if !vars.contains(&req.argument.as_str()) {
            return Err(Error::invalid_params(format!(
                "{} has no argument {:?}; it has {}",
                req.template,
                req.argument,
                vars.join(", ")
            )));
        }
        let allowed = c
            .endpoint
            .params
            .get(&req.argument)
            .and_then(|p| p.allowed.as_ref());
        let matching: Vec<String> = allowed
            .into_iter()
            .flatten()
            .filter(|v| v.starts_with(&req.value))
            .cloned()
            .collect();
        let total = matching.len();
        Ok(Completion {
            values: matching.into_iter().take(100).collect(),
            total: Some(total as u32),
            has_more: total > 100,
        })
    }

    fn counters(&self) -> Vec<Counter> {
        let c = self.inner.stats.counts();
        vec![
            Counter {
                name: "mcpr_http_cache_hits_total",
                help: "api/web reads served from the mount's cache without asking the upstream.",
                value: c.hits,
            },
            Counter {
                name: "mcpr_http_cache_misses_total",
                help: "api/web reads and change checks that fetched the whole response.",
                value: c.misses,
            },
            Counter {
                name: "mcpr_http_cache_revalidations_total",
                help: "Conditional requests the upstream answered 304 Not Modified.",
                value: c.revalidations,
            },
            self.watches.throttled(),
        ]
    }

    async fn watch(&self, uri: &ResourceUri, sink: ChangeSink) -> Result<WatchGuard> {
        // A URI this mount does not serve is refused now, not polled forever.
        self.inner.target(uri.as_str())?;
        Ok(self.watches.add(uri, sink).await)
    }

    /// What the poll of `uri`'s upstream URL last saw (see `Watches::token`).
    async fn change_token(&self, uri: &ResourceUri) -> Option<String> {
        self.inner.target(uri.as_str()).ok()?;
        self.watches.token(uri)
    }
}
