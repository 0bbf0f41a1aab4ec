//! Every benchmark scenario, each returning its rows; a scenario that fails becomes a row
//! saying why, so one broken peer does not cost the rest of the table.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::fixtures::{Fixtures, TEXT_1K_HEAD, TREE_FILES};
use crate::http::Conn;
use crate::load::{self, HttpTarget, Outcome, Plan, Side};
use crate::proc::{INITIALIZE, StdioServer, Watchdog, rss};
use crate::report::Row;
use crate::stats::Samples;

const MIB: f64 = 1024.0 * 1024.0;

/// Everything a scenario needs to know about this run.
pub struct Env {
    /// `target/release/mcp-resources`.
    pub server: PathBuf,
    /// This binary (its `echo` mode is the floor).
    pub me: PathBuf,
    /// The cache directory (configs are written here).
    pub cache: PathBuf,
    /// The fixtures.
    pub fx: Fixtures,
    /// Smaller fixtures, shorter phases.
    pub quick: bool,
    /// Node for the npm peers, and the directory holding their `node_modules`.
    pub node: Result<(PathBuf, PathBuf), String>,
    /// The `mcp-server-opendal` executable, or why there is none.
    pub opendal: Result<PathBuf, String>,
    /// An earlier build taking turns with `server` in the stdio, blob and HTTP read rounds.
    pub baseline: Option<Baseline>,
}

/// An earlier build run beside the one under test (`mcpr-bench run --baseline`): it gets the
/// same config and requests as `server` and a turn in each of the rounds it takes, so the two
/// see the same machine and "as fast as before" is a comparison within one run.
pub struct Baseline {
    /// Its `mcp-resources` binary.
    pub bin: PathBuf,
    /// What its rows are called after (`mcp-resources, LABEL`).
    pub label: String,
}

impl Baseline {
    /// The subject of its rows.
    fn subject(&self) -> String {
        format!("mcp-resources, {}", self.label)
    }

    /// The note of its rows: what ran, how, and where.
    fn note(&self, how: &str) -> String {
        format!(
            "the baseline build {} (--baseline), with the same config and requests as mcp-resources, {how}",
            self.bin.display()
        )
    }
}

impl Env {
    pub(crate) fn plan(&self) -> Plan {
        if self.quick {
            Plan {
                iters: 2_000,
                max_latency_phase: Duration::from_secs(3),
                throughput_phase: Duration::from_millis(1500),
                warmup: 200,
            }
        } else {
            Plan {
                iters: 20_000,
                max_latency_phase: Duration::from_secs(10),
                throughput_phase: Duration::from_secs(5),
                warmup: 2_000,
            }
        }
    }

    pub(crate) fn reps(&self, full: usize) -> usize {
        if self.quick { (full / 4).max(3) } else { full }
    }

    /// Our config: the small tree with debounce 0, the database, limits opened for load.
    pub(crate) fn ours_config(&self) -> Result<PathBuf, String> {
        let p = self.cache.join("ours.toml");
        let text = format!(
            r#"# Written by mcpr-bench: the mounts and limits the benchmark runs with.
[server]
page_size = 1000
max_read_bytes = "16MiB"
max_subscriptions_per_session = 20000

[http]
rate_limit_per_second = 0
max_sessions = 5000
max_concurrent_requests = 4096

[[mount]]
kind = "files"
root = "{}"
debounce_ms = 0

[[mount]]
kind = "sqlite"
name = "bench"
url = "sqlite://{}"
"#,
            self.fx.small.display(),
            self.fx.db.display()
        );
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(p)
    }

    /// Whether the baseline takes the config its scenarios give it (`check-config`, as old as
    /// the bench): an earlier build may not know a key a later bench writes, and that is
    /// better said before the run than as failed rows at its end.
    pub(crate) fn baseline_accepts_config(&self) -> Result<(), String> {
        let Some(b) = &self.baseline else {
            return Ok(());
        };
        let cfg = self.ours_config()?;
        let out = Command::new(&b.bin)
            .arg("check-config")
            .arg(&cfg)
            .output()
            .map_err(|e| format!("cannot run it: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "it refuses the config the bench writes ({}): {}",
            cfg.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }

    /// The large tree alone, 1000 entries per page.
    fn big_config(&self) -> Result<PathBuf, String> {
        let p = self.cache.join("big.toml");
        let text = format!(
            "# Written by mcpr-bench.\n[server]\npage_size = 1000\n\n[[mount]]\nkind = \"files\"\nroot = \"{}\"\n",
            self.fx.big.display()
        );
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(p)
    }

    pub(crate) fn ours(&self, config: &Path) -> Command {
        Self::serve(&self.server, config)
    }

    /// `bin serve` with `config`: the command line of the server under test and of the
    /// baseline alike (`serve`, `--log-level` and `--config` are as old as the bench).
    fn serve(bin: &Path, config: &Path) -> Command {
        let mut c = Command::new(bin);
        c.args(["serve", "--log-level", "error", "--config"])
            .arg(config);
        c
    }

    fn node_pkg(&self, pkg: &str) -> Result<(PathBuf, PathBuf), String> {
        let (node, dir) = self.node.as_ref().map_err(Clone::clone)?;
        let script = dir
            .join("node_modules/@modelcontextprotocol")
            .join(pkg)
            .join("dist/index.js");
        if !script.exists() {
            return Err(format!("{} is not installed", script.display()));
        }
        Ok((node.clone(), script))
    }

    fn everything(&self, transport: &str) -> Result<Command, String> {
        let (node, script) = self.node_pkg("server-everything")?;
        let mut c = Command::new(node);
        c.arg(script).arg(transport);
        Ok(c)
    }

    fn filesystem(&self) -> Result<Command, String> {
        let (node, script) = self.node_pkg("server-filesystem")?;
        let mut c = Command::new(node);
        c.arg(script).arg(&self.fx.small);
        Ok(c)
    }

    fn opendal(&self) -> Result<Command, String> {
        let bin = self.opendal.as_ref().map_err(Clone::clone)?;
        let mut c = Command::new(bin);
        // Scheme `bench` is an fs operator rooted at the small tree: `bench://f1k.txt`.
        c.env("OPENDAL_BENCH_TYPE", "fs")
            .env("OPENDAL_BENCH_ROOT", &self.fx.small)
            .env("LOG_LEVEL", "WARNING");
        Ok(c)
    }

    pub(crate) fn file_uri(&self, name: &str) -> String {
        format!("file://{}/{name}", self.fx.small.display())
    }
}

/// A peer in the read comparison: name, command, request maker, expected text, the
/// throughput multiple we must reach over it, and what counts as equivalent work.
type ReadPeer<'a> = (
    &'a str,
    Result<Command, String>,
    Box<dyn Fn(u64) -> String + Sync + 'a>,
    &'a str,
    Option<f64>,
    &'a str,
);
/// A server in the blob comparison: name, command, request for a file name, expected text, note.
type BlobSubject<'a> = (
    &'a str,
    Result<Command, String>,
    Box<dyn Fn(&str) -> String + 'a>,
    &'a str,
    &'a str,
);
/// A server in the start-up comparison and how to start it.
type Starter<'a> = (&'a str, Box<dyn Fn() -> Result<Command, String> + 'a>);

/// Turn a scenario's failure into a row that says so.
pub(crate) fn guard(scenario: &str, subject: &str, r: Result<Vec<Row>, String>) -> Vec<Row> {
    r.unwrap_or_else(|e| {
        eprintln!("bench: {scenario} / {subject}: {e}");
        vec![Row::skipped(scenario, subject, format!("failed: {e}"))]
    })
}

/// Pin this process (every thread) to `cpus` (a `taskset` list such as `0` or `0-1`).
fn pin_self(cpus: &str) -> Result<(), String> {
    let ok = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &std::process::id().to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err(format!("taskset could not pin the driver to CPU {cpus}"))
    }
}

/// `cmd` run under `taskset -c CPU`, same arguments and environment.
fn pinned(cmd: Command, cpu: &str) -> Command {
    let mut p = Command::new("taskset");
    p.args(["-c", cpu])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => p.env(k, v),
            None => p.env_remove(k),
        };
    }
    p
}

/// Where the driver and a stdio server run for the floor-against-ours comparison. Left to
/// the scheduler, a server lands on the driver's core for some runs and on the other core for
/// others, and on a VM the two differ several-fold (a wake-up on one core is a context
/// switch; on the other it is an inter-processor interrupt to a halted vCPU): the echo floor
/// measured 5 µs in one process and 45 µs in the next. So the comparison runs in fixed
/// placements, every subject in the same ones.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Driver on CPU 0, servers on CPU 1: every round trip crosses cores.
    CrossCore,
    /// Driver and servers on CPU 1: every round trip is a context switch on one core.
    SameCore,
    /// Left to the scheduler (one CPU, or no `taskset`).
    Unpinned,
}

impl Placement {
    /// The placements this machine allows: both fixed ones given two CPUs and `taskset`.
    fn available() -> Vec<Self> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let taskset = Command::new("taskset")
            .arg("-V")
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if cpus >= 2 && taskset {
            vec![Self::CrossCore, Self::SameCore]
        } else {
            vec![Self::Unpinned]
        }
    }

    fn cpus(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::CrossCore => Some(("0", "1")),
            Self::SameCore => Some(("1", "1")),
            Self::Unpinned => None,
        }
    }

    /// What goes into a metric's name.
    fn label(self) -> &'static str {
        match self {
            Self::CrossCore => ", cross-core",
            Self::SameCore => ", same core",
            Self::Unpinned => "",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::CrossCore => "; driver pinned to CPU 0, servers to CPU 1",
            Self::SameCore => "; driver and servers pinned to CPU 1",
            Self::Unpinned => "; placement left to the scheduler",
        }
    }

    /// Pin the driver for as long as the guard lives; servers started meanwhile go through
    /// [`Pinned::cmd`].
    fn enter(self) -> Result<Pinned, String> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if let Some((driver, _)) = self.cpus() {
            pin_self(driver)?;
        }
        Ok(Pinned {
            placement: self,
            restore: cpus,
        })
    }
}

/// The driver pinned to a [`Placement`]; restores every CPU on drop.
struct Pinned {
    placement: Placement,
    restore: usize,
}

impl Pinned {
    fn cmd(&self, cmd: Command) -> Command {
        match self.placement.cpus() {
            Some((_, server)) => pinned(cmd, server),
            None => cmd,
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.placement.cpus().is_some() {
            let _ = pin_self(&format!("0-{}", self.restore - 1));
        }
    }
}

pub(crate) fn free_addr() -> Result<String, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no port: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.to_string())
}

/// Wait until `addr` accepts connections; an error at once if `child`, the process that is
/// to listen there, exits first (a server refusing its config would cost 20 s otherwise).
fn wait_port(addr: &str, child: &mut std::process::Child) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("it exited ({status}) before listening on {addr}"));
        }
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("nothing listens on {addr} after 20 s"))
}

pub(crate) fn read_req(uri: &str) -> impl Fn(u64) -> String + Sync + use<> {
    let uri = serde_json::to_string(uri).expect("string");
    move |id| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":{uri}}}}}"#
        )
    }
}

fn tool_req(tool: &'static str, args: serde_json::Value) -> impl Fn(u64) -> String + Sync {
    let args = args.to_string();
    move |id| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#
        )
    }
}

pub(crate) const META_2026: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"mcpr-bench","version":"0"}}"#;

fn read_req_2026(uri: &str) -> impl Fn(u64) -> String + Sync + use<> {
    let uri = serde_json::to_string(uri).expect("string");
    move |id| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{{"uri":{uri},{META_2026}}}}}"#
        )
    }
}

/// Rounds in which the floors and our server take turns in the stdio read scenario.
const ROUNDS: usize = 10;

/// The 1 KiB read over stdio: the two floors and us in each placement, then the 2026-07-28
/// era and each peer doing the same work.
pub fn stdio_read(env: &Env) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut ours_rps = None;
    for placement in Placement::available() {
        let (r, rps) = floors_and_ours(env, placement);
        rows.extend(r);
        // The peers' multiple is taken against the placement where each process has a core.
        ours_rps = ours_rps.or(rps);
    }
    rows.extend(modern_and_peers(env, ours_rps));
    rows
}

const STDIO_READ: &str = "stdio read 1 KiB";

/// `mcpr-bench drive`: one server, 32 reads of `uri` in flight for `seconds` (after at most
/// 2 s of warm-up and one-in-flight latency), its throughput printed; with `one`, one read in
/// flight for `seconds` instead, its latency printed. The server's pid goes to stderr before
/// the load starts, so a profiler can attach during the warm-up.
pub fn drive(cmd: &[String], uri: &str, init: bool, one: bool, seconds: u64) -> Result<(), String> {
    let (bin, args) = cmd.split_first().ok_or("no server command")?;
    let mut s = StdioServer::spawn(Command::new(bin).args(args), false)?;
    if init {
        s.initialize()?;
    }
    eprintln!("pid {}", s.pid());
    let (iters, latency_s, throughput_s) = match one {
        true => (usize::MAX, seconds, 0),
        false => (5_000, 1, seconds),
    };
    let plan = load::Plan {
        iters,
        max_latency_phase: Duration::from_secs(latency_s),
        throughput_phase: Duration::from_secs(throughput_s),
        warmup: 5_000,
    };
    let read = read_req(uri);
    let check = if init { TEXT_1K_HEAD } else { "resources/read" };
    let mut o = load::stdio(&mut s, &read, check, !init, plan)?;
    if one {
        println!(
            "{} round trips, 1 in flight: p50 {:.1} µs, p99 {:.1} µs; {} error answers",
            o.latency.len(),
            o.latency.p50_us(),
            o.latency.p99_us(),
            o.errors
        );
        s.end(Duration::from_secs(30));
        return Ok(());
    }
    println!(
        "{:.0} req/s at 32 in flight; 1 in flight p50 {:.1} µs, p99 {:.1} µs; {} error answers",
        o.rps,
        o.latency.p50_us(),
        o.latency.p99_us(),
        o.errors
    );
    s.end(Duration::from_secs(30));
    Ok(())
}

/// A 2026-07-28 stateless `resources/read` of `uri` at `addr`'s `/mcp`, with the headers
/// that version requires.
fn stateless_read<'a>(addr: &str, uri: &str, make: load::MakeRequest<'a>) -> HttpTarget<'a> {
    HttpTarget {
        addr: addr.to_owned(),
        path: "/mcp".into(),
        headers: vec![
            ("mcp-protocol-version".into(), "2026-07-28".into()),
            ("mcp-method".into(), "resources/read".into()),
            ("mcp-name".into(), uri.to_owned()),
        ],
        make,
    }
}

/// [`drive`] for an HTTP server: the load of the stateless read rows, printed.
pub fn drive_http(addr: &str, uri: &str, seconds: u64) -> Result<(), String> {
    let make = read_req_2026(uri);
    let target = stateless_read(addr, uri, &make);
    let plan = load::Plan {
        iters: 2_000,
        max_latency_phase: Duration::from_secs(1),
        throughput_phase: Duration::from_secs(seconds),
        warmup: 2_000,
    };
    let mut o = load::http(&target, TEXT_1K_HEAD, plan)?;
    println!(
        "{:.0} req/s at {} connections; 1 connection p50 {:.1} µs, p99 {:.1} µs; {} error answers",
        o.rps,
        load::WINDOW,
        o.latency.p50_us(),
        o.latency.p99_us(),
        o.errors
    );
    Ok(())
}

/// The echo floor, the file floor and our server in alternating rounds in one placement:
/// their rows, and our throughput.
fn floors_and_ours(env: &Env, placement: Placement) -> (Vec<Row>, Option<f64>) {
    const S: &str = STDIO_READ;
    let plan = env.plan();
    let at = placement.label();
    let uri = env.file_uri("f1k.txt");
    let echo = || {
        let mut c = Command::new(&env.me);
        c.arg("echo");
        c
    };
    let file_echo = || {
        let mut c = Command::new(&env.me);
        c.arg("file-echo").arg(&env.fx.small).arg("f1k.txt");
        c
    };
    let min_file_echo = || {
        let mut c = Command::new(&env.me);
        c.arg("min-file-echo").arg(&env.fx.small).arg("f1k.txt");
        c
    };
    let machine_floor = || {
        let mut c = Command::new(&env.me);
        c.arg("machine-floor").arg(&env.fx.small).arg("f1k.txt");
        c
    };
    type Sides = (
        Outcome,
        Outcome,
        Outcome,
        Outcome,
        Result<Outcome, String>,
        Option<Result<Outcome, String>>,
    );
    let trio = (|| -> Result<Sides, String> {
        let pin = placement.enter()?;
        let mut f = StdioServer::spawn(&mut pin.cmd(echo()), false)?;
        let _fw = Watchdog::arm(f.pid(), Duration::from_secs(120));
        let mut ff = StdioServer::spawn(&mut pin.cmd(file_echo()), false)?;
        let _ffw = Watchdog::arm(ff.pid(), Duration::from_secs(120));
        let mut mf = StdioServer::spawn(&mut pin.cmd(min_file_echo()), false)?;
        let _mfw = Watchdog::arm(mf.pid(), Duration::from_secs(120));
        let mut xf = StdioServer::spawn(&mut pin.cmd(machine_floor()), false)?;
        let _xfw = Watchdog::arm(xf.pid(), Duration::from_secs(120));
        let read = read_req(&uri);
        let mut ours = env.ours_config().and_then(|cfg| {
            let mut o = StdioServer::spawn(&mut pin.cmd(env.ours(&cfg)), false)?;
            o.initialize()?;
            Ok(o)
        });
        let _ow = ours
            .as_ref()
            .ok()
            .map(|o| Watchdog::arm(o.pid(), Duration::from_secs(120)));
        // The baseline is checked before the rounds, so a build that cannot serve this read
        // costs its own rows only.
        let mut before = env.baseline.as_ref().map(|b| {
            let cfg = env.ours_config()?;
            let mut o = StdioServer::spawn(&mut pin.cmd(Env::serve(&b.bin, &cfg)), false)?;
            o.initialize()?;
            o.send_now(read(7).as_bytes())?;
            load::verify(o.recv_response()?, TEXT_1K_HEAD)?;
            Ok::<_, String>(o)
        });
        let _bw = before
            .as_ref()
            .and_then(|b| b.as_ref().ok())
            .map(|o| Watchdog::arm(o.pid(), Duration::from_secs(120)));
        // The machine floor does only the work of our answer if it gives our answer.
        if let Ok(o) = &mut ours {
            let msg = read(7);
            let answer = |s: &mut StdioServer| -> Result<Vec<u8>, String> {
                s.send_now(msg.as_bytes())?;
                s.recv_response().map(<[u8]>::to_vec)
            };
            let (a, b) = (answer(o)?, answer(&mut xf)?);
            if a != b {
                return Err(format!(
                    "the machine floor's answer differs from ours: ours {}, floor {}",
                    crate::proc::preview(&a),
                    crate::proc::preview(&b)
                ));
            }
        }
        // Our server takes its turns when it started; the floors are measured either way.
        let mut sides: Vec<Side> = vec![
            (&mut f, &read, "resources/read", true),
            (&mut ff, &read, "resources/read", true),
            (&mut mf, &read, "resources/read", true),
            (&mut xf, &read, TEXT_1K_HEAD, true),
        ];
        if let Ok(o) = &mut ours {
            sides.push((o, &read, TEXT_1K_HEAD, false));
        }
        // In the same rounds the floors take turns in.
        if let Some(Ok(b)) = &mut before {
            sides.push((b, &read, TEXT_1K_HEAD, false));
        }
        let mut v = load::stdio_interleaved(sides, plan, ROUNDS)?.into_iter();
        let (Some(floor), Some(file), Some(min_file), Some(machine)) =
            (v.next(), v.next(), v.next(), v.next())
        else {
            return Err("the driver lost a floor's outcome".into());
        };
        let ours = ours.and_then(|_| v.next().ok_or_else(|| "the driver lost our outcome".into()));
        let before = before.map(|b| {
            b.and_then(|_| {
                v.next()
                    .ok_or_else(|| "the driver lost the baseline's outcome".into())
            })
        });
        Ok((floor, file, min_file, machine, ours, before))
    })();
    let (mut floor, mut file, mut min_file, mut machine, ours, before) = match trio {
        Ok(t) => t,
        Err(e) => return (vec![Row::skipped(S, "echo floor", e)], None),
    };
    let mut rows = Vec::new();
    let p50m = format!("p50 (1 in flight{at})");
    let p99m = format!("p99 (1 in flight{at})");
    let rpsm = format!("throughput (32 in flight{at})");
    let (f50, f99, frps) = (floor.latency.p50_us(), floor.latency.p99_us(), floor.rps);
    let floor_note = &format!(
        "the echo floor: a process that writes each request line back (flushing per line), driven by the same client; a round trip through two pipes; measured in {ROUNDS} rounds alternating with the file floor and mcp-resources{}",
        placement.describe()
    );
    rows.push(Row::new(S, "echo floor", &p50m, f50, "µs").note(floor_note));
    rows.push(Row::new(S, "echo floor", &p99m, f99, "µs").note(floor_note));
    rows.push(Row::new(S, "echo floor", &rpsm, frps, "req/s").note(floor_note));
    let (ff50, ff99, ffrps) = (file.latency.p50_us(), file.latency.p99_us(), file.rps);
    let file_note = &format!(
        "the file floor: the echo floor plus, for every line, the system calls mcp-resources makes to read the 1 KiB file (statx, openat2 beneath the directory, read, statx of the descriptor, close) and the text in the answer as a JSON string; no JSON parsing, URI or rules; measured in the same rounds{}",
        placement.describe()
    );
    rows.push(
        Row::new(S, "file floor", &p50m, ff50, "µs")
            .compare(format!("echo floor + {:.1} µs", ff50 - f50))
            .note(file_note),
    );
    rows.push(
        Row::new(S, "file floor", &p99m, ff99, "µs")
            .compare(format!("{:.2}× echo floor p99", ff99 / f99))
            .note(file_note),
    );
    rows.push(
        Row::new(S, "file floor", &rpsm, ffrps, "req/s")
            .compare(format!("{:.0} % of echo floor", 100.0 * ffrps / frps))
            .note(file_note),
    );
    let (mf50, mf99, mfrps) = (
        min_file.latency.p50_us(),
        min_file.latency.p99_us(),
        min_file.rps,
    );
    let min_note = &format!(
        "the minimal file floor: the echo floor plus, for every line, the four calls any reader of a file makes (openat, fstat, read, close; no RESOLVE_BENEATH, no link or rewrite check) and the same answer in one write; measured in the same rounds{}",
        placement.describe()
    );
    rows.push(
        Row::new(S, "minimal file floor", &p50m, mf50, "µs")
            .compare(format!("echo floor + {:.1} µs", mf50 - f50))
            .note(min_note),
    );
    rows.push(
        Row::new(S, "minimal file floor", &p99m, mf99, "µs")
            .compare(format!("{:.2}× echo floor p99", mf99 / f99))
            .note(min_note),
    );
    rows.push(
        Row::new(S, "minimal file floor", &rpsm, mfrps, "req/s")
            .compare(format!(
                "{:.0} % of echo floor; the five-call floor is {:.0} % of it",
                100.0 * mfrps / frps,
                100.0 * ffrps / mfrps
            ))
            .note(min_note),
    );
    let (xf50, xf99, xfrps) = (
        machine.latency.p50_us(),
        machine.latency.p99_us(),
        machine.rps,
    );
    let machine_note = &format!(
        "the machine floor (`mcpr-bench machine-floor`, rustix calls only: no serde, no buffered I/O): for every line the id and URI found by a scan, openat, fstat, read, close, the text escaped by a table, and our exact read answer in one write; what a C reader does; measured in the same rounds{}",
        placement.describe()
    );
    rows.push(
        Row::new(S, "machine floor", &p50m, xf50, "µs")
            .compare(format!("echo floor + {:.1} µs", xf50 - f50))
            .note(machine_note),
    );
    rows.push(
        Row::new(S, "machine floor", &p99m, xf99, "µs")
            .compare(format!("{:.2}× echo floor p99", xf99 / f99))
            .note(machine_note),
    );
    rows.push(
        Row::new(S, "machine floor", &rpsm, xfrps, "req/s")
            .compare(format!(
                "{:.0} % of echo floor; the minimal file floor is {:.0} % of it",
                100.0 * xfrps / frps,
                100.0 * mfrps / xfrps
            ))
            .note(machine_note),
    );
    let ours_note = &format!(
        "resources/read of a 1024-byte text file (legacy session after initialize), answered with its text{}",
        placement.describe()
    );
    let mut o = match ours {
        Ok(o) => o,
        Err(e) => {
            rows.push(Row::skipped(S, "mcp-resources", format!("failed: {e}")));
            // The baseline's figures stand without ours to compare with.
            if let (Some(b), Some(before)) = (&env.baseline, before) {
                rows.extend(stdio_baseline(b, before, None, placement, &rpsm));
            }
            return (rows, None);
        }
    };
    let (p50, p99) = (o.latency.p50_us(), o.latency.p99_us());
    rows.push(
        Row::new(S, "mcp-resources", &p50m, p50, "µs")
            .compare(
                format!(
                    "floor + {:.1} µs; file floor + {:.1} µs",
                    p50 - f50,
                    p50 - ff50
                ) + &format!("; minimal file floor + {:.1} µs", p50 - mf50),
            )
            .target("≤ floor + 15 µs", p50 <= f50 + 15.0)
            .note(ours_note),
    );
    rows.push(
        Row::new(S, "mcp-resources", &p99m, p99, "µs")
            .compare(
                format!(
                    "{:.2}× floor p99; {:.2}× file floor p99",
                    p99 / f99,
                    p99 / ff99
                ) + &format!("; {:.2}× minimal file floor p99", p99 / mf99),
            )
            .target("≤ 1.2× minimal file floor p99", p99 <= 1.2 * mf99)
            .note(ours_note),
    );
    rows.push(
        Row::new(S, "mcp-resources", &rpsm, o.rps, "req/s")
            .compare(
                format!(
                    "{:.0} % of floor; {:.0} % of file floor",
                    100.0 * o.rps / frps,
                    100.0 * o.rps / ffrps
                ) + &format!(
                    "; {:.0} % of minimal file floor; {:.0} % of machine floor",
                    100.0 * o.rps / mfrps,
                    100.0 * o.rps / xfrps
                ),
            )
            .target("≥ 75 % of minimal file floor", o.rps >= 0.75 * mfrps)
            .note(ours_note),
    );
    rows.push(
        Row::new(
            S,
            "mcp-resources",
            &format!("ours / machine floor (32 in flight{at})"),
            100.0 * o.rps / xfrps,
            "%",
        )
        .target("≥ 75 %", o.rps >= 0.75 * xfrps)
        .note("ours' req/s over the machine floor's, measured in the same alternating rounds"),
    );
    if o.errors > 0 {
        rows.push(Row::new(
            S,
            "mcp-resources",
            "error answers",
            o.errors as f64,
            "",
        ));
    }
    if let (Some(b), Some(before)) = (&env.baseline, before) {
        rows.extend(stdio_baseline(
            b,
            before,
            Some((p50, p99, o.rps, &o.round_rps)),
            placement,
            &rpsm,
        ));
    }
    (rows, Some(o.rps))
}

/// What ours measured in one placement, for the baseline's rows: p50 and p99 (µs), req/s,
/// and req/s in each round.
type OursStdio<'a> = (f64, f64, f64, &'a [f64]);

/// The baseline's rows of the stdio read in one placement, with ours (when it ran) against
/// them: p50 and p99 compared, and the throughput held to "as fast as before", over the run
/// and round by round.
fn stdio_baseline(
    b: &Baseline,
    before: Result<Outcome, String>,
    ours: Option<OursStdio>,
    placement: Placement,
    rpsm: &str,
) -> Vec<Row> {
    const S: &str = STDIO_READ;
    let subject = b.subject();
    let mut before = match before {
        Ok(o) => o,
        Err(e) => return vec![Row::skipped(S, &subject, format!("failed: {e}"))],
    };
    let at = placement.label();
    let note = &b.note(&format!(
        "taking its turns in the same rounds as the floors and mcp-resources{}",
        placement.describe()
    ));
    let (b50, b99) = (before.latency.p50_us(), before.latency.p99_us());
    let vs = |mine: Option<f64>, theirs: f64| {
        mine.map_or_else(String::new, |m| {
            format!("ours {:+.1} µs ({:.2}× this)", m - theirs, m / theirs)
        })
    };
    let mut rows = vec![
        Row::new(S, &subject, &format!("p50 (1 in flight{at})"), b50, "µs")
            .compare(vs(ours.map(|o| o.0), b50))
            .note(note),
        Row::new(S, &subject, &format!("p99 (1 in flight{at})"), b99, "µs")
            .compare(vs(ours.map(|o| o.1), b99))
            .note(note),
        Row::new(S, &subject, rpsm, before.rps, "req/s").note(note),
    ];
    if before.errors > 0 {
        rows.push(Row::new(
            S,
            &subject,
            "error answers",
            before.errors as f64,
            "",
        ));
    }
    if let Some((_, _, rps, each)) = ours {
        let rounds: Vec<(f64, f64)> = each
            .iter()
            .copied()
            .zip(before.round_rps.iter().copied())
            .collect();
        rows.push(
            crate::report::after_before(
                S,
                &format!("throughput (32 in flight{at})"),
                rps,
                before.rps,
                "req/s",
                &rounds,
                true,
            )
            .note(&format!(
                "ours' req/s over the baseline's ({}), measured in the same alternating rounds",
                b.label
            )),
        );
    }
    rows
}

/// The read in the 2026-07-28 era, and each peer doing the same work, placed by the
/// scheduler (the Node and Python peers run several threads each, which one pinned CPU
/// would squeeze); the peers' throughput against `ours_rps`.
fn modern_and_peers(env: &Env, ours_rps: Option<f64>) -> Vec<Row> {
    const S: &str = STDIO_READ;
    let plan = env.plan();
    let mut rows = Vec::new();
    let uri = env.file_uri("f1k.txt");
    let run = |cmd: Result<Command, String>,
               init: bool,
               make: &(dyn Fn(u64) -> String + Sync),
               check: &str|
     -> Result<Outcome, String> {
        let mut s = StdioServer::spawn(&mut cmd?, false)?;
        let _w = Watchdog::arm(s.pid(), Duration::from_secs(120));
        if init {
            s.initialize()?;
        }
        load::stdio(&mut s, make, check, false, plan)
    };

    // The same read in the stateless era: no initialize (so no list watch), _meta on every
    // request, cache hints in every answer. Not a target row; it shows what the era costs.
    let modern = env.ours_config().and_then(|cfg| {
        run(
            Ok(env.ours(&cfg)),
            false,
            &read_req_2026(&uri),
            TEXT_1K_HEAD,
        )
    });
    let modern_note = "the same read as 2026-07-28 requests (no initialize, _meta on each request, ttlMs/cacheScope in each answer); placement left to the scheduler";
    match modern {
        Ok(mut o) => {
            let s = "mcp-resources, 2026-07-28";
            let (p50, p99) = (o.latency.p50_us(), o.latency.p99_us());
            rows.push(Row::new(S, s, "p50 (1 in flight)", p50, "µs").note(modern_note));
            rows.push(Row::new(S, s, "p99 (1 in flight)", p99, "µs").note(modern_note));
            let mut r =
                Row::new(S, s, "throughput (32 in flight)", o.rps, "req/s").note(modern_note);
            if let Some(ours) = ours_rps {
                r = r.compare(format!("{:.0} % of the legacy read", 100.0 * o.rps / ours));
            }
            rows.push(r);
        }
        Err(e) => rows.push(Row::skipped(
            S,
            "mcp-resources, 2026-07-28",
            format!("failed: {e}"),
        )),
    }

    let peers: Vec<ReadPeer> = vec![
        (
            "server-everything",
            env.everything("stdio"),
            Box::new(read_req("demo://resource/static/document/extension.md")),
            "Extension",
            Some(2.0),
            "server-everything 2026.8.31: resources/read of its static document extension.md (965 bytes, read from disk per request) — the closest file-backed text resource it has",
        ),
        (
            "server-filesystem",
            env.filesystem(),
            Box::new(tool_req(
                "read_text_file",
                serde_json::json!({ "path": env.fx.small.join("f1k.txt") }),
            )),
            TEXT_1K_HEAD,
            Some(10.0),
            "server-filesystem 2026.8.31: tools/call read_text_file on the same 1024-byte file (it has no resources)",
        ),
        (
            "mcp-server-opendal",
            env.opendal(),
            Box::new(read_req("bench://f1k.txt")),
            TEXT_1K_HEAD,
            None,
            "mcp-server-opendal 0.2.0 (mcp 1.x, CPython 3.12): resources/read of its {scheme}://{path} template, bench://f1k.txt, an fs operator on the same directory",
        ),
    ];
    for (name, cmd, make, check, want, note) in peers {
        let note = &format!("{note}; placement left to the scheduler");
        match run(cmd, true, &*make, check) {
            Ok(mut o) => {
                let (p50, p99) = (o.latency.p50_us(), o.latency.p99_us());
                rows.push(Row::new(S, name, "p50 (1 in flight)", p50, "µs").note(note));
                rows.push(Row::new(S, name, "p99 (1 in flight)", p99, "µs").note(note));
                let mut r =
                    Row::new(S, name, "throughput (32 in flight)", o.rps, "req/s").note(note);
                if let Some(ours) = ours_rps {
                    r = r.compare(format!("ours is {:.1}× this", ours / o.rps));
                    if let Some(w) = want {
                        r = r.target(&format!("ours ≥ {w:.0}× this"), ours >= w * o.rps);
                    }
                }
                rows.push(r);
            }
            Err(e) => rows.push(Row::skipped(S, name, format!("not run: {e}"))),
        }
    }
    rows
}

/// Legacy HTTP session set-up: `initialize`, then `notifications/initialized`.
fn http_session(addr: &str, path: &str) -> Result<String, String> {
    let mut c = Conn::connect(addr)?;
    let r = c.post(path, &[], INITIALIZE.as_bytes())?;
    if r.status != 200 {
        return Err(format!(
            "initialize answered {}: {}",
            r.status,
            crate::proc::preview(&r.body)
        ));
    }
    let sid = r
        .header("mcp-session-id")
        .ok_or("initialize answered without Mcp-Session-Id")?
        .to_owned();
    let r = c.post(
        path,
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        crate::proc::INITIALIZED.as_bytes(),
    )?;
    if r.status >= 300 {
        return Err(format!("notifications/initialized answered {}", r.status));
    }
    Ok(sid)
}

/// A server listening on a free loopback port.
struct HttpProc {
    child: std::process::Child,
    addr: String,
}

impl HttpProc {
    fn start(mut cmd: Command, addr: String) -> Result<Self, String> {
        let child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
        let mut p = Self { child, addr };
        wait_port(&p.addr, &mut p.child)?;
        Ok(p)
    }
}

impl Drop for HttpProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ours on HTTP, with the tool bridge when `tools`.
fn ours_http(env: &Env, tools: bool) -> Result<HttpProc, String> {
    let addr = free_addr()?;
    let mut cmd = env.ours(&env.ours_config()?);
    cmd.args(["--http", &addr]);
    if tools {
        cmd.arg("--tools");
    }
    HttpProc::start(cmd, addr)
}

fn everything_http(env: &Env) -> Result<HttpProc, String> {
    let addr = free_addr()?;
    let port = addr.rsplit(':').next().unwrap_or_default().to_owned();
    let mut cmd = env.everything("streamableHttp")?;
    cmd.env("PORT", port);
    HttpProc::start(cmd, addr)
}

/// The 1 KiB read over Streamable HTTP: a legacy session; 2026-07-28 stateless JSON against
/// the HTTP floor; server-everything; then the load of the published cross-language MCP
/// benchmarks.
pub fn http_read(env: &Env) -> Vec<Row> {
    const S: &str = HTTP_READ;
    let plan = env.plan();
    let uri = env.file_uri("f1k.txt");
    let mut rows = Vec::new();
    let emit = |rows: &mut Vec<Row>, subject: &str, mode: &str, mut o: Outcome, note: &str| {
        rows.push(
            Row::new(S, subject, &format!("{mode} p50"), o.latency.p50_us(), "µs").note(note),
        );
        rows.push(
            Row::new(S, subject, &format!("{mode} p99"), o.latency.p99_us(), "µs").note(note),
        );
        rows.push(
            Row::new(
                S,
                subject,
                &format!("{mode} throughput (32 conns)"),
                o.rps,
                "req/s",
            )
            .note(note),
        );
        if o.errors > 0 {
            rows.push(Row::new(
                S,
                subject,
                &format!("{mode} error answers"),
                o.errors as f64,
                "",
            ));
        }
    };
    let ours = (|| -> Result<Vec<Row>, String> {
        let server = ours_http(env, false)?;
        let mut rows = Vec::new();
        let sid = http_session(&server.addr, "/mcp")?;
        let legacy = HttpTarget {
            addr: server.addr.clone(),
            path: "/mcp".into(),
            headers: vec![
                ("mcp-session-id".into(), sid),
                ("mcp-protocol-version".into(), "2025-11-25".into()),
            ],
            make: &read_req(&uri),
        };
        let o = load::http(&legacy, TEXT_1K_HEAD, plan)?;
        emit(
            &mut rows,
            "mcp-resources",
            "legacy session",
            o,
            "POST resources/read of the 1024-byte file in one Mcp-Session-Id session (answers are SSE, as rmcp sends for sessions), keep-alive connections",
        );
        Ok(rows)
    })();
    rows.extend(guard(S, "mcp-resources", ours));
    rows.extend(guard(S, "mcp-resources", stateless_and_floor(env)));
    let peer = (|| -> Result<Vec<Row>, String> {
        let server = everything_http(env)?;
        let mut rows = Vec::new();
        let sid = http_session(&server.addr, "/mcp")?;
        let legacy = HttpTarget {
            addr: server.addr.clone(),
            path: "/mcp".into(),
            headers: vec![
                ("mcp-session-id".into(), sid),
                ("mcp-protocol-version".into(), "2025-11-25".into()),
            ],
            make: &read_req("demo://resource/static/document/extension.md"),
        };
        let o = load::http(&legacy, "Extension", plan)?;
        emit(
            &mut rows,
            "server-everything",
            "legacy session",
            o,
            "server-everything 2026.8.31 streamableHttp (its only HTTP mode is sessions): resources/read of extension.md (965 bytes) in one session",
        );
        Ok(rows)
    })();
    rows.extend(guard(S, "server-everything", peer));
    rows.push(Row::skipped(
        S,
        "server-filesystem",
        "stdio only: it has no HTTP transport".into(),
    ));
    rows.extend(guard(K6_SHAPE, "mcp-resources", k6_shape(env)));
    rows
}

const HTTP_READ: &str = "HTTP read 1 KiB";

/// Connections kept busy for the HTTP throughput figures.
const HTTP_CONNS: usize = 32;

/// What ours must reach of the HTTP floor.
const FLOOR_SHARE: f64 = 0.70;

/// The 2026-07-28 stateless read (json_response) against the HTTP floor, in alternating
/// rounds on the same machine: p50/p99 and req/s on 1 connection and on 32, server CPU per
/// request, and ours as a share of the floor.
fn stateless_and_floor(env: &Env) -> Result<Vec<Row>, String> {
    const S: &str = HTTP_READ;
    let plan = env.plan();
    let uri = env.file_uri("f1k.txt");
    let ours = ours_http(env, false)?;
    let floor = {
        let addr = free_addr()?;
        let mut cmd = Command::new(&env.me);
        cmd.arg("http-floor")
            .arg(&addr)
            .arg(&env.fx.small)
            .arg("f1k.txt");
        HttpProc::start(cmd, addr)?
    };
    let machine = {
        let addr = free_addr()?;
        let mut cmd = Command::new(&env.me);
        cmd.arg("machine-http-floor")
            .arg(&addr)
            .arg(&env.fx.small)
            .arg("f1k.txt");
        HttpProc::start(cmd, addr)?
    };
    let make = read_req_2026(&uri);
    let (t_ours, t_floor, t_machine) = (
        stateless_read(&ours.addr, &uri, &make),
        stateless_read(&floor.addr, &uri, &make),
        stateless_read(&machine.addr, &uri, &make),
    );
    same_answer(&t_ours, &t_floor)?;
    same_answer(&t_ours, &t_machine)?;
    // The baseline is checked before the rounds, so a build that cannot serve this read
    // costs its own rows only; it is held to a good answer, not to ours byte for byte (an
    // earlier build may word it a little differently).
    let before = env.baseline.as_ref().map(|b| {
        let addr = free_addr()?;
        let mut cmd = Env::serve(&b.bin, &env.ours_config()?);
        cmd.args(["--http", &addr]);
        let p = HttpProc::start(cmd, addr)?;
        let r = stateless_read(&p.addr, &uri, &make).post(&mut Conn::connect(&p.addr)?, 7)?;
        if r.status != 200 {
            return Err(format!(
                "its answer: HTTP {} {}",
                r.status,
                crate::proc::preview(&r.body)
            ));
        }
        load::verify(r.message().unwrap_or_default(), TEXT_1K_HEAD)?;
        Ok::<_, String>(p)
    });
    let t_before = before
        .as_ref()
        .and_then(|b| b.as_ref().ok())
        .map(|p| stateless_read(&p.addr, &uri, &make));
    let mut sides = vec![
        load::HttpSide {
            target: &t_ours,
            check: TEXT_1K_HEAD,
            pid: Some(ours.child.id()),
        },
        load::HttpSide {
            target: &t_floor,
            check: TEXT_1K_HEAD,
            pid: Some(floor.child.id()),
        },
        load::HttpSide {
            target: &t_machine,
            check: TEXT_1K_HEAD,
            pid: Some(machine.child.id()),
        },
    ];
    if let (Some(t), Some(Ok(p))) = (&t_before, &before) {
        sides.push(load::HttpSide {
            target: t,
            check: TEXT_1K_HEAD,
            pid: Some(p.child.id()),
        });
    }
    let mut v = load::http_interleaved(&sides, plan, ROUNDS, HTTP_CONNS)?.into_iter();
    let (Some(mut o), Some(mut f), Some(mut x)) = (v.next(), v.next(), v.next()) else {
        return Err("the driver lost an outcome".into());
    };
    let before = before.map(|b| b.map(|_| v.next()));
    let round_note = format!(
        "measured in {ROUNDS} rounds alternating with the other servers (each round: one connection, then {HTTP_CONNS}; the order reversed every other round); driver and servers placed by the scheduler on the same 2 CPUs"
    );
    let ours_note = &format!(
        "2026-07-28 POST resources/read with _meta and the Mcp-Method/Mcp-Name headers, json_response = true (application/json answers), keep-alive connections; {round_note}"
    );
    let floor_note = &format!(
        "the HTTP floor (`mcpr-bench http-floor`): hyper 1.x on tokio with 2 workers, keep-alive, TCP_NODELAY; per POST it parses the JSON body, reads the file with openat, fstat, read, close and answers byte for byte what mcp-resources answers (checked before measuring); no routing, header checks, URI resolution, sandbox or rules; {round_note}"
    );
    let mut rows = Vec::new();
    let fl = "HTTP floor (hyper)";
    let ou = "mcp-resources";
    let m = |what: &str| format!("stateless JSON {what}");
    let (f1_50, f1_99, f32_50, f32_99) = (
        f.one.p50_us(),
        f.one.p99_us(),
        f.many.p50_us(),
        f.many.p99_us(),
    );
    let (o1_50, o1_99, o32_50, o32_99) = (
        o.one.p50_us(),
        o.one.p99_us(),
        o.many.p50_us(),
        o.many.p99_us(),
    );
    for (subject, note, v50, v99, rps, c50, c99, crps) in [
        (
            fl, floor_note, f1_50, f1_99, f.one_rps, f32_50, f32_99, f.many_rps,
        ),
        (
            ou, ours_note, o1_50, o1_99, o.one_rps, o32_50, o32_99, o.many_rps,
        ),
    ] {
        let vs = |mine: f64, floor: f64, unit: &str| {
            if subject == ou {
                format!(
                    "floor {:+.1} {unit} ({:.2}× floor)",
                    mine - floor,
                    mine / floor
                )
            } else {
                String::new()
            }
        };
        let share = |mine: f64, floor: f64| {
            if subject == ou {
                format!("{:.0} % of floor", 100.0 * mine / floor)
            } else {
                String::new()
            }
        };
        rows.push(
            Row::new(S, subject, &m("p50"), v50, "µs")
                .compare(vs(v50, f1_50, "µs"))
                .note(note),
        );
        rows.push(
            Row::new(S, subject, &m("p99"), v99, "µs")
                .compare(vs(v99, f1_99, "µs"))
                .note(note),
        );
        rows.push(
            Row::new(S, subject, &m("throughput (1 conn)"), rps, "req/s")
                .compare(share(rps, f.one_rps))
                .note(note),
        );
        rows.push(
            Row::new(S, subject, &m("p50 (32 conns)"), c50, "µs")
                .compare(vs(c50, f32_50, "µs"))
                .note(note),
        );
        rows.push(
            Row::new(S, subject, &m("p99 (32 conns)"), c99, "µs")
                .compare(vs(c99, f32_99, "µs"))
                .note(note),
        );
        let r = Row::new(S, subject, &m("throughput (32 conns)"), crps, "req/s")
            .compare(share(crps, f.many_rps))
            .note(note);
        // Besides the share of the floor, stateless HTTP reads have an absolute target on a
        // 2-core machine (20,000 req/s); it goes on our row only, since a floor is what the
        // machine does, not something held to a goal.
        rows.push(if subject == ou {
            r.target("≥ 20,000 req/s", crps >= 20_000.0)
        } else {
            r
        });
    }
    if let (Some(oc), Some(fc)) = (o.cpu_us_per_req, f.cpu_us_per_req) {
        let cpu_note = "server user + system CPU time (every thread, /proc/PID/stat) over the 32-connection phases, per request answered";
        rows.push(
            Row::new(S, fl, &m("server CPU per request (32 conns)"), fc, "µs").note(cpu_note),
        );
        rows.push(
            Row::new(S, ou, &m("server CPU per request (32 conns)"), oc, "µs")
                .compare(format!("floor {:+.1} µs ({:.2}× floor)", oc - fc, oc / fc))
                .note(cpu_note),
        );
    }
    let machine_note = format!(
        "the machine's HTTP floor (`mcpr-bench machine-http-floor`): one thread, epoll, non-blocking keep-alive HTTP/1.1 with rustix calls only (no hyper, tokio or serde); per POST the id and URI found by a scan, openat, fstat, read, close, the text escaped by a table, our exact answer (checked before measuring) in one write; {round_note}"
    );
    let xm = "HTTP machine floor (epoll)";
    for (what, v, unit, vs) in [
        ("p50", x.one.p50_us(), "µs", o1_50),
        ("p99", x.one.p99_us(), "µs", o1_99),
        ("throughput (1 conn)", x.one_rps, "req/s", o.one_rps),
        ("p50 (32 conns)", x.many.p50_us(), "µs", o32_50),
        ("p99 (32 conns)", x.many.p99_us(), "µs", o32_99),
        ("throughput (32 conns)", x.many_rps, "req/s", o.many_rps),
    ] {
        rows.push(
            Row::new(S, xm, &m(what), v, unit)
                .compare(format!("ours {}", crate::report::fmt_value(vs)))
                .note(&machine_note),
        );
    }
    for (what, mine, floor) in [
        ("1 conn", o.one_rps, x.one_rps),
        ("32 conns", o.many_rps, x.many_rps),
    ] {
        let share = mine / floor;
        let r = Row::new(
            S,
            ou,
            &m(&format!("ours / machine floor ({what})")),
            100.0 * share,
            "%",
        )
        .note("ours' req/s over the machine floor's, measured in the same alternating rounds");
        // The machine floor's target is on the 32-connection row (what a server is for).
        rows.push(if what == "32 conns" {
            r.target("≥ 70 %", share >= FLOOR_SHARE)
        } else {
            r
        });
    }
    let ratio_note = "ours' req/s over the floor's, measured in the same alternating rounds (the target: at least 70 %)";
    for (what, mine, floor) in [
        ("1 conn", o.one_rps, f.one_rps),
        ("32 conns", o.many_rps, f.many_rps),
    ] {
        let share = mine / floor;
        rows.push(
            Row::new(
                S,
                ou,
                &m(&format!("ours / floor ({what})")),
                100.0 * share,
                "%",
            )
            .target("≥ 70 %", share >= FLOOR_SHARE)
            .note(ratio_note),
        );
    }
    for (subject, errors) in [(fl, f.errors), (ou, o.errors)] {
        if errors > 0 {
            rows.push(Row::new(S, subject, &m("error answers"), errors as f64, ""));
        }
    }
    if let (Some(b), Some(before)) = (&env.baseline, before) {
        let ours = (o1_50, o1_99, o32_50, o32_99);
        rows.extend(http_baseline(b, before, &o, ours, &round_note));
    }
    Ok(rows)
}

/// The baseline's rows of the stateless HTTP read, with ours against them: latencies
/// compared, and the throughput on 32 connections held to "as fast as before" (on one
/// connection shown beside it), over the run and round by round. `ours_q` is ours' p50 and
/// p99 on one connection, then on 32.
fn http_baseline(
    b: &Baseline,
    before: Result<Option<load::HttpOutcome>, String>,
    o: &load::HttpOutcome,
    ours_q: (f64, f64, f64, f64),
    round_note: &str,
) -> Vec<Row> {
    const S: &str = HTTP_READ;
    let subject = b.subject();
    let mut bo = match before {
        Ok(Some(bo)) => bo,
        Ok(None) => {
            return vec![Row::skipped(
                S,
                &subject,
                "the driver lost the baseline's outcome".into(),
            )];
        }
        Err(e) => return vec![Row::skipped(S, &subject, format!("failed: {e}"))],
    };
    let m = |what: &str| format!("stateless JSON {what}");
    let note = &b.note(round_note);
    let vs = |mine: f64, theirs: f64| {
        format!("ours {:+.1} µs ({:.2}× this)", mine - theirs, mine / theirs)
    };
    let (o1_50, o1_99, o32_50, o32_99) = ours_q;
    let (b1_50, b1_99, b32_50, b32_99) = (
        bo.one.p50_us(),
        bo.one.p99_us(),
        bo.many.p50_us(),
        bo.many.p99_us(),
    );
    // Latencies with ours beside them; throughput is compared in the rows after.
    let mut rows: Vec<Row> = [
        ("p50", b1_50, "µs", Some(o1_50)),
        ("p99", b1_99, "µs", Some(o1_99)),
        ("throughput (1 conn)", bo.one_rps, "req/s", None),
        ("p50 (32 conns)", b32_50, "µs", Some(o32_50)),
        ("p99 (32 conns)", b32_99, "µs", Some(o32_99)),
        ("throughput (32 conns)", bo.many_rps, "req/s", None),
    ]
    .into_iter()
    .map(|(what, v, unit, ours)| {
        Row::new(S, &subject, &m(what), v, unit)
            .compare(ours.map_or_else(String::new, |o| vs(o, v)))
            .note(note)
    })
    .collect();
    if let (Some(oc), Some(bc)) = (o.cpu_us_per_req, bo.cpu_us_per_req) {
        rows.push(
            Row::new(S, &subject, &m("server CPU per request (32 conns)"), bc, "µs")
                .compare(format!("ours {:+.1} µs ({:.2}× this)", oc - bc, oc / bc))
                .note("server user + system CPU time (every thread, /proc/PID/stat) over the 32-connection phases, per request answered"),
        );
    }
    if bo.errors > 0 {
        rows.push(Row::new(
            S,
            &subject,
            &m("error answers"),
            bo.errors as f64,
            "",
        ));
    }
    let ratio_note = &format!(
        "ours' req/s over the baseline's ({}), measured in the same alternating rounds",
        b.label
    );
    // The target is on 32 connections, what a server is for; one connection is shown beside it.
    for (what, mine, theirs, mine_each, theirs_each, held) in [
        (
            "1 conn",
            o.one_rps,
            bo.one_rps,
            &o.one_round_rps,
            &bo.one_round_rps,
            false,
        ),
        (
            "32 conns",
            o.many_rps,
            bo.many_rps,
            &o.many_round_rps,
            &bo.many_round_rps,
            true,
        ),
    ] {
        let rounds: Vec<(f64, f64)> = mine_each
            .iter()
            .copied()
            .zip(theirs_each.iter().copied())
            .collect();
        rows.push(
            crate::report::after_before(
                S,
                &m(&format!("throughput ({what})")),
                mine,
                theirs,
                "req/s",
                &rounds,
                held,
            )
            .note(ratio_note),
        );
    }
    rows
}

/// Both servers' answers to the same request, which must be the same bytes: the floor
/// does only the work of our answer if it gives our answer.
fn same_answer(ours: &HttpTarget, floor: &HttpTarget) -> Result<(), String> {
    let answer = |t: &HttpTarget| -> Result<(String, Vec<u8>), String> {
        let r = t.post(&mut Conn::connect(&t.addr)?, 7)?;
        let ct = r.header("content-type").unwrap_or_default().to_owned();
        Ok((format!("{} {ct}", r.status), r.body))
    };
    let (a, b) = (answer(ours)?, answer(floor)?);
    if a != b {
        return Err(format!(
            "the HTTP floor's answer differs from ours: ours {} {}, floor {} {}",
            a.0,
            crate::proc::preview(&a.1),
            b.0,
            crate::proc::preview(&b.1)
        ));
    }
    Ok(())
}

const K6_SHAPE: &str = "HTTP, 50 clients (k6 shape)";

/// The load of TM Dev Lab's MCP server benchmarks (k6, 50 virtual users for a fixed time,
/// errors counted) against ours with the tool bridge: every iteration three legacy sessions
/// each with one `tools/call read_resource` of the 1 KiB file, one with `tools/list`, then
/// 50 ms of think time, as their script does. Their RPS counts `initialize`, `tools/call`
/// and `tools/list`; their latency is the tool calls'.
fn k6_shape(env: &Env) -> Result<Vec<Row>, String> {
    const S: &str = K6_SHAPE;
    let server = ours_http(env, true)?;
    let args = serde_json::json!({ "uri": env.file_uri("f1k.txt") });
    let call = serde_json::json!({ "name": "read_resource", "arguments": args }).to_string();
    let calls = [call.clone(), call.clone(), call];
    let (warmup, duration) = if env.quick {
        (Duration::from_secs(1), Duration::from_secs(5))
    } else {
        (Duration::from_secs(10), Duration::from_secs(30))
    };
    let shape = load::SessionShape {
        addr: &server.addr,
        path: "/mcp",
        clients: 50,
        warmup,
        duration,
        think: Duration::from_millis(50),
        calls: &calls,
        check: TEXT_1K_HEAD,
    };
    let before = load::cpu_time(server.child.id());
    let mut o = load::sessions(&shape)?;
    let cpu = before.zip(load::cpu_time(server.child.id()));
    let secs = o.window.as_secs_f64();
    let note = &format!(
        "the shape of TM Dev Lab's k6 script (v2): 50 clients on keep-alive connections, each iteration 3 × (initialize 2024-11-05, notifications/initialized, tools/call, DELETE) + 1 × (the same with tools/list), then 50 ms think time; here every tools/call is read_resource of the 1024-byte file (serve --tools) where theirs call Redis and an HTTP API; {:.0} s counted after {:.0} s not counted; the driver shares this machine's {} CPUs with the server (theirs ran on another host, the server capped at 2 vCPUs)",
        duration.as_secs_f64(),
        warmup.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut rows = vec![
        Row::new(
            S,
            "mcp-resources",
            "MCP req/s (initialize + tools/call + tools/list)",
            o.mcp_requests as f64 / secs,
            "req/s",
        )
        .note(note),
        Row::new(
            S,
            "mcp-resources",
            "HTTP req/s (all requests)",
            o.http_requests as f64 / secs,
            "req/s",
        )
        .note(note),
        Row::new(
            S,
            "mcp-resources",
            "tools/call avg",
            o.calls.mean_us() / 1000.0,
            "ms",
        )
        .note(note),
        Row::new(
            S,
            "mcp-resources",
            "tools/call p50",
            o.calls.p50_us() / 1000.0,
            "ms",
        )
        .note(note),
        Row::new(
            S,
            "mcp-resources",
            "tools/call p95",
            o.calls.quantile_us(0.95) / 1000.0,
            "ms",
        )
        .note(note),
        Row::new(
            S,
            "mcp-resources",
            "tools/call p99",
            o.calls.p99_us() / 1000.0,
            "ms",
        )
        .note(note),
        Row::new(
            S,
            "mcp-resources",
            "failed HTTP requests",
            o.http_failed as f64,
            "",
        )
        .note(note),
        Row::new(
            S,
            "mcp-resources",
            "failed tool calls",
            o.call_errors as f64,
            "",
        )
        .compare(format!("of {} tool calls", o.calls.len()))
        .note(note),
    ];
    if let Some((b, a)) = cpu {
        // Over warm-up and counted window alike; the share of two CPUs the server used.
        let whole = (warmup + duration).as_secs_f64();
        rows.push(
            Row::new(
                S,
                "mcp-resources",
                "server CPU",
                100.0 * a.saturating_sub(b).as_secs_f64() / whole,
                "% of 1 CPU",
            )
            .note(note),
        );
    }
    Ok(rows)
}
/// Page through the large tree: first page, full enumeration, peak memory.
pub fn big_list(env: &Env) -> Vec<Row> {
    let s_name = format!("resources/list, {} files", env.fx.big_files);
    let s = s_name.as_str();
    let note = "2026-07-28 resources/list over stdio, page size 1000 ([server] page_size), following nextCursor to the end; peak RSS is the server's VmHWM";
    let full = env.fx.big_files >= 1_000_000;
    let r = (|| -> Result<Vec<Row>, String> {
        let mut srv = StdioServer::spawn(&mut env.ours(&env.big_config()?), false)?;
        let _w = Watchdog::arm(srv.pid(), Duration::from_secs(300));
        let req = |cursor: Option<&str>| match cursor {
            None => format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{{{META_2026}}}}}"#
            ),
            Some(c) => format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{{"cursor":"{c}",{META_2026}}}}}"#
            ),
        };
        let mut first = Samples::default();
        for _ in 0..env.reps(20) {
            let t = Instant::now();
            srv.send_now(req(None).as_bytes())?;
            let line = srv.recv_response()?;
            first.push(t.elapsed());
            load::verify(line, "nextCursor")?;
        }
        // The median of three full walks: one walk is a single sample, and on a shared
        // machine the dentry cache and other load move it by a third. Each follows a walk of
        // the floor, so both see the machine as it is then.
        let mut walks = Vec::new();
        let mut floor_walks = Vec::new();
        for _ in 0..env.reps(3).min(3) {
            let (seen, took) = walk_floor(&env.fx.big)?;
            if seen != env.fx.big_files {
                return Err(format!(
                    "the walk floor found {seen} files, expected {}",
                    env.fx.big_files
                ));
            }
            floor_walks.push(took);
            let start = Instant::now();
            let mut cursor: Option<String> = None;
            let mut count = 0usize;
            loop {
                srv.send_now(req(cursor.as_deref()).as_bytes())?;
                let line = srv.recv_response()?;
                load::verify(line, "")?;
                let text = std::str::from_utf8(line).map_err(|e| e.to_string())?;
                count += text.matches("\"uri\":").count();
                cursor = text
                    .find("\"nextCursor\":\"")
                    .map(|i| &text[i + 14..])
                    .and_then(|rest| rest.split('"').next())
                    .map(str::to_owned);
                if cursor.is_none() {
                    break;
                }
            }
            walks.push(start.elapsed());
            if count != env.fx.big_files {
                return Err(format!(
                    "enumerated {count} resources, expected {}",
                    env.fx.big_files
                ));
            }
        }
        let (total, spread) = median_and_spread(&mut walks);
        let (floor_total, floor_spread) = median_and_spread(&mut floor_walks);
        let count = env.fx.big_files;
        let (_, hwm) = srv.rss();
        let suffix = if full {
            ""
        } else {
            " (quick: not the 1M target)"
        };
        let p50 = first.p50_us() / 1000.0;
        let floor_note = "the walk floor: every directory of the tree read (getdents64) and every entry stat'ed (statx, links not followed; dot names left out, as the server leaves them out), in the driver's own process, names kept and sorted per directory; nothing encoded or sent. What the kernel charges any lister that gives sizes and times, so it shows how much of a slow walk is the machine";
        Ok(vec![
            Row::new(s, "mcp-resources", "first page p50", p50, "ms")
                .target(&format!("≤ 20 ms{suffix}"), p50 <= 20.0)
                .note(note),
            Row::new(
                s,
                "mcp-resources",
                "full enumeration (median)",
                total.as_secs_f64(),
                "s",
            )
            .compare(format!(
                "{:.0} resources/s; {:.2}× the walk floor; {spread}",
                count as f64 / total.as_secs_f64(),
                total.as_secs_f64() / floor_total.as_secs_f64()
            ))
            .target(&format!("≤ 5 s{suffix}"), total.as_secs_f64() <= 5.0)
            .note(note),
            Row::new(
                s,
                "walk floor",
                "full enumeration (median)",
                floor_total.as_secs_f64(),
                "s",
            )
            .compare(floor_spread)
            .note(floor_note),
            Row::new(s, "mcp-resources", "peak RSS", hwm as f64 / MIB, "MiB")
                .target(&format!("≤ 100 MiB{suffix}"), hwm as f64 <= 100.0 * MIB)
                .note(note),
        ])
    })();
    let mut rows = guard(s, "mcp-resources", r);
    rows.push(Row::skipped(s, "peers", "no peer pages through a directory as resources: server-filesystem's list_directory/directory_tree answer one document, server-everything serves fixed resources".into()));
    rows
}

/// The median of `walks`, and all of them as `N walks: a s, b s, …`.
fn median_and_spread(walks: &mut [Duration]) -> (Duration, String) {
    walks.sort();
    let spread = format!(
        "{} walks: {}",
        walks.len(),
        walks
            .iter()
            .map(|w| format!("{:.2} s", w.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    (walks[walks.len() / 2], spread)
}

/// The walk floor of [`big_list`]: every directory under `root` read and every entry
/// stat'ed without following links (`DirEntry::metadata` is a `statx` at the directory's
/// descriptor), each directory's names sorted as a lister paging in name order must, names
/// starting with a dot left out as the server leaves them out; the regular files found and
/// the time taken.
fn walk_floor(root: &Path) -> Result<(usize, Duration), String> {
    let start = Instant::now();
    let mut files = 0usize;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut entries = Vec::new();
        for e in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
            // Left out as a files mount leaves them out by default (`hidden = false`), such
            // as the fixture's `.complete` marker.
            let name = e.file_name();
            if name.as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let md = e
                .metadata()
                .map_err(|err| format!("{}: {err}", e.path().display()))?;
            entries.push((name, md));
        }
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (name, md) in entries {
            if md.is_dir() {
                dirs.push(dir.join(name));
            } else if md.is_file() {
                files += 1;
            }
        }
    }
    Ok((files, start.elapsed()))
}

/// The blob files of the `blob` scenario: name and size.
const BLOB_FILES: [(&str, u64); 2] = [("blob1m.bin", 1 << 20), ("blob8m.bin", 8 << 20)];

/// Rounds in which the blob floor and our server take turns.
const BLOB_ROUNDS: usize = 10;

/// Large binary reads over stdio: ours against the blob floor in alternating rounds, so a
/// VM's drift in speed over the run reaches both alike, then each peer doing the same work.
pub fn blobs(env: &Env) -> Vec<Row> {
    const S: &str = "stdio blob read";
    let mut rows = blob_floor_and_ours(env);
    let reps = env.reps(30);
    let one = |cmd: Result<Command, String>,
               make: &dyn Fn(&str) -> String,
               check: &str|
     -> Result<Vec<(String, f64)>, String> {
        let mut s = StdioServer::spawn(&mut cmd?, false)?;
        let _w = Watchdog::arm(s.pid(), Duration::from_secs(300));
        s.initialize()?;
        let mut out = Vec::new();
        for (name, size) in BLOB_FILES {
            let msg = make(name);
            s.send_now(msg.as_bytes())?;
            let line = s.recv_response()?;
            load::verify(line, check)?;
            if line.len() < (size as usize) * 4 / 3 {
                return Err(format!("answer for {name} is only {} bytes", line.len()));
            }
            let mut lat = Samples::default();
            for _ in 0..reps {
                let t = Instant::now();
                s.send_now(msg.as_bytes())?;
                s.recv_response()?;
                lat.push(t.elapsed());
            }
            let p50_s = lat.p50_us() / 1e6;
            out.push((name.to_owned(), size as f64 / p50_s / 1e6));
        }
        Ok(out)
    };
    let small = env.fx.small.clone();
    let subjects: Vec<BlobSubject> = vec![
        (
            "server-filesystem",
            env.filesystem(),
            Box::new(move |n: &str| {
                tool_req(
                    "read_media_file",
                    serde_json::json!({ "path": small.join(n) }),
                )(7)
            }),
            "\"blob\"",
            "server-filesystem: tools/call read_media_file on the same file (base64 content)",
        ),
        (
            "mcp-server-opendal",
            env.opendal(),
            Box::new(|n: &str| read_req(&format!("bench://{n}"))(7)),
            "",
            "mcp-server-opendal: resources/read bench://FILE (its template answers a JSON document holding the base64 bytes)",
        ),
    ];
    for (name, cmd, make, check, note) in subjects {
        match one(cmd, &*make, check) {
            Ok(v) => {
                for (file, mbs) in v {
                    rows.push(
                        Row::new(S, name, &format!("{file} throughput"), mbs, "MB/s").note(note),
                    );
                }
            }
            Err(e) => rows.push(Row::skipped(S, name, format!("not run: {e}"))),
        }
    }
    rows.push(Row::skipped(
        S,
        "server-everything",
        "its binary resources are generated in memory, not files of these sizes".into(),
    ));
    rows
}

/// Our blob reads against the blob floor (`mcpr-bench blob-echo`: one `read` of the file,
/// base64, one `write` of the same answer, buffers reused), one request in flight, in
/// alternating rounds and a fixed placement (each process on a core of its own when there
/// are two): p50, p99 and MB/s for both, and ours over the floor's. With `--baseline`, the
/// earlier build takes its turn after ours in the same rounds, and ours is held to its MB/s.
fn blob_floor_and_ours(env: &Env) -> Vec<Row> {
    const S: &str = "stdio blob read";
    let placement = Placement::available()[0];
    let at = placement.label();
    let r = (|| -> Result<Vec<Row>, String> {
        let pin = placement.enter()?;
        let cfg = env.ours_config()?;
        let start = |bin: &Path| -> Result<StdioServer, String> {
            let mut s = StdioServer::spawn(&mut pin.cmd(Env::serve(bin, &cfg)), false)?;
            s.initialize()?;
            Ok(s)
        };
        let mut ours = start(&env.server);
        let _ow = ours
            .as_ref()
            .ok()
            .map(|o| Watchdog::arm(o.pid(), Duration::from_secs(600)));
        let mut before = env.baseline.as_ref().map(|b| start(&b.bin));
        let _bw = before
            .as_ref()
            .and_then(|b| b.as_ref().ok())
            .map(|o| Watchdog::arm(o.pid(), Duration::from_secs(600)));
        let mut rows = Vec::new();
        for (name, size) in BLOB_FILES {
            let mut floor_cmd = Command::new(&env.me);
            floor_cmd.arg("blob-echo").arg(&env.fx.small).arg(name);
            let mut floor = StdioServer::spawn(&mut pin.cmd(floor_cmd), false)?;
            let _fw = Watchdog::arm(floor.pid(), Duration::from_secs(300));
            let read = read_req(&env.file_uri(name));
            // The same answer from both, byte for byte but for the id: the floor does the
            // work ours does and no less.
            let floor_len = blob_answer_len(&mut floor, &read(1), size)?;
            let ours_len = match &mut ours {
                Ok(o) => Some(blob_answer_len(o, &read(1), size)?),
                Err(_) => None,
            };
            if let Some(l) = ours_len
                && l != floor_len
            {
                return Err(format!(
                    "{name}: the floor's answer is {floor_len} bytes and ours {l}: not the same work"
                ));
            }
            // The baseline is held to a blob answer, not to our answer's exact length: an
            // earlier build may word its answer a little differently, and the note says so.
            // A baseline that fails here is left out of this file's rounds and the next.
            let mut before_len = None;
            if let Some(Ok(b)) = &mut before {
                match blob_answer_len(b, &read(1), size) {
                    Ok(l) => before_len = Some(l),
                    Err(e) => before = Some(Err(format!("{name}: {e}"))),
                }
            }
            let plan = blob_plan(env, size);
            let mut sides: Vec<Side> = vec![(&mut floor, &read, "\"blob\"", true)];
            if let Ok(o) = &mut ours {
                sides.push((o, &read, "\"blob\"", false));
            }
            if let Some(Ok(b)) = &mut before {
                sides.push((b, &read, "\"blob\"", false));
            }
            let mut v = load::stdio_interleaved_latency(sides, plan, BLOB_ROUNDS)?.into_iter();
            let mut f = v.next().ok_or("the driver lost the floor's samples")?;
            let p50m = format!("{name} p50 (1 in flight{at})");
            let p99m = format!("{name} p99 (1 in flight{at})");
            let mbsm = format!("{name} throughput");
            let mbs = |p50_us: f64| size as f64 / p50_us;
            let (f50, f99) = (f.latency.p50_us(), f.latency.p99_us());
            let floor_note = &format!(
                "the blob floor (mcpr-bench blob-echo): for every request openat, fstat, one read of the {} MiB file into a reused buffer, close, base64 into a reused buffer, one write of the same answer line as ours (same bytes but the id) to a 1 MiB pipe; {} samples in {BLOB_ROUNDS} rounds alternating with mcp-resources{}",
                size >> 20,
                plan.iters,
                placement.describe()
            );
            rows.push(Row::new(S, "blob floor", &p50m, f50 / 1e3, "ms").note(floor_note));
            rows.push(Row::new(S, "blob floor", &p99m, f99 / 1e3, "ms").note(floor_note));
            rows.push(Row::new(S, "blob floor", &mbsm, mbs(f50), "MB/s").note(floor_note));
            let mut ours_out = match &ours {
                Ok(_) => Some(v.next().ok_or("the driver lost our samples")?),
                Err(_) => None,
            };
            let ours_figures = ours_out
                .as_mut()
                .map(|o| (o.latency.p50_us(), o.latency.p99_us()));
            if let (Some(o), Some((p50, p99))) = (&ours_out, ours_figures) {
                let note = &format!(
                    "resources/read of the file, answered as base64 `blob` (max_read_bytes raised to 16 MiB); MB/s = file bytes / median round trip, 10^6 bytes per MB; in the same rounds as the blob floor{}",
                    placement.describe()
                );
                rows.push(Row::new(S, "mcp-resources", &p50m, p50 / 1e3, "ms").note(note));
                rows.push(Row::new(S, "mcp-resources", &p99m, p99 / 1e3, "ms").note(note));
                let mut r = Row::new(S, "mcp-resources", &mbsm, mbs(p50), "MB/s")
                    .compare(format!("{:.0} % of the blob floor", 100.0 * f50 / p50))
                    .note(note);
                if size == 8 << 20 {
                    r = r.target("≥ 300 MB/s", mbs(p50) >= 300.0);
                }
                rows.push(r);
                for (q, ours_q, floor_q) in [("p50", p50, f50), ("p99", p99, f99)] {
                    let ratio = ours_q / floor_q;
                    rows.push(
                        Row::new(
                            S,
                            "mcp-resources",
                            &format!("{name} {q} ours / floor{at}"),
                            ratio,
                            "×",
                        )
                        .compare(format!(
                            "ours {:.2} ms, floor {:.2} ms",
                            ours_q / 1e3,
                            floor_q / 1e3
                        ))
                        .target("≤ 1.1×", ratio <= 1.1)
                        .note(note),
                    );
                }
                if o.errors > 0 {
                    rows.push(Row::new(
                        S,
                        "mcp-resources",
                        &format!("{name} error answers"),
                        o.errors as f64,
                        "",
                    ));
                }
            }
            if let (Some(b), Some(Ok(_)), Some(len)) = (&env.baseline, &before, before_len) {
                let mut bo = v.next().ok_or("the driver lost the baseline's samples")?;
                let (b50, b99) = (bo.latency.p50_us(), bo.latency.p99_us());
                let subject = b.subject();
                let shape = if len == floor_len {
                    String::new()
                } else {
                    format!(" (its answer is {len} bytes, ours {floor_len})")
                };
                let note = &b.note(&format!(
                    "taking its turns in the same rounds as the blob floor and mcp-resources{shape}{}",
                    placement.describe()
                ));
                let vs = |ours_q: Option<f64>, before_q: f64| {
                    ours_q.map_or_else(String::new, |o| {
                        format!("ours {:.2} ms ({:.2}× this)", o / 1e3, o / before_q)
                    })
                };
                rows.push(
                    Row::new(S, &subject, &p50m, b50 / 1e3, "ms")
                        .compare(vs(ours_figures.map(|o| o.0), b50))
                        .note(note),
                );
                rows.push(
                    Row::new(S, &subject, &p99m, b99 / 1e3, "ms")
                        .compare(vs(ours_figures.map(|o| o.1), b99))
                        .note(note),
                );
                rows.push(Row::new(S, &subject, &mbsm, mbs(b50), "MB/s").note(note));
                if bo.errors > 0 {
                    rows.push(Row::new(
                        S,
                        &subject,
                        &format!("{name} error answers"),
                        bo.errors as f64,
                        "",
                    ));
                }
                if let (Some(o), Some((p50, _))) = (&ours_out, ours_figures) {
                    // MB/s is the file's size over the median round trip, so each round's
                    // figure is its own median's.
                    let rounds: Vec<(f64, f64)> = o
                        .round_p50_us
                        .iter()
                        .zip(&bo.round_p50_us)
                        .filter(|&(&a, &b)| a > 0.0 && b > 0.0)
                        .map(|(&a, &b)| (mbs(a), mbs(b)))
                        .collect();
                    rows.push(
                        crate::report::after_before(
                            S,
                            &format!("{name} throughput (1 in flight{at})"),
                            mbs(p50),
                            mbs(b50),
                            "MB/s",
                            &rounds,
                            true,
                        )
                        .note(&format!(
                            "ours' MB/s over the baseline's ({}), measured in the same alternating rounds",
                            b.label
                        )),
                    );
                }
            }
        }
        if let Err(e) = ours {
            rows.push(Row::skipped(S, "mcp-resources", format!("failed: {e}")));
        }
        if let (Some(b), Some(Err(e))) = (&env.baseline, before) {
            rows.push(Row::skipped(S, &b.subject(), format!("failed: {e}")));
        }
        Ok(rows)
    })();
    guard(S, "blob floor", r)
}

/// Samples per side for a blob of `size` bytes. A full run takes at least 1,000, so the p99
/// is the tenth-largest sample or further in: with 300 it was the third-largest, and the
/// 8 MiB p99 ratio ranged from 1.07× to 1.15× over four runs of the same build. About 30 s
/// for the 8 MiB file, 8 s for the 1 MiB one.
fn blob_plan(env: &Env, size: u64) -> Plan {
    let big = size >= 8 << 20;
    let iters = match (env.quick, big) {
        (true, true) => 100,
        (true, false) => 300,
        (false, true) => 1000,
        (false, false) => 3000,
    };
    Plan {
        iters,
        max_latency_phase: Duration::from_secs(120),
        throughput_phase: Duration::ZERO,
        warmup: iters / 10,
    }
}

/// Sends `msg` and checks the answer is a blob of a file of `size` bytes; its length.
fn blob_answer_len(s: &mut StdioServer, msg: &str, size: u64) -> Result<usize, String> {
    s.send_now(msg.as_bytes())?;
    let line = s.recv_response()?;
    load::verify(line, "\"blob\"")?;
    if line.len() < (size as usize).div_ceil(3) * 4 {
        return Err(format!(
            "the answer for a file of {size} bytes is only {} bytes",
            line.len()
        ));
    }
    Ok(line.len())
}

/// A reader thread that stamps every line as it arrives, for notification timing.
fn stamped_lines(s: &mut StdioServer) -> mpsc::Receiver<(Instant, Vec<u8>)> {
    let (tx, rx) = mpsc::channel();
    let mut reader = s.take_reader();
    std::thread::spawn(move || {
        use std::io::BufRead;
        loop {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if tx.send((Instant::now(), line)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// Subscribes `s` (a legacy session) to `uri`, then rewrites `path` `reps` times, 30 ms
/// apart: the time from each write call to the `updated` line at the client, and how many
/// writes had none within 2 s.
pub(crate) fn change_latency(
    s: &mut StdioServer,
    path: &Path,
    uri: &str,
    reps: usize,
) -> Result<(Samples, usize), String> {
    let answer = s.call(&format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{{"uri":{}}}}}"#,
        serde_json::to_string(uri).expect("string")
    ))?;
    if answer.get("error").is_some() {
        return Err(format!("resources/subscribe {uri}: {answer}"));
    }
    let rx = stamped_lines(s);
    let mut lat = Samples::default();
    let mut missed = 0;
    for i in 0..reps {
        std::thread::sleep(Duration::from_millis(30));
        while rx.try_recv().is_ok() {}
        let t = Instant::now();
        std::fs::write(path, format!("{i}\n")).map_err(|e| e.to_string())?;
        let deadline = t + Duration::from_secs(2);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((at, line))
                    if crate::http::find(&line, b"notifications/resources/updated").is_some() =>
                {
                    lat.push(at - t);
                    break;
                }
                Ok(_) => {}
                Err(_) => {
                    missed += 1;
                    break;
                }
            }
        }
    }
    Ok((lat, missed))
}

/// File write → `notifications/resources/updated` at the client, debounce 0.
pub fn notify(env: &Env) -> Vec<Row> {
    const S: &str = "write → resources/updated";
    let note = "legacy resources/subscribe to a file, then the file is rewritten in place; time from the write call to the notification line at the client, mount debounce_ms = 0 for this measurement (default is 50)";
    let r = (|| -> Result<Vec<Row>, String> {
        let mut s = StdioServer::spawn(&mut env.ours(&env.ours_config()?), false)?;
        let _w = Watchdog::arm(s.pid(), Duration::from_secs(300));
        s.initialize()?;
        let path = env.fx.small.join("watched.txt");
        let uri = env.file_uri("watched.txt");
        let (mut lat, missed) = change_latency(&mut s, &path, &uri, env.reps(200))?;
        let (p50, p99) = (lat.p50_us() / 1000.0, lat.p99_us() / 1000.0);
        let mut rows = vec![
            Row::new(S, "mcp-resources", "p50 (debounce 0)", p50, "ms")
                .target("≤ 10 ms", p50 <= 10.0)
                .note(note),
            Row::new(S, "mcp-resources", "p99 (debounce 0)", p99, "ms").note(note),
        ];
        if missed > 0 {
            rows.push(
                Row::new(
                    S,
                    "mcp-resources",
                    "writes without a notification within 2 s",
                    missed as f64,
                    "",
                )
                .note(note),
            );
        }
        Ok(rows)
    })();
    let mut rows = guard(S, "mcp-resources", r);
    rows.push(Row::skipped(S, "peers", "no peer watches files: server-everything's subscriptions fire on a timer, server-filesystem and opendal have none".into()));
    rows
}

/// Memory: idle, with 10,000 subscriptions, with 1,000 legacy HTTP sessions.
pub fn memory(env: &Env) -> Vec<Row> {
    const S: &str = "memory";
    let mut rows = Vec::new();
    let settle = || std::thread::sleep(Duration::from_millis(300));
    let idle_note = "VmRSS after initialize and one 1 KiB read, then 300 ms idle";
    let subs = (|| -> Result<Vec<Row>, String> {
        let mut s = StdioServer::spawn(&mut env.ours(&env.ours_config()?), false)?;
        let _w = Watchdog::arm(s.pid(), Duration::from_secs(300));
        s.initialize()?;
        s.call(&read_req(&env.file_uri("f1k.txt"))(1))?;
        settle();
        let (idle, _) = s.rss();
        let mut rows = vec![
            Row::new(S, "mcp-resources", "idle RSS", idle as f64 / MIB, "MiB")
                .target("≤ 20 MiB", idle as f64 <= 20.0 * MIB)
                .note(idle_note),
        ];
        // 10,000 distinct files, 32 subscribe requests in flight.
        let uris: Vec<String> = (0..TREE_FILES)
            .map(|i| env.file_uri(&format!("tree/d{:02}/f{:02}.txt", i / 100, i % 100)))
            .collect();
        let msg = |i: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"resources/subscribe","params":{{"uri":"{}"}}}}"#,
                i + 100,
                uris[i]
            )
        };
        let mut sent = 0;
        let mut errors = 0;
        while sent < load::WINDOW.min(uris.len()) {
            s.send(msg(sent).as_bytes())?;
            sent += 1;
        }
        s.flush()?;
        for _ in 0..uris.len() {
            let line = s.recv_response()?;
            if load::verify(line, "").is_err() {
                errors += 1;
                if errors == 1 {
                    eprintln!("bench: subscribe failed: {}", crate::proc::preview(line));
                }
            }
            if sent < uris.len() {
                s.send_now(msg(sent).as_bytes())?;
                sent += 1;
            }
        }
        settle();
        let (with, _) = s.rss();
        let delta = with.saturating_sub(idle) as f64 / MIB;
        rows.push(
            Row::new(
                S,
                "mcp-resources",
                "RSS with 10,000 subscriptions",
                with as f64 / MIB,
                "MiB",
            )
            .compare(format!("+{delta:.1} MiB over idle"))
            .target("≤ idle + 50 MiB", delta <= 50.0)
            .note(
                "one legacy stdio session subscribed to 10,000 distinct files in 100 directories",
            ),
        );
        if errors > 0 {
            rows.push(Row::new(
                S,
                "mcp-resources",
                "failed subscriptions",
                errors as f64,
                "",
            ));
        }
        Ok(rows)
    })();
    rows.extend(guard(S, "mcp-resources", subs));

    let sessions = |server: Result<HttpProc, String>, subject: &str| -> Result<Vec<Row>, String> {
        let server = server?;
        let pid = server.child.id();
        http_session(&server.addr, "/mcp")?;
        settle();
        let (before, _) = rss(pid);
        for _ in 0..999 {
            http_session(&server.addr, "/mcp")?;
        }
        settle();
        let (after, _) = rss(pid);
        Ok(vec![
            Row::new(
                S,
                subject,
                "RSS with 1,000 legacy HTTP sessions",
                after as f64 / MIB,
                "MiB",
            )
            .compare(format!(
                "+{:.1} MiB over 1 session",
                after.saturating_sub(before) as f64 / MIB
            ))
            .note(
                "1,000 initialize + notifications/initialized over HTTP, every session left open",
            ),
        ])
    };
    rows.extend(guard(
        S,
        "mcp-resources",
        sessions(ours_http(env, false), "mcp-resources"),
    ));
    rows.extend(guard(
        S,
        "server-everything",
        sessions(everything_http(env), "server-everything"),
    ));

    // The peers' idle memory, for scale.
    let peers: Vec<(&str, Result<Command, String>, String)> = vec![
        (
            "server-everything",
            env.everything("stdio"),
            read_req("demo://resource/static/document/extension.md")(1),
        ),
        (
            "server-filesystem",
            env.filesystem(),
            tool_req(
                "read_text_file",
                serde_json::json!({ "path": env.fx.small.join("f1k.txt") }),
            )(1),
        ),
        (
            "mcp-server-opendal",
            env.opendal(),
            read_req("bench://f1k.txt")(1),
        ),
    ];
    for (name, cmd, req) in peers {
        let r = (|| -> Result<Vec<Row>, String> {
            let mut s = StdioServer::spawn(&mut cmd?, false)?;
            let _w = Watchdog::arm(s.pid(), Duration::from_secs(60));
            s.initialize()?;
            s.call(&req)?;
            settle();
            let (idle, _) = s.rss();
            Ok(vec![
                Row::new(S, name, "idle RSS", idle as f64 / MIB, "MiB").note(idle_note),
            ])
        })();
        rows.extend(guard(S, name, r));
    }
    rows
}

/// Start-up to first response: spawn, send `initialize` at once, wait for its answer.
pub fn startup(env: &Env) -> Vec<Row> {
    const S: &str = "start-up";
    let note = "process spawn to the initialize response over stdio (the request is written immediately), median of repeated cold starts";
    let mut rows = Vec::new();
    let subjects: Vec<Starter> = vec![
        (
            "mcp-resources",
            Box::new(|| env.ours_config().map(|c| env.ours(&c))),
        ),
        ("server-everything", Box::new(|| env.everything("stdio"))),
        ("server-filesystem", Box::new(|| env.filesystem())),
        ("mcp-server-opendal", Box::new(|| env.opendal())),
    ];
    for (name, cmd) in subjects {
        let r = (|| -> Result<Vec<Row>, String> {
            let mut lat = Samples::default();
            for _ in 0..env.reps(20) {
                let mut c = cmd()?;
                let t = Instant::now();
                let mut s = StdioServer::spawn(&mut c, false)?;
                let _w = Watchdog::arm(s.pid(), Duration::from_secs(60));
                s.send_now(INITIALIZE.as_bytes())?;
                let line = s.recv_response()?;
                lat.push(t.elapsed());
                load::verify(line, "protocolVersion")?;
            }
            let p50 = lat.p50_us() / 1000.0;
            let mut r = Row::new(S, name, "start-up to first response", p50, "ms").note(note);
            if name == "mcp-resources" {
                r = r.target("≤ 20 ms", p50 <= 20.0);
            }
            Ok(vec![r])
        })();
        rows.extend(guard(S, name, r));
    }
    rows
}

/// SQLite: one 100-row table page, as JSON, over stdio (no peer serves SQL as resources).
pub fn sqlite(env: &Env) -> Vec<Row> {
    const S: &str = "stdio read SQLite page";
    let note = "resources/read db://bench/tables/items: the first 100 rows of a 10,000-row table as JSON (read-only connection, keyset paging)";
    let r = (|| -> Result<Vec<Row>, String> {
        let mut s = StdioServer::spawn(&mut env.ours(&env.ours_config()?), false)?;
        let _w = Watchdog::arm(s.pid(), Duration::from_secs(120));
        s.initialize()?;
        let mut o = load::stdio(
            &mut s,
            &read_req("db://bench/tables/items"),
            "item 99",
            false,
            env.plan(),
        )?;
        Ok(vec![
            Row::new(
                S,
                "mcp-resources",
                "p50 (1 in flight)",
                o.latency.p50_us(),
                "µs",
            )
            .note(note),
            Row::new(
                S,
                "mcp-resources",
                "p99 (1 in flight)",
                o.latency.p99_us(),
                "µs",
            )
            .note(note),
            Row::new(
                S,
                "mcp-resources",
                "throughput (32 in flight)",
                o.rps,
                "req/s",
            )
            .note(note),
        ])
    })();
    guard(S, "mcp-resources", r)
}

/// moto's S3 server, stopped when dropped.
struct MotoProc(std::process::Child);

impl Drop for MotoProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `moto_server`: `$MCPR_MOTO`, the project venv (`cargo xtask test` installs it there from
/// tests/e2e/requirements.txt), or `PATH`.
fn moto_binary(env: &Env) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MCPR_MOTO") {
        return Some(p.into());
    }
    let venv = env
        .server
        .parent()?
        .parent()?
        .parent()?
        .join(".cache/venv/bin/moto_server");
    if venv.exists() {
        return Some(venv);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("moto_server"))
        .find(|p| p.exists())
}

/// One plain HTTP/1.1 request on a connection of its own (moto's server closes each
/// connection after one answer); the status and body.
fn raw_http(addr: &str, method: &str, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    use std::io::{BufRead, Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    // Objects are put public-read so the direct GET needs no signature (moto then applies
    // the ACL); the server under test signs its requests as usual.
    let acl = if method == "PUT" {
        "x-amz-acl: public-read\r\n"
    } else {
        ""
    };
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{acl}Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream
        .write_all(&[head.as_bytes(), body].concat())
        .map_err(|e| e.to_string())?;
    let mut r = std::io::BufReader::new(&mut stream);
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| e.to_string())?;
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(format!("bad status line {line:?}"))?;
    let mut len = 0usize;
    loop {
        line.clear();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().map_err(|_| format!("bad length {v:?}"))?;
        }
    }
    let mut out = vec![0; if method == "HEAD" { 0 } else { len }];
    r.read_exact(&mut out).map_err(|e| e.to_string())?;
    Ok((status, out))
}

/// S3: reading a 1 KiB object and walking a 1,000-object listing, through our server against
/// moto on loopback, next to a plain GET of the same object from moto (the cost of going to
/// the source directly). moto is a Python emulator: its own time per request dominates, so
/// these rows say what our layer adds, not what AWS would give.
pub fn s3(env: &Env) -> Vec<Row> {
    const S: &str = "s3 read and list (local moto)";
    const OBJECTS: usize = 1000;
    let note = "against moto_server on loopback (a Python S3 emulator, not AWS: its per-request time dominates); read: resources/read of a 1 KiB object over stdio (one GET each); list: resources/list of 1,000 objects, page size 100, following nextCursor (one ListObjectsV2 per page); direct: the same GET sent straight to moto, a connection each";
    let r = (|| -> Result<Vec<Row>, String> {
        let bin = moto_binary(env).ok_or(
            "moto_server not found (MCPR_MOTO, .cache/venv/bin, PATH): pip install -r tests/e2e/requirements.txt",
        )?;
        let addr = free_addr()?;
        let port = addr.rsplit(':').next().unwrap_or_default().to_owned();
        let mut moto = MotoProc(
            Command::new(&bin)
                .args(["-H", "127.0.0.1", "-p", &port])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", bin.display()))?,
        );
        wait_port(&addr, &mut moto.0)?;
        let (st, _) = raw_http(&addr, "PUT", "/bench", b"")?;
        if st != 200 {
            return Err(format!("create bucket: status {st}"));
        }
        let mut body = format!("{TEXT_1K_HEAD} (s3)\n").into_bytes();
        body.resize(1024, b'x');
        for i in 0..OBJECTS {
            let (st, _) = raw_http(&addr, "PUT", &format!("/bench/obj/{i:04}.txt"), &body)?;
            if st != 200 {
                return Err(format!("put object {i}: status {st}"));
            }
        }
        let config = env.cache.join("s3.toml");
        let text = format!(
            "# Written by mcpr-bench: an s3 mount of a moto bucket on loopback.\n[server]\npage_size = 100\n\n[[mount]]\nkind = \"s3\"\nbucket = \"bench\"\nregion = \"us-east-1\"\nendpoint = \"http://{addr}\"\nallow_http = true\naccess_key_id = \"bench\"\nsecret_access_key = \"bench\"\n"
        );
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        let mut srv = StdioServer::spawn(&mut env.ours(&config), false)?;
        let _w = Watchdog::arm(srv.pid(), Duration::from_secs(300));
        srv.initialize()?;
        let plan = Plan {
            iters: if env.quick { 200 } else { 2_000 },
            max_latency_phase: Duration::from_secs(if env.quick { 3 } else { 10 }),
            throughput_phase: Duration::from_secs(if env.quick { 2 } else { 5 }),
            warmup: 50,
        };
        let mut read = load::stdio(
            &mut srv,
            &read_req("s3://bench/obj/0007.txt"),
            TEXT_1K_HEAD,
            false,
            plan,
        )?;
        let mut walks = Vec::new();
        for _ in 0..env.reps(5).min(5) {
            let start = Instant::now();
            let mut cursor: Option<String> = None;
            let mut count = 0usize;
            loop {
                let req = match &cursor {
                    None => r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#.to_owned(),
                    Some(c) => format!(
                        r#"{{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{{"cursor":"{c}"}}}}"#
                    ),
                };
                srv.send_now(req.as_bytes())?;
                let line = srv.recv_response()?;
                load::verify(line, "")?;
                let text = std::str::from_utf8(line).map_err(|e| e.to_string())?;
                count += text.matches("\"uri\":").count();
                cursor = text
                    .find("\"nextCursor\":\"")
                    .map(|i| &text[i + 14..])
                    .and_then(|rest| rest.split('"').next())
                    .map(str::to_owned);
                if cursor.is_none() {
                    break;
                }
            }
            if count != OBJECTS {
                return Err(format!("listed {count} objects, expected {OBJECTS}"));
            }
            walks.push(start.elapsed());
        }
        walks.sort();
        let walk = walks[walks.len() / 2];
        let mut direct = Samples::with_capacity(plan.iters);
        for _ in 0..plan.iters.min(2_000) {
            let t = Instant::now();
            let (st, b) = raw_http(&addr, "GET", "/bench/obj/0007.txt", b"")?;
            direct.push(t.elapsed());
            if st != 200 || b.len() != 1024 {
                return Err(format!("direct GET: status {st}, {} bytes", b.len()));
            }
        }
        drop(srv);
        drop(moto);
        let (d50, d99) = (direct.p50_us(), direct.p99_us());
        Ok(vec![
            Row::new(
                S,
                "mcp-resources",
                "read p50 (1 in flight)",
                read.latency.p50_us(),
                "µs",
            )
            .compare(format!("direct GET from moto p50 {d50:.0} µs"))
            .note(note),
            Row::new(
                S,
                "mcp-resources",
                "read p99 (1 in flight)",
                read.latency.p99_us(),
                "µs",
            )
            .compare(format!("direct GET from moto p99 {d99:.0} µs"))
            .note(note),
            Row::new(
                S,
                "mcp-resources",
                "read throughput (32 in flight)",
                read.rps,
                "req/s",
            )
            .note(note),
            Row::new(
                S,
                "mcp-resources",
                "list 1,000 objects, 10 pages (median)",
                walk.as_secs_f64() * 1000.0,
                "ms",
            )
            .compare(format!("{:.1} ms per page", walk.as_secs_f64() * 100.0))
            .note(note),
        ])
    })();
    guard(S, "mcp-resources", r)
}

/// `api://`: one 1 KiB JSON document from a loopback upstream, read through the provider
/// cached (`max-age`, served from the mount's cache) and uncached (`no-store`, one upstream GET
/// per read), next to a direct GET of the same upstream by the same driver.
pub fn api(env: &Env) -> Vec<Row> {
    const S: &str = "stdio read api:// (loopback upstream)";
    let mut rows = Vec::new();
    let up = match crate::upstream::Upstream::start() {
        Ok(u) => u,
        Err(e) => return vec![Row::skipped(S, "mcp-resources", e)],
    };
    let rows_of = |subject: &str, mut o: Outcome, note: &str| {
        vec![
            Row::new(S, subject, "p50 (1 in flight)", o.latency.p50_us(), "µs").note(note),
            Row::new(S, subject, "p99 (1 in flight)", o.latency.p99_us(), "µs").note(note),
            Row::new(S, subject, "throughput (32 in flight)", o.rps, "req/s").note(note),
        ]
    };
    let direct = "GET /uncached over keep-alive HTTP/1.1 by this driver: the floor";
    rows.extend(guard(
        S,
        "direct HTTP GET",
        crate::load::http_get(&up.addr, "/uncached", "\"items\"", env.plan())
            .map(|o| rows_of("direct HTTP GET", o, direct)),
    ));
    let config = (|| -> Result<PathBuf, String> {
        let p = env.cache.join("api.toml");
        let text = format!(
            r#"# Written by mcpr-bench: an api mount over the loopback upstream.
[server]
max_read_bytes = "16MiB"

[[mount]]
kind = "api"
name = "bench"
allow_private = true          # the upstream is on loopback

[[mount.endpoint]]
uri = "api://bench/cached"
url = "http://{0}/cached"

[[mount.endpoint]]
uri = "api://bench/uncached"
url = "http://{0}/uncached"
"#,
            up.addr
        );
        std::fs::write(&p, text).map_err(|e| format!("write {}: {e}", p.display()))?;
        Ok(p)
    })();
    for (subject, uri, note) in [
        (
            "mcp-resources cached",
            "api://bench/cached",
            "resources/read of an endpoint the upstream marks max-age=3600: served from the mount's cache",
        ),
        (
            "mcp-resources uncached",
            "api://bench/uncached",
            "resources/read of an endpoint the upstream marks no-store: one upstream GET per read",
        ),
    ] {
        let r = (|| -> Result<Vec<Row>, String> {
            let config = config.clone()?;
            let mut s = StdioServer::spawn(&mut env.ours(&config), false)?;
            let _w = Watchdog::arm(s.pid(), Duration::from_secs(120));
            s.initialize()?;
            let o = load::stdio(&mut s, &read_req(uri), "item 1", false, env.plan())?;
            Ok(rows_of(subject, o, note))
        })();
        rows.extend(guard(S, subject, r));
    }
    rows
}

/// `git`, stopped and waited for when dropped (`git cat-file --batch` runs until its input ends).
struct GitBatch(std::process::Child);

impl Drop for GitBatch {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `git args…` in `dir`, with an identity so the commit needs no user config.
fn git_in(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=mcpr-bench",
            "-c",
            "user.email=bench@localhost",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("git {}: {e} (is git installed?)", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// `git://`: a 1 KiB file at a branch, read through our server over stdio, next to the same
/// blob read from a long-running `git cat-file --batch` by the same driver (the cost of going
/// to the repository directly: one request and one answer through pipes, no process start).
pub fn git(env: &Env) -> Vec<Row> {
    const S: &str = "stdio read git blob";
    let note = "resources/read git://main/f1k.txt: a 1 KiB file at the tip of branch main (ref resolved, tree walked, blob read through gix on every read); direct: `main:f1k.txt` asked of one `git cat-file --batch` process over its pipes, one at a time";
    let r = (|| -> Result<Vec<Row>, String> {
        let repo = env.cache.join("git-repo");
        if repo.exists() {
            std::fs::remove_dir_all(&repo).map_err(|e| format!("{}: {e}", repo.display()))?;
        }
        std::fs::create_dir_all(&repo).map_err(|e| format!("{}: {e}", repo.display()))?;
        git_in(&repo, &["init", "-q", "-b", "main"])?;
        let mut body = format!("{TEXT_1K_HEAD} (git)\n").into_bytes();
        body.resize(1024, b'x');
        std::fs::write(repo.join("f1k.txt"), &body).map_err(|e| e.to_string())?;
        git_in(&repo, &["add", "f1k.txt"])?;
        git_in(&repo, &["commit", "-q", "-m", "mcpr-bench fixture"])?;
        let config = env.cache.join("git.toml");
        let text = format!(
            "# Written by mcpr-bench: a git mount of a one-commit repository.\n[[mount]]\nkind = \"git\"\nrepo = \"{}\"\nwatch = \"off\"\n",
            repo.display()
        );
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;

        let mut srv = StdioServer::spawn(&mut env.ours(&config), false)?;
        let _w = Watchdog::arm(srv.pid(), Duration::from_secs(120));
        srv.initialize()?;
        let mut ours = load::stdio(
            &mut srv,
            &read_req("git://main/f1k.txt"),
            TEXT_1K_HEAD,
            false,
            env.plan(),
        )?;
        drop(srv);

        let mut direct = direct_cat_file(&repo, env.plan())?;
        let (d50, d99) = (direct.p50_us(), direct.p99_us());
        Ok(vec![
            Row::new(
                S,
                "mcp-resources",
                "p50 (1 in flight)",
                ours.latency.p50_us(),
                "µs",
            )
            .compare(format!("git cat-file --batch p50 {d50:.0} µs"))
            .note(note),
            Row::new(
                S,
                "mcp-resources",
                "p99 (1 in flight)",
                ours.latency.p99_us(),
                "µs",
            )
            .compare(format!("git cat-file --batch p99 {d99:.0} µs"))
            .note(note),
            Row::new(
                S,
                "mcp-resources",
                "throughput (32 in flight)",
                ours.rps,
                "req/s",
            )
            .note(note),
        ])
    })();
    guard(S, "mcp-resources", r)
}

/// The latency of `main:f1k.txt` from one `git cat-file --batch` in `repo`, one request at
/// a time after `plan.warmup` unmeasured ones; every answer is checked to be the whole blob.
fn direct_cat_file(repo: &Path, plan: Plan) -> Result<Samples, String> {
    use std::io::{BufRead, Read, Write};
    let mut child = GitBatch(
        Command::new("git")
            .args(["cat-file", "--batch"])
            .current_dir(repo)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("git cat-file --batch: {e}"))?,
    );
    let mut stdin = child.0.stdin.take().ok_or("no stdin")?;
    let mut stdout = std::io::BufReader::new(child.0.stdout.take().ok_or("no stdout")?);
    let mut header = String::new();
    let mut blob = Vec::new();
    let mut samples = Samples::with_capacity(plan.iters);
    for i in 0..plan.warmup + plan.iters {
        let t = Instant::now();
        stdin
            .write_all(b"main:f1k.txt\n")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("git cat-file --batch: {e}"))?;
        header.clear();
        stdout
            .read_line(&mut header)
            .map_err(|e| format!("git cat-file --batch: {e}"))?;
        // `<oid> blob <size>\n`, then the contents and a newline.
        let size: usize = header
            .trim_end()
            .rsplit(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("git cat-file --batch answered {header:?}"))?;
        blob.resize(size + 1, 0);
        stdout
            .read_exact(&mut blob)
            .map_err(|e| format!("git cat-file --batch: {e}"))?;
        if i >= plan.warmup {
            samples.push(t.elapsed());
        }
        if size != 1024 || !blob.starts_with(TEXT_1K_HEAD.as_bytes()) {
            return Err(format!("git cat-file --batch answered {header:?}"));
        }
    }
    Ok(samples)
}

/// Skills in the skills scenario, and files in each.
const SKILLS: usize = 1000;
const FILES_PER_SKILL: usize = 5;

/// The skills fixture: `flat/` with as many files as there are skills (the `resources/list`
/// comparison) and `tree/skills/sNNNN/` with `SKILL.md` and four more files each, two in a
/// subfolder (two mounts, neither inside the other).
fn skills_fixture(cache: &Path) -> Result<PathBuf, String> {
    let dir = cache
        .join("fixtures")
        .join(format!("skills-{SKILLS}x{FILES_PER_SKILL}"));
    if dir.join(".complete").exists() {
        return Ok(dir);
    }
    let w = |p: PathBuf, text: String| -> Result<(), String> {
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
    };
    for i in 0..SKILLS {
        w(dir.join(format!("flat/f{i:04}.txt")), format!("file {i}\n"))?;
        let s = dir.join(format!("tree/skills/s{i:04}"));
        w(
            s.join("SKILL.md"),
            format!("---\nname: s{i:04}\ndescription: Bench skill {i}\n---\nUse it.\n"),
        )?;
        for f in ["a.txt", "b.txt", "ref/c.txt", "ref/d.txt"] {
            w(s.join(f), format!("skill {i} {f}\n"))?;
        }
    }
    std::fs::write(dir.join(".complete"), b"").map_err(|e| e.to_string())?;
    Ok(dir)
}

/// `skills/list` of 1,000 skills of 5 files each (every page), first call and warm call,
/// beside a `resources/list` walk of 1,000 files on the same server.
pub fn skills(env: &Env) -> Vec<Row> {
    let s_name = format!("skills/list, {SKILLS} skills × {FILES_PER_SKILL} files");
    let s = s_name.as_str();
    let note = "2026-07-28 over stdio, page size 100, following nextCursor to the end; one server with a files mount of 1,000 files (first) and a files mount carrying the skills; first = the first skills/list walk after start (discovery, reads and hashes of 5,000 files); warm = later walks, nothing changed (median); resources/list = a walk of the first mount's 1,000 files (median)";
    let r = (|| -> Result<Vec<Row>, String> {
        let dir = skills_fixture(&env.cache)?;
        let config = env.cache.join("skills.toml");
        let text = format!(
            "# Written by mcpr-bench.\n[server]\npage_size = 100\n\n[[mount]]\nkind = \"files\"\nroot = \"{flat}\"\n\n[[mount]]\nkind = \"files\"\nroot = \"{root}\"\nskills = \"skills\"\n",
            flat = dir.join("flat").display(),
            root = dir.join("tree").display(),
        );
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        let mut srv = StdioServer::spawn(&mut env.ours(&config), false)?;
        let _w = Watchdog::arm(srv.pid(), Duration::from_secs(300));
        // Every page of `method`, until `enough` entries (`needle` counted) or the end.
        let mut walk =
            |method: &str, needle: &str, enough: usize| -> Result<(Duration, usize), String> {
                let start = Instant::now();
                let mut cursor: Option<String> = None;
                let mut count = 0usize;
                loop {
                    let params = match &cursor {
                        None => META_2026.to_owned(),
                        Some(c) => format!(r#""cursor":"{c}",{META_2026}"#),
                    };
                    let req = format!(
                        r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{{params}}}}}"#
                    );
                    srv.send_now(req.as_bytes())?;
                    let line = srv.recv_response()?;
                    load::verify(line, "")?;
                    let text = std::str::from_utf8(line).map_err(|e| e.to_string())?;
                    count += text.matches(needle).count();
                    cursor = text
                        .find("\"nextCursor\":\"")
                        .map(|i| &text[i + 14..])
                        .and_then(|rest| rest.split('"').next())
                        .map(str::to_owned);
                    if cursor.is_none() || count >= enough {
                        return Ok((start.elapsed(), count));
                    }
                }
            };
        let check = |what: &str, got: usize, want: usize| {
            if got == want {
                Ok(())
            } else {
                Err(format!("{what}: {got} entries, expected {want}"))
            }
        };
        let skill_needle = "\"frontmatter\":";
        let (first, n) = walk("skills/list", skill_needle, usize::MAX)?;
        check("skills/list", n, SKILLS)?;
        let reps = env.reps(20).max(3);
        let mut warm = Vec::new();
        let mut list = Vec::new();
        for _ in 0..reps {
            let (t, n) = walk("skills/list", skill_needle, usize::MAX)?;
            check("skills/list", n, SKILLS)?;
            warm.push(t);
            let (t, n) = walk("resources/list", "\"uri\":\"file://", SKILLS)?;
            check("resources/list", n, SKILLS)?;
            list.push(t);
        }
        warm.sort();
        list.sort();
        let warm = warm[warm.len() / 2];
        let list = list[list.len() / 2];
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let ratio = warm.as_secs_f64() / list.as_secs_f64();
        Ok(vec![
            Row::new(s, "mcp-resources", "first walk", ms(first), "ms").note(note),
            Row::new(s, "mcp-resources", "warm walk (median)", ms(warm), "ms")
                .compare(format!(
                    "resources/list of {SKILLS} files: {:.2} ms; ratio {ratio:.2}×",
                    ms(list)
                ))
                .target("≤ 2× resources/list", ratio <= 2.0)
                .note(note),
        ])
    })();
    guard(s, "mcp-resources", r)
}
