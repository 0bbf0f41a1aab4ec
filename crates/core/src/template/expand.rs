//! Expansion (RFC 6570 §3.2) of string values.

use std::collections::BTreeMap;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::{Expression, Part, UriTemplate, is_triplet};

impl UriTemplate {
    /// RFC 6570 expansion of string values (missing/undefined variables are skipped as the RFC says).
    ///
    /// Literals are copied as stored in [`Part::Literal`]: already valid URI text.
    pub fn expand(&self, vars: &BTreeMap<String, String>) -> String {
        self.expand_keeping(vars, &BTreeMap::new())
    }

    /// [`Self::expand`] part by part: the text each of [`Self::parts`] writes (a literal as
    /// stored, an expression as expanded), in order; concatenated, they are the expansion.
    /// A caller can tell what the values wrote from what the template wrote.
    pub fn expand_parts(&self, vars: &BTreeMap<String, String>) -> Vec<String> {
        let none = BTreeMap::new();
        self.parts
            .iter()
            .map(|part| match part {
                Part::Literal(text) => text.clone(),
                Part::Expr(expr) => {
                    let mut out = String::new();
                    expand_expression(expr, vars, &none, &mut out);
                    out
                }
            })
            .collect()
    }

    /// [`Self::expand`], except that the variables in `verbatim` are written from the text
    /// given there as it is (escapes and all), untruncated: a matched `{+var}`'s text
    /// already holds at most its prefix of decoded characters, and counting its `%XX` as
    /// three would cut one in half.
    pub(super) fn expand_keeping(
        &self,
        vars: &BTreeMap<String, String>,
        verbatim: &BTreeMap<String, &str>,
    ) -> String {
        let mut out = String::with_capacity(self.source.len());
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Expr(expr) => expand_expression(expr, vars, verbatim, &mut out),
            }
        }
        out
    }
}

/// Everything but `unreserved` is encoded (RFC 6570 "U").
const ENCODE_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `unreserved` and `reserved` pass through (RFC 6570 "U+R"). `%` stays in the
/// set: valid triplets are copied separately, a lone `%` must become `%25`.
const ENCODE_RESERVED: &AsciiSet = &ENCODE_UNRESERVED
    .remove(b':')
    .remove(b'/')
    .remove(b'?')
    .remove(b'#')
    .remove(b'[')
    .remove(b']')
    .remove(b'@')
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=');

fn expand_expression(
    expr: &Expression,
    vars: &BTreeMap<String, String>,
    verbatim: &BTreeMap<String, &str>,
    out: &mut String,
) {
    let spec = expr.op.spec();
    let mut first = true;
    for var in &expr.vars {
        let kept = verbatim.get(&var.name).copied();
        let Some(value) = kept.or_else(|| vars.get(&var.name).map(String::as_str)) else {
            continue;
        };
        out.push_str(if first { spec.first } else { spec.sep });
        first = false;
        if spec.named {
            out.push_str(&var.name);
            if value.is_empty() {
                out.push_str(spec.ifemp);
                continue;
            }
            out.push('=');
        }
        let value = match var.prefix {
            Some(n) if kept.is_none() => truncate_chars(value, usize::from(n)),
            _ => value,
        };
        push_encoded(value, spec.allow_reserved, out);
    }
}

fn push_encoded(value: &str, allow_reserved: bool, out: &mut String) {
    if !allow_reserved {
        out.extend(utf8_percent_encode(value, ENCODE_UNRESERVED));
        return;
    }
    let bytes = value.as_bytes();
    let (mut copied, mut i) = (0, 0);
    while i < bytes.len() {
        if is_triplet(bytes, i) {
            out.extend(utf8_percent_encode(
                value.get(copied..i).unwrap_or_default(),
                ENCODE_RESERVED,
            ));
            out.push_str(value.get(i..i + 3).unwrap_or_default());
            i += 3;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.extend(utf8_percent_encode(
        value.get(copied..).unwrap_or_default(),
        ENCODE_RESERVED,
    ));
}

/// The first `n` Unicode scalar values of `s` (RFC 6570 counts characters, not bytes).
fn truncate_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => s.get(..i).unwrap_or(s),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{RFC_EXAMPLES, rfc_vars, t, te, vars};

    #[test]
    fn rfc_examples_expand() {
        let values = rfc_vars();
        for (template, expected) in RFC_EXAMPLES {
            assert_eq!(
                &te(template).expand(&values),
                expected,
                "template {template:?}"
            );
        }
    }

    #[test]
    fn expand_edge_cases() {
        let values = vars(&[("a", "é/ ~%zz%41"), ("b", "日本語")]);
        assert_eq!(t("{a}").expand(&values), "%C3%A9%2F%20~%25zz%2541");
        // Reserved expansion keeps valid triplets and encodes a lone '%'.
        assert_eq!(t("{+a}").expand(&values), "%C3%A9/%20~%25zz%41");
        // Prefixes count characters, not bytes.
        assert_eq!(t("{b:2}").expand(&values), "%E6%97%A5%E6%9C%AC");
        assert_eq!(t("{a*}").expand(&values), t("{a}").expand(&values));
        assert_eq!(t("x{?undef}").expand(&values), "x");
        assert_eq!(t("{?a:1,b:1}").expand(&values), "?a=%C3%A9&b=%E6%97%A5");
        assert_eq!(t("lit%20eral").expand(&values), "lit%20eral");
    }
}
