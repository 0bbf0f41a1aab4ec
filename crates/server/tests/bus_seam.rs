//! The change bus seam as the registry uses it: a bus that records the interests the
//! registry declares (what a broker bus would subscribe to), around the in-process bus, with
//! the real files provider. The registry declares one interest per watched URI, named by
//! mount name and URI, withdraws it with the last subscriber, and delivers what comes back
//! from the bus once, whoever published it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcpr_core::{ChangeBus, ChangeEvent, ChangeFeed, Interest, LocalBus, Provider, ResourceUri};
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::{Notice, ServerState, Settings};

#[derive(Default)]
struct Recorder {
    live: Mutex<Vec<(String, ChangeEvent)>>,
}

struct Held(Arc<Recorder>, String, ChangeEvent);

impl Drop for Held {
    fn drop(&mut self) {
        let mut live = self.0.live.lock().unwrap();
        let i = live
            .iter()
            .position(|(m, t)| *m == self.1 && *t == self.2)
            .unwrap();
        live.remove(i);
    }
}

struct RecordingBus {
    local: LocalBus,
    rec: Arc<Recorder>,
}

impl ChangeBus for RecordingBus {
    fn publish(&self, mount: &str, event: ChangeEvent) {
        self.local.publish(mount, event)
    }
    fn feed(&self) -> ChangeFeed {
        self.local.feed()
    }
    fn interest(&self, mount: &str, topic: &ChangeEvent) -> Interest {
        self.rec
            .live
            .lock()
            .unwrap()
            .push((mount.to_owned(), topic.clone()));
        Interest::new(Held(self.rec.clone(), mount.to_owned(), topic.clone()))
    }
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ChangeEvent> {
        self.local.subscribe()
    }
}

async fn next(rx: &mut mcpr_server::mailbox::Receiver) -> Option<Notice> {
    tokio::time::timeout(Duration::from_millis(400), rx.recv())
        .await
        .ok()
        .flatten()
}

#[tokio::test]
async fn interests_follow_subscriptions_and_bus_events_are_delivered_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.md"), "a").unwrap();
    let mut cfg = FilesConfig::new(&root);
    cfg.debounce = Duration::from_millis(10);
    let provider: Arc<dyn Provider> = Arc::new(FilesProvider::new(cfg).unwrap());
    let mount_name = provider.info().uri_prefixes[0].clone();
    let rec = Arc::new(Recorder::default());
    let bus = Arc::new(RecordingBus {
        local: LocalBus::default(),
        rec: rec.clone(),
    });
    let state = ServerState::with_bus(Settings::default(), vec![(provider, None)], bus.clone());
    let registry = state.registry().clone();
    let uri = encode_path_uri(&root.join("a.md"));
    let parsed = ResourceUri::parse(&uri).unwrap();

    let (s1, mut rx1) = registry.add_subscriber();
    let (s2, mut rx2) = registry.add_subscriber();
    registry.subscribe(s1, &parsed).await.unwrap();
    registry.subscribe(s2, &parsed).await.unwrap();
    let topic = ChangeEvent::Updated { uri: uri.clone() };
    assert_eq!(
        *rec.live.lock().unwrap(),
        vec![(mount_name.clone(), topic.clone())],
        "one interest per URI, named by mount name and URI"
    );

    // A change published by another replica's watcher (straight on the bus) is delivered.
    bus.publish(&mount_name, topic.clone());
    assert_eq!(next(&mut rx1).await, Some(Notice::Updated(uri.clone())));
    assert_eq!(next(&mut rx2).await, Some(Notice::Updated(uri.clone())));
    assert_eq!(next(&mut rx1).await, None, "once");

    // The local watch publishes on the bus and is heard once, not also directly.
    std::fs::write(root.join("a.md"), "changed").unwrap();
    assert_eq!(next(&mut rx1).await, Some(Notice::Updated(uri.clone())));
    assert_eq!(next(&mut rx1).await, None, "once");

    registry.unsubscribe(s1, &uri);
    assert_eq!(rec.live.lock().unwrap().len(), 1, "s2 still subscribes");
    registry.remove(s2);
    assert!(
        rec.live.lock().unwrap().is_empty(),
        "interest withdrawn with the last subscriber"
    );

    // List listeners declare one interest per mount's list, named by mount name.
    let (s3, _rx3) = registry.add_subscriber();
    registry.add_list_listener(s3).await;
    assert_eq!(
        *rec.live.lock().unwrap(),
        vec![(
            mount_name.clone(),
            ChangeEvent::ListChanged { mount: mount_name }
        )]
    );
    registry.remove(s3);
    assert!(rec.live.lock().unwrap().is_empty());
}
