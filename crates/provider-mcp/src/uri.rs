//! The URI rewrite between the upstream and our clients: every upstream URI is served as
//! `{name}+{upstream URI}`, except those under a configured prefix, which pass unchanged;
//! and the bounds on what an upstream says about its resources (names cut and without
//! control characters, URIs that must parse).

use mcpr_core::{Error, ResourceUri, Result};

use crate::config::{MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS};

/// Maps URIs and templates both ways for one mount.
#[derive(Debug, Clone)]
pub(crate) struct UriMap {
    /// `{name}+`.
    plus: String,
    /// Upstream prefixes served as they are.
    prefixes: Vec<String>,
}

impl UriMap {
    pub(crate) fn new(name: &str, prefixes: &[String]) -> Self {
        Self {
            plus: format!("{name}+"),
            prefixes: prefixes.to_vec(),
        }
    }

    /// Whether `upstream` (a URI or a template) is served unchanged.
    fn passes(&self, upstream: &str) -> bool {
        self.prefixes
            .iter()
            .any(|p| upstream.starts_with(p.as_str()))
    }

    /// Our URI (or template) for an upstream one.
    pub(crate) fn ours(&self, upstream: &str) -> String {
        if self.passes(upstream) {
            upstream.to_owned()
        } else {
            format!("{}{upstream}", self.plus)
        }
    }

    /// The upstream URI (or template) for one of ours; not found when it is not this
    /// mount's.
    pub(crate) fn upstream<'a>(&self, ours: &'a str) -> Result<&'a str> {
        if let Some(rest) = ours.strip_prefix(self.plus.as_str()) {
            if rest.is_empty() {
                return Err(Error::not_found(ours));
            }
            return Ok(rest);
        }
        if self.passes(ours) {
            return Ok(ours);
        }
        Err(Error::not_found(ours))
    }

    /// Our URI for an upstream one, refused (`None`) when it does not parse as a URI.
    pub(crate) fn ours_checked(&self, upstream: &str) -> Option<String> {
        let ours = self.ours(upstream);
        ResourceUri::parse(upstream).ok()?;
        ResourceUri::parse(&ours).ok()?;
        Some(ours)
    }

    /// The router's prefixes for the mount: `{name}+` and each pass-through prefix.
    pub(crate) fn router_prefixes(&self) -> Vec<String> {
        std::iter::once(self.plus.clone())
            .chain(self.prefixes.iter().cloned())
            .collect()
    }
}

/// `s` without control characters, cut to `max` characters (an ellipsis marks the cut).
pub(crate) fn clean(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .filter(|c| !c.is_control())
        .take(max + 1)
        .collect();
    if out.chars().count() > max {
        out = out.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
    }
    out
}

/// A name or title as relayed.
pub(crate) fn clean_name(s: &str) -> String {
    clean(s, MAX_NAME_CHARS)
}

/// A description as relayed: line breaks kept (they are text), other control characters
/// dropped, cut to [`MAX_DESCRIPTION_CHARS`].
pub(crate) fn clean_description(s: &str) -> String {
    let kept: String = s
        .chars()
        .filter(|c| !c.is_control() || *c == '\n')
        .take(MAX_DESCRIPTION_CHARS + 1)
        .collect();
    if kept.chars().count() > MAX_DESCRIPTION_CHARS {
        let mut cut: String = kept.chars().take(MAX_DESCRIPTION_CHARS - 1).collect();
        cut.push('…');
        cut
    } else {
        kept
    }
}

/// An upstream error message as shown to our clients: one line, bounded.
pub(crate) fn clean_message(s: &str) -> String {
    // An upstream's or a transport's text may quote a URL with a secret in it.
    clean(&mcpr_core::redact_urls_in(s), 500)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ways_and_prefixes() {
        let m = UriMap::new("every", &["test://".to_owned()]);
        assert_eq!(m.ours("demo://a/b"), "every+demo://a/b");
        assert_eq!(m.ours("test://static"), "test://static");
        assert_eq!(m.upstream("every+demo://a/b").unwrap(), "demo://a/b");
        assert_eq!(m.upstream("test://static").unwrap(), "test://static");
        assert!(m.upstream("other+demo://a").is_err());
        assert!(m.upstream("every+").is_err());
        assert_eq!(m.ours_checked("not a uri"), None);
        assert_eq!(m.router_prefixes(), vec!["every+", "test://"]);
    }

    #[test]
    fn names_lose_control_characters_and_are_cut() {
        assert_eq!(clean_name("a\u{1b}[31mb\nc"), "a[31mbc");
        let long = "x".repeat(MAX_NAME_CHARS + 10);
        let c = clean_name(&long);
        assert_eq!(c.chars().count(), MAX_NAME_CHARS);
        assert!(c.ends_with('…'));
        assert_eq!(clean_description("a\nb\u{7}"), "a\nb");
    }
}
