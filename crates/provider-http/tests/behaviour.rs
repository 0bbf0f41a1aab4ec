//! The provider behaviour suite against a real HTTP upstream on loopback: an api mount
//! (fixed endpoints, templates with enum and pattern checks, completion, polling) and a web
//! mount (pages under an allow prefix, HTML as Markdown).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::{Doc, TestResolver, Upstream, loopback};
use mcpr_core::Provider;
use mcpr_provider_http::{Endpoint, HttpConfig, HttpProvider, ParamSpec};
use mcpr_testkit::{Fixture, run_suite};

struct ApiFx {
    up: Upstream,
    changes: AtomicUsize,
}

impl ApiFx {
    async fn build() -> Self {
        let up = Upstream::start().await;
        up.set(
            "/files/readme.json",
            Doc {
                etag: Some("\"r1\"".into()),
                ..Doc::new("application/json", r#"{"readme":"hello ünïcödé"}"#)
            },
        );
        up.set(
            "/files/logo.png",
            Doc::new("image/png", vec![0x89, b'P', b'N', b'G', 0, 0xff, 0xfe]),
        );
        up.set("/files/empty.txt", Doc::new("text/plain", ""));
        up.set(
            "/forecast/beijing",
            Doc::new("application/json", r#"{"city":"beijing"}"#),
        );
        Self {
            up,
            changes: AtomicUsize::new(0),
        }
    }

    fn config(&self) -> HttpConfig {
        let base = self.up.base();
        let mut forecast = Endpoint::new(
            "api://weather/{city}/forecast",
            format!("{base}/forecast/{{city}}"),
        );
        forecast.params.insert(
            "city".into(),
            ParamSpec {
                allowed: Some(vec!["beijing".into(), "berlin".into(), "shanghai".into()]),
                pattern: None,
            },
        );
        let mut files = Endpoint::new(
            "api://weather/files/{name}",
            format!("{base}/files/{{name}}"),
        );
        files.params.insert(
            "name".into(),
            ParamSpec {
                allowed: None,
                pattern: Some("[a-z]+\\.[a-z]+".into()),
            },
        );
        let fixed = |name: &str| {
            Endpoint::new(
                format!("api://weather/files/{name}"),
                format!("{base}/files/{name}"),
            )
        };
        let mut c = HttpConfig::api(
            "weather",
            vec![
                forecast,
                files,
                fixed("readme.json"),
                fixed("logo.png"),
                fixed("empty.txt"),
            ],
        );
        c.poll_interval = Duration::from_millis(100);
        // Reads in the suite must see modifications at once.
        c.default_ttl = Duration::ZERO;
        c
    }
}

#[async_trait]
impl Fixture for ApiFx {
    fn expected(&self) -> Vec<(String, Vec<u8>)> {
        let docs = self.up.state.docs.lock().unwrap();
        ["readme.json", "empty.txt", "logo.png"]
            .iter()
            .map(|n| {
                (
                    format!("api://weather/files/{n}"),
                    docs[&format!("/files/{n}")].body.clone(),
                )
            })
            .collect()
    }

    fn missing_uri(&self) -> String {
        // Matches the files template; the upstream answers 404.
        "api://weather/files/nothing.txt".into()
    }

    fn forbidden_uris(&self) -> Vec<String> {
        [
            "api://weather/files/a/b",
            "api://weather/files/../admin",
            "api://weather/nope",
            "api://weather/beijing/forecast/x",
            "api://weather/files/gone.json",
        ]
        .into_iter()
        .map(String::from)
        .collect()
    }

    async fn modify(&self, uri: &str) {
        let path = uri.strip_prefix("api://weather").unwrap();
        let n = self.changes.fetch_add(1, Ordering::SeqCst);
        self.up.update(path, |d| {
            d.body = format!(r#"{{"readme":"changed {n}"}}"#).into_bytes();
            d.etag = Some(format!("\"c{n}\""));
        });
    }

    async fn add(&self) -> String {
        unreachable!("api mounts do not declare list_changed")
    }

    fn completion_case(&self) -> Option<(String, String, String, String)> {
        Some((
            "api://weather/{city}/forecast".into(),
            "city".into(),
            "be".into(),
            "beijing".into(),
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_behaviour_suite() {
    let fx = ApiFx::build().await;
    let p: Arc<dyn Provider> = Arc::new(
        HttpProvider::with_network(fx.config(), Arc::new(TestResolver), loopback()).unwrap(),
    );
    let caps = p.info().capabilities;
    assert!(caps.list && caps.read && caps.templates && caps.complete && caps.watch);
    assert!(!caps.list_changed);
    run_suite(p, &fx).await;
}

struct WebFx {
    up: Upstream,
    changes: AtomicUsize,
}

const PAGE: &str = "<html><body><h1>Guide</h1><p>Read <em>this</em>.</p></body></html>";
const PAGE_MD: &str = "# Guide\n\nRead *this*.";

#[async_trait]
impl Fixture for WebFx {
    fn expected(&self) -> Vec<(String, Vec<u8>)> {
        let base = self.up.base();
        let docs = self.up.state.docs.lock().unwrap();
        vec![
            (
                format!("{base}/docs/notes.txt"),
                docs["/docs/notes.txt"].body.clone(),
            ),
            (
                format!("{base}/docs/guide.html"),
                PAGE_MD.as_bytes().to_vec(),
            ),
            (
                format!("{base}/docs/api.json"),
                docs["/docs/api.json"].body.clone(),
            ),
        ]
    }

    fn missing_uri(&self) -> String {
        format!("{}/docs/missing.html", self.up.base())
    }

    fn forbidden_uris(&self) -> Vec<String> {
        let base = self.up.base();
        vec![
            format!("{base}/docs/../secret.txt"),
            format!("{base}/docs/%2e%2e/secret.txt"),
            format!("{base}/docsx/notes.txt"),
            format!("{base}/secret.txt"),
            format!(
                "http://user:pw@up.test:{}/docs/notes.txt",
                self.up.addr.port()
            ),
        ]
    }

    async fn modify(&self, uri: &str) {
        let path = uri.strip_prefix(&self.up.base()).unwrap().to_owned();
        let n = self.changes.fetch_add(1, Ordering::SeqCst);
        self.up
            .update(&path, |d| d.body = format!("changed {n}\n").into_bytes());
    }

    async fn add(&self) -> String {
        unreachable!("web mounts do not declare list_changed")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_behaviour_suite() {
    let up = Upstream::start().await;
    let base = up.base();
    up.set("/docs/notes.txt", Doc::new("text/plain", "plain notes\n"));
    up.set("/docs/guide.html", Doc::new("text/html", PAGE));
    up.set(
        "/docs/api.json",
        Doc::new("application/json", "{\"x\":[1,2,3]}"),
    );
    up.set(
        "/secret.txt",
        Doc::new("text/plain", "outside the allow list"),
    );
    let mut c = HttpConfig::web(vec![format!("{base}/docs/")]);
    c.pages = ["notes.txt", "guide.html", "api.json"]
        .iter()
        .map(|p| format!("{base}/docs/{p}"))
        .collect();
    c.poll_interval = Duration::from_millis(100);
    c.default_ttl = Duration::ZERO;
    let fx = WebFx {
        up,
        changes: AtomicUsize::new(0),
    };
    let p: Arc<dyn Provider> =
        Arc::new(HttpProvider::with_network(c, Arc::new(TestResolver), loopback()).unwrap());
    let caps = p.info().capabilities;
    assert!(caps.templates && !caps.complete && !caps.list_changed);
    run_suite(p, &fx).await;
    assert_eq!(
        fx.up.count("/secret.txt"),
        0,
        "nothing outside the allow list"
    );
}
