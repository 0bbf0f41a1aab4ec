//! The NATS bus and the watcher lease against a real `nats-server -js` this test starts on a
//! random loopback port with its own store directory (so it can stop and restart it). Without
//! the binary the tests say so and pass, except under `CI=true`, where it is a failure.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use mcpr_cluster::{Kind, Lease, NatsBus, Seal};
use mcpr_core::{ChangeBus, ChangeEvent, ChangeSink, FeedItem};
use mcpr_testkit::nats::NatsServer;

async fn start_nats() -> Option<NatsServer> {
    NatsServer::started()
}

/// The secret every replica of these tests shares.
const SECRET: &[u8] = b"the test cluster's secret, 32+ bytes";

/// A NATS server of the test's own and a folder holding `a.txt` ("v0"), with its
/// canonical path; `None` (the test skips) without `nats-server`.
async fn nats_and_root() -> Option<(NatsServer, tempfile::TempDir, std::path::PathBuf)> {
    let nats = start_nats().await?;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "v0").unwrap();
    Some((nats, dir, root))
}

fn seal() -> Arc<Seal> {
    Arc::new(Seal::new(SECRET).unwrap())
}

async fn client(port: u16) -> async_nats::Client {
    async_nats::connect(format!("nats://127.0.0.1:{port}"))
        .await
        .unwrap()
}

/// What a feed that should hear something hears: the first item within 5 s (a loaded
/// machine may stall the hop through NATS for longer than the quiet window; a lost event
/// still fails), then every item that follows within 300 ms.
async fn hear(feed: &mut mcpr_core::ChangeFeed) -> Vec<FeedItem> {
    match tokio::time::timeout(Duration::from_secs(5), feed.recv()).await {
        Ok(Some(first)) => {
            let mut out = vec![first];
            out.extend(drain(feed, Duration::from_millis(300)).await);
            out
        }
        _ => Vec::new(),
    }
}

/// Every item `feed` yields within `within`.
async fn drain(feed: &mut mcpr_core::ChangeFeed, within: Duration) -> Vec<FeedItem> {
    let mut out = Vec::new();
    while let Ok(Some(item)) = tokio::time::timeout(within, feed.recv()).await {
        out.push(item);
    }
    out
}

/// The replicas holding their lease now.
fn holders(leases: &[(&'static str, Lease)]) -> Vec<&'static str> {
    leases
        .iter()
        .filter(|(_, l)| l.held())
        .map(|(r, _)| *r)
        .collect()
}

fn up(uri: &str) -> ChangeEvent {
    ChangeEvent::Updated { uri: uri.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_reaches_each_interested_replica_once_and_no_other() {
    let Some(nats) = start_nats().await else {
        return;
    };
    let local: HashSet<String> = ["file:///local/".to_owned()].into();
    let a = NatsBus::new(client(nats.port()).await, seal(), "t1", local.clone());
    let b = NatsBus::new(client(nats.port()).await, seal(), "t1", local.clone());
    let c = NatsBus::new(client(nats.port()).await, seal(), "t1", local.clone());
    let other_cluster = NatsBus::new(client(nats.port()).await, seal(), "t2", local);
    let (mut fa, mut fb, mut fc, mut fo) = (a.feed(), b.feed(), c.feed(), other_cluster.feed());

    let mount = "db://shop/";
    let watched = up("db://shop/orders/1");
    // B and C have clients watching the URI (C twice); A only watches the mount's list.
    let _ib = b.interest(mount, &watched);
    let _ic1 = c.interest(mount, &watched);
    let _ic2 = c.interest(mount, &watched);
    let list = ChangeEvent::ListChanged {
        mount: mount.into(),
    };
    let _ia = a.interest(mount, &list);
    let _io = other_cluster.interest(mount, &watched);
    assert_eq!(c.subscriptions(), 1, "one subject however many interests");
    for bus in [&a, &b, &c, &other_cluster] {
        assert!(bus.settled(Duration::from_secs(5)).await);
    }

    // The watcher is A: it publishes, and only B and C hear, once each.
    let sink = ChangeSink::new(Arc::new(a.clone()), mount);
    sink.updated("db://shop/orders/1");
    sink.updated("db://shop/orders/2");
    let quiet = Duration::from_millis(300);
    assert_eq!(hear(&mut fb).await, vec![FeedItem::Event(watched.clone())]);
    assert_eq!(hear(&mut fc).await, vec![FeedItem::Event(watched.clone())]);
    assert_eq!(drain(&mut fa, quiet).await, vec![]);
    assert_eq!(
        drain(&mut fo, quiet).await,
        vec![],
        "another cluster hears nothing"
    );

    sink.list_changed();
    assert_eq!(hear(&mut fa).await, vec![FeedItem::Event(list)]);
    assert_eq!(drain(&mut fb, quiet).await, vec![]);

    // The last interest gone, the subject is unsubscribed.
    drop(_ic1);
    assert_eq!(c.subscriptions(), 1);
    drop(_ic2);
    assert_eq!(c.subscriptions(), 0);
    assert!(c.settled(Duration::from_secs(5)).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    sink.updated("db://shop/orders/1");
    assert_eq!(hear(&mut fb).await, vec![FeedItem::Event(watched)]);
    assert_eq!(drain(&mut fc, quiet).await, vec![]);

    // A local mount's events never leave the process.
    let local_sink = ChangeSink::new(Arc::new(b.clone()), "file:///local/");
    let _il = a.interest("file:///local/", &up("file:///local/x"));
    local_sink.updated("file:///local/x");
    assert_eq!(
        hear(&mut fb).await,
        vec![FeedItem::Event(up("file:///local/x"))]
    );
    assert_eq!(drain(&mut fa, quiet).await, vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lease_holder_and_a_takeover_within_the_ttl() {
    let Some(nats) = start_nats().await else {
        return;
    };
    let ttl = Duration::from_millis(900);
    let mut leases = Vec::new();
    for r in ["r1", "r2", "r3"] {
        let c = client(nats.port()).await;
        Lease::prepare(&c, "lt", ttl).await.unwrap();
        leases.push((r, Lease::compete(c, seal(), "lt", "db://shop/", r, ttl)));
    }
    // Replicas that disagree on the TTL are told so.
    let e = Lease::prepare(&client(nats.port()).await, "lt", ttl * 2)
        .await
        .unwrap_err();
    assert!(e.contains("lease_ttl_ms"), "{e}");

    let mut first = Vec::new();
    for _ in 0..100 {
        first = holders(&leases);
        if !first.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(first.len(), 1, "exactly one holder: {first:?}");
    // It stays the only one while it renews.
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(holders(&leases), first);

    // The holder dies: another takes over within the TTL plus one renewal period (and
    // JetStream's expiry pass, which runs about once a second on this server).
    let dead = first[0];
    leases.retain(|(r, _)| *r != dead);
    let started = tokio::time::Instant::now();
    let mut next = Vec::new();
    while started.elapsed() < ttl * 4 {
        next = holders(&leases);
        if !next.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(next.len(), 1, "one new holder: {next:?}");
    assert_ne!(next[0], dead);
    // TTL plus one renewal period, with room for a loaded machine's scheduling.
    let took = started.elapsed();
    assert!(
        took < ttl * 2,
        "takeover took {took:?} with a TTL of {ttl:?}"
    );
    eprintln!("takeover after {took:?} (ttl {ttl:?})");
}

/// A replica asks whether its clock holds before every lease write, not only when its
/// standing changes: with its standing good throughout, it takes no free lease while its
/// clock does not hold, takes it once it does, and lets it go within a renewal period of
/// its clock failing again (a clock stepped between two measurements).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_clock_does_not_hold_takes_no_lease_and_lets_one_go() {
    let Some(nats) = start_nats().await else {
        return;
    };
    let ttl = Duration::from_millis(600);
    let c = client(nats.port()).await;
    Lease::prepare(&c, "clk", ttl).await.unwrap();
    let holds = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (_verdict, verdict) = tokio::sync::watch::channel(true);
    let allowed = mcpr_cluster::Allowed {
        verdict,
        clock_holds: {
            let holds = holds.clone();
            Arc::new(move || holds.load(std::sync::atomic::Ordering::SeqCst))
        },
    };
    let lease = Lease::compete_while(c, seal(), "clk", "db://shop/", "r1", ttl, allowed);
    tokio::time::sleep(ttl * 3).await;
    assert!(!lease.held(), "held a lease while its clock did not hold");
    holds.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        eventually(ttl * 3, || lease.held()).await,
        "no lease once its clock held"
    );
    holds.store(false, std::sync::atomic::Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    assert!(
        eventually(ttl * 2, || !lease.held()).await,
        "kept the lease after its clock stopped holding"
    );
    // Let go at its next write, a third of a TTL at most, with room for a loaded machine.
    assert!(
        started.elapsed() < ttl,
        "let go after {:?}",
        started.elapsed()
    );
    assert!(
        lease.why_let_go().contains("stand aside"),
        "{}",
        lease.why_let_go()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_nats_restart_interests_are_subscribed_again() {
    let Some(mut nats) = start_nats().await else {
        return;
    };
    let a = NatsBus::new(client(nats.port()).await, seal(), "t3", HashSet::new());
    let b = NatsBus::new(client(nats.port()).await, seal(), "t3", HashSet::new());
    let mut fb = b.feed();
    let mount = "db://shop/";
    let watched = up("db://shop/orders/1");
    let _ib = b.interest(mount, &watched);
    assert!(b.settled(Duration::from_secs(5)).await);
    let sink = ChangeSink::new(Arc::new(a.clone()), mount);
    sink.updated("db://shop/orders/1");
    assert_eq!(hear(&mut fb).await, vec![FeedItem::Event(watched.clone())]);

    nats.start();
    // Both clients reconnect on their own (bounded wait), and B's subscription is renewed.
    let mut heard = Vec::new();
    for _ in 0..60 {
        if a.connected() && b.connected() {
            sink.updated("db://shop/orders/1");
            heard = drain(&mut fb, Duration::from_millis(250)).await;
            if !heard.is_empty() {
                break;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    assert_eq!(
        heard,
        vec![FeedItem::Event(watched)],
        "no change heard after the restart"
    );
}

/// What `seal` counted as rejected of `kind`.
fn rejected(seal: &Seal, kind: &str) -> u64 {
    seal.rejected()
        .into_iter()
        .find(|(k, _)| k == kind)
        .map_or(0, |(_, n)| n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_change_event_is_dropped_and_counted() {
    let Some(nats) = start_nats().await else {
        return;
    };
    let b_seal = seal();
    let a = NatsBus::new(client(nats.port()).await, seal(), "t4", HashSet::new());
    let b = NatsBus::new(
        client(nats.port()).await,
        b_seal.clone(),
        "t4",
        HashSet::new(),
    );
    let mut fb = b.feed();
    let mount = "db://shop/";
    let watched = up("db://shop/orders/1");
    let _ib = b.interest(mount, &watched);
    assert!(b.settled(Duration::from_secs(5)).await);

    // Another client of the NATS account: the event as plain JSON, sealed with another
    // secret, and a genuine sealed event copied to this subject from another one.
    let forger = client(nats.port()).await;
    let subject = mcpr_cluster::subject("t4", mount, &watched);
    let json = serde_json::to_vec(&watched).unwrap();
    forger
        .publish(subject.clone(), json.clone().into())
        .await
        .unwrap();
    let stranger = Seal::new(b"another cluster's secret, 32 bytes+").unwrap();
    forger
        .publish(subject.clone(), stranger.seal(Kind::Event, &subject, &json))
        .await
        .unwrap();
    let other = mcpr_cluster::subject("t4", mount, &up("db://shop/orders/2"));
    forger
        .publish(subject.clone(), seal().seal(Kind::Event, &other, &json))
        .await
        .unwrap();
    forger.flush().await.unwrap();
    assert_eq!(drain(&mut fb, Duration::from_millis(500)).await, vec![]);
    assert_eq!(rejected(&b_seal, "event"), 3);

    // The watcher's own events still arrive.
    ChangeSink::new(Arc::new(a.clone()), mount).updated("db://shop/orders/1");
    assert_eq!(hear(&mut fb).await, vec![FeedItem::Event(watched)]);
    assert_eq!(rejected(&b_seal, "event"), 3);
}

/// The subject of mount `mount`'s lease in cluster `cluster`, as the replicas write it.
fn lease_subject(cluster: &str, mount: &str) -> String {
    use sha2::Digest as _;
    let h: String = sha2::Sha256::digest(mount.as_bytes())[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("mcpr.{cluster}.lease.{h}")
}

/// One replica joined to cluster `name` with a shared files mount over `root`.
async fn join_files(
    port: u16,
    name: &str,
    root: &std::path::Path,
    ttl: Duration,
    max_watches: usize,
) -> (mcpr_cluster::Joined, Arc<dyn mcpr_core::Provider>) {
    let provider: Arc<dyn mcpr_core::Provider> = Arc::new(
        mcpr_provider_files::FilesProvider::new(mcpr_provider_files::FilesConfig::new(root))
            .unwrap(),
    );
    (
        join_with(port, name, provider.clone(), ttl, max_watches).await,
        provider,
    )
}

/// One replica joined to cluster `name` with `provider` as its one shared mount.
async fn join_with(
    port: u16,
    name: &str,
    provider: Arc<dyn mcpr_core::Provider>,
    ttl: Duration,
    max_watches: usize,
) -> mcpr_cluster::Joined {
    join_as(port, name, "r1", provider, ttl, max_watches).await
}

/// Replica `replica` joined to cluster `name` with `provider` as its one shared mount.
async fn join_as(
    port: u16,
    name: &str,
    replica: &str,
    provider: Arc<dyn mcpr_core::Provider>,
    ttl: Duration,
    max_watches: usize,
) -> mcpr_cluster::Joined {
    join_mount(
        port,
        name,
        replica,
        shared_mount(provider),
        ttl,
        max_watches,
    )
    .await
}

/// The server's mount of `provider` as the one shared mount of the tests, named [`MOUNT`].
fn shared_mount(provider: Arc<dyn mcpr_core::Provider>) -> mcpr_server::Mount {
    mcpr_server::Mount {
        index: 0,
        name: MOUNT.into(),
        provider,
        scope: None,
        calls: Arc::default(),
    }
}

/// Replica `replica` joined to cluster `name` with `mount` as its one shared mount.
async fn join_mount(
    port: u16,
    name: &str,
    replica: &str,
    mount: mcpr_server::Mount,
    ttl: Duration,
    max_watches: usize,
) -> mcpr_cluster::Joined {
    let cfg = mcpr_cluster::ClusterConfig {
        nats_url: format!("nats://127.0.0.1:{port}"),
        name: name.into(),
        replica: replica.into(),
        replica_is_default: false,
        lease_ttl: ttl,
        secret: String::from_utf8(SECRET.to_vec()).unwrap(),
        max_watches,
    };
    mcpr_cluster::join(
        cfg,
        vec![mcpr_cluster::ClusterMount {
            mount,
            shared: true,
        }],
    )
    .await
    .unwrap()
}

const MOUNT: &str = "files";

/// Wait (at most `within`) for `check`.
async fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

fn holds(joined: &mcpr_cluster::Joined) -> bool {
    use mcpr_core::Watching as _;
    joined
        .watching
        .cluster()
        .is_some_and(|c| c.watchers.iter().any(|(_, held)| *held))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_lease_record_does_not_stop_watching() {
    use mcpr_core::Watching as _;
    let Some((nats, _dir, root)) = nats_and_root().await else {
        return;
    };
    let ttl = Duration::from_millis(900);

    // Another client of the NATS account writes the mount's lease record every 100 ms
    // (the stream keeps only the last), from before the replica joins.
    let forger = client(nats.port()).await;
    let subject = lease_subject("t5", MOUNT);
    let forging = tokio::spawn({
        let forger = forger.clone();
        async move {
            loop {
                let _ = forger.publish(subject.clone(), "mallory".into()).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });

    let (joined, provider) = join_files(nats.port(), "t5", &root, ttl, 1000).await;
    assert!(
        eventually(Duration::from_secs(5), || holds(&joined)).await,
        "the replica never took the lease"
    );
    let uri = format!("file://{}", root.join("a.txt").display());
    let mut feed = mcpr_core::ChangeBus::feed(&joined.bus);
    let _interest = mcpr_core::ChangeBus::interest(&joined.bus, MOUNT, &up(&uri));
    assert!(joined.bus.settled(Duration::from_secs(5)).await);
    let sink = ChangeSink::new(Arc::new(joined.bus.clone()), MOUNT);
    let _watch = joined
        .watching
        .watch(
            MOUNT,
            &provider,
            &mcpr_core::ResourceUri::parse(&uri).unwrap(),
            sink,
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drain(&mut feed, Duration::from_millis(300)).await;

    // Changes are delivered while the forger goes on, over several lease periods.
    for round in 0..3 {
        std::fs::write(root.join("a.txt"), format!("v{}", round + 1)).unwrap();
        let heard = hear(&mut feed).await;
        assert!(
            heard.contains(&FeedItem::Event(up(&uri))),
            "round {round}: {heard:?}"
        );
        assert!(holds(&joined), "round {round}: the lease was lost");
        tokio::time::sleep(ttl).await;
    }
    let status = joined.watching.cluster().unwrap();
    let lease = status
        .rejected
        .iter()
        .find(|(k, _)| k == "lease")
        .map_or(0, |(_, n)| *n);
    assert!(lease > 0, "{status:?}");
    forging.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_interests_is_capped_at_max_watches() {
    let Some(nats) = start_nats().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let uris: Vec<String> = (0..20)
        .map(|i| {
            let p = root.join(format!("f{i}.txt"));
            std::fs::write(&p, "x").unwrap();
            format!("file://{}", p.display())
        })
        .collect();
    let (joined, _provider) = join_files(nats.port(), "t6", &root, Duration::from_secs(3), 5).await;
    assert!(
        eventually(Duration::from_secs(5), || holds(&joined)).await,
        "the replica never took the lease"
    );
    let want = {
        use sha2::Digest as _;
        let h: String = sha2::Sha256::digest(MOUNT.as_bytes())[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("mcpr.t6.want.{h}")
    };
    let flooder = client(nats.port()).await;

    // A stranger's flood (not sealed): 10,000 interests, dropped whole and counted.
    let many: Vec<serde_json::Value> = (0..10_000)
        .map(|i| serde_json::to_value(up(&format!("file://{}/n{i}", root.display()))).unwrap())
        .collect();
    let body = serde_json::json!({"replica": "mallory", "add": many});
    flooder
        .publish(want.clone(), serde_json::to_vec(&body).unwrap().into())
        .await
        .unwrap();
    // A replica of the cluster (it has the secret) asking for 20 watches, past its 5.
    let adds: Vec<serde_json::Value> = uris
        .iter()
        .map(|u| serde_json::to_value(up(u)).unwrap())
        .collect();
    let body = serde_json::json!({"replica": "greedy", "add": adds});
    flooder
        .publish(
            want.clone(),
            seal().seal(Kind::Want, &want, &serde_json::to_vec(&body).unwrap()),
        )
        .await
        .unwrap();
    flooder.flush().await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || joined.watching.running(MOUNT)
            == 5)
        .await,
        "running {}",
        joined.watching.running(MOUNT)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(joined.watching.running(MOUNT), 5);
    let status = mcpr_core::Watching::cluster(&joined.watching).unwrap();
    let wants = status
        .rejected
        .iter()
        .find(|(k, _)| k == "want")
        .map_or(0, |(_, n)| *n);
    assert_eq!(wants, 1, "{status:?}");
}

/// A `nats-server` of this test's own requiring user `mcpr` with password `pw` (no
/// JetStream: only the connection is looked at). `None` (SKIPPED) without the binary.
struct AuthNats {
    child: std::process::Child,
    port: u16,
}

impl AuthNats {
    fn start(pw: &str) -> Option<Self> {
        let bin = std::env::var_os("MCPR_NATS_SERVER")
            .map(std::path::PathBuf::from)
            .into_iter()
            .chain(
                [
                    "/usr/sbin/nats-server",
                    "/usr/bin/nats-server",
                    "/usr/local/bin/nats-server",
                ]
                .map(std::path::PathBuf::from),
            )
            .find(|p| p.exists());
        let Some(bin) = bin else {
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "nats-server is required under CI=true"
            );
            eprintln!("SKIPPED: no nats-server found");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new(bin)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "--user",
                "mcpr",
                "--pass",
                pw,
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "nats-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Self { child, port })
    }
}

impl Drop for AuthNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credentials_of_nats_url_authenticate_the_replica() {
    let pw = "p@ss/w:rd";
    let Some(nats) = AuthNats::start(pw) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let join_with = |userinfo: &str| {
        let cfg = mcpr_cluster::ClusterConfig {
            nats_url: format!("nats://{userinfo}@127.0.0.1:{}", nats.port),
            name: "auth".into(),
            replica: "r1".into(),
            replica_is_default: false,
            lease_ttl: Duration::from_secs(1),
            secret: String::from_utf8(SECRET.to_vec()).unwrap(),
            max_watches: 10,
        };
        let provider: Arc<dyn mcpr_core::Provider> = Arc::new(
            mcpr_provider_files::FilesProvider::new(mcpr_provider_files::FilesConfig::new(&root))
                .unwrap(),
        );
        mcpr_cluster::join(
            cfg,
            vec![mcpr_cluster::ClusterMount {
                mount: shared_mount(provider),
                shared: true,
            }],
        )
    };
    // The password percent-encoded in the URL, as URLs write `@`, `/` and `:`.
    let good = join_with("mcpr:p%40ss%2Fw%3Ard").await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || good.bus.connected()).await,
        "not connected with the right password"
    );
    let bad = join_with("mcpr:wrong").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!bad.bus.connected(), "connected with a wrong password");
}

/// A files mount whose watches of `stuck.txt` never start (a source that hangs while
/// subscribing); everything else is the files provider's.
struct StuckWatch(Arc<dyn mcpr_core::Provider>);

#[async_trait::async_trait]
impl mcpr_core::Provider for StuckWatch {
    fn info(&self) -> &mcpr_core::ProviderInfo {
        self.0.info()
    }

    async fn read(
        &self,
        uri: &mcpr_core::ResourceUri,
        limits: &mcpr_core::ReadLimits,
    ) -> mcpr_core::Result<mcpr_core::ReadOutput> {
        self.0.read(uri, limits).await
    }

    async fn watch(
        &self,
        uri: &mcpr_core::ResourceUri,
        sink: ChangeSink,
    ) -> mcpr_core::Result<mcpr_core::WatchGuard> {
        if uri.as_str().ends_with("stuck.txt") {
            std::future::pending::<()>().await;
        }
        self.0.watch(uri, sink).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_never_starts_holds_the_watcher_only_for_the_lease_ttl() {
    use mcpr_core::Watching as _;
    let Some((nats, _dir, root)) = nats_and_root().await else {
        return;
    };
    std::fs::write(root.join("stuck.txt"), "v0").unwrap();
    let ttl = Duration::from_millis(900);
    let files: Arc<dyn mcpr_core::Provider> = Arc::new(
        mcpr_provider_files::FilesProvider::new(mcpr_provider_files::FilesConfig::new(&root))
            .unwrap(),
    );
    let provider: Arc<dyn mcpr_core::Provider> = Arc::new(StuckWatch(files));
    let mount = shared_mount(provider.clone());
    // The watcher calls the provider through the server's layer, which counts each call.
    let calls = mount.calls.clone();
    let joined = join_mount(nats.port(), "t7", "r1", mount, ttl, 100).await;
    assert!(
        eventually(Duration::from_secs(5), || holds(&joined)).await,
        "the replica never took the lease"
    );
    let uri = |name: &str| {
        mcpr_core::ResourceUri::parse(&format!("file://{}", root.join(name).display())).unwrap()
    };
    let stuck = uri("stuck.txt");
    let sink = ChangeSink::new(Arc::new(joined.bus.clone()), MOUNT);
    let began = tokio::time::Instant::now();
    let err = tokio::time::timeout(
        ttl + Duration::from_secs(5),
        joined
            .watching
            .watch(MOUNT, &provider, &stuck, sink.clone()),
    )
    .await
    .expect("the stuck watch held the request past the watcher's bound")
    .expect_err("a watch that never starts cannot succeed");
    assert!(began.elapsed() >= ttl, "answered before the bound: {err}");
    assert_eq!(err.kind, mcpr_core::ErrorKind::Timeout, "{err}");
    assert!(err.message.contains("lease_ttl_ms"), "{err}");
    assert_eq!(
        calls.count("watch", "timeout"),
        1,
        "the stuck watch, counted"
    );
    assert_eq!(calls.count("watch", "ok"), 0);

    // The watcher goes on: another URI of the mount is watched and its change delivered.
    let a = uri("a.txt");
    let mut feed = ChangeBus::feed(&joined.bus);
    let _interest = ChangeBus::interest(&joined.bus, MOUNT, &up(a.as_str()));
    assert!(joined.bus.settled(Duration::from_secs(5)).await);
    let _watch = joined
        .watching
        .watch(MOUNT, &provider, &a, sink)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drain(&mut feed, Duration::from_millis(300)).await;
    std::fs::write(root.join("a.txt"), "v1").unwrap();
    let heard = hear(&mut feed).await;
    assert!(
        heard.contains(&FeedItem::Event(up(a.as_str()))),
        "{heard:?}"
    );
    assert_eq!(
        calls.count("watch", "ok"),
        1,
        "the watch that started, counted"
    );
}

fn files(root: &std::path::Path) -> Arc<dyn mcpr_core::Provider> {
    Arc::new(
        mcpr_provider_files::FilesProvider::new(mcpr_provider_files::FilesConfig::new(root))
            .unwrap(),
    )
}

/// The subject of the shared mount's interests in cluster `cluster`.
fn want_subject(cluster: &str) -> String {
    use sha2::Digest as _;
    let h: String = sha2::Sha256::digest(MOUNT.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("mcpr.{cluster}.want.{h}")
}

/// Two replicas of cluster `name` over `root`: `w`, which holds the mount's lease, then
/// `r2`, whose client watches `a.txt` through the cluster (its interest on the bus and its
/// watch, as its registry would hold them). Returns the replicas, r2's feed, the URI, and
/// the guards that keep the watch.
struct Pair {
    w: mcpr_cluster::Joined,
    r2: mcpr_cluster::Joined,
    provider: Arc<dyn mcpr_core::Provider>,
    uri: String,
    feed: mcpr_core::ChangeFeed,
    _interest: mcpr_core::Interest,
}

async fn pair(port: u16, name: &str, root: &std::path::Path, ttl: Duration) -> Pair {
    let w = join_as(port, name, "w", files(root), ttl, 100).await;
    assert!(
        eventually(Duration::from_secs(5), || holds(&w)).await,
        "the first replica never took the lease"
    );
    let provider = files(root);
    let r2 = join_as(port, name, "r2", provider.clone(), ttl, 100).await;
    let uri = format!("file://{}", root.join("a.txt").display());
    let feed = ChangeBus::feed(&r2.bus);
    let interest = ChangeBus::interest(&r2.bus, MOUNT, &up(&uri));
    assert!(r2.bus.settled(Duration::from_secs(5)).await);
    assert!(eventually(Duration::from_secs(5), || r2.bus.connected()).await);
    // A replica takes part half a TTL after it connects (it listens for replicas of another
    // release first); until then it watches its own subscriptions itself.
    assert!(
        eventually(Duration::from_secs(5), || {
            use mcpr_core::Watching as _;
            r2.watching.cluster().is_some_and(|c| c.problem.is_none())
        })
        .await,
        "the second replica never took part"
    );
    Pair {
        w,
        r2,
        provider,
        uri,
        feed,
        _interest: interest,
    }
}

impl Pair {
    async fn watch(&self) -> mcpr_core::WatchGuard {
        use mcpr_core::Watching as _;
        let sink = ChangeSink::new(Arc::new(self.r2.bus.clone()), MOUNT);
        self.r2
            .watching
            .watch(
                MOUNT,
                &self.provider,
                &mcpr_core::ResourceUri::parse(&self.uri).unwrap(),
                sink,
            )
            .await
            .unwrap()
    }
}

fn rejected_of(joined: &mcpr_cluster::Joined, kind: &str) -> u64 {
    use mcpr_core::Watching as _;
    joined
        .watching
        .cluster()
        .unwrap()
        .rejected
        .iter()
        .find(|(k, _)| k == kind)
        .map_or(0, |(_, n)| *n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_interest_removal_does_not_unwatch_a_subscriber() {
    let Some((nats, _dir, root)) = nats_and_root().await else {
        return;
    };
    // Another client of the NATS account listens to the interests (it may: they are signed,
    // not encrypted).
    let attacker = client(nats.port()).await;
    let want = want_subject("t8");
    let mut spied = attacker.subscribe(want.clone()).await.unwrap();
    attacker.flush().await.unwrap();
    let mut p = pair(nats.port(), "t8", &root, Duration::from_secs(2)).await;

    // r2's client watches a.txt, stops (a removal goes to the watcher), and watches it again.
    let first = p.watch().await;
    drop(first);
    let removal = loop {
        let msg = tokio::time::timeout(Duration::from_secs(5), spied.next())
            .await
            .expect("no removal seen")
            .unwrap();
        if String::from_utf8_lossy(&msg.payload).contains("\"remove\"") {
            break msg.payload;
        }
    };
    let _again = p.watch().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drain(&mut p.feed, Duration::from_millis(300)).await;
    let before = rejected_of(&p.w, "want");

    // The attacker replays the captured removal, fresh and correctly sealed.
    attacker.publish(want, removal).await.unwrap();
    attacker.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    std::fs::write(root.join("a.txt"), "v1").unwrap();
    let heard = hear(&mut p.feed).await;
    assert_eq!(
        heard,
        vec![FeedItem::Event(up(&p.uri))],
        "the watch was dropped"
    );
    assert_eq!(
        rejected_of(&p.w, "want"),
        before + 1,
        "the replay was not counted"
    );
    assert!(holds(&p.w) && !holds(&p.r2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_a_lease_subject_hands_nothing_over_and_notifies_nobody() {
    let Some((nats, _dir, root)) = nats_and_root().await else {
        return;
    };
    let ttl = Duration::from_millis(900);
    let mut p = pair(nats.port(), "t9", &root, ttl).await;
    let _watch = p.watch().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drain(&mut p.feed, Duration::from_millis(300)).await;

    // Another client of the NATS account writes garbage on the mount's lease subject every
    // 20 ms for 6 s: nothing changed, so nothing may be notified, and the lease stays put.
    let forger = client(nats.port()).await;
    let subject = lease_subject("t9", MOUNT);
    let forging = tokio::spawn(async move {
        let until = tokio::time::Instant::now() + Duration::from_secs(6);
        while tokio::time::Instant::now() < until {
            let _ = forger.request(subject.clone(), "garbage".into()).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let mut heard = Vec::new();
    let mut flapped = false;
    while !forging.is_finished() {
        heard.extend(drain(&mut p.feed, Duration::from_millis(50)).await);
        flapped |= !holds(&p.w) || holds(&p.r2);
    }
    assert_eq!(heard, vec![], "notices while nothing changed");
    assert!(!flapped, "the lease moved");
    assert!(rejected_of(&p.w, "lease") + rejected_of(&p.r2, "lease") > 0);

    // A real change is still notified, once.
    std::fs::write(root.join("a.txt"), "v1").unwrap();
    assert_eq!(hear(&mut p.feed).await, vec![FeedItem::Event(up(&p.uri))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_lease_stream_is_created_again_and_the_watcher_kept_within_the_ttl() {
    let Some((nats, _dir, root)) = nats_and_root().await else {
        return;
    };
    let ttl = Duration::from_millis(900);
    let mut p = pair(nats.port(), "t10", &root, ttl).await;
    let _watch = p.watch().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drain(&mut p.feed, Duration::from_millis(300)).await;

    // Another client of the NATS account deletes the lease stream.
    let vandal = client(nats.port()).await;
    let deleted = vandal
        .request("$JS.API.STREAM.DELETE.MCPR_t10_LEASES", "".into())
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&deleted.payload).contains("\"success\":true"),
        "{:?}",
        deleted.payload
    );
    let started = tokio::time::Instant::now();
    let lease = lease_subject("t10", MOUNT);
    let written = || async {
        let body = serde_json::json!({ "last_by_subj": lease }).to_string();
        vandal
            .request("$JS.API.STREAM.MSG.GET.MCPR_t10_LEASES", body.into())
            .await
            .is_ok_and(|r| String::from_utf8_lossy(&r.payload).contains("\"message\""))
    };
    while !written().await && started.elapsed() < ttl * 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    eprintln!("lease stream back after {took:?} (ttl {ttl:?})");
    // Within one TTL, with room for a loaded machine's scheduling.
    assert!(
        took < ttl + ttl / 2,
        "the lease stream came back after {took:?}"
    );
    // The watcher kept the lease through it (no handover, so no notice either).
    tokio::time::sleep(ttl).await;
    assert!(holds(&p.w) && !holds(&p.r2));
    assert_eq!(drain(&mut p.feed, Duration::from_millis(100)).await, vec![]);
    std::fs::write(root.join("a.txt"), "v1").unwrap();
    assert_eq!(hear(&mut p.feed).await, vec![FeedItem::Event(up(&p.uri))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_event_replayed_after_its_window_reaches_nobody() {
    let Some(nats) = start_nats().await else {
        return;
    };
    let mount = "db://shop/";
    let watched = up("db://shop/orders/1");
    let subject = mcpr_cluster::subject("t11", mount, &watched);
    let attacker = client(nats.port()).await;
    let mut spied = attacker.subscribe(subject.clone()).await.unwrap();
    attacker.flush().await.unwrap();
    let a = NatsBus::new(client(nats.port()).await, seal(), "t11", HashSet::new());
    ChangeSink::new(Arc::new(a.clone()), mount).updated("db://shop/orders/1");
    let captured = tokio::time::timeout(Duration::from_secs(5), spied.next())
        .await
        .expect("no event captured")
        .unwrap()
        .payload;

    // The window a message lives, clock skew included, passes; then the captured event is
    // replayed to a replica that never had it (one that had it refuses it as seen already).
    tokio::time::sleep(
        mcpr_cluster::MESSAGE_MAX_AGE - mcpr_cluster::CLOCK_SKEW + Duration::from_secs(1),
    )
    .await;
    let c_seal = seal();
    let c = NatsBus::new(
        client(nats.port()).await,
        c_seal.clone(),
        "t11",
        HashSet::new(),
    );
    let mut fc = c.feed();
    let _ic = c.interest(mount, &watched);
    assert!(c.settled(Duration::from_secs(5)).await);
    attacker.publish(subject, captured).await.unwrap();
    attacker.flush().await.unwrap();
    assert_eq!(drain(&mut fc, Duration::from_millis(500)).await, vec![]);
    assert_eq!(rejected(&c_seal, "event"), 1);
}

/// A files provider whose change token, as S3's, SQL's and api's, is what its own watch of
/// a resource last saw: none for a resource this replica does not watch.
struct TokenWhileWatched {
    files: Arc<dyn mcpr_core::Provider>,
    watched: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

/// Counts one watch of a URI down when dropped.
struct Unwatched {
    watched: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    uri: String,
    _inner: mcpr_core::WatchGuard,
}

impl Drop for Unwatched {
    fn drop(&mut self) {
        let mut w = self.watched.lock().unwrap();
        if let Some(n) = w.get_mut(&self.uri) {
            *n -= 1;
            if *n == 0 {
                w.remove(&self.uri);
            }
        }
    }
}

#[async_trait::async_trait]
impl mcpr_core::Provider for TokenWhileWatched {
    fn info(&self) -> &mcpr_core::ProviderInfo {
        self.files.info()
    }

    async fn read(
        &self,
        uri: &mcpr_core::ResourceUri,
        limits: &mcpr_core::ReadLimits,
    ) -> mcpr_core::Result<mcpr_core::ReadOutput> {
        self.files.read(uri, limits).await
    }

    async fn watch(
        &self,
        uri: &mcpr_core::ResourceUri,
        sink: ChangeSink,
    ) -> mcpr_core::Result<mcpr_core::WatchGuard> {
        let inner = self.files.watch(uri, sink).await?;
        *self
            .watched
            .lock()
            .unwrap()
            .entry(uri.as_str().to_owned())
            .or_default() += 1;
        Ok(mcpr_core::WatchGuard::new(Unwatched {
            watched: self.watched.clone(),
            uri: uri.as_str().to_owned(),
            _inner: inner,
        }))
    }

    async fn change_token(&self, uri: &mcpr_core::ResourceUri) -> Option<String> {
        if !self.watched.lock().unwrap().contains_key(uri.as_str()) {
            return None;
        }
        self.files.change_token(uri).await
    }
}

/// A listen compares a resource's change token taken before its acknowledgment with one
/// taken once its watch is in place, so a change in between is told. A replica that is not
/// the watcher of a shared S3, SQL or api mount has no watch of its own, hence no token:
/// it asks the watcher, whose token moves with the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_does_not_watch_takes_change_tokens_from_the_watcher() {
    use mcpr_core::Watching as _;
    let Some((nats, _dir, root)) = nats_and_root().await else {
        return;
    };
    let ttl = Duration::from_millis(900);
    let provider = || -> Arc<dyn mcpr_core::Provider> {
        Arc::new(TokenWhileWatched {
            files: files(&root),
            watched: Arc::default(),
        })
    };
    let (pa, pb) = (provider(), provider());
    let a = join_as(nats.port(), "t9", "ra", pa.clone(), ttl, 100).await;
    assert!(
        eventually(Duration::from_secs(5), || holds(&a)).await,
        "the first replica never took the lease"
    );
    let b = join_as(nats.port(), "t9", "rb", pb.clone(), ttl, 100).await;
    let ready =
        |j: &mcpr_cluster::Joined| j.watching.cluster().is_some_and(|c| c.problem.is_none());
    assert!(
        eventually(Duration::from_secs(5), || ready(&b)).await,
        "the second replica never joined"
    );
    assert!(!holds(&b));
    let uri =
        mcpr_core::ResourceUri::parse(&format!("file://{}", root.join("a.txt").display())).unwrap();
    // Nobody watches it yet: no token anywhere, as on one replica.
    assert_eq!(b.watching.change_token(MOUNT, &pb, &uri).await, None);
    // A client of the second replica subscribes: the watcher watches it; this replica's
    // provider still does not, and its token is the watcher's.
    let sink = ChangeSink::new(Arc::new(b.bus.clone()), MOUNT);
    let _watch = b.watching.watch(MOUNT, &pb, &uri, sink).await.unwrap();
    assert_eq!(
        pb.change_token(&uri).await,
        None,
        "its own provider has none"
    );
    let before = b.watching.change_token(MOUNT, &pb, &uri).await;
    assert!(before.is_some(), "no token from the watcher");
    assert_eq!(
        before,
        a.watching.change_token(MOUNT, &pa, &uri).await,
        "the same token as the watcher's own (hashed alike)"
    );
    // The source changes: the token moves (the file's size and mtime).
    std::fs::write(root.join("a.txt"), "v1 longer").unwrap();
    let after = b.watching.change_token(MOUNT, &pb, &uri).await;
    assert!(after.is_some());
    assert_ne!(before, after, "the token did not move with the change");
}

/// The watcher keeps the interests of a replica it no longer hears for a minute (a replica
/// cut off lives on); a replica that stops says goodbye, and the watches only it wanted end
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_leaves_ends_the_watches_only_it_wanted() {
    let Some((nats, _dir, root)) = nats_and_root().await else {
        return;
    };
    let ttl = Duration::from_millis(900);
    let (pa, pb) = (files(&root), files(&root));
    let a = join_as(nats.port(), "t10", "ra", pa, ttl, 100).await;
    assert!(
        eventually(Duration::from_secs(5), || holds(&a)).await,
        "the first replica never took the lease"
    );
    let b = join_as(nats.port(), "t10", "rb", pb.clone(), ttl, 100).await;
    let ready = |j: &mcpr_cluster::Joined| {
        use mcpr_core::Watching as _;
        j.watching.cluster().is_some_and(|c| c.problem.is_none())
    };
    assert!(
        eventually(Duration::from_secs(5), || ready(&b)).await,
        "the second replica never joined"
    );
    let uri =
        mcpr_core::ResourceUri::parse(&format!("file://{}", root.join("a.txt").display())).unwrap();
    let sink = ChangeSink::new(Arc::new(b.bus.clone()), MOUNT);
    let watch = {
        use mcpr_core::Watching as _;
        b.watching.watch(MOUNT, &pb, &uri, sink).await.unwrap()
    };
    assert_eq!(a.watching.running(MOUNT), 1);
    // Its subscription stays (a client still holds it): the goodbye alone ends the watch.
    b.watching.leave().await;
    let began = tokio::time::Instant::now();
    assert!(
        eventually(Duration::from_secs(2), || a.watching.running(MOUNT) == 0).await,
        "the watcher still runs the watch of a replica that left"
    );
    assert!(
        began.elapsed() < ttl,
        "ended only after {:?}",
        began.elapsed()
    );
    drop(watch);
}
