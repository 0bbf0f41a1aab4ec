//! Parsing: template text into literals and expressions (RFC 6570 §2), checked as it goes.

use percent_encoding::{CONTROLS, utf8_percent_encode};

use super::{
    Expression, MAX_PREFIX, MAX_TEMPLATE_LEN, Operator, Part, TemplateError, UriTemplate, VarSpec,
    is_triplet,
};

impl UriTemplate {
    /// Parses a template that will be matched against URIs: anything RFC 6570 does not
    /// allow is refused, and so is a variable named twice ([`TemplateError::RepeatedVariable`]).
    pub fn parse(template: &str) -> Result<Self, TemplateError> {
        Self::parse_with(template, false)
    }

    /// Parses a template that is only expanded, never matched (an upstream URL): like
    /// [`Self::parse`], but a variable may appear several times, as RFC 6570 allows
    /// (`{/var:1,var}` expands to `/v/value`). [`Self::matches`] and [`Self::matches_raw`]
    /// of a template that does repeat a variable return `None` for every URI.
    pub fn parse_for_expansion(template: &str) -> Result<Self, TemplateError> {
        Self::parse_with(template, true)
    }

    fn parse_with(template: &str, allow_repeats: bool) -> Result<Self, TemplateError> {
        if template.len() > MAX_TEMPLATE_LEN {
            return Err(TemplateError::TooLong {
                len: template.len(),
                max: MAX_TEMPLATE_LEN,
            });
        }
        let mut cur = Cursor {
            src: template,
            pos: 0,
        };
        let mut parts = Vec::new();
        let mut literal_start = 0;
        // Each variable's name and the offset of its first appearance.
        let mut names: Vec<(String, usize)> = Vec::new();
        let mut repeats = false;
        while let Some(c) = cur.peek() {
            match c {
                '{' => {
                    push_literal(&mut parts, template, literal_start, cur.pos);
                    let (expr, offsets) = parse_expression(&mut cur)?;
                    for (spec, offset) in expr.vars.iter().zip(offsets) {
                        match names.iter().find(|(n, _)| *n == spec.name) {
                            Some(&(_, first)) if !allow_repeats => {
                                return Err(TemplateError::RepeatedVariable {
                                    name: spec.name.clone(),
                                    offset,
                                    first,
                                });
                            }
                            Some(_) => repeats = true,
                            None => names.push((spec.name.clone(), offset)),
                        }
                    }
                    parts.push(Part::Expr(expr));
                    literal_start = cur.pos;
                }
                '}' => return Err(TemplateError::UnmatchedClose { offset: cur.pos }),
                '%' => {
                    if !is_triplet(template.as_bytes(), cur.pos) {
                        return Err(TemplateError::InvalidPercentEncoding { offset: cur.pos });
                    }
                    cur.pos += 3;
                }
                c if is_literal_char(c) => cur.pos += c.len_utf8(),
                found => {
                    return Err(TemplateError::InvalidLiteral {
                        offset: cur.pos,
                        found,
                    });
                }
            }
        }
        push_literal(&mut parts, template, literal_start, cur.pos);
        Ok(Self {
            source: template.to_owned(),
            parts,
            repeats,
        })
    }
}

struct Cursor<'a> {
    src: &'a str,
    /// Always on a char boundary: it only ever advances by whole characters.
    pos: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<char> {
        self.src.get(self.pos..)?.chars().next()
    }

    fn bump(&mut self) {
        if let Some(c) = self.peek() {
            self.pos += c.len_utf8();
        }
    }
}

fn push_literal(parts: &mut Vec<Part>, template: &str, start: usize, end: usize) {
    if let Some(text) = template.get(start..end).filter(|t| !t.is_empty()) {
        // RFC 6570 §3.1: literal characters a URI cannot hold (the non-ASCII
        // ucschar/iprivate ones) are expanded pct-encoded. Storing that form
        // keeps expansion, matching and `literal_prefix` in agreement. Parsing
        // already rejected control characters, so only non-ASCII is encoded.
        parts.push(Part::Literal(
            utf8_percent_encode(text, CONTROLS).to_string(),
        ));
    }
}

/// One `{...}` expression, and the byte offset of each of its variable names.
fn parse_expression(cur: &mut Cursor<'_>) -> Result<(Expression, Vec<usize>), TemplateError> {
    let open = cur.pos;
    cur.bump(); // '{'
    let op = match cur.peek() {
        None => return Err(TemplateError::UnclosedExpression { offset: open }),
        Some('}') => return Err(TemplateError::EmptyExpression { offset: open }),
        Some(op @ ('=' | ',' | '!' | '@' | '|')) => {
            return Err(TemplateError::ReservedOperator {
                offset: cur.pos,
                op,
            });
        }
        Some(c) => match Operator::from_char(c) {
            Some(op) => {
                cur.bump();
                op
            }
            None => Operator::Simple,
        },
    };
    let mut vars = Vec::new();
    let mut offsets = Vec::new();
    loop {
        offsets.push(cur.pos);
        let name = parse_varname(cur, open)?;
        let mut spec = VarSpec {
            name,
            explode: false,
            prefix: None,
        };
        match cur.peek() {
            Some('*') => {
                cur.bump();
                spec.explode = true;
            }
            Some(':') => {
                let colon = cur.pos;
                cur.bump();
                let digits_start = cur.pos;
                while cur.peek().is_some_and(|c| c.is_ascii_digit()) {
                    cur.bump();
                }
                let digits = cur.src.get(digits_start..cur.pos).unwrap_or_default();
                // Length is checked before parsing so that 99999999999 cannot overflow.
                let prefix = (!digits.starts_with('0') && (1..=4).contains(&digits.len()))
                    .then(|| digits.parse::<u16>().ok())
                    .flatten()
                    .filter(|n| (1..=MAX_PREFIX).contains(n));
                match prefix {
                    Some(n) => spec.prefix = Some(n),
                    None => {
                        return Err(TemplateError::InvalidPrefix {
                            offset: colon,
                            digits: digits.to_owned(),
                        });
                    }
                }
            }
            _ => {}
        }
        vars.push(spec);
        match cur.peek() {
            Some(',') => cur.bump(),
            Some('}') => {
                cur.bump();
                return Ok((Expression { op, vars }, offsets));
            }
            None => return Err(TemplateError::UnclosedExpression { offset: open }),
            Some(found) => {
                return Err(TemplateError::UnexpectedChar {
                    offset: cur.pos,
                    found,
                });
            }
        }
    }
}

/// varname = varchar *( ["."] varchar ); varchar = ALPHA / DIGIT / "_" / pct-encoded
fn parse_varname(cur: &mut Cursor<'_>, open: usize) -> Result<String, TemplateError> {
    let start = cur.pos;
    // True at the start of the name and right after a '.', where a varchar is required.
    let mut need_varchar = true;
    loop {
        match cur.peek() {
            Some(c) if c.is_ascii_alphanumeric() || c == '_' => {
                cur.bump();
                need_varchar = false;
            }
            Some('%') => {
                if !is_triplet(cur.src.as_bytes(), cur.pos) {
                    return Err(TemplateError::InvalidPercentEncoding { offset: cur.pos });
                }
                cur.pos += 3;
                need_varchar = false;
            }
            Some('.') if !need_varchar => {
                cur.bump();
                need_varchar = true;
            }
            next => {
                if !need_varchar {
                    return Ok(cur.src.get(start..cur.pos).unwrap_or_default().to_owned());
                }
                return Err(match next {
                    None => TemplateError::UnclosedExpression { offset: open },
                    Some('}' | ',') if cur.pos == start => {
                        TemplateError::MissingVarName { offset: cur.pos }
                    }
                    // "a.}" or "a.,": blame the dangling dot rather than what follows it.
                    Some('}' | ',') => TemplateError::InvalidVarName {
                        offset: cur.pos - 1,
                        found: '.',
                    },
                    Some(found) => TemplateError::InvalidVarName {
                        offset: cur.pos,
                        found,
                    },
                });
            }
        }
    }
}

/// RFC 6570 §2.1 `literals`, minus `%` which is handled as pct-encoded.
fn is_literal_char(c: char) -> bool {
    match c {
        '!' | '#' | '$' | '&' | '('..=';' | '=' | '?'..='[' | ']' | '_' | 'a'..='z' | '~' => true,
        c if c.is_ascii() => false,
        c => {
            let cp = u32::from(c);
            match cp {
                // ucschar and iprivate in the BMP.
                0xA0..=0xD7FF | 0xE000..=0xFDCF | 0xFDF0..=0xFFEF => true,
                // Planes 1–16 minus each plane's last two code points, and minus
                // E0000-E0FFF (tags and variation selectors), per RFC 3987.
                0x1_0000..=0x10_FFFF => {
                    (cp & 0xFFFF) <= 0xFFFD && !(0xE_0000..=0xE_0FFF).contains(&cp)
                }
                _ => false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{t, te, vars};
    use super::super::*;

    #[test]
    fn parse_accepts_valid_syntax() {
        for template in [
            "",
            "plain",
            "{a:9999}",
            "{a.b.c}",
            "{%20a}",
            "{_}",
            "{a*}",
            "{+a,b*,c:3}",
            "{#a}{.b}{/c}{;d}{?e}{&f}",
            "file:///srv/docs/{+path}{?offset,length,head,tail}",
            "caf\u{e9}/{x}",
            "%7E{x}",
        ] {
            let parsed = t(template);
            assert_eq!(parsed.as_str(), template);
            assert_eq!(parsed.to_string(), template);
            assert_eq!(template.parse::<UriTemplate>().as_ref(), Ok(&parsed));
        }
        let parsed = t("x{+a,b*,c:3}");
        assert_eq!(
            parsed.parts(),
            &[
                Part::Literal("x".into()),
                Part::Expr(Expression {
                    op: Operator::Reserved,
                    vars: vec![
                        VarSpec {
                            name: "a".into(),
                            explode: false,
                            prefix: None
                        },
                        VarSpec {
                            name: "b".into(),
                            explode: true,
                            prefix: None
                        },
                        VarSpec {
                            name: "c".into(),
                            explode: false,
                            prefix: Some(3)
                        },
                    ],
                }),
            ]
        );
    }

    #[test]
    fn parse_errors_name_the_offset() {
        use TemplateError as E;
        let cases: &[(&str, TemplateError)] = &[
            ("{", E::UnclosedExpression { offset: 0 }),
            ("ab{cd", E::UnclosedExpression { offset: 2 }),
            ("x{a,b", E::UnclosedExpression { offset: 1 }),
            (
                "x{a:",
                E::InvalidPrefix {
                    offset: 3,
                    digits: String::new(),
                },
            ),
            ("}", E::UnmatchedClose { offset: 0 }),
            ("a}b", E::UnmatchedClose { offset: 1 }),
            ("x{}", E::EmptyExpression { offset: 1 }),
            ("{=a}", E::ReservedOperator { offset: 1, op: '=' }),
            ("{,a}", E::ReservedOperator { offset: 1, op: ',' }),
            ("{!a}", E::ReservedOperator { offset: 1, op: '!' }),
            ("{@a}", E::ReservedOperator { offset: 1, op: '@' }),
            ("{|a}", E::ReservedOperator { offset: 1, op: '|' }),
            (
                "{a:0}",
                E::InvalidPrefix {
                    offset: 2,
                    digits: "0".into(),
                },
            ),
            (
                "{a:01}",
                E::InvalidPrefix {
                    offset: 2,
                    digits: "01".into(),
                },
            ),
            (
                "{a:10000}",
                E::InvalidPrefix {
                    offset: 2,
                    digits: "10000".into(),
                },
            ),
            (
                "{a:}",
                E::InvalidPrefix {
                    offset: 2,
                    digits: String::new(),
                },
            ),
            (
                "{a b}",
                E::UnexpectedChar {
                    offset: 2,
                    found: ' ',
                },
            ),
            (
                "{a*:3}",
                E::UnexpectedChar {
                    offset: 3,
                    found: ':',
                },
            ),
            (
                "{a{b}}",
                E::UnexpectedChar {
                    offset: 2,
                    found: '{',
                },
            ),
            ("{a,}", E::MissingVarName { offset: 3 }),
            ("{+}", E::MissingVarName { offset: 2 }),
            (
                "{a..b}",
                E::InvalidVarName {
                    offset: 3,
                    found: '.',
                },
            ),
            (
                "{.a.}",
                E::InvalidVarName {
                    offset: 3,
                    found: '.',
                },
            ),
            (
                "{..a}",
                E::InvalidVarName {
                    offset: 2,
                    found: '.',
                },
            ),
            (
                "{a-b}",
                E::UnexpectedChar {
                    offset: 2,
                    found: '-',
                },
            ),
            (
                "{\u{e9}}",
                E::InvalidVarName {
                    offset: 1,
                    found: '\u{e9}',
                },
            ),
            ("{%zz}", E::InvalidPercentEncoding { offset: 1 }),
            ("a%zz", E::InvalidPercentEncoding { offset: 1 }),
            ("a%4", E::InvalidPercentEncoding { offset: 1 }),
            (
                "a b",
                E::InvalidLiteral {
                    offset: 1,
                    found: ' ',
                },
            ),
            (
                "a\"b",
                E::InvalidLiteral {
                    offset: 1,
                    found: '"',
                },
            ),
            (
                "a\u{7f}",
                E::InvalidLiteral {
                    offset: 1,
                    found: '\u{7f}',
                },
            ),
        ];
        for (template, expected) in cases {
            assert_eq!(
                UriTemplate::parse(template).as_ref(),
                Err(expected),
                "{template:?}"
            );
        }
        let message = UriTemplate::parse("ab{cd")
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(message.contains("byte offset 2"), "{message}");
        let message = UriTemplate::parse("{a:0}")
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("byte offset 2") && message.contains(":0"),
            "{message}"
        );
    }

    #[test]
    fn parse_length_limit() {
        let ok = "a".repeat(MAX_TEMPLATE_LEN);
        assert!(UriTemplate::parse(&ok).is_ok());
        let long = "a".repeat(MAX_TEMPLATE_LEN + 1);
        assert_eq!(
            UriTemplate::parse(&long),
            Err(TemplateError::TooLong {
                len: MAX_TEMPLATE_LEN + 1,
                max: MAX_TEMPLATE_LEN
            })
        );
    }

    /// Fuzz finding (`template` target): `{y,hello,y}` matched `.` as `y = .`, whose
    /// expansion `.,.` matches other values, so a matched URI did not round-trip. A template
    /// matched against URIs may not name a variable twice, in one expression or across
    /// several; one that is only expanded may, and then matches nothing.
    #[test]
    fn fuzz_repeated_variable_is_refused() {
        use TemplateError as E;
        let cases: &[(&str, &str, usize, usize)] = &[
            ("{y,hello,y}", "y", 9, 1),
            ("{/var:1,var}", "var", 8, 2),
            ("x/{a}/{+a}", "a", 8, 3),
            ("{?a,b}{&a}", "a", 8, 2),
            ("{;a,ab,a}", "a", 7, 2),
        ];
        for &(template, name, offset, first) in cases {
            let err = UriTemplate::parse(template).unwrap_err();
            assert_eq!(
                err,
                E::RepeatedVariable {
                    name: name.into(),
                    offset,
                    first
                },
                "{template}"
            );
            let message = err.to_string();
            assert!(
                message.contains(&format!("{name:?}")) && message.contains("byte offset"),
                "{message}"
            );
        }
        // Names that share a prefix are different variables.
        assert!(UriTemplate::parse("{a,ab}{/a.b}").is_ok());
        // For expansion, RFC 6570's own repeat expands; it never matches, not even itself.
        let repeat = te("{y,hello,y}");
        let values = vars(&[("y", "."), ("hello", "h")]);
        assert_eq!(repeat.expand(&values), ".,h,.");
        for uri in [".", ".,.", ".,h,.", ""] {
            assert_eq!(repeat.matches(uri), None, "{uri}");
            assert_eq!(repeat.matches_raw(uri), None, "{uri}");
        }
        assert_eq!(
            te("{/var:1,var}").expand(&vars(&[("var", "value")])),
            "/v/value"
        );
        // A template without repeats parses the same both ways.
        assert_eq!(te("x/{a}/{+b}"), t("x/{a}/{+b}"));
    }
}
