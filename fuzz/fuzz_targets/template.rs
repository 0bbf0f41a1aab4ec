//! RFC 6570 templates: parse any template text without panicking, match any URI against it,
//! and round-trip: the values a URI matches expand to a URI that matches the same values and
//! expands back to itself.
//!
//! Input: the template, a newline, then the URI.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpr_core::UriTemplate;

fuzz_target!(|data: &str| {
    let (template, uri) = data.split_once('\n').unwrap_or((data, ""));
    let Ok(t) = UriTemplate::parse(template) else {
        return;
    };
    assert_eq!(t.as_str(), template);
    // Parsing is deterministic and the text is kept.
    assert_eq!(UriTemplate::parse(template).as_ref(), Ok(&t));
    let _ = t.matches_raw(uri);
    let Some(values) = t.matches(uri) else {
        return;
    };
    for name in values.keys() {
        assert!(
            t.variables().contains(&name.as_str()),
            "{name} is no variable of {template}"
        );
    }
    let expanded = t.expand(&values);
    let again = t.matches(&expanded).unwrap_or_else(|| {
        panic!("{template}: {uri} matched {values:?}, whose expansion {expanded} does not match")
    });
    assert_eq!(again, values, "{template}: {uri} -> {expanded}");
    assert_eq!(
        t.expand(&again),
        expanded,
        "{template}: {uri} -> {expanded}"
    );
});
