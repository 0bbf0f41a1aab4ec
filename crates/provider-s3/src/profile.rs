//! Keys from the AWS shared credentials file (`~/.aws/credentials`, profile `AWS_PROFILE` or
//! `default`), the place most users keep them; object_store reads only the environment.
//!
//! Only used when neither the mount nor the environment names a key: those win, as in the
//! AWS tools. The file is read once, when the mount is built.

use std::path::{Path, PathBuf};

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

/// The credentials file the AWS tools would read: `AWS_SHARED_CREDENTIALS_FILE`, else
/// `~/.aws/credentials`; and the profile: `AWS_PROFILE`, else `default`.
pub(crate) fn from_environment() -> Option<ProfileKeys> {
    let path = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".aws/credentials")))?;
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    let text = std::fs::read_to_string(&path).ok()?;
    match parse(&text, &profile) {
        Some(keys) => Some(keys),
        None => {
            // Names the file and profile, never a value from it.
            tracing::debug!(file = %path.display(), %profile, "no keys for this profile in the credentials file");
            None
        }
    }
}

/// The keys of `[profile]` in an INI credentials file: both `aws_access_key_id` and
/// `aws_secret_access_key`, or nothing. Keys and section names are matched as the AWS tools
/// match them (case-insensitive keys, `#`/`;` comments, surrounding spaces ignored).
pub(crate) fn parse(text: &str, profile: &str) -> Option<ProfileKeys> {
    let mut in_profile = false;
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_profile = section.trim() == profile;
            continue;
        }
        if !in_profile {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim().to_owned();
        match k.trim().to_ascii_lowercase().as_str() {
            "aws_access_key_id" => id = Some(v),
            "aws_secret_access_key" => secret = Some(v),
            "aws_session_token" => token = Some(v),
            _ => {}
        }
    }
    Some(ProfileKeys {
        access_key_id: id.filter(|v| !v.is_empty())?,
        secret_access_key: secret.filter(|v| !v.is_empty())?,
        session_token: token.filter(|v| !v.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::parse;

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
}
