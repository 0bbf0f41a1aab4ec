//! How the client prints: tables for people, JSON Lines for programs, and the text a server
//! sends made safe for a terminal.

use std::io::Write;

use serde_json::Value;

/// Whether `c` may not reach a terminal as the server sent it: control characters (C0, DEL
/// and C1: cursor moves, colours, an OSC 52 clipboard write, or the 8-bit CSI that some
/// terminals take), and the bidirectional formatting characters (U+061C, U+200E/F,
/// U+202A-U+202E, U+2066-U+2069), which make text display in another order than it is read
/// (a URI or a name that looks like another).
pub(crate) fn unsafe_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// Text from the server, safe to print in a table cell, a status line or an error message:
/// every character [`unsafe_on_terminal`] names is shown as a `\u{…}` escape, line breaks
/// included, so one value stays one line.
pub(crate) fn clean(text: &str) -> String {
    escaped(text, false)
}

/// Multi-line text from the server (a resource's text printed on a terminal): as [`clean`],
/// but line feeds, tabs and the CR of a CR LF keep their meaning.
pub(crate) fn clean_text(text: &str) -> String {
    escaped(text, true)
}

/// The one cleaning both [`clean`] and [`clean_text`] do.
fn escaped(text: &str, keep_lines: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let layout =
            keep_lines && (c == '\n' || c == '\t' || (c == '\r' && chars.peek() == Some(&'\n')));
        if unsafe_on_terminal(c) && !layout {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// JSON text for a terminal: the characters [`unsafe_on_terminal`] names that JSON may carry
/// raw (DEL, C1 and the bidirectional ones; serializers escape the rest) written as `\uXXXX`
/// escapes, which leaves the JSON's meaning as it was. Outside strings valid JSON has none.
pub(crate) fn clean_json(json: &str) -> std::borrow::Cow<'_, str> {
    if !json.chars().any(unsafe_on_terminal) {
        return json.into();
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if unsafe_on_terminal(c) {
            // Every such character is in the Basic Multilingual Plane: one escape each.
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out.into()
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

/// One JSON Lines record; on a `terminal`, with [`clean_json`]'s escapes.
pub(crate) fn json_line(
    out: &mut impl Write,
    value: &Value,
    terminal: bool,
) -> std::io::Result<()> {
    let text = serde_json::to_string(value)?;
    let shown = if terminal {
        clean_json(&text)
    } else {
        text.as_str().into()
    };
    out.write_all(shown.as_bytes())?;
    out.write_all(b"\n")
}

/// One JSON Lines record, the server's own text for it: only whitespace between tokens is
/// dropped, so a pretty-printed answer still gives one line per record, with the server's
/// key order and number spelling. On a `terminal`, with [`clean_json`]'s escapes.
pub(crate) fn raw_line(
    out: &mut impl Write,
    raw: &serde_json::value::RawValue,
    terminal: bool,
) -> std::io::Result<()> {
    let text = minified(raw.get());
    let shown = if terminal {
        clean_json(&text)
    } else {
        text.as_ref().into()
    };
    out.write_all(shown.as_bytes())?;
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
        // An OSC 52 clipboard write, a C1 CSI and DEL.
        assert_eq!(
            clean("\u{1b}]52;c;ZXZpbA==\u{7}x\u{9b}31m\u{7f}"),
            "\\u{1b}]52;c;ZXZpbA==\\u{7}x\\u{9b}31m\\u{7f}"
        );
    }

    #[test]
    fn bidirectional_controls_from_a_server_are_shown_escaped() {
        for c in [
            '\u{61c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
            '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
        ] {
            let cleaned = clean(&format!("a{c}b"));
            assert_eq!(cleaned, format!("a\\u{{{:x}}}b", u32::from(c)));
            assert!(!cleaned.chars().any(unsafe_on_terminal), "{cleaned}");
        }
        // Neighbours that only join or space letters stay.
        assert_eq!(clean("a\u{200d}b\u{2060}c"), "a\u{200d}b\u{2060}c");
    }

    #[test]
    fn text_on_a_terminal_keeps_its_lines_and_loses_its_escapes() {
        assert_eq!(
            clean_text("one\r\n\ttwo\n\u{1b}[2J\rthree\u{202e}"),
            "one\r\n\ttwo\n\\u{1b}[2J\\u{d}three\\u{202e}"
        );
    }

    #[test]
    fn json_for_a_terminal_escapes_what_serializers_leave_raw() {
        let value = serde_json::json!({"name": "evil\u{202e}txt.exe\u{9b}\u{7f}", "n": 1});
        let text = serde_json::to_string(&value).unwrap();
        let shown = clean_json(&text);
        assert_eq!(shown, r#"{"n":1,"name":"evil\u202etxt.exe\u009b\u007f"}"#);
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, value, "the same JSON, only spelt otherwise");
        assert!(matches!(
            clean_json("{\"a\":1}"),
            std::borrow::Cow::Borrowed(_)
        ));
        let mut out = Vec::new();
        json_line(&mut out, &value, false).unwrap();
        assert_eq!(
            out,
            format!("{text}\n").into_bytes(),
            "a pipe gets it as is"
        );
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
