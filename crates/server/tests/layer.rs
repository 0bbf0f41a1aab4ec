//! The layer around every provider call (`layers::Layered`): a provider call that bypassed it
//! would hold its request forever here, because these providers' watches, list watches and
//! change tokens never return. Each test bounds what the client sees by the request timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mcpr_core::{
    Capabilities, ChangeSink, Contents, ContentsBody, ErrorKind, Page, PageRequest, Provider,
    ProviderInfo, ReadLimits, ReadOutput, ResourceMeta, ResourceUri, Result, WatchGuard,
};
use mcpr_server::{ChangeTokens, ServerState, Service, Settings};

/// Reads and lists answer at once; starting a watch or a list watch, and taking a change
/// token, never finish (a source that hangs while subscribing, as the http provider's
/// upstream can).
struct Stuck {
    info: ProviderInfo,
}

impl Stuck {
    fn mount(kind: &'static str, prefix: &str, watch: bool) -> Arc<dyn Provider> {
        Arc::new(Self {
            info: ProviderInfo {
                kind,
                label: kind.into(),
                uri_prefixes: vec![prefix.into()],
                capabilities: Capabilities {
                    list: true,
                    read: true,
                    watch,
                    list_changed: watch,
                    ..Default::default()
                },
                cache: Default::default(),
            },
        })
    }
}

#[async_trait]
impl Provider for Stuck {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn list(&self, _page: PageRequest) -> Result<Page<ResourceMeta>> {
        Ok(Page {
            items: Vec::new(),
            next: None,
            hints: None,
        })
    }

    async fn read(&self, uri: &ResourceUri, _limits: &ReadLimits) -> Result<ReadOutput> {
        Ok(vec![Contents {
            uri: uri.as_str().to_owned(),
            mime_type: None,
            body: ContentsBody::Text("x".into()),
            meta: None,
        }]
        .into())
    }

    async fn watch(&self, _uri: &ResourceUri, _sink: ChangeSink) -> Result<WatchGuard> {
        std::future::pending().await
    }

    async fn watch_list(&self, _sink: ChangeSink) -> Result<WatchGuard> {
        std::future::pending().await
    }

    async fn change_token(&self, _uri: &ResourceUri) -> Option<String> {
        std::future::pending().await
    }
}

const TIMEOUT: Duration = Duration::from_millis(300);

/// What the test allows on top of the request timeout before calling a call unbounded.
const SLACK: Duration = Duration::from_secs(2);

fn service(providers: Vec<Arc<dyn Provider>>) -> Service {
    let settings = Settings {
        request_timeout: TIMEOUT,
        ..Settings::default()
    };
    Service::new(ServerState::new(settings, providers))
}

#[tokio::test]
async fn a_watch_that_never_starts_does_not_hold_a_subscribe_past_the_timeout() {
    let service = service(vec![Stuck::mount("stuck", "stuck://", true)]);
    let (subscriber, _rx) = service.add_subscriber(None);
    let began = Instant::now();
    let err = tokio::time::timeout(
        TIMEOUT + SLACK,
        service.subscribe(None, "stuck://a", || subscriber.id()),
    )
    .await
    .expect("the subscribe was held past the request timeout: its watch bypassed the layer")
    .unwrap_err();
    assert!(began.elapsed() >= TIMEOUT);
    assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
    assert_eq!(
        err.message,
        "stuck://a timed out after 300 ms (request_timeout)"
    );
    assert_eq!(err.uri.as_deref(), Some("stuck://a"));
    // Nothing is held for a watch that did not start.
    let stats = service.state().registry().stats();
    assert_eq!((stats.watched_uris, stats.subscriptions), (0, 0));
    // The layer counted the call on its mount, as cut off.
    let calls = &service.state().router().mounts()[0].calls;
    assert_eq!(calls.count("watch", "timeout"), 1);
    assert_eq!(calls.count("watch", "ok"), 0);
}

#[tokio::test]
async fn a_change_token_that_never_comes_does_not_hold_a_listen() {
    let service = service(vec![Stuck::mount("stuck", "stuck://", true)]);
    let tokens = ChangeTokens::default();
    let mut uris = vec!["stuck://a".to_owned(), "stuck://b".to_owned()];
    let began = Instant::now();
    // Both tokens are asked for at once, so together they take one timeout, not two.
    tokio::time::timeout(TIMEOUT + SLACK, service.prepare_listen(&uris, &tokens))
        .await
        .expect("taking change tokens was held past the request timeout: bypassed the layer");
    assert!(began.elapsed() < 2 * TIMEOUT, "{:?}", began.elapsed());
    service.accept_listen(&mut uris);
    assert_eq!(
        uris.len(),
        2,
        "a mount that declares watching keeps its URIs"
    );
    // The listen itself: its tokens, its watches and the list watches each hang and each
    // answer within the timeout; the watches that did not start are left out.
    let listen = tokio::time::timeout(
        6 * TIMEOUT + SLACK,
        service.listen(None, None, &uris, true, &tokens),
    )
    .await
    .expect("a listen was held past its calls' timeouts: a call bypassed the layer")
    .expect("a listen whose watches did not start still starts");
    assert_eq!(service.state().registry().stats().watched_uris, 0);
    drop(listen);
}

#[tokio::test]
async fn a_list_watch_that_never_starts_does_not_hold_a_listing() {
    let service = service(vec![Stuck::mount("stuck", "stuck://", true)]);
    let (subscriber, _rx) = service.add_subscriber(None);
    // A legacy session registers for list changes as it is initialised; the listing waits
    // until the list watches are in place, which here is never.
    service.listen_for_list_changes(subscriber.id());
    let page = tokio::time::timeout(TIMEOUT + SLACK, service.list(None, None))
        .await
        .expect("the listing waited past the timeout for a list watch that bypassed the layer")
        .unwrap();
    assert!(page.items.is_empty());
}

#[tokio::test]
async fn an_undeclared_operation_is_refused_by_the_layer_before_the_provider_is_asked() {
    // Declares neither watching nor list changes; its watch would hang if it were asked.
    let service = service(vec![Stuck::mount("quiet", "quiet://", false)]);
    let (subscriber, _rx) = service.add_subscriber(None);
    let err = tokio::time::timeout(
        SLACK,
        service.subscribe(None, "quiet://a", || subscriber.id()),
    )
    .await
    .expect("an undeclared watch reached the provider")
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unsupported);
    assert_eq!(
        err.message,
        "quiet mounts do not support subscriptions: quiet://a"
    );
    let calls = &service.state().router().mounts()[0].calls;
    assert_eq!(calls.count("watch", "unsupported"), 1);
    // A listen does not accept its URIs, and takes no token for them.
    let tokens = ChangeTokens::default();
    let mut uris = vec!["quiet://a".to_owned()];
    tokio::time::timeout(SLACK, service.prepare_listen(&uris, &tokens))
        .await
        .expect("a change token of an undeclared watch reached the provider");
    service.accept_listen(&mut uris);
    assert!(uris.is_empty());
    assert!(!service.reports_list_changes());
}
