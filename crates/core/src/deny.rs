//! The deny list every provider with paths applies (files, git, s3): the built-in patterns
//! that hide secrets ([`DEFAULT_DENY`]) and a mount's own `deny` patterns, gitignore syntax,
//! matched against the path relative to the mount's root, ignoring case.
//!
//! A denied path is never listed, read, completed, shown in a directory read or watched, and
//! answers exactly as a path that does not exist (not found), so its existence is not told.
//! Matching works on virtual paths under `/r`, so a real root never enters pattern matching.

use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::config::SettingError;
use crate::{Error, Result};

/// The deny list every mount with paths starts with (gitignore syntax, matched against the
/// path relative to the root, ignoring case: `SERVER.PEM` is as secret as `server.pem`, and on
/// a case-insensitive file system both name the same file). A pattern without a `/` before its
/// end matches at any depth; `**/` makes one with a `/` do so too.
pub const DEFAULT_DENY: &[&str] = &[
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.kdbx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".ssh/",
    ".gnupg/",
    ".aws/",
    ".azure/",
    ".kube/",
    // A `/` inside anchors a gitignore pattern to the root; a nested `.docker` is as secret.
    "**/.docker/config.json",
    ".git/",
    ".hg/",
    ".svn/",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".htpasswd",
    ".git-credentials",
    "credentials.json",
    // Cloud, infrastructure and tool credentials: a GCP service-account key, Terraform state
    // and variable files (state holds every managed secret in clear), VPN profiles (often with
    // an inline private key), a Kubernetes-style secrets file, WordPress's database password,
    // a key's backup copy, and the token files of Vault, s3cmd, boto and old Docker.
    "service-account.json",
    "*.tfstate",
    "*.tfstate.backup",
    "*.tfvars",
    "*.tfvars.json",
    "*.ovpn",
    "secrets.yaml",
    "secrets.yml",
    "wp-config.php",
    "*.pem.bak",
    ".vault-token",
    ".s3cfg",
    ".boto",
    ".dockercfg",
    // Shell and database client histories: passwords typed on a command line or in a
    // `CREATE USER ... PASSWORD` statement land there.
    ".bash_history",
    ".zsh_history",
    ".sh_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".python_history",
    ".node_repl_history",
    ".rediscli_history",
];

/// The fixed root the matcher is built on; paths are matched as `/r/<relative path>`.
const ROOT: &str = "/r";

/// A compiled deny list: built-in patterns plus a mount's own.
#[derive(Debug, Clone)]
pub struct DenyList {
    matcher: Gitignore,
}

impl DenyList {
    /// [`DEFAULT_DENY`] plus `extra` (a mount's `deny`); a bad pattern is invalid params
    /// naming it.
    pub fn new(extra: &[String]) -> Result<Self> {
        Self::with_builtin(DEFAULT_DENY, extra)
    }

    /// `builtin` plus `extra`.
    pub fn with_builtin(builtin: &[&str], extra: &[String]) -> Result<Self> {
        let mut b = GitignoreBuilder::new(ROOT);
        // Secrets do not change by case (`SERVER.PEM`, `Credentials.json`, `.ENV`), and the
        // user's own patterns follow the same rule so no spelling slips past them either.
        // Set before any pattern: it applies only to patterns added after it.
        b.case_insensitive(true)
            .map_err(|e| Error::internal(format!("deny list: {e}")))?;
        for pat in builtin
            .iter()
            .copied()
            .chain(extra.iter().map(String::as_str))
        {
            b.add_line(None, pat)
                .map_err(|e| Error::invalid_params(format!("bad deny pattern {pat:?}: {e}")))?;
        }
        let matcher = b
            .build()
            .map_err(|e| Error::invalid_params(format!("bad deny list: {e}")))?;
        Ok(Self { matcher })
    }

    /// Why `pattern` is not a deny pattern, for a configuration check; `Ok` when it is one.
    pub fn check_pattern(pattern: &str) -> std::result::Result<(), String> {
        GitignoreBuilder::new("/")
            .add_line(None, pattern)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// A mount's `deny` setting checked: the error names `deny.{i}` of the first pattern
    /// that does not parse, and why.
    pub fn validate_setting(patterns: &[String]) -> std::result::Result<(), SettingError> {
        for (i, pat) in patterns.iter().enumerate() {
            if let Err(e) = Self::check_pattern(pat) {
                return Err(SettingError::new(
                    format!("deny.{i}"),
                    format!("bad pattern {pat:?}: {e}"),
                ));
            }
        }
        Ok(())
    }

    /// Whether the list has negated (`!`) patterns: without them, one walk over a path's
    /// parents answers both the file and the directory question (see [`Self::is_denied_either`]).
    pub fn has_negations(&self) -> bool {
        self.matcher.num_whitelists() > 0
    }

    /// Whether `rel` (relative to the root; a file unless `is_dir`) is denied: by a pattern,
    /// or inside a denied directory. The root itself never is.
    pub fn is_denied(&self, rel: impl AsRef<Path>, is_dir: bool) -> bool {
        let Some(path) = virtual_path(rel.as_ref()) else {
            return false;
        };
        self.matcher
            .matched_path_or_any_parents(&path, is_dir)
            .is_ignore()
    }

    /// Whether `rel` is denied as a file or as a directory: for a path whose type is not
    /// known (before a lookup, or a store key that may be both an object and a prefix).
    pub fn is_denied_either(&self, rel: impl AsRef<Path>) -> bool {
        let Some(path) = virtual_path(rel.as_ref()) else {
            return false;
        };
        if self.has_negations() {
            return self
                .matcher
                .matched_path_or_any_parents(&path, false)
                .is_ignore()
                || self
                    .matcher
                    .matched_path_or_any_parents(&path, true)
                    .is_ignore();
        }
        self.matcher
            .matched_path_or_any_parents(&path, true)
            .is_ignore()
            || self.matcher.matched(&path, false).is_ignore()
    }

    /// Whether the entry `rel` itself matches, its parents not considered: for a walk that
    /// already kept the parents (cheaper than [`Self::is_denied`]).
    pub fn is_entry_denied(&self, rel: impl AsRef<Path>, is_dir: bool) -> bool {
        let Some(path) = virtual_path(rel.as_ref()) else {
            return false;
        };
        self.matcher.matched(&path, is_dir).is_ignore()
    }
}

/// `rel` under [`ROOT`], leading `/`s dropped (joining an absolute path would replace the
/// root, and the matcher requires paths under it); `None` for the root itself.
fn virtual_path(rel: &Path) -> Option<PathBuf> {
    let mut rel = rel;
    while let Ok(r) = rel.strip_prefix("/") {
        rel = r;
    }
    if rel.as_os_str().is_empty() {
        return None;
    }
    Some(Path::new(ROOT).join(rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_rules_and_a_mounts_own() {
        let d = DenyList::new(&["reports/private/".to_owned(), "*.sqlite".to_owned()]).unwrap();
        for p in [
            ".env",
            "app/.env",
            ".env.production",
            "server.pem",
            "deep/a/SERVER.PEM",
            "id_rsa",
            "home/id_rsa.pub",
            ".ssh/authorized_keys",
            "x/.ssh/config",
            "a/.docker/config.json",
            "credentials.json",
            "reports/private/q1.csv",
            "data.SQLite",
            "/public/.env",
        ] {
            assert!(d.is_denied(p, false), "{p}");
            assert!(d.is_denied_either(p), "{p}");
        }
        for p in [
            "README.md",
            "src/env.rs",
            "public/report.csv",
            "ssh/notes",
            "reports/q1.csv",
        ] {
            assert!(!d.is_denied(p, false), "{p}");
            assert!(!d.is_denied_either(p), "{p}");
        }
        // `.ssh/` names directories: a file called `.ssh` is denied only as "either".
        assert!(!d.is_denied("x/.ssh", false));
        assert!(d.is_denied("x/.ssh", true));
        assert!(d.is_denied_either("x/.ssh"));
        // The entry alone: a child of a denied directory is found through its parent only.
        assert!(!d.is_entry_denied(".ssh/authorized_keys", false));
        assert!(d.is_entry_denied(".ssh", true));
        // The root is never denied.
        assert!(!d.is_denied("", true) && !d.is_denied_either("/"));
    }

    #[test]
    fn default_rules_hide_infrastructure_secrets_and_histories() {
        let d = DenyList::new(&[]).unwrap();
        for name in [
            "service-account.json",
            "terraform.tfstate",
            "terraform.tfstate.backup",
            "prod.tfstate",
            "terraform.tfvars",
            "prod.auto.tfvars",
            "terraform.tfvars.json",
            "client.ovpn",
            "secrets.yaml",
            "secrets.yml",
            "wp-config.php",
            "server.pem.bak",
            ".vault-token",
            ".s3cfg",
            ".boto",
            ".dockercfg",
            ".bash_history",
            ".zsh_history",
            ".sh_history",
            ".psql_history",
            ".mysql_history",
            ".sqlite_history",
            ".python_history",
            ".node_repl_history",
            ".rediscli_history",
        ] {
            // At the root, nested, spelled in upper case, and before a lookup tells the type.
            let nested = format!("home/user/{name}");
            let upper = format!("deploy/{}", name.to_uppercase());
            for p in [name, nested.as_str(), upper.as_str()] {
                assert!(d.is_denied(p, false), "{p}");
                assert!(d.is_denied_either(p), "{p}");
            }
        }
        // Their public neighbours stay served.
        for p in [
            "main.tf",
            "variables.tf",
            ".terraform.lock.hcl",
            "wp-config-sample.php",
            "secrets.md",
            "docs/history.md",
            "bash_history.txt",
            "vpn/README.ovpn.md",
        ] {
            assert!(!d.is_denied(p, false), "{p}");
        }
    }

    #[test]
    fn negations_and_bad_patterns() {
        let d = DenyList::new(&["*.csv".to_owned(), "!keep/*.csv".to_owned()]).unwrap();
        assert!(d.has_negations());
        assert!(d.is_denied_either("a.csv"));
        assert!(!d.is_denied_either("keep/a.csv"));
        assert!(DenyList::check_pattern("*.pem").is_ok());
        assert!(DenyList::check_pattern("[z-a]").is_err());
        let e = DenyList::new(&["[z-a]".to_owned()]).unwrap_err();
        assert!(e.message.contains("[z-a]"), "{}", e.message);
    }
}
