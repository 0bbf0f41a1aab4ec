//! What an attacker's probe of the files provider found (issue #20), each test named for
//! what it shows. Those that need the provider's internals are unit tests beside the code
//! (`watch.rs`, `list.rs`, `complete.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeSink, ErrorKind, LocalBus, Provider, ReadLimits, ResourceUri,
};
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};

fn provider(root: &Path) -> FilesProvider {
    let mut cfg = FilesConfig::new(root);
    cfg.debounce = Duration::ZERO;
    FilesProvider::new(cfg).unwrap()
}

fn parse(s: &str) -> ResourceUri {
    ResourceUri::parse(s).unwrap()
}

/// A field of `/proc/self/<file>` such as `rchar:` (bytes read) or `VmHWM:` (peak RSS, kB).
fn proc_self_field(file: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/self/{file}")).unwrap();
    let line = text.lines().find(|l| l.starts_with(key)).unwrap();
    line[key.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

const ITEM1_CHILD: &str = "MCPR_TEST_ITEM1_CHILD";

/// Item 1: `?head=N` (alone or after `offset`) on a 3 GiB file without a newline used to
/// read the whole file into memory before checking the limit. Now the scan stops at
/// `max_read_bytes`: the read fails with TooLarge having read about the limit, not 3 GiB.
///
/// Counted in a child process running only this test, so `rchar` (bytes the process read)
/// and `VmHWM` (its peak RSS) are this test's alone.
#[test]
fn head_window_without_newline_stops_at_the_read_limit() {
    if std::env::var_os(ITEM1_CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "head_window_without_newline_stops_at_the_read_limit",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ITEM1_CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child failed:\n{stdout}\n{stderr}"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let big = root.join("huge.log");
    // Sparse: 3 GiB of zero bytes and not one newline, costing no disk.
    std::fs::File::create(&big)
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    let p = provider(&root);
    let limit = 1 << 20;
    let limits = ReadLimits { max_bytes: limit };
    let base = encode_path_uri(&big);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let queries = [
        "head=1",
        "offset=1000&head=1",
        "offset=1000&length=3000000000&head=2",
    ];
    let before = proc_self_field("io", "rchar:");
    for q in queries {
        let err = rt
            .block_on(p.read(&parse(&format!("{base}?{q}")), &limits))
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::TooLarge, "{q}: {err}");
        assert!(
            err.message.contains("head window") && err.message.contains(&limit.to_string()),
            "{q}: {}",
            err.message
        );
    }
    let read = proc_self_field("io", "rchar:") - before;
    // Each read may fill one 64 KiB buffer past the limit; 8 MiB of slack for anything
    // else the process reads. The old code read 3 × 3 GiB.
    let allowed = queries.len() as u64 * (limit + 64 * 1024) + (8 << 20);
    assert!(
        read <= allowed,
        "read {read} bytes for {} head windows, more than {allowed}",
        queries.len()
    );
    let peak_kib = proc_self_field("status", "VmHWM:");
    assert!(
        peak_kib < 256 * 1024,
        "peak RSS {peak_kib} KiB: the window was held in memory"
    );
}

/// Item 7: deny patterns match at any depth (`.docker/config.json` was anchored to the
/// root) and ignore case (`SERVER.PEM`, `Credentials.json`, `.ENV` were served).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_rules_ignore_case_and_match_at_any_depth() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let denied = [
        ".docker/config.json",
        "home/u/.docker/config.json",
        "home/u/.DOCKER/Config.JSON",
        "SERVER.PEM",
        "certs/Server.Pem",
        "Credentials.json",
        "gcp/CREDENTIALS.JSON",
        ".ENV",
        ".Env.local",
        "Id_RSA",
        "x/.SSH/known_hosts",
        "data/Big.SQLITE",
    ];
    let served = ["home/u/.docker/other.json", "server.pem.txt", "notes.md"];
    for rel in denied.iter().chain(&served) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "secret").unwrap();
    }
    let mut cfg = FilesConfig::new(&root);
    // With dot-files served, only the deny list stands between them and a client.
    cfg.hidden = true;
    cfg.deny = vec!["*.sqlite".into()];
    let p = FilesProvider::new(cfg).unwrap();
    let limits = ReadLimits { max_bytes: 1 << 20 };
    for rel in denied {
        let uri = encode_path_uri(&root.join(rel));
        let err = p.read(&parse(&uri), &limits).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound, "{rel} was served");
    }
    for rel in served {
        let uri = encode_path_uri(&root.join(rel));
        p.read(&parse(&uri), &limits)
            .await
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
    }
    // Nor listed.
    let mut listed = Vec::new();
    let mut after = None;
    loop {
        let page = p
            .list(mcpr_core::PageRequest {
                after: after.clone(),
                limit: 100,
            })
            .await
            .unwrap();
        listed.extend(page.items.into_iter().map(|m| m.uri));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    let mut want: Vec<String> = served
        .iter()
        .map(|r| encode_path_uri(&root.join(r)))
        .collect();
    want.sort();
    listed.sort();
    assert_eq!(listed, want);
}

/// Item 12: a directory subscription reported `updated` when a denied file in it changed;
/// only entries the directory read shows may count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_subscription_ignores_denied_and_hidden_entries() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("d/secret.pem"), "k1").unwrap();
    std::fs::write(root.join("d/.hidden"), "h1").unwrap();
    std::fs::write(root.join("d/notes.txt"), "n1").unwrap();
    std::fs::create_dir(root.join("d/.ssh")).unwrap();
    let p = provider(&root);
    let bus = Arc::new(LocalBus::default());
    let mut rx = bus.subscribe();
    let d_uri = encode_path_uri(&root.join("d"));
    let _g = p
        .watch(&parse(&d_uri), ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    // Let the watch settle, then change only what the directory read does not show.
    tokio::time::sleep(Duration::from_millis(100)).await;
    while rx.try_recv().is_ok() {}
    std::fs::write(root.join("d/secret.pem"), "k2, longer").unwrap();
    std::fs::write(root.join("d/.hidden"), "h2, longer").unwrap();
    std::fs::write(root.join("d/new.key"), "k").unwrap();
    std::fs::remove_file(root.join("d/new.key")).unwrap();
    std::fs::create_dir(root.join("d/.ssh/sub")).unwrap();
    std::fs::rename(root.join("d/secret.pem"), root.join("d/renamed.pem")).unwrap();
    let leaked = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await;
    assert!(
        leaked.is_err(),
        "a change of a denied or hidden entry was reported: {leaked:?}"
    );
    // A visible entry still counts (so the silence above is not a dead watch).
    std::fs::write(root.join("d/notes.txt"), "n2, longer").unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(3), rx.recv())
        .await
        .expect("a visible change must be reported")
        .unwrap();
    assert_eq!(ev, ChangeEvent::Updated { uri: d_uri.clone() });
    // A visible name appearing counts too.
    while rx.try_recv().is_ok() {}
    std::fs::write(root.join("d/added.txt"), "a").unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(3), rx.recv())
        .await
        .expect("a new visible entry must be reported")
        .unwrap();
    assert_eq!(ev, ChangeEvent::Updated { uri: d_uri });
}

/// Item 9: a directory read racing the directory being swapped for a symlink to a denied
/// directory listed that directory's names (66 of 7,500 reads). A thread swaps `pub`
/// between a real directory and a link to `.ssh` while directory reads run; no answer may
/// name what is in `.ssh`. (`list.rs` has the same race made deterministic.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_read_racing_a_swap_to_a_denied_link_lists_nothing_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("pub")).unwrap();
    std::fs::write(root.join("pub/public.txt"), "p").unwrap();
    std::fs::create_dir(root.join(".ssh")).unwrap();
    std::fs::write(root.join(".ssh/secret_known_hosts"), "s").unwrap();
    std::os::unix::fs::symlink(".ssh", root.join("pub.link")).unwrap();
    let p = provider(&root);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (root, stop) = (root.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // pub: directory → link → directory, each step one atomic rename.
                std::fs::rename(root.join("pub"), root.join("pub.dir")).unwrap();
                std::fs::rename(root.join("pub.link"), root.join("pub")).unwrap();
                std::fs::rename(root.join("pub"), root.join("pub.link")).unwrap();
                std::fs::rename(root.join("pub.dir"), root.join("pub")).unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let uri = parse(&encode_path_uri(&root.join("pub")));
    let limits = ReadLimits { max_bytes: 1 << 20 };
    let (mut listed, mut leaked) = (0, 0);
    for _ in 0..3000 {
        if let Ok(c) = p.read(&uri, &limits).await {
            let mcpr_core::ContentsBody::Text(t) = &c.contents[0].body else {
                panic!("a directory reads as text")
            };
            listed += 1;
            if t.contains("secret_known_hosts") {
                leaked += 1;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert_eq!(
        leaked, 0,
        "{leaked} of {listed} directory reads listed .ssh"
    );
    assert!(swaps > 0 && listed > 0, "swaps {swaps}, listed {listed}");
}
