//! Streamable HTTP: every request a `POST` whose answer is JSON or an event stream, the
//! legacy era's session and its `GET` notification stream, and resuming a dropped stream.
//!
//! A stream that breaks or ends before what it carries is resumed where the era allows: in the
//! legacy era (SEP-1699) by waiting the server's `retry:` and reconnecting with `GET` and
//! `Last-Event-ID`, so nothing is lost; in 2026-07-28, which has no resumption, the request
//! fails with [`StreamDropped`] and its caller decides whether to send it again.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use futures::StreamExt as _;
use serde_json::Value;
use tokio::sync::mpsc;

use mcpr_core::sync::lock;
use mcpr_core::{redact_url, redact_urls_in};

use super::sse::{EventStream, Resume, Stop};
use super::{
    AnswerTooLarge, ConnectionEnded, Inbound, Incoming, Outgoing, Reply, RpcError,
    answer_server_request, reply_of, snippet,
};
use crate::client::Era;

/// The wait before reconnecting when the server named none with `retry:`.
pub(crate) const DEFAULT_RETRY: Duration = Duration::from_secs(1);
/// Reconnections in a row that bring no new event before a stream is given up: with a
/// server's usual `retry:` of a few seconds, a server that is gone is given up within about
/// ten, and a proxy or a replica restarting is waited for.
pub(crate) const RECONNECTS: u32 = 3;

/// An event stream that stopped before the answer to a request and could not be resumed
/// (2026-07-28 has no `Last-Event-ID`; a legacy server gave no event id or no session).
#[derive(Debug)]
pub(crate) struct StreamDropped {
    pub method: String,
    pub why: String,
    /// The server's last `retry:`, the wait it asked for before a new attempt.
    pub retry: Option<Duration>,
}

impl fmt::Display for StreamDropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the server's event stream for {} {}",
            self.method, self.why
        )
    }
}

impl std::error::Error for StreamDropped {}

/// An HTTP answer that was neither a JSON-RPC message nor a stream of them.
#[derive(Debug)]
pub(crate) struct HttpStatus {
    pub status: reqwest::StatusCode,
    pub detail: String,
    /// Whether the request carried an `Authorization` header (from `--header`): a 401 then
    /// means the token was refused, not that one is missing.
    pub sent_credentials: bool,
}

impl fmt::Display for HttpStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.status == reqwest::StatusCode::UNAUTHORIZED {
            let why = if self.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", self.detail)
            };
            return if self.sent_credentials {
                write!(
                    f,
                    "the server refused the token given with --header (HTTP 401{why})"
                )
            } else {
                write!(
                    f,
                    "the server requires authorization (HTTP 401{why}); pass a token with --header \"Authorization: Bearer TOKEN\""
                )
            };
        }
        write!(f, "the server answered HTTP {}", self.status)?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for HttpStatus {}

/// The largest non-JSON-RPC HTTP body read for an error message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// A Streamable HTTP server. Cloning shares the connection pool and the session.
#[derive(Clone)]
pub(crate) struct Http {
    inner: Arc<HttpInner>,
}

struct HttpInner {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The URL for messages: user information masked, query dropped ([`redact_url`]).
    shown: String,
    headers: reqwest::header::HeaderMap,
    state: Mutex<HttpState>,
    inbound: mpsc::UnboundedSender<Inbound>,
    /// The largest JSON body or SSE event taken.
    max_message: usize,
}

#[derive(Default)]
struct HttpState {
    /// `Mcp-Session-Id` of a legacy session.
    session: Option<String>,
    /// The era once known: its `MCP-Protocol-Version`, and whether a dropped stream can be
    /// picked up again (the 2026-07-28 era is stateless: nothing to resume from).
    era: Option<Era>,
}

impl Http {
    /// A client for `url`, sending `headers` (from `--header`) on every request and taking
    /// answers and events of at most `max_message` bytes (`--max-message-mib`).
    pub(crate) fn new(
        url: &str,
        headers: reqwest::header::HeaderMap,
        inbound: mpsc::UnboundedSender<Inbound>,
        max_message: usize,
    ) -> anyhow::Result<Self> {
        // The URL may carry a password or a `?token=`: every message shows it redacted.
        let shown = redact_url(url);
        let url = reqwest::Url::parse(url).with_context(|| format!("--url {shown}: not a URL"))?;
        anyhow::ensure!(
            matches!(url.scheme(), "http" | "https"),
            "--url {shown}: only http:// and https:// URLs are supported"
        );
        // rustls needs a process-wide crypto provider; ring is the one the workspace builds.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // A redirect would replay the request, headers and all, somewhere else; the user
            // sees the status and the location instead.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("mcp-resources/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Self {
            inner: Arc::new(HttpInner {
                client,
                url,
                shown,
                headers,
                max_message,
                state: Mutex::default(),
                inbound,
            }),
        })
    }

    /// Speak `era` from now on: its version goes in `MCP-Protocol-Version`.
    pub(crate) fn set_era(&self, era: Era) {
        lock(&self.inner.state).era = Some(era);
    }

    /// The connection pool, shared with the 2024-11-05 HTTP+SSE transport a fallback opens.
    pub(super) fn client(&self) -> &reqwest::Client {
        &self.inner.client
    }

    /// The URL given (`--url` or an entry's `url`).
    pub(super) fn url(&self) -> &reqwest::Url {
        &self.inner.url
    }

    /// [`Self::url`] for messages: user information masked, query dropped.
    pub(crate) fn shown(&self) -> &str {
        &self.inner.shown
    }

    /// The `--header` (and entry) headers, sent on every request.
    pub(super) fn headers(&self) -> &reqwest::header::HeaderMap {
        &self.inner.headers
    }

    /// The channel notifications and the connection's end go to.
    pub(super) fn inbound(&self) -> &mpsc::UnboundedSender<Inbound> {
        &self.inner.inbound
    }

    /// `--max-message-mib`, in bytes.
    pub(super) fn max_message(&self) -> usize {
        self.inner.max_message
    }

    /// Whether a legacy session id was handed out (the server keeps per-session state).
    pub(crate) fn has_session(&self) -> bool {
        lock(&self.inner.state).session.is_some()
    }

    fn with_state_headers(
        &self,
        mut rb: reqwest::RequestBuilder,
        method: Option<&str>,
        name: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let s = lock(&self.inner.state);
        if let Some(session) = &s.session {
            rb = rb.header("Mcp-Session-Id", session);
        }
        if let Some(era) = &s.era {
            rb = rb.header("MCP-Protocol-Version", era.version());
        }
        // SEP-2243's routing headers go on every POST in either era, `initialize` and
        // notifications included, as its conformance scenario (`http-standard-headers`)
        // checks: a legacy server ignores headers it does not know, and a proxy or gateway
        // in front of one can route on them too.
        if let Some(m) = method {
            rb = rb.header("Mcp-Method", m);
        }
        if let Some(n) = name {
            rb = rb.header("Mcp-Name", header_safe(n));
        }
        rb
    }

    async fn post(
        &self,
        body: &Value,
        method: Option<&str>,
        name: Option<&str>,
    ) -> anyhow::Result<reqwest::Response> {
        let rb = self
            .inner
            .client
            .post(self.inner.url.clone())
            .headers(self.inner.headers.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            );
        let rb = self.with_state_headers(rb, method, name);
        let body = serde_json::to_vec(body).context("cannot encode the request")?;
        trace_http(&rb);
        let resp = rb
            .body(body)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        if let Some(id) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            lock(&self.inner.state).session = Some(id.to_owned());
        }
        Ok(resp)
    }

    pub(super) fn unreachable(&self, e: reqwest::Error) -> anyhow::Error {
        let mut msg = format!("cannot reach the server at {}", self.inner.shown);
        // reqwest's own message is generic ("error sending request"); the cause says what
        // happened (connection refused, DNS, TLS).
        let mut source = std::error::Error::source(&e);
        let mut last = None;
        while let Some(s) = source {
            last = Some(s.to_string());
            source = s.source();
        }
        msg.push_str(": ");
        // reqwest's own message names the URL as given, query and all.
        msg.push_str(&redact_urls_in(
            &last.unwrap_or_else(|| e.without_url().to_string()),
        ));
        ConnectionEnded::new(msg).into()
    }

    pub(super) async fn request(&self, req: Outgoing<'_>) -> Reply {
        let resp = self.post(&req.message, Some(req.method), req.name).await?;
        let status = resp.status();
        if !status.is_success() {
            return Err(self.failed(resp).await);
        }
        let limit = self.limit(&req);
        if is_event_stream(&resp) {
            return self.answer_on_stream(resp, &req).await;
        }
        let mut body = resp.bytes_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                anyhow!(
                    "the answer to {} broke off: {}",
                    req.method,
                    e.without_url()
                )
            })?;
            if bytes.len() + chunk.len() > limit {
                return Err(self.too_large(&req, limit));
            }
            bytes.extend_from_slice(&chunk);
        }
        if bytes.is_empty() {
            bail!(
                "the server answered {} with HTTP {status} and no JSON-RPC response",
                req.method
            );
        }
        super::trace("<-", &String::from_utf8_lossy(&bytes));
        let msg: Incoming = serde_json::from_slice(&bytes).map_err(|e| {
            anyhow!(
                "the answer to {} is not JSON ({e}): {}",
                req.method,
                snippet(&String::from_utf8_lossy(&bytes[..bytes.len().min(200)]))
            )
        })?;
        if msg.id.as_ref().and_then(Value::as_u64) != Some(req.id) {
            bail!(
                "the server answered {} with another request's id",
                req.method
            );
        }
        reply_of(msg)
    }

    /// The most bytes the answer to `req` (a JSON body, or one event) may take.
    fn limit(&self, req: &Outgoing<'_>) -> usize {
        req.max
            .map_or(self.inner.max_message, |m| m.min(self.inner.max_message))
    }

    /// The error for an answer to `req` past `limit`: the request's own bound, or
    /// `--max-message-mib`.
    fn too_large(&self, req: &Outgoing<'_>, limit: usize) -> anyhow::Error {
        if limit < self.inner.max_message {
            return AnswerTooLarge {
                method: req.method.to_owned(),
                limit,
            }
            .into();
        }
        anyhow!(
            "the answer to {} is over {} MiB; stopped reading (--max-message-mib raises the limit)",
            req.method,
            self.inner.max_message >> 20
        )
    }

    /// The error for a non-2xx answer: its JSON-RPC error when the body has one, else the
    /// status and the start of the body.
    pub(super) async fn failed(&self, resp: reqwest::Response) -> anyhow::Error {
        let status = resp.status();
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        let mut stream = resp.bytes_stream();
        while let Some(Ok(chunk)) = stream.next().await {
            body.extend_from_slice(&chunk);
            if body.len() >= ERROR_BODY_LIMIT {
                break;
            }
        }
        // Refused credentials are about the connection, not the request: they must not pass
        // for a legacy server's "unknown method" when `auto` decides on an era.
        let auth = matches!(status.as_u16(), 401 | 403);
        let sent_credentials = self
            .inner
            .headers
            .contains_key(reqwest::header::AUTHORIZATION);
        if let Ok(msg) = serde_json::from_slice::<Value>(&body)
            && let Some(error) = msg.get("error")
        {
            let error = RpcError::from_value(error);
            if auth {
                return HttpStatus {
                    status,
                    detail: error.message,
                    sent_credentials,
                }
                .into();
            }
            return error.into();
        }
        let detail = match location {
            Some(l) if status.is_redirection() => format!("redirected to {}", redact_url(&l)),
            _ => snippet(&String::from_utf8_lossy(&body)),
        };
        HttpStatus {
            status,
            detail,
            sent_credentials,
        }
        .into()
    }

    /// Read the answer to `req` from an event stream, resuming it in the legacy era when it
    /// drops before the answer (SEP-1699 lets a server close a response's stream and have the
    /// client poll the rest with `GET` and `Last-Event-ID`).
    async fn answer_on_stream(&self, resp: reqwest::Response, req: &Outgoing<'_>) -> Reply {
        let mut resume = Resume::default();
        let limit = self.limit(req);
        let mut events = EventStream::new(resp, limit);
        let mut reconnects = 0;
        loop {
            let before = resume.last_id.clone();
            let why = match self
                .read_events(&mut events, Some(req.id), &mut resume)
                .await
            {
                Ok(reply) => return reply,
                Err(Stop::TooLarge(_)) if limit < self.inner.max_message => {
                    return Err(self.too_large(req, limit));
                }
                Err(Stop::Bad(why) | Stop::TooLarge(why)) => bail!(why),
                Err(Stop::Ended) => "ended without answering".to_owned(),
                Err(Stop::Broke(e)) => format!("broke off: {e}"),
            };
            if resume.last_id != before {
                reconnects = 0;
            }
            let dropped = StreamDropped {
                method: req.method.to_owned(),
                why,
                retry: resume.retry,
            };
            let Some(id) = resume.last_id.clone().filter(|_| self.resumable()) else {
                return Err(dropped.into());
            };
            if reconnects == RECONNECTS {
                return Err(dropped.into());
            }
            reconnects += 1;
            tokio::time::sleep(resume.retry.unwrap_or(DEFAULT_RETRY)).await;
            events = self.reconnect(Some(&id), limit).await?;
        }
    }

    /// Whether a dropped stream can be picked up again: a legacy session exists to `GET`.
    fn resumable(&self) -> bool {
        let s = lock(&self.inner.state);
        s.era != Some(Era::Modern) && s.session.is_some()
    }

    /// The legacy era's `GET` stream, from after event `last_id` when given, its events of at
    /// most `max` bytes.
    async fn reconnect(&self, last_id: Option<&str>, max: usize) -> anyhow::Result<EventStream> {
        let mut rb = self
            .inner
            .client
            .get(self.inner.url.clone())
            .headers(self.inner.headers.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(id) = last_id {
            rb = rb.header("Last-Event-ID", id);
        }
        let rb = self.with_state_headers(rb, None, None);
        let resp = rb.send().await.map_err(|e| self.unreachable(e))?;
        if resp.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            bail!("the server offers no stream for notifications (GET answered HTTP 405)");
        }
        if !resp.status().is_success() {
            return Err(self.failed(resp).await);
        }
        if !is_event_stream(&resp) {
            bail!("the server's notification stream is not text/event-stream");
        }
        Ok(EventStream::new(resp, max))
    }

    /// Read events: notifications to the inbound channel, requests from the server answered,
    /// until the response with id `want` (returned) or the stream stops (why).
    async fn read_events(
        &self,
        events: &mut EventStream,
        want: Option<u64>,
        resume: &mut Resume,
    ) -> Result<Reply, Stop> {
        loop {
            let data = events.next(resume).await?;
            // An event without data primes a resumable stream; nothing to do.
            if data.trim().is_empty() {
                continue;
            }
            super::trace("<-", &data);
            let Ok(msg) = serde_json::from_str::<Incoming>(&data) else {
                continue;
            };
            match (msg.method.as_deref(), msg.id.clone()) {
                (None, id) => {
                    if want.is_some() && id.as_ref().and_then(Value::as_u64) == want {
                        return Ok(reply_of(msg));
                    }
                }
                (Some(method), Some(id)) => {
                    let answer = answer_server_request(method, id);
                    if let Ok(resp) = self.post(&answer, None, None).await {
                        drop(resp);
                    }
                }
                (Some(_), None) => {
                    if let Ok(n) = serde_json::from_str::<Value>(&data) {
                        let _ = self.inner.inbound.send(Inbound::Notification(n));
                    }
                }
            }
        }
    }

    pub(super) async fn notify(&self, message: Value) -> anyhow::Result<()> {
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let resp = self.post(&message, method.as_deref(), None).await?;
        if !resp.status().is_success() {
            return Err(self.failed(resp).await);
        }
        Ok(())
    }

    /// Open the legacy era's standalone `GET` stream, on which a session's notifications
    /// arrive, and forward them until it ends. A stream that drops is reconnected after the
    /// server's `retry:` with `Last-Event-ID`, so the server replays what was missed; each
    /// drop is told on the inbound channel, and the end once reconnecting brings nothing.
    pub(crate) async fn open_notification_stream(&self) -> anyhow::Result<()> {
        let mut events = self.reconnect(None, self.inner.max_message).await?;
        let this = self.clone();
        tokio::spawn(async move {
            let mut resume = Resume::default();
            let reason = 'stream: loop {
                let why = match this.read_events(&mut events, None, &mut resume).await {
                    Ok(_) => continue,
                    Err(Stop::Bad(why) | Stop::TooLarge(why)) => break why,
                    Err(Stop::Ended) => "the server closed the notification stream".to_owned(),
                    Err(Stop::Broke(e)) => format!("the notification stream broke off: {e}"),
                };
                let mut last_error = why.clone();
                for attempt in 1..=RECONNECTS {
                    let wait = resume.retry.unwrap_or(DEFAULT_RETRY);
                    let from = match &resume.last_id {
                        Some(id) => format!("resuming after event {id}"),
                        None => "the server gave no event id, so notifications sent meanwhile may be missed".to_owned(),
                    };
                    let _ = this.inner.inbound.send(Inbound::Dropped(format!(
                        "{last_error}; reconnecting in {} ms ({from}; attempt {attempt} of {RECONNECTS})",
                        wait.as_millis()
                    )));
                    tokio::time::sleep(wait).await;
                    match this
                        .reconnect(resume.last_id.as_deref(), this.inner.max_message)
                        .await
                    {
                        Ok(fresh) => {
                            events = fresh;
                            continue 'stream;
                        }
                        // The session is gone: its subscriptions went with it.
                        Err(e)
                            if e.downcast_ref::<HttpStatus>()
                                .is_some_and(|s| matches!(s.status.as_u16(), 400 | 404)) =>
                        {
                            break 'stream format!("{e:#} (the session ended)");
                        }
                        Err(e) => last_error = format!("{e:#}"),
                    }
                }
                break format!("{why}; {RECONNECTS} reconnections failed, the last: {last_error}");
            };
            let _ = this
                .inner
                .inbound
                .send(Inbound::Ended(ConnectionEnded::new(reason)));
        });
        Ok(())
    }

    pub(super) async fn close(self, grace: Duration) {
        let session = lock(&self.inner.state).session.clone();
        if session.is_some() {
            let rb = self
                .inner
                .client
                .delete(self.inner.url.clone())
                .headers(self.inner.headers.clone());
            let rb = self.with_state_headers(rb, None, None);
            let _ = tokio::time::timeout(grace, rb.send()).await;
        }
    }
}

/// The `--verbose` line for an HTTP request: its method, its URL without user information or
/// query ([`mcpr_core::redact_url`]), and its headers, the values of any that may be a credential
/// (`--header` and entry values, which are all marked sensitive, and the session id, which is
/// one without authorization) shown as `***`.
pub(super) fn trace_http(rb: &reqwest::RequestBuilder) {
    let Some(req) = rb.try_clone().and_then(|b| b.build().ok()) else {
        return;
    };
    let headers: Vec<String> = req
        .headers()
        .iter()
        .map(|(name, value)| {
            let shown = if value.is_sensitive() || name.as_str() == "mcp-session-id" {
                "***".to_owned()
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            format!("{name}: {shown}")
        })
        .collect();
    super::trace(
        "->",
        &format!(
            "{} {} [{}]",
            req.method(),
            mcpr_core::redact_url(req.url().as_str()),
            headers.join(", ")
        ),
    );
}

pub(super) fn is_event_stream(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().starts_with("text/event-stream"))
}

/// A header value that survives HTTP: as is when plain visible ASCII, else wrapped as
/// `=?base64?…?=` (SEP-2243), which a 2026-07-28 server decodes before comparing with the body.
fn header_safe(value: &str) -> String {
    use base64::Engine as _;
    let needs_wrapping = value.starts_with([' ', '\t'])
        || value.ends_with([' ', '\t'])
        || value.chars().any(|c| !(' '..='~').contains(&c))
        || (value.starts_with("=?base64?") && value.ends_with("?="));
    if !needs_wrapping {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_outside_visible_ascii_are_base64_wrapped() {
        assert_eq!(header_safe("file:///a b.txt"), "file:///a b.txt");
        assert_eq!(header_safe("file:///é"), "=?base64?ZmlsZTovLy/DqQ==?=");
        assert_eq!(header_safe(" x"), "=?base64?IHg=?=");
    }
}
