//! The notifications of a change, written once: the rmcp message of a [`Notice`], which a
//! legacy session's peer, a `subscriptions/listen` stream and a roaming session's log (as
//! JSON) all send. Built from rmcp 3.11.0's notification types (`model.rs`); paired with
//! rmcp's decode of them by the test below.

use rmcp::model::{
    ResourceListChangedNotification, ResourceUpdatedNotification, ResourceUpdatedNotificationParam,
    ServerJsonRpcMessage, ServerNotification,
};

use crate::registry::Notice;

/// The MCP notification of `notice`: `notifications/resources/updated` naming the URI, or
/// `notifications/resources/list_changed`.
pub(crate) fn notification(notice: Notice) -> ServerNotification {
    match notice {
        Notice::Updated(uri) => ServerNotification::ResourceUpdatedNotification(
            ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(uri)),
        ),
        Notice::ListChanged => ServerNotification::ResourceListChangedNotification(
            ResourceListChangedNotification::default(),
        ),
    }
}

/// The JSON-RPC message of `notice` as JSON, as rmcp writes it (a roaming session's log
/// keeps it so, and any replica replays it through rmcp's own decode).
pub(crate) fn notification_json(notice: &Notice) -> Vec<u8> {
    let message = ServerJsonRpcMessage::notification(notification(notice.clone()));
    serde_json::to_vec(&message).expect("a notification serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON is what the MCP schema names, and rmcp reads it back as the same message
    /// (the replay of a roaming session's log decodes it).
    #[test]
    fn notifications_are_what_the_schema_names_and_rmcp_reads_back() {
        let cases = [
            (
                Notice::Updated("file:///a \"b\".md".into()),
                serde_json::json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/resources/updated",
                    "params": {"uri": "file:///a \"b\".md"}
                }),
            ),
            (
                Notice::ListChanged,
                serde_json::json!({
                    "jsonrpc": "2.0", "method": "notifications/resources/list_changed"
                }),
            ),
        ];
        for (notice, want) in cases {
            let bytes = notification_json(&notice);
            let got: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(got, want, "{notice:?}");
            let back: ServerJsonRpcMessage = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(
                serde_json::to_vec(&back).unwrap(),
                bytes,
                "{notice:?} does not survive rmcp's decode"
            );
        }
    }
}
