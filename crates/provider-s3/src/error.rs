//! Mapping of object_store failures to the core error kinds, in one place: every message
//! names the bucket, says what happened in plain words, and never carries a credential.

use mcpr_core::{Error, ErrorKind};
use object_store::client::{HttpError, HttpErrorKind};

/// What the mount knows to name in errors, and the secrets to scrub from anything the store
/// or the HTTP stack said (an S3 error body can echo the access key id).
#[derive(Clone)]
pub(crate) struct Context {
    pub(crate) bucket: String,
    pub(crate) endpoint: String,
    secrets: Vec<String>,
}

impl Context {
    pub(crate) fn new(bucket: &str, endpoint: &str, secrets: Vec<String>) -> Self {
        Self {
            bucket: bucket.to_owned(),
            endpoint: endpoint.to_owned(),
            secrets: secrets.into_iter().filter(|s| !s.is_empty()).collect(),
        }
    }

    /// `text` with every configured secret replaced, and whatever an S3 error body says in
    /// `<AWSAccessKeyId>`: keys from a `credential_process` or the instance are not known
    /// when the mount is built.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.secrets {
            out = out.replace(s.as_str(), "[redacted]");
        }
        const OPEN: &str = "<AWSAccessKeyId>";
        let mut from = 0;
        while let Some(i) = out[from..].find(OPEN) {
            let start = from + i + OPEN.len();
            let Some(len) = out[start..].find("</AWSAccessKeyId>") else {
                break;
            };
            out.replace_range(start..start + len, "[redacted]");
            from = start + "[redacted]".len();
        }
        out
    }

    /// A store whose answer is not the length it should be (`detail`: what it sent and what
    /// was asked for), while `what`. Not served: a longer body is a lie about the object, a
    /// shorter one a partial answer.
    pub(crate) fn wrong_length(&self, what: &str, detail: &str) -> Error {
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "s3 bucket `{}` at {} sent {detail} while {what}; the answer was refused",
                self.bucket, self.endpoint
            ),
        )
    }

    /// The core error for `err`, which happened while `what` (`reading s3://b/k`,
    /// `listing`). `uri`, when given, is what a not-found is about.
    pub(crate) fn map(&self, err: object_store::Error, what: &str, uri: Option<&str>) -> Error {
        let b = &self.bucket;
        let detail = self.scrub(&chain(&err));
        let code = s3_code(&detail);
        let status = http_status(&detail);
        // List requests come back as generic errors whatever the status: the status and the
        // S3 code in the text decide as much as the variant does.
        let denied = matches!(
            err,
            object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }
        ) || matches!(status, Some(401 | 403))
            || matches!(
                code.as_deref(),
                Some(
                    "AccessDenied"
                        | "InvalidAccessKeyId"
                        | "SignatureDoesNotMatch"
                        | "InvalidToken"
                        | "ExpiredToken"
                )
            );
        let e = match &err {
            _ if code.as_deref() == Some("NoSuchBucket") => Error::new(
                ErrorKind::Unavailable,
                format!(
                    "s3 bucket `{b}` does not exist at {} (NoSuchBucket) while {what}",
                    self.endpoint
                ),
            ),
            object_store::Error::NotFound { .. } => match uri {
                Some(u) => return Error::not_found(u),
                None => Error::new(
                    ErrorKind::Unavailable,
                    format!("s3 bucket `{b}` answered not found while {what}: {detail}"),
                ),
            },
            _ if denied => Error::new(
                ErrorKind::Unavailable,
                format!(
                    "access to s3 bucket `{b}` was denied{} while {what}; check the mount's credentials and the bucket policy",
                    code.map(|c| format!(" ({c})")).unwrap_or_default()
                ),
            ),
            _ => match transport(&err) {
                Some(HttpErrorKind::Timeout) => Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "s3 bucket `{b}` at {} did not answer in time while {what}",
                        self.endpoint
                    ),
                ),
                Some(HttpErrorKind::Connect) => Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "s3 endpoint {} for bucket `{b}` cannot be reached while {what} (after retries)",
                        self.endpoint
                    ),
                ),
                Some(_) => Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the connection to s3 bucket `{b}` at {} failed while {what} (after retries): {detail}",
                        self.endpoint
                    ),
                ),
                None if matches!(
                    code.as_deref(),
                    Some(
                        "SlowDown" | "Throttling" | "ThrottlingException" | "RequestLimitExceeded"
                    )
                ) || detail.contains("429 Too Many Requests")
                    || detail.contains("503 Service Unavailable") =>
                {
                    Error::new(
                        ErrorKind::Unavailable,
                        format!(
                            "s3 bucket `{b}` is throttling requests (still refused after retries) while {what}; try again later"
                        ),
                    )
                }
                None if matches!(err, object_store::Error::InvalidPath { .. }) => Error::new(
                    ErrorKind::Internal,
                    format!(
                        "s3 bucket `{b}` holds a key this server cannot represent (an empty, `.` or `..` segment, or a control character) while {what}: {detail}"
                    ),
                ),
                None => Error::new(
                    ErrorKind::Unavailable,
                    format!("s3 bucket `{b}` failed while {what}: {detail}"),
                ),
            },
        };
        match uri {
            Some(u) => e.with_uri(u),
            None => e,
        }
    }
}

/// The messages of `err` and its sources, joined: object_store's own top line is often just
/// "Generic S3 error", the cause is below it.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = e.source();
    }
    out
}

/// The transport failure (connect, timeout...) under `err`, when that is what it is.
fn transport(err: &(dyn std::error::Error + 'static)) -> Option<HttpErrorKind> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(h) = e.downcast_ref::<HttpError>() {
            return Some(h.kind());
        }
        cur = e.source();
    }
    None
}

/// The HTTP status object_store wrote into an error's text ("status code: 403 Forbidden").
fn http_status(text: &str) -> Option<u16> {
    let at = text.find("status code: ")? + "status code: ".len();
    text.get(at..at + 3)?.parse().ok()
}

/// The S3 error code (`<Code>NoSuchBucket</Code>`) in an error's text, when it has one.
fn s3_code(text: &str) -> Option<String> {
    let start = text.find("<Code>")? + "<Code>".len();
    let len = text[start..].find("</Code>")?;
    Some(text[start..start + len].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_scrubbed_and_codes_found() {
        let c = Context::new("b", "http://x", vec!["AKIA123".into(), String::new()]);
        assert_eq!(
            c.scrub("<AWSAccessKeyId>AKIA123</AWSAccessKeyId>"),
            "<AWSAccessKeyId>[redacted]</AWSAccessKeyId>"
        );
        assert_eq!(c.scrub("plain"), "plain");
        assert_eq!(
            c.scrub("<AWSAccessKeyId>AKIAOTHER</AWSAccessKeyId><X>1</X><AWSAccessKeyId>AKIA2</AWSAccessKeyId>"),
            "<AWSAccessKeyId>[redacted]</AWSAccessKeyId><X>1</X><AWSAccessKeyId>[redacted]</AWSAccessKeyId>"
        );
        assert_eq!(
            s3_code("x <Error><Code>SlowDown</Code></Error>").as_deref(),
            Some("SlowDown")
        );
        assert_eq!(s3_code("nothing"), None);
        assert_eq!(
            http_status("Server returned non-2xx status code: 403 Forbidden: x"),
            Some(403)
        );
        assert_eq!(http_status("no status"), None);
    }
}
