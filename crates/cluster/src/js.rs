//! Raw JetStream API requests, shared by the watcher lease and the session store: async-nats
//! 0.51's typed JetStream API cannot parse the replies of nats-server 2.9, so both speak
//! `$JS.API.*` and stream-captured publishes directly, through these few functions.
//!
//! `tests/upstream_workarounds.rs` shows it against a real 2.9 server (creating a key-value
//! bucket fails with "did not match any variant of untagged enum Response"); once that test
//! fails, async-nats reads those replies and this layer can give way to its typed API.

use std::time::Duration;

use serde_json::Value;

/// JetStream's error code for "no message found".
pub(crate) const NO_MESSAGE: u64 = 10037;
/// JetStream's error code for "stream not found".
const STREAM_NOT_FOUND: u64 = 10059;
/// JetStream's error code for a failed expected-last-sequence check.
const WRONG_LAST_SEQUENCE: u64 = 10071;

/// Why a JetStream request failed.
#[derive(Debug)]
pub(crate) enum JsError {
    /// NATS did not answer in time, the connection failed, or the reply was not JSON.
    Unreachable(String),
    /// Nothing answers on the subject: for a publish, no stream captures it (NATS lost it).
    NoResponders,
    /// JetStream answered with an error.
    Api {
        /// Its `err_code`.
        code: u64,
        /// Its `description`.
        description: String,
    },
}

impl std::fmt::Display for JsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(e) => f.write_str(e),
            Self::NoResponders => f.write_str("no responders: no stream captures the subject"),
            Self::Api { code, description } => write!(f, "{description} (JetStream {code})"),
        }
    }
}

/// Whether `e` says the stream asked about does not exist: JetStream's "stream not found",
/// or, for a publish, no responders (no stream captures its subject).
pub(crate) fn stream_missing(e: &JsError) -> bool {
    matches!(
        e,
        JsError::NoResponders
            | JsError::Api {
                code: STREAM_NOT_FOUND,
                ..
            }
    )
}

/// Send `payload` (with `headers`) to `subject` and read the JSON reply, an `error` member
/// becoming [`JsError::Api`] (looked at first: an error reply may carry `seq: 0` too).
async fn request(
    client: &async_nats::Client,
    subject: &str,
    headers: async_nats::HeaderMap,
    payload: bytes::Bytes,
    within: Duration,
) -> Result<Value, JsError> {
    let reply = tokio::time::timeout(
        within,
        client.request_with_headers(subject.to_owned(), headers, payload),
    )
    .await
    .map_err(|_| JsError::Unreachable("NATS did not answer in time".into()))?
    .map_err(|e| match e.kind() {
        async_nats::RequestErrorKind::NoResponders => JsError::NoResponders,
        _ => JsError::Unreachable(e.to_string()),
    })?;
    let v: Value = serde_json::from_slice(&reply.payload)
        .map_err(|e| JsError::Unreachable(format!("bad reply: {e}")))?;
    match v.get("error") {
        None => Ok(v),
        Some(e) => Err(JsError::Api {
            code: e.get("err_code").and_then(Value::as_u64).unwrap_or(0),
            description: e
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned(),
        }),
    }
}

/// A `$JS.API.*` request with a JSON body.
pub(crate) async fn api(
    client: &async_nats::Client,
    subject: &str,
    body: &Value,
    within: Duration,
) -> Result<Value, JsError> {
    let body = serde_json::to_vec(body).expect("json");
    request(
        client,
        subject,
        async_nats::HeaderMap::new(),
        body.into(),
        within,
    )
    .await
}

/// Create (or find, with the same settings) the stream `config` describes: its stream
/// information as JetStream answers it (`created`, `state`; see [`Incarnation`]).
pub(crate) async fn create_stream(
    client: &async_nats::Client,
    config: &Value,
    within: Duration,
) -> Result<Value, JsError> {
    let name = config["name"].as_str().expect("a stream config has a name");
    api(
        client,
        &format!("$JS.API.STREAM.CREATE.{name}"),
        config,
        within,
    )
    .await
}

/// Which stream of a name a creation found or made, and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Incarnation {
    /// When the server created the stream, in nanoseconds since the Unix epoch by its clock:
    /// a stream deleted and created again has another (the server keeps it across its own
    /// restarts), while its sequence numbers begin at 1 again. 0 when the answer has none.
    pub(crate) created: u64,
    /// The sequence of its oldest message; after a purge, or once everything expired, the
    /// one after its last (messages below it are gone).
    pub(crate) first_seq: u64,
}

impl Incarnation {
    /// Read from a stream creation's answer ([`create_stream`]).
    pub(crate) fn of(info: &Value) -> Self {
        Self {
            created: info
                .get("created")
                .and_then(Value::as_str)
                .and_then(rfc3339_ns)
                .unwrap_or(0),
            first_seq: info
                .pointer("/state/first_seq")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        }
    }
}

/// Publish `payload` on `subject`, which a stream captures; with `expected`, only if the
/// subject's last sequence is that (0: no message). The stored message's sequence, or
/// `Ok(None)` when the expected-sequence check failed (another writer came first).
pub(crate) async fn publish(
    client: &async_nats::Client,
    subject: &str,
    payload: bytes::Bytes,
    expected: Option<u64>,
    within: Duration,
) -> Result<Option<u64>, JsError> {
    let mut headers = async_nats::HeaderMap::new();
    if let Some(seq) = expected {
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            seq.to_string().as_str(),
        );
    }
    match request(client, subject, headers, payload, within).await {
        Ok(v) => v
            .get("seq")
            .and_then(Value::as_u64)
            .map(Some)
            .ok_or_else(|| JsError::Unreachable("publish: no sequence in the reply".into())),
        Err(JsError::Api {
            code: WRONG_LAST_SEQUENCE,
            ..
        }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The message of `stream` that `request` names (`{"last_by_subj": …}`, `{"seq": …,
/// "next_by_subj": …}`): its sequence and payload, `None` when there is none.
pub(crate) async fn get(
    client: &async_nats::Client,
    stream: &str,
    request: &Value,
    within: Duration,
) -> Result<Option<(u64, Vec<u8>)>, JsError> {
    use base64::Engine as _;
    let subject = format!("$JS.API.STREAM.MSG.GET.{stream}");
    let v = match api(client, &subject, request, within).await {
        Ok(v) => v,
        Err(JsError::Api {
            code: NO_MESSAGE, ..
        }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let seq = v
        .pointer("/message/seq")
        .and_then(Value::as_u64)
        .ok_or_else(|| JsError::Unreachable("message get: no sequence in the reply".into()))?;
    let data = v
        .pointer("/message/data")
        .and_then(Value::as_str)
        .unwrap_or("");
    let data = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| JsError::Unreachable(format!("message get: bad data: {e}")))?;
    Ok(Some((seq, data)))
}

/// When the server stored message `seq` of `stream`, by the server's clock, in milliseconds
/// since the Unix epoch: how a replica compares its clock with the NATS server's.
pub(crate) async fn stored_at(
    client: &async_nats::Client,
    stream: &str,
    seq: u64,
    within: Duration,
) -> Result<u64, JsError> {
    let subject = format!("$JS.API.STREAM.MSG.GET.{stream}");
    let v = api(client, &subject, &serde_json::json!({ "seq": seq }), within).await?;
    let time = v
        .pointer("/message/time")
        .and_then(Value::as_str)
        .ok_or_else(|| JsError::Unreachable("message get: no time in the reply".into()))?;
    rfc3339_ns(time)
        .map(|ns| ns / 1_000_000)
        .ok_or_else(|| JsError::Unreachable(format!("message get: unreadable time {time:?}")))
}

/// `2026-11-28T19:10:00.123456789Z` (UTC, as nats-server writes it) in nanoseconds since
/// the Unix epoch.
fn rfc3339_ns(t: &str) -> Option<u64> {
    let b = t.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || !t.ends_with('Z') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| t.get(r)?.parse::<u64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let frac = t[19..t.len() - 1].strip_prefix('.').unwrap_or("");
    let ns = if frac.is_empty() {
        0
    } else {
        let nine: String = frac.chars().chain("000000000".chars()).take(9).collect();
        nine.parse::<u64>().ok()?
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm), for years from 1970 on.
    let (y, mo) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    let seconds = ((days * 24 + h) * 60 + mi) * 60 + s;
    seconds.checked_mul(1_000_000_000)?.checked_add(ns)
}

#[cfg(test)]
mod tests {
    use super::{Incarnation, rfc3339_ns};

    #[test]
    fn server_times_read_as_epoch_nanoseconds() {
        assert_eq!(rfc3339_ns("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            rfc3339_ns("2026-11-28T19:10:00.123456789Z"),
            Some(1_795_893_000_123_456_789)
        );
        assert_eq!(
            rfc3339_ns("2000-02-29T23:59:59.5Z"),
            Some(951_868_799_500_000_000)
        );
        assert_eq!(rfc3339_ns("2026-11-28 19:10:00Z"), None);
        assert_eq!(rfc3339_ns("2026-13-28T19:10:00Z"), None);
        assert_eq!(rfc3339_ns("garbage"), None);
    }

    #[test]
    fn a_creations_answer_names_the_incarnation() {
        let info = serde_json::json!({
            "config": {"name": "S"},
            "created": "2026-11-28T19:10:00.000000007Z",
            "state": {"messages": 0, "first_seq": 43, "last_seq": 42}
        });
        assert_eq!(
            Incarnation::of(&info),
            Incarnation {
                created: 1_795_893_000_000_000_007,
                first_seq: 43
            }
        );
        let bare = Incarnation::of(&serde_json::json!({}));
        assert_eq!((bare.created, bare.first_seq), (0, 0));
    }
}
