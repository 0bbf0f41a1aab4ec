//! Operations a provider does not declare answer `Unsupported`, never an empty result that
//! looks real (STYLE habit 2).

use mcpr_core::{
    ChangeSink, CompletionRequest, ErrorKind, LocalBus, PageRequest, Provider, ReadLimits,
};

use crate::Fixture;
use crate::checks::parse;

fn assert_unsupported<T>(op: &str, answer: mcpr_core::Result<T>) {
    match answer {
        Ok(_) => panic!(
            "unsupported: {op} is not declared in the capabilities and must answer \
             Unsupported, not a result"
        ),
        Err(e) => assert_eq!(
            e.kind,
            ErrorKind::Unsupported,
            "unsupported: {op} is not declared in the capabilities and must answer \
             Unsupported, got {:?}: {e}",
            e.kind
        ),
    }
}

/// For each capability the provider leaves out, the matching call answers `Unsupported`.
pub(crate) async fn check_undeclared(provider: &dyn Provider, fixture: &dyn Fixture) {
    let caps = provider.info().capabilities;
    let uri = fixture
        .expected()
        .into_iter()
        .next()
        .map_or_else(|| fixture.missing_uri(), |(u, _)| u);
    let parsed = parse(&uri);
    if !caps.list {
        let page = provider
            .list(PageRequest {
                after: None,
                limit: 10,
            })
            .await;
        assert_unsupported("list", page);
    }
    if fixture.directories().is_empty() {
        // A fixture that names no directory: the provider must have none to read either,
        // so directory reads cannot start answering untested.
        let page = provider
            .read_directory(
                &parsed,
                PageRequest {
                    after: None,
                    limit: 10,
                },
            )
            .await;
        assert_unsupported("read_directory", page);
    }
    if !caps.read {
        let read = provider
            .read(&parsed, &ReadLimits { max_bytes: 1 << 20 })
            .await;
        assert_unsupported("read", read);
    }
    if !caps.templates {
        // `templates()` has no error to answer: not declaring them means advertising none.
        assert!(
            provider.templates().is_empty(),
            "unsupported: templates are not declared, yet {} are advertised",
            provider.templates().len()
        );
    }
    if !caps.complete {
        let template = provider.templates().first().map_or_else(
            || {
                fixture
                    .completion_case()
                    .map_or_else(|| format!("{uri}{{x}}"), |c| c.0)
            },
            |t| t.uri_template.clone(),
        );
        let done = provider
            .complete(CompletionRequest {
                template,
                argument: "x".into(),
                value: String::new(),
                context: Default::default(),
            })
            .await;
        assert_unsupported("complete", done);
    }
    let bus = std::sync::Arc::new(LocalBus::default());
    if !caps.watch {
        let w = provider
            .watch(&parsed, ChangeSink::new(bus.clone(), "m0"))
            .await;
        assert_unsupported("watch", w);
    }
    if !caps.list_changed {
        let w = provider.watch_list(ChangeSink::new(bus, "m0")).await;
        assert_unsupported("watch_list (list_changed)", w);
    }
}
