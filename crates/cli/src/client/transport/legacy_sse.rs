//! The 2024-11-05 "HTTP with SSE" transport, which servers of that era still speak: one `GET`
//! opens an event stream whose first event, `endpoint`, names the URL to `POST` every client
//! message to; the server answers those `POST`s with 202 and sends its responses and
//! notifications as `message` events on the stream.
//!
//! Unlike Streamable HTTP, an answer never comes back on the `POST`: every request waits for
//! the event with its id, as over stdio, and the session lives exactly as long as the stream
//! (there is nothing to resume it from), so the stream's end ends the connection.

use std::sync::{Arc, Mutex};

use anyhow::{Context as _, anyhow, bail};
use serde_json::Value;
use tokio::sync::oneshot;

use mcpr_core::redact_url;
use mcpr_core::sync::lock;

use super::http::{Http, is_event_stream, trace_http};
use super::sse::{EventStream, Resume, Stop};
use super::{
    AnswerTooLarge, ConnectionEnded, Incoming, Outgoing, Pending, Reply, Waiter, dispatch, finish,
};

/// What the transport is called in messages, so that an error says which one failed.
pub(crate) const NAME: &str = "HTTP+SSE";

/// A session over the 2024-11-05 HTTP+SSE transport: the event stream read by a task, and the
/// endpoint messages are posted to.
pub(crate) struct LegacySse {
    /// The client, headers and error reading of the URL given, shared with Streamable HTTP.
    http: Http,
    /// Where messages are posted, from the `endpoint` event; same-origin as the stream.
    endpoint: reqwest::Url,
    pending: Pending,
    /// Why the stream ended, once it has.
    ended: Arc<Mutex<Option<ConnectionEnded>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for LegacySse {
    fn drop(&mut self) {
        // Dropping the stream is how the session ends for the server.
        self.reader.abort();
    }
}

impl LegacySse {
    /// Open the event stream at `http`'s URL (with its `--header`s), wait for the `endpoint`
    /// event, and read the stream from then on. The caller bounds the wait.
    pub(crate) async fn connect(http: &Http) -> anyhow::Result<Self> {
        let shown = http.shown().to_owned();
        let rb = http
            .client()
            .get(http.url().clone())
            .headers(http.headers().clone())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        trace_http(&rb);
        let resp = rb.send().await.map_err(|e| http.unreachable(e))?;
        if !resp.status().is_success() {
            let e = http.failed(resp).await;
            return Err(e.context(format!("the {NAME} event stream (GET {shown})")));
        }
        if !is_event_stream(&resp) {
            let ct = resp
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map_or_else(|| "no content type".to_owned(), super::snippet);
            return Err(ConnectionEnded::new(format!(
                "GET {shown} answered {ct}, not text/event-stream: the server does not speak the 2024-11-05 {NAME} transport there"
            ))
            .into());
        }
        let mut events = EventStream::new(resp, http.max_message());
        let mut resume = Resume::default();
        let endpoint = loop {
            let (event, data) = events.next_event(&mut resume).await.map_err(|stop| {
                let why = match stop {
                    Stop::Ended => "closed".to_owned(),
                    Stop::Broke(e) => format!("broke off ({e})"),
                    Stop::Bad(why) | Stop::TooLarge(why) => why,
                };
                ConnectionEnded::new(format!(
                    "the {NAME} event stream at {shown} {why} before its endpoint event"
                ))
            })?;
            if data.trim().is_empty() {
                continue;
            }
            if event.as_deref() != Some("endpoint") {
                bail!(
                    "the {NAME} event stream at {shown} began with a `{}` event, not the `endpoint` event the 2024-11-05 transport starts with",
                    super::snippet(event.as_deref().unwrap_or("message"))
                );
            }
            break endpoint_of(http.url(), &data)?;
        };
        // The endpoint's query is often the session id: shown without it, as every URL is.
        super::trace(
            "<-",
            &format!("event: endpoint {}", redact_url(endpoint.as_str())),
        );

        let pending = Pending::default();
        let ended: Arc<Mutex<Option<ConnectionEnded>>> = Arc::default();
        let reader = {
            let pending = pending.clone();
            let ended = ended.clone();
            let poster = Poster {
                http: http.clone(),
                endpoint: endpoint.clone(),
            };
            tokio::spawn(async move {
                let inbound = poster.http.inbound().clone();
                let reason = loop {
                    let data = match events.next_event(&mut resume).await {
                        // Only `message` events (the default type) carry JSON-RPC.
                        Ok((event, data)) if event.as_deref().is_none_or(|e| e == "message") => {
                            data
                        }
                        Ok(_) => continue,
                        Err(Stop::Ended) => {
                            break format!("the server closed the {NAME} event stream ({shown})");
                        }
                        Err(Stop::Broke(e)) => {
                            break format!("the {NAME} event stream ({shown}) broke off: {e}");
                        }
                        Err(Stop::Bad(why) | Stop::TooLarge(why)) => {
                            break format!("the {NAME} event stream ({shown}): {why}");
                        }
                    };
                    if data.trim().is_empty() {
                        continue;
                    }
                    let Ok(msg) = serde_json::from_str::<Incoming>(&data) else {
                        super::trace("<-", &data);
                        continue;
                    };
                    if let Some(answer) = dispatch(msg, &data, &pending, &inbound) {
                        let poster = poster.clone();
                        tokio::spawn(async move {
                            let _ = poster.post(&answer).await;
                        });
                    }
                };
                finish(&pending, &ended, &inbound, ConnectionEnded::new(reason));
            })
        };
        Ok(Self {
            http: http.clone(),
            endpoint,
            pending,
            ended,
            reader,
        })
    }

    fn poster(&self) -> Poster {
        Poster {
            http: self.http.clone(),
            endpoint: self.endpoint.clone(),
        }
    }

    pub(super) async fn request(&self, req: Outgoing<'_>) -> Reply {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(
            req.id,
            Waiter {
                tx,
                method: req.method.to_owned(),
                max: req.max,
            },
        );
        // The stream may have ended before the waiter was in: its end set `ended` first.
        if let Some(ended) = lock(&self.ended).clone() {
            lock(&self.pending).remove(&req.id);
            return Err(ended.into());
        }
        if let Err(e) = self.poster().post(&req.message).await {
            lock(&self.pending).remove(&req.id);
            return Err(e);
        }
        let result = match rx.await {
            Ok(reply) => reply?,
            Err(_) => return Err(self.ended_reason().into()),
        };
        // One stream carries every answer, so it is bounded by `--max-message-mib` only; a
        // request's own smaller bound is kept on the answer taken.
        if let Some(limit) = req.max
            && limit < self.http.max_message()
            && result.get().len() > limit
        {
            return Err(AnswerTooLarge {
                method: req.method.to_owned(),
                limit,
            }
            .into());
        }
        Ok(result)
    }

    pub(super) async fn notify(&self, message: Value) -> anyhow::Result<()> {
        if let Some(ended) = lock(&self.ended).clone() {
            return Err(ended.into());
        }
        self.poster().post(&message).await
    }

    fn ended_reason(&self) -> ConnectionEnded {
        lock(&self.ended)
            .clone()
            .unwrap_or_else(|| ConnectionEnded::new(format!("the {NAME} event stream ended")))
    }

    /// End the session: the stream is closed (there is no other way to end one).
    pub(super) fn close(self) {
        drop(self);
    }
}

/// What posts a message to the endpoint, for requests and for answers to the server's own.
#[derive(Clone)]
struct Poster {
    http: Http,
    endpoint: reqwest::Url,
}

impl Poster {
    /// `POST` one message; the server acknowledges it (202) and answers on the stream.
    async fn post(&self, message: &Value) -> anyhow::Result<()> {
        let body = serde_json::to_vec(message).context("cannot encode the message")?;
        let rb = self
            .http
            .client()
            .post(self.endpoint.clone())
            .headers(self.http.headers().clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        trace_http(&rb);
        let resp = rb
            .body(body)
            .send()
            .await
            .map_err(|e| self.http.unreachable(e))?;
        if !resp.status().is_success() {
            return Err(self.http.failed(resp).await);
        }
        Ok(())
    }
}

/// The URL an `endpoint` event names (relative to the stream's URL), refused unless it is of
/// the stream's own origin: every message is posted there with the `--header` values, which
/// are often credentials.
fn endpoint_of(stream: &reqwest::Url, data: &str) -> anyhow::Result<reqwest::Url> {
    let endpoint = stream.join(data.trim()).map_err(|e| {
        anyhow!(
            "the {NAME} endpoint event is not a URL ({e}): {}",
            super::snippet(data)
        )
    })?;
    if endpoint.origin() != stream.origin() {
        return Err(ConnectionEnded::new(format!(
            "the {NAME} endpoint event names {}, of another origin than the stream at {}: refused, since every message (and its --header values) would go there",
            redact_url(endpoint.as_str()),
            redact_url(stream.as_str())
        ))
        .into());
    }
    Ok(endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_resolve_against_the_stream_and_stay_on_its_origin() {
        let stream = reqwest::Url::parse("http://127.0.0.1:8080/mcp/sse?k=1").unwrap();
        let e = endpoint_of(&stream, "/messages/?session_id=ab\n").unwrap();
        assert_eq!(e.as_str(), "http://127.0.0.1:8080/messages/?session_id=ab");
        let e = endpoint_of(&stream, "message?sessionId=1").unwrap();
        assert_eq!(e.as_str(), "http://127.0.0.1:8080/mcp/message?sessionId=1");
        let e = endpoint_of(&stream, "http://127.0.0.1:8080/x").unwrap();
        assert_eq!(e.path(), "/x");
        for other in [
            "http://127.0.0.1:8081/x",
            "https://127.0.0.1:8080/x",
            "http://localhost:8080/x",
            "//evil.example/x?token=s3cret",
        ] {
            let err = endpoint_of(&stream, other).unwrap_err();
            let text = format!("{err:#}");
            assert!(err.is::<ConnectionEnded>(), "{text}");
            assert!(text.contains("another origin"), "{text}");
            assert!(!text.contains("s3cret"), "{text}");
        }
    }
}
