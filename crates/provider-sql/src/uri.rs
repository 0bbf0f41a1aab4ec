//! `db://` URI forms of one mount: `db://{name}`, `db://{name}/tables/{table}`,
//! `db://{name}/tables/{table}/schema`, and on engines with schemas
//! `db://{name}/schemas/{schema}/tables/{table}[/schema]`, with strict percent-decoding of
//! each name segment; tables take `cursor` and `format` (`json` or `csv`) parameters.

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

/// The format a table page is rendered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Format {
    #[default]
    Json,
    Csv,
}

/// What a mount URI (not a named query) addresses. `schema` is `Some` only for the long form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Overview {
        cursor: Option<String>,
    },
    Table {
        schema: Option<String>,
        table: String,
        cursor: Option<String>,
        format: Format,
    },
    Schema {
        schema: Option<String>,
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
    let (cursor, format) = query_params(uri)?;
    if rest.is_empty() {
        if format.is_some() {
            return Err(Error::invalid_params(
                "the overview is JSON only; `format` applies to tables",
            )
            .with_uri(uri.as_str()));
        }
        return Ok(Target::Overview { cursor });
    }
    let decode = |seg: &str| -> Result<String> {
        if seg.is_empty() || seg.contains('/') || !valid_escapes(seg) {
            return Err(not_found());
        }
        Ok(percent_decode_str(seg)
            .decode_utf8()
            .map_err(|_| not_found())?
            .into_owned())
    };
    let (schema, rest) = match rest.strip_prefix("/schemas/") {
        Some(r) => {
            let (seg, r) = r.split_once('/').ok_or_else(not_found)?;
            (Some(decode(seg)?), format!("/{r}"))
        }
        None => (None, rest.to_owned()),
    };
    let rest = rest.strip_prefix("/tables/").ok_or_else(not_found)?;
    let (seg, is_schema) = match rest.strip_suffix("/schema") {
        Some(seg) => (seg, true),
        None => (rest, false),
    };
    let table = decode(seg)?;
    if is_schema {
        if cursor.is_some() || format.is_some() {
            return Err(
                Error::invalid_params("a schema takes no cursor or format").with_uri(uri.as_str())
            );
        }
        Ok(Target::Schema { schema, table })
    } else {
        Ok(Target::Table {
            schema,
            table,
            cursor,
            format: format.unwrap_or_default(),
        })
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

/// The `cursor` and `format` query parameters; any other or repeated parameter is refused so
/// typos are not ignored.
fn query_params(uri: &ResourceUri) -> Result<(Option<String>, Option<Format>)> {
    let (mut cursor, mut format) = (None, None);
    let bad = |why: String| Error::invalid_params(why).with_uri(uri.as_str());
    for (k, v) in uri.query_pairs() {
        let v = percent_decode_str(v).decode_utf8_lossy().into_owned();
        match k {
            "cursor" if cursor.is_none() => cursor = Some(v),
            "format" if format.is_none() => {
                format = Some(match v.as_str() {
                    "json" => Format::Json,
                    "csv" => Format::Csv,
                    _ => return Err(bad(format!("format {v:?} is not one of \"json\", \"csv\""))),
                })
            }
            _ => {
                return Err(bad(format!(
                    "unknown or repeated query parameter {k:?}; tables accept one `cursor` and one `format`"
                )));
            }
        }
    }
    Ok((cursor, format))
}
