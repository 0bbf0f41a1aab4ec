//! rmcp answers the DELETE of a session 202 Accepted, which clients refuse; it goes out as
//! 204 No Content ([`http_answers::deleted`], where the rmcp mirrors live).

use axum::extract::Request;
use axum::response::Response;
use http::Method;

use super::step::{After, Inner, Step, Then};
use crate::wire::http_answers;

/// Rewrites rmcp's 202 to a DELETE as 204.
#[derive(Clone, Copy)]
pub(crate) struct DeletedAs204;

impl<S: Inner> Step<S> for DeletedAs204 {
    type Future = Then<S::Future, Self>;

    fn call(&self, inner: &mut S, req: Request) -> Self::Future {
        let delete = req.method() == Method::DELETE;
        Then::new(inner.call(req), delete.then_some(Self))
    }
}

impl After for DeletedAs204 {
    fn after(self, mut answer: Response) -> Response {
        http_answers::deleted(&mut answer);
        answer
    }
}
