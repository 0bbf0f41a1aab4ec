//! `ResourceUri::parse` on any string: no panic, and an accepted URI is split consistently
//! (scheme, the part before the query, the query) and kept exactly as given.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpr_core::uri::MAX_URI_LEN;
use mcpr_core::{ErrorKind, ResourceUri};

fuzz_target!(|raw: &str| {
    match ResourceUri::parse(raw) {
        Ok(uri) => {
            assert_eq!(uri.as_str(), raw);
            assert_eq!(uri.to_string(), raw);
            assert!(raw.len() <= MAX_URI_LEN);
            assert!(!raw.chars().any(|c| c.is_control() || c == ' '));
            let scheme = uri.scheme();
            assert!(!scheme.is_empty() && scheme.as_bytes()[0].is_ascii_alphabetic());
            assert!(!scheme.contains(':'));
            assert!(raw.starts_with(&format!("{scheme}:")));
            // The split is lossless: before the query, then `?` and the query.
            let rebuilt = match uri.query() {
                Some(q) => format!("{}?{q}", uri.without_query()),
                None => uri.without_query().to_owned(),
            };
            assert_eq!(rebuilt, raw);
            assert!(!uri.without_query().contains('?'));
            // Every pair comes from the query, and the pairs cover all of it.
            if let Some(q) = uri.query().filter(|q| !q.is_empty()) {
                let pairs = uri.query_pairs();
                assert_eq!(pairs.len(), q.split('&').count());
                for (k, _) in &pairs {
                    assert!(!k.contains('&'));
                }
            }
            let routed = uri.routing_form();
            if let Some(rest) = raw.strip_prefix("file://localhost/") {
                assert_eq!(routed, format!("file:///{rest}"));
            } else {
                assert_eq!(routed, raw);
            }
        }
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::InvalidParams, "{e:?}");
            assert!(!e.message.is_empty());
        }
    }
});
