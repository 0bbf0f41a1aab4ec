//! RFC 6570 templates: parse any template text without panicking, match any URI against it,
//! and round-trip. Every match reads back: the template's canonical form of the URI (what
//! it writes for the matched values) matches the same values and is its own canonical
//! form; without a `{+var}` or `{#var}` that canonical form is exactly the RFC expansion of
//! the decoded values, so a matched URI expands to a URI that matches the same values and
//! expands back to itself. (`{+var}` and `{#var}` write reserved characters and `%XX` raw,
//! RFC 6570 §3.2.3, so their decoded values are not invertible: `%23` would come back as a
//! raw `#`; their canonical form keeps the `%XX` matched.) And whatever the values, what the
//! template writes matches, as itself.
//!
//! Input: the template, a newline, then the URI (also the source of values to expand).

#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use mcpr_core::UriTemplate;
use mcpr_core::template::{Operator, Part};

fuzz_target!(|data: &str| {
    let (template, uri) = data.split_once('\n').unwrap_or((data, ""));
    let Ok(t) = UriTemplate::parse(template) else {
        return;
    };
    assert_eq!(t.as_str(), template);
    // Parsing is deterministic and the text is kept.
    assert_eq!(UriTemplate::parse(template).as_ref(), Ok(&t));
    matches_read_back(&t, uri);
    expansions_match(&t, uri);
});

/// Whether the template has a `{+var}` or `{#var}`.
fn verbatim(t: &UriTemplate) -> bool {
    t.parts().iter().any(
        |p| matches!(p, Part::Expr(e) if matches!(e.op, Operator::Reserved | Operator::Fragment)),
    )
}

fn matches_read_back(t: &UriTemplate, uri: &str) {
    let template = t.as_str();
    let raw = t.matches_raw(uri);
    let Some(values) = t.matches(uri) else {
        assert_eq!(t.canonical(uri), None, "{template}: {uri} has a canonical form but no match");
        return;
    };
    let raw = raw.unwrap_or_else(|| panic!("{template}: {uri} matches decoded, not raw"));
    assert!(raw.keys().eq(values.keys()), "{template}: {uri}");
    for name in values.keys() {
        assert!(
            t.variables().contains(&name.as_str()),
            "{name} is no variable of {template}"
        );
    }
    let canonical = t
        .canonical(uri)
        .unwrap_or_else(|| panic!("{template}: {uri} matches but has no canonical form"));
    let again = t.matches(&canonical);
    assert_eq!(again.as_ref(), Some(&values), "{template}: {uri} -> {canonical}");
    assert_eq!(
        t.canonical(&canonical).as_deref(),
        Some(canonical.as_str()),
        "{template}: {uri} -> {canonical}"
    );
    if !verbatim(t) {
        // The value round trip: the expansion of what a URI matched is its canonical form.
        assert_eq!(t.expand(&values), canonical, "{template}: {uri}");
    }
}

/// Expands the template with values cut from `text` and matches the result back. Left
/// out are the values RFC 6570 writes so that no split recovers them: a `{.var}` value
/// holding `.` (the label separator, written raw), a `{+var}` one holding `?` or `#`, and
/// in an expression of several variables a `{+var}` or `{#var}` one holding `,`. Nor may
/// a `{+var}` or `{#var}` value hold `%`: a `%XX` in it is copied, and `%A3` alone is no
/// UTF-8 to match.
fn expansions_match(t: &UriTemplate, text: &str) {
    let template = t.as_str();
    let mut values = BTreeMap::new();
    let mut chars = text.chars().cycle();
    for part in t.parts() {
        let Part::Expr(e) = part else { continue };
        for var in &e.vars {
            // Each variable its own slice of the text, so values differ.
            let take = (values.len() * 7 + text.len()) % 23;
            let value: String = chars
                .by_ref()
                .take(take)
                .filter(|&c| match e.op {
                    Operator::Label => c != '.',
                    Operator::Reserved => {
                        !matches!(c, '?' | '#' | '%') && (c != ',' || e.vars.len() == 1)
                    }
                    Operator::Fragment => c != '%' && (c != ',' || e.vars.len() == 1),
                    _ => true,
                })
                .collect();
            values.insert(var.name.clone(), value);
        }
    }
    let expanded = t.expand(&values);
    let matched = t
        .matches(&expanded)
        .unwrap_or_else(|| panic!("{template}: {values:?} expand to {expanded}, which does not match"));
    assert_eq!(
        t.canonical(&expanded).as_deref(),
        Some(expanded.as_str()),
        "{template}: {values:?} -> {expanded}"
    );
    if !verbatim(t) {
        assert_eq!(t.expand(&matched), expanded, "{template}: {values:?} -> {matched:?}");
    }
}
