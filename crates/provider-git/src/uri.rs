//! `git://` URIs ⇄ (ref, path, query): the short form `git://{ref}/{path}`, the named form
//! `git://@{repo}/{ref}/{path}`, and the strict percent-decoding both share.
//!
//! The ref is exactly one segment: a `/` inside a ref name is written `%2F`
//! (`git://feature%2Fx/src/lib.rs`), so a URI never has two readings. The path is the rest,
//! one tree entry name per segment.

use gix::ObjectId;
use mcpr_core::{Error, ResourceUri, Result};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// Bytes left as they are in a ref segment: RFC 3986 unreserved characters. Everything else,
/// `/` and `@` included, is `%XX`.
const REF_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The path keeps its `/` separators.
const PATH_SET: &AsciiSet = &REF_SET.remove(b'/');

/// The longest path (in bytes, decoded) a URI may name; git itself has no limit, but nothing
/// real comes close and a bound keeps hostile URIs cheap.
const MAX_PATH: usize = 4096;

/// Page size of a history read when the URI does not say.
pub(crate) const HISTORY_DEFAULT_LIMIT: usize = 20;
/// The most commits one history page returns.
pub(crate) const HISTORY_MAX_LIMIT: usize = 100;

/// The URI bases one mount answers to.
#[derive(Debug, Clone)]
pub(crate) struct Bases {
    /// Serves `git://{ref}/…`.
    pub(crate) short: bool,
    /// `git://@{name}/` when the mount has a name.
    pub(crate) named: Option<String>,
}

impl Bases {
    pub(crate) fn new(short: bool, name: Option<&str>) -> Self {
        Self {
            short,
            named: name.map(|n| format!("git://@{n}/")),
        }
    }

    /// The base this mount's listings use: the short form when it is the default mount.
    pub(crate) fn canonical(&self) -> &str {
        match (&self.named, self.short) {
            (_, true) | (None, _) => "git://",
            (Some(n), false) => n,
        }
    }

    /// Every base, canonical first.
    pub(crate) fn all(&self) -> Vec<&str> {
        let mut out = Vec::new();
        if self.short {
            out.push("git://");
        }
        if let Some(n) = &self.named {
            out.push(n.as_str());
        }
        out
    }

    /// The router prefixes: `git://` owns every `git:` URI no longer prefix claims, and
    /// `git://@name` owns its repository's URIs (the router matches it at the `/`).
    pub(crate) fn router_prefixes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(n) = &self.named {
            out.push(n.trim_end_matches('/').to_owned());
        }
        if self.short {
            out.push("git://".to_owned());
        }
        out
    }

    /// What follows the base in `s` (the URI without its query), or `None` when `s` is not
    /// this mount's. In the short form an authority starting with a literal `@` is reserved
    /// for the named form (a ref that starts with `@` is written `%40…`).
    fn strip<'a>(&self, s: &'a str) -> Option<&'a str> {
        if let Some(n) = &self.named
            && let Some(rest) = s.strip_prefix(n.as_str())
        {
            return Some(rest);
        }
        if self.short {
            let rest = s.strip_prefix("git://")?;
            if rest.starts_with('@') {
                return None;
            }
            return Some(rest);
        }
        None
    }
}

/// A path inside a tree: entry names joined by `/`, no leading or trailing `/`; empty is the
/// root tree. Every component was checked by [`valid_component`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct TreePath(Vec<u8>);

impl TreePath {
    pub(crate) fn root() -> Self {
        Self(Vec::new())
    }

    pub(crate) fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// A path from trusted bytes (a cursor we minted, or built from tree entries), checked
    /// again because a cursor position is client input too.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.is_empty() {
            return Some(Self::root());
        }
        bytes
            .split(|&b| b == b'/')
            .all(valid_component)
            .then(|| Self(bytes.to_vec()))
    }

    pub(crate) fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&b| b == b'/').filter(|c| !c.is_empty())
    }

    pub(crate) fn join(&self, name: &[u8]) -> Self {
        let mut v = self.0.clone();
        if !v.is_empty() {
            v.push(b'/');
        }
        v.extend_from_slice(name);
        Self(v)
    }

    /// The path for people (lossy for names that are not UTF-8).
    pub(crate) fn display(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

/// Whether `c` may be one entry name in a served path: not empty, `.` or `..`, no `/` or NUL,
/// and not `.git` in any letter case (git refuses such entries; a crafted tree could hold
/// one, and it must not look like repository internals).
pub(crate) fn valid_component(c: &[u8]) -> bool {
    !c.is_empty()
        && c != b"."
        && c != b".."
        && !c.contains(&b'/')
        && !c.contains(&0)
        && !c.eq_ignore_ascii_case(b".git")
        && c.len() <= 255
}

/// What a read or watch of a `git://` URI is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GitUri {
    /// The ref as written, decoded: a branch, tag, full ref name, `HEAD`, or a commit id.
    pub(crate) rev: String,
    /// `None` for the commit itself (`git://main`), else a path in its tree.
    pub(crate) path: Option<TreePath>,
    pub(crate) query: Query,
}

/// The query part, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Query {
    None,
    /// A directory read continuing after entry `name`.
    DirAfter(Vec<u8>),
    /// The history of the path.
    History {
        /// The last commit already served; the page starts at its first parent.
        after: Option<ObjectId>,
        limit: usize,
    },
}

/// Parse `uri` for a mount with `bases`. Anything that cannot name a resource of this mount
/// is not found; a malformed query is invalid params (the message says what is accepted).
pub(crate) fn parse(bases: &Bases, uri: &ResourceUri) -> Result<GitUri> {
    let nf = || Error::not_found(uri.as_str());
    let rest = bases.strip(uri.without_query()).ok_or_else(nf)?;
    let (rev_enc, path_enc) = match rest.split_once('/') {
        Some((r, p)) => (r, Some(p)),
        None => (rest, None),
    };
    let rev = decode(rev_enc).ok_or_else(nf)?;
    let rev = String::from_utf8(rev).map_err(|_| nf())?;
    if rev.is_empty() || rev.chars().any(char::is_control) {
        return Err(nf());
    }
    let path = match path_enc {
        None => None,
        Some(p) => Some(decode_path(p).ok_or_else(nf)?),
    };
    let query = parse_query(uri)?;
    if matches!(query, Query::DirAfter(_)) && path.is_none() {
        return Err(Error::invalid_params(
            "`after` without `history` continues a directory read; a commit URI has no entries",
        )
        .with_uri(uri.as_str()));
    }
    Ok(GitUri { rev, path, query })
}

/// Decode a path: `/`-separated, each segment strictly percent-decoded and a valid entry
/// name. An empty path is the root; one trailing `/` is allowed (`git://main/docs/`).
fn decode_path(p: &str) -> Option<TreePath> {
    let p = p.strip_suffix('/').unwrap_or(p);
    if p.is_empty() {
        return Some(TreePath::root());
    }
    let mut out = Vec::with_capacity(p.len());
    for (i, seg) in p.split('/').enumerate() {
        let name = decode(seg)?;
        if !valid_component(&name) {
            return None;
        }
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(&name);
    }
    (out.len() <= MAX_PATH).then_some(TreePath(out))
}

/// Strict percent-decoding: `%` must be followed by two hex digits.
fn decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            let hi = hex(*b.get(i + 1)?)?;
            let lo = hex(*b.get(i + 2)?)?;
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

fn parse_query(uri: &ResourceUri) -> Result<Query> {
    let bad = |msg: String| Error::invalid_params(msg).with_uri(uri.as_str());
    let mut history = false;
    let mut after: Option<&str> = None;
    let mut limit: Option<&str> = None;
    for (k, v) in uri.query_pairs() {
        let slot = match k {
            "history" => {
                if history {
                    return Err(bad("query parameter `history` given twice".into()));
                }
                if !v.is_empty() && v != "true" && v != "1" {
                    return Err(bad(format!(
                        "`history` takes no value (or `true`), got {v:?}"
                    )));
                }
                history = true;
                continue;
            }
            "after" => &mut after,
            "limit" => &mut limit,
            other => {
                return Err(bad(format!(
                    "unknown query parameter {other:?}: git URIs accept `history`, `after` and `limit` (history pages), or `after` alone (directory blocks)"
                )));
            }
        };
        if slot.replace(v).is_some() {
            return Err(bad(format!("query parameter `{k}` given twice")));
        }
    }
    if !history {
        if limit.is_some() {
            return Err(bad("`limit` applies to history pages: add `history`".into()));
        }
        return Ok(match after {
            None => Query::None,
            Some(a) => {
                let name = decode(a)
                    .filter(|n| valid_component(n))
                    .ok_or_else(|| bad(format!("`after` must be an entry name, got {a:?}")))?;
                Query::DirAfter(name)
            }
        });
    }
    let after = match after {
        None => None,
        Some(a) => Some(
            ObjectId::from_hex(a.as_bytes())
                .map_err(|_| bad(format!("`after` must be a full commit id, got {a:?}")))?,
        ),
    };
    let limit = match limit {
        None => HISTORY_DEFAULT_LIMIT,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=HISTORY_MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                bad(format!(
                    "`limit` must be a number from 1 to {HISTORY_MAX_LIMIT}, got {l:?}"
                ))
            })?,
    };
    Ok(Query::History { after, limit })
}

/// Percent-encode a ref name as one URI segment (`feature/x` → `feature%2Fx`).
pub(crate) fn encode_ref(name: &str) -> String {
    utf8_percent_encode(name, REF_SET).to_string()
}

/// Percent-encode a tree path, keeping `/` (non-UTF-8 bytes become `%XX` too).
pub(crate) fn encode_path(path: &[u8]) -> String {
    percent_encoding::percent_encode(path, PATH_SET).to_string()
}

/// Percent-encode one entry name (for `?after=`).
pub(crate) fn encode_name(name: &[u8]) -> String {
    percent_encoding::percent_encode(name, REF_SET).to_string()
}

/// The URI of the commit resource of ref segment `rev` under `base`.
pub(crate) fn commit_uri(base: &str, rev: &str) -> String {
    format!("{base}{}", encode_ref(rev))
}

/// The URI of `path` at `rev` under `base` (the root tree is `git://main/`).
pub(crate) fn path_uri(base: &str, rev: &str, path: &TreePath) -> String {
    format!("{base}{}/{}", encode_ref(rev), encode_path(path.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(bases: &Bases, s: &str) -> Result<GitUri> {
        parse(bases, &ResourceUri::parse(s).unwrap())
    }

    #[test]
    fn short_form_splits_ref_and_path() {
        let b = Bases::new(true, None);
        let u = p(&b, "git://main/docs/CHANGELOG.md").unwrap();
        assert_eq!(u.rev, "main");
        assert_eq!(u.path.unwrap().as_bytes(), b"docs/CHANGELOG.md");
        let u = p(&b, "git://feature%2Fx/a%20b/%C3%BC.txt").unwrap();
        assert_eq!(u.rev, "feature/x");
        assert_eq!(u.path.unwrap().as_bytes(), "a b/ü.txt".as_bytes());
        let u = p(&b, "git://main").unwrap();
        assert_eq!(u.path, None);
        let u = p(&b, "git://main/").unwrap();
        assert_eq!(u.path, Some(TreePath::root()));
    }

    #[test]
    fn escapes_name_nothing() {
        let b = Bases::new(true, None);
        for bad in [
            "git://main/../x",
            "git://main/a/%2e%2e/x",
            "git://main//etc/passwd",
            "git://main/a%2Fb",
            "git://main/.git/config",
            "git://main/sub/.GIT/HEAD",
            "git://main/a%00",
            "git://main/%zz",
            "git://%/x",
            "git://@other/main/x",
            "file:///etc/passwd",
        ] {
            assert_eq!(
                p(&b, bad).unwrap_err().kind,
                mcpr_core::ErrorKind::NotFound,
                "{bad}"
            );
        }
    }

    #[test]
    fn named_form_and_bases() {
        let b = Bases::new(false, Some("docs"));
        let u = p(&b, "git://@docs/v1.0/README.md").unwrap();
        assert_eq!(u.rev, "v1.0");
        assert!(p(&b, "git://main/README.md").is_err());
        assert_eq!(b.router_prefixes(), vec!["git://@docs".to_owned()]);
        assert_eq!(b.canonical(), "git://@docs/");
        let both = Bases::new(true, Some("docs"));
        assert_eq!(both.canonical(), "git://");
        assert_eq!(p(&both, "git://%40docs/x").unwrap().rev, "@docs");
    }

    #[test]
    fn queries() {
        let b = Bases::new(true, None);
        let u = p(&b, "git://main/x?history&limit=5").unwrap();
        assert_eq!(
            u.query,
            Query::History {
                after: None,
                limit: 5
            }
        );
        let id = "0123456789abcdef0123456789abcdef01234567";
        let u = p(&b, &format!("git://main/x?history=&after={id}")).unwrap();
        assert!(matches!(
            u.query,
            Query::History {
                after: Some(_),
                limit: 20
            }
        ));
        assert_eq!(
            p(&b, "git://main/x?after=b%20c").unwrap().query,
            Query::DirAfter(b"b c".to_vec())
        );
        for bad in [
            "git://main/x?bogus=1",
            "git://main/x?history&limit=0",
            "git://main/x?history&limit=101",
            "git://main/x?history&after=abc",
            "git://main/x?limit=3",
            "git://main/x?history&history",
            "git://main?after=x",
        ] {
            assert_eq!(
                p(&b, bad).unwrap_err().kind,
                mcpr_core::ErrorKind::InvalidParams,
                "{bad}"
            );
        }
    }

    #[test]
    fn encoding_round_trips() {
        assert_eq!(encode_ref("feature/x"), "feature%2Fx");
        assert_eq!(encode_ref("@x"), "%40x");
        assert_eq!(
            encode_path("a b/ü#?.md".as_bytes()),
            "a%20b/%C3%BC%23%3F.md"
        );
        let b = Bases::new(true, None);
        let path = TreePath::from_bytes("dir/ü x.md".as_bytes()).unwrap();
        let uri = path_uri("git://", "feature/x", &path);
        let back = p(&b, &uri).unwrap();
        assert_eq!(back.rev, "feature/x");
        assert_eq!(back.path, Some(path));
    }
}
