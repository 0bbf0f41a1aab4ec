//! Rendering one page of rows as the client asked: a JSON document, or CSV (RFC 4180) with
//! the page's facts in `_meta`.

use mcpr_core::ResourceUri;
use serde_json::{Map, Value, json};

use crate::engine::{RowPage, TableRef};
use crate::provider::Inner;
use crate::uri::Format;

pub(crate) const JSON: &str = "application/json";
const CSV: &str = "text/csv";

impl Inner {
    pub(crate) fn render_page(
        &self,
        uri: &ResourceUri,
        t: &TableRef,
        page: RowPage,
        format: Format,
    ) -> (String, &'static str, Option<Map<String, Value>>) {
        let base = uri.without_query();
        let next = page.next_cursor.as_ref().map(|c| {
            let mut n = format!("{base}?cursor={c}");
            if format == Format::Csv {
                n.push_str("&format=csv");
            }
            n
        });
        match format {
            Format::Json => (
                json!({
                    "table": self.shown(t),
                    "columns": page.columns,
                    "row_count": page.rows.len(),
                    "page_size": self.config.page_size,
                    "max_bytes": self.config.max_bytes,
                    "next": next,
                    "rows": page.rows,
                })
                .to_string(),
                JSON,
                None,
            ),
            Format::Csv => {
                let mut meta = Map::new();
                meta.insert("table".into(), json!(self.shown(t)));
                meta.insert("row_count".into(), json!(page.rows.len()));
                meta.insert("page_size".into(), json!(self.config.page_size));
                meta.insert("next".into(), json!(next));
                (csv(&page.columns, &page.rows), CSV, Some(meta))
            }
        }
    }
}

/// A CSV field (RFC 4180): quoted when it holds a separator, quote or line break. Strings
/// are written as they are, NULL as an empty field, anything else as compact JSON.
fn csv_field(v: &Value, out: &mut String) {
    let text = match v {
        Value::Null => return,
        Value::String(s) => s.clone(),
        Value::Object(o) if o.len() == 1 && o.contains_key("base64") => {
            o["base64"].as_str().unwrap_or_default().to_owned()
        }
        other => other.to_string(),
    };
    if text.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&text.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(&text);
    }
}

fn csv(columns: &[String], rows: &[Value]) -> String {
    let mut out = String::new();
    let line = |fields: &mut dyn Iterator<Item = Value>, out: &mut String| {
        for (i, f) in fields.enumerate() {
            if i > 0 {
                out.push(',');
            }
            csv_field(&f, out);
        }
        out.push_str("\r\n");
    };
    line(
        &mut columns.iter().map(|c| Value::String(c.clone())),
        &mut out,
    );
    for r in rows {
        if let Value::Array(cells) = r {
            line(&mut cells.iter().cloned(), &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::csv;

    /// RFC 4180: CRLF line ends, a field quoted only when it holds a separator, a quote (then
    /// doubled) or a line break; NULL is an empty field, a blob its base64, anything else JSON.
    #[test]
    fn csv_quotes_only_what_needs_it() {
        let columns = ["id".to_owned(), "note, with comma".to_owned()];
        let rows = [
            json!([1, "plain"]),
            json!([2, "say \"hi\""]),
            json!([3, "two\nlines"]),
            json!([null, {"base64": "AAE"}]),
            json!([true, {"k": [1, 2]}]),
        ];
        assert_eq!(
            csv(&columns, &rows),
            "id,\"note, with comma\"\r\n\
             1,plain\r\n\
             2,\"say \"\"hi\"\"\"\r\n\
             3,\"two\nlines\"\r\n\
             ,AAE\r\n\
             true,\"{\"\"k\"\":[1,2]}\"\r\n"
        );
    }
}
