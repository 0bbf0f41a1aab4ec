//! Rolling upgrade: a replica of this release on one NATS with a replica of the previous
//! protocol format (format 2, the release before). They never share the cluster: the new
//! replica stands aside while the old one runs (no lease, nothing said on the cluster's
//! subjects, `/readyz` not ready naming the old replica, legacy sessions refused, its own
//! clients' subscriptions watched by itself), and takes over once the old one is gone.
//!
//! The first test plays the previous release's part: a NATS client that sends what a
//! format-2 replica sends and the new one listens to (its heartbeats, and its record on the
//! shared mount's lease), sealed as that release sealed. The second runs the real previous
//! binary named by `MCPR_OLD_BINARY`, which `cargo xtask test` builds from this clone's
//! history (commit 5ab539d, `previous_release` in xtask) and names, and also checks the old
//! replica's side: it keeps its lease, hears every change once, refuses nothing. Without
//! `MCPR_OLD_BINARY` (a plain `cargo test`, or a shallow clone) it says SKIPPED and passes.
//!
//! `nats-server` missing: the tests say SKIPPED and pass, except under `CI=true`, where
//! they fail.

mod stream_common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use hmac::{Hmac, KeyInit, Mac};
use mcpr_testkit::nats::NatsServer;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use stream_common::{Heard, Replica, wait_for};

const TTL: Duration = Duration::from_millis(1000);
const SECRET: &str = "cluster-upgrade-secret-0123456789abcdef";
const OLD: &str = "old-1";

/// A message as a replica of format 2 sealed it (crates/cluster/src/seal.rs at 5ab539d,
/// kept to what is needed here): the format byte 2, the kind's index, the write time, the
/// sender and its sequence number, an HMAC-SHA256 tag under the key derived with the label
/// `mcp-resources cluster messages v2` over all of them and the subject, then the payload.
fn seal_v2(kind: u8, subject: &str, payload: &[u8], sender: [u8; 8], seq: u64) -> Vec<u8> {
    let mut key = <Hmac<Sha256> as KeyInit>::new_from_slice(SECRET.as_bytes()).unwrap();
    key.update(b"mcp-resources cluster messages v2");
    let key = key.finalize().into_bytes();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let mut out = vec![2u8, kind];
    out.extend_from_slice(&stamp.to_be_bytes());
    out.extend_from_slice(&sender);
    out.extend_from_slice(&seq.to_be_bytes());
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).unwrap();
    m.update(&out[..2]);
    m.update(&(subject.len() as u32).to_be_bytes());
    m.update(subject.as_bytes());
    m.update(&out[2..]);
    m.update(payload);
    out.extend_from_slice(&m.finalize().into_bytes());
    out.extend_from_slice(payload);
    out
}

/// The kinds' indexes in format 2's list (event, want, sync, alive, answer, lease, ...).
const ALIVE: u8 = 3;
const LEASE: u8 = 5;

/// The subject of `mount`'s lease in `cluster` (a hash token of the mount, 12 bytes).
fn lease_subject(cluster: &str, mount: &str) -> String {
    let token: String = Sha256::digest(mount.as_bytes())[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("mcpr.{cluster}.lease.{token}")
}

/// What a format-2 replica named [`OLD`] sends that a new replica hears: a heartbeat every
/// third of a TTL and, once it is given the mount, its record on that mount's lease,
/// renewed as often (the lease stream created as that release created it).
struct FakeOld {
    mount: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeOld {
    async fn start(url: &str, cluster: &str) -> Self {
        let nats = async_nats::connect(url).await.unwrap();
        let config = json!({
            "name": format!("MCPR_{cluster}_LEASES"),
            "subjects": [format!("mcpr.{cluster}.lease.>")],
            "max_msgs_per_subject": 1,
            "max_age": TTL.as_nanos() as u64,
            "storage": "memory",
            "num_replicas": 1,
            "discard": "old",
        });
        let created = nats
            .request(
                format!("$JS.API.STREAM.CREATE.MCPR_{cluster}_LEASES"),
                config.to_string().into(),
            )
            .await
            .unwrap();
        let created: serde_json::Value = serde_json::from_slice(&created.payload).unwrap();
        assert!(created.get("error").is_none(), "{created}");
        let mount: Arc<Mutex<Option<String>>> = Arc::default();
        let held = mount.clone();
        let cluster = cluster.to_owned();
        let task = tokio::spawn(async move {
            let sender = [0x0d; 8];
            let mut seq = 0;
            loop {
                seq += 1;
                let alive = format!("mcpr.{cluster}.alive");
                let sealed = seal_v2(ALIVE, &alive, OLD.as_bytes(), sender, seq);
                nats.publish(alive, sealed.into()).await.unwrap();
                let mount = held.lock().unwrap().clone();
                if let Some(mount) = mount {
                    let subject = lease_subject(&cluster, &mount);
                    let sealed = seal_v2(LEASE, &subject, OLD.as_bytes(), sender, seq);
                    let ack = nats.request(subject, sealed.into()).await.unwrap();
                    let ack: serde_json::Value = serde_json::from_slice(&ack.payload).unwrap();
                    assert!(ack.get("error").is_none(), "{ack}");
                }
                nats.flush().await.unwrap();
                tokio::time::sleep(TTL / 3).await;
            }
        });
        Self { mount, task }
    }

    /// Hold `mount`'s lease from now on.
    fn hold(&self, mount: &str) {
        *self.mount.lock().unwrap() = Some(mount.to_owned());
    }

    /// Stop, as a replica that ends: nothing more is sent, its lease record expires.
    fn stop(&self) {
        self.task.abort();
    }
}

/// What was published on the cluster's subjects: (subject, first byte: the format).
type Seen = Arc<Mutex<Vec<(String, Option<u8>)>>>;

/// Everything published on the cluster's subjects from now on.
fn spy(nats: async_nats::Client, cluster: &str) -> Seen {
    let seen: Seen = Arc::default();
    let out = seen.clone();
    let subject = format!("mcpr.{cluster}.>");
    tokio::spawn(async move {
        let mut sub = nats.subscribe(subject).await.unwrap();
        while let Some(m) = sub.next().await {
            out.lock()
                .unwrap()
                .push((m.subject.to_string(), m.payload.first().copied()));
        }
    });
    seen
}

impl Replica {
    /// The value of the metric line that starts with `name` (labels included), if any.
    async fn metric(&self, name: &str) -> Option<u64> {
        let (_, text) = self.get("/metrics").await;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    async fn watches(&self, mount: &str) -> bool {
        self.metric(&format!("mcp_cluster_watcher{{mount=\"{mount}\"}}"))
            .await
            == Some(1)
    }

    /// The name of the (one) shared mount, from `/metrics`.
    async fn shared_mount(&self) -> String {
        let (_, text) = self.get("/metrics").await;
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("mcp_cluster_watcher{mount=\""))
            .expect("a shared mount in /metrics");
        line.split_once('"').unwrap().0.to_owned()
    }

    /// Every message and record this replica refused, all kinds.
    async fn rejected(&self) -> u64 {
        let (_, text) = self.get("/metrics").await;
        text.lines()
            .filter(|l| l.starts_with("mcp_cluster_rejected_total{"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum()
    }

    /// A legacy `initialize`: the session's id, or the status and error body.
    async fn legacy_session(&self, http: &reqwest::Client) -> Result<String, String> {
        let resp = self
            .legacy_post(
                http,
                None,
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}}),
            )
            .await;
        let sid = resp
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let status = resp.status();
        let body = resp.text().await.unwrap();
        match sid {
            Some(sid) if status == 200 && body.contains("\"result\"") => Ok(sid),
            _ => Err(format!("{status}: {body}")),
        }
    }

    /// A legacy session's `resources/subscribe` of `uri` here: the answer's body.
    async fn legacy_subscribe(&self, http: &reqwest::Client, uri: &str) -> String {
        let sid = self.legacy_initialize(http).await;
        let resp = self
            .legacy_post(
                http,
                Some(&sid),
                json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe",
                    "params": {"uri": uri}}),
            )
            .await;
        resp.text().await.unwrap()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }
}

/// Change `file` and wait until each stream heard `uri` updated `want` times in all (more
/// is a failure: one change, one notification per stream).
async fn change_reaches(file: &Path, uri: &str, streams: &[&Heard], want: usize) {
    std::fs::write(file, format!("version {want}\n")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got: Vec<usize> = streams.iter().map(|s| s.updates(uri)).collect();
        assert!(
            got.iter().all(|n| *n <= want),
            "{uri}: {got:?}, want {want}"
        );
        if got.iter().all(|n| *n == want) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{uri}: {got:?}, want {want} each"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Nothing more trails it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got: Vec<usize> = streams.iter().map(|s| s.updates(uri)).collect();
    assert!(
        got.iter().all(|n| *n == want),
        "{uri}: {got:?}, want {want}"
    );
}

/// A shared files mount with one file, and the cluster's config for replica `replica`.
struct Setup {
    dir: tempfile::TempDir,
    file: PathBuf,
    uri: String,
    cluster: String,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let files = dir.path().join("shared");
        std::fs::create_dir(&files).unwrap();
        let files = files.canonicalize().unwrap();
        let file = files.join("a.txt");
        std::fs::write(&file, "version 0\n").unwrap();
        let uri = format!("file://{}", file.display());
        Self {
            dir,
            file,
            uri,
            cluster: format!("u{}", std::process::id()),
        }
    }

    fn config(&self, nats: &NatsServer, replica: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{replica}.toml"));
        std::fs::write(
            &path,
            format!(
                "[cluster]\nnats_url = \"{}\"\nname = \"{}\"\nreplica = \"{replica}\"\n\
                 lease_ttl_ms = {}\nsecret = \"{SECRET}\"\n\
                 [[mount]]\nkind = \"files\"\nroot = \"{}\"\nshared = true\n",
                nats.url(),
                self.cluster,
                TTL.as_millis(),
                self.file.parent().unwrap().display()
            ),
        )
        .unwrap();
        path
    }

    fn log(&self, replica: &str) -> PathBuf {
        self.dir.path().join(format!("{replica}.log"))
    }
}

/// `new` answers `/readyz` not ready naming the old replica, and holds no lease, at every
/// sample for `within`.
async fn stands_aside_throughout(new: &Replica, mount: &str, within: Duration) {
    let until = Instant::now() + within;
    let mut samples = 0;
    while Instant::now() < until {
        let (status, body) = new.get("/readyz").await;
        assert_eq!(status, 503, "{body}");
        assert!(
            body.contains(&format!("replica {OLD} of an older release")),
            "{body}"
        );
        assert!(!new.watches(mount).await, "the new replica took the lease");
        samples += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(samples >= 5, "{samples} samples");
}

/// After the old replica ended (at `ended`): the new one is ready and watches the mount
/// within two TTLs and a second (it waits for one and a half TTLs of silence, then wins
/// the lease at its next try); then, its own watches given up (a TTL on), `heard` has had
/// no notice beyond the `prior` updates it had (the new watcher's "may have changed" carries
/// the file's change token, the one its own watch delivered already), a change reaches it
/// once, and a legacy subscription works.
async fn takes_over(
    new: &Replica,
    mount: &str,
    ended: Instant,
    file: &Path,
    uri: &str,
    heard: &Heard,
    prior: usize,
) {
    wait_for(
        "the new replica to take over",
        TTL * 2 + Duration::from_secs(1),
        async || new.get("/readyz").await.0 == 200 && new.watches(mount).await,
    )
    .await;
    eprintln!(
        "taken over {:?} after the old replica ended",
        ended.elapsed()
    );
    assert!(
        new.log_text().contains("takes part in the cluster"),
        "no word of taking part"
    );
    let series = format!("mcp_cluster_standalone_watches{{mount=\"{mount}\"}}");
    wait_for("its own watches to end", TTL * 2, async || {
        new.metric(&series).await == Some(0)
    })
    .await;
    assert_eq!(heard.updates(uri), prior, "a notice of an unchanged file");
    change_reaches(file, uri, &[heard], prior + 1).await;
    let subscribed = new.legacy_subscribe(&reqwest::Client::new(), uri).await;
    assert!(subscribed.contains("\"result\""), "{subscribed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_replica_stands_aside_while_a_replica_of_the_previous_format_runs() {
    let Some(nats) = NatsServer::started() else {
        return;
    };
    stream_common::install_crypto();
    let setup = Setup::new();
    let seen = spy(
        async_nats::connect(nats.url()).await.unwrap(),
        &setup.cluster,
    );
    let old = FakeOld::start(&nats.url(), &setup.cluster).await;
    tokio::time::sleep(TTL / 2).await;

    let new = Replica::start(&setup.config(&nats, "new-1"), setup.log("new-1"));
    wait_for(
        "the new replica to name the old one",
        Duration::from_secs(10),
        async || {
            let (status, body) = new.get("/readyz").await;
            status == 503 && body.contains(OLD)
        },
    )
    .await;
    let mount = new.shared_mount().await;
    old.hold(&mount);
    let log = new.log_text();
    assert!(
        log.contains(&format!(
            "replica {OLD} of an older release (protocol format 2)"
        )) && log.contains("stands aside"),
        "no warning naming the old replica:\n{log}"
    );

    // Its own clients are served: a subscription is watched by the replica itself.
    let http = reqwest::Client::new();
    let heard = new.listen(&http, &[&setup.uri]).await;
    let series = format!("mcp_cluster_standalone_watches{{mount=\"{mount}\"}}");
    wait_for(
        "the replica's own watch",
        Duration::from_secs(5),
        async || new.metric(&series).await == Some(1),
    )
    .await;
    change_reaches(&setup.file, &setup.uri, &[&heard], 1).await;
    // Legacy sessions belong to the old release's replicas meanwhile: one started here
    // is not shared, and its subscription is refused naming the old replica.
    let refused = new.legacy_subscribe(&http, &setup.uri).await;
    assert!(
        refused.contains("\"error\"") && refused.contains(OLD),
        "{refused}"
    );

    stands_aside_throughout(&new, &mount, TTL * 2).await;
    // Nothing of the new replica's on the cluster's subjects: everything there is the old
    // one's (format 2) or an empty record (the new one's probe of the NATS server's clock,
    // on a subject of its own in the lease stream, written before it heard the old one).
    let foreign: Vec<(String, Option<u8>)> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, f)| *f != Some(2) && f.is_some())
        .cloned()
        .collect();
    assert!(foreign.is_empty(), "the new replica spoke: {foreign:?}");
    let clock_probes = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(s, f)| f.is_none() && s.contains(".lease.clock."))
        .count();
    assert!(clock_probes <= 1, "{clock_probes} clock probes while aside");
    // The old replica's lease record is still its own.
    let subject = lease_subject(&setup.cluster, &mount);
    let nats_client = async_nats::connect(nats.url()).await.unwrap();
    let last = nats_client
        .request(
            format!("$JS.API.STREAM.MSG.GET.MCPR_{}_LEASES", setup.cluster),
            json!({ "last_by_subj": subject }).to_string().into(),
        )
        .await
        .unwrap();
    let last: serde_json::Value = serde_json::from_slice(&last.payload).unwrap();
    let data = last["message"]["data"].as_str().expect("a lease record");
    // Base64 of a record beginning with the byte 2 begins with "A".
    assert!(data.starts_with('A'), "{last}");

    old.stop();
    let ended = Instant::now();
    takes_over(&new, &mount, ended, &setup.file, &setup.uri, &heard, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_replica_stands_aside_while_the_previous_release_runs() {
    let Some(bin) = std::env::var_os("MCPR_OLD_BINARY").map(PathBuf::from) else {
        eprintln!(
            "SKIPPED: MCPR_OLD_BINARY does not name the previous release's mcp-resources \
             (`cargo xtask test` builds and names it)"
        );
        return;
    };
    assert!(
        bin.is_file(),
        "MCPR_OLD_BINARY={} is not a file",
        bin.display()
    );
    let Some(nats) = NatsServer::started() else {
        return;
    };
    stream_common::install_crypto();
    let setup = Setup::new();
    let http = reqwest::Client::new();
    let mut old = Replica::start_binary(&bin, &setup.config(&nats, OLD), setup.log(OLD));
    wait_for(
        "the old replica to be ready",
        Duration::from_secs(10),
        async || old.get("/readyz").await.0 == 200,
    )
    .await;
    let mount = old.shared_mount().await;
    wait_for(
        "the old replica to watch",
        Duration::from_secs(5),
        async || old.watches(&mount).await,
    )
    .await;
    let old_heard = old.listen(&http, &[&setup.uri]).await;
    let old_session = old.legacy_session(&http).await.unwrap();

    let new = Replica::start(&setup.config(&nats, "new-1"), setup.log("new-1"));
    wait_for(
        "the new replica to name the old one",
        Duration::from_secs(10),
        async || {
            let (status, body) = new.get("/readyz").await;
            status == 503 && body.contains(OLD)
        },
    )
    .await;
    let new_heard = new.listen(&http, &[&setup.uri]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    change_reaches(&setup.file, &setup.uri, &[&old_heard, &new_heard], 1).await;
    stands_aside_throughout(&new, &mount, TTL * 2).await;
    assert!(old.watches(&mount).await, "the old replica lost its lease");
    change_reaches(&setup.file, &setup.uri, &[&old_heard, &new_heard], 2).await;
    assert_eq!(
        old.rejected().await,
        0,
        "the old replica refused something of the new one's"
    );
    old.legacy_session(&http).await.unwrap();
    let refused = new.legacy_subscribe(&http, &setup.uri).await;
    assert!(
        refused.contains("\"error\"") && refused.contains(OLD),
        "{refused}"
    );

    old.kill();
    let ended = Instant::now();
    takes_over(&new, &mount, ended, &setup.file, &setup.uri, &new_heard, 2).await;
    // A legacy session of the old release is not carried over: its client starts anew.
    let resp = new
        .legacy_post(
            &http,
            Some(&old_session),
            json!({"jsonrpc": "2.0", "id": 5, "method": "resources/list"}),
        )
        .await;
    let status = resp.status();
    let body = resp.text().await.unwrap();
    assert_eq!(status, 404, "{body}");

    // Rolled back: an old replica started again makes the new one stand aside at once (it
    // lets its lease go), and takes the mount over once the new one's record expired.
    let old = Replica::start_binary(&bin, &setup.config(&nats, OLD), setup.log("old-1-again"));
    let restarted = Instant::now();
    wait_for("the new replica to stand aside again", TTL, async || {
        let (status, body) = new.get("/readyz").await;
        status == 503 && body.contains(OLD) && !new.watches(&mount).await
    })
    .await;
    wait_for("the old replica to watch again", TTL * 3, async || {
        old.watches(&mount).await
    })
    .await;
    eprintln!(
        "rolled back: the old replica watches {:?} after it started",
        restarted.elapsed()
    );
    let old_heard = old.listen(&http, &[&setup.uri]).await;
    stands_aside_throughout(&new, &mount, TTL).await;
    let before = new_heard.updates(&setup.uri);
    std::fs::write(&setup.file, "rolled back\n").unwrap();
    wait_for("the change on both", Duration::from_secs(5), async || {
        old_heard.updates(&setup.uri) >= 1 && new_heard.updates(&setup.uri) > before
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(old_heard.updates(&setup.uri), 1);
    assert_eq!(new_heard.updates(&setup.uri), before + 1);
    assert!(old.watches(&mount).await && !new.watches(&mount).await);
}
