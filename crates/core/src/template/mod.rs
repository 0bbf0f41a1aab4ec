//! RFC 6570 URI templates: parse, expand, and match a concrete URI back to variable values.
//!
//! [`UriTemplate::parse`] accepts the full RFC 6570 syntax (levels 1–4),
//! [`UriTemplate::expand`] implements §3.2 for string values, and
//! [`UriTemplate::matches`] is the inverse used to route a concrete URI to a
//! template and recover the variable values.
//!
//! Literals are validated against RFC 6570 §2.1 (no spaces, quotes, `<`, `>`,
//! `\`, `^`, `` ` ``, `|`, control characters or stray `%`), so a template
//! built from a filesystem path must percent-encode it first. Non-ASCII
//! literal characters are allowed and, as §3.1 requires, percent-encoded in
//! expansions (and expected in that form when matching).
//!
//! # Matching rules
//!
//! * Literals match byte-for-byte in their expanded form (no case folding).
//! * `{var}` matches a run of characters other than `/ ? # &` (and `,` when
//!   the expression lists several variables); `{.var}` one `.label`;
//!   `{/var}` one `/segment` (neither holds a raw `&`, which their expansion
//!   never writes); `{;var}` `;name` or `;name=value`.
//! * `{+var}` may contain `/` but stops before `?` and `#`; `{#var}` starts at
//!   `#` and may contain anything.
//! * A `{?..}` expression together with the `{&..}` expressions directly
//!   after it matches an optional query string with keys in any order, each
//!   key at most once. An undeclared key makes the whole URI not match; a key
//!   without `=` yields `""`; absent keys are absent from the result. Values
//!   run to the next `&` or `#`.
//! * A prefix modifier `:N` limits the matched value to `N` decoded characters.
//! * A variable appears once. [`UriTemplate::parse`] refuses a template that names one
//!   twice (RFC 6570 allows it, e.g. `{/var:1,var}`): the structural split below would
//!   have to agree across the occurrences, and `{y,hello,y}` against `.` gave `y = .`,
//!   which expands to `.,.`, a URI that matches other values (the `template` fuzz target's
//!   first finding). A template that is only expanded, never matched (an upstream URL),
//!   may repeat variables through [`UriTemplate::parse_for_expansion`]; such a template
//!   matches no URI.
//! * When a URI can be split in more than one way, later pieces take the
//!   shortest non-empty match, which makes earlier pieces greedy:
//!   `{+path}/{file}` against `a/b/c` gives `path = a/b`, `file = c`, and
//!   `{name}{.ext}` against `a.tar.gz` gives `name = a.tar`, `ext = gz`.
//! * A URI that the template could have written is split the way it was written: a first,
//!   strict pass admits only values as their expansion writes them (unreserved characters
//!   and `%XX` of other bytes; in `{+var}` and `{#var}` reserved characters too), only the
//!   named forms it writes (`;name` for an empty value, `key=`), and query keys in template
//!   order. Only when no strict split exists does the lenient one above read raw
//!   characters (`a b`, `x:y`), `?key` and keys in any order.
//! * Every match reads back ([`UriTemplate::canonical`]): the URI the template writes for
//!   the matched values matches the same values. A URI for which that fails does not match:
//!   `x{?a}1{b}` against `x?a={1?b=1`, whose raw `?` is all that stops `{b}` from taking
//!   part of it once the value is written `%7B1%3Fb%3D`. A value also never holds a `%XX`
//!   that decodes to no character where it stands (`%A3` alone).
//!
//! # Cost of matching
//!
//! Matching never backtracks. A forward pass computes, for each template
//! piece in turn, the *set* of URI offsets where that piece can end (like a
//! Thompson NFA simulation); a backward pass then picks one parse. Each
//! expression enumerates its possible ends from a start offset in O(k)
//! (k = variables in the expression) using precomputed next-delimiter
//! tables, and overlapping ranges are merged with a sweep. For a URI of L
//! bytes and a template of P pieces the time is O(P · L · k) plus literal
//! comparisons (at most L · |literal| per literal, in practice far less), and
//! the memory O(P · L / 8) bytes for the offset sets plus a few O(L) tables.
//! A 100 KB URI against `{+a}/{+b}/{+c}` therefore costs a few milliseconds
//! (release build), not the O(L³) of naive backtracking. The factor P is
//! bounded by the template, which is trusted configuration: the worst an
//! 8 KiB template can do is ~2,700 expressions, about 2.5 s against a 100 KB
//! URI (P·L = 2.7·10⁸ steps).
//!
//! Ambiguity is resolved on the structure alone, which is why a variable may not repeat:
//! each split then gives every variable exactly one value. The read-back costs one
//! expansion, and a second split only when the URI is not already canonical; a lenient
//! split adds one more.
//!
//! # Layout
//!
//! This file holds the types and what the three share; `parse.rs` turns text into
//! [`Part`]s, `expand.rs` writes them (RFC 6570 §3.2), and `matching.rs` reads a URI back
//! into values (the passes described above). Each keeps its tests beside it.

use std::fmt;
use std::str::FromStr;

mod expand;
mod matching;
mod parse;

/// Longest template accepted by [`UriTemplate::parse`], in bytes.
pub const MAX_TEMPLATE_LEN: usize = 8 * 1024;

/// Largest prefix modifier (`{var:N}`) RFC 6570 §2.4.1 allows.
pub const MAX_PREFIX: u16 = 9999;

/// Why a string is not a valid URI template. Offsets are byte offsets into the template.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// The template is longer than [`MAX_TEMPLATE_LEN`].
    #[error("URI template is {len} bytes long; the maximum is {max} bytes")]
    TooLong {
        /// Length of the rejected template in bytes.
        len: usize,
        /// The limit, [`MAX_TEMPLATE_LEN`].
        max: usize,
    },
    /// A `{` has no matching `}`.
    #[error("unclosed expression: '{{' at byte offset {offset} has no matching '}}'")]
    UnclosedExpression {
        /// Offset of the opening `{`.
        offset: usize,
    },
    /// A `}` appears outside an expression.
    #[error("unmatched '}}' at byte offset {offset}")]
    UnmatchedClose {
        /// Offset of the stray `}`.
        offset: usize,
    },
    /// `{}` contains nothing.
    #[error("empty expression '{{}}' at byte offset {offset}")]
    EmptyExpression {
        /// Offset of the opening `{`.
        offset: usize,
    },
    /// One of the operators RFC 6570 reserves for future use: `= , ! @ |`.
    #[error("operator '{op}' at byte offset {offset} is reserved by RFC 6570 and not supported")]
    ReservedOperator {
        /// Offset of the operator character.
        offset: usize,
        /// The operator character.
        op: char,
    },
    /// An operator, `,` or `}` where a variable name should start.
    #[error("missing variable name at byte offset {offset}")]
    MissingVarName {
        /// Offset where the name should have started.
        offset: usize,
    },
    /// A character that may not appear in a variable name at that point.
    #[error(
        "invalid character {found:?} in variable name at byte offset {offset} \
         (names are letters, digits, '_' and %XX, with single '.' between them)"
    )]
    InvalidVarName {
        /// Offset of the offending character.
        offset: usize,
        /// The offending character.
        found: char,
    },
    /// A `:N` prefix modifier that is not an integer from 1 to 9999.
    #[error(
        "invalid prefix modifier ':{digits}' at byte offset {offset}: \
         expected an integer from 1 to 9999 without leading zeros"
    )]
    InvalidPrefix {
        /// Offset of the `:`.
        offset: usize,
        /// The digits that followed the `:` (possibly none).
        digits: String,
    },
    /// Something other than `,` or `}` after a variable specification.
    #[error("unexpected character {found:?} at byte offset {offset}: expected ',' or '}}'")]
    UnexpectedChar {
        /// Offset of the offending character.
        offset: usize,
        /// The offending character.
        found: char,
    },
    /// A character RFC 6570 §2.1 does not allow in a literal (space, `"`, `<`, control characters, ...).
    #[error("character {found:?} at byte offset {offset} is not allowed in a URI template literal")]
    InvalidLiteral {
        /// Offset of the offending character.
        offset: usize,
        /// The offending character.
        found: char,
    },
    /// A `%` not followed by two hex digits.
    #[error("'%' at byte offset {offset} is not followed by two hex digits")]
    InvalidPercentEncoding {
        /// Offset of the `%`.
        offset: usize,
    },
    /// A variable named a second time, in a template that is matched against URIs.
    #[error(
        "variable {name:?} at byte offset {offset} already appears at byte offset {first}; \
         a URI template matched against URIs names each variable once \
         (a repeat makes the match ambiguous)"
    )]
    RepeatedVariable {
        /// The variable's name as written.
        name: String,
        /// Offset of the repeat.
        offset: usize,
        /// Offset of its first appearance.
        first: usize,
    },
}

/// The operator of an expression (RFC 6570 §2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `{var}`: simple string expansion.
    Simple,
    /// `{+var}`: reserved expansion; reserved characters pass through.
    Reserved,
    /// `{#var}`: fragment expansion, prefixed by `#`.
    Fragment,
    /// `{.var}`: label expansion, prefixed by `.`.
    Label,
    /// `{/var}`: path segments, prefixed by `/`.
    Path,
    /// `{;var}`: path-style parameters `;name=value`.
    PathParam,
    /// `{?var}`: form-style query `?name=value&...`.
    Query,
    /// `{&var}`: form-style query continuation `&name=value`.
    QueryCont,
}

impl Operator {
    /// The operator character, or `None` for [`Operator::Simple`].
    pub fn as_char(self) -> Option<char> {
        match self {
            Self::Simple => None,
            Self::Reserved => Some('+'),
            Self::Fragment => Some('#'),
            Self::Label => Some('.'),
            Self::Path => Some('/'),
            Self::PathParam => Some(';'),
            Self::Query => Some('?'),
            Self::QueryCont => Some('&'),
        }
    }

    fn from_char(c: char) -> Option<Self> {
        Some(match c {
            '+' => Self::Reserved,
            '#' => Self::Fragment,
            '.' => Self::Label,
            '/' => Self::Path,
            ';' => Self::PathParam,
            '?' => Self::Query,
            '&' => Self::QueryCont,
            _ => return None,
        })
    }

    /// The expansion table of RFC 6570 Appendix A for this operator.
    fn spec(self) -> OpSpec {
        let (first, sep, named, ifemp, allow_reserved) = match self {
            Self::Simple => ("", ",", false, "", false),
            Self::Reserved => ("", ",", false, "", true),
            Self::Fragment => ("#", ",", false, "", true),
            Self::Label => (".", ".", false, "", false),
            Self::Path => ("/", "/", false, "", false),
            Self::PathParam => (";", ";", true, "", false),
            Self::Query => ("?", "&", true, "=", false),
            Self::QueryCont => ("&", "&", true, "=", false),
        };
        OpSpec {
            first,
            sep,
            named,
            ifemp,
            allow_reserved,
        }
    }
}

/// One row of RFC 6570 Appendix A.
struct OpSpec {
    first: &'static str,
    sep: &'static str,
    named: bool,
    ifemp: &'static str,
    allow_reserved: bool,
}

/// A variable reference inside an expression, with its modifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VarSpec {
    /// The variable name exactly as written (may contain `.` and `%XX`).
    pub name: String,
    /// The `*` explode modifier. It has no effect on string values.
    pub explode: bool,
    /// The `:N` prefix modifier, 1..=9999.
    pub prefix: Option<u16>,
}

/// A `{...}` expression: an operator and one or more variables.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Expression {
    /// The operator.
    pub op: Operator,
    /// The variables, in template order (never empty).
    pub vars: Vec<VarSpec>,
}

/// A piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Part {
    /// Literal text in URI form: copied on expansion and compared byte-wise on
    /// matching. Non-ASCII characters are percent-encoded (RFC 6570 §3.1), so
    /// for an ASCII template this is exactly the template text.
    Literal(String),
    /// A `{...}` expression.
    Expr(Expression),
}

/// A parsed RFC 6570 URI template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    source: String,
    parts: Vec<Part>,
    /// Some variable appears more than once (only through [`Self::parse_for_expansion`]):
    /// the template expands but matches nothing.
    repeats: bool,
}

impl UriTemplate {
    /// The template text as given to [`UriTemplate::parse`].
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The parsed literals and expressions, in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Variable names in order of first appearance.
    pub fn variables(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for var in self.expressions().flat_map(|e| &e.vars) {
            if !names.contains(&var.name.as_str()) {
                names.push(&var.name);
            }
        }
        names
    }

    /// The literal text before the first expression (used to route a template to a mount by prefix).
    ///
    /// Like [`Part::Literal`], it is in URI form (non-ASCII percent-encoded).
    pub fn literal_prefix(&self) -> &str {
        match self.parts.first() {
            Some(Part::Literal(text)) => text,
            _ => "",
        }
    }

    fn expressions(&self) -> impl Iterator<Item = &Expression> {
        self.parts.iter().filter_map(|part| match part {
            Part::Expr(expr) => Some(expr),
            Part::Literal(_) => None,
        })
    }
}

impl FromStr for UriTemplate {
    type Err = TemplateError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for UriTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl serde::Serialize for UriTemplate {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.source)
    }
}

impl<'de> serde::Deserialize<'de> for UriTemplate {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A `%XX` at `i` (parsing, expansion and matching all treat one as a unit).
fn is_triplet(bytes: &[u8], i: usize) -> bool {
    bytes.get(i) == Some(&b'%')
        && bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
        && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
}

/// What the tests of parse, expand and match share: value maps, templates, RFC 6570's examples.
#[cfg(test)]
mod test_support {
    use std::collections::BTreeMap;

    use super::UriTemplate;

    pub(super) fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    pub(super) fn t(template: &str) -> UriTemplate {
        UriTemplate::parse(template).unwrap_or_else(|e| panic!("{template:?}: {e}"))
    }

    /// A template that is only expanded: repeats allowed.
    pub(super) fn te(template: &str) -> UriTemplate {
        UriTemplate::parse_for_expansion(template).unwrap_or_else(|e| panic!("{template:?}: {e}"))
    }

    /// The string variables of RFC 6570 §1.2 and §3.2.
    pub(super) fn rfc_vars() -> BTreeMap<String, String> {
        vars(&[
            ("dub", "me/too"),
            ("hello", "Hello World!"),
            ("half", "50%"),
            ("var", "value"),
            ("who", "fred"),
            ("base", "http://example.com/home/"),
            ("path", "/foo/bar"),
            ("v", "6"),
            ("x", "1024"),
            ("y", "768"),
            ("empty", ""),
        ])
    }

    // Every string-valued example of RFC 6570 (§1.2 levels 1-4 and §3.2.2-3.2.9).
    pub(super) const RFC_EXAMPLES: &[(&str, &str)] = &[
        // Level 1 / §3.2.2 simple
        ("{var}", "value"),
        ("{hello}", "Hello%20World%21"),
        ("{half}", "50%25"),
        ("O{empty}X", "OX"),
        ("O{undef}X", "OX"),
        ("{x,y}", "1024,768"),
        ("{x,hello,y}", "1024,Hello%20World%21,768"),
        ("?{x,empty}", "?1024,"),
        ("?{x,undef}", "?1024"),
        ("?{undef,y}", "?768"),
        ("{var:3}", "val"),
        ("{var:30}", "value"),
        ("map?{x,y}", "map?1024,768"),
        // Level 2 / §3.2.3 reserved
        ("{+var}", "value"),
        ("{+hello}", "Hello%20World!"),
        ("{+half}", "50%25"),
        ("{base}index", "http%3A%2F%2Fexample.com%2Fhome%2Findex"),
        ("{+base}index", "http://example.com/home/index"),
        ("O{+empty}X", "OX"),
        ("O{+undef}X", "OX"),
        ("{+path}/here", "/foo/bar/here"),
        ("here?ref={+path}", "here?ref=/foo/bar"),
        ("up{+path}{var}/here", "up/foo/barvalue/here"),
        ("{+x,hello,y}", "1024,Hello%20World!,768"),
        ("{+path,x}/here", "/foo/bar,1024/here"),
        ("{+path:6}/here", "/foo/b/here"),
        // §3.2.4 fragment
        ("{#var}", "#value"),
        ("{#hello}", "#Hello%20World!"),
        ("{#half}", "#50%25"),
        ("foo{#empty}", "foo#"),
        ("foo{#undef}", "foo"),
        ("X{#var}", "X#value"),
        ("X{#hello}", "X#Hello%20World!"),
        ("{#x,hello,y}", "#1024,Hello%20World!,768"),
        ("{#path,x}/here", "#/foo/bar,1024/here"),
        ("{#path:6}/here", "#/foo/b/here"),
        // §3.2.5 label
        ("{.who}", ".fred"),
        ("{.who,who}", ".fred.fred"),
        ("{.half,who}", ".50%25.fred"),
        ("X{.var}", "X.value"),
        ("X{.x,y}", "X.1024.768"),
        ("X{.empty}", "X."),
        ("X{.undef}", "X"),
        ("X{.var:3}", "X.val"),
        // §3.2.6 path
        ("{/who}", "/fred"),
        ("{/who,who}", "/fred/fred"),
        ("{/half,who}", "/50%25/fred"),
        ("{/who,dub}", "/fred/me%2Ftoo"),
        ("{/var}", "/value"),
        ("{/var,empty}", "/value/"),
        ("{/var,undef}", "/value"),
        ("{/var,x}/here", "/value/1024/here"),
        ("{/var:1,var}", "/v/value"),
        // §3.2.7 path-style parameters
        ("{;who}", ";who=fred"),
        ("{;half}", ";half=50%25"),
        ("{;empty}", ";empty"),
        ("{;v,empty,who}", ";v=6;empty;who=fred"),
        ("{;v,bar,who}", ";v=6;who=fred"),
        ("{;x,y}", ";x=1024;y=768"),
        ("{;x,y,empty}", ";x=1024;y=768;empty"),
        ("{;x,y,undef}", ";x=1024;y=768"),
        ("{;hello:5}", ";hello=Hello"),
        // §3.2.8 query
        ("{?who}", "?who=fred"),
        ("{?half}", "?half=50%25"),
        ("{?x,y}", "?x=1024&y=768"),
        ("{?x,y,empty}", "?x=1024&y=768&empty="),
        ("{?x,y,undef}", "?x=1024&y=768"),
        ("{?var:3}", "?var=val"),
        // §3.2.9 query continuation
        ("{&who}", "&who=fred"),
        ("{&half}", "&half=50%25"),
        ("?fixed=yes{&x}", "?fixed=yes&x=1024"),
        ("{&x,y,empty}", "&x=1024&y=768&empty="),
        ("{&var:3}", "&var=val"),
    ];
}

#[cfg(test)]
mod tests {
    use super::test_support::{t, te, vars};
    use super::*;

    #[test]
    fn accessors() {
        let tpl = te("file:///srv/docs/{+path}{?offset,length}{&path}");
        assert_eq!(tpl.literal_prefix(), "file:///srv/docs/");
        assert_eq!(tpl.variables(), ["path", "offset", "length"]);
        // Non-ASCII literals are percent-encoded in URI form (RFC 6570 §3.1).
        let iri = t("caf\u{e9}/{x}");
        assert_eq!(iri.as_str(), "caf\u{e9}/{x}");
        assert_eq!(iri.literal_prefix(), "caf%C3%A9/");
        assert_eq!(iri.expand(&vars(&[("x", "\u{e9}")])), "caf%C3%A9/%C3%A9");
        assert_eq!(
            iri.matches("caf%C3%A9/%C3%A9"),
            Some(vars(&[("x", "\u{e9}")]))
        );
        assert_eq!(iri.matches("caf\u{e9}/1"), None);
        assert_eq!(t("{x}/y").literal_prefix(), "");
        assert_eq!(Operator::QueryCont.as_char(), Some('&'));
        assert_eq!(Operator::Simple.as_char(), None);
    }

    #[test]
    fn serde_round_trip() {
        let tpl = t("db://users/{id}");
        let json = serde_json::to_string(&tpl).unwrap();
        assert_eq!(json, "\"db://users/{id}\"");
        assert_eq!(serde_json::from_str::<UriTemplate>(&json).unwrap(), tpl);
        let err = serde_json::from_str::<UriTemplate>("\"db://{\"").unwrap_err();
        assert!(err.to_string().contains("byte offset 5"), "{err}");
    }
}
