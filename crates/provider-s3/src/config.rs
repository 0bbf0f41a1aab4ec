//! Settings of one `s3` mount: the typed [`S3Config`], its one validation, and the
//! `kind = "s3"` table of the configuration file ([`S3Factory`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::config::{
    ConfigError, IntOrString, MountCommon, MountSpec, MountTable, ProviderFactory, SettingError,
};
use mcpr_core::{CacheHints, Provider};
use serde::Deserialize;
use toml::Spanned;

/// Allowed `poll_interval_ms`: at least 100 ms (each check is a request to the store).
pub const POLL_INTERVAL_MS: std::ops::RangeInclusive<u64> = 100..=3_600_000;
/// Allowed `max_poll_requests_per_second`, as for every polling provider.
pub use mcpr_core::poll::MAX_POLL_REQUESTS_PER_SECOND;
/// The default `max_poll_requests_per_second`: 20 a second is at most 1.7 million requests a
/// day, whatever clients subscribe to; it polls 100 objects at the default 5 s interval.
pub const DEFAULT_MAX_POLL_REQUESTS_PER_SECOND: u32 = 20;
/// The longest `prefix`: S3 keys are at most 1,024 bytes.
pub const PREFIX_MAX: usize = 1024;

/// One S3 (or S3-compatible) bucket.
///
/// `Debug` never shows the keys: they are `[redacted]` when set.
#[derive(Clone)]
pub struct S3Config {
    /// The bucket; URIs are `s3://{bucket}/{key}`.
    pub bucket: String,
    /// The region requests are signed for.
    pub region: String,
    /// Another S3-compatible endpoint (MinIO, R2, Ceph, moto), addressed path-style; `None`
    /// is AWS itself.
    pub endpoint: Option<String>,
    /// Allow a plain `http://` endpoint.
    pub allow_http: bool,
    /// Only keys under this prefix are served ("" for the whole bucket).
    pub prefix: String,
    /// The access key id; `None` uses the standard AWS environment variables (or the
    /// container / instance credentials).
    pub access_key_id: Option<String>,
    /// The secret access key, with `access_key_id`.
    pub secret_access_key: Option<String>,
    /// How often subscribed keys and watched listings are re-checked.
    pub poll_interval: Duration,
    /// The most requests a second polling makes (HEADs and listing pages together), however
    /// many URIs are subscribed; checks beyond it wait their turn.
    pub max_poll_requests_per_second: u32,
    /// Deny patterns (gitignore syntax, matched against the key) added to
    /// [`mcpr_core::DEFAULT_DENY`]: matching keys are never listed, read, completed or
    /// watched, and answer not found.
    pub deny: Vec<String>,
    /// Cache hints on results from this mount.
    pub cache: CacheHints,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redact = |v: &Option<String>| v.as_ref().map(|_| "[redacted]");
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("allow_http", &self.allow_http)
            .field("prefix", &self.prefix)
            .field("access_key_id", &redact(&self.access_key_id))
            .field("secret_access_key", &redact(&self.secret_access_key))
            .field("poll_interval", &self.poll_interval)
            .field(
                "max_poll_requests_per_second",
                &self.max_poll_requests_per_second,
            )
            .field("deny", &self.deny)
            .field("cache", &self.cache)
            .finish()
    }
}

impl S3Config {
    /// A mount of `bucket` in `region` with every other setting at its default (AWS, the
    /// whole bucket, credentials from the environment, a 5 s poll interval).
    pub fn new(bucket: impl Into<String>, region: impl Into<String>) -> Self {
        Self {
            bucket: bucket.into(),
            region: region.into(),
            endpoint: None,
            allow_http: false,
            prefix: String::new(),
            access_key_id: None,
            secret_access_key: None,
            poll_interval: Duration::from_secs(5),
            max_poll_requests_per_second: DEFAULT_MAX_POLL_REQUESTS_PER_SECOND,
            deny: Vec::new(),
            cache: CacheHints::default(),
        }
    }

    /// The URI of the bucket's root: `s3://{bucket}/`.
    pub fn root_uri(&self) -> String {
        format!("s3://{}/", self.bucket)
    }

    /// The one validation of an s3 mount, made by the configuration loader and again by
    /// [`crate::S3Provider::new`]. Needs no network.
    pub fn validate(&self) -> Result<(), SettingError> {
        check_bucket(&self.bucket)?;
        if self.region.is_empty()
            || !self
                .region
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(SettingError::new(
                "region",
                format!(
                    "{:?} is not a region name (letters, digits and `-`, such as us-east-1)",
                    self.region
                ),
            ));
        }
        if let Some(e) = &self.endpoint {
            let rest = if let Some(r) = e.strip_prefix("https://") {
                r
            } else if let Some(r) = e.strip_prefix("http://") {
                if !self.allow_http {
                    return Err(SettingError::new(
                        "endpoint",
                        format!(
                            "{e} is plain HTTP; set `allow_http = true` to allow it (keys and data then travel unencrypted)"
                        ),
                    ));
                }
                r
            } else {
                return Err(SettingError::new(
                    "endpoint",
                    format!("{e:?} must be an http:// or https:// URL"),
                ));
            };
            if rest.is_empty() || rest.starts_with('/') || rest.contains(['?', '#', ' ']) {
                return Err(SettingError::new(
                    "endpoint",
                    format!("{e:?} must be a URL with a host, without query or fragment"),
                ));
            }
        }
        if self.prefix.len() > PREFIX_MAX {
            return Err(SettingError::new(
                "prefix",
                format!(
                    "is {} bytes; S3 keys, and so prefixes, are at most {PREFIX_MAX} bytes",
                    self.prefix.len()
                ),
            ));
        }
        if self.prefix.starts_with('/') || self.prefix.chars().any(char::is_control) {
            return Err(SettingError::new(
                "prefix",
                format!(
                    "{:?}: a key prefix does not start with `/` and has no control characters",
                    self.prefix
                ),
            ));
        }
        mcpr_core::DenyList::validate_setting(&self.deny)?;
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(_), None) => {
                return Err(SettingError::new(
                    "secret_access_key",
                    "`access_key_id` is set without `secret_access_key`; set both or neither",
                ));
            }
            (None, Some(_)) => {
                return Err(SettingError::new(
                    "access_key_id",
                    "`secret_access_key` is set without `access_key_id`; set both or neither",
                ));
            }
            (Some(k), Some(s)) if k.is_empty() || s.is_empty() => {
                return Err(SettingError::new(
                    "access_key_id",
                    "the access key id and secret must not be empty",
                ));
            }
            _ => {}
        }
        SettingError::check_range(
            "poll_interval_ms",
            self.poll_interval.as_millis() as u64,
            &POLL_INTERVAL_MS,
        )?;
        SettingError::check_range(
            "max_poll_requests_per_second",
            u64::from(self.max_poll_requests_per_second),
            &MAX_POLL_REQUESTS_PER_SECOND,
        )?;
        Ok(())
    }
}

/// S3's bucket naming rules, so a typo is caught at start, not at the first request.
fn check_bucket(b: &str) -> Result<(), SettingError> {
    let ok = (3..=63).contains(&b.len())
        && b.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
        && b.as_bytes()[0].is_ascii_alphanumeric()
        && b.as_bytes()[b.len() - 1].is_ascii_alphanumeric()
        && !b.contains("..");
    if ok {
        Ok(())
    } else {
        Err(SettingError::new(
            "bucket",
            format!(
                "{b:?} is not a bucket name: 3 to 63 lower-case letters, digits, `-` and `.`, starting and ending with a letter or digit"
            ),
        ))
    }
}

/// A `kind = "s3"` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct S3Toml {
    bucket: Option<Spanned<String>>,
    region: Option<Spanned<String>>,
    endpoint: Option<Spanned<String>>,
    allow_http: Option<bool>,
    prefix: Option<Spanned<String>>,
    access_key_id: Option<Spanned<String>>,
    secret_access_key: Option<Spanned<String>>,
    poll_interval_ms: Option<Spanned<IntOrString>>,
    max_poll_requests_per_second: Option<Spanned<IntOrString>>,
    deny: Option<Vec<Spanned<String>>>,
}

/// Builds `kind = "s3"` mounts.
pub struct S3Factory;

impl ProviderFactory for S3Factory {
    fn kinds(&self) -> &'static [&'static str] {
        &["s3"]
    }

    fn configure(
        &self,
        table: &MountTable<'_>,
        common: &MountCommon,
    ) -> Result<Box<dyn MountSpec>, ConfigError> {
        let raw: S3Toml = table.parse()?;
        let file = table.file();
        let Some(bucket) = &raw.bucket else {
            return Err(table.error_at_mount("an s3 mount needs `bucket`, the bucket to serve"));
        };
        let bucket = file.expand(bucket, "mount.bucket")?;
        let region = match &raw.region {
            Some(r) => file.expand(r, "mount.region")?,
            None => {
                return Err(table.error_at_mount(
                    "an s3 mount needs `region` (for S3-compatible stores, the one they expect, often us-east-1)",
                ));
            }
        };
        let mut c = S3Config::new(bucket, region);
        if let Some(v) = &raw.endpoint {
            c.endpoint = Some(file.expand(v, "mount.endpoint")?);
        }
        c.allow_http = raw.allow_http.unwrap_or(false);
        if let Some(v) = &raw.prefix {
            c.prefix = file.expand(v, "mount.prefix")?;
        }
        if let Some(v) = &raw.access_key_id {
            c.access_key_id = Some(file.expand(v, "mount.access_key_id")?);
        }
        if let Some(v) = &raw.secret_access_key {
            c.secret_access_key = Some(file.expand(v, "mount.secret_access_key")?);
        }
        if let Some(v) = &raw.poll_interval_ms {
            c.poll_interval = Duration::from_millis(file.number(v, "mount.poll_interval_ms")?);
        }
        if let Some(v) = &raw.max_poll_requests_per_second {
            let n = file.int(
                v,
                "mount.max_poll_requests_per_second",
                MAX_POLL_REQUESTS_PER_SECOND,
            )?;
            c.max_poll_requests_per_second = n as u32;
        }
        for d in raw.deny.iter().flatten() {
            c.deny.push(file.expand(d, "mount.deny")?);
        }
        c.cache = common.cache;
        c.validate().map_err(|e| table.setting_error(e))?;
        Ok(Box::new(S3Spec(c)))
    }
}

/// A validated s3 mount (its `Debug` is the config's, keys redacted).
#[derive(Debug)]
struct S3Spec(S3Config);

#[async_trait]
impl MountSpec for S3Spec {
    fn kind(&self) -> &str {
        "s3"
    }

    async fn build(&self) -> mcpr_core::Result<Arc<dyn Provider>> {
        Ok(Arc::new(crate::S3Provider::new(self.0.clone()).await?))
    }

    fn addresses(&self) -> Option<Vec<String>> {
        Some(mcpr_core::addresses(
            &[self.0.root_uri()],
            &crate::provider::templates(&self.0),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> S3Config {
        let mut c = S3Config::new("my-bucket", "us-east-1");
        c.endpoint = Some("http://127.0.0.1:9000".into());
        c.allow_http = true;
        c
    }

    #[test]
    fn validates_each_setting() {
        assert!(ok().validate().is_ok());
        for (bad, key) in [
            ("ab", "bucket"),
            ("My_Bucket", "bucket"),
            ("-abc", "bucket"),
            ("a..b", "bucket"),
        ] {
            let mut c = ok();
            c.bucket = bad.into();
            assert_eq!(c.validate().unwrap_err().key, key, "{bad}");
        }
        let mut c = ok();
        c.allow_http = false;
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "endpoint");
        assert!(e.message.contains("allow_http"), "{}", e.message);
        let mut c = ok();
        c.endpoint = Some("ftp://x".into());
        assert_eq!(c.validate().unwrap_err().key, "endpoint");
        let mut c = ok();
        c.region = "us east".into();
        assert_eq!(c.validate().unwrap_err().key, "region");
        let mut c = ok();
        c.prefix = "/abs".into();
        assert_eq!(c.validate().unwrap_err().key, "prefix");
        let mut c = ok();
        c.access_key_id = Some("AKIA".into());
        assert_eq!(c.validate().unwrap_err().key, "secret_access_key");
        let mut c = ok();
        c.poll_interval = Duration::from_millis(50);
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "poll_interval_ms");
        assert!(e.message.contains("100"), "{}", e.message);
        let mut c = ok();
        c.max_poll_requests_per_second = 0;
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "max_poll_requests_per_second");
        assert!(e.message.contains("1..=10000"), "{}", e.message);
    }

    #[test]
    fn debug_never_shows_keys() {
        let mut c = ok();
        c.access_key_id = Some("AKIAEXAMPLEKEYID".into());
        c.secret_access_key = Some("wJalrXUtnFEMI/SECRET".into());
        let d = format!("{c:?} {:?}", S3Spec(c.clone()));
        assert!(
            !d.contains("AKIAEXAMPLEKEYID") && !d.contains("SECRET"),
            "{d}"
        );
        assert!(d.contains("[redacted]"), "{d}");
    }
}
