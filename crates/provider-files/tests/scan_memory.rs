//! Issue #20 item 5: `completion/complete` (and a directory read) in a huge directory used to
//! read and sort the whole directory per call, so 200 pipelined calls held 1.7 GB. Each call
//! now keeps only what it answers. Counted, not timed: each call runs first thing in a fresh
//! child process, and the growth of its peak RSS (`VmHWM`) across the call is compared with
//! what holding every name would cost.

use std::collections::BTreeMap;

use mcpr_core::{CompletionRequest, ContentsBody, Provider, ReadLimits, ResourceUri};
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};

const CHILD: &str = "MCPR_TEST_ITEM5_CHILD";
const TEST: &str = "completion_and_directory_read_in_a_huge_directory_keep_only_their_answer";

/// Peak resident set size of this process, in bytes.
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: usize = line["VmHWM:".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    kib * 1024
}

const FILES: usize = 60_000;

/// A long name: collecting all of them costs FILES × ~250 bytes (about 15 MB).
fn name(i: usize) -> String {
    format!("entry-{i:06}-{}.txt", "x".repeat(200))
}

/// The parent: builds the directory once, then runs each operation in its own child.
#[test]
fn completion_and_directory_read_in_a_huge_directory_keep_only_their_answer() {
    if let Some(op) = std::env::var_os(CHILD) {
        let dir = std::env::var_os("MCPR_TEST_ITEM5_ROOT").unwrap();
        return child(op.to_str().unwrap(), std::path::Path::new(&dir));
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let big = root.join("big");
    std::fs::create_dir(&big).unwrap();
    for i in 0..FILES {
        std::fs::File::create(big.join(name(i))).unwrap();
    }
    // Denied and hidden names are neither offered nor counted.
    std::fs::File::create(big.join("entry-000000-a.pem")).unwrap();
    std::fs::File::create(big.join(".entry-hidden")).unwrap();
    for op in ["complete", "read"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, op)
            .env("MCPR_TEST_ITEM5_ROOT", &root)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{op} child failed:\n{stdout}\n{stderr}"
        );
    }
}

/// One operation on the prepared directory, measured from a process that has done nothing
/// else yet.
fn child(op: &str, root: &std::path::Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let p = FilesProvider::new(FilesConfig::new(root)).unwrap();
    let all_names = FILES * name(0).len();
    let big = root.join("big");
    let before = peak_rss();
    match op {
        "complete" => {
            let template = p.templates()[0].uri_template.clone();
            assert!(template.ends_with("/{+path}"), "{template}");
            let req = CompletionRequest {
                template,
                argument: "path".into(),
                value: "big/entry-".into(),
                context: BTreeMap::new(),
            };
            let c = rt.block_on(p.complete(req)).unwrap();
            let grew = peak_rss() - before;
            // The same answer as sorting the whole directory: the first 100 names, in order.
            let want: Vec<String> = (0..100).map(|i| format!("big/{}", name(i))).collect();
            assert_eq!(c.values, want);
            assert_eq!(c.total, Some(FILES as u32));
            assert!(c.has_more);
            assert!(
                grew < 4 << 20,
                "one completion grew the peak RSS by {grew} bytes; the names alone are {all_names}"
            );
        }
        "read" => {
            let uri = ResourceUri::parse(&encode_path_uri(&big)).unwrap();
            let limits = ReadLimits { max_bytes: 8 << 20 };
            let r = rt.block_on(p.read(&uri, &limits)).unwrap().contents;
            let grew = peak_rss() - before;
            let ContentsBody::Text(text) = &r[0].body else {
                panic!("a directory reads as text")
            };
            let doc: serde_json::Value = serde_json::from_str(text).unwrap();
            let entries = doc["entries"].as_array().unwrap();
            assert_eq!(entries.len(), 1000);
            assert_eq!(entries[0]["name"], name(0));
            assert_eq!(entries[999]["name"], name(999));
            assert_eq!(doc["truncated"], true);
            let next = doc["next"].as_str().unwrap();
            assert!(next.ends_with(&format!("?after={}", name(999))), "{next}");
            // 1000 entries of JSON are about 0.5 MB.
            assert!(
                grew < 6 << 20,
                "one directory read grew the peak RSS by {grew} bytes; the names alone are {all_names}"
            );
        }
        other => panic!("unknown operation {other}"),
    }
}
