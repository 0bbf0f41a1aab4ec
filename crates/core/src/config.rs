//! Mount configuration: how a provider reads its own keys from `mcp-resources.toml`.
//!
//! The binary's loader reads `[server]` and the keys every mount shares (`kind`, `scope`,
//! `ttl_ms`, `cache_scope`, `shared`), then hands the rest of each `[[mount]]` table to the
//! [`ProviderFactory`] registered for its `kind` (OpenDAL's shape: each service owns its
//! settings). A factory deserializes that [`MountTable`] into its own `Deserialize` struct
//! with `deny_unknown_fields`, so a key of another kind is refused with the file, line and key
//! named, validates it once, and returns a [`MountSpec`] that opens the source.
//!
//! `[http]` and `[cluster]` are handed over the same way, as a [`ConfigTable`], to the
//! crates that define them.
//!
//! Spans survive the hand-over because the table is a `toml::de::DeValue` slice of the one
//! parse of the file: every error maps back to a line of the file the user wrote.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde::de::{DeserializeOwned, IntoDeserializer as _};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::provider::{CacheHints, Provider};

/// A configuration error whose message already names the file, the line and the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// A setting that failed validation: the key (relative to its mount, dotted for nested
/// tables, e.g. `poll_interval_ms` or `query.params`) and what is wrong with it.
///
/// Providers validate their settings once, in one function that both the configuration file
/// path and programmatic construction call; the file path turns the key back into a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    /// The key as written in the mount's table.
    pub key: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl SettingError {
    /// `key` is wrong because of `message`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }

    /// Check that `value` lies in `range`, naming the key and the allowed range otherwise.
    pub fn check_range(
        key: &str,
        value: u64,
        range: &std::ops::RangeInclusive<u64>,
    ) -> Result<(), Self> {
        if range.contains(&value) {
            Ok(())
        } else {
            Err(Self::new(
                key,
                format!(
                    "{value} is out of range; allowed {}..={}",
                    range.start(),
                    range.end()
                ),
            ))
        }
    }
}

impl SettingError {
    /// Check a mount name that becomes part of URIs (`db://{name}/…`, `git://@{name}/…`):
    /// 1 to 64 ASCII letters, digits, `-`, `_` or `.`.
    pub fn check_mount_name(key: &str, kind: &str, name: &str) -> Result<(), Self> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if ok {
            Ok(())
        } else {
            Err(Self::new(
                key,
                format!(
                    "{kind} mount name {name:?} must be 1 to 64 letters, digits, '-', '_' or '.'"
                ),
            ))
        }
    }
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}", self.key, self.message)
    }
}

impl From<SettingError> for crate::Error {
    fn from(e: SettingError) -> Self {
        crate::Error::invalid_params(e.to_string())
    }
}

/// A whole number written as a TOML integer or as a string (which may use `${NAME}`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    /// `page_size = 100`
    Int(i64),
    /// `page_size = "${PAGE_SIZE}"`
    Str(String),
}

/// The configuration file being loaded: its path and text (for line numbers), the directory
/// relative paths are resolved against, and how `${NAME}` is looked up.
pub struct ConfigFile<'a> {
    path: &'a Path,
    text: &'a str,
    env: &'a (dyn Fn(&str) -> Option<String> + Sync),
}

impl<'a> ConfigFile<'a> {
    /// The file at `path` holding `text`, expanding `${NAME}` through `env`.
    pub fn new(
        path: &'a Path,
        text: &'a str,
        env: &'a (dyn Fn(&str) -> Option<String> + Sync),
    ) -> Self {
        Self { path, text, env }
    }

    /// The file's path, as given.
    pub fn path(&self) -> &Path {
        self.path
    }

    /// The directory that relative paths in the file are relative to (the file's own, not
    /// wherever the server was started), made absolute so that messages and labels name the
    /// place a relative path really led to (`repo = "."` reads `/home/me/proj`, not `.`).
    pub fn base_dir(&self) -> PathBuf {
        let dir = self.path.parent().unwrap_or(Path::new(""));
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        std::path::absolute(dir).map_or_else(|_| dir.to_path_buf(), |d| lexical(&d))
    }

    /// `path` resolved against [`ConfigFile::base_dir`] when relative, without `.`
    /// components (symlinks are not resolved: the path stays the one the user wrote).
    pub fn resolve_path(&self, path: &str) -> PathBuf {
        let p = PathBuf::from(path);
        if p.is_relative() {
            lexical(&self.base_dir().join(p))
        } else {
            p
        }
    }

    /// A directory that must exist: expanded, resolved against [`ConfigFile::base_dir`], and
    /// checked, with the reason at the value's line when it is not a directory.
    pub fn directory(&self, v: &Spanned<String>, key: &str) -> Result<PathBuf, ConfigError> {
        let path = self.resolve_path(&self.expand(v, key)?);
        match std::fs::metadata(&path) {
            Ok(md) if md.is_dir() => Ok(path),
            Ok(_) => self.err(
                v.span(),
                key,
                format!("{} is not a directory", path.display()),
            ),
            Err(e) => self.err(v.span(), key, format!("{}: {e}", path.display())),
        }
    }

    /// An environment variable's value.
    pub fn env(&self, name: &str) -> Option<String> {
        (self.env)(name)
    }

    /// The 1-based line of a byte offset.
    pub fn line(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
            + 1
    }

    /// An error at `span` about `key`.
    pub fn error(&self, span: Range<usize>, key: &str, msg: impl fmt::Display) -> ConfigError {
        ConfigError(format!(
            "{}:{}: `{key}`: {msg}",
            self.path.display(),
            self.line(span.start)
        ))
    }

    /// `Err` of [`ConfigFile::error`].
    pub fn err<T>(
        &self,
        span: Range<usize>,
        key: &str,
        msg: impl fmt::Display,
    ) -> Result<T, ConfigError> {
        Err(self.error(span, key, msg))
    }

    /// A TOML error (syntax, unknown key, wrong type) with the file, line and key named.
    /// `root` is the table the failing value was deserialized from, searched for the key
    /// under the error's position; `prefix` is that table's own key path (`mount`).
    /// `also` are keys valid at the top of that table besides the ones the failing struct
    /// names (a mount's shared keys, taken out before its provider reads it): an unknown
    /// key there is told every key valid at its place, and the nearest.
    fn toml_error(
        &self,
        e: &toml::de::Error,
        root: Option<&DeTable<'_>>,
        prefix: &str,
        also: &[&str],
    ) -> ConfigError {
        let Some(span) = e.span() else {
            return ConfigError(format!("{}: {}", self.path.display(), e.message()));
        };
        let mut path = Vec::new();
        if let Some(t) = root {
            key_path_at(t, span.start, &mut path);
        }
        let key = match (prefix.is_empty(), path.is_empty()) {
            (true, true) => "(top level)".to_owned(),
            (true, false) => path.join("."),
            (false, true) => prefix.to_owned(),
            (false, false) => format!("{prefix}.{}", path.join(".")),
        };
        let also = if path.len() <= 1 { also } else { &[] };
        let message = unknown_field_hint(e.message().trim_end(), also)
            .unwrap_or_else(|| e.message().trim_end().to_owned());
        self.error(span, &key, message)
    }

    /// Deserialize `T` from a whole table of this file, with errors naming file, line and key.
    pub fn deserialize_table<T: DeserializeOwned>(
        &self,
        table: &Spanned<DeTable<'_>>,
        prefix: &str,
    ) -> Result<T, ConfigError> {
        T::deserialize(table.clone().into_deserializer())
            .map_err(|e| self.toml_error(&e, Some(table.get_ref()), prefix, &[]))
    }

    /// Parse the whole file into spanned tables.
    pub fn parse(&self) -> Result<Spanned<DeTable<'a>>, ConfigError> {
        DeTable::parse(self.text).map_err(|e| self.toml_error(&e, None, "", &[]))
    }

    /// Expand `${NAME}` (and `$$` for a literal `$`) in a string value.
    pub fn expand(&self, v: &Spanned<String>, key: &str) -> Result<String, ConfigError> {
        let s = v.get_ref();
        let mut out = String::with_capacity(s.len());
        let mut rest = s.as_str();
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let tail = &rest[i..];
            if let Some(t) = tail.strip_prefix("$$") {
                out.push('$');
                rest = t;
            } else if let Some(t) = tail.strip_prefix("${") {
                let Some(end) = t.find('}') else {
                    return self.err(
                        v.span(),
                        key,
                        "unclosed `${` (write `$$` for a literal `$`)",
                    );
                };
                let name = &t[..end];
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    return self.err(
                        v.span(),
                        key,
                        format!("`${{{name}}}` is not a valid environment variable name"),
                    );
                }
                match self.env(name) {
                    Some(val) => out.push_str(&val),
                    None => {
                        return self.err(
                            v.span(),
                            key,
                            format!("environment variable `{name}` is not set"),
                        );
                    }
                }
                rest = &t[end + 1..];
            } else {
                out.push('$');
                rest = &tail[1..];
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    /// A whole number of 0 or more, from an integer or an expanded string. A provider's
    /// range is checked by its own `validate`; see [`ConfigFile::int`] for the binary's keys.
    pub fn number(&self, v: &Spanned<IntOrString>, key: &str) -> Result<u64, ConfigError> {
        let n = match v.get_ref() {
            IntOrString::Int(n) => *n,
            IntOrString::Str(s) => {
                let s = self.expand(&Spanned::new(v.span(), s.clone()), key)?;
                match s.trim().parse::<i64>() {
                    Ok(n) => n,
                    Err(_) => {
                        return self.err(
                            v.span(),
                            key,
                            format!("expected a whole number, got {s:?}"),
                        );
                    }
                }
            }
        };
        u64::try_from(n).or_else(|_| self.err(v.span(), key, format!("{n} must not be negative")))
    }

    /// A whole number within `range`.
    pub fn int(
        &self,
        v: &Spanned<IntOrString>,
        key: &str,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, ConfigError> {
        let n = self.number(v, key)?;
        if range.contains(&n) {
            Ok(n)
        } else {
            self.err(
                v.span(),
                key,
                format!(
                    "{n} is out of range; allowed {}..={}",
                    range.start(),
                    range.end()
                ),
            )
        }
    }

    /// A size in bytes (`8MiB`, `512 KiB`, `10MB`, `1048576`) of at most `max` bytes.
    pub fn size(&self, v: &Spanned<IntOrString>, key: &str, max: u64) -> Result<u64, ConfigError> {
        let n = match v.get_ref() {
            IntOrString::Int(n) if *n > 0 => *n as u64,
            IntOrString::Int(n) => return self.err(v.span(), key, format!("{n} must be positive")),
            IntOrString::Str(s) => {
                let s = self.expand(&Spanned::new(v.span(), s.clone()), key)?;
                match parse_size(&s) {
                    Some(n) if n > 0 => n,
                    _ => {
                        return self.err(
                            v.span(),
                            key,
                            format!(
                                "{s:?} is not a size; write bytes or a number with KiB, MiB, GiB, KB, MB or GB"
                            ),
                        );
                    }
                }
            }
        };
        if n > max {
            return self.err(
                v.span(),
                key,
                format!(
                    "{n} bytes is more than the maximum of {max} bytes ({})",
                    human_size(max)
                ),
            );
        }
        Ok(n)
    }

    /// One of `choices`, from an expanded string.
    pub fn choice<T: Copy>(
        &self,
        v: &Spanned<String>,
        key: &str,
        choices: &[(&str, T)],
    ) -> Result<T, ConfigError> {
        let s = self.expand(v, key)?;
        match choices.iter().find(|(name, _)| *name == s) {
            Some((_, t)) => Ok(*t),
            None => {
                let names: Vec<String> = choices.iter().map(|(n, _)| format!("{n:?}")).collect();
                self.err(
                    v.span(),
                    key,
                    format!("{s:?} is not one of {}", names.join(", ")),
                )
            }
        }
    }
}

/// The keys every `[[mount]]` takes whatever its kind, besides `kind`: the binary's loader
/// reads them and hands the rest of the table to the kind's factory.
pub const MOUNT_SHARED_KEYS: &[&str] = &[
    "scope",
    "ttl_ms",
    "cache_scope",
    "shared",
    "skills",
    "skills_prefix",
    "skills_ref",
];

/// Every key a mount takes besides its provider's own: `kind` and the shared keys.
static MOUNT_KEYS: [&str; 8] = [
    "kind",
    MOUNT_SHARED_KEYS[0],
    MOUNT_SHARED_KEYS[1],
    MOUNT_SHARED_KEYS[2],
    MOUNT_SHARED_KEYS[3],
    MOUNT_SHARED_KEYS[4],
    MOUNT_SHARED_KEYS[5],
    MOUNT_SHARED_KEYS[6],
];

/// serde's "unknown field `x`, expected one of `a`, `b`" rewritten with `also` among the keys
/// expected and the nearest of them suggested; `None` for any other message.
fn unknown_field_hint(message: &str, also: &[&str]) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let mut keys: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    for k in also {
        if !keys.contains(k) {
            keys.push(k);
        }
    }
    if keys.is_empty() {
        return Some(format!("unknown field `{field}`; this table takes no keys"));
    }
    let mut out = format!(
        "unknown field `{field}`, expected one of {}",
        keys.iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let nearest = keys
        .iter()
        .map(|k| {
            // A key cut short (`ttl` for `ttl_ms`) is as near as one letter wrong.
            let cut =
                field.len().min(k.len()) >= 3 && (k.starts_with(field) || field.starts_with(k));
            let d = edit_distance(field, k);
            (if cut { d.min(1) } else { d }, d, *k)
        })
        .min_by_key(|(near, d, _)| (*near, *d))
        .map(|(near, _, k)| (near, k));
    // Near enough to be the same word mistyped: a third of its letters wrong, at least 2.
    if let Some((d, k)) = nearest
        && d <= (field.chars().count() / 3).max(2)
    {
        out.push_str(&format!("; did you mean `{k}`?"));
    }
    Some(out)
}

/// Levenshtein distance between `a` and `b`, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// `path` without its `.` components (`/a/./b/.` is `/a/b`); `..` is kept, since only the
/// file system knows where it leads through a symlink.
fn lexical(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

/// `8MiB`, `512 KiB`, `10MB`, `1048576`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// `67108864` as `64MiB`, for limits in messages.
fn human_size(n: u64) -> String {
    for (unit, m) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{}{unit}", n / m);
        }
    }
    format!("{n} bytes")
}

/// The deepest key path in `table` whose key or value covers `offset`. Every entry is
/// searched, not only those whose span covers it: an array of tables (`[[mount.query]]`) is
/// written in pieces, and its value's span does not cover all of them.
fn key_path_at(table: &DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    let covers = |r: Range<usize>| r.start <= offset && offset < r.end.max(r.start + 1);
    for (k, v) in table.iter() {
        path.push(k.get_ref().to_string());
        if covers(k.span()) || value_path_at(v, offset, path) {
            return true;
        }
        path.pop();
    }
    false
}

fn value_path_at(v: &Spanned<DeValue<'_>>, offset: usize, path: &mut Vec<String>) -> bool {
    let covers = |r: Range<usize>| r.start <= offset && offset < r.end.max(r.start + 1);
    match v.get_ref() {
        DeValue::Table(t) => key_path_at(t, offset, path) || covers(v.span()),
        DeValue::Array(a) => a.iter().any(|i| value_path_at(i, offset, path)) || covers(v.span()),
        _ => covers(v.span()),
    }
}

/// The keys every mount shares, read by the binary's loader and handed to the factory.
#[derive(Debug, Clone, Default)]
pub struct MountCommon {
    /// `ttl_ms` and `cache_scope`: the cache hints on the mount's results.
    pub cache: CacheHints,
}

/// One table of the file that a crate other than the binary reads as its own: a mount's
/// (through [`MountTable`]) or `[cluster]`. Its owner deserializes it into a struct that
/// denies unknown fields and validates it once; every error names the file, the line and
/// the key, prefixed with the table's own (`mount.root`, `cluster.name`).
pub struct ConfigTable<'a> {
    file: &'a ConfigFile<'a>,
    prefix: String,
    anchor: Range<usize>,
    table: Spanned<DeTable<'a>>,
    /// Keys valid at the table's top that its owner's struct does not name.
    also: &'static [&'static str],
}

impl<'a> ConfigTable<'a> {
    /// `table` of `file`, its keys named `{prefix}.{key}` in errors. An error about the
    /// table as a whole, or about a key that is not written, points at `anchor`.
    pub fn new(
        file: &'a ConfigFile<'a>,
        prefix: impl Into<String>,
        anchor: Range<usize>,
        table: Spanned<DeTable<'a>>,
    ) -> Self {
        Self {
            file,
            prefix: prefix.into(),
            anchor,
            table,
            also: &[],
        }
    }

    /// The file this table is written in.
    pub fn file(&self) -> &ConfigFile<'a> {
        self.file
    }

    /// Deserialize the owner's settings. The owner's struct should deny unknown fields: a
    /// key that is not its own is then refused with file, line and key.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        T::deserialize(self.table.clone().into_deserializer()).map_err(|e| {
            match e.span() {
                // A missing required key has no span of its own: point at the table.
                None => self.error_at_table(e.message().trim_end()),
                Some(_) => {
                    self.file
                        .toml_error(&e, Some(self.table.get_ref()), &self.prefix, self.also)
                }
            }
        })
    }

    /// An error about the table as a whole (a missing key), at its anchor.
    pub fn error_at_table(&self, msg: impl fmt::Display) -> ConfigError {
        self.file.error(self.anchor.clone(), &self.prefix, msg)
    }

    /// An error about `key` (dotted for nested tables) of this table, at the line where the
    /// key is written, or at the anchor when it is not written.
    pub fn error(&self, key: &str, msg: impl fmt::Display) -> ConfigError {
        let span = self.span_of(key).unwrap_or_else(|| self.anchor.clone());
        self.file
            .error(span, &format!("{}.{key}", self.prefix), msg)
    }

    /// A failed validation, placed at its key.
    pub fn setting_error(&self, e: SettingError) -> ConfigError {
        self.error(&e.key, e.message)
    }

    /// Where `key` is written: dotted for nested tables, with a number for an element of an
    /// array (`deny.2`, `template.0.uri_template`); the line of the deepest part found.
    fn span_of(&self, key: &str) -> Option<Range<usize>> {
        let mut table: &DeTable<'_> = self.table.get_ref();
        let mut span = None;
        let mut parts = key.split('.').peekable();
        while let Some(part) = parts.next() {
            let (k, mut v) = table.iter().find(|(k, _)| k.get_ref() == part)?;
            span = Some(k.span());
            if let (DeValue::Array(a), Some(i)) = (
                v.get_ref(),
                parts.peek().and_then(|p| p.parse::<usize>().ok()),
            ) {
                parts.next();
                let Some(item) = a.get(i) else { break };
                span = Some(item.span());
                v = item;
            }
            let DeValue::Table(t) = v.get_ref() else {
                break;
            };
            table = t;
        }
        span
    }
}

/// One `[[mount]]` table without the shared keys: what its provider's factory reads. Its
/// keys are `mount.{key}` in errors, and errors about the mount as a whole point at its
/// `kind` line.
pub struct MountTable<'a> {
    kind: String,
    table: ConfigTable<'a>,
}

impl<'a> MountTable<'a> {
    /// The table of one mount of `file`, its `kind` already taken out.
    pub fn new(
        file: &'a ConfigFile<'a>,
        kind: Spanned<String>,
        table: Spanned<DeTable<'a>>,
    ) -> Self {
        let mut table = ConfigTable::new(file, "mount", kind.span(), table);
        // Its shared keys were taken out; an unknown key's hint still names them.
        table.also = &MOUNT_KEYS;
        Self {
            table,
            kind: kind.into_inner(),
        }
    }

    /// The mount's `kind`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The file this mount is written in.
    pub fn file(&self) -> &ConfigFile<'a> {
        self.table.file()
    }

    /// Deserialize the provider's own settings. The provider's struct should deny unknown
    /// fields: a key of another kind is then refused with file, line and key.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        self.table.parse()
    }

    /// An error about the mount as a whole (a missing key), at its `kind` line.
    pub fn error_at_mount(&self, msg: impl fmt::Display) -> ConfigError {
        self.table.error_at_table(msg)
    }

    /// An error about `key` (dotted for nested tables) of this mount, at the line where the
    /// key is written, or at the mount's `kind` line when it is not written.
    pub fn error(&self, key: &str, msg: impl fmt::Display) -> ConfigError {
        self.table.error(key, msg)
    }

    /// A failed validation, placed at its key.
    pub fn setting_error(&self, e: SettingError) -> ConfigError {
        self.table.setting_error(e)
    }
}

/// A validated mount, ready to open its source.
#[async_trait]
pub trait MountSpec: Send + Sync + fmt::Debug {
    /// The kind as written in config.
    fn kind(&self) -> &str;
    /// Open the source (a directory, a repository, a database pool) and build the provider.
    async fn build(&self) -> crate::Result<Arc<dyn Provider>>;
    /// Whether building it touches only this machine (a directory, a repository, an SQLite
    /// file), so an offline `check-config` may open it. The default is no: a source that may
    /// be reached over the network is contacted only when asked (`check-config --connect`).
    fn is_local(&self) -> bool {
        false
    }
    /// What the mount runs or reaches, for an offline `check-config` that does not open it
    /// (a gateway mount's command or URL); never a secret. `None`: nothing more to say than
    /// the kind.
    fn describe(&self) -> Option<String> {
        None
    }
    /// What the mount will serve ([`crate::addresses`]: its URI prefixes, or the templates
    /// that start with them), computed from its settings alone, without opening or
    /// contacting anything; `None` when only the opened source can tell (a directory's
    /// path is resolved on opening it). Sources reached over the network answer it, so the
    /// offline `check-config` shows their URIs while it contacts none of them.
    fn addresses(&self) -> Option<Vec<String>> {
        None
    }
}

/// How the mounts of a kind are watched when replicas form a cluster: the provider's
/// answer, since only it knows whether every replica reaches the same source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// Every replica reaches the same source (a database, a remote repository, an API, a
    /// bucket): one replica watches it for all. A mount may not set `shared`.
    Always,
    /// Each replica may see a source of its own (a local directory): one replica watches it
    /// for all only when its mount says `shared = true`.
    OptIn,
    /// Each replica has its own (test data a replica makes up itself): never shared. A
    /// mount may not set `shared`.
    Never,
}

impl Sharing {
    /// Whether a mount that does not set `shared` is shared.
    pub fn by_default(self) -> bool {
        self == Sharing::Always
    }
}

/// Builds the mounts of one or more kinds from their configuration tables.
pub trait ProviderFactory: Send + Sync {
    /// The `kind` values this factory serves (`["sqlite", "postgres", "mysql"]`).
    fn kinds(&self) -> &'static [&'static str];

    /// How its mounts are watched in a cluster. The default is [`Sharing::Always`]: a source
    /// reached over the network is the same from every replica.
    fn sharing(&self) -> Sharing {
        Sharing::Always
    }

    /// Read and validate one mount's own keys.
    fn configure(
        &self,
        table: &MountTable<'_>,
        common: &MountCommon,
    ) -> Result<Box<dyn MountSpec>, ConfigError>;

    /// A mount of `dir` with every setting at its default, for `serve DIR`; `None` when this
    /// kind does not serve directories.
    fn for_directory(&self, dir: &Path) -> Option<Box<dyn MountSpec>> {
        let _ = dir;
        None
    }
}

/// The factories compiled into a binary, by kind.
#[derive(Default)]
pub struct ProviderRegistry {
    factories: Vec<Box<dyn ProviderFactory>>,
}

impl ProviderRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a factory for its kinds.
    pub fn register(&mut self, factory: Box<dyn ProviderFactory>) -> &mut Self {
        self.factories.push(factory);
        self
    }

    /// The factory for `kind`.
    pub fn factory(&self, kind: &str) -> Option<&dyn ProviderFactory> {
        self.factories
            .iter()
            .find(|f| f.kinds().contains(&kind))
            .map(|f| &**f)
    }

    /// Every kind registered, in registration order.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.factories
            .iter()
            .flat_map(|f| f.kinds().iter().copied())
            .collect()
    }

    /// A default mount of `dir` from the first factory that serves directories.
    pub fn for_directory(&self, dir: &Path) -> Option<Box<dyn MountSpec>> {
        self.factories.iter().find_map(|f| f.for_directory(dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Demo {
        root: Spanned<String>,
        n: Option<Spanned<IntOrString>>,
        #[serde(default)]
        query: Vec<DemoQuery>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct DemoQuery {
        uri: String,
    }

    fn with_mount<R>(text: &str, f: impl FnOnce(MountTable<'_>) -> R) -> R {
        let env = |n: &str| (n == "HOME_DIR").then(|| "/home/x".to_owned());
        let file = ConfigFile::new(Path::new("t.toml"), text, &env);
        let root = file.parse().unwrap();
        let mut root = root.into_inner();
        let mounts = root.remove("mount").unwrap();
        let DeValue::Array(a) = mounts.into_inner() else {
            panic!()
        };
        let m = a.into_iter().next().unwrap();
        let span = m.span();
        let DeValue::Table(mut t) = m.into_inner() else {
            panic!()
        };
        let kind = t.remove("kind").unwrap();
        let kind = Spanned::new(kind.span(), kind.get_ref().as_str().unwrap().to_owned());
        f(MountTable::new(&file, kind, Spanned::new(span, t)))
    }

    #[test]
    fn unknown_keys_name_file_line_and_key() {
        let e = with_mount(
            "[[mount]]\nkind = \"demo\"\nroot = \"/x\"\n\nrespect_gitignore = true\n",
            |m| m.parse::<Demo>().unwrap_err(),
        );
        assert!(
            e.0.starts_with(
                "t.toml:5: `mount.respect_gitignore`: unknown field `respect_gitignore`"
            ),
            "{e}"
        );
        let e = with_mount(
            "[[mount]]\nkind = \"demo\"\nroot = \"/x\"\n[[mount.query]]\nuri = \"a\"\n[[mount.query]]\nuri = \"b\"\nsql = \"x\"\n",
            |m| m.parse::<Demo>().unwrap_err(),
        );
        assert!(
            e.0.starts_with("t.toml:8: `mount.query.sql`: unknown field `sql`"),
            "{e}"
        );
        let e = with_mount("[[mount]]\nkind = \"demo\"\nroot = 5\n", |m| {
            m.parse::<Demo>().unwrap_err()
        });
        assert!(e.0.starts_with("t.toml:3: `mount.root`:"), "{e}");
        let e = with_mount("[[mount]]\nkind = \"demo\"\n", |m| {
            m.parse::<Demo>().unwrap_err()
        });
        assert!(
            e.0.starts_with("t.toml:1: `mount`: missing field `root`"),
            "{e}"
        );
    }

    /// A mistyped key of a mount is told every key valid there, the shared ones every mount
    /// takes included, and the nearest; a nested table's hint names only its own keys.
    #[test]
    fn an_unknown_key_gets_every_valid_key_and_the_nearest() {
        for (typo, nearest) in [
            ("skils", "skills"),
            ("skills_prefx", "skills_prefix"),
            ("scoep", "scope"),
            ("ttl", "ttl_ms"),
            ("cache-scope", "cache_scope"),
            ("sharde", "shared"),
            ("rot", "root"),
        ] {
            let e = with_mount(
                &format!("[[mount]]\nkind = \"demo\"\nroot = \"/x\"\n{typo} = 1\n"),
                |m| m.parse::<Demo>().unwrap_err(),
            );
            assert!(
                e.0.starts_with(&format!("t.toml:4: `mount.{typo}`: unknown field `{typo}`")),
                "{e}"
            );
            for key in MOUNT_SHARED_KEYS
                .iter()
                .chain(&["kind", "root", "n", "query"])
            {
                assert!(e.0.contains(&format!("`{key}`")), "{key} missing: {e}");
            }
            assert!(
                e.0.ends_with(&format!("; did you mean `{nearest}`?")),
                "{typo}: {e}"
            );
        }
        // Nothing near: every key, no guess.
        let e = with_mount(
            "[[mount]]\nkind = \"demo\"\nroot = \"/x\"\nrespect_gitignore = true\n",
            |m| m.parse::<Demo>().unwrap_err(),
        );
        assert!(
            e.0.contains("`skills_prefix`") && !e.0.contains("did you mean"),
            "{e}"
        );
        // A key of a nested table: its own keys only.
        let e = with_mount(
            "[[mount]]\nkind = \"demo\"\nroot = \"/x\"\n[[mount.query]]\nuir = \"a\"\n",
            |m| m.parse::<Demo>().unwrap_err(),
        );
        assert!(
            e.0.starts_with("t.toml:5: `mount.query.uir`: unknown field `uir`, expected one of `uri`; did you mean `uri`?"),
            "{e}"
        );
    }

    #[test]
    fn values_expand_and_validate_with_their_line() {
        with_mount(
            "[[mount]]\nkind = \"demo\"\nroot = \"${HOME_DIR}/d\"\nn = \"${NOPE}\"\n",
            |m| {
                let d: Demo = m.parse().unwrap();
                assert_eq!(m.file().expand(&d.root, "mount.root").unwrap(), "/home/x/d");
                let e = m
                    .file()
                    .int(d.n.as_ref().unwrap(), "mount.n", 1..=5)
                    .unwrap_err();
                assert!(
                    e.0.starts_with("t.toml:4: `mount.n`: environment variable `NOPE`"),
                    "{e}"
                );
                let e = m.setting_error(SettingError::new("n", "too big"));
                assert_eq!(e.0, "t.toml:4: `mount.n`: too big");
                let e = m.setting_error(SettingError::new("absent", "needed"));
                assert_eq!(e.0, "t.toml:2: `mount.absent`: needed");
            },
        );
        with_mount("[[mount]]\nkind = \"demo\"\nroot = \"/\"\nn = 9\n", |m| {
            let d: Demo = m.parse().unwrap();
            let e = m
                .file()
                .int(d.n.as_ref().unwrap(), "mount.n", 1..=5)
                .unwrap_err();
            assert_eq!(e.0, "t.toml:4: `mount.n`: 9 is out of range; allowed 1..=5");
        });
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8MiB"), Some(8 << 20));
        assert_eq!(parse_size("512 KiB"), Some(512 << 10));
        assert_eq!(parse_size("10MB"), Some(10_000_000));
        assert_eq!(parse_size("1TiB"), Some(1 << 40));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("8 parsecs"), None);
        assert_eq!(human_size(64 << 20), "64MiB");
        assert_eq!(human_size(1000), "1000 bytes");
    }
}
