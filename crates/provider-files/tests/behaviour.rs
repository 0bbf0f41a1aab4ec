//! The provider behaviour suite against a real directory tree, plus the sandbox escapes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use mcpr_core::{ErrorKind, PageRequest, Provider, ReadLimits, ResourceUri};
use mcpr_provider_files::{FilesConfig, FilesProvider, ListWatchMode, encode_path_uri};
use mcpr_testkit::{Fixture, default_malformed_positions, run_suite};

struct Tree {
    root: PathBuf,
    files: Vec<(PathBuf, Vec<u8>)>,
}

fn uri(p: &Path) -> String {
    encode_path_uri(p)
}

impl Tree {
    fn new(dir: &Path) -> Self {
        let root = dir.canonicalize().unwrap();
        let mut files = Vec::new();
        let mut put = |rel: &str, bytes: &[u8]| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, bytes).unwrap();
            files.push((p, bytes.to_vec()));
        };
        put("README.md", b"# hello\n");
        put("My Notes.md", "notes with ünïcödé\n".as_bytes());
        put("a/b/c.txt", b"deep\n");
        put("a/b/d #1?.txt", b"odd name\n");
        put("bin/blob.bin", &[0, 159, 146, 150, 255, 0, 1]);
        for i in 0..25 {
            put(&format!("many/f{i:03}.txt"), format!("{i}\n").as_bytes());
        }
        // Present but never served.
        for (rel, bytes) in [
            (".env", "SECRET=1"),
            ("keys/server.pem", "x"),
            (".git/config", "[core]"),
            ("id_rsa", "k"),
            ("ignored/x.log", "l"),
        ] {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
        std::fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
        Self { root, files }
    }
}

#[async_trait]
impl Fixture for Tree {
    fn expected(&self) -> Vec<(String, Vec<u8>)> {
        self.files
            .iter()
            .map(|(p, b)| (uri(p), b.clone()))
            .collect()
    }
    fn missing_uri(&self) -> String {
        uri(&self.root.join("nope.txt"))
    }
    fn forbidden_uris(&self) -> Vec<String> {
        let r = uri(&self.root);
        vec![
            format!("{r}/.env"),
            format!("{r}/keys/server.pem"),
            format!("{r}/.git/config"),
            format!("{r}/id_rsa"),
            format!("{r}/../etc/passwd"),
            format!("{r}/%2e%2e/%2e%2e/etc/passwd"),
            format!("{r}/a%2Fb%2Fc.txt"),
            format!("{r}/a%00"),
            format!("{r}/{}", "x".repeat(300)),
            format!("{r}-evil/secret.txt"),
            "file:///etc/passwd".into(),
        ]
    }
    async fn modify(&self, uri_s: &str) {
        let (p, _) = self
            .files
            .iter()
            .find(|(p, _)| uri(p) == uri_s)
            .expect("known file");
        std::fs::write(p, format!("changed {:?}\n", std::time::SystemTime::now())).unwrap();
    }
    async fn add(&self) -> String {
        let p = self.root.join("a/new-file.txt");
        std::fs::write(&p, b"new").unwrap();
        uri(&p)
    }
    fn completion_case(&self) -> Option<(String, String, String, String)> {
        Some((
            format!("{}/{{+path}}", uri(&self.root)),
            "path".into(),
            "a/b/".into(),
            "a/b/c.txt".into(),
        ))
    }
    fn malformed_positions(&self) -> Vec<Vec<u8>> {
        // A position is a root-relative path; these are not paths a walk can produce.
        let mut v = default_malformed_positions();
        v.extend([
            b"a//b".to_vec(),
            b"/README.md".to_vec(),
            b"../etc/passwd".to_vec(),
            b"a/./b".to_vec(),
            b"a/".to_vec(),
            "a/".repeat(3000).into_bytes(),
        ]);
        v
    }
    fn unknown_positions(&self) -> Vec<(Vec<u8>, Option<String>)> {
        // Paths that name nothing resume at the next path in byte order.
        let at = |rel: &str| Some(uri(&self.root.join(rel)));
        vec![
            (b"a/b/c.txu".to_vec(), at("a/b/d #1?.txt")),
            (b"a/zz".to_vec(), at("bin/blob.bin")),
            (b"many/f010.txtx".to_vec(), at("many/f011.txt")),
            (b"deleted-dir/x".to_vec(), at("many/f000.txt")),
            (b"zzz".to_vec(), None),
        ]
    }
    fn directories(&self) -> Vec<String> {
        vec![uri(&self.root)]
    }
    fn change_tokens(&self) -> bool {
        true
    }
}

/// A FIFO at `path` (`mkfifo(1)`).
fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

fn provider(root: &Path) -> Arc<dyn Provider> {
    let mut cfg = FilesConfig::new(root);
    cfg.debounce = std::time::Duration::from_millis(20);
    Arc::new(FilesProvider::new(cfg).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behaviour_suite() {
    let dir = tempfile::tempdir().unwrap();
    let tree = Tree::new(dir.path());
    // The out-of-root target for the sibling-prefix case must exist to prove it is refused.
    let evil = PathBuf::from(format!("{}-evil", tree.root.display()));
    std::fs::create_dir_all(&evil).unwrap();
    std::fs::write(evil.join("secret.txt"), "no").unwrap();
    run_suite(provider(&tree.root), &tree).await;
    std::fs::remove_dir_all(evil).unwrap();
}

/// With list watching off the mount does not declare `list_changed`: the suite then checks
/// that `watch_list` answers unsupported, and everything else as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behaviour_suite_without_list_watch() {
    let dir = tempfile::tempdir().unwrap();
    let tree = Tree::new(dir.path());
    let mut cfg = FilesConfig::new(&tree.root);
    cfg.debounce = std::time::Duration::from_millis(20);
    cfg.list_watch = ListWatchMode::Off;
    let p: Arc<dyn Provider> = Arc::new(FilesProvider::new(cfg).unwrap());
    assert!(!p.info().capabilities.list_changed);
    run_suite(p, &tree).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_inside_followed_outside_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("real.txt"), "inside").unwrap();
    std::fs::write(root.join(".env"), "SECRET").unwrap();
    std::fs::write(outside.path().join("secret.txt"), "outside").unwrap();
    std::os::unix::fs::symlink("real.txt", root.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("escape.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("escape-dir")).unwrap();
    std::os::unix::fs::symlink(".env", root.join("innocent.txt")).unwrap();
    let p = provider(&root);
    let limits = ReadLimits { max_bytes: 1 << 20 };
    let read = |name: &str| {
        let u = ResourceUri::parse(&format!("{}/{name}", uri(&root))).unwrap();
        let p = p.clone();
        async move { p.read(&u, &limits).await }
    };
    assert!(read("link.txt").await.is_ok());
    for bad in ["escape.txt", "escape-dir/secret.txt", "innocent.txt"] {
        assert_eq!(
            read(bad).await.unwrap_err().kind,
            ErrorKind::NotFound,
            "{bad}"
        );
    }
    let page = p
        .list(PageRequest {
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    let names: Vec<_> = page.items.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, vec!["link.txt", "real.txt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_neither_listed_nor_hangs_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    let fifo = root.join("pipe");
    mkfifo(&fifo);
    let p = provider(&root);
    let page = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        p.list(PageRequest {
            after: None,
            limit: 10,
        }),
    )
    .await
    .expect("list must not hang on a FIFO")
    .unwrap();
    assert_eq!(page.items.len(), 1);
    let u = ResourceUri::parse(&uri(&fifo)).unwrap();
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        p.read(&u, &ReadLimits { max_bytes: 1024 }),
    )
    .await
    .expect("read must not hang on a FIFO")
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound);
}

/// A path read before is read again without a `statx` of the path, against what was seen
/// then (issue #32): every way that can go stale must still read what the path holds now, or
/// refuse it as before. Each change is made after a read that kept the path's identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_read_before_is_read_afresh_after_every_kind_of_change() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let f = root.join("f.txt");
    std::fs::write(outside.path().join("secret.txt"), "outside!!").unwrap();
    let p = provider(&root);
    let u = ResourceUri::parse(&uri(&f)).unwrap();
    let limits = ReadLimits { max_bytes: 1 << 20 };
    let read = || async {
        tokio::time::timeout(std::time::Duration::from_secs(5), p.read(&u, &limits))
            .await
            .expect("a read must not hang")
    };
    let text =
        |r: mcpr_core::Result<mcpr_core::ReadOutput>| match r.unwrap().contents[0].body.clone() {
            mcpr_core::ContentsBody::Text(t) => t,
            other => panic!("not text: {other:?}"),
        };
    // Each step: put the first version, read it twice (the second read uses what the first
    // kept), change the path, and read what it holds now.
    let fresh = |s: &str| {
        let _ = std::fs::remove_file(&f);
        std::fs::write(&f, s).unwrap();
    };
    fresh("version 1");
    assert_eq!(text(read().await), "version 1");
    assert_eq!(text(read().await), "version 1");

    // Rewritten in place, same length.
    std::fs::write(&f, "version 2").unwrap();
    assert_eq!(text(read().await), "version 2");
    assert_eq!(text(read().await), "version 2");

    // Replaced by rename (another inode), same length.
    std::fs::write(root.join("next"), "version 3").unwrap();
    std::fs::rename(root.join("next"), &f).unwrap();
    assert_eq!(text(read().await), "version 3");

    // Grown past the inline size: read whole by the general path.
    let big = "x".repeat(300 * 1024);
    std::fs::write(&f, &big).unwrap();
    assert_eq!(text(read().await).len(), big.len());
    fresh("version 4");
    assert_eq!(text(read().await), "version 4");
    assert_eq!(text(read().await), "version 4");

    // Deleted.
    std::fs::remove_file(&f).unwrap();
    assert_eq!(read().await.unwrap_err().kind, ErrorKind::NotFound);

    // A path read once (its identity kept) and then taken away, for what comes in its place.
    macro_rules! kept_then_removed {
        ($s:expr) => {{
            fresh($s);
            assert_eq!(text(read().await), $s);
            std::fs::remove_file(&f).unwrap();
        }};
    }
    let mkfifo = || {
        let made = std::process::Command::new("mkfifo").arg(&f).status();
        assert!(made.unwrap().success());
    };

    // A link out of the root, then a link to a denied file, in its place.
    kept_then_removed!("version 5");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), &f).unwrap();
    assert_eq!(read().await.unwrap_err().kind, ErrorKind::NotFound);
    std::fs::write(root.join(".env"), "SECRET=1!").unwrap();
    std::fs::remove_file(&f).unwrap();
    std::os::unix::fs::symlink(".env", &f).unwrap();
    assert_eq!(read().await.unwrap_err().kind, ErrorKind::NotFound);
    std::fs::remove_file(&f).unwrap();

    // A FIFO in its place: refused, never waited on.
    kept_then_removed!("version 6");
    mkfifo();
    assert_eq!(read().await.unwrap_err().kind, ErrorKind::NotFound);
    // ... and with a writer's bytes waiting in it, those stay for the FIFO's own reader.
    kept_then_removed!("version 6");
    mkfifo();
    let mut fifo = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&f)
        .unwrap();
    std::io::Write::write_all(&mut fifo, b"for the real reader").unwrap();
    assert_eq!(read().await.unwrap_err().kind, ErrorKind::NotFound);
    let mut got = [0u8; 19];
    std::io::Read::read_exact(&mut fifo, &mut got).unwrap();
    assert_eq!(
        &got, b"for the real reader",
        "the server took a FIFO writer's bytes"
    );
    drop(fifo);
    std::fs::remove_file(&f).unwrap();

    // A directory in its place: read as one.
    kept_then_removed!("version 7");
    std::fs::create_dir(&f).unwrap();
    std::fs::write(f.join("inner.txt"), "in").unwrap();
    assert!(text(read().await).contains("inner.txt"));
    std::fs::remove_dir_all(&f).unwrap();

    // No longer readable: the error the general path gives, not the old bytes.
    fresh("version 8");
    assert_eq!(text(read().await), "version 8");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::read(&f).is_err() {
        // (root reads anything; the check means something only when the mode holds.)
        assert!(read().await.is_err());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_limit_and_windows() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let mut log = String::new();
    for i in 0..10_000 {
        log.push_str(&format!("line {i}\n"));
    }
    std::fs::write(root.join("big.log"), &log).unwrap();
    let p = provider(&root);
    let limits = ReadLimits { max_bytes: 1000 };
    let base = uri(&root.join("big.log"));
    let err = p
        .read(&ResourceUri::parse(&base).unwrap(), &limits)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::TooLarge);
    assert!(
        err.message.contains(&log.len().to_string()) && err.message.contains("1000"),
        "{}",
        err.message
    );
    let text = |c: &[mcpr_core::Contents]| match &c[0].body {
        mcpr_core::ContentsBody::Text(t) => t.clone(),
        other => panic!("expected text, got {other:?}"),
    };
    let r = p
        .read(
            &ResourceUri::parse(&format!("{base}?head=2")).unwrap(),
            &limits,
        )
        .await
        .unwrap()
        .contents;
    assert_eq!(text(&r), "line 0\nline 1\n");
    let r = p
        .read(
            &ResourceUri::parse(&format!("{base}?tail=2")).unwrap(),
            &limits,
        )
        .await
        .unwrap()
        .contents;
    assert_eq!(text(&r), "line 9998\nline 9999\n");
    let r = p
        .read(
            &ResourceUri::parse(&format!("{base}?offset=7&length=6")).unwrap(),
            &limits,
        )
        .await
        .unwrap()
        .contents;
    assert_eq!(text(&r), "line 1");
    let r = p
        .read(
            &ResourceUri::parse(&format!("{base}?offset=7&head=1")).unwrap(),
            &limits,
        )
        .await
        .unwrap()
        .contents;
    assert_eq!(text(&r), "line 1\n");
    let err = p
        .read(
            &ResourceUri::parse(&format!("{base}?length=5000")).unwrap(),
            &limits,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::TooLarge);
    let err = p
        .read(
            &ResourceUri::parse(&format!("{base}?bogus=1")).unwrap(),
            &limits,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    assert!(
        err.message.contains("offset, length, head and tail"),
        "{}",
        err.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_reads_as_entries() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/x.txt"), "x").unwrap();
    std::fs::write(root.join("sub/.env"), "x").unwrap();
    std::fs::create_dir(root.join("sub/inner")).unwrap();
    let p = provider(&root);
    let c = p
        .read(
            &ResourceUri::parse(&uri(&root.join("sub"))).unwrap(),
            &ReadLimits { max_bytes: 1 << 20 },
        )
        .await
        .unwrap()
        .contents;
    assert_eq!(c[0].mime_type.as_deref(), Some("application/json"));
    let mcpr_core::ContentsBody::Text(t) = &c[0].body else {
        panic!("text")
    };
    let v: serde_json::Value = serde_json::from_str(t).unwrap();
    let names: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["inner", "x.txt"]);
    assert_eq!(v["entries"][0]["type"], "directory");
    assert_eq!(v["truncated"], false);
}

/// SEP-2640 directory reads show a link as what it resolves to inside the root; a link out
/// of the root, a dangling one and a FIFO are left out, as none of them can be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_read_shows_only_what_can_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "no").unwrap();
    std::fs::create_dir(root.join("real")).unwrap();
    std::fs::write(root.join("real/a.txt"), "a").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("out.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("outdir")).unwrap();
    std::os::unix::fs::symlink("real/a.txt", root.join("in.txt")).unwrap();
    std::os::unix::fs::symlink("real", root.join("indir")).unwrap();
    std::os::unix::fs::symlink("nowhere", root.join("dangling")).unwrap();
    mkfifo(&root.join("pipe"));
    let p = provider(&root);
    let page = p
        .read_directory(
            &ResourceUri::parse(&uri(&root)).unwrap(),
            PageRequest {
                after: None,
                limit: 100,
            },
        )
        .await
        .unwrap();
    let got: Vec<(String, Option<String>)> = page
        .items
        .iter()
        .map(|m| {
            (
                m.uri.rsplit('/').next().unwrap().to_owned(),
                m.mime_type.clone(),
            )
        })
        .collect();
    let dir_mime = Some("inode/directory".to_owned());
    assert_eq!(
        got,
        vec![
            ("in.txt".into(), Some("text/plain".into())),
            ("indir".into(), dir_mime.clone()),
            ("real".into(), dir_mime),
        ]
    );
    assert_eq!(page.next, None);
}

/// `read_now` answers in place what needs no wait (a small file, linked or not; a path the
/// rules deny) and leaves to `read` what goes to the blocking pool: a file over the inline
/// limit, a directory, a window, and a path that is no regular file (missing, a FIFO), whose
/// error the general path words. The suite checks its answers equal `read`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_now_answers_what_needs_no_wait() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("small.txt"), "small").unwrap();
    std::fs::write(root.join("big.bin"), vec![7u8; 300 * 1024]).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::os::unix::fs::symlink("small.txt", root.join("link.txt")).unwrap();
    std::fs::write(root.join(".env"), "SECRET=1").unwrap();
    mkfifo(&root.join("pipe"));
    let p = provider(&root);
    let limits = ReadLimits { max_bytes: 1 << 20 };
    let parse = |rel: &str| ResourceUri::parse(&uri(&root.join(rel))).unwrap();
    for rel in ["small.txt", "link.txt"] {
        let now = p.read_now(&parse(rel), &limits).expect(rel).unwrap();
        assert_eq!(now, p.read(&parse(rel), &limits).await.unwrap(), "{rel}");
    }
    let err = p.read_now(&parse(".env"), &limits).unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound);
    let window = ResourceUri::parse(&format!("{}?head=1", uri(&root.join("small.txt")))).unwrap();
    for u in [
        parse("big.bin"),
        parse("sub"),
        window,
        parse("missing.txt"),
        parse("pipe"),
    ] {
        assert!(p.read_now(&u, &limits).is_none(), "{}", u.as_str());
    }
    assert_eq!(
        p.read(&parse("big.bin"), &limits)
            .await
            .unwrap()
            .contents
            .len(),
        1
    );
}

/// A path read in place and then replaced by a FIFO is not opened by the next read: a writer
/// waiting in its `open` for a reader stays waiting (opening the FIFO, even non-blocking,
/// would release it), and the read answers not found, as for any path that is no regular
/// file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_read_then_replaced_by_a_fifo_is_not_opened() {
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let path = root.join("swap.txt");
    std::fs::write(&path, "regular").unwrap();
    let p = provider(&root);
    let limits = ReadLimits { max_bytes: 1 << 20 };
    let u = ResourceUri::parse(&uri(&path)).unwrap();
    // Read more than once, so whatever a read keeps about the path is kept.
    for _ in 0..3 {
        let read = p
            .read_now(&u, &limits)
            .expect("a small file is read in place");
        assert!(read.is_ok());
    }
    std::fs::remove_file(&path).unwrap();
    mkfifo(&path);
    // A writer opening the FIFO waits in `open` until a reader opens it.
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (opened_tx, opened_rx) = std::sync::mpsc::channel();
    let writer_path = path.clone();
    let writer = std::thread::spawn(move || {
        let me = std::fs::read_link("/proc/thread-self").unwrap();
        tid_tx.send(me.file_name().unwrap().to_owned()).unwrap();
        let opened = std::fs::OpenOptions::new().write(true).open(&writer_path);
        opened_tx.send(()).unwrap();
        drop(opened);
    });
    let tid = tid_rx.recv().unwrap();
    let stat = std::path::Path::new("/proc/self/task")
        .join(tid)
        .join("wchan");
    // Until the writer sleeps in the FIFO's open (`fifo_open` waits in `wait_for_partner`).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !std::fs::read_to_string(&stat).is_ok_and(|w| w.contains("partner")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never waited in open"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        p.read_now(&u, &limits).is_none(),
        "a FIFO is not read in place"
    );
    let err = p.read(&u, &limits).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound);
    assert!(
        opened_rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "the read opened the FIFO: its writer was let go"
    );
    // Let the writer go: open the read end here, without waiting.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap();
    opened_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the writer is let go by a reader");
    writer.join().unwrap();
}
