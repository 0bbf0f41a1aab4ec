//! `Provider::templates` and `Provider::complete`: templates parse, address every listed
//! resource, and completed values expand to URIs this mount owns.

use std::collections::BTreeMap;

use mcpr_core::{CompletionRequest, Provider, UriTemplate};

use crate::Fixture;
use crate::checks::assert_under_prefixes;

pub(crate) fn check_templates(provider: &dyn Provider, fixture: &dyn Fixture) {
    let templates = provider.templates();
    assert!(
        !templates.is_empty(),
        "templates: a provider declaring templates must advertise one"
    );
    for t in templates.iter() {
        UriTemplate::parse(&t.uri_template)
            .unwrap_or_else(|e| panic!("template {}: {e}", t.uri_template));
        assert!(
            !t.name.is_empty(),
            "template {}: needs a name",
            t.uri_template
        );
    }
    // Every listed URI must be addressable through at least one advertised template.
    for (uri, _) in fixture.expected() {
        let hit = templates
            .iter()
            .any(|t| UriTemplate::parse(&t.uri_template).is_ok_and(|p| p.matches(&uri).is_some()));
        assert!(hit, "templates: {uri} matches no advertised template");
    }
}

pub(crate) async fn check_completion(provider: &dyn Provider, fixture: &dyn Fixture) {
    let (template, argument, value, want) = fixture
        .completion_case()
        .expect("complete: a provider declaring completion needs a completion_case in its fixture");
    let done = provider
        .complete(CompletionRequest {
            template: template.clone(),
            argument: argument.clone(),
            value: value.clone(),
            context: Default::default(),
        })
        .await
        .unwrap_or_else(|e| panic!("complete {template} {argument}={value:?}: {e}"));
    assert!(
        done.values.contains(&want),
        "complete {template} {value:?}: expected {want:?} among {:?}",
        done.values
    );
    assert!(done.values.len() <= 100, "complete: at most 100 values");
    // Each suggestion, put into the template, must name a URI this mount owns: otherwise a
    // client following the suggestion is routed elsewhere.
    let parsed = UriTemplate::parse(&template)
        .unwrap_or_else(|e| panic!("complete: template {template}: {e}"));
    for v in &done.values {
        let uri = parsed.expand(&BTreeMap::from([(argument.clone(), v.clone())]));
        assert_under_prefixes(provider, &uri, &format!("completion {v:?} expanded to"));
    }
}
