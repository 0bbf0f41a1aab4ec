//! The primitives beside resources: `tools`, `call`, `prompts` and `prompt`, and the note a
//! resource command gives against a server that offers no resources (what it offers instead).

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::Session;
use super::commands::{paginate, parsed};
use super::output::{clean, clean_text, field, human_size, raw_line, table};

/// A tool that answered with `isError`, by name (cleaned): its content is already printed.
#[derive(Debug)]
pub(crate) struct ToolError(String);

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the tool {} reported an error (isError)", self.0)
    }
}

impl std::error::Error for ToolError {}

/// A tool's `arguments` from the command line, and which of them were given as `NAME=VALUE`
/// (text, to be read by the tool's input schema: [`coerce`]).
pub(crate) struct ToolArguments {
    pub args: Map<String, Value>,
    pub textual: Vec<String>,
}

/// `--arg NAME=VALUE` (a string) and `--arg NAME:=JSON` (any JSON value: a number, `true`, an
/// object), over the object `--args-json` gives, for a tool's `arguments`.
pub(crate) fn tool_arguments(
    pairs: &[String],
    json: Option<&str>,
) -> anyhow::Result<ToolArguments> {
    let mut textual = Vec::new();
    let mut args = match json {
        Some(text) => {
            match serde_json::from_str::<Value>(text).context("--args-json: not valid JSON")? {
                Value::Object(map) => map,
                other => bail!(
                    "--args-json: expected a JSON object of arguments, got {}",
                    kind_of(&other)
                ),
            }
        }
        None => Map::new(),
    };
    for p in pairs {
        // `:=` before `=`: in `n:=1` the first `=` belongs to `:=`.
        let (name, value, text) = match (p.split_once(":="), p.split_once('=')) {
            (Some((n, v)), Some((m, _))) if n.len() + 1 == m.len() => {
                let value = serde_json::from_str(v)
                    .with_context(|| format!("--arg {n}:=…: the value is not valid JSON"))?;
                (n, value, false)
            }
            (_, Some((n, v))) => (n, Value::String(v.to_owned()), true),
            _ => bail!("--arg {p}: expected NAME=VALUE (a string) or NAME:=JSON"),
        };
        if name.is_empty() {
            bail!("--arg {p}: the argument has no name");
        }
        // The last --arg of a name decides: a later `:=` is JSON as written.
        textual.retain(|t| t != name);
        if text {
            textual.push(name.to_owned());
        }
        args.insert(name.to_owned(), value);
    }
    Ok(ToolArguments { args, textual })
}

/// Read a `NAME=VALUE` argument as the tool's input schema types it, as the MCP Inspector
/// does: `number`, `integer`, `boolean`, `array` and `object` properties get the JSON value
/// the text spells (`1`, `true`, `[1,2]`); a text that spells no such value, a property the
/// schema does not type, or one that may be a string, stays the string given.
fn coerce(text: &str, property: Option<&Value>) -> Value {
    let types: Vec<&str> = match property.and_then(|p| p.get("type")) {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if types.contains(&"string") {
        return Value::String(text.to_owned());
    }
    let parsed: Option<Value> = serde_json::from_str(text.trim()).ok();
    for t in types {
        let fits = match (t, &parsed) {
            ("number", Some(v)) => v.is_number(),
            ("integer", Some(v)) => v.is_i64() || v.is_u64(),
            ("boolean", Some(v)) => v.is_boolean(),
            ("array", Some(v)) => v.is_array(),
            ("object", Some(v)) => v.is_object(),
            _ => false,
        };
        if fits {
            return parsed.unwrap_or_default();
        }
    }
    Value::String(text.to_owned())
}

/// The input schema of `tool`, from `tools/list` (every page), when the server lists it.
async fn input_schema(s: &Session, tool: &str) -> anyhow::Result<Option<Value>> {
    let mut schema = None;
    paginate(s, "tools/list", "tools", |item| {
        if schema.is_none() {
            let t = parsed(item)?;
            if t.get("name").and_then(Value::as_str) == Some(tool) {
                schema = t.get("inputSchema").cloned();
            }
        }
        Ok(())
    })
    .await?;
    Ok(schema)
}

/// A name as one JSON Pointer segment (`~` and `/` escaped).
fn pointer_escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Fail unless the server declared `capability`, naming what it offers instead.
fn require(s: &Session, capability: &str, what: &str) -> anyhow::Result<()> {
    if s.has_capability(capability) {
        return Ok(());
    }
    bail!("this server offers no {what}; {}", offers(s, capability))
}

/// `ls`, `cat` and `templates` against a server without resources: say so, and what it offers
/// (counted, every page), rather than pass on a bare "Method not found".
pub(crate) async fn require_resources(s: &Session) -> anyhow::Result<()> {
    if s.has_capability("resources") {
        return Ok(());
    }
    let mut offered = Vec::new();
    for (capability, method, key, what) in [
        ("tools", "tools/list", "tools", "tools"),
        ("prompts", "prompts/list", "prompts", "prompts"),
    ] {
        if !s.has_capability(capability) {
            continue;
        }
        let mut n = 0usize;
        // Counting is a courtesy: a listing that fails still names the primitive.
        match paginate(s, method, key, |_| {
            n += 1;
            Ok(())
        })
        .await
        {
            Ok(()) => offered.push(format!("{what} ({n})")),
            Err(_) => offered.push(what.to_owned()),
        }
    }
    let offers = match offered.as_slice() {
        [] => "it offers neither tools nor prompts".to_owned(),
        [one] => format!("it offers {one}"),
        [a, b] => format!("it offers {a} and {b}"),
        _ => unreachable!("two primitives at most"),
    };
    bail!("this server offers no resources; {offers}")
}

/// What the server offers besides `missing`, for a refusal: its capabilities, named.
fn offers(s: &Session, missing: &str) -> String {
    let names: Vec<&str> = ["resources", "tools", "prompts"]
        .into_iter()
        .filter(|c| *c != missing && s.has_capability(c))
        .collect();
    match names.as_slice() {
        [] => "it offers no resources, tools or prompts".to_owned(),
        [one] => format!("it offers {one}"),
        [init @ .., last] => format!("it offers {} and {last}", init.join(", ")),
    }
}

/// `info`: who the server is, the version agreed, and what it offers, one line each, then its
/// instructions when it gave any.
pub(crate) fn info(s: &Session, json: bool) -> anyhow::Result<()> {
    let version = s.era().version();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        let mut v = json!({
            "protocolVersion": version,
            "serverInfo": s.server_info(),
            "capabilities": s.capabilities(),
        });
        if let Some(i) = s.instructions() {
            v["instructions"] = json!(i);
        }
        super::output::json_line(&mut out, &v, stdout.is_terminal())?;
        return Ok(());
    }
    let info = s.server_info();
    // A server may send an empty version: no trailing blank then.
    let who = format!("{} {}", field(info, "name"), field(info, "version"));
    writeln!(out, "server:   {}", who.trim_end())?;
    writeln!(out, "protocol: {}", clean(version))?;
    let offered: Vec<String> = s
        .capabilities()
        .as_object()
        .map(|caps| {
            caps.iter()
                .map(|(name, v)| {
                    let flags: Vec<String> = v
                        .as_object()
                        .map(|f| {
                            f.iter()
                                .filter(|(_, on)| on.as_bool() == Some(true))
                                .map(|(k, _)| clean(k))
                                .collect()
                        })
                        .unwrap_or_default();
                    if flags.is_empty() {
                        clean(name)
                    } else {
                        format!("{} ({})", clean(name), flags.join(", "))
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let offered = if offered.is_empty() {
        "nothing".to_owned()
    } else {
        offered.join(", ")
    };
    writeln!(out, "offers:   {offered}")?;
    // Instructions are prose for a model, often several lines: under their own heading,
    // each line indented, cleaned of what a terminal would act on.
    if let Some(instructions) = s.instructions() {
        writeln!(out, "instructions:")?;
        for line in instructions.lines() {
            writeln!(out, "  {}", clean(line))?;
        }
    }
    Ok(())
}

/// The first line of a description, for a table cell.
fn first_line(obj: &Value, key: &str) -> String {
    obj.get(key)
        .and_then(Value::as_str)
        .map_or_else(|| "-".to_owned(), |d| clean(d.lines().next().unwrap_or("")))
}

pub(crate) async fn tools(s: &Session, json: bool) -> anyhow::Result<()> {
    require(s, "tools", "tools")?;
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    let mut rows = Vec::new();
    paginate(s, "tools/list", "tools", |item| {
        if json {
            raw_line(&mut stdout.lock(), item, terminal)?;
        } else {
            let t = parsed(item)?;
            let required: Vec<&str> = t
                .pointer("/inputSchema/required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let args: Vec<String> = t
                .pointer("/inputSchema/properties")
                .and_then(Value::as_object)
                .map(|p| {
                    p.keys()
                        .map(|k| {
                            let mark = if required.contains(&k.as_str()) {
                                "*"
                            } else {
                                ""
                            };
                            format!("{}{mark}", clean(k))
                        })
                        .collect()
                })
                .unwrap_or_default();
            rows.push(vec![
                field(&t, "name"),
                if args.is_empty() {
                    "-".to_owned()
                } else {
                    args.join(" ")
                },
                first_line(&t, "description"),
            ]);
        }
        Ok(())
    })
    .await?;
    if !json {
        table(
            &mut stdout.lock(),
            &["NAME", "ARGUMENTS (* required)", "DESCRIPTION"],
            &rows,
        )?;
    }
    Ok(())
}

pub(crate) async fn prompts(s: &Session, json: bool) -> anyhow::Result<()> {
    require(s, "prompts", "prompts")?;
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    let mut rows = Vec::new();
    paginate(s, "prompts/list", "prompts", |item| {
        if json {
            raw_line(&mut stdout.lock(), item, terminal)?;
        } else {
            let p = parsed(item)?;
            let args: Vec<String> = p
                .get("arguments")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|arg| {
                            let name = arg.get("name").and_then(Value::as_str).unwrap_or("?");
                            let mark = if arg.get("required").and_then(Value::as_bool) == Some(true)
                            {
                                "*"
                            } else {
                                ""
                            };
                            format!("{}{mark}", clean(name))
                        })
                        .collect()
                })
                .unwrap_or_default();
            rows.push(vec![
                field(&p, "name"),
                if args.is_empty() {
                    "-".to_owned()
                } else {
                    args.join(" ")
                },
                first_line(&p, "description"),
            ]);
        }
        Ok(())
    })
    .await?;
    if !json {
        table(
            &mut stdout.lock(),
            &["NAME", "ARGUMENTS (* required)", "DESCRIPTION"],
            &rows,
        )?;
    }
    Ok(())
}

/// Where the `n`th binary part of an answer goes: `-o FILE` for the first, `FILE-2.ext`,
/// `FILE-3.ext`… for the others.
fn part_path(base: &Path, n: usize) -> PathBuf {
    if n == 1 {
        return base.to_owned();
    }
    let stem = base
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let name = match base.extension() {
        Some(ext) => format!("{stem}-{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{n}"),
    };
    base.with_file_name(name)
}

/// Print the content blocks of a tool result or a prompt message: text to stdout (cleaned on
/// a terminal, byte for byte to a pipe), image, audio and blob parts to `-o` (numbered when
/// there are several), a note for each where it went or why it was not printed.
struct ContentWriter {
    output: Option<PathBuf>,
    terminal: bool,
    binaries: usize,
}

impl ContentWriter {
    fn new(output: Option<PathBuf>) -> Self {
        Self {
            output,
            terminal: std::io::stdout().is_terminal(),
            binaries: 0,
        }
    }

    fn text(&self, out: &mut impl std::io::Write, text: &str) -> anyhow::Result<()> {
        if self.terminal {
            out.write_all(clean_text(text).as_bytes())?;
        } else {
            out.write_all(text.as_bytes())?;
        }
        if !text.ends_with('\n') {
            writeln!(out)?;
        }
        Ok(())
    }

    fn binary(
        &mut self,
        out: &mut impl std::io::Write,
        kind: &str,
        data: &str,
        mime: Option<&str>,
    ) -> anyhow::Result<()> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| anyhow!("the server sent {kind} data that is not base64: {e}"))?;
        let mime = mime.map_or_else(|| "no MIME type".to_owned(), clean);
        let size = human_size(bytes.len() as u64);
        self.binaries += 1;
        match &self.output {
            Some(base) => {
                let path = part_path(base, self.binaries);
                std::fs::write(&path, &bytes)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                eprintln!("({kind}, {mime}, {size}: written to {})", path.display());
            }
            None => writeln!(
                out,
                "({kind}, {mime}, {size}: not printed; -o FILE writes it)"
            )?,
        }
        Ok(())
    }

    /// One content block (`text`, `image`, `audio`, `resource`, `resource_link`).
    fn block(&mut self, out: &mut impl std::io::Write, c: &Value) -> anyhow::Result<()> {
        let kind = c.get("type").and_then(Value::as_str).unwrap_or("");
        let mime = c.get("mimeType").and_then(Value::as_str);
        match kind {
            "text" => self.text(out, c.get("text").and_then(Value::as_str).unwrap_or("")),
            "image" | "audio" => {
                let data = c.get("data").and_then(Value::as_str).unwrap_or("");
                self.binary(out, kind, data, mime)
            }
            "resource" => {
                let r = c.get("resource").cloned().unwrap_or_default();
                if let Some(text) = r.get("text").and_then(Value::as_str) {
                    self.text(out, text)
                } else {
                    let blob = r.get("blob").and_then(Value::as_str).unwrap_or("");
                    let mime = r.get("mimeType").and_then(Value::as_str);
                    self.binary(out, "blob", blob, mime)
                }
            }
            "resource_link" => {
                writeln!(
                    out,
                    "(resource link: {} {})",
                    field(c, "uri"),
                    field(c, "name")
                )?;
                Ok(())
            }
            other => {
                writeln!(
                    out,
                    "(content of type {} not shown; --json prints it)",
                    clean(other)
                )?;
                Ok(())
            }
        }
    }
}

pub(crate) async fn call(
    s: &Session,
    tool: &str,
    arguments: ToolArguments,
    output: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<()> {
    require(s, "tools", "tools")?;
    let ToolArguments {
        args: mut arguments,
        textual,
    } = arguments;
    // Text arguments are typed by the tool's schema, which only its listing gives.
    if !textual.is_empty() {
        let schema = input_schema(s, tool).await?;
        for name in &textual {
            if let Some(Value::String(text)) = arguments.get(name) {
                let property = schema
                    .as_ref()
                    .and_then(|sch| sch.pointer(&format!("/properties/{}", pointer_escape(name))));
                let value = coerce(text, property);
                arguments.insert(name.clone(), value);
            }
        }
    }
    let raw = s
        .request_raw(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
            Some(s.timeout()),
        )
        .await?;
    let result: Value =
        serde_json::from_str(raw.get()).context("the server's tools/call answer is not JSON")?;
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        raw_line(&mut out, &raw, stdout.is_terminal())?;
    } else {
        let mut w = ContentWriter::new(output);
        let content = result
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for c in &content {
            w.block(&mut out, c)?;
        }
        // A tool that answers only with structured content still shows it.
        if content.is_empty()
            && let Some(structured) = result.get("structuredContent")
        {
            super::output::json_line(&mut out, structured, w.terminal)?;
        }
    }
    out.flush()?;
    if is_error {
        return Err(ToolError(clean(tool)).into());
    }
    Ok(())
}

pub(crate) async fn prompt(
    s: &Session,
    name: &str,
    arguments: Map<String, Value>,
    output: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<()> {
    require(s, "prompts", "prompts")?;
    let mut params = json!({ "name": name });
    if !arguments.is_empty() {
        params["arguments"] = Value::Object(arguments);
    }
    let raw = s
        .request_raw("prompts/get", params, Some(s.timeout()))
        .await?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        raw_line(&mut out, &raw, stdout.is_terminal())?;
        return Ok(());
    }
    let result: Value =
        serde_json::from_str(raw.get()).context("the server's prompts/get answer is not JSON")?;
    let messages = result
        .get("messages")
        .and_then(Value::as_array)
        .context("the server's prompts/get answer has no `messages` array")?;
    let mut w = ContentWriter::new(output);
    for m in messages {
        writeln!(out, "[{}]", field(m, "role"))?;
        match m.get("content") {
            Some(Value::Array(blocks)) => {
                for c in blocks {
                    w.block(&mut out, c)?;
                }
            }
            Some(c) => w.block(&mut out, c)?,
            None => {}
        }
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_arguments_are_strings_or_json_over_args_json() {
        let args = tool_arguments(
            &[
                "a:=1".into(),
                "s=x=y".into(),
                "b:=true".into(),
                "t=".into(),
                "u=1".into(),
                "u:=2".into(),
            ],
            Some(r#"{"a": 0, "c": [1]}"#),
        )
        .unwrap();
        assert_eq!(
            Value::Object(args.args),
            json!({"a": 1, "b": true, "c": [1], "s": "x=y", "t": "", "u": 2})
        );
        assert_eq!(args.textual, ["s", "t"], "`:=` is JSON as written");
        assert!(tool_arguments(&["n:=nope".into()], None).is_err());
        assert!(tool_arguments(&["novalue".into()], None).is_err());
        assert!(tool_arguments(&[], Some("[1]")).is_err());
    }

    #[test]
    fn text_arguments_take_the_type_their_schema_gives() {
        let p = |t: Value| json!({ "type": t });
        assert_eq!(coerce("1.5", Some(&p(json!("number")))), json!(1.5));
        assert_eq!(coerce("7", Some(&p(json!("integer")))), json!(7));
        assert_eq!(coerce("7.5", Some(&p(json!("integer")))), json!("7.5"));
        assert_eq!(coerce("true", Some(&p(json!("boolean")))), json!(true));
        assert_eq!(coerce("[1,2]", Some(&p(json!("array")))), json!([1, 2]));
        assert_eq!(
            coerce(r#"{"k":1}"#, Some(&p(json!("object")))),
            json!({"k": 1})
        );
        // Text that spells no such value, a string-or-number, an untyped property: as given.
        assert_eq!(coerce("x", Some(&p(json!("number")))), json!("x"));
        assert_eq!(
            coerce("1", Some(&p(json!(["string", "number"])))),
            json!("1")
        );
        assert_eq!(coerce("1", Some(&p(json!(["null", "integer"])))), json!(1));
        assert_eq!(coerce("1", Some(&json!({}))), json!("1"));
        assert_eq!(coerce("1", None), json!("1"));
    }

    #[test]
    fn binary_parts_after_the_first_are_numbered() {
        assert_eq!(part_path(Path::new("d/out.png"), 1), Path::new("d/out.png"));
        assert_eq!(
            part_path(Path::new("d/out.png"), 2),
            Path::new("d/out-2.png")
        );
        assert_eq!(part_path(Path::new("out"), 3), Path::new("out-3"));
    }
}
