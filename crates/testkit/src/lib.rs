//! The provider behaviour suite: the checks every provider must pass against a real backend,
//! picked by the capabilities it declares.
//!
//! A provider's own tests build a real source (files in a temp dir, a database, ...), wrap it
//! in a [`Fixture`] that knows what the source holds and how to change it, and call
//! [`run_suite`]. A failure panics with a message naming the behaviour that broke.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeSink, ContentsBody, ErrorKind, LocalBus, PageRequest, Provider,
    ReadLimits, ResourceUri, UriTemplate,
};

/// What a backend holds and how to change it, for the suite.
#[async_trait]
pub trait Fixture: Send + Sync {
    /// Every resource the provider must list, with its exact bytes, in any order.
    fn expected(&self) -> Vec<(String, Vec<u8>)>;
    /// A URI the mount owns that names nothing.
    fn missing_uri(&self) -> String;
    /// URIs that must answer not-found (escapes, denied entries): no oracle.
    fn forbidden_uris(&self) -> Vec<String> {
        Vec::new()
    }
    /// Change the resource at `uri` (its content).
    async fn modify(&self, uri: &str);
    /// Add one new resource and return its URI.
    async fn add(&self) -> String;
    /// For completion: (template, argument, typed value, a value that must be suggested).
    fn completion_case(&self) -> Option<(String, String, String, String)> {
        None
    }
}

/// How long a change may take to be reported before the suite calls it lost.
const NOTIFY_WITHIN: Duration = Duration::from_secs(2);

/// Run every check the provider's capabilities call for.
pub async fn run_suite(provider: Arc<dyn Provider>, fixture: &dyn Fixture) {
    let caps = provider.info().capabilities;
    assert!(
        provider.ready().await,
        "ready: a freshly built provider over a live source must be ready"
    );
    if caps.list {
        for size in [1, 3, 100] {
            check_pagination(provider.as_ref(), fixture, size).await;
        }
    }
    if caps.read {
        check_reads(provider.as_ref(), fixture).await;
    }
    if caps.templates {
        check_templates(provider.as_ref(), fixture);
    }
    if caps.complete {
        check_completion(provider.as_ref(), fixture).await;
    }
    if caps.watch {
        check_watch(provider.clone(), fixture).await;
    }
    if caps.list_changed {
        check_list_changed(provider.clone(), fixture).await;
    }
}

async fn enumerate(provider: &dyn Provider, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    // The page a cursor gave the first time; fetching it again must give the same page.
    let mut probe = None;
    for _ in 0..1_000_000 {
        let page = provider
            .list(PageRequest {
                after: after.clone(),
                limit,
            })
            .await
            .expect("list: a page must load");
        if let Some(first) = probe.take() {
            assert_eq!(
                page, first,
                "list: the same cursor must give the same page (stateless cursors)"
            );
        }
        assert!(
            page.items.len() <= limit,
            "list: page of {} exceeds the limit {limit}",
            page.items.len()
        );
        let next = page.next.clone();
        out.extend(page.items.into_iter().map(|m| m.uri));
        let Some(n) = next else { return out };
        probe = Some(
            provider
                .list(PageRequest {
                    after: Some(n.clone()),
                    limit,
                })
                .await
                .expect("list: a page must load"),
        );
        after = Some(n);
    }
    panic!("list: pagination did not end");
}

async fn check_pagination(provider: &dyn Provider, fixture: &dyn Fixture, limit: usize) {
    let listed = enumerate(provider, limit).await;
    let unique: BTreeSet<&String> = listed.iter().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "list (page size {limit}): an entry was listed twice"
    );
    let expected: BTreeSet<String> = fixture.expected().into_iter().map(|(u, _)| u).collect();
    let got: BTreeSet<String> = listed.iter().cloned().collect();
    let missing: Vec<_> = expected.difference(&got).collect();
    let extra: Vec<_> = got.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "list (page size {limit}): missing {missing:?}, unexpected {extra:?}"
    );
}

async fn check_reads(provider: &dyn Provider, fixture: &dyn Fixture) {
    let limits = ReadLimits {
        max_bytes: 64 * 1024 * 1024,
    };
    for (uri, bytes) in fixture.expected() {
        let parsed = ResourceUri::parse(&uri).expect("fixture URIs parse");
        let contents = provider
            .read(&parsed, &limits)
            .await
            .unwrap_or_else(|e| panic!("read {uri}: {e}"));
        assert_eq!(contents.len(), 1, "read {uri}: one content item");
        let got = match &contents[0].body {
            ContentsBody::Text(t) => t.as_bytes().to_vec(),
            ContentsBody::Blob(b) => b.clone(),
        };
        assert_eq!(got, bytes, "read {uri}: bytes differ");
        if let ContentsBody::Blob(_) = &contents[0].body {
            assert!(
                std::str::from_utf8(&bytes).is_err(),
                "read {uri}: valid UTF-8 must come back as text"
            );
        }
    }
    let missing = fixture.missing_uri();
    for uri in std::iter::once(missing).chain(fixture.forbidden_uris()) {
        let Ok(parsed) = ResourceUri::parse(&uri) else {
            continue;
        };
        let err = provider
            .read(&parsed, &limits)
            .await
            .expect_err(&format!("read {uri} must fail"));
        assert_eq!(
            err.kind,
            ErrorKind::NotFound,
            "read {uri}: must answer not found, got {err}"
        );
        assert_eq!(
            err.uri.as_deref(),
            Some(uri.as_str()),
            "read {uri}: the error must carry the URI"
        );
    }
}

fn check_templates(provider: &dyn Provider, fixture: &dyn Fixture) {
    let templates = provider.templates();
    assert!(
        !templates.is_empty(),
        "templates: a provider declaring templates must advertise one"
    );
    for t in templates {
        let parsed = UriTemplate::parse(&t.uri_template)
            .unwrap_or_else(|e| panic!("template {}: {e}", t.uri_template));
        assert!(
            !t.name.is_empty(),
            "template {}: needs a name",
            t.uri_template
        );
        let _ = parsed;
    }
    // Every listed URI must be addressable through at least one advertised template.
    for (uri, _) in fixture.expected() {
        let hit = templates
            .iter()
            .any(|t| UriTemplate::parse(&t.uri_template).is_ok_and(|p| p.matches(&uri).is_some()));
        assert!(hit, "templates: {uri} matches no advertised template");
    }
}

async fn check_completion(provider: &dyn Provider, fixture: &dyn Fixture) {
    let Some((template, argument, value, want)) = fixture.completion_case() else {
        return;
    };
    let done = provider
        .complete(mcpr_core::CompletionRequest {
            template: template.clone(),
            argument,
            value: value.clone(),
            context: Default::default(),
        })
        .await
        .expect("complete");
    assert!(
        done.values.contains(&want),
        "complete {template} {value:?}: expected {want:?} among {:?}",
        done.values
    );
    assert!(done.values.len() <= 100, "complete: at most 100 values");
}

async fn next_event(
    rx: &mut tokio::sync::broadcast::Receiver<ChangeEvent>,
    within: Duration,
) -> Option<ChangeEvent> {
    tokio::time::timeout(within, rx.recv())
        .await
        .ok()
        .and_then(Result::ok)
}

async fn check_watch(provider: Arc<dyn Provider>, fixture: &dyn Fixture) {
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let (uri, _) = fixture
        .expected()
        .into_iter()
        .next()
        .expect("fixture has resources");
    let parsed = ResourceUri::parse(&uri).expect("parse");
    let guard = provider
        .watch(&parsed, ChangeSink::new(bus.clone(), 0))
        .await
        .expect("watch");
    fixture.modify(&uri).await;
    match next_event(&mut rx, NOTIFY_WITHIN).await {
        Some(ChangeEvent::Updated { uri: got }) => {
            assert_eq!(got, uri, "watch: notified for the wrong URI")
        }
        other => {
            panic!("watch: expected an update of {uri} within {NOTIFY_WITHIN:?}, got {other:?}")
        }
    }
    drop(guard);
    // Let any event already in flight arrive, then demand silence.
    tokio::time::sleep(Duration::from_millis(300)).await;
    while rx.try_recv().is_ok() {}
    fixture.modify(&uri).await;
    let after = next_event(&mut rx, Duration::from_millis(800)).await;
    assert!(
        after.is_none(),
        "watch: a dropped watch must be silent, got {after:?}"
    );
}

async fn check_list_changed(provider: Arc<dyn Provider>, fixture: &dyn Fixture) {
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let guard = provider
        .watch_list(ChangeSink::new(bus.clone(), 7))
        .await
        .expect("watch_list");
    let added = fixture.add().await;
    let deadline = tokio::time::Instant::now() + NOTIFY_WITHIN;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match next_event(&mut rx, left).await {
            Some(ChangeEvent::ListChanged { mount }) => {
                assert_eq!(mount, 7, "list_changed: must name the sink's mount");
                break;
            }
            Some(_) => continue,
            None => {
                panic!("list_changed: adding {added} was not reported within {NOTIFY_WITHIN:?}")
            }
        }
    }
    drop(guard);
}
