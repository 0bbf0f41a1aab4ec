//! Keys and URIs: `s3://{bucket}/{key}`, the key percent-encoded per path segment.
//!
//! The rule (README, docs.md): every byte of the key's UTF-8 except the unreserved
//! characters `A-Z a-z 0-9 - . _ ~` and the segment separator `/` is written `%XX` (upper-case
//! hex). So `reports/Q1 results+final#2?.csv` is
//! `s3://b/reports/Q1%20results%2Bfinal%232%3F.csv`, and `ü` is `%C3%BC`. Decoding accepts any
//! percent-encoding of the same bytes (lower-case hex, characters left unencoded where a URI
//! allows them), so `decode(encode(key)) == key` for every key, and the URIs we list are the
//! canonical ones.

use mcpr_core::{Error, ResourceUri, Result};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Bytes written as `%XX` in a key: all but unreserved characters and `/`.
const KEY_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// Bytes written as `%XX` in a query value (`?after=`): `/` too.
const VALUE_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The longest key S3 stores, in bytes.
pub(crate) const KEY_MAX: usize = 1024;

/// `key` as it is written in a URI path.
pub(crate) fn encode_key(key: &str) -> String {
    utf8_percent_encode(key, KEY_SET).to_string()
}

/// `s` as a query value.
pub(crate) fn encode_value(s: &str) -> String {
    utf8_percent_encode(s, VALUE_SET).to_string()
}

/// The key a URI path (after `s3://{bucket}/`, before `?`) names: percent-decoded, UTF-8.
pub(crate) fn decode_key(path: &str) -> Option<String> {
    let s = percent_decode_str(path).decode_utf8().ok()?;
    Some(s.into_owned())
}

/// What a URI of this mount names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// An object.
    Object(String),
    /// A "directory": the keys and common prefixes under this prefix ("" or ending in `/`).
    Dir(String),
}

/// The base URIs of a bucket and the prefix served.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// `s3://{bucket}/`
    pub(crate) root: String,
    /// Only keys starting with this are served.
    pub(crate) prefix: String,
}

impl Keys {
    /// The URI of `key`.
    pub(crate) fn uri_of(&self, key: &str) -> String {
        format!("{}{}", self.root, encode_key(key))
    }

    /// Whether `key` is served by this mount.
    pub(crate) fn serves(&self, key: &str) -> bool {
        key.starts_with(&self.prefix)
    }

    /// What `uri` names, or not-found for a URI outside the bucket, a key outside the prefix,
    /// or a path that does not decode to UTF-8 (no such key can exist).
    pub(crate) fn parse(&self, uri: &ResourceUri) -> Result<Target> {
        let s = uri.without_query();
        let not_found = || Error::not_found(uri.as_str());
        let path = s.strip_prefix(&self.root).ok_or_else(not_found)?;
        if path.contains('#') {
            return Err(not_found());
        }
        let key = decode_key(path).ok_or_else(not_found)?;
        if key.len() > KEY_MAX || key.contains('\0') {
            return Err(not_found());
        }
        if key.is_empty() || key.ends_with('/') {
            // The root of a mount with a prefix reads as the listing of the prefix's part
            // that ends at its last `/` (the whole prefix when it is a "directory").
            if !(self.serves(&key) || key.is_empty() || self.prefix.starts_with(&key)) {
                return Err(not_found());
            }
            return Ok(Target::Dir(key));
        }
        if !self.serves(&key) {
            return Err(not_found());
        }
        Ok(Target::Object(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn awkward_keys_round_trip() {
        let keys = Keys {
            root: "s3://b/".into(),
            prefix: String::new(),
        };
        for key in [
            "plain.txt",
            "a b/c d.txt",
            "plus+sign",
            "100%/done",
            "hash#tag",
            "what?.txt",
            "ünïcödé/日本.md",
            "semi;colon,comma=eq&amp@at:colon",
            "quote\"'`<>[]{}|\\^",
        ] {
            let uri = keys.uri_of(key);
            // Only unreserved characters, `/` and escapes are left in the path.
            assert!(
                uri[7..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~/%".contains(&b)),
                "{uri}"
            );
            let parsed = ResourceUri::parse(&uri).unwrap();
            assert_eq!(
                keys.parse(&parsed).unwrap(),
                Target::Object(key.into()),
                "{uri}"
            );
        }
        assert_eq!(
            keys.uri_of("reports/Q1 results+final#2?.csv"),
            "s3://b/reports/Q1%20results%2Bfinal%232%3F.csv"
        );
        assert_eq!(keys.uri_of("ü"), "s3://b/%C3%BC");
    }

    #[test]
    fn prefix_and_directories() {
        let keys = Keys {
            root: "s3://b/".into(),
            prefix: "reports/".into(),
        };
        let p = |s: &str| keys.parse(&ResourceUri::parse(s).unwrap());
        assert_eq!(
            p("s3://b/reports/x").unwrap(),
            Target::Object("reports/x".into())
        );
        assert_eq!(
            p("s3://b/reports/").unwrap(),
            Target::Dir("reports/".into())
        );
        assert_eq!(p("s3://b/").unwrap(), Target::Dir(String::new()));
        assert!(p("s3://b/other/x").is_err());
        assert!(p("s3://b/other/").is_err());
        assert!(p("s3://c/reports/x").is_err());
        assert!(p("s3://b/reports/%FF").is_err());
        assert!(p("s3://b/reports/%00").is_err());
    }
}
