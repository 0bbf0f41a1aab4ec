//! A `SKILL.md`'s YAML frontmatter, parsed with `serde_yaml_ng` (the maintained fork of the
//! deprecated `serde_yaml`) and bounded: at most [`MAX_FRONTMATTER_BYTES`] of YAML, nested at
//! most [`MAX_DEPTH`] deep, mapping keys strings only. `name` and `description` are required
//! strings; every other field passes through as JSON.

use rmcp::model::SkillFrontmatter;
use serde_json::Value;

/// The most bytes of YAML between the `---` lines: a frontmatter is a few lines; anything
/// larger is not one.
pub const MAX_FRONTMATTER_BYTES: usize = 64 * 1024;

/// The deepest nesting of mappings and sequences a frontmatter may hold.
pub const MAX_DEPTH: usize = 16;

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

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Parse the frontmatter of a `SKILL.md`'s text.
pub fn parse(text: &str) -> Result<SkillFrontmatter, FrontmatterError> {
    let yaml = block(text)?;
    if yaml.len() > MAX_FRONTMATTER_BYTES {
        return Err(FrontmatterError::TooLarge);
    }
    // serde_yaml_ng bounds recursion and alias expansion itself; the depth check below holds
    // what passes to our own limit.
    let value: Value = serde_yaml_ng::from_str(yaml).map_err(|e| {
        let mut m = e.to_string();
        m.truncate(200);
        FrontmatterError::Yaml(m)
    })?;
    if depth(&value) > MAX_DEPTH {
        return Err(FrontmatterError::TooDeep);
    }
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
        assert!(parse(&laughs).is_err());
    }
}
