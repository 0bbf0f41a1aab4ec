//! The api provider's expansion of endpoint URL templates into upstream URLs: whatever URI a
//! client sends, the URL keeps the endpoint's scheme, host and port, gains no path segment,
//! query key, fragment or userinfo, and carries no whitespace or control character (which
//! could start a header).

#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcpr_core::UriTemplate;
use mcpr_provider_http::Endpoint;
use mcpr_provider_http::fuzzing::api_url;

/// Endpoint shapes the config accepts (every operator but `+` and `#`, which it refuses).
const ENDPOINTS: &[(&str, &str)] = &[
    (
        "api://w/{city}/forecast",
        "https://h.example/v1/{city}/f?units=metric",
    ),
    ("api://w/fixed", "https://h.example/v1/fixed"),
    (
        "api://s/search{?q,page}",
        "https://s.example:8443/find{?q,page}",
    ),
    (
        "api://r/{owner}/{repo}/issues{?state,labels}",
        "https://api.example/repos/{owner}/{repo}/issues{?state}{&labels}",
    ),
    ("api://p/{a}{/b,c}", "http://127.0.0.1:9/p/{a}{/b,c}"),
    ("api://m/{x}.{y}", "https://m.example/m{.x,y}{;x}?k={y}"),
    (
        "api://e/{id:3}/{list*}",
        "https://e.example/e/{id:3}/{list*}",
    ),
];

fn endpoints() -> &'static [Endpoint] {
    static E: OnceLock<Vec<Endpoint>> = OnceLock::new();
    E.get_or_init(|| {
        ENDPOINTS
            .iter()
            .map(|(u, l)| Endpoint::new(*u, *l))
            .collect()
    })
}

/// The URL of endpoint `i` with every variable set to a plain value: its structure.
fn reference(i: usize) -> url::Url {
    let t = UriTemplate::parse_for_expansion(ENDPOINTS[i].1).expect("template");
    let vars: BTreeMap<String, String> = t
        .variables()
        .into_iter()
        .map(|v| (v.to_owned(), "v".to_owned()))
        .collect();
    url::Url::parse(&t.expand(&vars)).expect("reference URL")
}

fn segments(u: &url::Url) -> usize {
    u.path_segments().map_or(0, |s| s.count())
}

fn keys(u: &url::Url) -> BTreeSet<String> {
    u.query_pairs().map(|(k, _)| k.into_owned()).collect()
}

fuzz_target!(|uri: &str| {
    let Ok(url) = api_url(endpoints(), uri) else {
        return;
    };
    let s = url.as_str();
    assert!(
        !s.chars().any(|c| c.is_whitespace() || c.is_control()),
        "{uri} -> {s}"
    );
    assert!(
        url.username().is_empty() && url.password().is_none(),
        "{uri} -> {s}"
    );
    assert!(url.fragment().is_none(), "{uri} -> {s}");
    // The endpoint that served it: a fixed URI first, then the first template matching.
    let served = ENDPOINTS.iter().position(|(u, _)| *u == uri).or_else(|| {
        ENDPOINTS.iter().position(|(u, _)| {
            u.contains('{')
                && UriTemplate::parse(u)
                    .expect("template")
                    .matches(uri)
                    .is_some()
        })
    });
    let i = served.unwrap_or_else(|| panic!("{uri} -> {s}: no endpoint serves it"));
    let r = reference(i);
    assert_eq!(url.scheme(), r.scheme(), "{uri} -> {s}");
    assert_eq!(url.host_str(), r.host_str(), "{uri} -> {s}");
    assert_eq!(url.port(), r.port(), "{uri} -> {s}");
    assert!(
        segments(&url) <= segments(&r),
        "{uri} -> {s}: a segment was added to {r}"
    );
    assert!(
        keys(&url).is_subset(&keys(&r)),
        "{uri} -> {s}: a query key was added to {r}"
    );
});
