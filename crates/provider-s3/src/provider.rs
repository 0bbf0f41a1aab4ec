//! [`S3Provider`]: one bucket (or a prefix of it), implementing the core `Provider` trait.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::{
    Capabilities, ChangeSink, Completion, CompletionRequest, Contents, Error, ErrorKind, Page,
    PageRequest, Provider, ProviderInfo, ReadLimits, ResourceMeta, ResourceUri, Result,
    TemplateMeta, WatchGuard,
};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};
use object_store::{BackoffConfig, ClientOptions, RetryConfig};

use crate::config::S3Config;
use crate::error::Context;
use crate::uri::{Keys, Target};
use crate::watch::Watches;

/// How long one request may take before it is a timeout (each retry has its own).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Retries of a failed request (connection errors, 5xx, throttling), with backoff from
/// 100 ms doubling to 2 s, and never past [`RETRY_TIMEOUT`] in all.
pub const MAX_RETRIES: usize = 3;
/// The longest a request and its retries may take together.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(20);

/// State shared by the provider's operations and its watches.
pub(crate) struct Inner {
    pub(crate) store: AmazonS3,
    pub(crate) keys: Keys,
    pub(crate) ctx: Context,
    pub(crate) config: S3Config,
}

impl Inner {
    /// One list request: at most `max` keys under `prefix` after `start_after`, grouped by
    /// `/` when `delimiter`. Exactly one request to the store.
    pub(crate) async fn list_once(
        &self,
        prefix: &str,
        start_after: Option<String>,
        max: usize,
        delimiter: bool,
        what: &str,
    ) -> Result<PaginatedListResult> {
        let opts = PaginatedListOptions {
            offset: start_after,
            delimiter: delimiter.then_some("/".into()),
            max_keys: Some(max),
            ..Default::default()
        };
        let prefix = (!prefix.is_empty()).then_some(prefix);
        self.store
            .list_paginated(prefix, opts)
            .await
            .map_err(|e| self.ctx.map(e, what, None))
    }
}

/// The `s3://` provider for one bucket.
pub struct S3Provider {
    inner: Arc<Inner>,
    info: ProviderInfo,
    templates: Vec<TemplateMeta>,
    watches: Watches,
}

impl S3Provider {
    /// Check the config and set up the client. A bucket that cannot be reached (or refuses
    /// us) now does not fail this: the mount starts not ready (`/readyz`), its requests answer
    /// with what is wrong, and it serves as soon as the bucket answers.
    pub async fn new(config: S3Config) -> Result<Self> {
        config
            .validate()
            .map_err(|e| Error::invalid_params(format!("s3 mount: {}: {}", e.key, e.message)))?;
        // reqwest is built with rustls but no bundled crypto provider; ring is the one the
        // workspace uses (as the HTTP transport's JWT fetcher does).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let endpoint = config
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", config.region));
        let client = ClientOptions::new()
            .with_timeout(REQUEST_TIMEOUT)
            .with_connect_timeout(CONNECT_TIMEOUT);
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: MAX_RETRIES,
            retry_timeout: RETRY_TIMEOUT,
        };
        let mut b = AmazonS3Builder::from_env()
            .with_client_options(client)
            .with_retry(retry)
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_allow_http(config.allow_http)
            .with_virtual_hosted_style_request(false);
        if let Some(e) = &config.endpoint {
            b = b.with_endpoint(e);
        }
        let mut secrets: Vec<String> = Vec::new();
        if let (Some(k), Some(s)) = (&config.access_key_id, &config.secret_access_key) {
            b = b.with_access_key_id(k).with_secret_access_key(s);
            secrets.extend([k.clone(), s.clone()]);
        } else if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
            && let Some(p) = crate::profile::from_environment()
        {
            // The shared credentials file, as the AWS tools read it, when neither the mount
            // nor the environment gives keys.
            b = b
                .with_access_key_id(&p.access_key_id)
                .with_secret_access_key(&p.secret_access_key);
            if let Some(t) = &p.session_token {
                b = b.with_token(t);
            }
            secrets.extend([p.access_key_id, p.secret_access_key]);
            secrets.extend(p.session_token);
        }
        for var in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        ] {
            if let Ok(v) = std::env::var(var) {
                secrets.push(v);
            }
        }
        let ctx = Context::new(&config.bucket, &endpoint, secrets);
        let store = b.build().map_err(|e| {
            Error::invalid_params(format!(
                "s3 bucket `{}`: the client cannot be set up: {}",
                config.bucket,
                ctx.scrub(&e.to_string())
            ))
        })?;
        let keys = Keys {
            root: config.root_uri(),
            prefix: config.prefix.clone(),
        };
        let label = if config.prefix.is_empty() {
            format!("{} ({endpoint})", keys.root)
        } else {
            format!("{}{} ({endpoint})", keys.root, config.prefix)
        };
        let info = ProviderInfo {
            kind: "s3",
            label,
            uri_prefixes: vec![keys.root.clone()],
            capabilities: Capabilities::ALL,
            cache: config.cache,
        };
        let templates = vec![TemplateMeta {
            uri_template: format!("{}{{+key}}", keys.root),
            name: format!("s3-object:{}", config.bucket),
            title: Some(format!("An object of s3 bucket {}", config.bucket)),
            description: Some(
                "`key` is the object key (each path segment percent-encoded). Objects read as text or bytes, with ?offset=N&length=M, ?head=N or ?tail=N windows; a key ending in `/` reads as a JSON listing of that prefix, continued with ?after=.".into(),
            ),
            mime_type: None,
        }];
        let poll = config.poll_interval;
        let inner = Arc::new(Inner {
            store,
            keys,
            ctx,
            config,
        });
        let watches = Watches::new(&inner.keys.root, Arc::downgrade(&inner), poll);
        // The first look at the bucket runs beside start-up: an endpoint that swallows
        // packets would otherwise hold the whole server for the retry budget.
        let first = inner.clone();
        tokio::spawn(async move {
            if let Err(e) = probe(&first).await {
                tracing::warn!(
                    bucket = %first.config.bucket,
                    "s3 bucket unavailable at start; the mount is not ready until it answers: {}",
                    e.message
                );
            }
        });
        Ok(Self {
            inner,
            info,
            templates,
            watches,
        })
    }
}

/// How long `/readyz` waits for the bucket before calling the mount not ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(3);

/// One request that proves the bucket answers: a one-key listing of the prefix.
async fn probe(i: &Inner) -> Result<()> {
    i.list_once(&i.config.prefix, None, 1, false, "checking the bucket")
        .await
        .map(|_| ())
}

#[async_trait]
impl Provider for S3Provider {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn ready(&self) -> bool {
        matches!(
            tokio::time::timeout(READY_TIMEOUT, probe(&self.inner)).await,
            Ok(Ok(()))
        )
    }

    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        crate::list::list_page(&self.inner, page.after.as_deref(), page.limit.max(1)).await
    }

    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<Vec<Contents>> {
        match self.inner.keys.parse(uri)? {
            Target::Object(key) => crate::read::read_object(&self.inner, uri, &key, limits).await,
            Target::Dir(prefix) => crate::list::read_dir(&self.inner, uri, &prefix).await,
        }
    }

    fn templates(&self) -> &[TemplateMeta] {
        &self.templates
    }

    async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        mcpr_core::template_index(&self.templates, &req.template)?;
        if req.argument != "key" {
            return Err(Error::invalid_params(format!(
                "the template {} has no argument `{}`; it has `key`",
                req.template, req.argument
            )));
        }
        crate::list::complete_key(&self.inner, &req.value).await
    }

    async fn watch(&self, uri: &ResourceUri, sink: ChangeSink) -> Result<WatchGuard> {
        match self.inner.keys.parse(uri)? {
            Target::Object(_) => Ok(self.watches.add_object(uri.clone(), sink).await),
            Target::Dir(_) => Err(Error::new(
                ErrorKind::InvalidParams,
                format!("{uri} is a prefix listing; subscribe to objects, or ask for list changes"),
            )),
        }
    }

    async fn watch_list(&self, sink: ChangeSink) -> Result<WatchGuard> {
        Ok(self.watches.add_list(sink).await)
    }
}
