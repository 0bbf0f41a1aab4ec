//! The mirror of what rmcp 3.11.0's serve loop (`service::serve_inner`, the
//! `PeerMessage(Notification)` arm for a server) does with a `notifications/cancelled` from
//! the client, for the stdio direct path, which answers reads outside that loop.
//!
//! rmcp reads the cancellation's `requestId` as it is (`1` and `"1"` are two ids). A request
//! it names that is still running is taken off rmcp's list of running requests
//! (`local_ct_pool`) and its token cancelled; the answer its handler makes afterwards finds
//! no entry and is dropped ("dropping response for cancelled request"). A cancellation
//! without a `requestId`, or naming a request already answered or never seen, changes
//! nothing. Either way the notification then goes on to the handler. So a request cancelled
//! before it is done gets no answer at all: the direct path drops the answer of a read it
//! still runs under that id the same way (`stdio/direct.rs`, `Waiting::cancel`).
//!
//! Paired with rmcp by `tests/wire_cancel.rs`: the same requests and cancellations sent to
//! a session served by rmcp alone and to one whose reads the direct path answers, compared
//! answer by answer.

use rmcp::model::{ClientNotification, JsonRpcMessage, RequestId};
use rmcp::service::{RoleServer, RxJsonRpcMessage};

/// The request a cancellation from the client names, as rmcp reads it; `None` for any other
/// message, and for a cancellation that names none.
pub(crate) fn cancelled(msg: &RxJsonRpcMessage<RoleServer>) -> Option<&RequestId> {
    match msg {
        JsonRpcMessage::Notification(n) => match &n.notification {
            ClientNotification::CancelledNotification(c) => c.params.request_id.as_ref(),
            _ => None,
        },
        _ => None,
    }
}
