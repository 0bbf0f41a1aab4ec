//! RFC 6570 templates: parse any template text without panicking, match any URI against it,
//! and round-trip: the values a URI matches expand to a URI that matches the same values and
//! expands back to itself. Between adjacent expressions (`{a}{b}`, `{#a}{.b}`) the split is
//! chosen on the structure alone, and a value holding raw characters that its expansion
//! percent-encodes can read back split elsewhere: there the round trip is asserted on the
//! URI (the expansion matches and expands back to itself), not on the values. With a
//! `{+var}` or `{#var}` only the absence of panics is: their expansion writes reserved
//! characters raw (RFC 6570 §3.2.3), so `fil{+p}` reads `fila%2333` as `p = a#33` and
//! writes `fila#33`, which has a fragment; RFC 6570 does not make those invertible.
//!
//! Input: the template, a newline, then the URI.

#![no_main]

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
    let _ = t.matches_raw(uri);
    let Some(values) = t.matches(uri) else {
        return;
    };
    let adjacent = t
        .parts()
        .windows(2)
        .any(|w| matches!(w, [Part::Expr(_), Part::Expr(_)]));
    let reserved = t.parts().iter().any(
        |p| matches!(p, Part::Expr(e) if matches!(e.op, Operator::Reserved | Operator::Fragment)),
    );
    let lossy = adjacent || reserved;
    for name in values.keys() {
        assert!(
            t.variables().contains(&name.as_str()),
            "{name} is no variable of {template}"
        );
    }
    let expanded = t.expand(&values);
    if lossy {
        if reserved {
            let _ = t.matches(&expanded);
            return;
        }
        let again = t.matches(&expanded).unwrap_or_else(|| {
            panic!(
                "{template}: {uri} matched {values:?}, whose expansion {expanded} does not match"
            )
        });
        assert_eq!(
            t.expand(&again),
            expanded,
            "{template}: {uri} -> {expanded} -> {again:?}"
        );
        return;
    }
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
