//! A `SKILL.md`'s YAML frontmatter, parsed with `serde_yaml_ng` (the maintained fork of the
//! deprecated `serde_yaml`) and bounded: at most [`MAX_FRONTMATTER_BYTES`] of YAML, nested at
//! most [`MAX_DEPTH`] deep, mapping keys strings only, each key once in its mapping, and what
//! the YAML expands to (aliases repeat what their anchor holds) at most [`EXPANSION_FACTOR`]
//! times its size. `name` and `description` are required strings; every other field passes
//! through as JSON.
//!
//! The JSON value is built by our own visitor rather than by `serde_json::Value`'s, so the
//! limits hold while the value is built: an alias bomb is stopped after a few times its own
//! size, not after it has filled memory, and a repeated key is an error, not a silent
//! overwrite that makes the file mean what its last line says.

use std::cell::Cell;
use std::fmt;

use rmcp::model::SkillFrontmatter;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// The most bytes of YAML between the `---` lines: a frontmatter is a few lines; anything
/// larger is not one.
pub const MAX_FRONTMATTER_BYTES: usize = 64 * 1024;

/// The deepest nesting of mappings and sequences a frontmatter may hold.
pub const MAX_DEPTH: usize = 16;

/// How many times its own size a frontmatter may expand to (every node counts one, every
/// string its bytes too). YAML without aliases builds at most about twice its size; only
/// aliases repeating their anchors go further.
pub const EXPANSION_FACTOR: usize = 4;

/// Why a `SKILL.md` is not a skill, for the one warning that names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontmatterError {
    /// No `---` line first, or no closing `---` line.
    #[error("it does not start with a `---` frontmatter block closed by a `---` line")]
    Missing,
    /// Over [`MAX_FRONTMATTER_BYTES`].
    #[error("its frontmatter is over {MAX_FRONTMATTER_BYTES} bytes")]
    TooLarge,
    /// Over [`MAX_DEPTH`].
    #[error("its frontmatter nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// Aliases that expand it past [`EXPANSION_FACTOR`] times its size.
    #[error(
        "its frontmatter expands to more than {EXPANSION_FACTOR} times its size (aliases repeating anchors)"
    )]
    Expansion,
    /// A key twice in one mapping.
    #[error("its frontmatter has the key `{0}` twice in one mapping")]
    DuplicateKey(String),
    /// Not YAML, or not a mapping with string keys.
    #[error("its frontmatter is not a YAML mapping: {0}")]
    Yaml(String),
    /// `name` or `description` missing or not a string.
    #[error("its frontmatter needs `{0}` as a string")]
    Field(&'static str),
}

/// The YAML between the first line `---` and the next line `---` (or `...`).
fn block(text: &str) -> Result<&str, FrontmatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or(FrontmatterError::Missing)?;
    let mut at = 0;
    for line in rest.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare == "---" || bare == "..." {
            return Ok(&rest[..at]);
        }
        at += line.len();
        if at > MAX_FRONTMATTER_BYTES {
            return Err(FrontmatterError::TooLarge);
        }
    }
    Err(FrontmatterError::Missing)
}

/// What one parse may still build, and why it stopped when a limit did stop it.
struct Budget {
    left: Cell<usize>,
    why: Cell<Option<FrontmatterError>>,
}

impl Budget {
    /// Take `n` units, or stop the parse with [`FrontmatterError::Expansion`].
    fn charge<E: serde::de::Error>(&self, n: usize) -> Result<(), E> {
        match self.left.get().checked_sub(n) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(self.stop(FrontmatterError::Expansion)),
        }
    }

    /// Remember `why` and give the deserializer an error that ends the parse.
    fn stop<E: serde::de::Error>(&self, why: FrontmatterError) -> E {
        let message = why.to_string();
        self.why.set(Some(why));
        E::custom(message)
    }
}

/// One YAML node at nesting `depth`, built as JSON within the budget.
struct Node<'a> {
    budget: &'a Budget,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Node<'_> {
    /// The node one level down, or [`FrontmatterError::TooDeep`].
    fn child<E: serde::de::Error>(&self) -> Result<Node<'_>, E> {
        if self.depth >= MAX_DEPTH {
            return Err(self.budget.stop(FrontmatterError::TooDeep));
        }
        Ok(Node {
            budget: self.budget,
            depth: self.depth + 1,
        })
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.budget.charge(1)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.budget.charge(1)?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.budget.charge(1)?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.budget.charge(1)?;
        // As serde_json has it: a number JSON cannot hold (NaN, infinity) is null.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.budget.charge(1 + v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.budget.charge(1 + v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.budget.charge(1)?;
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.budget.charge(1)?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.child()?)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.budget.charge(1)?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.budget.charge(1 + key.len())?;
            if out.contains_key(&key) {
                let mut shown = key;
                if shown.len() > 100 {
                    let mut at = 100;
                    while !shown.is_char_boundary(at) {
                        at -= 1;
                    }
                    shown.truncate(at);
                    shown.push('…');
                }
                return Err(self.budget.stop(FrontmatterError::DuplicateKey(shown)));
            }
            let value = map.next_value_seed(self.child()?)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Parse the frontmatter of a `SKILL.md`'s text. CPU work of up to a few times
/// [`MAX_FRONTMATTER_BYTES`]: callers on the async runtime run it on the blocking pool.
pub fn parse(text: &str) -> Result<SkillFrontmatter, FrontmatterError> {
    let yaml = block(text)?;
    if yaml.len() > MAX_FRONTMATTER_BYTES {
        return Err(FrontmatterError::TooLarge);
    }
    let budget = Budget {
        left: Cell::new(EXPANSION_FACTOR * yaml.len() + 64),
        why: Cell::new(None),
    };
    let parsed = Node {
        budget: &budget,
        depth: 0,
    }
    .deserialize(serde_yaml_ng::Deserializer::from_str(yaml));
    let value = match parsed {
        Ok(v) => v,
        Err(e) => {
            if let Some(why) = budget.why.take() {
                return Err(why);
            }
            let mut m = e.to_string();
            let mut at = m.len().min(200);
            while !m.is_char_boundary(at) {
                at -= 1;
            }
            m.truncate(at);
            return Err(FrontmatterError::Yaml(m));
        }
    };
    let Value::Object(mut map) = value else {
        return Err(FrontmatterError::Yaml("the block is not a mapping".into()));
    };
    let mut take = |key: &'static str| match map.remove(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        _ => Err(FrontmatterError::Field(key)),
    };
    let name = take("name")?;
    let description = take("description")?;
    let mut fm = SkillFrontmatter::new(name, description);
    fm.extra = map;
    Ok(fm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_description_and_other_fields_pass_through() {
        let fm = parse("---\nname: pdf\ndescription: Fill PDF forms\nlicense: MIT\nallowed-tools: [Read]\n---\n# PDF\n").unwrap();
        assert_eq!(fm.name, "pdf");
        assert_eq!(fm.description, "Fill PDF forms");
        assert_eq!(fm.extra["license"], "MIT");
        assert_eq!(fm.extra["allowed-tools"], serde_json::json!(["Read"]));
    }

    #[test]
    fn crlf_and_bom_are_accepted() {
        let fm = parse("\u{feff}---\r\nname: a\r\ndescription: b\r\n---\r\nbody").unwrap();
        assert_eq!((fm.name.as_str(), fm.description.as_str()), ("a", "b"));
    }

    #[test]
    fn what_is_not_a_frontmatter_says_why() {
        assert_eq!(parse("# no frontmatter"), Err(FrontmatterError::Missing));
        assert_eq!(parse("---\nname: a\n"), Err(FrontmatterError::Missing));
        assert_eq!(
            parse("---\ndescription: b\n---\n"),
            Err(FrontmatterError::Field("name"))
        );
        assert_eq!(
            parse("---\nname: a\ndescription: [1]\n---\n"),
            Err(FrontmatterError::Field("description"))
        );
        assert!(matches!(
            parse("---\n- a\n---\n"),
            Err(FrontmatterError::Yaml(_))
        ));
        assert!(matches!(
            parse("---\nname: [unclosed\n---\n"),
            Err(FrontmatterError::Yaml(_))
        ));
    }

    #[test]
    fn limits_hold() {
        let big = format!("---\nname: a\ndescription: {}\n---\n", "x".repeat(70_000));
        assert_eq!(parse(&big), Err(FrontmatterError::TooLarge));
        let deep = format!(
            "---\nname: a\ndescription: b\nx: {}1{}\n---\n",
            "[".repeat(40),
            "]".repeat(40)
        );
        assert!(matches!(
            parse(&deep),
            Err(FrontmatterError::TooDeep | FrontmatterError::Yaml(_))
        ));
        // A billion laughs: aliases expanded past the parser's own budget are refused.
        let mut laughs = String::from(
            "---\nname: a\ndescription: b\nl0: &l0 [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n",
        );
        for i in 1..10 {
            let prev = i - 1;
            laughs.push_str(&format!(
                "l{i}: &l{i} [*l{prev},*l{prev},*l{prev},*l{prev},*l{prev},*l{prev},*l{prev},*l{prev},*l{prev}]\n"
            ));
        }
        laughs.push_str("---\n");
        assert_eq!(parse(&laughs), Err(FrontmatterError::Expansion));
    }

    /// A frontmatter of 54 KiB whose aliases expand to hundreds of MiB (as built by
    /// serde's own value) is stopped after a few times its size: refused at once, for what
    /// it is.
    #[test]
    fn an_alias_bomb_near_the_size_limit_is_refused_quickly() {
        let mut bomb = String::from("---\nname: a\ndescription: b\nl0: &l0 [");
        bomb.push_str(&vec!["\"lol\""; 64].join(","));
        bomb.push_str("]\n");
        for i in 1..12 {
            let prev = i - 1;
            bomb.push_str(&format!(
                "l{i}: &l{i} [{}]\n",
                vec![format!("*l{prev}"); 64].join(",")
            ));
        }
        bomb.push_str(&format!("pad: \"{}\"\n", "x".repeat(50 * 1024)));
        bomb.push_str("---\n");
        assert!((50 * 1024..MAX_FRONTMATTER_BYTES).contains(&bomb.len()));
        let start = std::time::Instant::now();
        assert_eq!(parse(&bomb), Err(FrontmatterError::Expansion));
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_few_aliases_within_the_limit_are_fine() {
        let fm = parse("---\nname: a\ndescription: b\nbase: &b {x: 1}\none: *b\ntwo: *b\n---\n")
            .unwrap();
        assert_eq!(fm.extra["two"], serde_json::json!({"x": 1}));
    }

    #[test]
    fn a_key_twice_in_one_mapping_is_refused_naming_it() {
        assert_eq!(
            parse("---\nname: a\ndescription: b\nname: c\n---\n"),
            Err(FrontmatterError::DuplicateKey("name".into()))
        );
        let e = parse("---\nname: a\ndescription: b\nmeta:\n  k: 1\n  k: 2\n---\n").unwrap_err();
        assert_eq!(e, FrontmatterError::DuplicateKey("k".into()));
        assert_eq!(
            e.to_string(),
            "its frontmatter has the key `k` twice in one mapping"
        );
        // The same key in two mappings is no repetition.
        parse("---\nname: a\ndescription: b\nx: {k: 1}\ny: {k: 2}\n---\n").unwrap();
    }
}
