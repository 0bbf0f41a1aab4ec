//! Why `js.rs` exists, as a test that fails once it need not: async-nats's typed JetStream
//! API cannot read nats-server 2.9's answer to creating a key-value bucket (the lease keeps
//! one), so the lease and the session store speak `$JS.API.*` themselves. When this test
//! fails, async-nats reads that answer: the raw layer can go (lease and session store on the
//! typed API), if 2.9 servers are still to be supported, it must be on that typed API.
//!
//! It needs a 2.9 server: against a newer one the typed API works and there is nothing to
//! show, so the test says so and passes. Without `nats-server` it says so and passes, except
//! under `CI=true` (testkit's `NatsServer`).

use std::time::Duration;

use mcpr_testkit::nats::NatsServer;

#[tokio::test]
async fn async_nats_typed_jetstream_cannot_create_a_kv_bucket_on_nats_server_2_9() {
    let Some(nats) = NatsServer::started() else {
        return;
    };
    let client = async_nats::connect(nats.url()).await.unwrap();
    let version = client.server_info().version;
    if !version.starts_with("2.9.") {
        eprintln!(
            "SKIPPED: nats-server {version} is not 2.9; the typed JetStream API works against it"
        );
        return;
    }
    let js = async_nats::jetstream::new(client);
    let created = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: "upstream_workaround".into(),
            max_age: Duration::from_secs(5),
            ..Default::default()
        })
        .await;
    let err = match created {
        Ok(_) => panic!(
            "async-nats now creates a KV bucket on nats-server {version}: js.rs's raw JetStream layer may go (see its //!)"
        ),
        Err(e) => e.to_string(),
    };
    // The reply is a valid answer the client cannot parse, not a refusal by the server.
    assert!(
        err.contains("did not match any variant"),
        "a different failure than the one js.rs works around: {err}"
    );
}
