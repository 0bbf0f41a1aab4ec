//! Upstreams cut off from the built binary, each for 30 s, by cutting a link in network
//! namespaces: an S3 store (moto), a PostgreSQL database and an HTTP api, beside a files
//! mount that is never cut. The server runs in a namespace of its own (`ip netns exec`)
//! with four veth links to the test's namespace: a client link, never cut, for the test's
//! requests, `/readyz`, `/healthz` and the listening streams; and one link per upstream,
//! cut with `ip link set DEV down` at the test's end and healed with `up`. The kernel here
//! has no `sch_netem`, so a cut is a cut, not a slow or lossy link: the server's end only
//! loses its carrier and its packets are dropped: nothing comes back, no refusal, no reset,
//! and its requests hang. Once its neighbour entry for the upstream has failed (about 3 s),
//! its own kernel fails a new connection with "No route to host", as on a real network
//! where the upstream's host vanished from the link. The api's server listens on its
//! link's address in the test's namespace; moto and PostgreSQL listen on loopback there,
//! so each is reached through a plain forwarding relay bound to its link's address (the
//! relay is never cut, only the link).
//!
//! At each heal the report gives the server's connections to that upstream (`ss` in its
//! namespace). Every run so far found none established: only connections it had given up
//! (FIN-WAIT-1), new attempts (SYN-SENT) and TIME-WAIT. With a read every second, every
//! connection the cut catches carries a request, which the server abandons at its timeout,
//! closing the connection; recovery is new connections. So the case of connections that
//! live through the cut and meet a reset after it (a far end or a NAT that forgot them) is
//! not staged: no connection would be there to meet it.
//!
//! The cuts are staggered (S3 0–30 s, PostgreSQL 7–37 s, api 33–63 s), so the windows overlap
//! and each upstream is also the only one cut for a while. Checked at fixed sample points,
//! once a second:
//! - the files mount and every mount not cut read within [`OK_WITHIN`];
//! - a read of a cut mount fails within the request timeout (plus [`SLACK`]) naming its
//!   mount;
//! - listings (while S3 alone, S3 and PostgreSQL, PostgreSQL alone, PostgreSQL and the api,
//!   and the api alone are cut) leave each cut mount out, named in `_meta`
//!   `io.github.mcp-resources/unavailable`, and list the rest (the api mount once a read of
//!   it has timed out);
//! - `/readyz` answers 503 naming each cut mount and why;
//! - after each heal, with no restart, reads work again within [`RECOVERED_WITHIN`], and a
//!   2026-07-28 `subscriptions/listen` stream and a legacy session's GET stream both hear
//!   `notifications/resources/list_changed` within [`NOTICED_WITHIN`] for each mount;
//!   PostgreSQL's and the api's returns are noticed with no listing in between, by the
//!   server's own probe;
//! - `/healthz` answers at every sample and the log holds no panic.
//!
//! Needs root and `ip netns`, `moto_server` and PostgreSQL at 127.0.0.1:5432: without any
//! of them the test says SKIPPED and passes, except under `CI=true`, where it fails.
//! Namespaces and veths have names unique to the process, and are removed however the test
//! ends (a guard); ones left by a process that no longer exists (killed) are removed at
//! start.

mod netns_common;
mod stream_common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use netns_common::{End, Namespaces, absent, namespaces_usable, set_link, veth};
use serde_json::{Value, json};
use stream_common::{Replica, install_crypto, messages};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The server's `request_timeout_ms`.
const TIMEOUT: Duration = Duration::from_millis(2000);
/// What a request may take beyond the server's own bound: the HTTP round trip and the
/// scheduling of a debug build on a busy 2-core machine.
const SLACK: Duration = Duration::from_millis(1000);
/// The bound on a read or listing of a mount that is not cut.
const OK_WITHIN: Duration = Duration::from_millis(1000);
/// How long after its heal a mount may still fail reads.
const RECOVERED_WITHIN: Duration = Duration::from_secs(4);
/// How long after its heal a listening client may wait for `list_changed`: the probe's
/// longest wait (4 s) and its bound (1 s at this timeout), after PostgreSQL's breaker has let
/// a reconnection through (up to about 2 s; a probe before that fails at once), and slack.
const NOTICED_WITHIN: Duration = Duration::from_secs(8);
/// The api mount's `timeout_ms`: under the request timeout, as the defaults are (10 s under
/// 30 s), so that its reads end with the mount's own error, which tells it at once that its
/// upstream is out (a read the server gives up on first only has the mount probe the
/// upstream, which then takes the mount's timeout).
const API_TIMEOUT: Duration = Duration::from_millis(1000);
/// How long each upstream is cut.
const CUT: Duration = Duration::from_secs(30);
/// When each upstream's cut starts, in seconds after the first.
const S3_AT: u64 = 0;
const PG_AT: u64 = 7;
const API_AT: u64 = 33;
/// Seconds after the first cut at which listings and `/readyz` are checked: S3 alone, S3 and
/// PostgreSQL, PostgreSQL alone, PostgreSQL and the api (2.5 s into the api's cut: its
/// first read there has failed), the api alone.
const LISTED_AT: [f64; 5] = [3.5, 20.5, 31.5, 35.5, 45.5];
const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// This test's namespaces start with this, then the process id.
const PREFIX: &str = "mcprc";
/// The upstream links, numbered as in [`Links`].
const S3_LINK: u8 = 1;
const PG_LINK: u8 = 2;
const API_LINK: u8 = 3;

/// The server's namespace and its links: link 0 the client link, links 1 to 3 the
/// upstreams'. Link `k` is `10.<octet>.<k>.0/24`, `.1` the test's end, `.2` the server's.
/// Dropping it deletes the namespace, and every link with it.
struct Links {
    _namespaces: Namespaces,
    server: String,
    octet: u8,
}

impl Links {
    fn build() -> Result<Self, String> {
        let pid = std::process::id();
        // 20..=99: clear of partition.rs's 100..=249.
        let octet = u8::try_from(20 + pid % 80).unwrap_or(99);
        let mut namespaces = Namespaces::new(PREFIX);
        let server = namespaces.add("server")?;
        let links = Self {
            _namespaces: namespaces,
            server,
            octet,
        };
        for k in 0..=3 {
            veth(
                End {
                    dev: &links.dev(k),
                    ns: None,
                    addr: &format!("{}/24", links.ours(k)),
                },
                End {
                    dev: &format!("mcu{pid:x}{k}b"),
                    ns: Some(&links.server),
                    addr: &format!("10.{octet}.{k}.2/24"),
                },
            )?;
        }
        Ok(links)
    }

    /// The test's end of link `k` (cut there: the server's end only loses its carrier).
    fn dev(&self, k: u8) -> String {
        format!("mcu{:x}{k}a", std::process::id())
    }

    /// The test's address on link `k`: where the server reaches upstream `k`.
    fn ours(&self, k: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, self.octet, k, 1)
    }

    /// Where the server listens, on the client link.
    fn server_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::new(10, self.octet, 0, 2), 8080))
    }
}

/// A plain TCP relay from `at` (a link's address in the test's namespace) to `target` on
/// loopback, for an upstream that listens on loopback only. It only forwards: a cut is the
/// link's. Its address.
async fn relay(at: Ipv4Addr, target: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind((at, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut upstream) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    addr
}

/// The api's upstream, on `at`: answers every GET with a small JSON body that must not be
/// cached (so a read during the cut asks the upstream), over keep-alive connections.
async fn api_upstream(at: Ipv4Addr) -> SocketAddr {
    let listener = TcpListener::bind((at, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = s.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    while let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        got.drain(..end + 4);
                        let body = r#"{"status":"up"}"#;
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A database of the test's own with one table, dropped when the test ends (also when it
/// fails).
struct Pg {
    name: String,
}

impl Pg {
    async fn create() -> Option<Self> {
        use sqlx::{Connection as _, Executor as _};
        let mut admin = match tokio::time::timeout(
            Duration::from_secs(5),
            sqlx::PgConnection::connect(PG_ADMIN),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                absent("PostgreSQL at 127.0.0.1:5432", e);
                return None;
            }
            Err(_) => {
                absent("PostgreSQL at 127.0.0.1:5432", "no answer in 5 s");
                return None;
            }
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let name = format!("mcpr_cut_{}_{nanos}", std::process::id());
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
        let pg = Self { name };
        let mut c = sqlx::PgConnection::connect(&pg.url("127.0.0.1:5432"))
            .await
            .unwrap();
        c.execute("CREATE TABLE t (id int primary key, v text); INSERT INTO t VALUES (1, 'one')")
            .await
            .unwrap();
        let _ = c.close().await;
        Some(pg)
    }

    fn url(&self, at: &str) -> String {
        format!("postgres://postgres@{at}/{}", self.name)
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        use sqlx::{Connection as _, Executor as _};
        let name = self.name.clone();
        // Drop runs on the test's runtime, which cannot be blocked on from inside.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok(mut c) = sqlx::PgConnection::connect(PG_ADMIN).await {
                    // FORCE: the server under test may still hold connections.
                    let _ = c
                        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                        .await;
                }
            });
        })
        .join();
    }
}

/// One cut upstream: its mount's name as listings and `/readyz` give it, a URI to read, the
/// test's end of its link and its address there, and its cut's window in seconds after the
/// first cut.
struct Cut {
    mount: &'static str,
    uri: String,
    dev: String,
    addr: Ipv4Addr,
    at: u64,
}

impl Cut {
    fn window(&self) -> (f64, f64) {
        (
            self.at as f64,
            (Duration::from_secs(self.at) + CUT).as_secs_f64(),
        )
    }

    fn cut_at(&self, t: f64) -> bool {
        let (from, to) = self.window();
        (from..to).contains(&t)
    }
}

/// One read's outcome: when it was sent (seconds after the first cut), how long it took, and
/// its result or error message.
#[derive(Debug, Clone)]
struct Sample {
    uri: String,
    at: f64,
    took: Duration,
    answer: Result<String, String>,
}

/// A JSON-RPC request in legacy session `sid`: its answer's `result` or `error`.
async fn call(
    r: &Replica,
    http: &reqwest::Client,
    sid: &str,
    method: &str,
    params: Value,
) -> Result<Value, String> {
    // Requests run at once in one session: each needs an id of its own.
    static ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let resp = r.legacy_post(http, Some(sid), body).await;
    let text = resp.text().await.map_err(|e| format!("no answer: {e}"))?;
    let answer = messages(&text)
        .into_iter()
        .find(|m| m["id"] == id)
        .ok_or_else(|| format!("no answer in {text:?}"))?;
    match answer.get("result") {
        Some(r) => Ok(r.clone()),
        None => Err(answer["error"]["message"].as_str().unwrap_or("").to_owned()),
    }
}

async fn read(r: &Replica, http: &reqwest::Client, sid: &str, uri: &str, t0: Instant) -> Sample {
    let sent = Instant::now();
    let answer = call(r, http, sid, "resources/read", json!({"uri": uri}))
        .await
        .map(|v| v["contents"][0]["text"].as_str().unwrap_or("").to_owned());
    Sample {
        uri: uri.to_owned(),
        at: (sent - t0).as_secs_f64(),
        took: sent.elapsed(),
        answer,
    }
}

/// How long after now (a heal) until a read of `uri` sent after it answers: one read every
/// 100 ms, each on its own (a read may hang), the first answer's arrival; fails the test past
/// [`RECOVERED_WITHIN`].
async fn recovery(r: Arc<Replica>, http: reqwest::Client, sid: String, uri: String) -> Duration {
    let healed = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            Some(back) = rx.recv() => return back,
            _ = tick.tick() => {
                assert!(healed.elapsed() <= RECOVERED_WITHIN, "{uri}: no read answered within {RECOVERED_WITHIN:?} of the heal");
                let (r, http, sid, uri, tx) = (r.clone(), http.clone(), sid.clone(), uri.clone(), tx.clone());
                tokio::spawn(async move {
                    if read(&r, &http, &sid, &uri, healed).await.answer.is_ok() {
                        let _ = tx.send(healed.elapsed());
                    }
                });
            }
        }
    }
}

/// The server's TCP connections (in namespace `ns`) to `upstream`, by state, as `ss` gives
/// them: for the report, to tell which connections a heal found (those established live
/// through the cut and resume, or meet a reset if their far end forgot them).
fn connections(ns: &str, upstream: Ipv4Addr) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-Htan", "dst"])
        .arg(upstream.to_string())
        .output();
    let Ok(out) = out else {
        return "unknown (no ss)".into();
    };
    let mut states: std::collections::BTreeMap<String, usize> = Default::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(state) = line.split_whitespace().next() {
            *states.entry(state.to_owned()).or_default() += 1;
        }
    }
    if states.is_empty() {
        return "none".into();
    }
    states
        .iter()
        .map(|(s, n)| format!("{n} {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `/readyz` and its time, `/healthz` alongside.
async fn readyz(r: &Replica) -> (u16, String, Duration) {
    let sent = Instant::now();
    let (status, body) = r.get("/readyz").await;
    (status, body, sent.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cut_upstreams_cost_only_their_mounts_and_come_back() {
    install_crypto();
    if let Err(e) = namespaces_usable() {
        absent("root and `ip netns`", e);
        return;
    }
    // Declared before the server, dropped after it: the namespace goes once it has exited.
    let links = match Links::build() {
        Ok(l) => l,
        Err(e) => {
            absent("veth pairs in network namespaces", e);
            return;
        }
    };
    let Some(moto) = mcpr_testkit::moto::moto() else {
        return;
    };
    let Some(pg) = Pg::create().await else {
        return;
    };
    let bucket = format!("mcpr-cut-{}", std::process::id());
    moto.create_bucket(&bucket);
    moto.put(&bucket, "a.txt", b"from s3\n");
    let moto_addr: SocketAddr = moto
        .endpoint()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let s3 = relay(links.ours(S3_LINK), moto_addr).await;
    let pg_relay = relay(links.ours(PG_LINK), "127.0.0.1:5432".parse().unwrap()).await;
    let api = api_upstream(links.ours(API_LINK)).await;

    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("f.txt"), "from files\n").unwrap();
    let config = format!(
        "[server]\nrequest_timeout_ms = {}\n\
         [http]\nallowed_hosts = [\"{}\"]\n\
         [[mount]]\nkind = \"files\"\nroot = \"{}\"\n\
         [[mount]]\nkind = \"s3\"\nbucket = \"{bucket}\"\nregion = \"us-east-1\"\nendpoint = \"http://{}\"\nallow_http = true\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n\
         [[mount]]\nkind = \"postgres\"\nname = \"pgcut\"\nurl = \"{}\"\n\
         [[mount]]\nkind = \"api\"\nname = \"upcut\"\nallow_private = true\ntimeout_ms = {}\n\
         [[mount.endpoint]]\nuri = \"api://upcut/status\"\nurl = \"http://{api}/status\"\n",
        TIMEOUT.as_millis(),
        links.server_addr().ip(),
        files.display(),
        s3,
        pg.url(&pg_relay.to_string()),
        API_TIMEOUT.as_millis(),
    );
    let cfg = dir.path().join("cut.toml");
    std::fs::write(&cfg, config).unwrap();
    let r = Arc::new(Replica::start_in_namespace(
        &links.server,
        links.server_addr(),
        &cfg,
        dir.path().join("server.log"),
    ));
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();

    let files_uri = format!("file://{}", files.join("f.txt").display());
    let cuts = Arc::new([
        Cut {
            mount: "s3://mcpr-cut-",
            uri: format!("s3://{bucket}/a.txt"),
            dev: links.dev(S3_LINK),
            addr: links.ours(S3_LINK),
            at: S3_AT,
        },
        Cut {
            mount: "pgcut",
            uri: "db://pgcut/tables/t".into(),
            dev: links.dev(PG_LINK),
            addr: links.ours(PG_LINK),
            at: PG_AT,
        },
        Cut {
            mount: "upcut",
            uri: "api://upcut/status".into(),
            dev: links.dev(API_LINK),
            addr: links.ours(API_LINK),
            at: API_AT,
        },
    ]);

    // Everything answers before any cut, and the two listening clients are in place.
    let sid = r.legacy_initialize(&http).await;
    for uri in std::iter::once(&files_uri).chain(cuts.iter().map(|c| &c.uri)) {
        let s = read(&r, &http, &sid, uri, Instant::now()).await;
        assert!(s.answer.is_ok(), "before any cut: {s:?}");
    }
    let listed = call(&r, &http, &sid, "resources/list", json!({}))
        .await
        .unwrap();
    assert!(
        listed["_meta"]["io.github.mcp-resources/unavailable"].is_null(),
        "{listed}"
    );
    // The streams' client has no overall timeout: it would end them.
    let streams = reqwest::Client::builder().no_proxy().build().unwrap();
    let listen = r
        .listen_to(&streams, json!({"resourcesListChanged": true}))
        .await;
    let legacy_sid = r.legacy_initialize(&streams).await;
    let legacy = r.legacy_stream(&streams, &legacy_sid).await;
    // When each stream heard each list_changed, seconds after the first cut.
    let heard: Arc<Mutex<Vec<(&str, f64)>>> = Arc::default();
    let t0 = Instant::now();
    for (name, stream) in [("listen", listen.clone()), ("legacy", legacy.clone())] {
        let heard = heard.clone();
        tokio::spawn(async move {
            let mut seen = 0;
            loop {
                let now = stream.count("notifications/resources/list_changed");
                for _ in seen..now {
                    heard
                        .lock()
                        .unwrap()
                        .push((name, t0.elapsed().as_secs_f64()));
                }
                seen = now;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
    }

    // The cuts and heals, on schedule; after each heal, how long until a read works again.
    let schedule = {
        let (cuts, r, http, sid) = (cuts.clone(), r.clone(), http.clone(), sid.clone());
        let server = links.server.clone();
        tokio::spawn(async move {
            let mut events: Vec<(Duration, usize, bool)> = Vec::new();
            for (i, c) in cuts.iter().enumerate() {
                events.push((Duration::from_secs(c.at), i, true));
                events.push((Duration::from_secs(c.at) + CUT, i, false));
            }
            events.sort_by_key(|e| e.0);
            let mut recoveries = Vec::new();
            for (when, i, cut) in events {
                tokio::time::sleep_until((t0 + when).into()).await;
                // What the server holds to the upstream when the link comes back.
                let held = (!cut).then(|| connections(&server, cuts[i].addr));
                set_link(None, &cuts[i].dev, !cut);
                if let Some(held) = held {
                    let (r, http, sid) = (r.clone(), http.clone(), sid.clone());
                    let uri = cuts[i].uri.clone();
                    recoveries.push(tokio::spawn(async move {
                        (uri.clone(), recovery(r, http, sid, uri).await, held)
                    }));
                }
            }
            let mut back = Vec::new();
            for h in recoveries {
                back.push(h.await.unwrap());
            }
            back
        })
    };

    // The samples: every mount read once a second, each read on its own so a hanging one
    // delays no other sample; listings and /readyz at LISTED_AT.
    let last = API_AT as f64 + CUT.as_secs_f64() + RECOVERED_WITHIN.as_secs_f64();
    let mut reads = Vec::new();
    let mut checks = Vec::new();
    let mut k = 0.5;
    while k <= last {
        tokio::time::sleep_until((t0 + Duration::from_secs_f64(k)).into()).await;
        for uri in std::iter::once(files_uri.clone()).chain(cuts.iter().map(|c| c.uri.clone())) {
            let (r, http, sid) = (r.clone(), http.clone(), sid.clone());
            reads.push(tokio::spawn(async move {
                read(&r, &http, &sid, &uri, t0).await
            }));
        }
        let (status, _) = r.get("/healthz").await;
        assert_eq!(status, 200, "/healthz at {k} s");
        if LISTED_AT.contains(&k) {
            // On their own too: a slow /readyz must not move the next samples.
            let (r, http, sid, cuts) = (r.clone(), http.clone(), sid.clone(), cuts.clone());
            checks.push(tokio::spawn(async move {
                check_listing(&r, &http, &sid, &cuts[..], k).await;
                check_readyz(&r, &cuts[..], k).await;
            }));
        }
        k += 1.0;
    }
    let recovered = schedule.await.unwrap();
    for h in checks {
        h.await.unwrap();
    }
    let mut samples = Vec::new();
    for h in reads {
        samples.push(h.await.unwrap());
    }

    // Reads: normal outside the cuts, failing in time and naming the mount within them,
    // back within RECOVERED_WITHIN of the heal.
    for s in samples.iter().filter(|s| s.uri == files_uri) {
        assert!(
            s.answer.is_ok() && s.took <= OK_WITHIN,
            "the files mount: {s:?}"
        );
    }
    let slowest_file = samples
        .iter()
        .filter(|s| s.uri == files_uri)
        .map(|s| s.took)
        .max()
        .unwrap_or_default();
    let mut report = format!(
        "files: every read answered, the slowest in {:.3} s\n",
        slowest_file.as_secs_f64()
    );
    for c in cuts.iter() {
        let (from, to) = c.window();
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.uri == c.uri).collect();
        let mut back = None;
        for s in &mine {
            if s.at < from {
                assert!(
                    s.answer.is_ok() && s.took <= OK_WITHIN,
                    "{} before its cut: {s:?}",
                    c.mount
                );
            } else if s.at + (TIMEOUT + SLACK).as_secs_f64() < to {
                let e = s
                    .answer
                    .as_ref()
                    .expect_err(&format!("{} cut: {s:?}", c.mount));
                assert!(
                    s.took <= TIMEOUT + SLACK,
                    "{} cut, too slow: {s:?}",
                    c.mount
                );
                assert!(
                    e.contains(c.mount) || e.contains(&c.uri),
                    "{} cut, the error names no mount: {s:?}",
                    c.mount
                );
            } else if s.at >= to && back.is_none() && s.answer.is_ok() {
                back = Some(s.at - to);
            }
        }
        let back = back.unwrap_or_else(|| panic!("{} never read again: {mine:?}", c.mount));
        let (first, held) = recovered
            .iter()
            .find(|(uri, _, _)| *uri == c.uri)
            .map(|(_, d, held)| (*d, held.clone()))
            .unwrap();
        assert!(
            back <= RECOVERED_WITHIN.as_secs_f64(),
            "{} back after {back:.1} s",
            c.mount
        );
        for s in mine.iter().filter(|s| s.at >= to + back) {
            assert!(
                s.answer.is_ok() && s.took <= OK_WITHIN,
                "{} after its return: {s:?}",
                c.mount
            );
        }
        let slowest_cut = mine
            .iter()
            .filter(|s| s.answer.is_err())
            .map(|s| s.took)
            .max()
            .unwrap_or_default();
        let slowest_ok = mine
            .iter()
            .filter(|s| s.at < from || s.at >= to + back)
            .map(|s| s.took)
            .max()
            .unwrap_or_default();
        let said = mine
            .iter()
            .find_map(|s| s.answer.as_ref().err())
            .cloned()
            .unwrap_or_default();
        report.push_str(&format!(
            "{}: failed reads took at most {:.2} s ({said:?}), good reads at most {:.3} s, read again {:.3} s after the heal; the server's connections to it at the heal: {held}\n",
            c.mount,
            slowest_cut.as_secs_f64(),
            slowest_ok.as_secs_f64(),
            first.as_secs_f64(),
        ));
    }

    // list_changed: once each for every mount's return, on both streams. The api's heal is
    // the last: wait for its notices (up to NOTICED_WITHIN after it) rather than read too soon.
    let api_healed = t0 + Duration::from_secs(API_AT) + CUT;
    while Instant::now() < api_healed + NOTICED_WITHIN {
        let after = (api_healed - t0).as_secs_f64();
        let both = ["listen", "legacy"].iter().all(|stream| {
            heard
                .lock()
                .unwrap()
                .iter()
                .any(|(s, t)| s == stream && *t >= after)
        });
        if both {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let heard = heard.lock().unwrap().clone();
    for c in cuts.iter() {
        let (_, to) = c.window();
        for stream in ["listen", "legacy"] {
            let when = heard
                .iter()
                .find(|(s, t)| *s == stream && *t >= to)
                .map(|(_, t)| t - to)
                .unwrap_or_else(|| {
                    panic!(
                        "{stream}: no list_changed after {} healed: {heard:?}",
                        c.mount
                    )
                });
            assert!(
                when <= NOTICED_WITHIN.as_secs_f64(),
                "{stream}: list_changed {when:.1} s after {} healed: {heard:?}",
                c.mount
            );
            report.push_str(&format!(
                "{stream} heard {}'s return {when:.1} s after the heal\n",
                c.mount
            ));
        }
    }
    let log = std::fs::read_to_string(&r.log).unwrap();
    assert!(!log.contains("panicked"), "a panic in the log");
    eprintln!("{report}list_changed heard at {heard:?}");
}

/// A listing at `k` s, every page: the files mount and every mount not cut listed, each
/// cut one left out and named unavailable.
async fn check_listing(r: &Replica, http: &reqwest::Client, sid: &str, cuts: &[Cut], k: f64) {
    let sent = Instant::now();
    let (mut shown, mut out, mut pages) = (String::new(), String::new(), 0);
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = call(r, http, sid, "resources/list", params)
            .await
            .unwrap_or_else(|e| panic!("listing at {k} s: {e}"));
        pages += 1;
        // The resources alone: a mount's name in `_meta` may be one of its URIs (an api
        // mount's is its first endpoint's).
        shown.push_str(&page["resources"].to_string());
        out.push_str(&page["_meta"]["io.github.mcp-resources/unavailable"].to_string());
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let took = sent.elapsed();
    // Each page waits at most the request timeout, however many mounts hang.
    assert!(
        took <= (TIMEOUT + SLACK) * pages,
        "listing at {k} s took {took:?} over {pages} pages"
    );
    assert!(shown.contains("f.txt"), "listing at {k} s: {shown}");
    for c in cuts {
        let (_, to) = c.window();
        let just_healed = k >= to && k < to + RECOVERED_WITHIN.as_secs_f64();
        if c.cut_at(k) {
            assert!(
                out.contains(c.mount),
                "listing at {k} s, {} cut: {shown} {out}",
                c.mount
            );
            assert!(
                !shown.contains(&c.uri),
                "listing at {k} s, {} cut: {shown} {out}",
                c.mount
            );
        } else if !just_healed {
            assert!(
                !out.contains(c.mount),
                "listing at {k} s, {} listed: {shown}",
                c.mount
            );
            assert!(
                shown.contains(&c.uri),
                "listing at {k} s, {} listed: {shown}",
                c.mount
            );
        }
    }
    eprintln!("listing at {k} s took {took:?} ({pages} pages), unavailable: {out}");
}

/// `/readyz` at `k` s: 503 naming each cut mount, and why.
async fn check_readyz(r: &Replica, cuts: &[Cut], k: f64) {
    let (status, body, took) = readyz(r).await;
    eprintln!("/readyz at {k} s: {status} in {took:?}\n{body}");
    for c in cuts.iter().filter(|c| c.cut_at(k)) {
        assert_eq!(status, 503, "/readyz at {k} s: {body}");
        assert!(
            body.lines().any(|l| l.starts_with("NOT READY")
                && l.contains(c.mount)
                && (l.contains("timed out after") || l.contains("unavailable"))),
            "/readyz at {k} s, {} cut: {body}",
            c.mount
        );
    }
    // The mounts are asked at once: one request timeout, however many hang.
    assert!(took <= TIMEOUT + SLACK, "/readyz at {k} s took {took:?}");
}
