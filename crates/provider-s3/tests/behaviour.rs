//! The provider behaviour suite against a real S3-compatible server (moto on loopback): a
//! mount with a prefix over a bucket holding awkward keys (spaces, `+`, `%`, `#`, `?`,
//! non-ASCII), text and binary objects, and keys outside the prefix that must stay hidden.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use common::{config, create_bucket, enc, put, put_many, unique_bucket, writer};
use mcpr_core::Provider;
use mcpr_provider_s3::S3Provider;
use mcpr_testkit::moto::moto;
use mcpr_testkit::{Fixture, default_malformed_positions, run_suite};
use object_store::aws::AmazonS3;

struct Fx {
    bucket: String,
    store: AmazonS3,
    objects: Vec<(String, Vec<u8>)>,
    added: AtomicUsize,
}

/// The objects under the mount's prefix `pre/`; the first is the one the suite modifies.
fn objects() -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = vec![
        ("pre/readme.md".into(), b"# hello\n".to_vec()),
        ("pre/a b/c d.txt".into(), b"space\n".to_vec()),
        ("pre/plus+sign.txt".into(), b"plus\n".to_vec()),
        ("pre/100%.txt".into(), b"percent\n".to_vec()),
        ("pre/hash#tag.txt".into(), b"hash\n".to_vec()),
        ("pre/what?.txt".into(), b"question\n".to_vec()),
        (
            "pre/ünïcödé/日本.md".into(),
            "ünïcödé ✓\n".as_bytes().to_vec(),
        ),
        ("pre/bin/blob.bin".into(), vec![0, 159, 146, 150, 255, 0, 1]),
        ("pre/data.json".into(), br#"{"a": 1}"#.to_vec()),
        ("pre/empty.txt".into(), Vec::new()),
        ("pre/dir/x.txt".into(), b"x\n".to_vec()),
    ];
    for i in 0..25 {
        v.push((
            format!("pre/many/f{i:03}.txt"),
            format!("{i}\n").into_bytes(),
        ));
    }
    v
}

impl Fx {
    async fn build(bucket: String, endpoint: &str) -> Self {
        create_bucket(endpoint, &bucket).await;
        let store = writer(endpoint, &bucket);
        let objects = objects();
        put_many(&store, objects.clone()).await;
        // Outside the prefix: never listed, never read.
        put(&store, "other/secret.txt", b"hidden\n").await;
        put(&store, "prelude.txt", b"not under pre/\n").await;
        Self {
            bucket,
            store,
            objects,
            added: AtomicUsize::new(0),
        }
    }

    fn uri(&self, key: &str) -> String {
        format!("s3://{}/{}", self.bucket, enc(key))
    }
}

#[async_trait]
impl Fixture for Fx {
    fn expected(&self) -> Vec<(String, Vec<u8>)> {
        self.objects
            .iter()
            .map(|(k, b)| (self.uri(k), b.clone()))
            .collect()
    }

    fn missing_uri(&self) -> String {
        self.uri("pre/nope.txt")
    }

    fn forbidden_uris(&self) -> Vec<String> {
        vec![
            self.uri("other/secret.txt"),
            self.uri("prelude.txt"),
            format!("s3://{}/pre/../other/secret.txt", self.bucket),
            format!("s3://{}/pre/a//b", self.bucket),
            format!("s3://{}/pre/%FF", self.bucket),
            format!("s3://{}/pre/a%00", self.bucket),
            format!("s3://{}-x/pre/readme.md", self.bucket),
        ]
    }

    async fn modify(&self, uri: &str) {
        let key = self
            .objects
            .iter()
            .find(|(k, _)| self.uri(k) == uri)
            .map(|(k, _)| k.clone())
            .expect("a fixture object");
        let now = std::time::SystemTime::now();
        put(&self.store, &key, format!("changed {now:?}\n").as_bytes()).await;
    }

    async fn add(&self) -> String {
        let n = self.added.fetch_add(1, Ordering::SeqCst);
        let key = format!("pre/added-{n}.txt");
        put(&self.store, &key, b"new\n").await;
        self.uri(&key)
    }

    fn completion_case(&self) -> Option<(String, String, String, String)> {
        Some((
            format!("s3://{}/{{+key}}", self.bucket),
            "key".into(),
            "pre/di".into(),
            "pre/dir/".into(),
        ))
    }

    fn malformed_positions(&self) -> Vec<Vec<u8>> {
        // Longer than any S3 key. Control characters are well-formed positions: a page
        // resumes after the last key the store returned, and a skipped one may hold them.
        let mut v = default_malformed_positions();
        v.push(vec![b'k'; 1025]);
        v
    }

    fn directories(&self) -> Vec<String> {
        // The mount's prefix, then a "folder" with a space by its own URI.
        vec![self.uri("pre/"), self.uri("pre/a b/")]
    }

    fn unknown_positions(&self) -> Vec<(Vec<u8>, Option<String>)> {
        let mut keys: Vec<&str> = self.objects.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort();
        vec![
            // Before the prefix: the listing starts at its first key.
            (b"a".to_vec(), Some(self.uri(keys[0]))),
            (
                b"pre/many/f010.txtx".to_vec(),
                Some(self.uri("pre/many/f011.txt")),
            ),
            // Past every key (S3 orders by UTF-8 bytes; `ü` sorts after `z`).
            ("pre/\u{10FFFF}".as_bytes().to_vec(), None),
            (b"zzz".to_vec(), None),
        ]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behaviour_suite() {
    let Some(m) = moto() else { return };
    let fx = Fx::build(unique_bucket("suite"), &m.endpoint()).await;
    let mut cfg = config(&m.endpoint(), &fx.bucket);
    cfg.prefix = "pre/".into();
    let p: Arc<dyn Provider> = Arc::new(S3Provider::new(cfg).await.unwrap());
    run_suite(p.clone(), &fx).await;
    // The bucket's root, above the mount's prefix, shows only the way down to it: nothing
    // outside `pre/` (`other/`, `prelude.txt`) is named.
    let root = format!("s3://{}/", fx.bucket);
    let c = p
        .read(
            &mcpr_core::ResourceUri::parse(&root).unwrap(),
            &mcpr_core::ReadLimits { max_bytes: 1 << 20 },
        )
        .await
        .unwrap()
        .contents;
    let mcpr_core::ContentsBody::Text(t) = &c[0].body else {
        panic!("a listing is text")
    };
    let doc: serde_json::Value = serde_json::from_str(t).unwrap();
    let names: Vec<&str> = doc["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pre/"], "{doc}");
    // Completion never suggests keys outside the prefix either.
    let done = p
        .complete(mcpr_core::CompletionRequest {
            template: format!("s3://{}/{{+key}}", fx.bucket),
            argument: "key".into(),
            value: "pr".into(),
            context: Default::default(),
        })
        .await
        .unwrap();
    assert!(
        done.values.iter().all(|v| v.starts_with("pre/")),
        "{:?}",
        done.values
    );
}
