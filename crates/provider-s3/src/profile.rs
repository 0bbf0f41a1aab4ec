//! Credentials from the AWS shared files, the places most users keep them; object_store reads
//! only the environment. It had profile support through aws-config until 0.6, which removed
//! it (<https://github.com/apache/arrow-rs/issues/4556>, now
//! <https://github.com/apache/arrow-rs-object-store/issues/152>); the test
//! `object_store_has_no_profile_setting` below fails once it has a setting for a profile or
//! the shared files again, and then this module can give way to it.
//!
//! The profile is `AWS_PROFILE`, else `default`. Its static keys (`aws_access_key_id`,
//! `aws_secret_access_key`, `aws_session_token`) are taken from the credentials file
//! (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`), else from the config file
//! (`AWS_CONFIG_FILE`, else `~/.aws/config`, where the section is `[profile NAME]`, or
//! `[default]`); without keys, the config file's `credential_process` is run (see
//! [`CredentialProcess`]). Role-assuming (`role_arn`) and SSO profiles are not followed: a
//! warning says so. A profile's `region` is not used: the mount's `region` is required.
//!
//! Only used when neither the mount nor the environment names a key: those win, as in the
//! AWS tools. The files are read once, when the mount is built.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use object_store::aws::AwsCredential;

/// One profile's static keys.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ProfileKeys {
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: String,
    pub(crate) session_token: Option<String>,
}

/// Written by hand: these are secrets.
impl std::fmt::Debug for ProfileKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProfileKeys([redacted])")
    }
}

/// Where a profile's credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProfileCredentials {
    Keys(ProfileKeys),
    /// The `credential_process` command line.
    Process(String),
}

/// The named profile's credentials from the shared files the AWS tools read.
pub(crate) fn from_environment() -> Option<ProfileCredentials> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let file = |var: &str, rel: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(rel)))
    };
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    let read = |p: &Option<PathBuf>| p.as_deref().and_then(|p| std::fs::read_to_string(p).ok());
    let creds_path = file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    let config_path = file("AWS_CONFIG_FILE", ".aws/config");
    let found = resolve(
        read(&creds_path).as_deref(),
        read(&config_path).as_deref(),
        &profile,
    );
    match &found {
        Resolved::Found(c) => return Some(c.clone()),
        Resolved::Unsupported(what) => {
            tracing::warn!(%profile, "the AWS profile {what}, which this server does not follow; put keys in the mount or the environment")
        }
        Resolved::Nothing => {
            // Names the files and profile, never a value from them.
            tracing::debug!(credentials = ?creds_path, config = ?config_path, %profile, "no credentials for this profile in the shared files");
        }
    }
    None
}

/// What the shared files say about a profile.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Resolved {
    Found(ProfileCredentials),
    /// The profile exists but gets its credentials in a way not followed (the reason).
    Unsupported(&'static str),
    Nothing,
}

/// The credentials of `profile` from the credentials file's text and the config file's, with
/// the AWS tools' precedence: the credentials file's keys, then the config file's keys, then
/// its `credential_process`.
pub(crate) fn resolve(credentials: Option<&str>, config: Option<&str>, profile: &str) -> Resolved {
    if let Some(keys) = credentials
        .map(|t| section(t, profile))
        .as_ref()
        .and_then(|s| keys_of(s))
    {
        return Resolved::Found(ProfileCredentials::Keys(keys));
    }
    let name = if profile == "default" {
        "default".to_owned()
    } else {
        format!("profile {profile}")
    };
    let Some(cfg) = config.map(|t| section(t, &name)) else {
        return Resolved::Nothing;
    };
    if let Some(keys) = keys_of(&cfg) {
        return Resolved::Found(ProfileCredentials::Keys(keys));
    }
    let get = |k: &str| cfg.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    if let Some(cmd) = get("credential_process").filter(|c| !c.is_empty()) {
        return Resolved::Found(ProfileCredentials::Process(cmd));
    }
    if get("role_arn").is_some() {
        return Resolved::Unsupported("assumes a role (role_arn)");
    }
    if get("sso_session").is_some() || get("sso_start_url").is_some() {
        return Resolved::Unsupported("signs in with SSO");
    }
    Resolved::Nothing
}

/// The `key = value` lines of `[name]` in an INI file, keys lower-cased. Keys and section
/// names are matched as the AWS tools match them (case-insensitive keys, `#`/`;` comments,
/// surrounding spaces ignored).
fn section(text: &str, name: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = s.split_whitespace().collect::<Vec<_>>().join(" ") == name;
            continue;
        }
        if inside && let Some((k, v)) = line.split_once('=') {
            out.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    out
}

/// Both `aws_access_key_id` and `aws_secret_access_key`, or nothing.
fn keys_of(lines: &[(String, String)]) -> Option<ProfileKeys> {
    let get = |k: &str| {
        lines
            .iter()
            .rev()
            .find(|(n, v)| n == k && !v.is_empty())
            .map(|(_, v)| v.clone())
    };
    Some(ProfileKeys {
        access_key_id: get("aws_access_key_id")?,
        secret_access_key: get("aws_secret_access_key")?,
        session_token: get("aws_session_token"),
    })
}

/// The keys of `[profile]` in an INI credentials file (the credentials file's rule).
#[cfg(test)]
pub(crate) fn parse(text: &str, profile: &str) -> Option<ProfileKeys> {
    keys_of(&section(text, profile))
}

/// How long a `credential_process` may run.
pub const PROCESS_TIMEOUT: Duration = Duration::from_secs(30);

/// Credentials from a profile's `credential_process`, as the AWS tools run it: the command
/// line is run (through `sh -c`), and its standard output is the JSON
/// `{"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken"?, "Expiration"?}`. The
/// answer is kept until five minutes before its `Expiration` (for ever without one). Nothing
/// the command prints reaches a log or an error: a failure says only what went wrong.
#[derive(Debug)]
pub(crate) struct CredentialProcess {
    command: String,
    cached: tokio::sync::Mutex<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
}

impl CredentialProcess {
    pub(crate) fn new(command: String) -> Self {
        Self {
            command,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    async fn run(&self) -> Result<(AwsCredential, Option<SystemTime>), String> {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg(&self.command)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(PROCESS_TIMEOUT, cmd.output())
            .await
            .map_err(|_| format!("did not finish within {} s", PROCESS_TIMEOUT.as_secs()))?
            .map_err(|e| format!("could not be started: {e}"))?;
        if !out.status.success() {
            return Err(format!("failed ({})", out.status));
        }
        parse_process_output(&out.stdout)
    }
}

/// The credentials in a `credential_process` answer. Errors never quote the output.
pub(crate) fn parse_process_output(
    stdout: &[u8],
) -> Result<(AwsCredential, Option<SystemTime>), String> {
    let v: serde_json::Value = serde_json::from_slice(stdout)
        .map_err(|_| "printed something that is not JSON".to_owned())?;
    if v.get("Version").and_then(|x| x.as_u64()) != Some(1) {
        return Err("printed JSON without `\"Version\": 1`".into());
    }
    let field = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let key_id = field("AccessKeyId").ok_or("printed no AccessKeyId")?;
    let secret_key = field("SecretAccessKey").ok_or("printed no SecretAccessKey")?;
    let expires = match field("Expiration") {
        None => None,
        Some(t) => Some(
            humantime::parse_rfc3339_weak(&t)
                .map_err(|_| "printed an Expiration that is not an RFC 3339 time".to_owned())?,
        ),
    };
    Ok((
        AwsCredential {
            key_id,
            secret_key,
            token: field("SessionToken"),
        },
        expires,
    ))
}

#[async_trait]
impl object_store::CredentialProvider for CredentialProcess {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let mut cached = self.cached.lock().await;
        let fresh = |exp: &Option<SystemTime>| {
            exp.is_none_or(|t| SystemTime::now() + Duration::from_secs(300) < t)
        };
        if let Some((c, exp)) = cached.as_ref()
            && fresh(exp)
        {
            return Ok(c.clone());
        }
        let (c, exp) = self
            .run()
            .await
            .map_err(|why| object_store::Error::Generic {
                store: "S3",
                source: format!("the AWS profile's credential_process {why}").into(),
            })?;
        let c = Arc::new(c);
        *cached = Some((c.clone(), exp));
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::CredentialProvider as _;

    const FILE: &str = "\
# keys for the tests
[default]
aws_access_key_id = AKIADEFAULT
aws_secret_access_key = secret/default

[reports]
AWS_ACCESS_KEY_ID=AKIAREPORTS
aws_secret_access_key=secret+reports
aws_session_token = token==
; comment
[half]
aws_access_key_id = AKIAHALF
";

    #[test]
    fn reads_the_named_profile_and_only_it() {
        let d = parse(FILE, "default").unwrap();
        assert_eq!(
            (d.access_key_id.as_str(), d.secret_access_key.as_str()),
            ("AKIADEFAULT", "secret/default")
        );
        assert_eq!(d.session_token, None);
        let r = parse(FILE, "reports").unwrap();
        assert_eq!(r.access_key_id, "AKIAREPORTS");
        assert_eq!(r.secret_access_key, "secret+reports");
        assert_eq!(r.session_token.as_deref(), Some("token=="));
    }

    #[test]
    fn a_missing_or_half_profile_gives_nothing_and_debug_hides_keys() {
        assert!(parse(FILE, "nope").is_none());
        assert!(
            parse(FILE, "half").is_none(),
            "an id without a secret is not a key"
        );
        let printed = format!("{:?}", parse(FILE, "reports").unwrap());
        assert!(
            !printed.contains("AKIA") && !printed.contains("secret"),
            "{printed}"
        );
    }

    #[test]
    fn config_file_profiles_keys_then_process() {
        let config = "\
[default]
region = eu-west-1
[profile static]
aws_access_key_id = AKIACONFIG
aws_secret_access_key = secret-config
[profile proc]
region = us-east-1
credential_process = /opt/bin/get-creds --profile proc
[profile role]
role_arn = arn:aws:iam::1:role/r
source_profile = default
[profile sso]
sso_session = corp
";
        // The credentials file wins for the same profile, as in the AWS tools.
        assert!(matches!(
            resolve(Some(FILE), Some(config), "default"),
            Resolved::Found(ProfileCredentials::Keys(k)) if k.access_key_id == "AKIADEFAULT"
        ));
        assert!(matches!(
            resolve(Some(FILE), Some(config), "static"),
            Resolved::Found(ProfileCredentials::Keys(k)) if k.secret_access_key == "secret-config"
        ));
        assert_eq!(
            resolve(None, Some(config), "proc"),
            Resolved::Found(ProfileCredentials::Process(
                "/opt/bin/get-creds --profile proc".into()
            ))
        );
        assert!(matches!(
            resolve(None, Some(config), "role"),
            Resolved::Unsupported(_)
        ));
        assert!(matches!(
            resolve(None, Some(config), "sso"),
            Resolved::Unsupported(_)
        ));
        // `[proc]` without `profile ` is not the config file's spelling of a named profile.
        assert_eq!(
            resolve(None, Some("[proc]\ncredential_process = x\n"), "proc"),
            Resolved::Nothing
        );
        assert_eq!(resolve(None, None, "default"), Resolved::Nothing);
    }

    #[test]
    fn process_output_is_checked_and_never_quoted() {
        let (c, exp) = parse_process_output(
            br#"{"Version": 1, "AccessKeyId": "AKIAPROC", "SecretAccessKey": "s3cr3t", "SessionToken": "tok", "Expiration": "2030-01-01T00:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(
            (c.key_id.as_str(), c.secret_key.as_str()),
            ("AKIAPROC", "s3cr3t")
        );
        assert_eq!(c.token.as_deref(), Some("tok"));
        assert!(exp.is_some());
        for bad in [
            &br#"{"AccessKeyId": "AKIAPROC", "SecretAccessKey": "s3cr3t"}"#[..],
            br#"{"Version": 1, "AccessKeyId": "AKIAPROC"}"#,
            br#"{"Version": 1, "AccessKeyId": "AKIAPROC", "SecretAccessKey": "s3cr3t", "Expiration": "soon"}"#,
            b"AKIAPROC s3cr3t",
        ] {
            let e = parse_process_output(bad).unwrap_err();
            assert!(!e.contains("AKIAPROC") && !e.contains("s3cr3t"), "{e}");
        }
    }

    #[tokio::test]
    async fn credential_process_runs_once_until_it_expires() {
        let dir = std::env::temp_dir().join(format!("mcpr-credproc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let runs = dir.join("runs");
        let _ = std::fs::remove_file(&runs);
        let answer = |exp: &str| {
            format!(
                r#"echo run >> '{}'; printf '%s' '{{"Version": 1, "AccessKeyId": "AKIAPROC", "SecretAccessKey": "s3cr3t", "Expiration": "{exp}"}}'"#,
                runs.display()
            )
        };
        let count = || {
            std::fs::read_to_string(&runs)
                .map(|s| s.lines().count())
                .unwrap_or(0)
        };
        let p = CredentialProcess::new(answer("2099-01-01T00:00:00Z"));
        for _ in 0..3 {
            let c = p.get_credential().await.unwrap();
            assert_eq!(c.key_id, "AKIAPROC");
        }
        assert_eq!(count(), 1, "a fresh answer is kept");
        // An answer about to expire is asked for again each time.
        let p = CredentialProcess::new(answer("2001-01-01T00:00:00Z"));
        p.get_credential().await.unwrap();
        p.get_credential().await.unwrap();
        assert_eq!(count(), 3);
        let e = CredentialProcess::new("echo AKIALEAK; exit 3".into())
            .get_credential()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("credential_process failed") && !e.contains("AKIALEAK"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Why this module exists: object_store takes its S3 settings from the mount and the
    /// environment, and has none naming a profile or the shared files (every key it knows
    /// parses as an `AmazonS3ConfigKey`; these do not). When one of them parses, object_store
    /// reads the shared files again and this module can go.
    #[test]
    fn object_store_has_no_profile_setting() {
        use object_store::aws::AmazonS3ConfigKey;
        // A key it does know, so the parse itself is what is being asked.
        assert!("aws_access_key_id".parse::<AmazonS3ConfigKey>().is_ok());
        for key in [
            "aws_profile",
            "profile",
            "aws_shared_credentials_file",
            "shared_credentials_file",
            "aws_config_file",
            "config_file",
            "aws_credential_process",
            "credential_process",
        ] {
            assert!(
                key.parse::<AmazonS3ConfigKey>().is_err(),
                "object_store now has a setting {key:?}: the shared-file parser in profile.rs may give way to it"
            );
        }
    }
}
