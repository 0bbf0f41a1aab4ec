//! The tool bridge: the resource operations offered as MCP tools, for clients that use only
//! tools (`[server] tools = true`, `serve --tools`).
//!
//! Each tool parses its arguments, calls the same [`Service`] method as the resource method
//! it stands for, with the caller's grant, and writes the answer as tool content. So a tool
//! can never see more than the resource methods do: the sandbox, deny rules, size limits,
//! the read budget, timeouts and per-mount scopes all live below the service line. A
//! failure (not found, too large, bad arguments, a source that is down) is a tool result
//! with `isError: true` carrying the message the resource method would have sent, which a
//! model can read and act on; only an unknown tool is a protocol error (-32602), as the
//! specification asks.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use mcpr_core::{ContentsBody, ResourceMeta, UriTemplate};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ImageContent, JsonObject, MetaObject,
    TextContent, Tool, ToolAnnotations,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::errors::to_mcp_error;
use crate::grant::Grant;
use crate::handler::{contents_of, resource_of};
use crate::service::{CompletionRef, Service, visible};
use crate::{SCAN_MAX_PAGES, Settings};

/// The tool names, as `tools/list` gives them.
const LIST: &str = "list_resources";
const READ: &str = "read_resource";
const TEMPLATES: &str = "list_resource_templates";
const COMPLETE: &str = "complete_resource_argument";
const SEARCH: &str = "search_resources";
const SKILLS: &str = "list_skills";
const SKILL_FILES: &str = "list_skill_files";

/// The longest `search_resources` query accepted, in bytes.
pub(crate) const MAX_QUERY_LEN: usize = 1024;

/// The tools of the bridge, with descriptions that name the limits in force;
/// `list_skills` and `list_skill_files` only when `skills` (a mount carries skills).
pub(crate) fn definitions(settings: &Settings, skills: bool) -> Vec<Tool> {
    let page = settings.page_size;
    let max_read = human_bytes(settings.max_read_bytes);
    let scanned = SCAN_MAX_PAGES * page;
    let mut tools = vec![
        tool(
            LIST,
            "List resources",
            format!(
                "List the resources (files, database tables and rows, repository files, web \
                 pages, objects...) this server can read, one page of at most {page} at a \
                 time. Each entry has the `uri` to pass to read_resource, a `name`, and when \
                 known its `mimeType` and `size` in bytes. Give `prefix` (the start of a URI, \
                 e.g. a directory's URI ending in `/`) to list only what is under it. When \
                 the answer has a `nextCursor`, call again with it as `cursor` for more; a \
                 page can be empty and still have a `nextCursor` (with a prefix, at most \
                 {scanned} resources are examined per call). To find something by name, \
                 search_resources is faster."
            ),
            json!({
                "prefix": {
                    "type": "string",
                    "description": "Only resources whose URI starts with this, e.g. file:///home/me/docs/"
                },
                "cursor": {
                    "type": "string",
                    "description": "The nextCursor of the previous answer, to continue it (with the same prefix)"
                }
            }),
            &[],
        ),
        tool(
            READ,
            "Read a resource",
            format!(
                "Read one resource by its URI (from list_resources or search_resources, or \
                 built from a template of list_resource_templates). Text comes back as text, \
                 images as an image, other binary data as an embedded resource (base64). A \
                 directory's URI gives a JSON listing of its entries. At most {max_read} per \
                 read: for a larger file, read a window of it with the `head`, `tail`, \
                 `offset` and `length` query parameters its template describes (e.g. \
                 `?tail=100` for the last 100 lines)."
            ),
            json!({
                "uri": {
                    "type": "string",
                    "description": "The resource URI, e.g. file:///home/me/docs/notes.md"
                }
            }),
            &["uri"],
        ),
        tool(
            TEMPLATES,
            "List URI templates",
            "List the URI templates (RFC 6570) this server understands, each with the \
             arguments it takes and what it addresses: how to build the URI of a file window, \
             a database row or a file at a git revision. Fill a template's arguments (see \
             complete_resource_argument for the values they can take) and pass the URI to \
             read_resource."
                .to_owned(),
            json!({}),
            &[],
        ),
        tool(
            COMPLETE,
            "Complete a template argument",
            "Suggest values for one argument of a URI template from list_resource_templates, \
             given what has been typed so far (`value`, may be empty): file paths under a \
             directory, table names, git refs. Gives at most 100 values, the total, and \
             whether there are more. `context` holds the template's other arguments already \
             chosen, when a suggestion depends on them."
                .to_owned(),
            json!({
                "template": {
                    "type": "string",
                    "description": "The uriTemplate, exactly as list_resource_templates gave it"
                },
                "argument": {
                    "type": "string",
                    "description": "The name of the argument to complete"
                },
                "value": {
                    "type": "string",
                    "description": "What has been typed so far; empty for every value",
                    "default": ""
                },
                "context": {
                    "type": "object",
                    "description": "Other arguments of the template already chosen, by name",
                    "additionalProperties": {"type": "string"}
                }
            }),
            &["template", "argument"],
        ),
        tool(
            SEARCH,
            "Search resources by name",
            format!(
                "Find resources whose name or URI matches `query`, across every source this \
                 server mounts. `query` is a case-insensitive substring (`report`), or a glob \
                 where `*` matches anything (`*.md`, `*2024*.csv`). Give `prefix` to search \
                 only under a URI prefix. Each call examines at most {scanned} resources: \
                 when the answer has a `nextCursor`, there may be more matches further on \
                 (even if this answer has none); call again with the same query and that \
                 `cursor` to continue."
            ),
            json!({
                "query": {
                    "type": "string",
                    "description": "A substring of the name or URI, or a glob with *"
                },
                "prefix": {
                    "type": "string",
                    "description": "Only resources whose URI starts with this"
                },
                "cursor": {
                    "type": "string",
                    "description": "The nextCursor of the previous answer, to continue the search"
                }
            }),
            &["query"],
        ),
    ];
    if skills {
        tools.push(tool(
            SKILLS,
            "List skills",
            format!(
                "List the agent skills this server publishes, one page of at most {page} at \
                 a time: each skill's `name`, `description` and `uri` (its SKILL.md, a \
                 skill:// URI). Read a skill's instructions with read_resource on that `uri`; \
                 the files it refers to are read the same way, by their skill:// URIs \
                 (relative paths in SKILL.md are relative to its folder); \
                 list_skill_files gives every file of a skill with its size and digest, \
                 and list_resources or search_resources with the prefix skill:// cover \
                 the skills' files too. When the answer has a `nextCursor`, call again \
                 with it as `cursor` for more."
            ),
            json!({
                "cursor": {
                    "type": "string",
                    "description": "The nextCursor of the previous answer, to continue it"
                }
            }),
            &[],
        ));
        tools.push(tool(
            SKILL_FILES,
            "List a skill's files",
            "List every file of one skill, to install it: the skill's `name` and \
             `description`, and each file's skill:// `uri`, `size` in bytes and `digest` \
             (`sha256:` and the hex SHA-256 of its bytes), SKILL.md included. Give the \
             skill's SKILL.md URI from list_skills, or its folder (the same URI without \
             `/SKILL.md`). Read each file with read_resource and check its size and digest; \
             keep the paths after the skill's folder as they are."
                .to_owned(),
            json!({
                "uri": {
                    "type": "string",
                    "description": "The skill's SKILL.md URI or its folder, e.g. skill://acme/review/SKILL.md"
                }
            }),
            &["uri"],
        ));
    }
    tools
}

/// One read-only tool whose input is an object of `properties`, `required` of them required.
fn tool(
    name: &'static str,
    title: &str,
    description: String,
    properties: Value,
    required: &[&str],
) -> Tool {
    let mut schema = JsonObject::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), properties);
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    schema.insert("additionalProperties".into(), json!(false));
    Tool::new(name, description, Arc::new(schema))
        .with_title(title)
        .with_annotations(
            ToolAnnotations::with_title(title)
                .read_only(true)
                .destructive(false)
                .idempotent(true),
        )
}

/// `n` bytes for a description: "8 MiB", "512 KiB", "300 bytes".
fn human_bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// `tools/call` for a caller holding `grant`: the tool's result, failures included as
/// `isError` results; an unknown tool name is the one protocol error.
pub(crate) async fn call(
    service: &Service,
    grant: Option<&Grant>,
    request: CallToolRequestParams,
) -> Result<CallToolResult, ErrorData> {
    let args = Value::Object(request.arguments.unwrap_or_default());
    let name = request.name.as_ref();
    let outcome = match name {
        LIST => match arguments(name, args) {
            Ok(args) => list(service, grant, args).await,
            Err(e) => Err(e),
        },
        READ => match arguments(name, args) {
            Ok(args) => read(service, grant, args).await,
            Err(e) => Err(e),
        },
        TEMPLATES => match arguments::<NoArgs>(name, args) {
            Ok(_) => templates(service, grant).await,
            Err(e) => Err(e),
        },
        COMPLETE => match arguments(name, args) {
            Ok(args) => complete(service, grant, args).await,
            Err(e) => Err(e),
        },
        SEARCH => match arguments(name, args) {
            Ok(args) => search(service, grant, args).await,
            Err(e) => Err(e),
        },
        SKILLS if service.has_skills() => match arguments(name, args) {
            Ok(args) => skills(service, grant, args).await,
            Err(e) => Err(e),
        },
        SKILL_FILES if service.has_skills() => match arguments(name, args) {
            Ok(args) => skill_files(service, grant, args).await,
            Err(e) => Err(e),
        },
        other => {
            let tools = &service.state().tools;
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
            let names = match names.split_last() {
                Some((last, [])) => (*last).to_owned(),
                Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
                None => String::new(),
            };
            return Err(ErrorData::invalid_params(
                format!("unknown tool {other:?}; this server's tools are {names}"),
                None,
            ));
        }
    };
    Ok(outcome.unwrap_or_else(|e| CallToolResult::error(vec![ContentBlock::text(e.message)])))
}

/// The arguments of tool `name` decoded, or which argument is wrong and how (which becomes
/// an `isError` result a model can correct, as the specification prefers).
fn arguments<T: DeserializeOwned>(name: &str, args: Value) -> Result<T, ErrorData> {
    serde_path_to_error::deserialize::<_, T>(args).map_err(|e| {
        let path = e.path().to_string();
        let why = e.inner().to_string();
        let message = if path == "." {
            format!("invalid arguments for {name}: {why}")
        } else {
            format!("invalid arguments for {name}: `{path}`: {why}")
        };
        ErrorData::invalid_params(message, None)
    })
}

/// An optional string argument, where models often send `""` for "none".
fn given(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// A result whose content is `value` as JSON text, also given as structured content.
fn json_result(value: Value) -> CallToolResult {
    let text = value.to_string();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

/// A resource as `resources/list` writes it.
fn resource_json(m: ResourceMeta) -> Value {
    serde_json::to_value(resource_of(m)).unwrap_or(Value::Null)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

async fn list(
    service: &Service,
    grant: Option<&Grant>,
    args: ListArgs,
) -> Result<CallToolResult, ErrorData> {
    let cursor = given(args.cursor);
    let (items, next, skipped) = match given(args.prefix) {
        None => {
            let page = service
                .list(grant, cursor.as_deref())
                .await
                .map_err(to_mcp_error)?;
            (page.items, page.next_cursor, page.skipped)
        }
        Some(prefix) => {
            let page = service
                .scan(grant, cursor.as_deref(), Some(&prefix), &|_| true)
                .await
                .map_err(to_mcp_error)?;
            (page.items, page.next_cursor, page.skipped)
        }
    };
    let resources: Vec<Value> = items.into_iter().map(resource_json).collect();
    let mut out = json!({ "resources": resources });
    if let Some(next) = next {
        out["nextCursor"] = json!(next);
    }
    with_unavailable(&mut out, &skipped);
    Ok(json_result(out))
}

/// Name in a listing tool's answer the mounts it left out because their source failed
/// (`unavailable`, as the resource listing's `_meta` names them), so a model knows the
/// answer is not the whole.
fn with_unavailable(out: &mut Value, skipped: &[crate::service::SkippedMount]) {
    if !skipped.is_empty() {
        out["unavailable"] = crate::handler::skipped_json(skipped);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    uri: String,
}

async fn read(
    service: &Service,
    grant: Option<&Grant>,
    args: ReadArgs,
) -> Result<CallToolResult, ErrorData> {
    let read = service.read(grant, &args.uri).await.map_err(to_mcp_error)?;
    let content = read
        .contents
        .into_iter()
        .map(|c| match c.body {
            ContentsBody::Text(text) => {
                let block = TextContent::new(text);
                ContentBlock::Text(match c.meta {
                    Some(meta) => block.with_meta(MetaObject(meta)),
                    None => block,
                })
            }
            ContentsBody::Blob(bytes)
                if c.mime_type
                    .as_deref()
                    .is_some_and(|m| m.starts_with("image/")) =>
            {
                let data = base64::engine::general_purpose::STANDARD.encode(bytes);
                let block = ImageContent::new(data, c.mime_type.unwrap_or_default());
                ContentBlock::Image(match c.meta {
                    Some(meta) => block.with_meta(MetaObject(meta)),
                    None => block,
                })
            }
            ContentsBody::Blob(_) => ContentBlock::resource(contents_of(c)),
        })
        .collect();
    Ok(CallToolResult::success(content))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

async fn templates(service: &Service, grant: Option<&Grant>) -> Result<CallToolResult, ErrorData> {
    let list = service.templates(grant).await.map_err(to_mcp_error)?;
    let templates: Vec<Value> = list
        .templates
        .into_iter()
        .map(|t| {
            // A template that does not parse offers no arguments rather than failing the
            // whole list; providers' templates are checked by the behaviour suite.
            let arguments = template_arguments(&t.uri_template);
            let mut v = json!({
                "uriTemplate": t.uri_template,
                "name": t.name,
                "arguments": arguments,
            });
            if let Some(title) = t.title {
                v["title"] = json!(title);
            }
            if let Some(description) = t.description {
                v["description"] = json!(description);
            }
            if let Some(mime) = t.mime_type {
                v["mimeType"] = json!(mime);
            }
            v
        })
        .collect();
    Ok(json_result(json!({ "resourceTemplates": templates })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteArgs {
    template: String,
    argument: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    context: Option<BTreeMap<String, String>>,
}

/// The variables of `template`, as list_resource_templates gives them as `arguments`: a
/// template that does not parse offers none.
fn template_arguments(template: &str) -> Vec<String> {
    UriTemplate::parse(template)
        .map(|p| p.variables().into_iter().map(str::to_owned).collect())
        .unwrap_or_default()
}

async fn complete(
    service: &Service,
    grant: Option<&Grant>,
    args: CompleteArgs,
) -> Result<CallToolResult, ErrorData> {
    // Checked here rather than left to completion/complete, whose message points at
    // resources/templates/list, a method a tools-only client cannot call; and whose answer to
    // an argument the template does not have is an empty list, which reads as "no value
    // matches" when the name is what is wrong.
    let known = service
        .state()
        .router()
        .route_template(&args.template)
        .is_some_and(|m| visible(grant, m));
    if !known {
        return Err(ErrorData::invalid_params(
            format!(
                "no resource template {:?}; {TEMPLATES} lists the templates of this server, exactly as this argument takes them, with their arguments",
                args.template
            ),
            None,
        ));
    }
    let arguments = template_arguments(&args.template);
    if !arguments.contains(&args.argument) {
        let has = if arguments.is_empty() {
            "it has none".to_owned()
        } else {
            format!("its arguments are {}", arguments.join(", "))
        };
        return Err(ErrorData::invalid_params(
            format!(
                "template {:?} has no argument {:?}; {has}",
                args.template, args.argument
            ),
            None,
        ));
    }
    let done = service
        .complete(
            grant,
            CompletionRef::Template(&args.template),
            &args.argument,
            args.value.as_deref().unwrap_or_default(),
            args.context.unwrap_or_default(),
        )
        .await
        .map_err(to_mcp_error)?;
    Ok(json_result(json!({
        "values": done.values,
        "total": done.total,
        "hasMore": done.has_more,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

async fn search(
    service: &Service,
    grant: Option<&Grant>,
    args: SearchArgs,
) -> Result<CallToolResult, ErrorData> {
    let pattern = Pattern::new(&args.query)?;
    let prefix = given(args.prefix);
    let page = service
        .search(
            grant,
            given(args.cursor).as_deref(),
            prefix.as_deref(),
            &|r| {
                pattern.matches(&r.name)
                    || pattern.matches(&r.uri)
                    || (is_skill_entry(r)
                        && r.description.as_deref().is_some_and(|d| pattern.matches(d)))
            },
        )
        .await
        .map_err(to_mcp_error)?;
    let matches: Vec<Value> = page.items.into_iter().map(resource_json).collect();
    let mut out = json!({ "matches": matches, "examined": page.examined });
    if let Some(next) = page.next_cursor {
        out["nextCursor"] = json!(next);
    }
    with_unavailable(&mut out, &page.skipped);
    Ok(json_result(out))
}

/// Whether `r` is a skill's `SKILL.md` as the service describes it in listings (named and
/// described by the skill's frontmatter), whose description a search covers: other
/// resources' descriptions (a commit's summary, a table's comment) are not what a search
/// by name looks for.
fn is_skill_entry(r: &ResourceMeta) -> bool {
    r.uri.ends_with("/SKILL.md")
        && r.mime_type.as_deref() == Some("text/markdown")
        && r.description.is_some()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkillFilesArgs {
    uri: String,
}

/// Every file of one skill from its manifest (`skills/get`, with the caller's scopes): a
/// tools-only agent's way to install a skill, reading each file and checking its size and
/// digest.
async fn skill_files(
    service: &Service,
    grant: Option<&Grant>,
    args: SkillFilesArgs,
) -> Result<CallToolResult, ErrorData> {
    let asked = args.uri.trim_end_matches('/');
    let uri = if asked.ends_with("/SKILL.md") {
        asked.to_owned()
    } else {
        format!("{asked}/SKILL.md")
    };
    let (skill, _) = service.get_skill(grant, &uri).await.map_err(to_mcp_error)?;
    let files: Vec<Value> = match &skill.resources {
        rmcp::model::SkillResources::Files(files) => files
            .iter()
            .map(|f| json!({ "uri": f.uri, "size": f.size, "digest": f.digest }))
            .collect(),
        _ => Vec::new(),
    };
    Ok(json_result(json!({
        "name": skill.frontmatter.name,
        "description": skill.frontmatter.description,
        "uri": skill.uri,
        "files": files,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkillsArgs {
    #[serde(default)]
    cursor: Option<String>,
}

/// One page of `skills/list` (the same signed cursors, the caller's scopes), each skill as
/// its name, description and `SKILL.md` URI: what a model needs to pick one and read it.
async fn skills(
    service: &Service,
    grant: Option<&Grant>,
    args: SkillsArgs,
) -> Result<CallToolResult, ErrorData> {
    let page = service
        .list_skills(grant, given(args.cursor).as_deref())
        .await
        .map_err(to_mcp_error)?;
    let skills: Vec<Value> = page
        .skills
        .into_iter()
        .map(|s| {
            json!({
                "name": s.frontmatter.name,
                "description": s.frontmatter.description,
                "uri": s.uri,
            })
        })
        .collect();
    let mut out = json!({ "skills": skills });
    if let Some(next) = page.next_cursor {
        out["nextCursor"] = json!(next);
    }
    Ok(json_result(out))
}

/// A `search_resources` query: a case-insensitive substring, or, with a `*`, a glob that
/// must match the whole name or URI, `*` matching any run of characters.
#[derive(Debug)]
pub(crate) struct Pattern {
    /// The lowercased pieces between `*`s; one piece is a plain substring query.
    pieces: Vec<String>,
}

impl Pattern {
    /// The pattern of `query`, or invalid params saying why it cannot be one.
    pub(crate) fn new(query: &str) -> Result<Self, ErrorData> {
        if query.trim().is_empty() {
            return Err(ErrorData::invalid_params(
                "invalid arguments for search_resources: `query` is empty; give a part of a name, or a glob such as *.md",
                None,
            ));
        }
        if query.len() > MAX_QUERY_LEN {
            return Err(ErrorData::invalid_params(
                format!(
                    "invalid arguments for search_resources: `query` is {} bytes, over the limit of {MAX_QUERY_LEN}",
                    query.len()
                ),
                None,
            ));
        }
        Ok(Self {
            pieces: query.to_lowercase().split('*').map(str::to_owned).collect(),
        })
    }

    /// Whether `text` matches, ignoring case. Linear in `text` per piece: the pieces are
    /// found left to right, each after the previous, which is all a `*`-only glob needs.
    pub(crate) fn matches(&self, text: &str) -> bool {
        let text = text.to_lowercase();
        let [first, middle @ .., last] = self.pieces.as_slice() else {
            return text.contains(self.pieces[0].as_str());
        };
        let Some(mut rest) = text.strip_prefix(first.as_str()) else {
            return false;
        };
        for piece in middle {
            match rest.find(piece.as_str()) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(q: &str, t: &str) -> bool {
        Pattern::new(q).unwrap().matches(t)
    }

    #[test]
    fn substring_queries_ignore_case() {
        assert!(m("report", "Q3-Report.pdf"));
        assert!(m("REP", "file:///a/report.md"));
        assert!(!m("report", "notes.md"));
    }

    #[test]
    fn globs_match_the_whole_text() {
        assert!(m("*.md", "Notes.MD"));
        assert!(!m("*.md", "notes.md.bak"));
        assert!(m("*2024*.csv", "sales-2024-q1.csv"));
        assert!(!m("*2024*.csv", "sales-2023.csv"));
        assert!(m("a*b*c", "abc"));
        assert!(!m("a*b*c", "acb"));
        assert!(m("*", "anything"));
        assert!(m("ab*ab", "abab"));
        assert!(!m("ab*ab", "aba"));
        assert!(m("ä*", "Äpfel"));
    }

    #[test]
    fn empty_and_oversized_queries_are_refused_with_the_limit() {
        assert!(Pattern::new("  ").unwrap_err().message.contains("empty"));
        let long = "x".repeat(MAX_QUERY_LEN + 1);
        let e = Pattern::new(&long).unwrap_err();
        assert!(e.message.contains("1024"), "{}", e.message);
    }

    #[test]
    fn every_tool_is_read_only_with_an_object_schema() {
        let tools = definitions(&Settings::default(), true);
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [LIST, READ, TEMPLATES, COMPLETE, SEARCH, SKILLS, SKILL_FILES]
        );
        assert_eq!(definitions(&Settings::default(), false).len(), 5);
        for t in &tools {
            let a = t.annotations.as_ref().unwrap();
            assert_eq!(a.read_only_hint, Some(true), "{}", t.name);
            assert_eq!(a.destructive_hint, Some(false), "{}", t.name);
            assert_eq!(t.input_schema["type"], "object");
            assert!(t.description.as_ref().is_some_and(|d| d.len() > 100));
        }
        assert!(tools[1].description.as_ref().unwrap().contains("8 MiB"));
        assert_eq!(human_bytes(300), "300 bytes");
        assert_eq!(human_bytes(512 << 10), "512 KiB");
    }
}
