//! `db://` URI forms of one mount: `db://{name}`, `db://{name}/tables/{table}` and
//! `db://{name}/tables/{table}/schema`, with strict percent-decoding of the table segment.

use mcpr_core::{Error, ResourceUri, Result};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Everything but RFC 3986 unreserved characters is encoded, so a table name is one segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A table name as one URI path segment.
pub(crate) fn encode_segment(name: &str) -> String {
    utf8_percent_encode(name, SEGMENT).to_string()
}

/// What a mount URI (not a named query) addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Overview {
        cursor: Option<String>,
    },
    Table {
        table: String,
        cursor: Option<String>,
    },
    Schema {
        table: String,
    },
}

/// Parse `uri` against the mount `name`; anything else is not found.
pub(crate) fn parse(name: &str, uri: &ResourceUri) -> Result<Target> {
    let not_found = || Error::not_found(uri.as_str());
    let base = format!("db://{name}");
    let rest = uri
        .without_query()
        .strip_prefix(&base)
        .ok_or_else(not_found)?;
    let cursor = query_cursor(uri)?;
    if rest.is_empty() {
        return Ok(Target::Overview { cursor });
    }
    let rest = rest.strip_prefix("/tables/").ok_or_else(not_found)?;
    let (seg, schema) = match rest.strip_suffix("/schema") {
        Some(seg) => (seg, true),
        None => (rest, false),
    };
    if seg.is_empty() || seg.contains('/') || !valid_escapes(seg) {
        return Err(not_found());
    }
    let table = percent_decode_str(seg)
        .decode_utf8()
        .map_err(|_| not_found())?
        .into_owned();
    if schema {
        if cursor.is_some() {
            return Err(Error::invalid_params("a schema has no cursor").with_uri(uri.as_str()));
        }
        Ok(Target::Schema { table })
    } else {
        Ok(Target::Table { table, cursor })
    }
}

fn valid_escapes(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if i + 2 >= b.len() || !(b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit()) {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// The `cursor` query parameter; any other parameter is refused so typos are not ignored.
fn query_cursor(uri: &ResourceUri) -> Result<Option<String>> {
    let mut cursor = None;
    for (k, v) in uri.query_pairs() {
        if k != "cursor" || cursor.is_some() {
            return Err(Error::invalid_params(format!(
                "unknown or repeated query parameter {k:?}; only one `cursor` is accepted"
            ))
            .with_uri(uri.as_str()));
        }
        cursor = Some(percent_decode_str(v).decode_utf8_lossy().into_owned());
    }
    Ok(cursor)
}
