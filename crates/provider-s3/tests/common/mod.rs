//! What the s3 provider's tests share besides the moto server (`mcpr_testkit::moto`: one
//! shared by a test binary, or a test's own to stop and restart): unique bucket names per
//! test, a writing client, and the mount's configuration.
//!
//! `moto_server` is found at `$MCPR_MOTO`, then the project venv (`.cache/venv/bin`, where
//! `cargo xtask test` installs it from `tests/e2e/requirements.txt`), then `PATH`. Without it a
//! test says so and passes, except under `CI=true`, where it is a failure.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use mcpr_provider_s3::S3Config;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ObjectStoreExt as _, PutPayload};

/// A bucket name no other test uses.
pub fn unique_bucket(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "t-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Test credentials: moto accepts any.
pub const KEY_ID: &str = "AKIAMOTOTESTKEY12345";
pub const SECRET: &str = "motoSecretKeyThatMustNeverBeShown0000";

/// Create `bucket` on the server (moto accepts unsigned requests).
pub async fn create_bucket(endpoint: &str, bucket: &str) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let r = reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .expect("create bucket");
    assert!(
        r.status().is_success(),
        "create bucket {bucket}: {}",
        r.status()
    );
}

/// A writing client for the tests (the provider itself never writes).
pub fn writer(endpoint: &str, bucket: &str) -> AmazonS3 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id(KEY_ID)
        .with_secret_access_key(SECRET)
        .build()
        .unwrap()
}

/// Put one object.
pub async fn put(s: &AmazonS3, key: &str, bytes: &[u8]) {
    s.put(&Path::parse(key).unwrap(), PutPayload::from(bytes.to_vec()))
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
}

/// Put many objects, 32 at a time.
pub async fn put_many(s: &AmazonS3, objects: Vec<(String, Vec<u8>)>) {
    futures::stream::iter(objects)
        .map(|(k, b)| async move { put(s, &k, &b).await })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
}

/// Delete one object.
pub async fn delete(s: &AmazonS3, key: &str) {
    s.delete(&Path::parse(key).unwrap()).await.unwrap();
}

/// A mount of `bucket` on `endpoint` with a short poll interval.
pub fn config(endpoint: &str, bucket: &str) -> S3Config {
    let mut c = S3Config::new(bucket, "us-east-1");
    c.endpoint = Some(endpoint.to_owned());
    c.allow_http = true;
    c.access_key_id = Some(KEY_ID.into());
    c.secret_access_key = Some(SECRET.into());
    c.poll_interval = Duration::from_millis(150);
    c
}

/// Percent-encode a key like the provider (unreserved and `/` stay).
pub fn enc(key: &str) -> String {
    let mut out = String::new();
    for &b in key.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Put one object with a stored Content-Type.
pub async fn put_typed(s: &AmazonS3, key: &str, bytes: &[u8], content_type: &str) {
    use object_store::{Attribute, Attributes, ObjectStore as _, PutOptions};
    let opts = PutOptions {
        attributes: Attributes::from_iter([(Attribute::ContentType, content_type.to_owned())]),
        ..Default::default()
    };
    s.put_opts(
        &Path::parse(key).unwrap(),
        PutPayload::from(bytes.to_vec()),
        opts,
    )
    .await
    .unwrap_or_else(|e| panic!("put {key}: {e}"));
}
