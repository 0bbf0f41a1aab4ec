//! Secrets (header values, URL userinfo) reach the upstream and nothing else: not the list,
//! the templates, the provider's info, errors of any kind, nor logs at TRACE level (ours,
//! reqwest's and hyper's, captured through a global subscriber in this test binary of its
//! own).

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Doc, TestResolver, Upstream, loopback};
use mcpr_core::{PageRequest, Provider, ReadLimits, ResourceUri};
use mcpr_provider_http::{Endpoint, Header, HttpConfig, HttpProvider};

const TOKEN: &str = "tok-SECRET-4711";
const PASSWORD: &str = "pw-SECRET-0815";

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_appear_in_no_answer_error_or_log() {
    let buf = Buf::default();
    let writer = buf.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .try_init()
        .expect("this test binary installs the only subscriber");

    let up = Upstream::start().await;
    let port = up.addr.port();
    up.set("/ok", Doc::new("application/json", "{}"));
    up.set(
        "/fail",
        Doc {
            status: Some(500),
            ..Doc::default()
        },
    );
    up.set(
        "/redirect",
        Doc {
            status: Some(302),
            location: Some("http://10.0.0.7/".into()),
            ..Doc::default()
        },
    );
    up.set(
        "/slow",
        Doc {
            chunked: Some(1),
            delay: Duration::from_millis(300),
            ..Doc::new("text/plain", "slow body")
        },
    );
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    let ep = |name: &str, url: String| {
        let mut e = Endpoint::new(format!("api://s/{name}"), url);
        e.description = Some(format!("the {name} endpoint"));
        e.headers.push(Header {
            name: "Authorization".into(),
            value: format!("Bearer {TOKEN}"),
        });
        e
    };
    let userinfo = |path: &str| format!("http://user:{PASSWORD}@up.test:{port}{path}");
    let mut c = HttpConfig::api(
        "s",
        vec![
            ep("ok", userinfo("/ok")),
            ep("fail", userinfo("/fail")),
            ep("redirect", userinfo("/redirect")),
            ep("slow", userinfo("/slow")),
            ep("missing", userinfo("/missing")),
            ep(
                "dead",
                format!("http://user:{PASSWORD}@up.test:{dead_port}/x"),
            ),
            ep(
                "{id}",
                format!("http://user:{PASSWORD}@up.test:{port}/t/{{id}}"),
            ),
        ],
    );
    c.timeout = Duration::from_millis(500);
    let mut answers = format!("{c:?}");
    let p = HttpProvider::with_network(c, Arc::new(TestResolver), loopback()).unwrap();
    answers.push_str(&format!("{:?}", p.info()));
    answers.push_str(&format!("{:?}", p.templates()));
    let page = p
        .list(PageRequest {
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    answers.push_str(&format!("{page:?}"));
    let limits = ReadLimits { max_bytes: 1 << 20 };
    let ok = p
        .read(&ResourceUri::parse("api://s/ok").unwrap(), &limits)
        .await
        .unwrap()
        .contents;
    answers.push_str(&format!("{ok:?}"));
    let mut failures = 0;
    for name in ["fail", "redirect", "slow", "missing", "dead"] {
        let e = p
            .read(
                &ResourceUri::parse(&format!("api://s/{name}")).unwrap(),
                &limits,
            )
            .await
            .unwrap_err();
        failures += 1;
        answers.push_str(&format!("{e:?} {e}"));
    }
    assert_eq!(failures, 5);
    // The upstream did get the credentials: the test is about where else they go.
    let seen = up.seen();
    let auth: Vec<&String> = seen
        .iter()
        .flat_map(|s| s.headers.iter())
        .filter(|(k, _)| k == "authorization")
        .map(|(_, v)| v)
        .collect();
    assert!(auth.iter().any(|v| v.contains(TOKEN)), "{auth:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let logs = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    assert!(
        logs.contains("api://s/fail"),
        "the capture works and holds our debug lines: {logs}"
    );
    assert!(
        logs.contains("reqwest") || logs.contains("hyper"),
        "the HTTP stack's own log lines are captured too: {logs}"
    );
    for secret in [TOKEN, PASSWORD] {
        assert!(
            !answers.contains(secret),
            "{secret} in an answer: {answers}"
        );
        assert!(!logs.contains(secret), "{secret} in the logs: {logs}");
    }
}
