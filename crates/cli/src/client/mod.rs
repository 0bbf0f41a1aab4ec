//! The terminal client (`ls`, `cat`, `dir`, `templates`, `complete`, `watch`, `info`,
//! `ping`, `tools`, `call`, `prompts`, `prompt`, `skills`) for any MCP server.
//!
//! It speaks raw JSON-RPC rather than through rmcp's typed client so that `--json` can print
//! what the server sent byte for byte in meaning (unknown fields included), and so that both
//! eras, both transports and every failure get one readable line of their own. The session
//! here picks the era (`server/discover` first under `--protocol auto`), adds the 2026-07-28
//! `_meta` to every request, and turns answers into `Value`s for the commands.

pub(crate) mod commands;
pub(crate) mod hosts;
mod output;
mod primitives;
mod skills;
mod transport;

pub(crate) use output::clean;

use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use transport::{Http, HttpStatus, Inbound, LegacySse, Outgoing, RpcError, Stdio, Transport};

/// The current protocol version, the one without `initialize`.
pub(crate) const MODERN: &str = "2026-07-28";
/// The version a legacy `initialize` asks for; servers answer with the one they speak.
const LEGACY: &str = "2025-11-25";
/// Every version this client speaks, newest first: the one era without `initialize`, then
/// the `initialize` ones.
const SPOKEN: [&str; 5] = [MODERN, LEGACY, "2025-06-18", "2025-03-26", "2024-11-05"];
/// How long closing a session waits for a stdio server to exit after the end of its input,
/// or for an HTTP server to end the session, before killing it or leaving.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// The version whose HTTP transport is HTTP+SSE (`GET` stream, `POST` endpoint).
const HTTP_SSE: &str = "2024-11-05";
/// "Unsupported protocol version" (2026-07-28), with the versions the server speaks in
/// `data.supported`.
const UNSUPPORTED_VERSION: i64 = -32022;

/// A command line the client cannot act on (beyond what clap checks): no server given, a
/// malformed `--header` or `--arg`. Exits 2, as clap's own usage errors do.
#[derive(Debug)]
pub(crate) struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// `--timeout` ran out, with the step the command was waiting for.
#[derive(Debug)]
pub(crate) struct TimedOut(pub String);

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TimedOut {}

/// A usage error (`UsageError`), keeping the message of `e`.
pub(crate) fn usage(e: anyhow::Error) -> anyhow::Error {
    UsageError(format!("{e:#}")).into()
}

/// The exit status of a failed command, by what failed, so that a script can tell a bad command
/// line from a server that is down, one that refused, a tool that failed and a wait that ran
/// out: 2 usage, 3 connection (the server could not be started or reached, or the connection
/// ended), 4 a JSON-RPC error from the server, 5 a tool that reported an error (`isError`),
/// 6 `--timeout`, 1 anything else.
pub(crate) fn exit_code(e: &anyhow::Error) -> u8 {
    let has = |f: &dyn Fn(&(dyn std::error::Error + 'static)) -> bool| e.chain().any(f);
    if has(&|c| c.is::<UsageError>()) {
        2
    } else if has(&|c| c.is::<TimedOut>()) {
        6
    } else if has(&|c| c.is::<primitives::ToolError>()) {
        5
    } else if has(&|c| c.is::<RpcError>()) {
        4
    } else if has(&|c| {
        c.is::<transport::ConnectionEnded>()
            || c.is::<HttpStatus>()
            || c.is::<transport::StreamDropped>()
    }) {
        3
    } else {
        1
    }
}

/// The last lines of stderr of a stdio server whose exit ended the command, cleaned and
/// bounded, for `main` to show under the error line; empty for any other failure.
pub(crate) fn server_stderr(e: &anyhow::Error) -> &[String] {
    e.chain()
        .find_map(|c| c.downcast_ref::<transport::ConnectionEnded>())
        .map_or(&[], |ended| ended.stderr.as_slice())
}

/// The versions a -32022 refusal says the server speaks.
fn supported_versions(e: &anyhow::Error) -> Option<Vec<Value>> {
    let r = e.downcast_ref::<RpcError>()?;
    if r.code != UNSUPPORTED_VERSION {
        return None;
    }
    r.data.as_ref()?.get("supported")?.as_array().cloned()
}

/// The newest version both this client and a server that speaks `supported` speak.
fn newest_common(supported: &[Value]) -> Option<&'static str> {
    SPOKEN
        .into_iter()
        .find(|v| supported.iter().any(|s| s.as_str() == Some(v)))
}

/// How to reach the server: shared by every client command.
#[derive(Args, Debug, Clone)]
pub(crate) struct Connect {
    /// A Streamable HTTP server's endpoint, e.g. http://127.0.0.1:8080/mcp, or a 2024-11-05
    /// HTTP+SSE server's event stream, e.g. http://127.0.0.1:8080/sse (see --protocol).
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    url: Option<String>,
    /// A server from a host's config file (Claude Desktop, VS Code, Cursor) or --servers,
    /// by name, with its environment and headers (`mcp-resources servers` lists them).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["url", "command"])]
    server: Option<String>,
    /// A JSON (or JSONC) file of servers (`{"mcpServers": {NAME: {command, args, env} or {url,
    /// headers}}}`), looked in before the hosts' files.
    #[arg(long, value_name = "FILE")]
    servers: Option<std::path::PathBuf>,
    /// Trust the project in the working directory: its `.vscode/mcp.json` and
    /// `.cursor/mcp.json` entries may be used with --server (they can run any command and
    /// read your environment). Without it, only folders listed in
    /// ~/.config/mcp-resources/trusted-workspaces are trusted.
    #[arg(long, requires = "server")]
    trust_workspace: bool,
    /// An HTTP header for every request, as "Name: value" (repeatable); e.g. an
    /// "Authorization: Bearer …" token. Never printed.
    #[arg(
        long = "header",
        short = 'H',
        value_name = "NAME: VALUE",
        requires = "url"
    )]
    headers: Vec<String>,
    /// The protocol era: `auto` uses 2026-07-28 when the server offers it, else the
    /// `initialize` handshake, and with --url falls back to the 2024-11-05 HTTP+SSE transport
    /// when the server refuses `initialize` with HTTP 400, 404 or 405. `2024-11-05` asks for
    /// that version, with --url over HTTP+SSE straight away.
    #[arg(long, value_enum, default_value_t = Protocol::Auto)]
    protocol: Protocol,
    /// Seconds the whole command may take, the server's start included (for `watch`: until
    /// it is watching, then for each read); past it the command ends naming the step it
    /// was waiting for.
    #[arg(long, value_name = "SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: u64,
    /// The largest message taken from the server, in MiB: a stdio line, an HTTP answer or
    /// an SSE event. Past it the client stops reading instead of holding it all.
    #[arg(long, value_name = "MIB", default_value_t = 512,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_message_mib: u64,
    /// Print every JSON-RPC message sent and received on stderr (`->`, `<-`), and each HTTP
    /// request's method, URL and headers, with header values that may be credentials and a
    /// URL's user information and query masked.
    #[arg(long, short = 'v')]
    verbose: bool,
    /// A stdio server to start: everything after `--`, e.g. `-- mcp-resources serve ./docs`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

impl Connect {
    /// Which server this reaches, for a record kept between runs (`skills sync`'s state
    /// file): `url:` and the URL without its user information, query or fragment (where
    /// credentials may be), `server:` and the name, or `command:`, the program's name and a
    /// digest of the command line.
    pub(crate) fn identity(&self) -> String {
        if let Some(url) = &self.url {
            let url = url.split(['?', '#']).next().unwrap_or_default();
            let url = match url.split_once("://") {
                Some((scheme, rest)) => {
                    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                    let host = authority.rsplit('@').next().unwrap_or(authority);
                    format!("{scheme}://{host}{path}")
                }
                None => url.to_owned(),
            };
            return format!("url:{url}");
        }
        if let Some(name) = &self.server {
            return format!("server:{name}");
        }
        // A command line may hold a secret (a password argument): the program's name and a
        // digest of the whole line tell two servers apart without keeping it.
        let words: Vec<String> = self
            .command
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        let program = words
            .first()
            .map(|p| p.rsplit('/').next().unwrap_or(p).to_owned())
            .unwrap_or_default();
        let digest = rmcp::model::sha256_digest(words.join("\0").as_bytes());
        format!("command:{program} {digest}")
    }
}

/// `--protocol`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// 2026-07-28 when the server offers it, else `initialize`; with a URL, HTTP+SSE when
    /// Streamable HTTP is refused.
    Auto,
    /// `initialize` (asking for 2025-11-25, taking the version the server answers); with a
    /// URL, Streamable HTTP.
    Legacy,
    /// 2026-07-28 only.
    #[value(name = "2026-07-28")]
    Modern,
    /// `initialize` asking for 2024-11-05; with a URL, over that era's HTTP+SSE transport.
    #[value(name = "2024-11-05")]
    HttpSse,
}

/// Which era the session speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Era {
    /// `initialize` was answered with this version.
    Legacy(String),
    /// 2026-07-28: stateless, `_meta` on every request.
    Modern,
}

impl Era {
    /// The protocol version this era's requests announce.
    pub(crate) fn version(&self) -> &str {
        match self {
            Era::Modern => MODERN,
            Era::Legacy(v) => v,
        }
    }
}

/// A connected, initialized session with one server.
pub(crate) struct Session {
    transport: Transport,
    era: Era,
    /// `capabilities` from `server/discover` or `initialize`.
    capabilities: Value,
    /// `serverInfo` from `server/discover` or `initialize`.
    server_info: Value,
    /// `instructions` from `server/discover` or `initialize`, when the server gave any.
    instructions: Option<String>,
    next_id: AtomicU64,
    timeout: Duration,
    /// When the command must be done by (`--timeout` from its start), until
    /// [`Session::end_deadline`]; after it each request gets `timeout` of its own.
    deadline: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Session {
    /// Reach the server, agree on an era, and return the session with the channel on which
    /// notifications (and the connection's end) arrive.
    pub(crate) async fn connect(
        c: &Connect,
    ) -> anyhow::Result<(Self, mpsc::UnboundedReceiver<Inbound>)> {
        let started = tokio::time::Instant::now();
        if c.verbose {
            transport::set_verbose();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let max = usize::try_from(c.max_message_mib << 20).unwrap_or(usize::MAX);
        let mut sse_entry = false;
        let transport = match (&c.url, c.command.is_empty()) {
            _ if c.server.is_some() => {
                let name = c.server.as_deref().unwrap_or_default();
                let entry = hosts::find(name, c.servers.as_deref(), c.trust_workspace)?;
                sse_entry = entry.sse;
                match &entry.url {
                    Some(url) => {
                        let mut headers = entry.headers.clone();
                        headers.extend(c.headers.iter().cloned());
                        Transport::Http(Http::new(url, parse_headers(&headers)?, tx, max)?)
                    }
                    None => Transport::Stdio(Stdio::spawn(&entry.command, &entry.env, tx, max)?),
                }
            }
            (Some(url), _) => Transport::Http(Http::new(
                url,
                parse_headers(&c.headers).map_err(usage)?,
                tx,
                max,
            )?),
            (None, false) => Transport::Stdio(Stdio::spawn(&c.command, &[], tx, max)?),
            (None, true) => {
                return Err(UsageError(
                    "no server given: use --url URL for Streamable HTTP, -- COMMAND ARGS... to start one over stdio, or --server NAME for one from a config file".to_owned(),
                ).into());
            }
        };
        let mut session = Self {
            transport,
            era: Era::Modern,
            capabilities: Value::Null,
            server_info: Value::Null,
            instructions: None,
            next_id: AtomicU64::new(1),
            timeout: Duration::from_secs(c.timeout),
            deadline: std::sync::Mutex::new(Some(started + Duration::from_secs(c.timeout))),
        };
        match session.start(c.protocol, sse_entry).await {
            Ok(()) => Ok((session, rx)),
            Err(e) => {
                let grace = session.close_grace();
                session.transport.close(grace).await;
                Err(e)
            }
        }
    }

    /// Agree on an era (and for a URL, the transport); `sse_entry` says a config entry named
    /// its URL an HTTP+SSE stream (`"type": "sse"`).
    async fn start(&mut self, protocol: Protocol, sse_entry: bool) -> anyhow::Result<()> {
        if protocol == Protocol::HttpSse {
            if matches!(self.transport, Transport::Http(_)) {
                self.open_http_sse(&format!("--protocol {HTTP_SSE}: the HTTP+SSE transport"))
                    .await?;
            }
            return self.initialize(HTTP_SSE).await;
        }
        // The entry says what the URL is: no Streamable HTTP attempt first, and `initialize`
        // for the newest version, which servers on this transport may well speak.
        if sse_entry && matches!(protocol, Protocol::Auto | Protocol::Legacy) {
            self.open_http_sse("the entry's type is sse: the 2024-11-05 HTTP+SSE transport")
                .await?;
            return self.initialize(LEGACY).await;
        }
        if protocol != Protocol::Legacy {
            let mut answer = self.discover().await;
            // A server may refuse a first request and name 2026-07-28 among the versions it
            // speaks (the conformance suite's request-metadata does): asking once more, with
            // a version it lists, is the retry the refusal invites.
            if let Err(e) = &answer
                && supported_versions(e).is_some_and(|s| newest_common(&s) == Some(MODERN))
            {
                answer = self.discover().await;
            }
            // A server that does not speak 2026-07-28 may say which versions it does
            // (-32022, `data.supported`): the newest both speak is the one to use.
            if let Err(e) = &answer
                && let Some(supported) = supported_versions(e)
            {
                let shown = Value::Array(supported.clone());
                return match newest_common(&supported) {
                    Some(v) if v == MODERN => Err(anyhow::anyhow!(
                        "the server refused {MODERN} although it lists it among {shown}"
                    )),
                    Some(v) if protocol != Protocol::Modern => self.initialize(v).await,
                    Some(_) => bail!(
                        "the server does not speak {MODERN} (it speaks {shown}); try --protocol legacy"
                    ),
                    None => bail!(
                        "the server speaks none of the protocol versions this client does (it speaks {shown}; this client {})",
                        Value::from(SPOKEN.to_vec())
                    ),
                };
            }
            match answer {
                Ok(result) => {
                    let offered = result
                        .get("supportedVersions")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    if offered.iter().any(|v| v.as_str() == Some(MODERN)) {
                        self.capabilities = result.get("capabilities").cloned().unwrap_or_default();
                        // 2026-07-28 servers name themselves in `_meta` (some also at the top).
                        self.server_info = result
                            .get("serverInfo")
                            .or_else(|| {
                                result.pointer("/_meta/io.modelcontextprotocol~1serverInfo")
                            })
                            .cloned()
                            .unwrap_or_default();
                        self.instructions = instructions_of(&result);
                        return Ok(());
                    }
                    if protocol == Protocol::Modern {
                        bail!(
                            "the server does not speak {MODERN} (it offers {}); try --protocol legacy",
                            Value::Array(offered)
                        );
                    }
                }
                // A legacy server refuses the unknown method (or, over HTTP, the request
                // without a session): that refusal is what `auto` falls back on. Anything
                // else (unreachable, exited, timed out) is the answer.
                Err(e)
                    if protocol == Protocol::Auto
                        && (e.downcast_ref::<RpcError>().is_some()
                            || e.downcast_ref::<HttpStatus>().is_some_and(|s| {
                                matches!(s.status.as_u16(), 400 | 404 | 405 | 406 | 415)
                            })) => {}
                Err(e) if protocol == Protocol::Modern => {
                    return Err(e.context(format!("the server does not speak {MODERN}")));
                }
                Err(e) => return Err(e),
            }
        }
        match self.initialize(LEGACY).await {
            // A 2024-11-05 server has no Streamable HTTP endpoint: the URL is its event
            // stream, and a POST there is refused with 400, 404 or 405 (the spec's test for
            // falling back). Refused credentials or a failing server are answers, not that.
            Err(e)
                if protocol == Protocol::Auto && matches!(self.transport, Transport::Http(_)) =>
            {
                let refused = e
                    .chain()
                    .find_map(|c| c.downcast_ref::<HttpStatus>())
                    .filter(|s| matches!(s.status.as_u16(), 400 | 404 | 405))
                    .map(|s| s.status);
                let Some(status) = refused else {
                    return Err(e);
                };
                let why = format!(
                    "the server refused initialize over Streamable HTTP (HTTP {status}): falling back to the 2024-11-05 HTTP+SSE transport"
                );
                if let Err(sse) = self.open_http_sse(&why).await {
                    if sse.is::<TimedOut>() {
                        return Err(sse);
                    }
                    // A mistyped path is refused both ways: both refusals are the answer.
                    return Err(sse.context(format!(
                        "the server speaks neither Streamable HTTP (it refused initialize with HTTP {status}) nor HTTP+SSE at this URL"
                    )));
                }
                self.initialize(LEGACY).await
            }
            other => other,
        }
    }

    /// Replace Streamable HTTP with the 2024-11-05 HTTP+SSE transport at the same URL, within
    /// the command's `--timeout`; `why` starts the `--verbose` line that says so.
    async fn open_http_sse(&mut self, why: &str) -> anyhow::Result<()> {
        let Transport::Http(h) = &self.transport else {
            return Ok(());
        };
        transport::note(&format!("{why}, GET {}", h.shown()));
        let deadline = *mcpr_core::sync::lock(&self.deadline);
        let connect = LegacySse::connect(h);
        let sse = match deadline {
            Some(at) => tokio::time::timeout_at(at, connect).await.map_err(|_| {
                TimedOut(format!(
                    "the command did not finish within {}s (--timeout): no endpoint event on the HTTP+SSE stream yet",
                    self.timeout.as_secs()
                ))
            })??,
            None => connect.await?,
        };
        self.transport = Transport::Sse(sse);
        Ok(())
    }

    async fn discover(&mut self) -> anyhow::Result<Value> {
        if let Transport::Http(h) = &self.transport {
            h.set_era(Era::Modern);
        }
        self.era = Era::Modern;
        self.request("server/discover", json!({})).await
    }

    /// The legacy handshake, asking for `version`.
    async fn initialize(&mut self, version: &str) -> anyhow::Result<()> {
        self.era = Era::Legacy(version.to_owned());
        if let Transport::Http(h) = &self.transport {
            // Until `initialize` is answered there is no version to announce in headers; a
            // discover attempt's are taken back.
            h.set_era(Era::Legacy(version.to_owned()));
        }
        let result = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": client_info(),
                }),
            )
            .await
            .context("the server refused the initialize handshake")?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .context("the server's initialize answer has no protocolVersion")?
            .to_owned();
        if let Transport::Http(h) = &self.transport {
            h.set_era(Era::Legacy(version.clone()));
        }
        self.capabilities = result.get("capabilities").cloned().unwrap_or_default();
        self.server_info = result.get("serverInfo").cloned().unwrap_or_default();
        self.instructions = instructions_of(&result);
        self.era = Era::Legacy(version);
        self.transport
            .notify(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
    }

    /// The era this session speaks.
    pub(crate) fn era(&self) -> &Era {
        &self.era
    }

    /// `capabilities` as the server declared them.
    pub(crate) fn capabilities(&self) -> &Value {
        &self.capabilities
    }

    /// `serverInfo` as the server sent it.
    pub(crate) fn server_info(&self) -> &Value {
        &self.server_info
    }

    /// The server's `instructions` (how to use it, for a model), when it gave any.
    pub(crate) fn instructions(&self) -> Option<&str> {
        self.instructions.as_deref()
    }

    /// The server's `capabilities.resources.<flag>`.
    pub(crate) fn resources_capability(&self, flag: &str) -> bool {
        self.capabilities
            .get("resources")
            .and_then(|r| r.get(flag))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// Whether the server declared `capability` at all (e.g. `completions`).
    pub(crate) fn has_capability(&self, capability: &str) -> bool {
        self.capabilities.get(capability).is_some()
    }

    /// Send `method` and return its `result`, within the session's timeout.
    pub(crate) async fn request(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        let raw = self.request_raw(method, params, Some(self.timeout)).await?;
        serde_json::from_str(raw.get())
            .with_context(|| format!("the server's answer to {method} is not valid JSON"))
    }

    /// Send `method` and return its `result` as the server wrote it; a `timeout` of `None`
    /// waits as long as it takes (a listen).
    pub(crate) async fn request_raw(
        &self,
        method: &str,
        params: Value,
        timeout: Option<Duration>,
    ) -> anyhow::Result<Box<RawValue>> {
        self.request_raw_with_id(self.new_request_id(), method, params, timeout)
            .await
    }

    /// [`Self::request`] for an answer known to take at most `max` bytes: the transport stops
    /// reading past them (with a [`transport::AnswerTooLarge`] error) instead of holding up
    /// to `--max-message-mib` first.
    pub(crate) async fn request_within(
        &self,
        method: &str,
        params: Value,
        max: usize,
    ) -> anyhow::Result<Value> {
        let raw = self
            .exchange(
                self.new_request_id(),
                method,
                params,
                Some(self.timeout),
                Some(max),
            )
            .await?;
        serde_json::from_str(raw.get())
            .with_context(|| format!("the server's answer to {method} is not valid JSON"))
    }

    /// [`Self::request_raw`] with an id from [`Self::new_request_id`], for a request that may
    /// have to be cancelled by id later.
    pub(crate) async fn request_raw_with_id(
        &self,
        id: u64,
        method: &str,
        params: Value,
        timeout: Option<Duration>,
    ) -> anyhow::Result<Box<RawValue>> {
        self.exchange(id, method, params, timeout, None).await
    }

    async fn exchange(
        &self,
        id: u64,
        method: &str,
        mut params: Value,
        timeout: Option<Duration>,
        max: Option<usize>,
    ) -> anyhow::Result<Box<RawValue>> {
        if self.era == Era::Modern {
            let obj = params.as_object_mut().expect("params are an object");
            obj.insert("_meta".to_owned(), modern_meta());
        }
        let name = match method {
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                params.get("uri").and_then(Value::as_str).map(str::to_owned)
            }
            "tools/call" | "prompts/get" => params
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_owned),
            _ => None,
        };
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let exchange = self.transport.request(Outgoing {
            id,
            method,
            message,
            name: name.as_deref(),
            max,
        });
        let Some(t) = timeout else {
            return exchange.await;
        };
        let deadline = *mcpr_core::sync::lock(&self.deadline);
        match deadline {
            Some(at) => tokio::time::timeout_at(at, exchange).await.map_err(|_| {
                TimedOut(format!(
                    "the command did not finish within {}s (--timeout): no answer to {method} yet",
                    self.timeout.as_secs()
                ))
            })?,
            None => tokio::time::timeout(t, exchange).await.map_err(|_| {
                TimedOut(format!(
                    "the server did not answer {method} within {}s (--timeout)",
                    t.as_secs()
                ))
            })?,
        }
    }

    /// The per-request timeout, for commands that pass it on.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// From now on each request has `--timeout` of its own instead of sharing the command's:
    /// a watch that is watching runs until interrupted.
    pub(crate) fn end_deadline(&self) {
        *mcpr_core::sync::lock(&self.deadline) = None;
    }

    /// For the legacy era over HTTP: open the stream notifications arrive on. Over stdio they
    /// share stdout with answers, and over HTTP+SSE the one stream carries both, so there is
    /// nothing to open.
    pub(crate) async fn open_notification_stream(&self) -> anyhow::Result<()> {
        match &self.transport {
            Transport::Http(h) if h.has_session() => h.open_notification_stream().await,
            Transport::Http(_) => {
                bail!("the server gave no session id, so it has no stream to send notifications on")
            }
            Transport::Stdio(_) | Transport::Sse(_) => Ok(()),
        }
    }

    /// Whether the session runs over Streamable HTTP (where a stream can drop and be opened
    /// again; an HTTP+SSE session ends with its stream).
    pub(crate) fn is_http(&self) -> bool {
        matches!(self.transport, Transport::Http(_))
    }

    /// Cancel a request in flight (a 2026-07-28 listen over stdio ends this way).
    pub(crate) async fn cancel(&self, id: u64) {
        let mut params = json!({"requestId": id, "reason": "the user stopped watching"});
        if self.era == Era::Modern {
            params["_meta"] = modern_meta();
        }
        let _ = self
            .transport
            .notify(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}),
            )
            .await;
    }

    /// A request id no other request of this session has.
    pub(crate) fn new_request_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// End the session (stdin closed or the HTTP session deleted).
    pub(crate) async fn close(self) {
        let grace = self.close_grace();
        self.transport.close(grace).await;
    }

    /// How long closing may wait for the server to leave on its own: [`CLOSE_GRACE`], but
    /// never past the command's `--timeout` (a server that ignores the end of its input is
    /// then killed at once rather than adding its grace to the timeout).
    fn close_grace(&self) -> Duration {
        match *mcpr_core::sync::lock(&self.deadline) {
            Some(at) => CLOSE_GRACE.min(at.saturating_duration_since(tokio::time::Instant::now())),
            None => CLOSE_GRACE,
        }
    }
}

/// A handshake answer's `instructions`, when it is a string that is not blank.
fn instructions_of(result: &Value) -> Option<String> {
    result
        .get("instructions")
        .and_then(Value::as_str)
        .filter(|i| !i.trim().is_empty())
        .map(str::to_owned)
}

fn client_info() -> Value {
    json!({"name": "mcp-resources", "version": env!("CARGO_PKG_VERSION")})
}

/// The 2026-07-28 per-request `_meta`: version, capabilities (none) and who is asking.
fn modern_meta() -> Value {
    let mut meta = Map::new();
    meta.insert(
        "io.modelcontextprotocol/protocolVersion".into(),
        MODERN.into(),
    );
    meta.insert(
        "io.modelcontextprotocol/clientCapabilities".into(),
        json!({}),
    );
    meta.insert("io.modelcontextprotocol/clientInfo".into(), client_info());
    Value::Object(meta)
}

/// `--header "Name: value"` into a header map; a malformed one is an error naming the header
/// (never its value, which may be a secret).
fn parse_headers(headers: &[String]) -> anyhow::Result<reqwest::header::HeaderMap> {
    let mut map = reqwest::header::HeaderMap::new();
    for h in headers {
        let (name, value) = h
            .split_once(':')
            .with_context(|| format!("--header {:?}: expected \"Name: value\"", header_name(h)))?;
        let name = reqwest::header::HeaderName::from_bytes(name.trim().as_bytes())
            .with_context(|| format!("--header: {:?} is not a valid header name", name.trim()))?;
        let mut value =
            reqwest::header::HeaderValue::from_str(value.trim()).with_context(|| {
                format!("--header {name}: the value has characters a header cannot carry")
            })?;
        value.set_sensitive(true);
        map.append(name, value);
    }
    Ok(map)
}

/// What is left of a `--header` argument for an error message: its name part only.
fn header_name(h: &str) -> &str {
    h.split([':', ' ', '=']).next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_version_both_speak_is_chosen() {
        let v = |list: &[&str]| list.iter().map(|s| json!(s)).collect::<Vec<_>>();
        assert_eq!(
            newest_common(&v(&["2024-11-05", "2025-06-18", "2099-01-01"])),
            Some("2025-06-18")
        );
        assert_eq!(
            newest_common(&v(&["2026-07-28", "2025-11-25"])),
            Some(MODERN)
        );
        assert_eq!(newest_common(&v(&["2099-01-01"])), None);
    }

    #[test]
    fn headers_parse_and_errors_never_show_values() {
        let map = parse_headers(&["Authorization: Bearer s3cret".into(), "X-A:b".into()])
            .expect("valid headers");
        assert_eq!(map["authorization"], "Bearer s3cret");
        assert_eq!(map["x-a"], "b");
        let e = parse_headers(&["Authorization Bearer s3cret".into()]).unwrap_err();
        assert!(!format!("{e:#}").contains("s3cret"), "{e:#}");
        let e = parse_headers(&["Authorization: Bearer s3cret\u{1}".into()]).unwrap_err();
        assert!(!format!("{e:#}").contains("s3cret"), "{e:#}");
    }
}
