//! [`S3Provider`]: one bucket (or a prefix of it), implementing the core `Provider` trait.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::{
    Capabilities, ChangeSink, Completion, CompletionRequest, Counter, DenyList, Error, ErrorKind,
    Page, PageRequest, Provider, ProviderInfo, ReadLimits, ReadOutput, ResourceMeta, ResourceUri,
    Result, TemplateMeta, WatchGuard,
};
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::client::HttpConnector as _;
use object_store::{BackoffConfig, ClientOptions, RetryConfig};

use crate::bounded::BoundedConnector;
use crate::config::S3Config;
use crate::error::Context;
use crate::listing::{ListOptions, Listed, Lister};
use crate::profile::{CredentialProcess, ProfileCredentials};
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
    /// List requests, made by hand (see `listing.rs`).
    pub(crate) lister: Lister,
    pub(crate) keys: Keys,
    pub(crate) ctx: Context,
    pub(crate) config: S3Config,
    /// What the last list requests returned beyond the page they served (see `list.rs`).
    pub(crate) read_ahead: crate::list::ReadAheads,
}

impl Inner {
    /// What `uri` names; a denied key or prefix is not found, like one that does not exist
    /// (decided before the store is asked, so the answer cannot depend on whether it does).
    pub(crate) fn target(&self, uri: &ResourceUri) -> Result<Target> {
        let t = self.keys.parse(uri)?;
        let key = match &t {
            Target::Object(k) | Target::Dir(k) => k.trim_end_matches('/'),
        };
        if !key.is_empty() && self.lister.deny.is_denied_either(key) {
            return Err(Error::not_found(uri.as_str()));
        }
        Ok(t)
    }

    /// One list request: at most `max` keys under `prefix` after `start_after`, grouped by
    /// `/` when `delimiter`. Exactly one request to the store (and its retries).
    pub(crate) async fn list_once(
        &self,
        prefix: &str,
        start_after: Option<String>,
        max: usize,
        delimiter: bool,
        what: &str,
    ) -> Result<Listed> {
        let opts = ListOptions {
            prefix,
            start_after,
            max_keys: max,
            delimiter,
        };
        self.lister.list(&self.store, &self.ctx, opts, what).await
    }
}

/// The `s3://` provider for one bucket.
pub struct S3Provider {
    inner: Arc<Inner>,
    info: ProviderInfo,
    templates: Arc<[TemplateMeta]>,
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
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_allow_http(config.allow_http);
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: MAX_RETRIES,
            retry_timeout: RETRY_TIMEOUT,
        };
        let http = BoundedConnector.connect(&client).map_err(|e| {
            Error::invalid_params(format!(
                "s3 bucket `{}`: the HTTP client cannot be set up: {e}",
                config.bucket
            ))
        })?;
        let mut b = credentials_from_env(AmazonS3Builder::new())
            .with_client_options(client)
            .with_http_connector(BoundedConnector)
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
            && let Some(found) = crate::profile::from_environment()
        {
            // The shared files, as the AWS tools read them, when neither the mount nor the
            // environment gives keys.
            match found {
                ProfileCredentials::Keys(p) => {
                    b = b
                        .with_access_key_id(&p.access_key_id)
                        .with_secret_access_key(&p.secret_access_key);
                    if let Some(t) = &p.session_token {
                        b = b.with_token(t);
                    }
                    secrets.extend([p.access_key_id, p.secret_access_key]);
                    secrets.extend(p.session_token);
                }
                ProfileCredentials::Process(cmd) => {
                    b = b.with_credentials(Arc::new(CredentialProcess::new(cmd)));
                }
            }
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
        let bucket_url = Lister::bucket_url(&endpoint, &config.bucket).ok_or_else(|| {
            Error::invalid_params(format!(
                "s3 bucket `{}`: the endpoint {endpoint} is not a URL",
                config.bucket
            ))
        })?;
        let lister = Lister {
            http,
            bucket_url,
            region: config.region.clone(),
            skipped: AtomicU64::new(0),
            warned: std::sync::Mutex::default(),
            deny: DenyList::new(&config.deny)?,
        };
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
        let templates = templates(&config);
        let poll = config.poll_interval;
        let max_rate = config.max_poll_requests_per_second;
        let inner = Arc::new(Inner {
            store,
            lister,
            keys,
            ctx,
            config,
            read_ahead: crate::list::read_aheads(),
        });
        let watches = Watches::new(&inner.keys.root, Arc::downgrade(&inner), poll, max_rate);
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
            templates: templates.into(),
            watches,
        })
    }
}

/// The AWS environment variables a mount follows: credential sources only. object_store's
/// `from_env` would take every `AWS_*` variable, so that `AWS_ENDPOINT_URL` or
/// `AWS_ENDPOINT_URL_S3` silently sent a mount configured with its own `endpoint` elsewhere,
/// and `AWS_SKIP_SIGNATURE`, `AWS_REQUEST_PAYER` or the SSE variables changed requests
/// behind the config's back. Where a bucket is and how it is read come from the mount alone.
pub const CREDENTIAL_ENV: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_ENDPOINT_URL_STS",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_METADATA_ENDPOINT",
    "AWS_IMDSV1_FALLBACK",
];

/// `b` with the credential variables of [`CREDENTIAL_ENV`] that are set.
fn credentials_from_env(mut b: AmazonS3Builder) -> AmazonS3Builder {
    for name in CREDENTIAL_ENV {
        if let Ok(v) = std::env::var(name)
            && let Ok(key) = name.to_ascii_lowercase().parse::<AmazonS3ConfigKey>()
        {
            b = b.with_config(key, v);
        }
    }
    b
}

/// How long `/readyz` waits for the bucket before calling the mount not ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(3);

/// One request that proves the bucket answers: a one-key listing of the prefix.
async fn probe(i: &Inner) -> Result<()> {
    i.list_once(&i.config.prefix, None, 1, false, "checking the bucket")
        .await
        .map(|_| ())
}

/// The mount's one template: any object key under its root. Its URI prefix is the root,
/// [`S3Config::root_uri`]; both follow from the settings alone.
pub(crate) fn templates(config: &S3Config) -> Vec<TemplateMeta> {
    vec![TemplateMeta {
        uri_template: format!("{}{{+key}}", config.root_uri()),
        name: format!("s3-object:{}", config.bucket),
        title: Some(format!("An object of s3 bucket {}", config.bucket)),
        description: Some(
            "`key` is the object key (each path segment percent-encoded). Objects read as text or bytes, with ?offset=N&length=M, ?head=N or ?tail=N windows; a key ending in `/` reads as a JSON listing of that prefix, continued with ?after=.".into(),
        ),
        mime_type: None,
    }]
}

#[async_trait]
impl Provider for S3Provider {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn ready(&self) -> bool {
        self.readiness().await.is_ok()
    }

    async fn readiness(&self) -> Result<()> {
        tokio::time::timeout(READY_TIMEOUT, probe(&self.inner))
            .await
            .unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "s3 bucket `{}` at {} did not answer within {} s",
                        self.inner.config.bucket,
                        self.inner.ctx.endpoint,
                        READY_TIMEOUT.as_secs()
                    ),
                ))
            })
    }

    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        crate::list::list_page(&self.inner, page.after.as_deref(), page.limit.max(1)).await
    }

    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<ReadOutput> {
        match self.inner.target(uri)? {
            Target::Object(key) => crate::read::read_object(&self.inner, uri, &key, limits).await,
            Target::Dir(prefix) => crate::list::read_dir(&self.inner, uri, &prefix).await,
        }
        .map(ReadOutput::from)
    }

    async fn read_directory(
        &self,
        uri: &ResourceUri,
        page: PageRequest,
    ) -> Result<Page<ResourceMeta>> {
        match self.inner.target(uri)? {
            // S3 has no directories but prefixes, whose URIs end in `/`; an object's URI
            // names an object.
            Target::Object(_) => Err(mcpr_core::not_a_directory(uri.as_str())),
            Target::Dir(prefix) => {
                crate::list::dir_page(&self.inner, uri, &prefix, page.after.as_deref(), page.limit)
                    .await
            }
        }
    }

    fn templates(&self) -> Arc<[TemplateMeta]> {
        self.templates.clone()
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
        match self.inner.target(uri)? {
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

    /// What the object's poll last saw (see `Watches::token`). A denied key has none, as it
    /// has no watch: whether it exists is not told. A prefix listing has none either: it
    /// cannot be subscribed to, and the list watch's state is about the whole mount.
    async fn change_token(&self, uri: &ResourceUri) -> Option<String> {
        match self.inner.target(uri).ok()? {
            Target::Object(_) => self.watches.token(uri),
            Target::Dir(_) => None,
        }
    }

    fn poll_interval(&self) -> Option<Duration> {
        Some(self.inner.config.poll_interval)
    }

    fn counters(&self) -> Vec<Counter> {
        vec![
            Counter {
                name: "mcpr_s3_keys_skipped_total",
                help: "Keys the store listed that the mount does not serve (an empty, `.` or `..` segment, a leading `/`, control characters).",
                value: self.inner.lister.skipped.load(Ordering::Relaxed),
            },
            self.watches.throttled(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_credential_variable_is_an_object_store_key() {
        for name in CREDENTIAL_ENV {
            let key: AmazonS3ConfigKey = name
                .to_ascii_lowercase()
                .parse()
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            // Nothing that says where the bucket is or how requests are made.
            assert!(
                !matches!(
                    key,
                    AmazonS3ConfigKey::Endpoint
                        | AmazonS3ConfigKey::S3Endpoint
                        | AmazonS3ConfigKey::Bucket
                        | AmazonS3ConfigKey::SkipSignature
                        | AmazonS3ConfigKey::RequestPayer
                ),
                "{name}"
            );
        }
    }
}
