//! `mcpr-bench soak`: legacy HTTP sessions and `subscriptions/listen` streams
//! churning against files, SQLite and PostgreSQL mounts for a number of minutes, with the
//! server's resources sampled from `/proc` and `/metrics` every 10 s.
//!
//! The run has five phases. A warm-up touches every mount once (so the SQL pools hold their
//! one connection) and then waits until the server is idle: the sample taken then is the
//! baseline. The load then starts, and its first minute is a ramp, sampled but left out of
//! the RSS comparison (see [`RAMP`]). The churn follows under the same load: every legacy session slot cycles through open, subscribe,
//! read, subscribe, read, unsubscribe ("cancel"), read and close-and-reopen, some sessions
//! with their GET stream; every listen slot opens a stream on one to three URIs, reads
//! notifications for a few seconds and drops the connection; a changer rewrites files and
//! updates rows all the while. Then every client leaves and the server is given up to 90 s to
//! settle. The run passes when each count series (descriptors, threads, inotify watches,
//! watched resources, subscribers, sessions, listen streams) is back at or below its
//! baseline, RSS grew less than 5 % between the first and the last third of the churn,
//! fewer than 1 % of requests failed, and notifications reached both kinds of client.
//!
//! Resident memory is not required to fall back to the idle baseline: an allocator may keep
//! freed pages for reuse, so the churn's steady state is the meaningful comparison.

use crate::http::Conn;
use crate::plot;
use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Seconds between samples.
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// How long the server may take to come back to its baseline once the clients have left.
const SETTLE_WITHIN: Duration = Duration::from_secs(90);
/// A session slot takes one step per round; a round lasts at least this long.
const ROUND: Duration = Duration::from_secs(3);
/// Threads driving the legacy sessions (each owns an equal share of the slots).
const LEGACY_WORKERS: usize = 10;
/// Legacy sessions that also hold their GET stream (server-to-client notifications).
const GET_STREAMS: usize = 100;
/// Files in the files mount (the changer rewrites one every 100 ms).
const FILES: usize = 40;
/// RSS may grow at most this much between the first and the last third of the churn.
const RSS_GROWTH_LIMIT: f64 = 0.05;
/// Full load before the measured churn. The live heap reaches its level within the first
/// 10 s of load, but RSS follows for about a minute while the allocator touches the pages
/// it hands out (heaptrack and the soak's RSS series, docs/robustness.md, Soak); comparing thirds that
/// start with that climb would measure the climb, not growth.
const RAMP: Duration = Duration::from_secs(60);

const META_2026: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"mcpr-soak","version":"0"}}"#;
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpr-soak","version":"0"}}}"#;

/// `mcpr-bench soak`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// The `mcp-resources` binary to soak.
    #[arg(long)]
    server: PathBuf,
    /// Its config (crates/bench/soak.toml).
    #[arg(long)]
    config: PathBuf,
    /// Where the table, CSV and plot are written.
    #[arg(long)]
    out: PathBuf,
    /// How long the churn lasts, in minutes (fractions allowed).
    #[arg(long, value_parser = positive_minutes)]
    minutes: f64,
    /// Legacy HTTP session slots.
    #[arg(long, default_value_t = 1000)]
    sessions: usize,
    /// `subscriptions/listen` stream slots.
    #[arg(long, default_value_t = 200)]
    listens: usize,
    /// The PostgreSQL the soak's postgres mount reads.
    #[arg(
        long,
        env = "SOAK_PG_URL",
        default_value = "postgres://root@127.0.0.1:5432/test",
        hide_env_values = true
    )]
    pg_url: String,
}

/// A churn of more than zero minutes.
fn positive_minutes(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(m) if m > 0.0 && m.is_finite() => Ok(m),
        _ => Err(format!("{s:?} is not a positive number of minutes")),
    }
}

/// What the clients did, counted across threads.
#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    errors: AtomicU64,
    sessions_opened: AtomicU64,
    listens_opened: AtomicU64,
    legacy_updates: AtomicU64,
    listen_updates: AtomicU64,
    changes: AtomicU64,
    /// The first few failures, word for word.
    first_errors: Mutex<Vec<String>>,
}

impl Tally {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self
            .first_errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if first.len() < 10 {
            first.push(what);
        }
    }
}

/// Shared by every driver thread.
struct Ctx {
    addr: String,
    uris: Vec<String>,
    tally: Tally,
    stop: AtomicBool,
    /// Threads still running (GET stream readers are not joined by anyone).
    live: AtomicUsize,
    ids: AtomicU64,
}

impl Ctx {
    fn id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }
}

/// A small xorshift generator: the load only needs to be varied, not unpredictable.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// One sample of the server's resources.
#[derive(Clone, Debug)]
struct Sample {
    t: f64,
    phase: &'static str,
    rss_mib: f64,
    fds: u64,
    threads: u64,
    tasks: u64,
    inotify: u64,
    watched: u64,
    subscribers: u64,
    sessions: u64,
    listens: u64,
}

/// How a count is read off a sample.
type Count = fn(&Sample) -> u64;

/// The count series, with how each is read off a sample.
const COUNTS: &[(&str, Count)] = &[
    ("open fds", |s| s.fds),
    ("threads", |s| s.threads),
    ("runtime tasks", |s| s.tasks),
    ("inotify watches", |s| s.inotify),
    ("watched resources", |s| s.watched),
    ("subscribers", |s| s.subscribers),
    ("sessions", |s| s.sessions),
    ("listen streams", |s| s.listens),
];

/// `mcpr-bench soak …`.
pub fn run(o: Options) -> Result<(), String> {
    if !pg_available(&o.pg_url) {
        let msg = format!(
            "PostgreSQL is not reachable at {} (psql); the soak needs it for its postgres mount (set SOAK_PG_URL)",
            o.pg_url
        );
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            return Err(msg);
        }
        eprintln!("soak: SKIPPED: {msg}");
        return Ok(());
    }
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let out = std::fs::canonicalize(&o.out).map_err(|e| e.to_string())?;
    let work = out.join("work");
    let _ = std::fs::remove_dir_all(&work);
    let files = work.join("files");
    for i in 0..FILES {
        let p = files.join(format!("d{}/f{i:02}.txt", i % 4));
        std::fs::create_dir_all(p.parent().expect("has a parent")).map_err(|e| e.to_string())?;
        std::fs::write(&p, format!("file {i} version 0\n")).map_err(|e| e.to_string())?;
    }
    let sqlite = work.join("soak.db");
    let lite = rusqlite::Connection::open(&sqlite).map_err(|e| e.to_string())?;
    lite.execute_batch(
        "create table items (id integer primary key, v integer not null);
         insert into items (id, v) select value, 0 from generate_series(1, 50);",
    )
    .or_else(|_| {
        // generate_series is an optional SQLite extension; a recursive CTE always works.
        lite.execute_batch(
            "create table if not exists items (id integer primary key, v integer not null);
             with recursive n(i) as (select 1 union all select i + 1 from n where i < 50)
             insert into items (id, v) select i, 0 from n;",
        )
    })
    .map_err(|e| format!("sqlite fixture: {e}"))?;
    let table = format!("mcpr_soak_{}", std::process::id());
    let pg = PgTable::create(&o.pg_url, &table)?;

    let addr = free_addr()?;
    let log = std::fs::File::create(out.join("server.log")).map_err(|e| e.to_string())?;
    let mut server = Server(
        Command::new(&o.server)
            .args(["serve", "--log-level", "warn", "--http", &addr, "--config"])
            .arg(&o.config)
            .env("SOAK_FILES", &files)
            .env("SOAK_SQLITE", &sqlite)
            .env("SOAK_PG_URL", &o.pg_url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", o.server.display()))?,
    );
    let pid = server.0.id();
    wait_ready(&addr, &mut server)?;

    let mut uris: Vec<String> = (0..FILES)
        .map(|i| format!("file://{}/d{}/f{i:02}.txt", files.display(), i % 4))
        .collect();
    uris.push("db://lite/tables/items".into());
    uris.push(format!("db://pg/tables/{table}"));
    let ctx = Arc::new(Ctx {
        addr: addr.clone(),
        uris,
        tally: Tally::default(),
        stop: AtomicBool::new(false),
        live: AtomicUsize::new(0),
        ids: AtomicU64::new(1),
    });

    eprintln!("soak: server {pid} on {addr}; warm-up");
    warm_up(&ctx)?;
    // Let the blocking pool's idle threads expire (tokio keeps them 10 s) before the baseline.
    wait_idle(&addr, Duration::from_secs(30))?;
    std::thread::sleep(Duration::from_secs(12));
    let start = Instant::now();
    let mut samples = vec![sample(pid, &addr, 0.0, "baseline")?];
    let baseline = samples[0].clone();
    eprintln!("soak: baseline {baseline:?}");

    let churn = Duration::from_secs_f64(o.minutes * 60.0);
    let churn_start = start.elapsed().as_secs_f64();
    let mut handles = Vec::new();
    let per = o.sessions.div_ceil(LEGACY_WORKERS);
    for w in 0..LEGACY_WORKERS {
        let slots = per.min(o.sessions.saturating_sub(w * per));
        let streams = (GET_STREAMS * slots).div_ceil(o.sessions.max(1));
        let c = ctx.clone();
        handles.push(spawn_thread(&ctx, move || {
            legacy_worker(&c, w, slots, streams)
        }));
    }
    for l in 0..o.listens {
        let c = ctx.clone();
        handles.push(spawn_thread(&ctx, move || listen_worker(&c, l)));
    }
    {
        let c = ctx.clone();
        let (files, sqlite, url, table) = (
            files.clone(),
            sqlite.clone(),
            o.pg_url.clone(),
            table.clone(),
        );
        handles.push(spawn_thread(&ctx, move || {
            changer(&c, &files, &sqlite, &url, &table)
        }));
    }
    let ramp_end_at = Instant::now() + RAMP;
    let churn_end_at = ramp_end_at + churn;
    let mut next = Instant::now() + SAMPLE_EVERY;
    while Instant::now() < churn_end_at {
        sleep_until(next.min(churn_end_at));
        if Instant::now() >= next {
            let phase = if Instant::now() < ramp_end_at {
                "ramp"
            } else {
                "churn"
            };
            let s = sample(pid, &addr, start.elapsed().as_secs_f64(), phase)?;
            eprintln!("soak: {}", row(&s));
            samples.push(s);
            next += SAMPLE_EVERY;
        }
        if let Ok(Some(status)) = server.0.try_wait() {
            return Err(format!("the server exited during the churn: {status}"));
        }
    }
    ctx.stop.store(true, Ordering::Relaxed);
    let churn_end = start.elapsed().as_secs_f64();
    eprintln!("soak: churn over; clients leaving");
    for h in handles {
        let _ = h.join();
    }
    let leave_by = Instant::now() + Duration::from_secs(20);
    while ctx.live.load(Ordering::Relaxed) > 0 && Instant::now() < leave_by {
        std::thread::sleep(Duration::from_millis(100));
    }
    let stuck = ctx.live.load(Ordering::Relaxed);

    // Settle: samples continue every 10 s; the run ends as soon as everything is back.
    let settle_end = Instant::now() + SETTLE_WITHIN;
    let mut settled = false;
    while Instant::now() < settle_end {
        let s = sample(pid, &addr, start.elapsed().as_secs_f64(), "after")?;
        let back = COUNTS.iter().all(|(_, f)| f(&s) <= f(&baseline));
        let due = Instant::now() >= next;
        if back || due {
            eprintln!("soak: {}", row(&s));
            samples.push(s);
            if due {
                next += SAMPLE_EVERY;
            }
        }
        if back {
            settled = true;
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let alive = matches!(server.0.try_wait(), Ok(None));
    drop(server);
    drop(pg);

    // The verdict.
    let last = samples.last().expect("a baseline at least").clone();
    let mut failures = Vec::new();
    if !alive {
        failures.push("the server died".to_owned());
    }
    if stuck > 0 {
        failures.push(format!("{stuck} client threads were still running 20 s after the churn (a stream the server did not close)"));
    }
    for (name, f) in COUNTS {
        if f(&last) > f(&baseline) {
            failures.push(format!(
                "{name}: {} {} s after the churn, baseline {}",
                f(&last),
                (last.t - churn_end).round(),
                f(&baseline)
            ));
        }
    }
    if !settled {
        failures.push(format!(
            "not back at the baseline within {} s",
            SETTLE_WITHIN.as_secs()
        ));
    }
    let churned: Vec<&Sample> = samples.iter().filter(|s| s.phase == "churn").collect();
    let third = churned.len() / 3;
    let growth = if third > 0 {
        let mean = |s: &[&Sample]| s.iter().map(|x| x.rss_mib).sum::<f64>() / s.len() as f64;
        let (first, last) = (
            mean(&churned[..third]),
            mean(&churned[churned.len() - third..]),
        );
        (last - first) / first
    } else {
        failures.push("the churn was too short for three RSS samples".into());
        0.0
    };
    if growth >= RSS_GROWTH_LIMIT {
        failures.push(format!(
            "RSS grew {:.1} % between the first and last third of the churn (limit {:.0} %)",
            growth * 100.0,
            RSS_GROWTH_LIMIT * 100.0
        ));
    }
    let t = &ctx.tally;
    let (requests, errors) = (
        t.requests.load(Ordering::Relaxed),
        t.errors.load(Ordering::Relaxed),
    );
    if requests == 0 || errors * 100 >= requests {
        failures.push(format!(
            "{errors} of {requests} requests failed (limit 1 %)"
        ));
    }
    let (legacy_n, listen_n) = (
        t.legacy_updates.load(Ordering::Relaxed),
        t.listen_updates.load(Ordering::Relaxed),
    );
    if legacy_n == 0 || listen_n == 0 {
        failures.push(format!(
            "notifications received: {legacy_n} on legacy GET streams, {listen_n} on listen streams (each must be > 0)"
        ));
    }

    let loaded: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.phase == "ramp" || s.phase == "churn")
        .collect();
    let peak_sessions = loaded.iter().map(|s| s.sessions).max().unwrap_or(0);
    let peak_listens = loaded.iter().map(|s| s.listens).max().unwrap_or(0);
    let summary = format!(
        "{} s ramp then {:.1} min churn, {} session slots ({peak_sessions} open at the busiest sample), {} listen slots ({peak_listens} open at the busiest sample); \
         {requests} requests ({errors} failed), {} sessions and {} listen streams opened, {} changes made, \
         {legacy_n} notifications on legacy GET streams and {listen_n} on listen streams; \
         RSS {:+.1} % between the first and last third of the churn",
        RAMP.as_secs(),
        o.minutes,
        o.sessions,
        o.listens,
        t.sessions_opened.load(Ordering::Relaxed),
        t.listens_opened.load(Ordering::Relaxed),
        t.changes.load(Ordering::Relaxed),
        growth * 100.0
    );
    let table_md = markdown(&samples);
    println!("\n{table_md}\n{summary}");
    for e in t
        .first_errors
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
    {
        println!("  error: {e}");
    }
    write_outputs(
        &out,
        &samples,
        (churn_start, churn_end),
        &table_md,
        &summary,
    )?;
    println!(
        "soak: table in {0}/soak.md and soak.csv, plot in {0}/soak.png",
        out.display()
    );
    if failures.is_empty() {
        println!("soak: PASSED");
        Ok(())
    } else {
        for f in &failures {
            println!("soak: FAILED: {f}");
        }
        Err(format!("{} soak check(s) failed", failures.len()))
    }
}

fn spawn_thread(ctx: &Arc<Ctx>, f: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
    ctx.live.fetch_add(1, Ordering::Relaxed);
    let c = ctx.clone();
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            f();
            c.live.fetch_sub(1, Ordering::Relaxed);
        })
        .expect("spawn a driver thread")
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// Kills the server when the run ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> Result<String, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no port: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.to_string())
}

fn wait_ready(addr: &str, server: &mut Server) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Ok(Some(status)) = server.0.try_wait() {
            return Err(format!(
                "the server exited at start ({status}); see server.log"
            ));
        }
        if let Ok(r) = Conn::connect(addr).and_then(|mut c| c.get("/readyz"))
            && r.status == 200
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("the server at {addr} was not ready within 60 s"))
}

pub(crate) fn metrics(addr: &str) -> Result<String, String> {
    let r = Conn::connect(addr)?.get("/metrics")?;
    if r.status != 200 {
        return Err(format!("/metrics answered {}", r.status));
    }
    Ok(String::from_utf8_lossy(&r.body).into_owned())
}

/// An unlabelled gauge's value; `None` if `/metrics` does not carry it (a renamed metric must
/// fail the run, not read as zero).
pub(crate) fn gauge(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

fn sample(pid: u32, addr: &str, t: f64, phase: &'static str) -> Result<Sample, String> {
    let m = metrics(addr)?;
    let g = |name| gauge(&m, name).ok_or_else(|| format!("/metrics has no {name}"));
    let (rss, _) = crate::proc::rss(pid);
    let count = |dir: String| std::fs::read_dir(dir).map_or(0, |d| d.count() as u64);
    // Each inotify watch is one `inotify wd:` line in the fdinfo of the descriptor holding it.
    let inotify = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|s| s.lines().filter(|l| l.starts_with("inotify wd:")).count() as u64)
        .sum();
    Ok(Sample {
        t,
        phase,
        rss_mib: rss as f64 / (1024.0 * 1024.0),
        fds: count(format!("/proc/{pid}/fd")),
        threads: count(format!("/proc/{pid}/task")),
        tasks: g("mcp_runtime_tasks")?,
        inotify,
        watched: g("mcp_watched_resources")?,
        subscribers: g("mcp_subscribers")?,
        sessions: g("mcp_sessions")?,
        listens: g("mcp_listen_streams")?,
    })
}

/// Waits until no session, subscriber or watch is left (the warm-up's are being released).
fn wait_idle(addr: &str, within: Duration) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let m = metrics(addr)?;
        let busy: Vec<&str> = [
            "mcp_sessions",
            "mcp_subscribers",
            "mcp_watched_resources",
            "mcp_listen_streams",
        ]
        .into_iter()
        .filter(|n| gauge(&m, n) != Some(0))
        .collect();
        if busy.is_empty() {
            return Ok(());
        }
        if start.elapsed() > within {
            return Err(format!(
                "the server did not go idle after the warm-up: {busy:?} > 0"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ------------------------------------------------------------------------- the clients

/// A legacy session's request: the JSON-RPC answer, or why it failed.
fn legacy_call(
    conn: &mut Option<Conn>,
    ctx: &Ctx,
    sid: &str,
    method: &str,
    params: &str,
) -> Result<(), String> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{},"method":"{method}","params":{params}}}"#,
        ctx.id()
    );
    let headers = [
        ("mcp-session-id", sid),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let r = post(conn, ctx, &headers, body.as_bytes())?;
    if r.status != 200 {
        return Err(format!("{method} answered HTTP {}", r.status));
    }
    let msg = r.message().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_slice(msg)
        .map_err(|e| format!("{method}: bad JSON ({e}): {}", crate::proc::preview(msg)))?;
    match v.get("error") {
        Some(e) => Err(format!("{method}: {e}")),
        None => Ok(()),
    }
}

/// POST on the worker's keep-alive connection, reconnecting once if the server closed it.
fn post(
    conn: &mut Option<Conn>,
    ctx: &Ctx,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<crate::http::Response, String> {
    ctx.tally.requests.fetch_add(1, Ordering::Relaxed);
    for attempt in 0..2 {
        if conn.is_none() {
            *conn = Some(Conn::connect(&ctx.addr)?);
        }
        match conn
            .as_mut()
            .expect("connected")
            .post("/mcp", headers, body)
        {
            Ok(r) => return Ok(r),
            Err(e) if attempt == 0 && e.contains("closed") => *conn = None,
            Err(e) => {
                *conn = None;
                return Err(e);
            }
        }
    }
    Err("the server closed the connection twice".into())
}

fn open_session(conn: &mut Option<Conn>, ctx: &Ctx) -> Result<String, String> {
    let r = post(conn, ctx, &[], INITIALIZE.as_bytes())?;
    if r.status != 200 {
        return Err(format!(
            "initialize answered HTTP {}: {}",
            r.status,
            crate::proc::preview(&r.body)
        ));
    }
    let sid = r
        .header("mcp-session-id")
        .ok_or("initialize answered without Mcp-Session-Id")?
        .to_owned();
    let r = post(
        conn,
        ctx,
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )?;
    if r.status >= 300 {
        return Err(format!(
            "notifications/initialized answered HTTP {}",
            r.status
        ));
    }
    ctx.tally.sessions_opened.fetch_add(1, Ordering::Relaxed);
    Ok(sid)
}

fn close_session(conn: &mut Option<Conn>, ctx: &Ctx, sid: &str) -> Result<(), String> {
    ctx.tally.requests.fetch_add(1, Ordering::Relaxed);
    let head = format!(
        "DELETE /mcp HTTP/1.1\r\nhost: {}\r\nmcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\ncontent-length: 0\r\n\r\n",
        ctx.addr
    );
    let status = raw_request(&ctx.addr, head.as_bytes())?;
    let _ = conn;
    if status == 200 || status == 202 || status == 204 {
        Ok(())
    } else {
        Err(format!("DELETE answered HTTP {status}"))
    }
}

/// One request on its own connection (the `Conn` client has no DELETE); its status.
fn raw_request(addr: &str, req: &[u8]) -> Result<u16, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    s.write_all(req).map_err(|e| format!("send: {e}"))?;
    let mut r = std::io::BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line)
        .map_err(|e| format!("receive: {e}"))?;
    line.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {line:?}"))
}

struct Slot {
    sid: Option<String>,
    step: usize,
    subs: Vec<String>,
    /// Set when the session is closed, so its GET stream reader stops waiting.
    closed: Option<Arc<AtomicBool>>,
}

fn legacy_worker(ctx: &Arc<Ctx>, w: usize, slots: usize, streams: usize) {
    let mut rng = Rng::new(w as u64 + 1);
    let mut conn: Option<Conn> = None;
    let mut slots: Vec<Slot> = (0..slots)
        .map(|_| Slot {
            sid: None,
            step: 0,
            subs: Vec::new(),
            closed: None,
        })
        .collect();
    // Spread the slots over the cycle so the operations mix from the first round.
    for (i, s) in slots.iter_mut().enumerate() {
        s.step = if i % 2 == 0 { 0 } else { 1 };
    }
    while !ctx.stop.load(Ordering::Relaxed) {
        let round = Instant::now();
        for (i, s) in slots.iter_mut().enumerate() {
            if ctx.stop.load(Ordering::Relaxed) {
                break;
            }
            if let Err(e) = legacy_step(ctx, &mut conn, &mut rng, s, i < streams) {
                ctx.tally.error(e);
                // Start the slot over with a fresh session.
                if let Some(c) = s.closed.take() {
                    c.store(true, Ordering::Relaxed);
                }
                if let Some(sid) = s.sid.take() {
                    let _ = close_session(&mut conn, ctx, &sid);
                }
                s.subs.clear();
                s.step = 0;
            }
        }
        sleep_until(round + ROUND);
    }
    for s in &mut slots {
        if let Some(c) = s.closed.take() {
            c.store(true, Ordering::Relaxed);
        }
        if let Some(sid) = s.sid.take()
            && let Err(e) = close_session(&mut conn, ctx, &sid)
        {
            ctx.tally.error(e);
        }
    }
}

/// One step of a session slot's cycle.
fn legacy_step(
    ctx: &Arc<Ctx>,
    conn: &mut Option<Conn>,
    rng: &mut Rng,
    s: &mut Slot,
    with_stream: bool,
) -> Result<(), String> {
    let pick = |rng: &mut Rng| ctx.uris[rng.below(ctx.uris.len())].clone();
    let uri_params = |u: &str| format!(r#"{{"uri":{}}}"#, serde_json::Value::from(u));
    if s.sid.is_none() {
        let sid = open_session(conn, ctx)?;
        if with_stream {
            let closed = Arc::new(AtomicBool::new(false));
            let (c, sid2, flag) = (ctx.clone(), sid.clone(), closed.clone());
            spawn_thread(ctx, move || get_stream(&c, &sid2, &flag));
            s.closed = Some(closed);
        }
        s.sid = Some(sid);
        s.step = 0;
        return Ok(());
    }
    let sid = s.sid.clone().expect("open");
    match s.step {
        0 | 2 => {
            let u = pick(rng);
            legacy_call(conn, ctx, &sid, "resources/subscribe", &uri_params(&u))?;
            s.subs.push(u);
        }
        1 | 3 | 5 => {
            let u = s.subs.last().cloned().unwrap_or_else(|| pick(rng));
            legacy_call(conn, ctx, &sid, "resources/read", &uri_params(&u))?;
        }
        4 => {
            if !s.subs.is_empty() {
                let u = s.subs.remove(0);
                legacy_call(conn, ctx, &sid, "resources/unsubscribe", &uri_params(&u))?;
            }
        }
        _ => {
            // Close with a subscription still held: the close must release it.
            if let Some(c) = s.closed.take() {
                c.store(true, Ordering::Relaxed);
            }
            s.sid = None;
            s.subs.clear();
            close_session(conn, ctx, &sid)?;
            return Ok(());
        }
    }
    s.step += 1;
    Ok(())
}

/// Reads an SSE response body as it arrives: counts the updates it carries and sees its
/// end, keeping a tail so that neither is missed when split across two reads.
#[derive(Default)]
pub(crate) struct Scan {
    tail: Vec<u8>,
    /// Whether the body's last chunk (`0\r\n\r\n`) has arrived: the server ended the
    /// response but keeps the connection open for the next request, so EOF never comes.
    pub(crate) ended: bool,
}

impl Scan {
    const NAME: &[u8] = b"notifications/resources/updated";
    const LAST_CHUNK: &[u8] = b"\r\n0\r\n\r\n";

    /// The updates in `chunk`.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> u64 {
        if self.tail.is_empty() {
            // A body whose first chunk is the last one (an empty stream).
            self.tail.extend_from_slice(b"\r\n");
        }
        self.tail.extend_from_slice(chunk);
        let n = self
            .tail
            .windows(Self::NAME.len())
            .filter(|w| *w == Self::NAME)
            .count() as u64;
        self.ended |= crate::http::find(&self.tail, Self::LAST_CHUNK).is_some();
        let keep = Self::NAME.len().max(Self::LAST_CHUNK.len()) - 1;
        let cut = self.tail.len().saturating_sub(keep);
        self.tail.drain(..cut);
        n
    }
}

/// Opens `head` on a new connection and checks for a 200 event stream; the stream and what
/// of the body has arrived.
fn open_stream(addr: &str, head: &[u8]) -> Result<(TcpStream, Vec<u8>), String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .map_err(|e| e.to_string())?;
    s.write_all(head).map_err(|e| format!("send: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let start = Instant::now();
    let end = loop {
        if let Some(i) = crate::http::find(&buf, b"\r\n\r\n") {
            break i;
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err("no response head within 30 s".into());
        }
        match s.read(&mut chunk) {
            Ok(0) => return Err("closed before the response head".into()),
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(format!("receive: {e}")),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") || !head.contains("text/event-stream") {
        return Err(format!(
            "expected a 200 event stream: {}",
            head.lines().next().unwrap_or("")
        ));
    }
    Ok((s, buf[end + 4..].to_vec()))
}

pub(crate) fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// A legacy session's GET stream: counts updates until the server ends it (the session was
/// closed) or the run stops.
fn get_stream(ctx: &Ctx, sid: &str, closed: &AtomicBool) {
    let head = format!(
        "GET /mcp HTTP/1.1\r\nhost: {}\r\naccept: text/event-stream\r\nmcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\n\r\n",
        ctx.addr
    );
    ctx.tally.requests.fetch_add(1, Ordering::Relaxed);
    let (mut s, first) = match open_stream(&ctx.addr, head.as_bytes()) {
        Ok(x) => x,
        // The session may already be closed again when the stream arrives.
        Err(_) if closed.load(Ordering::Relaxed) => return,
        Err(e) => return ctx.tally.error(format!("legacy GET stream: {e}")),
    };
    let mut scan = Scan::default();
    let n = scan.feed(&first);
    ctx.tally.legacy_updates.fetch_add(n, Ordering::Relaxed);
    let mut chunk = [0u8; 8192];
    let mut closed_at: Option<Instant> = None;
    while !scan.ended {
        match s.read(&mut chunk) {
            Ok(0) => return,
            Ok(k) => {
                let n = scan.feed(&chunk[..k]);
                ctx.tally.legacy_updates.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => return,
        }
        if scan.ended && !closed.load(Ordering::Relaxed) {
            return ctx
                .tally
                .error("a legacy GET stream ended while its session was open".into());
        }
        if closed.load(Ordering::Relaxed) {
            let at = *closed_at.get_or_insert_with(Instant::now);
            if at.elapsed() > Duration::from_secs(10) {
                return ctx.tally.error(
                    "a legacy GET stream stayed open 10 s after its session was deleted".into(),
                );
            }
        }
    }
}

/// One listen slot: streams of one to three URIs, each kept 2 to 12 s, then dropped.
fn listen_worker(ctx: &Ctx, l: usize) {
    let mut rng = Rng::new(1000 + l as u64);
    // Stagger the first opens over two seconds.
    std::thread::sleep(Duration::from_millis(rng.below(2000) as u64));
    while !ctx.stop.load(Ordering::Relaxed) {
        let n = 1 + rng.below(3);
        let uris: Vec<serde_json::Value> = (0..n)
            .map(|_| ctx.uris[rng.below(ctx.uris.len())].clone().into())
            .collect();
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"subscriptions/listen","params":{{"notifications":{{"resourceSubscriptions":{}}},{META_2026}}}}}"#,
            ctx.id(),
            serde_json::Value::from(uris)
        );
        let head = format!(
            "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: subscriptions/listen\r\ncontent-length: {}\r\n\r\n{body}",
            ctx.addr,
            body.len()
        );
        ctx.tally.requests.fetch_add(1, Ordering::Relaxed);
        let lifetime = Duration::from_millis(2000 + rng.below(10_000) as u64);
        match open_stream(&ctx.addr, head.as_bytes()) {
            Ok((mut s, first)) => {
                ctx.tally.listens_opened.fetch_add(1, Ordering::Relaxed);
                let mut scan = Scan::default();
                let mut seen = first.clone();
                ctx.tally
                    .listen_updates
                    .fetch_add(scan.feed(&first), Ordering::Relaxed);
                let start = Instant::now();
                let mut chunk = [0u8; 8192];
                while start.elapsed() < lifetime && !ctx.stop.load(Ordering::Relaxed) {
                    match s.read(&mut chunk) {
                        Ok(0) => {
                            ctx.tally.error("a listen stream ended by itself".into());
                            break;
                        }
                        Ok(k) => {
                            let n = scan.feed(&chunk[..k]);
                            ctx.tally.listen_updates.fetch_add(n, Ordering::Relaxed);
                            if seen.len() < 4096 {
                                seen.extend_from_slice(&chunk[..k]);
                            }
                            if scan.ended {
                                ctx.tally.error("a listen stream ended by itself".into());
                                break;
                            }
                        }
                        Err(e) if is_timeout(&e) => {}
                        Err(e) => {
                            ctx.tally.error(format!("listen stream: {e}"));
                            break;
                        }
                    }
                }
                if crate::http::find(&seen, b"\"error\"").is_some() {
                    ctx.tally.error(format!(
                        "a listen stream carried an error: {}",
                        crate::proc::preview(&seen)
                    ));
                }
                // Dropping the connection is how a 2026-07-28 client cancels a listen.
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            Err(e) => {
                ctx.tally.error(format!("subscriptions/listen: {e}"));
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        std::thread::sleep(Duration::from_millis(rng.below(1000) as u64));
    }
}

/// Rewrites a file every 100 ms, updates a SQLite row every second and a PostgreSQL row
/// every two seconds (through one long-lived `psql`).
fn changer(ctx: &Ctx, files: &Path, sqlite: &Path, pg_url: &str, table: &str) {
    let mut rng = Rng::new(77);
    let lite = match rusqlite::Connection::open(sqlite) {
        Ok(c) => c,
        Err(e) => return ctx.tally.error(format!("changer: sqlite: {e}")),
    };
    let _ = lite.busy_timeout(Duration::from_secs(2));
    let psql = Command::new("psql")
        .args(["-q", "-v", "ON_ERROR_STOP=0", pg_url])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut psql = match psql {
        Ok(p) => Server(p),
        Err(e) => return ctx.tally.error(format!("changer: psql: {e}")),
    };
    let mut stdin = psql.0.stdin.take().expect("piped");
    let mut tick = 0u64;
    while !ctx.stop.load(Ordering::Relaxed) {
        tick += 1;
        let i = rng.below(FILES);
        let p = files.join(format!("d{}/f{i:02}.txt", i % 4));
        if let Err(e) = std::fs::write(&p, format!("file {i} version {tick}\n")) {
            ctx.tally.error(format!("changer: {}: {e}", p.display()));
        }
        ctx.tally.changes.fetch_add(1, Ordering::Relaxed);
        if tick.is_multiple_of(10) {
            let id = 1 + rng.below(50) as i64;
            match lite.execute("update items set v = v + 1 where id = ?1", [id]) {
                Ok(_) => ctx.tally.changes.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    ctx.tally.error(format!("changer: sqlite update: {e}"));
                    0
                }
            };
        }
        if tick.is_multiple_of(20) {
            let id = 1 + rng.below(50);
            match writeln!(stdin, "update {table} set v = v + 1 where id = {id};")
                .and_then(|()| stdin.flush())
            {
                Ok(()) => ctx.tally.changes.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    ctx.tally.error(format!("changer: psql: {e}"));
                    0
                }
            };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(stdin);
    let _ = psql.0.wait();
}

/// One session that subscribes to, reads and unsubscribes from a URI of each mount, and one
/// listen stream on all three: every lazy part of the server (pools, list watches) has run
/// once before the baseline is taken.
fn warm_up(ctx: &Arc<Ctx>) -> Result<(), String> {
    let mut conn = None;
    let sid = open_session(&mut conn, ctx)?;
    let some: Vec<String> = vec![
        ctx.uris[0].clone(),
        ctx.uris[ctx.uris.len() - 2].clone(),
        ctx.uris[ctx.uris.len() - 1].clone(),
    ];
    for u in &some {
        let p = format!(r#"{{"uri":{}}}"#, serde_json::Value::from(u.as_str()));
        legacy_call(&mut conn, ctx, &sid, "resources/subscribe", &p)
            .and_then(|()| legacy_call(&mut conn, ctx, &sid, "resources/read", &p))
            .and_then(|()| legacy_call(&mut conn, ctx, &sid, "resources/unsubscribe", &p))
            .map_err(|e| format!("warm-up: {e}"))?;
    }
    close_session(&mut conn, ctx, &sid).map_err(|e| format!("warm-up: {e}"))?;
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{{"notifications":{{"resourceSubscriptions":{}}},{META_2026}}}}}"#,
        serde_json::Value::from(some)
    );
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: subscriptions/listen\r\ncontent-length: {}\r\n\r\n{body}",
        ctx.addr,
        body.len()
    );
    let (s, _) =
        open_stream(&ctx.addr, head.as_bytes()).map_err(|e| format!("warm-up listen: {e}"))?;
    std::thread::sleep(Duration::from_secs(2));
    drop(s);
    // The warm-up's requests are not part of the churn's tally.
    ctx.tally.requests.store(0, Ordering::Relaxed);
    ctx.tally.sessions_opened.store(0, Ordering::Relaxed);
    Ok(())
}

// ------------------------------------------------------------------------- PostgreSQL

fn pg_available(url: &str) -> bool {
    Command::new("psql")
        .args(["-qAt", "-c", "select 1", url])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn psql(url: &str, sql: &str) -> Result<(), String> {
    let out = Command::new("psql")
        .args(["-qAt", "-v", "ON_ERROR_STOP=1", "-c", sql, url])
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "psql: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The soak's own table in the shared test database, dropped when the run ends.
struct PgTable {
    url: String,
    table: String,
}

impl PgTable {
    fn create(url: &str, table: &str) -> Result<Self, String> {
        psql(
            url,
            &format!(
                "drop table if exists {table}; create table {table} (id int primary key, v int not null); \
                 insert into {table} select g, 0 from generate_series(1, 50) g;"
            ),
        )?;
        Ok(Self {
            url: url.into(),
            table: table.into(),
        })
    }
}

impl Drop for PgTable {
    fn drop(&mut self) {
        let _ = psql(&self.url, &format!("drop table if exists {}", self.table));
    }
}

// ------------------------------------------------------------------------- reporting

fn row(s: &Sample) -> String {
    format!(
        "{:>6.0} s {:<8} rss {:>7.1} MiB  fds {:>5}  threads {:>3}  tasks {:>5}  inotify {:>4}  watched {:>4}  subscribers {:>5}  sessions {:>5}  listens {:>4}",
        s.t,
        s.phase,
        s.rss_mib,
        s.fds,
        s.threads,
        s.tasks,
        s.inotify,
        s.watched,
        s.subscribers,
        s.sessions,
        s.listens
    )
}

fn markdown(samples: &[Sample]) -> String {
    // The count columns are COUNTS, in its order, so the table and the checks cannot drift.
    let names: Vec<&str> = COUNTS.iter().map(|(n, _)| *n).collect();
    let mut t = format!(
        "| t (s) | phase | RSS (MiB) | {} |\n|---:|---|---:|{}\n",
        names.join(" | "),
        "---:|".repeat(names.len())
    );
    for s in samples {
        let counts: Vec<String> = COUNTS.iter().map(|(_, f)| f(s).to_string()).collect();
        t += &format!(
            "| {:.0} | {} | {:.1} | {} |\n",
            s.t,
            s.phase,
            s.rss_mib,
            counts.join(" | ")
        );
    }
    t
}

fn write_outputs(
    out: &Path,
    samples: &[Sample],
    churn: (f64, f64),
    table_md: &str,
    summary: &str,
) -> Result<(), String> {
    let w = |name: &str, text: &str| {
        std::fs::write(out.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    w("soak.md", &format!("{table_md}\n{summary}\n"))?;
    let mut csv = String::from(
        "t_s,phase,rss_mib,fds,threads,runtime_tasks,inotify_watches,watched_resources,subscribers,sessions,listen_streams\n",
    );
    for s in samples {
        let counts: Vec<String> = COUNTS.iter().map(|(_, f)| f(s).to_string()).collect();
        csv += &format!(
            "{:.1},{},{:.2},{}\n",
            s.t,
            s.phase,
            s.rss_mib,
            counts.join(",")
        );
    }
    w("soak.csv", &csv)?;
    let t: Vec<f64> = samples.iter().map(|s| s.t).collect();
    let base = &samples[0];
    let mut series = vec![plot::Series {
        label: "RSS MIB",
        values: samples.iter().map(|s| s.rss_mib).collect(),
        baseline: Some(base.rss_mib),
    }];
    for (name, f) in COUNTS {
        series.push(plot::Series {
            label: name,
            values: samples.iter().map(|s| f(s) as f64).collect(),
            baseline: Some(f(base) as f64),
        });
    }
    plot::draw(&out.join("soak.png"), &t, churn, &series)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_and_the_end_split_across_reads_are_seen() {
        let mut scan = Scan::default();
        let msg = br#"data: {"method":"notifications/resources/updated","params":{}}"#;
        let (a, b) = msg.split_at(30);
        assert_eq!(scan.feed(a), 0);
        assert_eq!(scan.feed(b), 1);
        assert_eq!(scan.feed(b"\n\n\r\n"), 0);
        assert_eq!(scan.feed(&[msg.as_slice(), msg].concat()), 2);
        assert!(!scan.ended);
        assert_eq!(scan.feed(b"\r\n0\r"), 0);
        assert!(!scan.ended);
        scan.feed(b"\n\r\n");
        assert!(scan.ended);
        let mut empty = Scan::default();
        empty.feed(b"0\r\n\r\n");
        assert!(empty.ended);
    }

    #[test]
    fn gauges_are_read_by_exact_name() {
        let m = "mcp_subscribers 3\nmcp_subscriptions 9\nmcp_sessions 2\n";
        assert_eq!(gauge(m, "mcp_subscribers"), Some(3));
        assert_eq!(gauge(m, "mcp_sessions"), Some(2));
        assert_eq!(gauge(m, "mcp_listen_streams"), None);
    }
}
