//! How the client prints: tables for people, JSON Lines for programs, and the text a server
//! sends made safe for a terminal.

use std::io::Write;

use serde_json::Value;

/// Text from the server, safe to print in a table cell or a status line: control characters
/// (which could move the cursor or recolour the terminal) shown as `\u{…}` escapes.
pub(crate) fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// A byte count for people: exact below 1 KiB, else one decimal in KiB, MiB, GiB or TiB.
pub(crate) fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A string field of a JSON object, or "-" when absent.
pub(crate) fn field(obj: &Value, key: &str) -> String {
    obj.get(key)
        .and_then(Value::as_str)
        .map_or_else(|| "-".to_owned(), clean)
}

/// Print rows under a header, columns padded to their widest cell; the last column is not
/// padded (no trailing blanks).
pub(crate) fn table(
    out: &mut impl Write,
    header: &[&str],
    rows: &[Vec<String>],
) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i == last {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', w - cell.chars().count() + 2));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// One JSON Lines record.
pub(crate) fn json_line(out: &mut impl Write, value: &Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n")
}

/// One JSON Lines record, the server's own text for it: only whitespace between tokens is
/// dropped, so a pretty-printed answer still gives one line per record, with the server's
/// key order and number spelling.
pub(crate) fn raw_line(
    out: &mut impl Write,
    raw: &serde_json::value::RawValue,
) -> std::io::Result<()> {
    out.write_all(minified(raw.get()).as_bytes())?;
    out.write_all(b"\n")
}

/// JSON text without whitespace outside strings.
fn minified(json: &str) -> std::borrow::Cow<'_, str> {
    if !json.contains(['\n', '\r', ' ', '\t']) {
        return json.into();
    }
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\n' | '\r' | '\t') {
            out.push(c);
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_from_a_server_cannot_reach_the_terminal() {
        assert_eq!(clean("a\u{1b}[2Jb\n"), "a\\u{1b}[2Jb\\u{a}");
        assert_eq!(clean("ünïcode ok"), "ünïcode ok");
    }

    #[test]
    fn raw_records_keep_the_servers_text_on_one_line() {
        assert_eq!(
            minified("{\n  \"z\": 1.50,\n  \"a\": \"x y\\\" \\n\"\n}"),
            "{\"z\":1.50,\"a\":\"x y\\\" \\n\"}"
        );
        assert_eq!(minified("{\"b\":1,\"a\":2}"), "{\"b\":1,\"a\":2}");
    }

    #[test]
    fn sizes_read_as_people_expect() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(20 * 1024 * 1024), "20.0 MiB");
    }

    #[test]
    fn tables_pad_every_column_but_the_last() {
        let mut out = Vec::new();
        table(
            &mut out,
            &["URI", "NAME"],
            &[
                vec!["file:///a".into(), "a".into()],
                vec!["x".into(), "-".into()],
            ],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "URI        NAME\nfile:///a  a\nx          -\n"
        );
    }
}
