//! The client commands: `ls`, `cat`, `dir`, `templates`, `complete`, `ping` and `watch`, and
//! the dispatch of `tools`, `call`, `prompts` and `prompt` (in `primitives.rs`).

use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use clap::Subcommand;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::output::{clean, clean_text, field, human_size, json_line, raw_line, table};
use super::transport::{DEFAULT_RETRY, HttpStatus, Inbound, RECONNECTS, RpcError, StreamDropped};
use super::{Connect, Era, Session, primitives, skills};

/// The client's subcommands, flattened into the binary's own.
#[derive(Subcommand, Debug)]
pub(crate) enum ClientCommand {
    /// List a server's resources (every page), as a table or JSON Lines.
    ///
    /// Examples: `mcp-resources ls -- mcp-resources serve ./docs`;
    /// `mcp-resources ls file:///srv/docs/guides/ --json --url http://127.0.0.1:8080/mcp`.
    Ls {
        /// Only resources whose URI starts with this.
        prefix: Option<String>,
        /// One resource object per line, exactly as the server sent it.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// Read a resource: text to stdout; binary to a file (`-o`) or a pipe, never a terminal.
    ///
    /// Example: `mcp-resources cat file:///srv/docs/README.md -- mcp-resources serve /srv/docs`.
    Cat {
        /// The resource's URI.
        uri: String,
        /// Write the contents to this file instead of stdout.
        #[arg(long, short = 'o', value_name = "FILE", conflicts_with = "json")]
        output: Option<PathBuf>,
        /// The whole `resources/read` result as the server sent it, on one line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// List a directory's direct children (`resources/directory/read`, every page), as `ls`
    /// lists resources; subfolders have the MIME type `inode/directory`.
    ///
    /// Example: `mcp-resources dir skill://acme/review/ --url http://127.0.0.1:8080/mcp`.
    Dir {
        /// The directory's URI.
        uri: String,
        /// One resource object per line, exactly as the server sent it.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// Set the server's log level (`logging/setLevel`) and print the log messages it sends
    /// until interrupted (Ctrl-C): one line each, `[LEVEL] LOGGER: DATA`.
    ///
    /// Example: `mcp-resources log-level debug -- node server.js`.
    LogLevel {
        /// The least severe level to be sent.
        #[arg(value_enum)]
        level: LogLevel,
        /// Each notification's `params` as sent, one per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// Ask the server whether it is there (`ping`) and say how long the answer took.
    Ping {
        #[command(flatten)]
        connect: Connect,
    },
    /// List a server's resource templates (every page), as a table or JSON Lines.
    Templates {
        /// One template object per line, exactly as the server sent it.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// Ask the server to complete one argument of a resource template, or with `--prompt`
    /// of a prompt.
    ///
    /// Example: `mcp-resources complete 'file:///srv/docs/{+path}' path gu -- mcp-resources serve /srv/docs`.
    Complete {
        /// The URI template, exactly as `templates` lists it; with `--prompt`, the prompt's
        /// name, as `prompts` lists it.
        #[arg(value_name = "TEMPLATE")]
        template: String,
        /// The argument (template variable) to complete.
        argument: String,
        /// What has been typed so far.
        value: String,
        /// An already chosen argument, as NAME=VALUE (repeatable), for servers whose
        /// suggestions depend on it.
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        context: Vec<String>,
        /// Complete an argument of the prompt named by TEMPLATE (`ref/prompt`) instead of a
        /// template variable (`ref/resource`).
        #[arg(long)]
        prompt: bool,
        /// The whole `completion` object as JSON instead of one value per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// Subscribe to resources and print a line per change until interrupted (Ctrl-C).
    ///
    /// Uses `resources/subscribe` or `subscriptions/listen`, whichever the session's era has;
    /// changes to the list of resources are printed too when the server reports them.
    /// Example: `mcp-resources watch file:///srv/docs/README.md --read -- mcp-resources serve /srv/docs`.
    Watch {
        /// The resources to watch.
        #[arg(required = true, value_name = "URI")]
        uris: Vec<String>,
        /// After each update, read the resource and print its new contents.
        #[arg(long)]
        read: bool,
        /// One JSON object per notification (`method`, `uri`, and `contents` with --read).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// List the servers found in the config files `--server NAME` looks in, and where.
    Servers {
        /// A JSON file of servers of your own, looked in first.
        #[arg(long, value_name = "FILE")]
        servers: Option<PathBuf>,
        /// Show the entries of the project in the working directory as trusted (see
        /// --trust-workspace of the other commands).
        #[arg(long)]
        trust_workspace: bool,
    },
    /// Connect and say what the server is: its name and version, the protocol version agreed,
    /// and what it offers.
    Info {
        /// `protocolVersion`, `serverInfo` and `capabilities` as one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// List a server's tools (every page), as a table or JSON Lines.
    Tools {
        /// One tool object per line, exactly as the server sent it.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// Call a tool: its text content to stdout, image, audio and blob content to `-o`; exit
    /// code 5 when the tool reports an error (`isError`).
    ///
    /// Example: `mcp-resources call read_resource --arg uri=file:///srv/docs/README.md -- mcp-resources serve /srv/docs --tools`.
    Call {
        /// The tool's name, as `tools` lists it.
        tool: String,
        /// An argument: NAME=VALUE is read by the tool's input schema (`limit=5` is the
        /// number 5 where the schema wants a number, else a string), NAME:=JSON any JSON
        /// value as written (a number, `true`, an object). Repeatable; applied over
        /// --args-json.
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        args: Vec<String>,
        /// All arguments as one JSON object.
        #[arg(long, value_name = "JSON")]
        args_json: Option<String>,
        /// Write image, audio and blob content here (a second part to FILE-2, and so on).
        #[arg(long, short = 'o', value_name = "FILE", conflicts_with = "json")]
        output: Option<PathBuf>,
        /// The whole `tools/call` result as the server sent it, on one line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// List a server's prompts (every page), as a table or JSON Lines.
    Prompts {
        /// One prompt object per line, exactly as the server sent it.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// List a server's skills (the Skills extension, every page), or pull one into a folder.
    ///
    /// Examples: `mcp-resources skills --url http://127.0.0.1:8080/mcp`;
    /// `mcp-resources skills pull acme/review ~/.claude/skills --url http://127.0.0.1:8080/mcp`;
    /// `mcp-resources skills sync ~/.claude/skills --prune --url http://127.0.0.1:8080/mcp`.
    #[command(args_conflicts_with_subcommands = true)]
    Skills {
        #[command(subcommand)]
        action: Option<Box<SkillsCommand>>,
        /// One skill object per line (uri, frontmatter, manifest), exactly as the server sent it.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// Get a prompt: each message as `[role]` and its content.
    Prompt {
        /// The prompt's name, as `prompts` lists it.
        name: String,
        /// An argument as NAME=VALUE (repeatable).
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        args: Vec<String>,
        /// Write image, audio and blob content here (a second part to FILE-2, and so on).
        #[arg(long, short = 'o', value_name = "FILE", conflicts_with = "json")]
        output: Option<PathBuf>,
        /// The whole `prompts/get` result as the server sent it, on one line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: Connect,
    },
}

/// The levels of `logging/setLevel` (RFC 5424's, least severe first).
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub(crate) enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

/// `skills pull` and `skills sync`.
#[derive(Subcommand, Debug)]
pub(crate) enum SkillsCommand {
    /// Download a skill into DIR/<name>: every file of its manifest, each checked against its
    /// size and `sha256:` digest before the folder is moved into place; or, with `--all
    /// DIR`, every skill the server lists.
    ///
    /// SKILL names the skill by its name (`review`), its path (`acme/review`), its folder
    /// URI (`skill://acme/review`) or the URI of its `SKILL.md`; a name that fits more than
    /// one skill fails listing their URIs.
    Pull {
        /// The skill: `NAME`, `PREFIX/NAME`, `skill://PREFIX/NAME` or its `SKILL.md` URI.
        #[arg(
            value_name = "SKILL",
            required_unless_present = "all",
            conflicts_with = "all"
        )]
        uri: Option<String>,
        /// The folder to put the skill's folder in (an agent's skills folder); made if missing.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        dir: Option<PathBuf>,
        /// Install every skill the server lists into this folder, each as DIR/<name>, recorded
        /// in DIR/.mcp-resources-skills.json as `skills sync` records what it writes.
        #[arg(long, value_name = "DIR")]
        all: Option<PathBuf>,
        /// Replace DIR/<name> when it exists (only once the new one is complete and verified).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        connect: Connect,
    },
    /// Keep DIR in step with the server's skills: install the new ones, update the changed
    /// ones (by digest; unchanged ones are not touched), and with `--prune` remove those the
    /// server no longer lists. Only folders an earlier sync (or `pull --all`) wrote are ever
    /// replaced or removed; DIR/.mcp-resources-skills.json records them.
    Sync {
        /// The folder the skills' folders are in (an agent's skills folder); made if missing.
        dir: PathBuf,
        /// Remove the folders of skills the server no longer lists (those a sync wrote).
        #[arg(long)]
        prune: bool,
        #[command(flatten)]
        connect: Connect,
    },
}

/// Run one client command to its end; errors are for `main` to print as one line.
pub(crate) fn run(cmd: ClientCommand) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(async move {
        match cmd {
            ClientCommand::Ls {
                prefix,
                json,
                connect,
            } => {
                with_session(&connect, |s| async move {
                    ls(&s, prefix.as_deref(), json).await.map(|()| s)
                })
                .await
            }
            ClientCommand::Cat {
                uri,
                output,
                json,
                connect,
            } => {
                with_session(&connect, |s| async move {
                    cat(&s, &uri, output, json).await.map(|()| s)
                })
                .await
            }
            ClientCommand::Dir { uri, json, connect } => {
                with_session(&connect, |s| async move {
                    dir(&s, &uri, json).await.map(|()| s)
                })
                .await
            }
            ClientCommand::LogLevel {
                level,
                json,
                connect,
            } => {
                let (mut session, mut rx) = Session::connect(&connect).await?;
                // `logging/setLevel` exists only in the `initialize` eras: 2026-07-28 sends log
                // messages only on the requests that ask for them in `_meta` (SEP-2577), so
                // under `auto` a server that chose 2026-07-28 is asked again for a legacy
                // session (one that `auto` found only over HTTP+SSE is one already).
                if connect.protocol == super::Protocol::Auto && session.era() == &Era::Modern {
                    session.close().await;
                    let mut legacy = connect.clone();
                    legacy.protocol = super::Protocol::Legacy;
                    (session, rx) = Session::connect(&legacy).await?;
                }
                let level = clap::ValueEnum::to_possible_value(&level)
                    .map(|v| v.get_name().to_owned())
                    .unwrap_or_default();
                log_level(session, rx, &level, json).await
            }
            ClientCommand::Ping { connect } => {
                with_session(&connect, |s| async move {
                    let started = std::time::Instant::now();
                    s.request("ping", json!({})).await?;
                    println!(
                        "the server answered ping in {} ms",
                        started.elapsed().as_millis()
                    );
                    Ok(s)
                })
                .await
            }
            ClientCommand::Templates { json, connect } => {
                with_session(&connect, |s| async move {
                    templates(&s, json).await.map(|()| s)
                })
                .await
            }
            ClientCommand::Complete {
                template,
                argument,
                value,
                context,
                prompt,
                json,
                connect,
            } => {
                let context = parse_string_args(&context).map_err(super::usage)?;
                let reference = match prompt {
                    true => json!({ "type": "ref/prompt", "name": template }),
                    false => json!({ "type": "ref/resource", "uri": template }),
                };
                with_session(&connect, |s| async move {
                    complete(&s, reference, &argument, &value, context, json)
                        .await
                        .map(|()| s)
                })
                .await
            }
            ClientCommand::Watch {
                uris,
                read,
                json,
                connect,
            } => {
                let (session, rx) = Session::connect(&connect).await?;
                watch(session, rx, &uris, read, json).await
            }
            ClientCommand::Servers {
                servers,
                trust_workspace,
            } => list_servers(servers.as_deref(), trust_workspace),
            ClientCommand::Info { json, connect } => {
                with_session(&connect, |s| async move {
                    primitives::info(&s, json).map(|()| s)
                })
                .await
            }
            ClientCommand::Tools { json, connect } => {
                with_session(&connect, |s| async move {
                    primitives::tools(&s, json).await.map(|()| s)
                })
                .await
            }
            ClientCommand::Call {
                tool,
                args,
                args_json,
                output,
                json,
                connect,
            } => {
                let arguments = primitives::tool_arguments(&args, args_json.as_deref())
                    .map_err(super::usage)?;
                with_session(&connect, |s| async move {
                    primitives::call(&s, &tool, arguments, output, json)
                        .await
                        .map(|()| s)
                })
                .await
            }
            ClientCommand::Prompts { json, connect } => {
                with_session(&connect, |s| async move {
                    primitives::prompts(&s, json).await.map(|()| s)
                })
                .await
            }
            ClientCommand::Skills {
                action: None,
                json,
                connect,
            } => {
                with_session(&connect, |s| async move {
                    skills::list(&s, json).await.map(|()| s)
                })
                .await
            }
            ClientCommand::Skills {
                action: Some(action),
                ..
            } => match *action {
                SkillsCommand::Pull {
                    uri,
                    dir,
                    all: Some(all),
                    force,
                    connect,
                } => {
                    let _ = (uri, dir);
                    let identity = connect.identity();
                    with_session(&connect, |s| async move {
                        skills::pull_all(&s, &identity, &all, force)
                            .await
                            .map(|()| s)
                    })
                    .await
                }
                SkillsCommand::Pull {
                    uri: Some(uri),
                    dir: Some(dir),
                    all: None,
                    force,
                    connect,
                } => {
                    with_session(&connect, |s| async move {
                        skills::pull(&s, &uri, &dir, force).await.map(|()| s)
                    })
                    .await
                }
                SkillsCommand::Pull { .. } => Err(super::usage(anyhow!(
                    "skills pull takes SKILL and DIR, or --all DIR"
                ))),
                SkillsCommand::Sync {
                    dir,
                    prune,
                    connect,
                } => {
                    let identity = connect.identity();
                    with_session(&connect, |s| async move {
                        skills::sync(&s, &identity, &dir, prune).await.map(|()| s)
                    })
                    .await
                }
            },
            ClientCommand::Prompt {
                name,
                args,
                output,
                json,
                connect,
            } => {
                let arguments = parse_string_args(&args).map_err(super::usage)?;
                with_session(&connect, |s| async move {
                    primitives::prompt(&s, &name, arguments, output, json)
                        .await
                        .map(|()| s)
                })
                .await
            }
        }
    });
    // A child server or an HTTP stream must not keep a finished command alive.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    result
}

/// Connect, run `f`, and close the session however `f` ended (it hands the session back on
/// success; on failure the transport is dropped, which kills a child server).
async fn with_session<F, Fut>(connect: &Connect, f: F) -> anyhow::Result<()>
where
    F: FnOnce(Session) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Session>>,
{
    let (session, _rx) = Session::connect(connect).await?;
    let session = f(session).await?;
    session.close().await;
    Ok(())
}

/// A one-line "listing… N resources" on stderr while pages arrive, only when stderr is a
/// terminal: on a pipe or a file it would be noise in someone's log.
struct Progress {
    on: bool,
    shown: bool,
}

impl Progress {
    fn new() -> Self {
        Self {
            on: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    fn update(&mut self, what: &str, count: usize, pages: usize) {
        if self.on {
            let pages = if pages == 1 {
                "1 page".to_owned()
            } else {
                format!("{pages} pages")
            };
            eprint!("\r\x1b[Klisting {what}: {count} so far ({pages})…");
            let _ = std::io::stderr().flush();
            self.shown = true;
        }
    }

    fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            let _ = std::io::stderr().flush();
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // An error mid-listing must start on a clean line.
        self.clear();
    }
}

/// Follow every cursor of a list method, calling `each` with every item of `key` as the
/// server wrote it.
pub(super) async fn paginate(
    s: &Session,
    method: &str,
    key: &str,
    each: impl FnMut(&RawValue) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    paginate_with(s, method, &json!({}), key, each).await
}

/// [`paginate`] for a method whose every request carries `params` besides the cursor (a
/// directory read names its directory on each page).
async fn paginate_with(
    s: &Session,
    method: &str,
    params: &Value,
    key: &str,
    mut each: impl FnMut(&RawValue) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut progress = Progress::new();
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    let (mut count, mut pages) = (0usize, 0usize);
    loop {
        let mut params = params.clone();
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let raw = s.request_raw(method, params, Some(s.timeout())).await?;
        let page: HashMap<&str, &RawValue> = serde_json::from_str(raw.get())
            .with_context(|| format!("the server's {method} answer is not a JSON object"))?;
        let items: Vec<&RawValue> = page
            .get(key)
            .and_then(|v| serde_json::from_str(v.get()).ok())
            .with_context(|| format!("the server's {method} answer has no `{key}` array"))?;
        for item in &items {
            each(item)?;
        }
        count += items.len();
        pages += 1;
        left_out(method, page.get("_meta").copied(), &mut progress);
        let next: Option<String> = match page.get("nextCursor") {
            Some(c) => serde_json::from_str(c.get())
                .with_context(|| format!("the server's {method} nextCursor is not a string"))?,
            None => None,
        };
        match next {
            Some(next) => {
                if !seen.insert(next.clone()) {
                    bail!(
                        "the server sent the same {method} cursor twice; stopping here, as following it would never end"
                    );
                }
                progress.update(key, count, pages);
                cursor = Some(next);
            }
            None => break,
        }
    }
    progress.clear();
    Ok(())
}

/// The `_meta` key under which our server names the mounts a listing page left out because
/// their source failed.
const UNAVAILABLE_META_KEY: &str = "io.github.mcp-resources/unavailable";

/// Say on stderr which mounts a page left out (`_meta` of our server), one line each: the
/// listing goes on without them, and a reader should know it is not the whole.
fn left_out(method: &str, meta: Option<&RawValue>, progress: &mut Progress) {
    let Some(entries) = meta
        .and_then(|m| serde_json::from_str::<Value>(m.get()).ok())
        .and_then(|m| m.get(UNAVAILABLE_META_KEY).cloned())
        .and_then(|v| v.as_array().cloned())
    else {
        return;
    };
    progress.clear();
    for e in entries {
        let mount = e.get("mount").and_then(Value::as_str).unwrap_or("?");
        let message = e.get("message").and_then(Value::as_str).unwrap_or("");
        let what = if e.get("partial").and_then(Value::as_bool) == Some(true) {
            "the rest of"
        } else {
            "all of"
        };
        eprintln!(
            "warning: {method} left out {what} {}: {}",
            clean(mount),
            clean(message)
        );
    }
}

/// One item of a page as a `Value`, for the table.
pub(super) fn parsed(item: &RawValue) -> anyhow::Result<Value> {
    serde_json::from_str(item.get()).context("the server sent an item that is not valid JSON")
}

/// `dir`: the direct children of a directory (`resources/directory/read`, every page), as
/// `ls` prints resources; folders are the ones whose MIME type is `inode/directory`.
async fn dir(s: &Session, uri: &str, json: bool) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    let mut rows = Vec::new();
    paginate_with(
        s,
        "resources/directory/read",
        &json!({ "uri": uri }),
        "resources",
        |item| {
            if json {
                raw_line(&mut stdout.lock(), item, terminal)?;
            } else {
                rows.push(resource_row(&parsed(item)?));
            }
            Ok(())
        },
    )
    .await?;
    if !json {
        resource_table(&mut stdout.lock(), &rows)?;
    }
    Ok(())
}

/// A resource's row in `ls` and `dir`: URI, name, MIME type and size.
fn resource_row(r: &Value) -> Vec<String> {
    vec![
        field(r, "uri"),
        field(r, "name"),
        field(r, "mimeType"),
        r.get("size")
            .and_then(Value::as_u64)
            .map_or_else(|| "-".to_owned(), human_size),
    ]
}

/// The table `ls` and `dir` print, one [`resource_row`] a resource.
fn resource_table(out: &mut impl std::io::Write, rows: &[Vec<String>]) -> std::io::Result<()> {
    table(out, &["URI", "NAME", "MIME TYPE", "SIZE"], rows)
}

async fn ls(s: &Session, prefix: Option<&str>, json: bool) -> anyhow::Result<()> {
    primitives::require_resources(s).await?;
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    let mut rows = Vec::new();
    paginate(s, "resources/list", "resources", |item| {
        let r = parsed(item)?;
        let uri = r.get("uri").and_then(Value::as_str).unwrap_or_default();
        if prefix.is_some_and(|p| !uri.starts_with(p)) {
            return Ok(());
        }
        if json {
            // Streamed page by page: a consumer sees the first resources at once.
            raw_line(&mut stdout.lock(), item, terminal)?;
        } else {
            rows.push(resource_row(&r));
        }
        Ok(())
    })
    .await?;
    if !json {
        resource_table(&mut stdout.lock(), &rows)?;
    }
    Ok(())
}

async fn templates(s: &Session, json: bool) -> anyhow::Result<()> {
    primitives::require_resources(s).await?;
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    let mut rows = Vec::new();
    paginate(s, "resources/templates/list", "resourceTemplates", |item| {
        if json {
            raw_line(&mut stdout.lock(), item, terminal)?;
        } else {
            let t = parsed(item)?;
            rows.push(vec![
                field(&t, "uriTemplate"),
                field(&t, "name"),
                field(&t, "mimeType"),
                field(&t, "description"),
            ]);
        }
        Ok(())
    })
    .await?;
    if !json {
        table(
            &mut stdout.lock(),
            &["URI TEMPLATE", "NAME", "MIME TYPE", "DESCRIPTION"],
            &rows,
        )?;
    }
    Ok(())
}

/// One item of `contents`, decoded.
pub(super) struct Part {
    pub(super) bytes: Vec<u8>,
    binary: bool,
    mime: Option<String>,
}

/// The `contents` of a `resources/read` result, blobs decoded from base64.
pub(super) fn decode_contents(uri: &str, result: &Value) -> anyhow::Result<Vec<Part>> {
    let contents = result
        .get("contents")
        .and_then(Value::as_array)
        .with_context(|| format!("the server's answer for {uri} has no `contents` array"))?;
    if contents.is_empty() {
        bail!("the server returned no contents for {uri}");
    }
    contents
        .iter()
        .map(|c| {
            let mime = c.get("mimeType").and_then(Value::as_str).map(str::to_owned);
            if let Some(text) = c.get("text").and_then(Value::as_str) {
                Ok(Part {
                    bytes: text.as_bytes().to_vec(),
                    binary: false,
                    mime,
                })
            } else if let Some(blob) = c.get("blob").and_then(Value::as_str) {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(blob)
                    .map_err(|e| {
                        anyhow!("the server sent a blob for {uri} that is not base64: {e}")
                    })?;
                Ok(Part {
                    bytes,
                    binary: true,
                    mime,
                })
            } else {
                bail!("the server sent contents for {uri} with neither `text` nor `blob`")
            }
        })
        .collect()
}

async fn cat(s: &Session, uri: &str, output: Option<PathBuf>, json: bool) -> anyhow::Result<()> {
    primitives::require_resources(s).await?;
    if json {
        let raw = s
            .request_raw("resources/read", json!({ "uri": uri }), Some(s.timeout()))
            .await?;
        let stdout = std::io::stdout();
        raw_line(&mut stdout.lock(), &raw, stdout.is_terminal())?;
        return Ok(());
    }
    let result = s.request("resources/read", json!({ "uri": uri })).await?;
    let parts = decode_contents(uri, &result)?;
    if let Some(path) = output {
        let mut file = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        for p in &parts {
            file.write_all(&p.bytes)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        return Ok(());
    }
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    if terminal && let Some(p) = parts.iter().find(|p| p.binary) {
        bail!(
            "{} is binary ({}, {}): not printed on a terminal; write it to a file with -o FILE or redirect stdout",
            clean(uri),
            mime_shown(p),
            human_size(p.bytes.len() as u64)
        );
    }
    let mut out = stdout.lock();
    for p in &parts {
        write_text(&mut out, p, terminal)?;
    }
    out.flush()?;
    Ok(())
}

/// A part's MIME type for a note about it, cleaned of what a terminal would act on.
fn mime_shown(p: &Part) -> String {
    p.mime
        .as_deref()
        .map_or_else(|| "no MIME type".to_owned(), clean)
}

/// A text part as the server sent it; on a terminal, cleaned of control and bidirectional
/// characters (its lines and tabs kept): what a pipe or a file gets stays byte for byte.
fn write_text(out: &mut impl std::io::Write, p: &Part, terminal: bool) -> std::io::Result<()> {
    if terminal {
        out.write_all(clean_text(&String::from_utf8_lossy(&p.bytes)).as_bytes())
    } else {
        out.write_all(&p.bytes)
    }
}

/// `--arg NAME=VALUE` pairs as a map of strings: `complete`'s `context.arguments` and
/// `prompt`'s arguments (both maps of strings in the spec).
fn parse_string_args(pairs: &[String]) -> anyhow::Result<serde_json::Map<String, Value>> {
    pairs
        .iter()
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .with_context(|| format!("--arg {p}: expected NAME=VALUE"))?;
            Ok((k.to_owned(), Value::String(v.to_owned())))
        })
        .collect()
}

/// `completion/complete` of `argument` of `reference` (a template's `ref/resource` or a
/// prompt's `ref/prompt`).
async fn complete(
    s: &Session,
    reference: Value,
    argument: &str,
    value: &str,
    context: serde_json::Map<String, Value>,
    json: bool,
) -> anyhow::Result<()> {
    if !s.has_capability("completions") {
        bail!("the server does not offer completions (no `completions` capability)");
    }
    let mut params = json!({
        "ref": reference,
        "argument": { "name": argument, "value": value },
    });
    if !context.is_empty() {
        params["context"] = json!({ "arguments": context });
    }
    let result = s.request("completion/complete", params).await?;
    let completion = result
        .get("completion")
        .context("the server's completion/complete answer has no `completion`")?;
    let terminal = std::io::stdout().is_terminal();
    let mut out = std::io::stdout().lock();
    if json {
        json_line(&mut out, completion, terminal)?;
        return Ok(());
    }
    let values = completion
        .get("values")
        .and_then(Value::as_array)
        .context("the server's completion has no `values` array")?;
    for v in values {
        writeln!(out, "{}", clean(v.as_str().unwrap_or_default()))?;
    }
    let total = completion.get("total").and_then(Value::as_u64);
    let more = completion.get("hasMore").and_then(Value::as_bool) == Some(true)
        || total.is_some_and(|t| t > values.len() as u64);
    if more && std::io::stderr().is_terminal() {
        match total {
            Some(t) => eprintln!("({} of {t}; type more to narrow it)", values.len()),
            None => eprintln!("(more than {}; type more to narrow it)", values.len()),
        }
    }
    Ok(())
}

/// `log-level`: set the level, then print each `notifications/message` until interrupted or
/// the connection ends.
async fn log_level(
    session: Session,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Inbound>,
    level: &str,
    json: bool,
) -> anyhow::Result<()> {
    if session.era() == &Era::Modern {
        return Err(super::UsageError(format!(
            "{} has no logging/setLevel: a server sends log messages only on the requests that ask for them (the `io.modelcontextprotocol/logLevel` key of `_meta`); log-level needs a server that also speaks an initialize era (--protocol legacy)",
            super::MODERN
        ))
        .into());
    }
    if !session.has_capability("logging") {
        bail!("the server does not offer logging (no `logging` capability)");
    }
    // A legacy HTTP server sends notifications outside any request on its GET stream.
    if matches!(session.era(), Era::Legacy(_)) {
        session.open_notification_stream().await?;
    }
    session
        .request("logging/setLevel", json!({ "level": level }))
        .await?;
    // From here it runs until interrupted, as a watch does.
    session.end_deadline();
    eprintln!("logging at {level} (Ctrl-C stops)");
    let interrupted = crate::shutdown_signal();
    tokio::pin!(interrupted);
    let outcome = loop {
        let msg = tokio::select! {
            () = &mut interrupted => break Ok(()),
            msg = rx.recv() => msg,
        };
        let n = match msg {
            Some(Inbound::Notification(n)) => n,
            Some(Inbound::Dropped(why)) => {
                eprintln!("warning: {}", clean(&why));
                continue;
            }
            Some(Inbound::Ended(ended)) => break Err(ended.into()),
            None => break Err(anyhow!("the connection to the server closed")),
        };
        if n.get("method").and_then(Value::as_str) != Some("notifications/message") {
            continue;
        }
        let params = n.get("params").cloned().unwrap_or_default();
        let terminal = std::io::stdout().is_terminal();
        let mut out = std::io::stdout().lock();
        if json {
            json_line(&mut out, &params, terminal)?;
        } else {
            let data = match params.get("data") {
                Some(Value::String(s)) => clean(s),
                Some(other) => clean(&other.to_string()),
                None => String::new(),
            };
            match params.get("logger").and_then(Value::as_str) {
                Some(logger) => writeln!(
                    out,
                    "[{}] {}: {data}",
                    field(&params, "level"),
                    clean(logger)
                )?,
                None => writeln!(out, "[{}] {data}", field(&params, "level"))?,
            }
        }
        out.flush()?;
    };
    session.close().await;
    outcome
}

/// Subscribe in the session's era and print notifications until interrupted.
async fn watch(
    session: Session,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Inbound>,
    uris: &[String],
    read: bool,
    json: bool,
) -> anyhow::Result<()> {
    let session = Arc::new(session);
    let list_changed = session.resources_capability("listChanged");
    let mut listen = None;
    if *session.era() == Era::Modern {
        let mut filter = json!({ "resourceSubscriptions": uris });
        if list_changed {
            filter["resourcesListChanged"] = json!(true);
        }
        listen = Some(start_listen(&session, json!({ "notifications": filter })));
    } else {
        if !session.resources_capability("subscribe") {
            bail!(
                "the server does not offer resource subscriptions (capabilities.resources.subscribe)"
            );
        }
        // The stream first, so that no update between a subscribe and its stream is lost.
        session.open_notification_stream().await?;
        // A refused URI is warned about and the others are watched, as a 2026-07-28 listen
        // does with the URIs its acknowledgment leaves out.
        let mut watched = 0;
        for uri in uris {
            match session
                .request("resources/subscribe", json!({ "uri": uri }))
                .await
            {
                Ok(_) => watched += 1,
                Err(e) => eprintln!(
                    "warning: the server will not watch {}: {}",
                    clean(uri),
                    clean(&format!("{e:#}"))
                ),
            }
        }
        if watched == 0 {
            let outcome = Err(nothing_watched());
            if let Ok(session) = Arc::try_unwrap(session) {
                session.close().await;
            }
            return outcome;
        }
        say_watching(watched);
    }

    // Watching: from here each read has --timeout of its own, and the watch runs on.
    session.end_deadline();
    let outcome = watch_loop(&session, &mut rx, &mut listen, uris, read, json).await;

    if let Some(ListenTask { id, task, .. }) = listen {
        // Over stdio a listen ends with notifications/cancelled; over HTTP dropping its
        // stream is the cancellation.
        session.cancel(id).await;
        task.abort();
        let _ = task.await;
    }
    if let Ok(session) = Arc::try_unwrap(session) {
        session.close().await;
    }
    outcome
}

/// A 2026-07-28 listen in flight: its request id, its task, and its params (to listen again
/// after a dropped stream).
struct ListenTask {
    id: u64,
    task: tokio::task::JoinHandle<anyhow::Result<Box<RawValue>>>,
    params: Value,
}

/// Send `subscriptions/listen` with `params`; the request stays open for as long as we watch,
/// and its answer means the server ended the subscription.
fn start_listen(session: &Arc<Session>, params: Value) -> ListenTask {
    let id = session.new_request_id();
    let s = session.clone();
    let p = params.clone();
    let task = tokio::spawn(async move {
        s.request_raw_with_id(id, "subscriptions/listen", p, None)
            .await
    });
    ListenTask { id, task, params }
}

/// Whether a listen that ended with `e` is worth sending again: its HTTP stream dropped or
/// the server could not be reached (a restart, a proxy cutting idle connections), not a
/// refusal the server answered.
fn listen_again(session: &Session, e: &anyhow::Error) -> bool {
    session.is_http()
        && e.downcast_ref::<RpcError>().is_none()
        && e.downcast_ref::<HttpStatus>().is_none()
}

async fn watch_loop(
    session: &Arc<Session>,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Inbound>,
    listen: &mut Option<ListenTask>,
    uris: &[String],
    read: bool,
    json: bool,
) -> anyhow::Result<()> {
    let interrupted = crate::shutdown_signal();
    tokio::pin!(interrupted);
    // Listens sent again in a row without a notification between them.
    let mut relistens = 0;
    loop {
        let listen_end = async {
            match listen.as_mut() {
                Some(l) => (&mut l.task).await,
                None => std::future::pending().await,
            }
        };
        let msg = tokio::select! {
            () = &mut interrupted => return Ok(()),
            ended = listen_end => {
                let params = listen.take().map(|l| l.params).unwrap_or_default();
                let e = match ended {
                    Ok(Ok(_)) => return Err(anyhow!("the server ended the subscription")),
                    Ok(Err(e)) => e,
                    Err(e) => return Err(anyhow!("the subscription task failed: {e}")),
                };
                if relistens == RECONNECTS || !listen_again(session, &e) {
                    return Err(e.context("the subscription failed"));
                }
                relistens += 1;
                // 2026-07-28 has no Last-Event-ID: a new listen starts from now, and what
                // changed while the stream was down is not replayed.
                let wait = e
                    .downcast_ref::<StreamDropped>()
                    .and_then(|d| d.retry)
                    .unwrap_or(DEFAULT_RETRY);
                eprintln!(
                    "warning: {}; listening again in {} ms (attempt {relistens} of {RECONNECTS}): changes made meanwhile may have been missed",
                    clean(&format!("{e:#}")),
                    wait.as_millis()
                );
                tokio::time::sleep(wait).await;
                *listen = Some(start_listen(session, params));
                continue;
            }
            msg = rx.recv() => msg,
        };
        let notification = match msg {
            Some(Inbound::Notification(n)) => n,
            Some(Inbound::Dropped(why)) => {
                eprintln!("warning: {}", clean(&why));
                continue;
            }
            Some(Inbound::Ended(ended)) => return Err(ended.into()),
            None => bail!("the connection to the server closed"),
        };
        relistens = 0;
        let method = notification
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let params = notification.get("params").cloned().unwrap_or_default();
        match method {
            "notifications/subscriptions/acknowledged" => {
                let watched = warn_unhonoured(&params, uris);
                if watched == 0 {
                    return Err(nothing_watched());
                }
                say_watching(watched);
            }
            "notifications/resources/updated" => {
                let uri = params
                    .get("uri")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                print_update(session, method, uri, read, json).await?;
            }
            "notifications/resources/list_changed" => {
                let terminal = std::io::stdout().is_terminal();
                let mut out = std::io::stdout().lock();
                if json {
                    json_line(&mut out, &json!({ "method": method }), terminal)?;
                } else {
                    writeln!(out, "list_changed")?;
                }
                out.flush()?;
            }
            _ => {}
        }
    }
}

/// The acknowledgement of a listen names the subset the server honours; a URI it left out
/// will never be reported, which the user should know now rather than wonder later.
/// Returns how many of `uris` are watched.
fn warn_unhonoured(params: &Value, uris: &[String]) -> usize {
    let honoured: HashSet<&str> = params
        .pointer("/notifications/resourceSubscriptions")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut watched = 0;
    for uri in uris {
        if honoured.contains(uri.as_str()) {
            watched += 1;
        } else {
            eprintln!(
                "warning: the server will not watch {}: its acknowledgment of the listen leaves it out",
                clean(uri)
            );
        }
    }
    watched
}

/// The line on stderr saying the subscription is in place: from here on a change is reported
/// (a change made before it may not be), which a person or a script waiting to make one needs
/// to know. A 2026-07-28 listen is in place once the server acknowledges it.
fn say_watching(watched: usize) {
    let what = if watched == 1 {
        "1 resource".to_owned()
    } else {
        format!("{watched} resources")
    };
    eprintln!("watching {what} (Ctrl-C stops)");
}

/// Why a watch ends when the server refused every URI given (each already warned about):
/// waiting on would print nothing, ever.
fn nothing_watched() -> anyhow::Error {
    anyhow!("nothing to watch: the server refused every URI given")
}

async fn print_update(
    session: &Session,
    method: &str,
    uri: &str,
    read: bool,
    json: bool,
) -> anyhow::Result<()> {
    let contents = if read {
        match session
            .request("resources/read", json!({ "uri": uri }))
            .await
        {
            Ok(result) => Some(Ok(result)),
            Err(e) => Some(Err(e)),
        }
    } else {
        None
    };
    let terminal = std::io::stdout().is_terminal();
    let mut out = std::io::stdout().lock();
    if json {
        let mut line = json!({ "method": method, "uri": uri });
        match &contents {
            Some(Ok(result)) => {
                line["contents"] = result.get("contents").cloned().unwrap_or_default()
            }
            Some(Err(e)) => line["error"] = json!(format!("{e:#}")),
            None => {}
        }
        json_line(&mut out, &line, terminal)?;
    } else {
        writeln!(out, "updated {}", clean(uri))?;
        match contents {
            Some(Ok(result)) => match decode_contents(uri, &result) {
                Ok(parts) => {
                    for p in parts {
                        if p.binary {
                            writeln!(
                                out,
                                "(binary, {}, {})",
                                mime_shown(&p),
                                human_size(p.bytes.len() as u64)
                            )?;
                        } else {
                            write_text(&mut out, &p, terminal)?;
                            if !p.bytes.ends_with(b"\n") {
                                writeln!(out)?;
                            }
                        }
                    }
                }
                Err(e) => eprintln!("error: {}", clean(&format!("{e:#}"))),
            },
            // A resource that vanished or failed to read is reported, and watching goes on.
            Some(Err(e)) => eprintln!(
                "error: cannot read {}: {}",
                clean(uri),
                clean(&format!("{e:#}"))
            ),
            None => {}
        }
    }
    out.flush()?;
    Ok(())
}

/// `servers`: one row per entry found (name, host, file, what it runs or reaches; never its
/// environment or headers, nor a URL's user information or query, which may hold secrets), a
/// project's entries marked while its folder is not trusted, and a note per file that could
/// not be read.
fn list_servers(explicit: Option<&std::path::Path>, trust_flag: bool) -> anyhow::Result<()> {
    let (entries, notes) = super::hosts::load(explicit)?;
    let trusted = super::hosts::workspace_trusted(trust_flag);
    for n in notes {
        eprintln!("warning: {}", clean(&n));
    }
    for e in &entries {
        if let Some(hint) = super::hosts::home_hint(e) {
            eprintln!("warning: {}", clean(&hint));
        }
    }
    // A name in several files: say which entry `--server NAME` takes, once per name.
    let mut told = HashSet::new();
    for e in &entries {
        let same: Vec<&super::hosts::Entry> = entries.iter().filter(|o| o.name == e.name).collect();
        if same.len() < 2 || !told.insert(e.name.as_str()) {
            continue;
        }
        let Some(w) = super::hosts::winner(&entries, &e.name).map(|i| &entries[i]) else {
            continue;
        };
        let files: Vec<String> = same.iter().map(|o| o.file.display().to_string()).collect();
        let condition = if w.workspace && !trusted {
            " once the project is trusted"
        } else {
            ""
        };
        eprintln!(
            "note: server {} is in {}: --server {} uses the one in {}{condition}",
            clean(&format!("{:?}", e.name)),
            clean(&files.join(" and ")),
            clean(&e.name),
            clean(&w.file.display().to_string())
        );
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let target = match &e.url {
                Some(url) if e.sse => clean(&format!("{} (HTTP+SSE)", mcpr_core::redact_url(url))),
                Some(url) => clean(&mcpr_core::redact_url(url)),
                None => clean(
                    &e.command
                        .iter()
                        .map(|a| a.to_string_lossy())
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
            };
            vec![
                clean(&e.name),
                if e.workspace && !trusted {
                    format!("{} untrusted", e.host)
                } else {
                    e.host.to_owned()
                },
                clean(&e.file.display().to_string()),
                target,
            ]
        })
        .collect();
    table(
        &mut std::io::stdout().lock(),
        &["NAME", "FROM", "FILE", "RUNS OR REACHES"],
        &rows,
    )?;
    Ok(())
}
