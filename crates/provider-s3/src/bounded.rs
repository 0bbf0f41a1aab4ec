//! The store's HTTP client, with a cap on the error answers object_store reads whole.
//!
//! object_store collects the body of an error answer (4xx, 5xx, after its retries) into one
//! string for its message, however long it is: a store that answers with a gigabyte of
//! "error" would have it held in memory. Every response of this mount's client passes here;
//! an error answer's body is cut off with a transport error past [`ERROR_BODY_MAX`] while it
//! streams. Successful bodies pass untouched: the reads (`read.rs`) and listings
//! (`listing.rs`) stop at their own limits as they stream.

use async_trait::async_trait;
use http_body_util::{BodyExt as _, Limited};
use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService, ReqwestConnector,
};

/// The most of an error answer's body that is read. S3 error documents are a few hundred
/// bytes.
pub(crate) const ERROR_BODY_MAX: usize = 64 * 1024;

/// object_store's reqwest connector, each client it makes wrapped in [`Bounded`].
#[derive(Debug, Default)]
pub(crate) struct BoundedConnector;

impl HttpConnector for BoundedConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Bounded { inner }))
    }
}

/// An HTTP client whose error answers carry at most [`ERROR_BODY_MAX`] bytes of body.
#[derive(Debug)]
pub(crate) struct Bounded {
    inner: HttpClient,
}

#[async_trait]
impl HttpService for Bounded {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let res = self.inner.execute(req).await?;
        if res.status().is_success() {
            return Ok(res);
        }
        let (parts, body) = res.into_parts();
        let body = Limited::new(body, ERROR_BODY_MAX).map_err(|e| {
            // `Limited` reports either the inner error or that the limit was passed.
            match e.downcast::<HttpError>() {
                Ok(inner) => *inner,
                Err(_) => HttpError::new(
                    HttpErrorKind::Decode,
                    std::io::Error::other(format!(
                        "the store's error answer is longer than {} KiB; the rest was not read",
                        ERROR_BODY_MAX / 1024
                    )),
                ),
            }
        });
        Ok(HttpResponse::from_parts(parts, HttpResponseBody::new(body)))
    }
}
