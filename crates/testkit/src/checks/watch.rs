//! Change reporting: `change_token`, `watch` and `watch_list`.

use std::sync::Arc;
use std::time::Duration;

use mcpr_core::{ChangeBus, ChangeEvent, ChangeSink, LocalBus, Provider};

use crate::Fixture;
use crate::checks::parse;

/// How long a change may take to be reported before the suite calls it lost.
const NOTIFY_WITHIN: Duration = Duration::from_secs(2);

/// The first expected resource: the one the suite modifies.
fn first_uri(fixture: &dyn Fixture) -> String {
    fixture
        .expected()
        .into_iter()
        .next()
        .expect("fixture has resources")
        .0
}

/// Tokens are stable while a resource is unchanged and change with it; a provider without
/// tokens must say so in its fixture and then answer `None` everywhere.
pub(crate) async fn check_change_token(provider: &dyn Provider, fixture: &dyn Fixture) {
    if !fixture.change_tokens() {
        for (uri, _) in fixture.expected() {
            let t = provider.change_token(&parse(&uri)).await;
            assert!(
                t.is_none(),
                "change_token: the fixture says the provider has no tokens, yet {uri} has \
                 {t:?}; set Fixture::change_tokens so the suite checks them"
            );
        }
        return;
    }
    let uri = first_uri(fixture);
    let parsed = parse(&uri);
    let before = provider
        .change_token(&parsed)
        .await
        .unwrap_or_else(|| panic!("change_token: {uri} must have a token (fixture says so)"));
    let again = provider.change_token(&parsed).await;
    assert_eq!(
        again.as_ref(),
        Some(&before),
        "change_token: {uri} unchanged must keep its token"
    );
    fixture.modify(&uri).await;
    let after = provider.change_token(&parsed).await;
    assert!(
        after.is_some() && after.as_ref() != Some(&before),
        "change_token: {uri} must get a different token after it changed (before {before:?}, \
         after {after:?})"
    );
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

pub(crate) async fn check_watch(provider: Arc<dyn Provider>, fixture: &dyn Fixture) {
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let uri = first_uri(fixture);
    let parsed = parse(&uri);
    let guard = provider
        .watch(&parsed, ChangeSink::new(bus.clone(), "m0"))
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

pub(crate) async fn check_list_changed(provider: Arc<dyn Provider>, fixture: &dyn Fixture) {
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let guard = provider
        .watch_list(ChangeSink::new(bus.clone(), "m7"))
        .await
        .expect("watch_list");
    let added = fixture.add().await;
    let deadline = tokio::time::Instant::now() + NOTIFY_WITHIN;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match next_event(&mut rx, left).await {
            Some(ChangeEvent::ListChanged { mount }) => {
                assert_eq!(mount, "m7", "list_changed: must name the sink's mount");
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
