//! Property tests for `mcpr_core::template`: expand→match round trips, tamper
//! rejection, and the absence of panics on arbitrary input.

use std::collections::BTreeMap;

use mcpr_core::template::*;
use proptest::prelude::*;

/// A value alphabet mixing unreserved, reserved, "unsafe" and multi-byte characters.
const ANY: &[char] = &[
    'a', 'Z', '0', '9', '-', '.', '_', '~', ' ', '/', '?', '#', '[', ']', '@', '!', '$', '&', '\'',
    '(', ')', '*', '+', ',', ';', '=', ':', '%', '"', '<', '\\', 'é', '日', '😀',
];

/// Which characters a value may hold so that its expansion reads back unambiguously.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alphabet {
    /// Operators that percent-encode everything but unreserved characters:
    /// the expansion can never contain a delimiter, so anything goes.
    Any,
    /// `{.x}`: '.' is unreserved, so it survives expansion and would read back
    /// as a label separator.
    NoDot,
    /// `{+x}`: reserved characters survive expansion. '?' and '#' would end the
    /// value early (the matcher stops `+` there by design), ',' would split a
    /// multi-variable expression, and a '%' followed by hex digits is passed
    /// through as an escape and therefore decodes to something else.
    Reserved,
    /// `{#x}`: like `+` but runs to the end of the URI, so only ',' and '%' matter.
    Fragment,
}

impl Alphabet {
    fn chars(self) -> Vec<char> {
        let banned: &[char] = match self {
            Self::Any => &[],
            Self::NoDot => &['.'],
            Self::Reserved => &['?', '#', ',', '%'],
            Self::Fragment => &[',', '%'],
        };
        ANY.iter()
            .copied()
            .filter(|c| !banned.contains(c))
            .collect()
    }
}

#[derive(Debug, Clone, Copy)]
enum Modifier {
    None,
    Explode,
    Prefix(u16),
}

fn modifier() -> impl Strategy<Value = Modifier> {
    prop_oneof![
        4 => Just(Modifier::None),
        1 => Just(Modifier::Explode),
        2 => (1u16..=4).prop_map(Modifier::Prefix),
    ]
}

/// An expression before names are assigned: operator and per-variable modifiers.
#[derive(Debug, Clone)]
struct ExprShape {
    op: &'static str,
    mods: Vec<Modifier>,
}

fn shape(ops: &'static [&'static str], max_vars: usize) -> impl Strategy<Value = ExprShape> {
    (
        prop::sample::select(ops),
        prop::collection::vec(modifier(), 1..=max_vars),
    )
        .prop_map(|(op, mods)| ExprShape { op, mods })
}

fn alphabet_for(op: &str) -> Alphabet {
    match op {
        "." => Alphabet::NoDot,
        "+" => Alphabet::Reserved,
        "#" => Alphabet::Fragment,
        _ => Alphabet::Any,
    }
}

/// One variable of a generated template.
#[derive(Debug, Clone)]
struct Var {
    name: String,
    prefix: Option<u16>,
    alphabet: Alphabet,
}

/// A generated template, kept as pieces so tests know where the literals are.
#[derive(Debug, Clone)]
struct Shape {
    /// (template text, is literal)
    pieces: Vec<(String, bool)>,
    vars: Vec<Var>,
}

impl Shape {
    fn template(&self) -> String {
        self.pieces.iter().map(|(text, _)| text.as_str()).collect()
    }

    fn push_literal(&mut self, text: &str) {
        if !text.is_empty() {
            self.pieces.push((text.to_owned(), true));
        }
    }

    /// Appends an expression, naming its variables v0, v1, ... so that each
    /// variable appears once (a template matched against URIs may not repeat one).
    fn push_expr(&mut self, expr: &ExprShape) {
        let mut text = format!("{{{}", expr.op);
        for (i, m) in expr.mods.iter().enumerate() {
            let name = format!("v{}", self.vars.len());
            if i > 0 {
                text.push(',');
            }
            text.push_str(&name);
            let prefix = match *m {
                Modifier::None => None,
                Modifier::Explode => {
                    text.push('*');
                    None
                }
                Modifier::Prefix(n) => {
                    text.push_str(&format!(":{n}"));
                    Some(n)
                }
            };
            self.vars.push(Var {
                name,
                prefix,
                alphabet: alphabet_for(expr.op),
            });
        }
        text.push('}');
        self.pieces.push((text, false));
    }

    /// Expands piece by piece, returning the URI and the byte ranges that came from literals.
    fn expand(&self, values: &BTreeMap<String, String>) -> (String, Vec<(usize, usize)>) {
        let mut uri = String::new();
        let mut literal_spans = Vec::new();
        for (text, literal) in &self.pieces {
            let start = uri.len();
            if *literal {
                uri.push_str(text);
                literal_spans.push((start, uri.len()));
            } else {
                // Expansion is compositional: each expression expands independently.
                uri.push_str(&UriTemplate::parse(text).unwrap().expand(values));
            }
        }
        (uri, literal_spans)
    }
}

fn value(alphabet: Alphabet) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(alphabet.chars()), 1..6)
        .prop_map(|chars| chars.into_iter().collect())
}

fn values_for(vars: &[Var]) -> impl Strategy<Value = Vec<String>> + use<> {
    vars.iter().map(|v| value(v.alphabet)).collect::<Vec<_>>()
}

/// Realistic templates: `scheme (mid-expr sep)* [{+x} [tail]] [{?..}[{&..}]] [{#..}]`.
///
/// The layout keeps every split point unambiguous for non-empty values:
/// * a "mid" expression uses an operator that percent-encodes delimiters, and is
///   followed by a literal starting with a character its expansion cannot
///   contain ('/', '!', ':', '@');
/// * the literal right before `{+x}` starts with '/', which ends every
///   mid expression's run, so `{+x}`'s value (which may contain '/') cannot
///   make that literal match in a second place;
/// * `{+x}` comes after all mid expressions and is followed only by a literal
///   anchored at the query/fragment/end, because a later greedy piece could
///   otherwise absorb part of its value;
/// * the query group and the fragment come last, as in a URI.
fn realistic() -> impl Strategy<Value = Shape> {
    let scheme = prop::sample::select(&["file:///srv/docs/", "db://users/", "test://t/", "x:"][..]);
    let mid_sep = prop::sample::select(&["/", "/v1/", "!", ":", "@"][..]);
    let mids = prop::collection::vec((shape(&["", ".", "/", ";"], 3), mid_sep), 0..3);
    let plus = prop::option::of((
        shape(&["+"], 2),
        prop::sample::select(&["/", "/v1/"][..]),
        prop::sample::select(&["", ".md", "/raw"][..]),
    ));
    let query = prop::option::of((shape(&["?"], 3), prop::option::of(shape(&["&"], 2))));
    let fragment = prop::option::of(shape(&["#"], 2));
    (scheme, mids, plus, query, fragment).prop_map(|(scheme, mids, plus, query, fragment)| {
        let mut s = Shape {
            pieces: Vec::new(),
            vars: Vec::new(),
        };
        s.push_literal(scheme);
        let mid_count = mids.len();
        for (i, (expr, sep)) in mids.iter().enumerate() {
            s.push_expr(expr);
            let before_plus = i + 1 == mid_count && plus.is_some();
            let sep = match &plus {
                Some((_, plus_sep, _)) if before_plus => plus_sep,
                _ => sep,
            };
            s.push_literal(sep);
        }
        if let Some((expr, _, tail)) = &plus {
            s.push_expr(expr);
            s.push_literal(tail);
        }
        if let Some((q, cont)) = &query {
            s.push_expr(q);
            if let Some(cont) = cont {
                s.push_expr(cont);
            }
        }
        if let Some(f) = &fragment {
            s.push_expr(f);
        }
        s
    })
}

fn realistic_case() -> impl Strategy<Value = (Shape, BTreeMap<String, String>)> {
    realistic().prop_flat_map(|shape| {
        let values = values_for(&shape.vars);
        (Just(shape.clone()), values).prop_map(|(shape, values)| {
            let map = shape
                .vars
                .iter()
                .zip(values)
                .map(|(v, value)| (v.name.clone(), value))
                .collect();
            (shape, map)
        })
    })
}

/// What matching the expansion must give back: prefix modifiers truncate.
fn expected(shape: &Shape, values: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    shape
        .vars
        .iter()
        .map(|v| {
            let value = &values[&v.name];
            let kept = match v.prefix {
                Some(n) => value.chars().take(usize::from(n)).collect(),
                None => value.clone(),
            };
            (v.name.clone(), kept)
        })
        .collect()
}

/// Characters a tampered literal character is replaced with.
const REPLACEMENTS: &[char] = &[
    'x', 'Z', '0', '/', '?', '#', '&', '=', ';', ',', '.', '%', ':', '!', '@', '$', 'é', '😀',
];

fn tamper(uri: &str, at: usize, with: char) -> Option<String> {
    let original = uri.get(at..)?.chars().next()?;
    if original == with {
        return None;
    }
    let mut out = String::with_capacity(uri.len() + 4);
    out.push_str(&uri[..at]);
    out.push(with);
    out.push_str(&uri[at + original.len_utf8()..]);
    Some(out)
}

/// Literal characters no expansion can produce: reserved characters that every
/// operator percent-encodes and that are neither operators nor separators.
const DELIMS: &[char] = &[':', '!', '@', '$', '(', ')', '*', '+', '[', ']'];

/// Templates whose literals are made only of [`DELIMS`] and whose `+`/`#`
/// values avoid them. Then the URI holds exactly as many `DELIMS` characters
/// as the literals need, all at literal positions, so changing one literal
/// character leaves no way to place every literal: the tampered URI provably
/// cannot match. (With letters in literals an adjacent `{var}` could absorb
/// the changed character, so general templates only get the anchored-literal
/// check in `tampered_anchored_literals_are_rejected`.)
fn delimited_case() -> impl Strategy<Value = (Shape, BTreeMap<String, String>)> {
    let literal = prop::collection::vec(prop::sample::select(DELIMS), 1..4)
        .prop_map(|chars| chars.into_iter().collect::<String>());
    let item = prop_oneof![
        literal.prop_map(Ok),
        shape(&["", "+", "#", ".", "/", ";", "?", "&"], 3).prop_map(Err),
    ];
    (
        prop::collection::vec(prop::sample::select(DELIMS), 1..3),
        prop::collection::vec(item, 1..6),
    )
        .prop_flat_map(|(lead, items)| {
            let mut s = Shape {
                pieces: Vec::new(),
                vars: Vec::new(),
            };
            s.push_literal(&lead.into_iter().collect::<String>());
            for item in &items {
                match item {
                    Ok(literal) => s.push_literal(literal),
                    Err(expr) => s.push_expr(expr),
                }
            }
            // Per-operator alphabets keep the untampered URI matchable (not
            // necessarily unambiguously); empty values are fine here.
            let values = s
                .vars
                .iter()
                .map(|v| {
                    let safe: Vec<char> = v
                        .alphabet
                        .chars()
                        .into_iter()
                        .filter(|c| !DELIMS.contains(c))
                        .collect();
                    prop::collection::vec(prop::sample::select(safe), 0..5)
                })
                .collect::<Vec<_>>();
            (Just(s), values).prop_map(|(shape, values)| {
                let map = shape
                    .vars
                    .iter()
                    .zip(values)
                    .map(|(v, chars)| (v.name.clone(), chars.into_iter().collect()))
                    .collect();
                (shape, map)
            })
        })
}

/// Templates exercising every operator and modifier the matcher handles.
const TEMPLATES: &[&str] = &[
    "file:///srv/docs/{+path}",
    "file:///srv/docs/{+path}{?offset,length,head,tail}",
    "db://users/{status}/list",
    "test://template/{id}/data",
    "{+a}/{+b}/{+c}",
    "{+path}.md",
    "x{a}{b}{c}",
    "x{a:2}{b:1,c}",
    "x{.a,b}{/c:3,d*}",
    "x{;a,ab,abc}",
    "x{?a,b:2}{&c,d}",
    "x{#f,g}",
    "{/var:1,v}",
    "x/{a}/{+b}",
    "?fixed=yes{&x}",
    "",
];

proptest! {
    #[test]
    fn expand_then_match_round_trips((shape, values) in realistic_case()) {
        let template = UriTemplate::parse(&shape.template()).unwrap();
        let uri = template.expand(&values);
        prop_assert_eq!(&shape.expand(&values).0, &uri);
        let want = expected(&shape, &values);
        prop_assert_eq!(template.matches(&uri), Some(want.clone()), "uri {:?}", uri);
        let raw = template.matches_raw(&uri);
        prop_assert!(raw.is_some(), "raw match failed for {:?}", uri);
        let raw_keys: Vec<String> = raw.unwrap_or_default().into_keys().collect();
        let want_keys: Vec<String> = want.into_keys().collect();
        prop_assert_eq!(raw_keys, want_keys);
    }

    #[test]
    fn tampered_delimiter_literals_are_rejected(
        (shape, values) in delimited_case(),
        pick in any::<prop::sample::Index>(),
        with in prop::sample::select(REPLACEMENTS),
    ) {
        let template = UriTemplate::parse(&shape.template()).unwrap();
        let (uri, spans) = shape.expand(&values);
        prop_assert!(template.matches_raw(&uri).is_some(), "untampered {:?} must match", uri);
        let positions: Vec<usize> = spans
            .iter()
            .flat_map(|&(start, end)| uri[start..end].char_indices().map(move |(i, _)| start + i))
            .collect();
        let at = positions[pick.index(positions.len())];
        if let Some(bad) = tamper(&uri, at, with) {
            prop_assert_eq!(template.matches(&bad), None, "tampered {:?}", bad);
            prop_assert_eq!(template.matches_raw(&bad), None, "tampered {:?}", bad);
        }
    }

    #[test]
    fn tampered_anchored_literals_are_rejected(
        (shape, values) in realistic_case(),
        pick in any::<prop::sample::Index>(),
        with in prop::sample::select(REPLACEMENTS),
    ) {
        // The first literal is anchored at offset 0 and a trailing literal at the
        // end of the URI, so changing any of their characters must break the match.
        let template = UriTemplate::parse(&shape.template()).unwrap();
        let (uri, spans) = shape.expand(&values);
        let mut anchored = vec![spans[0]];
        if shape.pieces.last().is_some_and(|(_, literal)| *literal) {
            anchored.extend(spans.last().copied());
        }
        let positions: Vec<usize> = anchored
            .iter()
            .flat_map(|&(start, end)| uri[start..end].char_indices().map(move |(i, _)| start + i))
            .collect();
        let at = positions[pick.index(positions.len())];
        if let Some(bad) = tamper(&uri, at, with) {
            prop_assert_eq!(template.matches(&bad), None, "tampered {:?}", bad);
            prop_assert_eq!(template.matches_raw(&bad), None, "tampered {:?}", bad);
        }
    }

    #[test]
    fn matching_never_panics(
        uri in prop_oneof![
            any::<String>(),
            "[a-z0-9/?#&=;,.%:éZ]{0,40}",
            "(%[0-9A-Fa-fz]{0,2}|[a/?&=.;#,]|x=|é)*",
        ],
    ) {
        for text in TEMPLATES {
            let template = UriTemplate::parse(text).unwrap();
            let decoded = template.matches(&uri);
            let raw = template.matches_raw(&uri);
            // Decoding only ever removes matches, never adds them.
            prop_assert!(decoded.is_none() || raw.is_some(), "{} vs {:?}", text, uri);
        }
    }

    #[test]
    fn parsing_never_panics(
        text in prop_oneof![
            any::<String>(),
            "[{}a-z0-9+#./;?&=,!@|*:%_ é]{0,32}",
            "([a-z:/]{0,3}\\{[+#./;?&]?[a-z_.%0-9]{0,4}(:[0-9]{0,5}|\\*)?(,[a-z]{1,2})*\\}?)*",
            // Mostly valid, so the success path gets exercised too.
            "([a-z:/!]{0,3}\\{[+#./;?&]?[a-z][a-z0-9_]{0,2}(:[1-9][0-9]{0,2}|\\*)?(,[a-z]{1,2}(:[1-9])?)*\\})*[a-z/]{0,3}",
        ],
    ) {
        match UriTemplate::parse(&text) {
            Ok(template) => {
                prop_assert_eq!(template.as_str(), text.as_str());
                prop_assert_eq!(template.to_string(), text.clone());
                prop_assert_eq!(UriTemplate::parse(&template.to_string()), Ok(template.clone()));
                let values: BTreeMap<String, String> = template
                    .variables()
                    .into_iter()
                    .map(|name| (name.to_owned(), "v/é%".to_owned()))
                    .collect();
                let uri = template.expand(&values);
                let _ = template.matches(&uri);
                let _ = template.matches(&text);
            }
            Err(err) => {
                // Every error names a byte offset (or the length limit).
                let message = err.to_string();
                prop_assert!(
                    message.contains("byte offset") || message.contains("bytes long"),
                    "{}", message
                );
            }
        }
    }
}
