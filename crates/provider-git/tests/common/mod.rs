//! Real repositories in temp dirs, built with the git CLI, for the provider's tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use mcpr_core::{
    ChangeEvent, ChangeSink, ContentsBody, ErrorKind, LocalBus, Provider, ReadLimits, ResourceUri,
};
use mcpr_provider_git::GitProvider;
use serde_json::Value;
use tokio::sync::broadcast::Receiver;

/// A repository with a work tree in a temp dir, and a clock for commit dates.
pub struct TestRepo {
    pub dir: tempfile::TempDir,
    clock: AtomicI64,
}

impl TestRepo {
    /// `git init -b main` in a fresh temp dir.
    pub fn new() -> Self {
        Self::init(&[])
    }

    /// `git init -b main --ref-format=reftable`: refs in `.git/reftable/`, not files.
    pub fn new_reftable() -> Self {
        Self::init(&["--ref-format=reftable"])
    }

    fn init(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let r = Self {
            dir,
            clock: AtomicI64::new(1_700_000_000),
        };
        let mut args = vec!["init", "-q", "-b", "main"];
        args.extend_from_slice(extra);
        r.git(&args);
        r
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    fn command(&self, args: &[&str]) -> Command {
        let t = self.clock.load(Ordering::SeqCst);
        let mut c = Command::new("git");
        c.current_dir(self.dir.path())
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "Ada Lovelace")
            .env("GIT_AUTHOR_EMAIL", "ada@example.com")
            .env("GIT_COMMITTER_NAME", "Charles Babbage")
            .env("GIT_COMMITTER_EMAIL", "charles@example.com")
            .env("GIT_AUTHOR_DATE", format!("@{t} +0000"))
            .env("GIT_COMMITTER_DATE", format!("@{t} +0000"));
        c
    }

    /// Run git; panic with its stderr on failure; return stdout.
    pub fn git(&self, args: &[&str]) -> Vec<u8> {
        let out = self.command(args).output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Run git with extra environment variables; panic with its stderr on failure.
    pub fn git_env(&self, env: &[(&str, &str)], args: &[&str]) -> Vec<u8> {
        let out = self
            .command(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Run git with `input` on stdin.
    pub fn git_stdin(&self, args: &[&str], input: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    pub fn git_str(&self, args: &[&str]) -> String {
        String::from_utf8(self.git(args)).unwrap().trim().to_owned()
    }

    /// Write a file in the work tree (creating directories).
    pub fn write(&self, rel: &str, bytes: &[u8]) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    /// `git add -A` and commit with `msg`, one clock tick later; returns the commit id.
    pub fn commit(&self, msg: &str) -> String {
        self.clock.fetch_add(60, Ordering::SeqCst);
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", msg]);
        self.git_str(&["rev-parse", "HEAD"])
    }

    /// The current clock (the date of the last commit).
    pub fn now(&self) -> i64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// Add a gitlink (submodule) at `path` pointing at `commit`, with a .gitmodules entry.
    pub fn add_submodule(&self, path: &str, commit: &str, url: &str) {
        let mut gm =
            std::fs::read_to_string(self.dir.path().join(".gitmodules")).unwrap_or_default();
        gm.push_str(&format!(
            "[submodule \"{path}\"]\n\tpath = {path}\n\turl = {url}\n"
        ));
        self.write(".gitmodules", gm.as_bytes());
        // An empty directory stands for the submodule not checked out; without it the next
        // `git add -A` would stage the gitlink's deletion.
        std::fs::create_dir_all(self.dir.path().join(path)).unwrap();
        self.git(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{commit},{path}"),
        ]);
    }
}

/// RFC 3339 UTC for epoch seconds, as the provider writes dates.
pub fn rfc3339(secs: i64) -> String {
    humantime_like(secs)
}

fn humantime_like(secs: i64) -> String {
    // Civil-from-days (Howard Hinnant), to avoid a dependency just for the tests.
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Whether `p` exists (for packed-refs checks).
pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// A repository with `x` and `docs/CHANGELOG.md`, branch `feature/x`, tags `v0.1` and
/// annotated `v1.0` on the first commit, and a second commit changing `x` on `main`. Takes a
/// fresh repository (`TestRepo::new` or `new_reftable`); returns it and both commit ids.
pub fn two_commits(r: TestRepo) -> (TestRepo, String, String) {
    r.write("x", b"one\n");
    r.write("docs/CHANGELOG.md", b"# changes\n");
    let c1 = r.commit("first");
    r.git(&["branch", "feature/x"]);
    r.git(&["tag", "v0.1"]);
    r.git(&["tag", "-a", "v1.0", "-m", "annotated"]);
    r.write("x", b"two\n");
    let c2 = r.commit("second");
    (r, c1, c2)
}

/// A fresh repository with files `x` and `y` in one commit on `main`.
pub fn repo_xy(r: TestRepo) -> TestRepo {
    r.write("x", b"x0\n");
    r.write("y", b"y0\n");
    r.commit("start");
    r
}

/// A read limit no test file reaches.
pub const BIG: ReadLimits = ReadLimits {
    max_bytes: 64 << 20,
};

pub async fn read(p: &GitProvider, uri: &str) -> mcpr_core::Result<Vec<mcpr_core::Contents>> {
    p.read(&ResourceUri::parse(uri).unwrap(), &BIG)
        .await
        .map(|r| r.contents)
}

/// The text at `uri`; panics on an error or a blob.
pub async fn text(p: &GitProvider, uri: &str) -> String {
    let c = read(p, uri)
        .await
        .unwrap_or_else(|e| panic!("read {uri}: {e}"));
    match &c[0].body {
        ContentsBody::Text(t) => t.clone(),
        ContentsBody::Blob(b) => panic!("{uri}: expected text, got {} bytes", b.len()),
    }
}

pub async fn json(p: &GitProvider, uri: &str) -> Value {
    serde_json::from_str(&text(p, uri).await).unwrap()
}

/// The kind of the error reading `uri` must give.
pub async fn kind(p: &GitProvider, uri: &str) -> ErrorKind {
    read(p, uri).await.expect_err(uri).kind
}

/// Events within `within`.
pub async fn events(rx: &mut Receiver<ChangeEvent>, within: Duration) -> Vec<ChangeEvent> {
    let deadline = tokio::time::Instant::now() + within;
    let mut out = Vec::new();
    while let Ok(Ok(e)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        out.push(e);
    }
    out
}

/// Wait for `want`, returning how long it took; panic after `within`.
pub async fn expect(
    rx: &mut Receiver<ChangeEvent>,
    want: &ChangeEvent,
    within: Duration,
) -> Duration {
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(e)) if &e == want => return start.elapsed(),
            Ok(Ok(_)) => continue,
            _ => panic!("expected {want:?} within {within:?}"),
        }
    }
}

pub fn updated(uri: &str) -> ChangeEvent {
    ChangeEvent::Updated { uri: uri.into() }
}

/// Watch `uri` with a sink on `bus` (mount 0).
pub async fn watch(p: &GitProvider, uri: &str, bus: &Arc<LocalBus>) -> mcpr_core::WatchGuard {
    p.watch(
        &ResourceUri::parse(uri).unwrap(),
        ChangeSink::new(bus.clone(), "m0"),
    )
    .await
    .unwrap()
}
