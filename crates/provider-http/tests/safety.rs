//! The SSRF guard and template safety against a real upstream on loopback: every template
//! attack checked against the raw request line the upstream received, names and IP literals
//! of non-public addresses, redirects re-checked hop by hop, and the body limit and timeout
//! enforced while streaming.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Doc, TestResolver, Upstream, loopback};
use mcpr_core::{ContentsBody, ErrorKind, Provider, ReadLimits, ResourceUri};
use mcpr_provider_http::{Endpoint, Header, HttpConfig, HttpProvider};

const LIMITS: ReadLimits = ReadLimits { max_bytes: 1 << 20 };

fn api(up: &Upstream, endpoints: Vec<Endpoint>) -> HttpProvider {
    let _ = up;
    let mut c = HttpConfig::api("t", endpoints);
    c.timeout = Duration::from_secs(5);
    HttpProvider::with_network(c, Arc::new(TestResolver), loopback()).unwrap()
}

async fn read(p: &HttpProvider, uri: &str) -> mcpr_core::Result<String> {
    let c = p
        .read(&ResourceUri::parse(uri).unwrap(), &LIMITS)
        .await?
        .contents
        .remove(0);
    match c.body {
        ContentsBody::Text(t) => Ok(t),
        ContentsBody::Blob(b) => Ok(format!("<{} bytes>", b.len())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_values_never_change_the_request_structure() {
    let up = Upstream::start().await;
    let base = up.base();
    let p = api(
        &up,
        vec![
            Endpoint::new("api://t/{v}/x", format!("{base}/echo/{{v}}/x?units=metric")),
            Endpoint::new("api://t/search{?q}", format!("{base}/echo/search{{?q}}")),
        ],
    );
    // (resource URI, the request line the upstream must see)
    // (Encoded `/` and dot segments: `encoded_separators_and_dot_segments_never_reach_the_upstream`.)
    let served = [
        ("api://t/x%3Fy%3D1/x", "/echo/x%3Fy%3D1/x?units=metric"),
        ("api://t/a%23b/x", "/echo/a%23b/x?units=metric"),
        (
            "api://t/a%0D%0AX-Injected%3A%201/x",
            "/echo/a%0D%0AX-Injected%3A%201/x?units=metric",
        ),
        (
            "api://t/search?q=a%26admin%3D1%23f",
            "/echo/search?q=a%26admin%3D1%23f",
        ),
    ];
    for (uri, target) in served {
        let before = up.total();
        let body = read(&p, uri).await.unwrap_or_else(|e| panic!("{uri}: {e}"));
        let want = format!("GET {target} HTTP/1.1");
        assert_eq!(body, want, "{uri}");
        let seen = up.seen();
        assert_eq!(seen.len(), before + 1, "{uri}: one request");
        let last = seen.last().unwrap();
        assert_eq!(last.line, want, "{uri}");
        assert!(
            last.headers
                .iter()
                .all(|(k, _)| k != "x-injected" && k != "admin"),
            "{uri}: injected header {:?}",
            last.headers
        );
        let host = last.headers.iter().find(|(k, _)| k == "host").unwrap();
        assert_eq!(host.1, format!("up.test:{}", up.addr.port()), "{uri}");
    }
    // Whole `.`/`..` segments, plain or percent-encoded (once or twice), are refused
    // before any request.
    let before = up.total();
    for uri in [
        "api://t/../x",
        "api://t/./x",
        "api://t/%2e%2e/x",
        "api://t/%2E/x",
        "api://t/%252e%252e/x",
    ] {
        let e = read(&p, uri).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParams, "{uri}: {e}");
        assert!(e.message.contains("`..` path segment"), "{uri}: {e}");
    }
    // Raw structure in the URI does not match the template at all.
    for uri in ["api://t/a/b/x", "api://t/x?y=1/x", "api://t/a#b/x"] {
        let e = read(&p, uri).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{uri}: {e}");
    }
    assert_eq!(
        up.total(),
        before,
        "refused reads must not reach the upstream"
    );
}

/// Upstreams that decode `%2F` before routing would serve `/admin/keys` for
/// `/users/..%2F..%2Fadmin%2Fkeys/profile`: such values are refused before any request, an
/// encoded `/` passes only where the endpoint opts in, and a web URL hiding a dot segment
/// behind encoding is outside its allow prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_separators_and_dot_segments_never_reach_the_upstream() {
    let up = Upstream::start().await;
    let base = up.base();
    let mut opted = Endpoint::new("api://t/repo/{id}", format!("{base}/echo/projects/{{id}}"));
    opted.allow_encoded_slash = true;
    let p = api(
        &up,
        vec![
            Endpoint::new(
                "api://t/users/{id}/profile",
                format!("{base}/echo/users/{{id}}/profile"),
            ),
            opted,
        ],
    );
    let before = up.total();
    for uri in [
        "api://t/users/..%2F..%2Fadmin%2Fkeys/profile",
        "api://t/users/..%5Cadmin/profile",
        "api://t/users/%2E%2E%2Fadmin/profile",
        "api://t/users/.%2E%2Fadmin/profile",
        "api://t/users/%252E%252E%252Fadmin/profile",
        "api://t/repo/..%2F..%2Fadmin",
        "api://t/repo/group%2F.%2E%2Fadmin",
    ] {
        let e = read(&p, uri).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParams, "{uri}: {e}");
        assert!(e.message.contains("`.` or `..` path segment"), "{uri}: {e}");
    }
    for uri in [
        "api://t/users/a%2Fb/profile",
        "api://t/users/a%5Cb/profile",
        "api://t/users/%2F/profile",
        "api://t/users/http%3A%2F%2Fevil.test%2Fx/profile",
    ] {
        let e = read(&p, uri).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParams, "{uri}: {e}");
        assert!(
            e.message.contains("allow_encoded_slash = true"),
            "{uri}: {e}"
        );
    }
    assert_eq!(
        up.total(),
        before,
        "refused reads must not reach the upstream"
    );
    // The endpoint that opts in sends an encoded `/` as it is.
    assert_eq!(
        read(&p, "api://t/repo/group%2Fproject").await.unwrap(),
        "GET /echo/projects/group%2Fproject HTTP/1.1"
    );

    // Web mounts: `/docs/..%2Fadmin` is not under `/docs/`.
    up.set("/docs/a%2Fb", Doc::new("text/plain", "slashed name"));
    let mut c = HttpConfig::web(vec![format!("{base}/docs/")]);
    c.timeout = Duration::from_secs(5);
    let w = HttpProvider::with_network(c, Arc::new(TestResolver), loopback()).unwrap();
    let before = up.total();
    for path in [
        "/docs/..%2Fadmin",
        "/docs/..%2fadmin%2Fkeys",
        "/docs/..%5Cadmin",
        "/docs/.%2E%2Fadmin",
        "/docs/x/%252E%252E%252F..%252Fadmin",
    ] {
        let e = read(&w, &format!("{base}{path}")).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{path}: {e}");
    }
    assert_eq!(
        up.total(),
        before,
        "refused reads must not reach the upstream"
    );
    // An encoded `/` alone cannot leave the prefix.
    assert_eq!(
        read(&w, &format!("{base}/docs/a%2Fb")).await.unwrap(),
        "slashed name"
    );
    // Nor may a redirect lead there.
    up.set(
        "/docs/jump",
        Doc {
            status: Some(302),
            location: Some("/docs/..%2Fadmin".to_owned()),
            ..Doc::default()
        },
    );
    let e = read(&w, &format!("{base}/docs/jump")).await.unwrap_err();
    assert!(e.message.contains("outside the mount's allow list"), "{e}");
    assert_eq!(up.count("admin"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_public_addresses_are_refused_before_connecting() {
    let up = Upstream::start().await;
    let port = up.addr.port();
    up.set("/a", Doc::new("text/plain", "hello"));
    let allow = vec![
        format!("http://up.test:{port}/"),
        format!("http://private.test:{port}/"),
        "http://meta.test/".to_owned(),
        format!("http://mapped.test:{port}/"),
        format!("http://127.0.0.1:{port}/"),
        format!("http://[::ffff:7f00:1]:{port}/"),
    ];
    let mut c = HttpConfig::web(allow.clone());
    c.timeout = Duration::from_secs(5);
    // No exemption: the loopback upstream is as forbidden as any private address.
    let p = HttpProvider::with_resolver(c.clone(), Arc::new(TestResolver)).unwrap();
    for prefix in &allow {
        let uri = format!("{prefix}a");
        let e = read(&p, &uri).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParams, "{uri}: {e}");
        assert!(e.message.contains("refused"), "{uri}: {e}");
        assert!(e.message.contains("non-public"), "{uri}: {e}");
    }
    assert_eq!(up.total(), 0, "nothing may reach a forbidden address");
    // allow_private = true opens them (the upstream is really there).
    c.allow_private = true;
    let p = HttpProvider::with_resolver(c, Arc::new(TestResolver)).unwrap();
    assert_eq!(
        read(&p, &format!("http://up.test:{port}/a")).await.unwrap(),
        "hello"
    );
    assert_eq!(
        read(&p, &format!("http://mapped.test:{port}/a"))
            .await
            .unwrap(),
        "hello"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_redirect_is_rechecked() {
    let up = Upstream::start().await;
    let base = up.base();
    let port = up.addr.port();
    let redirect = |to: &str| Doc {
        status: Some(302),
        location: Some(to.to_owned()),
        ..Doc::default()
    };
    up.set("/data/a", Doc::new("application/json", r#"{"a":1}"#));
    up.set("/r/ok", redirect("/data/a"));
    up.set("/r/private-ip", redirect("http://10.0.0.7/x"));
    up.set(
        "/r/meta",
        redirect("http://169.254.169.254/latest/meta-data/"),
    );
    up.set("/r/mapped", redirect("http://[::ffff:a9fe:a9fe]/"));
    up.set(
        "/r/private-name",
        redirect(&format!("http://private.test:{port}/data/a")),
    );
    up.set("/r/ftp", redirect("ftp://up.test/x"));
    for i in 0..7 {
        up.set(
            &format!("/r/chain{i}"),
            redirect(&format!("/r/chain{}", i + 1)),
        );
    }
    up.set("/r/chain7", Doc::new("text/plain", "end of chain"));
    // A redirect to another origin must not carry the endpoint's credentials.
    up.set(
        "/r/other-origin",
        redirect(&format!("http://127.0.0.1:{port}/data/a")),
    );
    let ep = |name: &str| Endpoint::new(format!("api://t/{name}"), format!("{base}/r/{name}"));
    let mut creds = ep("other-origin");
    creds.headers.push(Header {
        name: "Authorization".into(),
        value: "Bearer sekrit-token".into(),
    });
    let p = api(
        &up,
        vec![
            ep("ok"),
            ep("private-ip"),
            ep("meta"),
            ep("mapped"),
            ep("private-name"),
            ep("ftp"),
            ep("chain0"),
            ep("chain2"),
            creds,
        ],
    );
    assert_eq!(read(&p, "api://t/ok").await.unwrap(), r#"{"a":1}"#);
    for name in ["private-ip", "meta", "mapped", "private-name", "ftp"] {
        let e = read(&p, &format!("api://t/{name}")).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParams, "{name}: {e}");
        assert!(e.message.contains("refused"), "{name}: {e}");
    }
    // Seven redirects against max_redirects = 5; five are fine.
    let e = read(&p, "api://t/chain0").await.unwrap_err();
    assert!(e.message.contains("more than 5 redirects"), "{e}");
    assert_eq!(read(&p, "api://t/chain2").await.unwrap(), "end of chain");
    assert_eq!(
        read(&p, "api://t/other-origin").await.unwrap(),
        r#"{"a":1}"#
    );
    let seen = up.seen();
    let first = seen
        .iter()
        .find(|s| s.line.contains("/r/other-origin"))
        .unwrap();
    assert!(
        first
            .headers
            .iter()
            .any(|(k, v)| k == "authorization" && v == "Bearer sekrit-token"),
        "the configured origin gets the header"
    );
    let hop = seen
        .iter()
        .rev()
        .find(|s| s.line.contains("/data/a"))
        .unwrap();
    assert!(
        hop.headers.iter().all(|(k, _)| k != "authorization"),
        "another origin must not get the credentials: {:?}",
        hop.headers
    );

    // Web mounts: every hop must stay on the allow list.
    up.set("/site/page", Doc::new("text/plain", "page"));
    up.set("/site/away", redirect("/outside/x"));
    up.set("/site/back", redirect("/site/page"));
    let mut c = HttpConfig::web(vec![format!("{base}/site/")]);
    c.timeout = Duration::from_secs(5);
    let w = HttpProvider::with_network(c, Arc::new(TestResolver), loopback()).unwrap();
    assert_eq!(
        read(&w, &format!("{base}/site/back")).await.unwrap(),
        "page"
    );
    let e = read(&w, &format!("{base}/site/away")).await.unwrap_err();
    assert!(e.message.contains("outside the mount's allow list"), "{e}");
    assert_eq!(up.count("/outside/"), 0);
    let e = read(&w, &format!("{base}/outside/x")).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_held_to_the_limit_while_streaming() {
    let up = Upstream::start().await;
    let base = up.base();
    up.set("/big", Doc::new("text/plain", vec![b'a'; 100_000]));
    up.set(
        "/chunked",
        Doc {
            chunked: Some(1000),
            ..Doc::new("text/plain", vec![b'b'; 100_000])
        },
    );
    up.set(
        "/endless",
        Doc {
            endless: true,
            ..Doc::new("text/plain", "")
        },
    );
    up.set(
        "/slow",
        Doc {
            chunked: Some(10),
            delay: Duration::from_millis(200),
            ..Doc::new("text/plain", vec![b'c'; 100])
        },
    );
    let ep = |name: &str| Endpoint::new(format!("api://t/{name}"), format!("{base}/{name}"));
    let mut c = HttpConfig::api(
        "t",
        vec![ep("big"), ep("chunked"), ep("endless"), ep("slow")],
    );
    c.timeout = Duration::from_millis(700);
    let p = HttpProvider::with_network(c, Arc::new(TestResolver), loopback()).unwrap();
    let small = ReadLimits { max_bytes: 10_000 };
    let r = |uri: &'static str| {
        let p = &p;
        async move { p.read(&ResourceUri::parse(uri).unwrap(), &small).await }
    };
    let e = r("api://t/big").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooLarge);
    assert!(
        e.message.contains("100000 bytes") && e.message.contains("10000 bytes"),
        "{e}"
    );
    let e = r("api://t/chunked").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooLarge, "{e}");
    assert_eq!(
        e.message,
        "api://t/chunked: the upstream's body is more than the limit of 10000 bytes (max_read_bytes); it was read only up to the limit"
    );
    // An endless body ends in TooLarge, not in a timeout: reading stopped at the limit.
    let e = r("api://t/endless").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooLarge, "{e}");
    // Exactly at the limit is fine.
    let ok = p
        .read(
            &ResourceUri::parse("api://t/big").unwrap(),
            &ReadLimits { max_bytes: 100_000 },
        )
        .await
        .unwrap()
        .contents;
    assert_eq!(ok.len(), 1);
    // A body that trickles past timeout_ms.
    let started = std::time::Instant::now();
    let e = r("api://t/slow").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(e.message.contains("timed out after 700 ms"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_are_errors_not_resources() {
    let up = Upstream::start().await;
    let base = up.base();
    for code in [404u16, 410, 403, 500, 503] {
        up.set(
            &format!("/s/{code}"),
            Doc {
                status: Some(code),
                ..Doc::default()
            },
        );
    }
    // A port where nothing listens.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    let p = api(
        &up,
        vec![
            Endpoint::new("api://t/s/{code}", format!("{base}/s/{{code}}")),
            Endpoint::new("api://t/dead", format!("http://up.test:{dead_port}/x")),
        ],
    );
    for code in [404, 410] {
        let uri = format!("api://t/s/{code}");
        let e = read(&p, &uri).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{code}");
        assert_eq!(e.uri.as_deref(), Some(uri.as_str()));
    }
    for code in [403, 500, 503] {
        let e = read(&p, &format!("api://t/s/{code}")).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{code}");
        assert!(e.message.contains(&format!("HTTP {code}")), "{e}");
        assert!(!e.message.contains("error page"), "{e}");
    }
    let e = read(&p, "api://t/dead").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains("cannot connect"), "{e}");
}
