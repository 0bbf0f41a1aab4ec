//! The NATS bus and the watcher lease against a real `nats-server -js` this test starts on a
//! random loopback port with its own store directory (so it can stop and restart it). Without
//! the binary the tests say so and pass, except under `CI=true`, where it is a failure.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use mcpr_cluster::{Lease, NatsBus};
use mcpr_core::{ChangeBus, ChangeEvent, ChangeSink, FeedItem};
use mcpr_testkit::nats::NatsServer;

async fn start_nats() -> Option<NatsServer> {
    NatsServer::started()
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
    let a = NatsBus::new(client(nats.port()).await, "t1", local.clone());
    let b = NatsBus::new(client(nats.port()).await, "t1", local.clone());
    let c = NatsBus::new(client(nats.port()).await, "t1", local.clone());
    let other_cluster = NatsBus::new(client(nats.port()).await, "t2", local);
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
        leases.push((r, Lease::compete(c, "lt", "db://shop/", r, ttl)));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_nats_restart_interests_are_subscribed_again() {
    let Some(mut nats) = start_nats().await else {
        return;
    };
    let a = NatsBus::new(client(nats.port()).await, "t3", HashSet::new());
    let b = NatsBus::new(client(nats.port()).await, "t3", HashSet::new());
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
