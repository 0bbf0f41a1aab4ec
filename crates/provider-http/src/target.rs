//! From a resource URI to the upstream request: an api endpoint's URL template expanded with
//! the URI's values (RFC 6570, so a value never adds structure), or a web URL checked
//! against the allow prefixes.

use std::collections::BTreeMap;

use mcpr_core::template::Part;
use mcpr_core::{Error, Result, UriTemplate};
use percent_encoding::percent_decode_str;
use regex_automata::meta::Regex;

use crate::config::{Endpoint, HttpConfig};

/// One endpoint, compiled.
pub(crate) struct Compiled {
    pub(crate) endpoint: Endpoint,
    /// `None` for a fixed URI.
    pub(crate) uri: Option<UriTemplate>,
    pub(crate) url: UriTemplate,
    pub(crate) patterns: BTreeMap<String, Regex>,
}

impl Compiled {
    pub(crate) fn new(e: &Endpoint) -> Result<Self> {
        let internal = |what: &str, err: String| {
            Error::internal(format!("endpoint {}: {what} does not parse: {err}", e.uri))
        };
        let uri = UriTemplate::parse(&e.uri).map_err(|err| internal("uri", err.to_string()))?;
        // Expanded, never matched: a variable may appear twice (config.rs allows it).
        let url = UriTemplate::parse_for_expansion(&e.url)
            .map_err(|err| internal("url", err.to_string()))?;
        let mut patterns = BTreeMap::new();
        for (name, p) in &e.params {
            if let Some(pat) = &p.pattern {
                let re = Regex::new(&format!("^(?:{pat})$"))
                    .map_err(|err| internal("pattern", err.to_string()))?;
                patterns.insert(name.clone(), re);
            }
        }
        Ok(Self {
            endpoint: e.clone(),
            uri: (!uri.variables().is_empty()).then_some(uri),
            url,
            patterns,
        })
    }
}

/// What a read fetches.
pub(crate) struct Target {
    /// The upstream URL of the first request.
    pub(crate) url: reqwest::Url,
    /// The endpoint (api), for headers and the MIME override; `None` on web mounts.
    pub(crate) endpoint: Option<usize>,
}

/// The api endpoint serving `uri` and its upstream URL. A URI no endpoint serves is not
/// found; a value an endpoint refuses (enum, pattern, a `.`/`..` segment) is invalid params.
pub(crate) fn api_target(endpoints: &[Compiled], uri: &str) -> Result<Target> {
    // Fixed URIs first: `api://w/beijing/current` beats `api://w/{city}/current`.
    if let Some(i) = endpoints
        .iter()
        .position(|c| c.uri.is_none() && c.endpoint.uri == uri)
    {
        let c = &endpoints[i];
        let url = expand(c, &BTreeMap::new(), uri)?;
        return Ok(Target {
            url,
            endpoint: Some(i),
        });
    }
    for (i, c) in endpoints.iter().enumerate() {
        let Some(t) = &c.uri else { continue };
        let Some(values) = t.matches(uri) else {
            continue;
        };
        check_values(c, &values, uri)?;
        let url = expand(c, &values, uri)?;
        return Ok(Target {
            url,
            endpoint: Some(i),
        });
    }
    Err(Error::not_found(uri))
}

/// The endpoint's `enum` and `pattern` checks.
fn check_values(c: &Compiled, values: &BTreeMap<String, String>, uri: &str) -> Result<()> {
    for (name, value) in values {
        let Some(spec) = c.endpoint.params.get(name) else {
            continue;
        };
        let bad = |why: String| {
            Error::invalid_params(format!("{uri}: parameter {name} = {value:?} {why}"))
                .with_uri(uri)
        };
        if let Some(allowed) = &spec.allowed
            && !allowed.iter().any(|a| a == value)
        {
            return Err(bad(format!("is not one of {allowed:?}")));
        }
        if let Some(re) = c.patterns.get(name)
            && !re.is_match(value)
        {
            return Err(bad(format!(
                "does not match the pattern {:?}",
                spec.pattern.as_deref().unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// Expand the URL template and parse the result. RFC 6570 simple expansion percent-encodes
/// everything but unreserved characters, so a value cannot add `/`, `?`, `#`, `@` or CR/LF;
/// what it can still do is be a whole `.` or `..` segment, which URL parsers resolve, so
/// those are refused here (also when percent-encoded, once or twice). What a value writes
/// into the path may also not hold an encoded `/` or `\` (unless the endpoint sets
/// `allow_encoded_slash`) nor, once decoded, a `.` or `..` segment (`..%2F..%2Fadmin`):
/// many upstreams decode before they route, and would climb out of the endpoint's path.
fn expand(c: &Compiled, values: &BTreeMap<String, String>, uri: &str) -> Result<reqwest::Url> {
    let pieces = c.url.expand_parts(values);
    let raw = pieces.concat();
    let after_scheme = raw.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = raw[after_scheme..]
        .find('/')
        .map(|i| i + after_scheme)
        .unwrap_or(raw.len());
    let path_end = raw[path_start..]
        .find(['?', '#'])
        .map(|i| i + path_start)
        .unwrap_or(raw.len());
    for seg in raw[path_start..path_end].split('/') {
        if is_dot_segment(seg) {
            return Err(Error::invalid_params(format!(
                "{uri}: a parameter value may not be a whole `.` or `..` path segment (plain or percent-encoded)"
            ))
            .with_uri(uri));
        }
    }
    // What each expression wrote inside the path (literals are the configuration's own).
    let mut at = 0;
    for (part, text) in c.url.parts().iter().zip(&pieces) {
        let start = at;
        at += text.len();
        if !matches!(part, Part::Expr(_)) || start < path_start || start >= path_end {
            continue;
        }
        let text = &text[..text.len().min(path_end - start)];
        match encoded_structure(text) {
            Some(Encoded::DotSegment) => {
                return Err(Error::invalid_params(format!(
                    "{uri}: a parameter value may not hold an encoded `.` or `..` path segment (such as `..%2F` or `%2E%2E`): an upstream that decodes it would resolve it"
                ))
                .with_uri(uri));
            }
            Some(Encoded::Separator) if !c.endpoint.allow_encoded_slash => {
                return Err(Error::invalid_params(format!(
                    "{uri}: a parameter value in the URL's path may not hold `/` or `\\` (sent encoded as %2F, %5C), which many upstreams decode before routing; an endpoint whose identifiers hold them sets allow_encoded_slash = true"
                ))
                .with_uri(uri));
            }
            _ => {}
        }
    }
    reqwest::Url::parse(&raw).map_err(|e| {
        Error::invalid_params(format!("{uri}: the values do not make a valid URL: {e}"))
            .with_uri(uri)
    })
}

/// What text in a URL's path hides from a parser that does not decode it.
#[derive(Debug, PartialEq, Eq)]
enum Encoded {
    /// An encoded `/` or `\` (`%2F`, `%5C`, also encoded again: `%252F`).
    Separator,
    /// A `.` or `..` segment once decoded and split at `/` and `\` (`..%2F`, `%5C.%2E`).
    DotSegment,
}

/// Whether `text` (part of a URL's path) holds, once percent-decoded up to three times, a
/// `.`/`..` segment or an encoded separator; a dot segment is the worse and wins. The text
/// as it is (before decoding) is not split for dots: its plain segments are checked whole
/// by [`is_dot_segment`], and a value's `..` next to a literal (`{id}.json`) is no segment.
fn encoded_structure(text: &str) -> Option<Encoded> {
    let mut s = text.to_owned();
    let mut separator = false;
    for round in 0..4 {
        if round > 0 && s.split(['/', '\\']).any(|p| p == "." || p == "..") {
            return Some(Encoded::DotSegment);
        }
        let lower = s.to_ascii_lowercase();
        separator |= lower.contains("%2f") || lower.contains("%5c");
        let next = percent_decode_str(&s).decode_utf8_lossy().into_owned();
        if next == s {
            break;
        }
        s = next;
    }
    separator.then_some(Encoded::Separator)
}

/// `.` or `..`, also after up to three rounds of percent-decoding.
fn is_dot_segment(seg: &str) -> bool {
    let mut s = seg.to_owned();
    for _ in 0..4 {
        if s == "." || s == ".." {
            return true;
        }
        let next = percent_decode_str(&s).decode_utf8_lossy().into_owned();
        if next == s {
            return false;
        }
        s = next;
    }
    false
}

/// The URL a web mount fetches for `uri`: an http(s) URL without userinfo whose normalised
/// form lies under one of `allow` at a boundary; `None` otherwise (not found).
pub(crate) fn web_url(allow: &[String], uri: &str) -> Option<reqwest::Url> {
    let mut url = reqwest::Url::parse(uri).ok()?;
    if !matches!(url.scheme(), "http" | "https")
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return None;
    }
    url.set_fragment(None);
    allowed(allow, &url).then_some(url)
}

/// Whether `url` (normalised by the parser: dot segments resolved) lies under a prefix at a
/// boundary: the prefix ends in `/`, or the URL goes on with `/`, `?` or ends. A path that
/// hides a dot segment behind encoding (`/docs/..%2Fadmin`, `/docs/%252e%252e/admin`) is under
/// no prefix: the parser left it in place, and an upstream that decodes it would climb out.
pub(crate) fn allowed(allow: &[String], url: &reqwest::Url) -> bool {
    if encoded_structure(url.path()) == Some(Encoded::DotSegment) {
        return false;
    }
    let s = url.as_str();
    allow.iter().any(|p| {
        s.strip_prefix(p.as_str()).is_some_and(|rest| {
            p.ends_with('/') || rest.is_empty() || rest.starts_with('/') || rest.starts_with('?')
        })
    })
}

/// The prefixes a mount claims in the router.
pub(crate) fn router_prefixes(config: &HttpConfig) -> Vec<String> {
    let mut out: Vec<String> = match config.kind {
        crate::HttpKind::Web => config.allow.clone(),
        crate::HttpKind::Api => config
            .endpoints
            .iter()
            .map(|e| api_prefix(&e.uri))
            .collect(),
    };
    out.sort();
    out.dedup();
    out
}

/// The literal start of an endpoint URI at a boundary the router honours: the whole URI
/// when fixed, else up to the last `/` before the first expression (or up to a query
/// expression, which starts at a boundary itself).
fn api_prefix(uri: &str) -> String {
    let Some(brace) = uri.find('{') else {
        return uri.to_owned();
    };
    let lit = &uri[..brace];
    if uri[brace..].starts_with("{?") || uri[brace..].starts_with("{#") || lit.ends_with('/') {
        return lit.to_owned();
    }
    match lit.rfind('/') {
        Some(i) if i >= "api://".len() => lit[..=i].to_owned(),
        _ => lit.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(uri: &str, url: &str) -> Compiled {
        Compiled::new(&Endpoint::new(uri, url)).unwrap()
    }

    #[test]
    fn values_cannot_change_structure() {
        let eps = [ep(
            "api://w/{city}/forecast",
            "https://h.example/v1/{city}/f?units=metric",
        )];
        let got = |u: &str| api_target(&eps, u).map(|t| t.url.to_string());
        assert_eq!(
            got("api://w/x%3Fy%3D1/forecast").unwrap(),
            "https://h.example/v1/x%3Fy%3D1/f?units=metric"
        );
        assert_eq!(
            got("api://w/a%23b/forecast").unwrap(),
            "https://h.example/v1/a%23b/f?units=metric"
        );
        assert_eq!(
            got("api://w/a%0D%0AX-Evil%3A%201/forecast").unwrap(),
            "https://h.example/v1/a%0D%0AX-Evil%3A%201/f?units=metric"
        );
        for dots in [
            "api://w/%2E%2E/forecast",
            "api://w/%2e/forecast",
            "api://w/%252e%252e/forecast",
        ] {
            let e = api_target(&eps, dots).err().expect(dots);
            assert_eq!(e.kind, mcpr_core::ErrorKind::InvalidParams, "{dots}");
        }
        assert_eq!(
            api_target(&eps, "api://w/a/b/forecast").err().unwrap().kind,
            mcpr_core::ErrorKind::NotFound
        );
    }

    /// A value that would reach the upstream as `..%2F..%2Fadmin%2Fkeys` is refused: servers
    /// that decode `%2F` before routing would serve `/admin/keys`. Encoded separators pass
    /// only where the endpoint opts in, and encoded dot segments never do.
    #[test]
    fn encoded_separators_and_dot_segments_in_path_values_are_refused() {
        let plain = ep(
            "api://w/users/{id}/profile",
            "https://h.example/v1/users/{id}/profile?q={id}",
        );
        let mut open = Endpoint::new(
            "api://w/users/{id}/profile",
            "https://h.example/v1/users/{id}/profile?q={id}",
        );
        open.allow_encoded_slash = true;
        let open = Compiled::new(&open).unwrap();
        let refused = |c: &Compiled, u: &str| {
            let e = api_target(std::slice::from_ref(c), u).err().expect(u);
            assert_eq!(e.kind, mcpr_core::ErrorKind::InvalidParams, "{u}: {e:?}");
            e.message
        };
        let url = |c: &Compiled, u: &str| {
            api_target(std::slice::from_ref(c), u)
                .map(|t| t.url.to_string())
                .unwrap_or_else(|e| panic!("{u}: {e:?}"))
        };
        // Dot segments hidden behind encoded separators or dots: refused, opted in or not.
        for u in [
            "api://w/users/..%2F..%2Fadmin%2Fkeys/profile",
            "api://w/users/..%5C..%5Cadmin/profile",
            "api://w/users/a%2F.%2E%2Fadmin/profile",
            "api://w/users/x%2F%252E%252E%2Fadmin/profile",
            "api://w/users/%252E%252E%252Fadmin/profile",
        ] {
            let m = refused(&plain, u);
            assert!(m.contains("`.` or `..`"), "{u}: {m}");
            let m = refused(&open, u);
            assert!(m.contains("`.` or `..`"), "{u}: {m}");
        }
        // Encoded separators alone: refused unless the endpoint allows them.
        for (u, sent) in [
            ("api://w/users/a%2Fb/profile", "a%2Fb"),
            ("api://w/users/a%5Cb/profile", "a%5Cb"),
            ("api://w/users/a%252Fb/profile", "a%252Fb"),
            (
                "api://w/users/http%3A%2F%2Fevil.example%2F/profile",
                "http%3A%2F%2Fevil.example%2F",
            ),
        ] {
            let m = refused(&plain, u);
            assert!(m.contains("allow_encoded_slash"), "{u}: {m}");
            assert_eq!(
                url(&open, u),
                format!("https://h.example/v1/users/{sent}/profile?q={sent}")
            );
        }
        // Ordinary values, and dots that are no segment, pass.
        assert_eq!(
            url(&plain, "api://w/users/a.b..c/profile"),
            "https://h.example/v1/users/a.b..c/profile?q=a.b..c"
        );
        let json = ep("api://w/users/{id}", "https://h.example/v1/users/{id}.json");
        assert_eq!(
            api_target(std::slice::from_ref(&json), "api://w/users/..")
                .unwrap()
                .url
                .as_str(),
            "https://h.example/v1/users/...json"
        );
        // In the query, a value's `/` is no path structure.
        let q = ep("api://w/s{?q}", "https://h.example/v1/search{?q}");
        assert_eq!(
            api_target(std::slice::from_ref(&q), "api://w/s?q=..%2F..%2Fadmin")
                .unwrap()
                .url
                .as_str(),
            "https://h.example/v1/search?q=..%2F..%2Fadmin"
        );
    }

    #[test]
    fn web_urls_stay_under_their_prefix() {
        let allow = vec!["https://d.example/docs/".to_owned()];
        assert!(web_url(&allow, "https://d.example/docs/a.html").is_some());
        assert!(web_url(&allow, "https://d.example/docs/../admin").is_none());
        assert!(web_url(&allow, "https://d.example/docs/%2e%2e/admin").is_none());
        // Dot segments the parser leaves alone because their separators are encoded.
        for hidden in [
            "https://d.example/docs/..%2Fadmin",
            "https://d.example/docs/..%2fadmin",
            "https://d.example/docs/..%5Cadmin",
            "https://d.example/docs/.%2E%2Fadmin",
            "https://d.example/docs/%2E%2E%2Fadmin",
            "https://d.example/docs/x/%252E%252E%252F..%252Fadmin",
            "https://d.example/docs/%252e%252e/admin",
        ] {
            assert!(web_url(&allow, hidden).is_none(), "{hidden}");
        }
        // An encoded separator with no dot segment cannot climb out.
        assert!(web_url(&allow, "https://d.example/docs/a%2Fb.html").is_some());
        assert!(web_url(&allow, "https://d.example/docs/v1..2.html").is_some());
        assert!(web_url(&allow, "https://u:p@d.example/docs/a").is_none());
        assert!(web_url(&allow, "http://d.example/docs/a").is_none());
        assert!(web_url(&allow, "https://d.example/docsx").is_none());
        let allow = vec!["https://d.example/guide".to_owned()];
        assert!(web_url(&allow, "https://d.example/guide/x").is_some());
        assert!(web_url(&allow, "https://d.example/guides").is_none());
    }

    #[test]
    fn prefixes() {
        assert_eq!(api_prefix("api://w/{city}/f"), "api://w/");
        assert_eq!(api_prefix("api://w/x"), "api://w/x");
        assert_eq!(api_prefix("api://w/a{b}"), "api://w/");
        assert_eq!(api_prefix("api://w{?q}"), "api://w");
    }
}
