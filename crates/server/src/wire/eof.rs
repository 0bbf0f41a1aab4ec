//! The mirror of what rmcp 3.11.0's serve loop (`service::serve_inner`, its
//! `QuitReason::Closed` drain) does once its transport's `receive` has returned `None`, the
//! end of input, which the stdio transport's end of input is built around
//! (`stdio/mod.rs`, `StdioTransport::drain`):
//!
//! - it reads nothing more, and sends its handlers' answers for [`ANSWERS_AFTER_EOF`] more,
//!   then cancels the handlers still running: their answers are lost;
//! - it sends no notification from a handler any more ([`NOTIFIES_AFTER_EOF`]): those go
//!   through the loop it has left. A `subscriptions/listen` is acknowledged by a
//!   notification, so a listen not acknowledged by then never is.
//!
//! So the stdio transport does not end its stream at the end of input: it holds `receive`
//! until every request it handed rmcp is answered and every listen acknowledged (at most its
//! drain bound), and answers its direct reads outside rmcp altogether.
//!
//! Paired with rmcp by the test below: rmcp's own serve loop runs handlers that answer and
//! notify before and after the end of input, and what it sends is compared with what the
//! two facts above say it sends.

use std::time::Duration;

/// How long rmcp still sends its handlers' answers once `receive` has returned `None`.
pub(crate) const ANSWERS_AFTER_EOF: Duration = Duration::from_secs(5);

/// Whether rmcp still sends a handler's notifications once `receive` has returned `None`.
pub(crate) const NOTIFIES_AFTER_EOF: bool = false;

#[cfg(test)]
mod tests {
    use rmcp::model::{
        JsonRpcMessage, ListResourcesResult, PaginatedRequestParams, ServerNotification,
    };
    use rmcp::service::{RequestContext, RoleServer};
    use rmcp::{ErrorData, ServerHandler};
    use tokio::time::Instant;

    use super::*;
    use crate::wire::rmcp_run;

    /// The moment input ends, from the start.
    const EOF_AT: Duration = Duration::from_millis(100);

    /// A `resources/list` whose cursor says when to notify and when to answer, in
    /// milliseconds from the start ("notify,answer"); the notification is sent on a task of
    /// its own, so that one rmcp never sends does not hold the answer.
    struct Timed;

    impl ServerHandler for Timed {
        async fn list_resources(
            &self,
            request: Option<PaginatedRequestParams>,
            ctx: RequestContext<RoleServer>,
        ) -> Result<ListResourcesResult, ErrorData> {
            let cursor = request.and_then(|r| r.cursor).unwrap();
            let (notify, answer) = cursor.split_once(',').unwrap();
            let ms = |s: &str| Duration::from_millis(s.parse().unwrap());
            let (notify, answer) = (ms(notify), ms(answer));
            let start = Instant::now();
            let peer = ctx.peer.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(start + notify).await;
                let _ = peer.notify_resource_list_changed().await;
            });
            tokio::time::sleep_until(start + answer).await;
            Ok(ListResourcesResult::default())
        }
    }

    // On the real clock (the five seconds are rmcp's own), with room either side of them
    // for a loaded machine.
    #[tokio::test]
    async fn rmcp_answers_for_five_seconds_after_the_end_of_input_and_notifies_no_more() {
        // (request id, when its handler notifies, when it answers): from the start, which
        // is also when the requests arrive; input ends at `EOF_AT`.
        let eof = EOF_AT.as_millis() as u64;
        let five = ANSWERS_AFTER_EOF.as_millis() as u64;
        let timings = [
            (1, 10, 50),
            (2, 50, eof + five - 400),
            (3, eof + 100, eof + five + 400),
            (4, eof + 100, eof + 2 * five),
        ];
        let mut input = rmcp_run::legacy_opening().to_vec();
        for (id, notify, answer) in timings {
            input.push(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/list","params":{{"cursor":"{notify},{answer}"}}}}"#
            ));
        }
        let sent = rmcp_run::serve(Timed, &input, EOF_AT).await;
        let answered: Vec<i64> = sent
            .iter()
            .filter_map(|(_, m)| match m {
                JsonRpcMessage::Response(r) => r.id.to_string().parse().ok(),
                _ => None,
            })
            .filter(|id| *id != 0)
            .collect();
        let notified = sent
            .iter()
            .filter(|(_, m)| {
                matches!(m, JsonRpcMessage::Notification(n)
                    if matches!(n.notification, ServerNotification::ResourceListChangedNotification(_)))
            })
            .count();
        // What the mirror says rmcp sends.
        let after_eof = |ms: u64| Duration::from_millis(ms).saturating_sub(EOF_AT);
        let expected_answers: Vec<i64> = timings
            .iter()
            .filter(|(_, _, answer)| *answer <= eof || after_eof(*answer) < ANSWERS_AFTER_EOF)
            .map(|(id, _, _)| *id)
            .collect();
        let expected_notifications = timings
            .iter()
            .filter(|(_, notify, _)| *notify < eof || NOTIFIES_AFTER_EOF)
            .count();
        assert_eq!(answered, expected_answers, "{sent:?}");
        assert_eq!(notified, expected_notifications, "{sent:?}");
        // Both ways met: answered and lost, notified and not.
        assert_eq!((answered.len(), notified), (2, 2));
    }
}
