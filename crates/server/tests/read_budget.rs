//! Issue #20 item 5 (part): `[server] max_inflight_read_bytes` bounds what reads in progress
//! may hold together. Reads past it wait for one to finish, up to the request timeout, then
//! answer a temporary "server busy" error naming the setting.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::{
    Capabilities, Contents, ContentsBody, ErrorKind, Provider, ProviderInfo, ReadLimits,
    ResourceUri, Result,
};
use mcpr_server::{ServerState, Service, Settings};
use tokio::sync::Semaphore;

/// Reads that finish only when the test lets them (one permit per read).
struct GateProvider {
    info: ProviderInfo,
    gate: Arc<Semaphore>,
}

#[async_trait]
impl Provider for GateProvider {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn read(&self, uri: &ResourceUri, _limits: &ReadLimits) -> Result<mcpr_core::ReadOutput> {
        self.gate.acquire().await.unwrap().forget();
        Ok(vec![Contents {
            uri: uri.as_str().to_owned(),
            mime_type: None,
            body: ContentsBody::Text("done".into()),
            meta: None,
        }]
        .into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_past_the_inflight_budget_wait_then_answer_server_busy() {
    let gate = Arc::new(Semaphore::new(0));
    let provider: Arc<dyn Provider> = Arc::new(GateProvider {
        info: ProviderInfo {
            kind: "gate",
            label: "gate".into(),
            uri_prefixes: vec!["gate://".into()],
            capabilities: Capabilities {
                read: true,
                ..Default::default()
            },
            cache: Default::default(),
        },
        gate: gate.clone(),
    });
    // Room for one read of the largest size at a time.
    let settings = Settings {
        max_read_bytes: 1 << 20,
        max_inflight_read_bytes: 1 << 20,
        request_timeout: Duration::from_millis(400),
        ..Settings::default()
    };
    let service = Service::new(ServerState::new(settings, vec![provider]));
    let read = |n: u32| {
        let s = service.clone();
        tokio::spawn(async move { s.read(None, &format!("gate://r{n}")).await })
    };

    // A read that finishes as soon as it may lets the one waiting behind it go on at once.
    let (a, b) = (read(1), read(2));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!a.is_finished() && !b.is_finished());
    gate.add_permits(2);
    for h in [a, b] {
        let outcome = tokio::time::timeout(Duration::from_secs(5), h)
            .await
            .expect("a read waited past its turn")
            .unwrap()
            .unwrap();
        assert_eq!(outcome.contents.len(), 1);
    }

    // One read holds the whole budget until its provider call times out (400 ms); four
    // behind it wait. When it lets go, one of them takes the budget (and, its gate shut,
    // times out in turn); the other three have waited their whole request timeout and
    // answer "server busy", without their provider being called.
    let holder = read(10);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let waiting: Vec<_> = (11..15).map(read).collect();
    let held = holder.await.unwrap().unwrap_err();
    assert_eq!(held.kind, ErrorKind::Timeout, "{held}");
    let mut busy = 0;
    let mut timed_out = 0;
    for h in waiting {
        let err = h.await.unwrap().unwrap_err();
        match err.kind {
            ErrorKind::Unavailable => {
                assert!(err.message.contains("server busy"), "{err}");
                assert!(err.message.contains("max_inflight_read_bytes"), "{err}");
                busy += 1;
            }
            ErrorKind::Timeout => timed_out += 1,
            other => panic!("{other:?}: {err}"),
        }
    }
    assert_eq!((busy, timed_out), (3, 1));
}
