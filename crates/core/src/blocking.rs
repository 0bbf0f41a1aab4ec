//! Blocking work (file system calls, gix, rusqlite) run on tokio's blocking pool, with one
//! way of turning a panic or a cancelled task into an [`Error`].
//!
//! Every provider used to call `spawn_blocking` and map the `JoinError` itself, each with its
//! own message; a panic in one of them then read differently depending on the provider.

use crate::error::{Error, Result};

/// Run `f` on the blocking pool and wait for it. `label` names the work in the error, such as
/// `"git read"` or `"files listing"`.
///
/// A panic inside `f` becomes an internal error that says so and carries the panic message
/// (the panic is not propagated: one bad request must not take the caller down with it); a
/// task the runtime cancelled because it is shutting down becomes an internal error too.
pub async fn run_blocking<T, F>(label: &str, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(out) => out,
        Err(e) => Err(join_error(label, e)),
    }
}

/// The error for a blocking task that did not finish.
fn join_error(label: &str, e: tokio::task::JoinError) -> Error {
    if e.is_panic() {
        let payload = e.into_panic();
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Error::internal(format!("{label} task panicked: {what}"))
    } else {
        Error::internal(format!(
            "{label} task was cancelled (the server is shutting down)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[tokio::test]
    async fn returns_the_value_or_the_error_of_the_work() {
        assert_eq!(run_blocking("sum", || Ok(2 + 2)).await.unwrap(), 4);
        let e = run_blocking::<(), _>("files read", || Err(Error::not_found("file:///x")))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn runs_off_the_runtime_thread() {
        let caller = std::thread::current().id();
        let worker = run_blocking("where", || Ok(std::thread::current().id()))
            .await
            .unwrap();
        assert_ne!(caller, worker);
    }

    #[tokio::test]
    async fn a_panic_is_an_internal_error_with_its_message() {
        let e = run_blocking::<(), _>("git read", || panic!("index out of bounds"))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Internal);
        assert_eq!(e.message, "git read task panicked: index out of bounds");
        let n = 3;
        let e = run_blocking::<(), _>("sql", move || panic!("row {n}"))
            .await
            .unwrap_err();
        assert_eq!(e.message, "sql task panicked: row 3");
    }
}
