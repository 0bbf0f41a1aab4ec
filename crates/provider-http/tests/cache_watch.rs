//! Caching and change notifications, counted at a real upstream on loopback: max-age,
//! no-store, default freshness, 304 revalidation with ETag and Last-Modified, cache hints,
//! body types, HTML as Markdown, and subscriptions that fire on a change and only then.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Doc, TestResolver, Upstream, loopback};
use mcpr_core::{
    CacheScope, ChangeBus, ChangeEvent, ChangeSink, ContentsBody, LocalBus, Provider, ReadLimits,
    ResourceUri,
};
use mcpr_provider_http::{Endpoint, Header, HtmlMode, HttpConfig, HttpProvider};

const LIMITS: ReadLimits = ReadLimits { max_bytes: 1 << 20 };

fn uri(s: &str) -> ResourceUri {
    ResourceUri::parse(s).unwrap()
}

fn provider(c: HttpConfig) -> HttpProvider {
    HttpProvider::with_network(c, Arc::new(TestResolver), loopback()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freshness_and_revalidation_counted_at_the_upstream() {
    let up = Upstream::start().await;
    let base = up.base();
    let doc = |cc: Option<&str>| Doc {
        cache_control: cc.map(str::to_owned),
        ..Doc::new("application/json", r#"{"v":1}"#)
    };
    up.set("/max-age", doc(Some("public, max-age=60")));
    up.set("/no-store", doc(Some("no-store")));
    up.set("/plain", doc(None));
    up.set("/private", doc(Some("private, max-age=30")));
    up.set(
        "/etag",
        Doc {
            etag: Some("\"v1\"".into()),
            ..doc(Some("no-cache"))
        },
    );
    up.set(
        "/lm",
        Doc {
            last_modified: Some("Sun, 06 Nov 1994 08:49:37 GMT".into()),
            ..doc(Some("max-age=0"))
        },
    );
    let names = ["max-age", "no-store", "plain", "private", "etag", "lm"];
    let mut eps: Vec<Endpoint> = names
        .iter()
        .map(|n| Endpoint::new(format!("api://c/{n}"), format!("{base}/{n}")))
        .collect();
    let mut creds = Endpoint::new("api://c/creds", format!("{base}/max-age"));
    creds.headers.push(Header {
        name: "X-Api-Key".into(),
        value: "k".into(),
    });
    eps.push(creds);
    let mut c = HttpConfig::api("c", eps);
    c.default_ttl = Duration::from_secs(60);
    let p = provider(c);
    let read2 = |name: &'static str| {
        let p = &p;
        async move {
            let u = uri(&format!("api://c/{name}"));
            let a = p.read(&u, &LIMITS).await.unwrap();
            let b = p.read(&u, &LIMITS).await.unwrap();
            assert_eq!(a.contents, b.contents, "{name}: same body both times");
            (a.hints.unwrap(), b.hints.unwrap())
        }
    };

    let (_, h) = read2("max-age").await;
    assert_eq!(up.count("/max-age"), 1, "max-age: the second read is a hit");
    assert!(h.ttl_ms > 50_000 && h.ttl_ms <= 60_000, "{h:?}");
    assert_eq!(h.scope, CacheScope::Public);

    let (_, h) = read2("no-store").await;
    assert_eq!(up.count("/no-store"), 2, "no-store: never reused");
    assert_eq!(h.ttl_ms, 0);

    read2("plain").await;
    assert_eq!(up.count("/plain"), 1, "default_ttl_ms keeps it");

    let (_, h) = read2("private").await;
    assert_eq!(up.count("/private"), 1);
    assert_eq!(h.scope, CacheScope::Private);

    let (_, h) = read2("creds").await;
    assert_eq!(h.scope, CacheScope::Private, "credentials make it private");

    let before = p.cache_counts();
    read2("etag").await;
    assert_eq!(up.count("/etag"), 2, "no-cache: asked every time");
    let second = up
        .seen()
        .into_iter()
        .filter(|s| s.line.contains("/etag"))
        .nth(1)
        .unwrap();
    assert!(
        second
            .headers
            .iter()
            .any(|(k, v)| k == "if-none-match" && v == "\"v1\""),
        "{:?}",
        second.headers
    );
    let after = p.cache_counts();
    assert_eq!(after.revalidations, before.revalidations + 1);
    // A new version is fetched whole.
    up.update("/etag", |d| {
        d.body = br#"{"v":2}"#.to_vec();
        d.etag = Some("\"v2\"".into());
    });
    let got = p
        .read(&uri("api://c/etag"), &LIMITS)
        .await
        .unwrap()
        .contents;
    assert_eq!(got[0].body, ContentsBody::Text(r#"{"v":2}"#.into()));

    read2("lm").await;
    let second = up
        .seen()
        .into_iter()
        .filter(|s| s.line.contains("/lm"))
        .nth(1)
        .unwrap();
    assert!(
        second
            .headers
            .iter()
            .any(|(k, v)| k == "if-modified-since" && v == "Sun, 06 Nov 1994 08:49:37 GMT"),
        "{:?}",
        second.headers
    );
    let c = p.cache_counts();
    assert!(
        c.hits >= 4 && c.misses >= 6 && c.revalidations == 2,
        "{c:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_become_text_markdown_or_blobs() {
    let up = Upstream::start().await;
    let base = up.base();
    let png = vec![0x89, b'P', b'N', b'G', 0, 0xff, 1, 2];
    up.set(
        "/site/data.json",
        Doc::new("application/json; charset=utf-8", "[1,2]"),
    );
    up.set("/site/logo.png", Doc::new("image/png", png.clone()));
    up.set(
        "/site/page.html",
        Doc::new(
            "text/html; charset=utf-8",
            "<html><head><title>T</title><script>evil()</script></head><body><h1>Hello</h1><p>A <a href=\"/x\">link</a>.</p></body></html>",
        ),
    );
    up.set(
        "/site/bad-utf8.txt",
        Doc::new("text/plain", vec![b'a', 0xff]),
    );
    let mut c = HttpConfig::web(vec![format!("{base}/site/")]);
    c.pages = vec![format!("{base}/site/page.html")];
    let p = provider(c.clone());
    async fn get(p: &HttpProvider, base: &str, path: &str) -> mcpr_core::Contents {
        let u = format!("{base}/site/{path}");
        p.read(&uri(&u), &LIMITS).await.unwrap().contents.remove(0)
    }
    let j = get(&p, &base, "data.json").await;
    assert_eq!(j.mime_type.as_deref(), Some("application/json"));
    assert_eq!(j.body, ContentsBody::Text("[1,2]".into()));
    let b = get(&p, &base, "logo.png").await;
    assert_eq!(b.mime_type.as_deref(), Some("image/png"));
    assert_eq!(b.body, ContentsBody::Blob(png));
    let m = get(&p, &base, "page.html").await;
    assert_eq!(m.mime_type.as_deref(), Some("text/markdown"));
    let ContentsBody::Text(md) = &m.body else {
        panic!("markdown is text")
    };
    assert!(md.contains("# Hello"), "{md}");
    assert!(md.contains(&format!("[link]({base}/x)")), "{md}");
    assert!(!md.contains("evil()") && !md.contains("<h1>"), "{md}");
    let bad = get(&p, &base, "bad-utf8.txt").await;
    assert_eq!(bad.body, ContentsBody::Blob(vec![b'a', 0xff]));
    c.html = HtmlMode::Raw;
    let raw = provider(c);
    let h = get(&raw, &base, "page.html").await;
    assert_eq!(h.mime_type.as_deref(), Some("text/html"));
    let ContentsBody::Text(html) = &h.body else {
        panic!("html is text")
    };
    assert!(html.contains("<h1>Hello</h1>"));
    // The MIME override of an api endpoint.
    let mut ep = Endpoint::new("api://m/x", format!("{base}/site/data.json"));
    ep.mime_type = Some("application/vnd.test+json".into());
    let p = provider(HttpConfig::api("m", vec![ep]));
    let got = p.read(&uri("api://m/x"), &LIMITS).await.unwrap().contents;
    assert_eq!(
        got[0].mime_type.as_deref(),
        Some("application/vnd.test+json")
    );
}

async fn next(
    rx: &mut tokio::sync::broadcast::Receiver<ChangeEvent>,
    ms: u64,
) -> Option<ChangeEvent> {
    tokio::time::timeout(Duration::from_millis(ms), rx.recv())
        .await
        .ok()
        .and_then(Result::ok)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_fire_on_change_and_only_then() {
    let up = Upstream::start().await;
    let base = up.base();
    up.set(
        "/w",
        Doc {
            etag: Some("\"1\"".into()),
            ..Doc::new("application/json", r#"{"n":1}"#)
        },
    );
    up.set("/nv", Doc::new("text/plain", "no validators"));
    let mut c = HttpConfig::api(
        "w",
        vec![
            Endpoint::new("api://w/x", format!("{base}/w")),
            Endpoint::new("api://w/nv", format!("{base}/nv")),
        ],
    );
    c.poll_interval = Duration::from_millis(100);
    let p = provider(c);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    // Two subscribers of one URI: one poller, one check per round.
    let g1 = p
        .watch(&uri("api://w/x"), ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    let g2 = p
        .watch(&uri("api://w/x"), ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    let g3 = p
        .watch(&uri("api://w/nv"), ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    assert!(p.watching());
    // Unchanged: silence, while conditional requests reach the upstream.
    assert_eq!(next(&mut rx, 700).await, None);
    let polls = up.count("/w ");
    assert!(polls >= 3, "polled {polls} times");
    let conditional = up
        .seen()
        .iter()
        .filter(|s| s.line.contains("/w "))
        .filter(|s| s.headers.iter().any(|(k, _)| k == "if-none-match"))
        .count();
    assert!(conditional >= 2, "{conditional} conditional polls");
    // Changed: one notification per subscriber of the URI.
    up.update("/w", |d| {
        d.body = br#"{"n":2}"#.to_vec();
        d.etag = Some("\"2\"".into());
    });
    for _ in 0..2 {
        match next(&mut rx, 2000).await {
            Some(ChangeEvent::Updated { uri }) => assert_eq!(uri, "api://w/x"),
            other => panic!("expected an update, got {other:?}"),
        }
    }
    assert_eq!(
        next(&mut rx, 500).await,
        None,
        "one change, one round of events"
    );
    // A body change without validators is seen by its hash.
    up.update("/nv", |d| d.body = b"changed".to_vec());
    match next(&mut rx, 2000).await {
        Some(ChangeEvent::Updated { uri }) => assert_eq!(uri, "api://w/nv"),
        other => panic!("expected an update of api://w/nv, got {other:?}"),
    }
    // A failing upstream is retried and notifies nobody; back to the same body, still silent.
    up.update("/w", |d| d.status = Some(503));
    assert_eq!(next(&mut rx, 700).await, None, "a failure is not a change");
    up.update("/w", |d| d.status = None);
    assert_eq!(
        next(&mut rx, 700).await,
        None,
        "same body after the failure"
    );
    drop((g1, g2, g3));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!p.watching(), "the poller stops with the last watch");
    let n = up.total();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(up.total(), n, "no polling after the last watch");
}

/// A change token is what the poll of the URI's upstream URL last saw: no request of its
/// own, the same while the body is (a `Last-Modified` that moves over the same body
/// included), another after a change the watch reported, `gone` for a 404, and none for a
/// URI nobody watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_tokens_are_what_the_poll_saw() {
    let up = Upstream::start().await;
    let base = up.base();
    up.set(
        "/w",
        Doc {
            etag: Some("\"1\"".into()),
            ..Doc::new("application/json", r#"{"n":1}"#)
        },
    );
    up.set(
        "/lm",
        Doc {
            last_modified: Some("Sun, 06 Nov 1994 08:49:37 GMT".into()),
            ..Doc::new("text/plain", "dated")
        },
    );
    let endpoints = vec![
        Endpoint::new("api://w/x", format!("{base}/w")),
        Endpoint::new("api://w/lm", format!("{base}/lm")),
    ];
    // Polling once a minute: every request below is a first look.
    let mut c = HttpConfig::api("w", endpoints.clone());
    c.poll_interval = Duration::from_secs(60);
    let slow = provider(c);
    assert_eq!(slow.change_token(&uri("api://w/x")).await, None);
    assert_eq!(up.total(), 0, "no request for a token");
    let bus = Arc::new(LocalBus::default());
    let g = slow
        .watch(&uri("api://w/x"), ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    let first = up.total();
    let t = slow.change_token(&uri("api://w/x")).await.expect("watched");
    up.update("/w", |d| d.body = br#"{"n":9}"#.to_vec());
    for _ in 0..50 {
        assert_eq!(
            slow.change_token(&uri("api://w/x")).await.as_ref(),
            Some(&t)
        );
        assert_eq!(slow.change_token(&uri("api://w/lm")).await, None);
    }
    assert_eq!(up.total(), first, "tokens cost no request");
    drop(g);
    up.update("/w", |d| d.body = br#"{"n":1}"#.to_vec());

    let mut c = HttpConfig::api("w", endpoints);
    c.poll_interval = Duration::from_millis(100);
    let p = provider(c);
    let mut rx = bus.subscribe();
    let _gx = p
        .watch(&uri("api://w/x"), ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    let _gl = p
        .watch(&uri("api://w/lm"), ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    let tx = p.change_token(&uri("api://w/x")).await.expect("watched");
    let tl = p.change_token(&uri("api://w/lm")).await.expect("watched");
    assert_eq!(tx, t, "the same state on another mount of it");
    assert_ne!(tx, tl);
    // A new date over the same body: polled again, no change, the same token.
    up.update("/lm", |d| {
        d.last_modified = Some("Mon, 07 Nov 1994 08:49:37 GMT".into())
    });
    assert_eq!(next(&mut rx, 600).await, None);
    assert_eq!(p.change_token(&uri("api://w/x")).await.as_ref(), Some(&tx));
    assert_eq!(p.change_token(&uri("api://w/lm")).await.as_ref(), Some(&tl));
    // Changed, by its ETag and body, and by its body alone.
    up.update("/w", |d| {
        d.body = br#"{"n":2}"#.to_vec();
        d.etag = Some("\"2\"".into());
    });
    assert!(matches!(
        next(&mut rx, 2000).await,
        Some(ChangeEvent::Updated { .. })
    ));
    let tx2 = p.change_token(&uri("api://w/x")).await.expect("watched");
    assert_ne!(tx2, tx);
    up.update("/lm", |d| {
        d.body = b"dated, then changed".to_vec();
        d.last_modified = Some("Tue, 08 Nov 1994 08:49:37 GMT".into());
    });
    assert!(matches!(
        next(&mut rx, 2000).await,
        Some(ChangeEvent::Updated { .. })
    ));
    assert_ne!(p.change_token(&uri("api://w/lm")).await.as_ref(), Some(&tl));
    up.update("/w", |d| d.status = Some(404));
    assert!(matches!(
        next(&mut rx, 2000).await,
        Some(ChangeEvent::Updated { .. })
    ));
    assert_eq!(
        p.change_token(&uri("api://w/x")).await.as_deref(),
        Some("gone")
    );
}

/// Readers that miss a cold cache together cost one upstream request: the others wait for it
/// and are served from the cache. An answer that may not be cached is still fetched by each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_share_one_upstream_request() {
    let up = Upstream::start().await;
    let base = up.base();
    // Two chunks 100 ms apart: every reader arrives while the first fetch is in flight.
    let slow = |cc: &str| Doc {
        cache_control: Some(cc.into()),
        chunked: Some(4),
        delay: Duration::from_millis(100),
        ..Doc::new("application/json", r#"{"v":1}"#)
    };
    up.set("/shared", slow("max-age=60"));
    up.set("/each", slow("no-store"));
    let eps = ["shared", "each"]
        .iter()
        .map(|n| Endpoint::new(format!("api://c/{n}"), format!("{base}/{n}")))
        .collect();
    let p = Arc::new(provider(HttpConfig::api("c", eps)));
    let burst = |name: &'static str| {
        let reads = (0..20).map(|_| {
            let p = p.clone();
            tokio::spawn(async move { p.read(&uri(&format!("api://c/{name}")), &LIMITS).await })
        });
        futures::future::join_all(reads)
    };
    for r in burst("shared").await {
        let c = r.unwrap().unwrap().contents;
        assert_eq!(c[0].body, ContentsBody::Text(r#"{"v":1}"#.into()));
    }
    assert_eq!(
        up.count("/shared"),
        1,
        "one fetch for 20 concurrent readers"
    );
    for r in burst("each").await {
        r.unwrap().unwrap();
    }
    assert_eq!(up.count("/each"), 20, "no-store: every reader fetches");
}
