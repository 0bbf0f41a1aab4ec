//! Reads, prefix listings, completion and change notifications against moto: byte-exact
//! text and binary objects under awkward keys, windows as ranged GETs, the read limit, a
//! "directory" read continued with `?after=`, and overwrite / new key / deletion notices.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{config, create_bucket, delete, enc, put, put_many, unique_bucket, writer};
use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeSink, CompletionRequest, ContentsBody, ErrorKind, LocalBus,
    PageRequest, Provider, ReadLimits, ResourceUri,
};
use mcpr_provider_s3::S3Provider;
use mcpr_testkit::moto::moto;
use serde_json::Value;

const BIG: ReadLimits = ReadLimits { max_bytes: 1 << 30 };

fn u(s: &str) -> ResourceUri {
    ResourceUri::parse(s).unwrap()
}

async fn bytes_of(p: &S3Provider, uri: &str, limits: &ReadLimits) -> (Vec<u8>, Option<String>) {
    let c = p
        .read(&u(uri), limits)
        .await
        .unwrap_or_else(|e| panic!("read {uri}: {e}"))
        .contents;
    assert_eq!(c.len(), 1);
    let c = c.into_iter().next().unwrap();
    let b = match c.body {
        ContentsBody::Text(t) => t.into_bytes(),
        ContentsBody::Blob(b) => b,
    };
    (b, c.mime_type)
}

async fn json_of(p: &S3Provider, uri: &str) -> Value {
    let (b, mime) = bytes_of(p, uri, &BIG).await;
    assert_eq!(mime.as_deref(), Some("application/json"));
    serde_json::from_slice(&b).unwrap()
}

const AWKWARD: &[&str] = &[
    "a b.txt",
    "plus+sign.txt",
    "100%.txt",
    "hash#tag.txt",
    "what?.txt",
    "ünïcödé/日本 語.md",
    "semi;colon,comma=eq&amp@at:colon!$'()*.txt",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awkward_keys_text_and_binary_read_byte_exact() {
    let Some(m) = moto() else { return };
    let bucket = unique_bucket("reads");
    create_bucket(&m.endpoint(), &bucket).await;
    let w = writer(&m.endpoint(), &bucket);
    let mut objects: Vec<(String, Vec<u8>)> = AWKWARD
        .iter()
        .map(|k| (k.to_string(), format!("content of {k}\n").into_bytes()))
        .collect();
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    objects.push(("bin/all-bytes.bin".into(), binary.clone()));
    objects.push(("big.log".into(), big_log()));
    put_many(&w, objects.clone()).await;
    let p = S3Provider::new(config(&m.endpoint(), &bucket))
        .await
        .unwrap();
    for (k, want) in &objects {
        let uri = format!("s3://{bucket}/{}", enc(k));
        let (got, _) = bytes_of(&p, &uri, &BIG).await;
        assert_eq!(&got, want, "{uri}");
    }
    // Text is text, binary is a blob with a type from its bytes or extension.
    let c = p
        .read(&u(&format!("s3://{bucket}/bin/all-bytes.bin")), &BIG)
        .await
        .unwrap()
        .contents;
    assert!(matches!(c[0].body, ContentsBody::Blob(_)));
    let c = p
        .read(&u(&format!("s3://{bucket}/{}", enc(AWKWARD[5]))), &BIG)
        .await
        .unwrap()
        .contents;
    assert!(matches!(c[0].body, ContentsBody::Text(_)));
    assert_eq!(c[0].mime_type.as_deref(), Some("text/markdown"));
    // Every listed URI reads back the key it names (the round trip of the URI rule).
    let page = p
        .list(PageRequest {
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(page.items.len(), objects.len());
    for item in &page.items {
        let want = &objects.iter().find(|(k, _)| *k == item.name).unwrap().1;
        assert_eq!(item.size, Some(want.len() as u64));
        assert!(
            item.last_modified
                .as_deref()
                .is_some_and(|t| t.ends_with('Z'))
        );
        let (got, _) = bytes_of(&p, &item.uri, &BIG).await;
        assert_eq!(&got, want, "{}", item.uri);
    }
    // A non-canonical but equivalent spelling (lower-case hex) names the same key.
    let (got, _) = bytes_of(
        &p,
        &format!("s3://{bucket}/%c3%bcn%c3%afc%c3%b6d%c3%a9/%e6%97%a5%e6%9c%ac%20%e8%aa%9e.md"),
        &BIG,
    )
    .await;
    assert_eq!(got, format!("content of {}\n", AWKWARD[5]).into_bytes());
}

fn big_log() -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..5000 {
        v.extend_from_slice(format!("line {i:05} ✓ of the log\n").as_bytes());
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_windows_and_errors() {
    let Some(m) = moto() else { return };
    let bucket = unique_bucket("windows");
    create_bucket(&m.endpoint(), &bucket).await;
    let w = writer(&m.endpoint(), &bucket);
    let log = big_log();
    put(&w, "big.log", &log).await;
    let p = S3Provider::new(config(&m.endpoint(), &bucket))
        .await
        .unwrap();
    let uri = format!("s3://{bucket}/big.log");
    let small = ReadLimits { max_bytes: 1000 };
    // Whole: refused from the size in the response headers, with the files error.
    let e = p.read(&u(&uri), &small).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooLarge);
    assert!(
        e.message.contains(&format!("{} bytes", log.len()))
            && e.message.contains("max_read_bytes")
            && e.message.contains("?offset="),
        "{}",
        e.message
    );
    // offset/length: a ranged GET, with the window's place in `_meta`.
    let c = p
        .read(&u(&format!("{uri}?offset=100&length=50")), &small)
        .await
        .unwrap()
        .contents;
    let ContentsBody::Text(t) = &c[0].body else {
        panic!("text")
    };
    let (from, len) = window(&c[0].meta);
    assert_eq!(t.as_bytes(), &log[from as usize..(from + len) as usize]);
    assert!(
        (100..=103).contains(&from) && (44..=50).contains(&len),
        "{from} {len}"
    );
    let e = p
        .read(&u(&format!("{uri}?offset=0&length=1001")), &small)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooLarge);
    assert!(e.message.contains("length window"), "{}", e.message);
    // head and tail: lines, as the files mount gives them.
    let text = String::from_utf8(log.clone()).unwrap();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let (got, _) = bytes_of(&p, &format!("{uri}?head=3"), &small).await;
    assert_eq!(got, lines[..3].concat().into_bytes());
    let (got, _) = bytes_of(&p, &format!("{uri}?tail=2"), &small).await;
    assert_eq!(got, lines[lines.len() - 2..].concat().into_bytes());
    let (got, _) = bytes_of(&p, &format!("{uri}?offset=0&length=70&head=1"), &small).await;
    assert_eq!(got, lines[0].as_bytes());
    let e = p
        .read(&u(&format!("{uri}?head=1000")), &small)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooLarge);
    let e = p
        .read(&u(&format!("{uri}?tail=1000")), &small)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooLarge);
    // Past the end: an empty window, not an error.
    let (got, _) = bytes_of(&p, &format!("{uri}?offset=999999999"), &small).await;
    assert!(got.is_empty());
    // Bad queries and missing keys.
    for (q, kind) in [
        ("?offset=x", ErrorKind::InvalidParams),
        ("?head=1&tail=1", ErrorKind::InvalidParams),
        ("?after=a", ErrorKind::InvalidParams),
        ("?nope=1", ErrorKind::InvalidParams),
    ] {
        let e = p.read(&u(&format!("{uri}{q}")), &BIG).await.unwrap_err();
        assert_eq!(e.kind, kind, "{q}: {}", e.message);
    }
    let missing = format!("s3://{bucket}/nope.txt");
    let e = p.read(&u(&missing), &BIG).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(e.uri.as_deref(), Some(missing.as_str()));
    let e = p
        .read(&u(&format!("{missing}?offset=1&length=2")), &BIG)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
}

fn window(meta: &Option<serde_json::Map<String, Value>>) -> (u64, u64) {
    let w = &meta.as_ref().expect("window meta")[mcpr_core::window::WINDOW_META_KEY];
    (w["offset"].as_u64().unwrap(), w["length"].as_u64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_reads_and_completion() {
    let Some(m) = moto() else { return };
    let bucket = unique_bucket("dirs");
    create_bucket(&m.endpoint(), &bucket).await;
    let w = writer(&m.endpoint(), &bucket);
    let mut objects = vec![
        ("reports/latest.json".to_string(), b"{}".to_vec()),
        ("reports/2024/q1.csv".to_string(), b"a,b\n".to_vec()),
        ("reports/2024/q2.csv".to_string(), b"a,b\n".to_vec()),
        ("reports/a b/x.txt".to_string(), b"x".to_vec()),
        ("top.txt".to_string(), b"top".to_vec()),
    ];
    for i in 0..1005 {
        objects.push((format!("wide/k{i:04}"), b"w".to_vec()));
    }
    for i in 0..3 {
        objects.push((format!("wide/sub{i}/x"), b"w".to_vec()));
    }
    put_many(&w, objects).await;
    let p = S3Provider::new(config(&m.endpoint(), &bucket))
        .await
        .unwrap();
    let d = json_of(&p, &format!("s3://{bucket}/reports/")).await;
    let names: Vec<&str> = d["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["2024/", "a b/", "latest.json"]);
    assert_eq!(d["truncated"], false);
    let e = &d["entries"][2];
    assert_eq!(e["type"], "file");
    assert_eq!(e["size"], 2);
    assert_eq!(e["uri"], format!("s3://{bucket}/reports/latest.json"));
    assert_eq!(
        d["entries"][1]["uri"],
        format!("s3://{bucket}/reports/a%20b/")
    );
    assert_eq!(d["entries"][1]["type"], "directory");
    // The root, and a nested prefix read through its listed URI.
    let root = json_of(&p, &format!("s3://{bucket}/")).await;
    let names: Vec<&str> = root["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["reports/", "top.txt", "wide/"]);
    let sub = json_of(&p, d["entries"][1]["uri"].as_str().unwrap()).await;
    assert_eq!(sub["entries"][0]["name"], "x.txt");
    // A wide prefix: 1,000 entries, then `next` continues with no gap and no repeat,
    // including past common prefixes.
    let mut seen = Vec::new();
    let mut next = Some(format!("s3://{bucket}/wide/"));
    let mut pages = 0;
    while let Some(uri) = next {
        let d = json_of(&p, &uri).await;
        let entries = d["entries"].as_array().unwrap();
        assert!(entries.len() <= 1000);
        seen.extend(
            entries
                .iter()
                .map(|e| e["name"].as_str().unwrap().to_owned()),
        );
        next = d["next"].as_str().map(str::to_owned);
        assert_eq!(d["truncated"], next.is_some());
        pages += 1;
    }
    assert_eq!(pages, 2);
    let mut want: Vec<String> = (0..1005).map(|i| format!("k{i:04}")).collect();
    want.extend((0..3).map(|i| format!("sub{i}/")));
    assert_eq!(seen, want);
    // `after` a common prefix skips everything under it.
    let d = json_of(&p, &format!("s3://{bucket}/wide/?after=sub0%2F")).await;
    let names: Vec<&str> = d["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sub1/", "sub2/"]);
    // A prefix with nothing under it does not exist; windows do not apply to listings.
    let e = p
        .read(&u(&format!("s3://{bucket}/nothing/")), &BIG)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    let e = p
        .read(&u(&format!("s3://{bucket}/reports/?head=1")), &BIG)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidParams);
    // Completion: keys and prefixes under what was typed, at most 100.
    let complete = |v: &str| {
        let req = CompletionRequest {
            template: format!("s3://{bucket}/{{+key}}"),
            argument: "key".into(),
            value: v.into(),
            context: Default::default(),
        };
        let p = &p;
        async move { p.complete(req).await.unwrap() }
    };
    let c = complete("reports/").await;
    assert_eq!(
        c.values,
        ["reports/2024/", "reports/a b/", "reports/latest.json"]
    );
    assert!(!c.has_more);
    let c = complete("reports/2024/q").await;
    assert_eq!(c.values, ["reports/2024/q1.csv", "reports/2024/q2.csv"]);
    let c = complete("").await;
    assert_eq!(c.values, ["reports/", "top.txt", "wide/"]);
    let c = complete("wide/").await;
    assert_eq!(c.values.len(), 100);
    assert!(c.has_more);
    let c = complete("zzz").await;
    assert!(c.values.is_empty());
}

async fn next_event(
    rx: &mut tokio::sync::broadcast::Receiver<ChangeEvent>,
    within: Duration,
) -> Option<ChangeEvent> {
    tokio::time::timeout(within, rx.recv())
        .await
        .ok()
        .and_then(Result::ok)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overwrite_new_key_and_deletion_notify() {
    let Some(m) = moto() else { return };
    let bucket = unique_bucket("notify");
    create_bucket(&m.endpoint(), &bucket).await;
    let w = writer(&m.endpoint(), &bucket);
    put(&w, "watched.txt", b"v1").await;
    put(&w, "quiet.txt", b"q").await;
    let p = Arc::new(
        S3Provider::new(config(&m.endpoint(), &bucket))
            .await
            .unwrap(),
    );
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let uri = format!("s3://{bucket}/watched.txt");
    let g1 = p
        .watch(&u(&uri), ChangeSink::new(bus.clone(), "m1"))
        .await
        .unwrap();
    // A second subscriber to the same URI shares the poller: still one event per change.
    let g2 = p
        .watch(&u(&uri), ChangeSink::new(bus.clone(), "m1"))
        .await
        .unwrap();
    // Nothing changed: silence over several intervals.
    assert!(
        next_event(&mut rx, Duration::from_millis(600))
            .await
            .is_none()
    );
    put(&w, "quiet.txt", b"other key").await;
    assert!(
        next_event(&mut rx, Duration::from_millis(600))
            .await
            .is_none()
    );
    // An overwrite is an update.
    put(&w, "watched.txt", b"v2").await;
    match next_event(&mut rx, Duration::from_secs(3)).await {
        Some(ChangeEvent::Updated { uri: got }) => assert_eq!(got, uri),
        other => panic!("expected an update, got {other:?}"),
    }
    drop(g1);
    // A deletion is an update too.
    delete(&w, "watched.txt").await;
    match next_event(&mut rx, Duration::from_secs(3)).await {
        Some(ChangeEvent::Updated { uri: got }) => assert_eq!(got, uri),
        other => panic!("expected an update for the deletion, got {other:?}"),
    }
    drop(g2);
    // The list: a new key, then a deleted one, each a list_changed; an overwrite is not.
    let g = p
        .watch_list(ChangeSink::new(bus.clone(), "m4"))
        .await
        .unwrap();
    while rx.try_recv().is_ok() {}
    put(&w, "quiet.txt", b"overwritten").await;
    assert!(
        next_event(&mut rx, Duration::from_millis(600))
            .await
            .is_none()
    );
    put(&w, "new.txt", b"n").await;
    match next_event(&mut rx, Duration::from_secs(3)).await {
        Some(ChangeEvent::ListChanged { mount }) => assert_eq!(mount, "m4"),
        other => panic!("expected list_changed, got {other:?}"),
    }
    delete(&w, "new.txt").await;
    match next_event(&mut rx, Duration::from_secs(3)).await {
        Some(ChangeEvent::ListChanged { .. }) => {}
        other => panic!("expected list_changed for the deletion, got {other:?}"),
    }
    drop(g);
    tokio::time::sleep(Duration::from_millis(300)).await;
    while rx.try_recv().is_ok() {}
    put(&w, "after.txt", b"a").await;
    assert!(
        next_event(&mut rx, Duration::from_millis(600))
            .await
            .is_none()
    );
}

/// Change tokens come from the poll of a subscribed object: stable while it is unchanged
/// (rewritten with the same bytes included: the ETag is the same), another after a change
/// the watch reported, `absent` once it is deleted, and none for what nobody subscribes to,
/// a prefix listing or a denied key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_tokens_follow_the_poll_of_a_subscribed_object() {
    let Some(m) = moto() else { return };
    let bucket = unique_bucket("tokens");
    create_bucket(&m.endpoint(), &bucket).await;
    let w = writer(&m.endpoint(), &bucket);
    put(&w, "dir/watched.txt", b"v1").await;
    put(&w, "dir/quiet.txt", b"q").await;
    put(&w, "dir/.env", b"SECRET=1").await;
    let p = S3Provider::new(config(&m.endpoint(), &bucket))
        .await
        .unwrap();
    let uri = format!("s3://{bucket}/dir/watched.txt");
    for unwatched in [
        uri.clone(),
        format!("s3://{bucket}/dir/"),
        format!("s3://{bucket}/dir/.env"),
    ] {
        assert_eq!(p.change_token(&u(&unwatched)).await, None, "{unwatched}");
    }
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let g = p
        .watch(&u(&uri), ChangeSink::new(bus.clone(), "m1"))
        .await
        .unwrap();
    let t1 = p.change_token(&u(&uri)).await.expect("a subscribed object");
    assert_eq!(p.change_token(&u(&uri)).await.as_ref(), Some(&t1));
    // A window of the object is the same poll, so the same state.
    assert_eq!(
        p.change_token(&u(&format!("{uri}?head=1"))).await.as_ref(),
        Some(&t1)
    );
    assert!(!t1.contains("v1") && t1.len() == 32, "{t1}");
    // Another key written, and this one written again with the same bytes: no change.
    put(&w, "dir/quiet.txt", b"other").await;
    put(&w, "dir/watched.txt", b"v1").await;
    assert!(
        next_event(&mut rx, Duration::from_millis(700))
            .await
            .is_none()
    );
    assert_eq!(p.change_token(&u(&uri)).await.as_ref(), Some(&t1));
    put(&w, "dir/watched.txt", b"v2").await;
    assert!(matches!(
        next_event(&mut rx, Duration::from_secs(3)).await,
        Some(ChangeEvent::Updated { .. })
    ));
    let t2 = p.change_token(&u(&uri)).await.expect("still subscribed");
    assert_ne!(t2, t1);
    delete(&w, "dir/watched.txt").await;
    assert!(matches!(
        next_event(&mut rx, Duration::from_secs(3)).await,
        Some(ChangeEvent::Updated { .. })
    ));
    assert_eq!(p.change_token(&u(&uri)).await.as_deref(), Some("absent"));
    drop(g);
    assert_eq!(p.change_token(&u(&uri)).await, None, "nobody subscribes");
}

/// Regression: a folder marker (`reports/`) was listed as `reports`, a URI that then read as
/// not found, and a key with an empty or `.` segment failed its whole listing page. Now
/// markers are the prefix's listing (not resources), and keys object_store cannot represent
/// are skipped, counted, and never fail a page, at any page size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folder_markers_and_unservable_keys_never_fail_a_page() {
    let Some(m) = moto() else { return };
    let bucket = unique_bucket("odd");
    create_bucket(&m.endpoint(), &bucket).await;
    for (raw, body) in [
        ("good/1.txt", &b"one"[..]),
        ("a//b", b"x"),
        ("a/./b", b"x"),
        ("a/../c", b"x"),
        ("/lead", b"x"),
        ("ctl%01x", b"x"),
        ("reports/", b""),
        ("reports/q1.csv", b"a,b\n"),
        ("empty-folder/", b""),
        ("z.txt", b"z"),
    ] {
        m.put(&bucket, raw, body);
    }
    let p = S3Provider::new(config(&m.endpoint(), &bucket))
        .await
        .unwrap();
    let want = ["good/1.txt", "reports/q1.csv", "z.txt"];
    for limit in [1, 2, 1000] {
        let mut names = Vec::new();
        let mut after = None;
        for page in 0.. {
            assert!(page < 20, "page size {limit}: the listing does not end");
            let r = p
                .list(PageRequest {
                    after: after.clone(),
                    limit,
                })
                .await
                .unwrap_or_else(|e| panic!("page size {limit}, page {page}: {e}"));
            names.extend(r.items.into_iter().map(|i| i.name));
            match r.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(names, want, "page size {limit}");
    }
    let skipped = p
        .counters()
        .into_iter()
        .find(|c| c.name == "mcpr_s3_keys_skipped_total")
        .unwrap();
    assert!(skipped.value >= 5, "skipped keys are counted: {skipped:?}");
    // The marker's URI is the prefix's listing; the marker itself is not an entry.
    let d = json_of(&p, &format!("s3://{bucket}/reports/")).await;
    assert_eq!(d["entries"].as_array().unwrap().len(), 1);
    assert_eq!(d["entries"][0]["name"], "q1.csv");
    // A marker alone makes an (empty) folder that exists.
    let d = json_of(&p, &format!("s3://{bucket}/empty-folder/")).await;
    assert_eq!(d["entries"].as_array().unwrap().len(), 0);
    let root = json_of(&p, &format!("s3://{bucket}/")).await;
    let names: Vec<&str> = root["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a/", "empty-folder/", "good/", "reports/", "z.txt"]);
    for missing in ["reports", "a//b", "a/./b"] {
        let e = p
            .read(&u(&format!("s3://{bucket}/{missing}")), &BIG)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{missing}: {e}");
    }
    let c = p
        .complete(CompletionRequest {
            template: format!("s3://{bucket}/{{+key}}"),
            argument: "key".into(),
            value: "reports/".into(),
            context: Default::default(),
        })
        .await
        .unwrap();
    assert_eq!(c.values, ["reports/q1.csv"]);
}

/// Reads report the stored Content-Type (it decides text or blob too); a listing, which
/// carries no Content-Type, gives the extension's type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_report_the_stored_content_type() {
    let Some(m) = moto() else { return };
    let bucket = unique_bucket("ctype");
    create_bucket(&m.endpoint(), &bucket).await;
    let w = writer(&m.endpoint(), &bucket);
    common::put_typed(&w, "data.bin", b"{\"a\":1}", "application/json").await;
    common::put_typed(&w, "notes", b"# hi\n", "text/markdown; charset=utf-8").await;
    common::put_typed(&w, "pic.txt", b"ok", "image/png").await;
    put(&w, "plain.csv", b"a,b\n").await;
    let p = S3Provider::new(config(&m.endpoint(), &bucket))
        .await
        .unwrap();
    let read = |key: &'static str| {
        let p = &p;
        let bucket = &bucket;
        async move {
            let c = p
                .read(&u(&format!("s3://{bucket}/{key}")), &BIG)
                .await
                .unwrap()
                .contents
                .remove(0);
            (
                c.mime_type.unwrap(),
                matches!(c.body, ContentsBody::Text(_)),
            )
        }
    };
    assert_eq!(read("data.bin").await, ("application/json".into(), true));
    assert_eq!(
        read("notes").await,
        ("text/markdown; charset=utf-8".into(), true)
    );
    assert_eq!(read("pic.txt").await, ("image/png".into(), false));
    // No stored type (moto's default `binary/octet-stream`): the extension's.
    assert_eq!(read("plain.csv").await, ("text/csv".into(), true));
    let listed = p
        .list(PageRequest {
            after: None,
            limit: 10,
        })
        .await
        .unwrap();
    let types: Vec<(String, Option<String>)> = listed
        .items
        .into_iter()
        .map(|i| (i.name, i.mime_type))
        .collect();
    assert_eq!(
        types,
        [
            ("data.bin".into(), Some("application/octet-stream".into())),
            ("notes".into(), None),
            ("pic.txt".into(), Some("text/plain".into())),
            ("plain.csv".into(), Some("text/csv".into())),
        ]
    );
}

/// The default deny rules and the mount's `deny` apply to keys as to files: `public/.env`,
/// keys and credentials are not listed, read, shown in prefix listings, completed or watched,
/// and each answer is exactly the one a missing key gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_keys_answer_as_missing_everywhere() {
    use mcpr_core::Error;

    let Some(m) = moto() else { return };
    let bucket = unique_bucket("deny");
    create_bucket(&m.endpoint(), &bucket).await;
    let w = writer(&m.endpoint(), &bucket);
    for key in [
        "README.md",
        "public/.env",
        "public/report.csv",
        "certs/server.pem",
        "certs/Deploy.PEM",
        "certs/ca.txt",
        "home/.ssh/authorized_keys",
        "home/id_rsa",
        "home/notes.md",
        "exports/raw/a.csv",
        "exports/ok.csv",
    ] {
        put(&w, key, b"data").await;
    }
    let mut cfg = config(&m.endpoint(), &bucket);
    cfg.deny = vec!["exports/raw/".into()];
    let p = S3Provider::new(cfg).await.unwrap();
    let b = &bucket;

    for key in [
        "public/.env",
        "certs/server.pem",
        "certs/Deploy.PEM",
        "home/.ssh/authorized_keys",
        "home/.ssh/",
        "home/id_rsa",
        "exports/raw/a.csv",
        "exports/raw/",
        "public/.env?head=1",
    ] {
        let uri = format!("s3://{b}/{key}");
        let e = p.read(&u(&uri), &BIG).await.unwrap_err();
        assert_eq!(e, Error::not_found(&uri), "{uri}");
        let missing = format!("s3://{b}/public/nothing-{key}");
        let me = p.read(&u(&missing), &BIG).await.unwrap_err();
        assert_eq!(me.kind, e.kind, "{uri} vs {missing}");
    }
    let (body, _) = bytes_of(&p, &format!("s3://{b}/public/report.csv"), &BIG).await;
    assert_eq!(body, b"data");

    // The listing, page by page.
    let mut names = Vec::new();
    let mut after = None;
    loop {
        let page = p.list(PageRequest { after, limit: 2 }).await.unwrap();
        names.extend(page.items.into_iter().map(|i| i.name));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(
        names,
        [
            "README.md",
            "certs/ca.txt",
            "exports/ok.csv",
            "home/notes.md",
            "public/report.csv"
        ]
    );

    // Prefix listings.
    let entries = |d: Value| -> Vec<String> {
        d["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        entries(json_of(&p, &format!("s3://{b}/home/")).await),
        ["notes.md"]
    );
    assert_eq!(
        entries(json_of(&p, &format!("s3://{b}/certs/")).await),
        ["ca.txt"]
    );
    assert_eq!(
        entries(json_of(&p, &format!("s3://{b}/exports/")).await),
        ["ok.csv"]
    );
    assert_eq!(
        entries(json_of(&p, &format!("s3://{b}/public/")).await),
        ["report.csv"]
    );

    // Completion.
    let complete = |v: &str| {
        let req = CompletionRequest {
            template: format!("s3://{b}/{{+key}}"),
            argument: "key".into(),
            value: v.into(),
            context: Default::default(),
        };
        let p = &p;
        async move { p.complete(req).await.unwrap().values }
    };
    assert_eq!(complete("public/").await, ["public/report.csv"]);
    assert_eq!(complete("public/.e").await, Vec::<String>::new());
    assert_eq!(complete("home/").await, ["home/notes.md"]);
    assert_eq!(complete("home/.ssh/").await, Vec::<String>::new());
    assert_eq!(complete("exports/").await, ["exports/ok.csv"]);

    // Subscriptions, and the watched listing.
    let bus = Arc::new(LocalBus::default());
    let uri = format!("s3://{b}/public/.env");
    let e = p
        .watch(&u(&uri), ChangeSink::new(bus.clone(), "m0"))
        .await
        .map(drop)
        .unwrap_err();
    assert_eq!(e, Error::not_found(&uri));
    let mut rx = bus.subscribe();
    let _g = p
        .watch_list(ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    while rx.try_recv().is_ok() {}
    put(&w, "public/.env.local", b"SECRET").await;
    put(&w, "certs/new.key", b"k").await;
    assert_eq!(next_event(&mut rx, Duration::from_millis(900)).await, None);
    put(&w, "public/new.csv", b"n").await;
    match next_event(&mut rx, Duration::from_secs(3)).await {
        Some(ChangeEvent::ListChanged { mount }) => assert_eq!(mount, "m0"),
        other => panic!("expected list_changed, got {other:?}"),
    }
}
