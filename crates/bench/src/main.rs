//! `mcpr-bench`: the benchmark's compiled load driver.
//!
//! `mcpr-bench run …` generates the fixtures, runs every scenario against the release
//! `mcp-resources`, the echo floor and the installed peers, prints one table and writes it as
//! JSON and Markdown. `mcpr-bench echo` is the floor: it writes every stdin line back.
//! `mcpr-bench file-echo DIR FILE` is the file floor: the echo, plus the system calls our
//! server makes to read `FILE` beneath `DIR` for every line, with the text in the answer.
//! `mcpr-bench http-floor ADDR DIR FILE` is the HTTP floor (`http_floor.rs`).
//! `mcpr-bench machine-floor DIR FILE` and `machine-http-floor ADDR DIR FILE` are the
//! machine's floors (`machine_floor.rs`): the same answers with rustix calls only.
//! `mcpr-bench blob-echo DIR FILE` is the blob floor (`blob_floor.rs`): `FILE` read, base64'd
//! and written as our `resources/read` answer, with buffers reused.
//! `mcpr-bench relay CMD…` is the relay floor (`relay.rs`): the cheapest gateway there is, a
//! process between the client and CMD passing bytes both ways unread.
//! `cargo xtask bench` builds, installs the peers and calls `run`; see docs/performance.md.
//! `mcpr-bench soak …` is the soak (`soak.rs`), run by `cargo xtask soak`.

mod blob_floor;
mod cluster;
mod cluster_flap;
mod fixtures;
mod floor_io;
mod gateway;
mod http;
mod http_floor;
mod load;
mod machine_floor;
mod plot;
mod proc;
mod relay;
mod report;
mod scenarios;
mod skills_pull;
mod soak;
mod stats;
mod upstream;

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// The benchmark's load driver.
#[derive(clap::Parser, Debug)]
#[command(name = "mcpr-bench", about)]
enum Cli {
    /// The floor: answer each line of stdin with itself.
    Echo,
    /// The file floor: answer each line with the text of DIR/FILE, read as the server reads it.
    FileEcho {
        /// The directory the file is opened beneath.
        dir: String,
        /// The file, relative to DIR.
        file: String,
    },
    /// The minimal file floor: answer each line with the text of DIR/FILE, read with the four
    /// calls any reader needs (`openat`, `fstat`, `read`, `close`).
    MinFileEcho {
        /// The directory the file is opened in.
        dir: String,
        /// The file, relative to DIR.
        file: String,
    },
    /// The HTTP floor: a minimal hyper server on ADDR answering every POST with the text of
    /// DIR/FILE as `mcp-resources` answers a 2026-07-28 `resources/read`.
    HttpFloor {
        /// `127.0.0.1:PORT` to listen on.
        addr: String,
        /// The directory the file is opened in.
        dir: String,
        /// The file, relative to DIR.
        file: String,
        /// The `mimeType` of the answer.
        #[arg(long, default_value = "text/plain")]
        mime: String,
    },
    /// The machine's stdio floor: our `resources/read` answer to each line, with rustix
    /// calls only (no serde, no buffered I/O): `machine_floor.rs`.
    MachineFloor {
        /// The directory the file is opened in.
        dir: String,
        /// The file, relative to DIR.
        file: String,
    },
    /// The machine's HTTP floor: one thread, epoll, keep-alive HTTP/1.1 on ADDR, answering
    /// every POST as `mcp-resources` answers a 2026-07-28 `resources/read` of DIR/FILE.
    MachineHttpFloor {
        /// `127.0.0.1:PORT` to listen on.
        addr: String,
        /// The directory the file is opened in.
        dir: String,
        /// The file, relative to DIR.
        file: String,
        /// The `mimeType` of the answer.
        #[arg(long, default_value = "text/plain")]
        mime: String,
    },
    /// The blob floor: answer each line with DIR/FILE as a base64 `blob` in our answer's
    /// shape: one read of the file, base64, one write, buffers reused.
    BlobEcho {
        /// The directory the file is opened in.
        dir: String,
        /// The file, relative to DIR.
        file: String,
    },
    /// The relay floor: run CMD and pass stdin to it and its stdout back, bytes unread.
    Relay {
        /// The upstream and its arguments.
        #[arg(trailing_var_arg = true, required = true)]
        cmd: Vec<String>,
    },
    /// Run the benchmark scenarios (`cargo xtask bench`).
    Run(RunArgs),
    /// Drive one stdio server with `resources/read` of URI, 32 in flight for SECONDS, and
    /// print its throughput: for taking a server's CPU profile or system calls by hand
    /// (`perf stat -p`, `strace -c -p`) under the load the `stdio` scenario applies. The
    /// caller places the processes (`taskset`); the server's pid goes to stderr first.
    Drive {
        /// Seconds of load.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Send `initialize` first (a legacy session); otherwise the lines are read raw, as
        /// for the floors.
        #[arg(long)]
        init: bool,
        /// One request in flight for all of SECONDS instead (the latency rows' load), for
        /// profiling what a lone request costs.
        #[arg(long)]
        one: bool,
        /// The URI to read.
        uri: String,
        /// The server and its arguments.
        #[arg(trailing_var_arg = true, required = true)]
        cmd: Vec<String>,
    },
    /// Drive an HTTP server already listening on ADDR with stateless 2026-07-28
    /// `resources/read` requests of URI at `/mcp`, 32 connections for SECONDS, as the `http`
    /// scenario does: for a server's CPU profile by hand (`perf record -p`).
    DriveHttp {
        /// Seconds of load.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// `127.0.0.1:PORT` the server listens on.
        addr: String,
        /// The URI to read.
        uri: String,
    },
    /// The soak (`cargo xtask soak`).
    Soak(soak::Options),
}

fn main() -> ExitCode {
    let result = match <Cli as clap::Parser>::parse() {
        Cli::Echo => echo(),
        Cli::FileEcho { dir, file } => file_echo(&dir, &file),
        Cli::MinFileEcho { dir, file } => min_file_echo(&dir, &file),
        Cli::MachineFloor { dir, file } => machine_floor::stdio(&dir, &file),
        Cli::MachineHttpFloor {
            addr,
            dir,
            file,
            mime,
        } => machine_floor::http(&addr, &dir, &file, &mime),
        Cli::HttpFloor {
            addr,
            dir,
            file,
            mime,
        } => http_floor::serve(&addr, &dir, &file, &mime),
        Cli::BlobEcho { dir, file } => blob_floor::blob_echo(&dir, &file),
        Cli::Relay { cmd } => relay::relay(&cmd),
        Cli::Run(a) => run(a),
        Cli::DriveHttp { seconds, addr, uri } => scenarios::drive_http(&addr, &uri, seconds),
        Cli::Drive {
            seconds,
            init,
            one,
            uri,
            cmd,
        } => scenarios::drive(&cmd, &uri, init, one, seconds),
        Cli::Soak(o) => soak::run(o),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcpr-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The floor: the cheapest possible line-for-line answerer, flushing after every line just
/// as a server must.
fn echo() -> Result<(), String> {
    answer_lines(|line, answer| {
        answer.extend_from_slice(line);
        Ok(())
    })
}

/// Reads stdin a line at a time (with its `\n`) until it ends; `answer` fills the answer to
/// each line, which is written and flushed before the next line is read.
fn answer_lines(
    mut answer: impl FnMut(&[u8], &mut Vec<u8>) -> Result<(), String>,
) -> Result<(), String> {
    let stdin = std::io::stdin().lock();
    let mut stdin = std::io::BufReader::with_capacity(1 << 16, stdin);
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let (mut line, mut out) = (Vec::with_capacity(4096), Vec::with_capacity(4096));
    loop {
        line.clear();
        if stdin
            .read_until(b'\n', &mut line)
            .map_err(|e| e.to_string())?
            == 0
        {
            return Ok(());
        }
        out.clear();
        answer(&line, &mut out)?;
        stdout
            .write_all(&out)
            .and_then(|()| stdout.flush())
            .map_err(|e| e.to_string())?;
    }
}

/// The file floor: for every line, the system calls `mcp-resources` makes for a direct read
/// of a small file (`statx`, `openat2` beneath the directory, `read`, `statx` of the
/// descriptor to see the file unchanged, `close`), then the line back with the file's text
/// as a JSON string, flushed. What a server that reads the file on every request with those
/// checks cannot go below on this machine; no JSON parsing, no URI, no rules.
fn file_echo(dir: &str, file: &str) -> Result<(), String> {
    use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, StatxFlags};
    let root = floor_io::open_dir(dir)?;
    let identity = StatxFlags::TYPE
        | StatxFlags::SIZE
        | StatxFlags::INO
        | StatxFlags::MTIME
        | StatxFlags::CTIME;
    let mut text = Vec::new();
    answer_lines(|line, answer| {
        let st = rustix::fs::statx(
            &root,
            file,
            AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT,
            identity,
        )
        .map_err(|e| format!("{file}: {e}"))?;
        let fd = rustix::fs::openat2(
            &root,
            file,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| format!("{file}: {e}"))?;
        text.clear();
        text.resize(st.stx_size as usize + 1, 0);
        let n = rustix::io::read(&fd, &mut text[..]).map_err(|e| e.to_string())?;
        text.truncate(n);
        // The server checks the file is the one it checked and did not change while it was
        // read (an in-place rewrite).
        rustix::fs::statx(&fd, "", AtFlags::EMPTY_PATH, identity).map_err(|e| e.to_string())?;
        drop(fd);
        text_answer(line, &text, answer)
    })
}

/// The file floors' answer to `line`: the line and the file's text as a JSON string.
fn text_answer(line: &[u8], text: &[u8], answer: &mut Vec<u8>) -> Result<(), String> {
    answer.extend_from_slice(br#"{"echo":"#);
    answer.extend_from_slice(line.strip_suffix(b"\n").unwrap_or(line));
    answer.extend_from_slice(br#","text":"#);
    serde_json::to_writer(&mut *answer, std::str::from_utf8(text).unwrap_or(""))
        .map_err(|e| e.to_string())?;
    answer.extend_from_slice(b"}\n");
    Ok(())
}

/// The minimal file floor: for every line, the four calls any program that reads
/// a file per request makes (`openat`, `fstat` for the size, `read`, `close`), then the same
/// answer as [`file_echo`] in one write. No sandbox: no `RESOLVE_BENEATH`, no check that the
/// file is not a link or changed during the read. Beside the five-call floor it splits what
/// our calls cost from what everything else costs.
fn min_file_echo(dir: &str, file: &str) -> Result<(), String> {
    let root = floor_io::open_dir(dir)?;
    let mut text = Vec::new();
    answer_lines(|line, answer| {
        floor_io::read_into(&root, file, &mut text)?;
        text_answer(line, &text, answer)
    })
}

/// `mcpr-bench run`'s arguments.
#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The `mcp-resources` binary under test.
    #[arg(long)]
    server: PathBuf,
    /// Fixtures, configs and results go here.
    #[arg(long)]
    cache: PathBuf,
    /// Smaller fixtures, shorter phases.
    #[arg(long)]
    quick: bool,
    /// Node for the npm peers (with --peers).
    #[arg(long, requires = "peers")]
    node: Option<PathBuf>,
    /// The directory holding the npm peers' node_modules (with --node).
    #[arg(long, requires = "node")]
    peers: Option<PathBuf>,
    /// The `mcp-server-opendal` executable.
    #[arg(long, conflicts_with = "no_opendal")]
    opendal: Option<PathBuf>,
    /// Why there is no `mcp-server-opendal` (shown in its rows).
    #[arg(long, value_name = "REASON")]
    no_opendal: Option<String>,
    /// Only these scenarios: stdio, http, list, skills, blob, notify, memory, startup, sqlite,
    /// git, api, s3, gateway, cluster, skills-pull.
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// An earlier `mcp-resources` binary to compare with: it takes turns with --server in the
    /// rounds of the stdio read, blob and stateless HTTP read scenarios, and our figures are
    /// held to at least its own (other scenarios ignore it).
    #[arg(long, value_name = "BIN")]
    baseline: Option<PathBuf>,
    /// What the baseline's rows are called after ("mcp-resources, TEXT").
    #[arg(
        long,
        value_name = "TEXT",
        requires = "baseline",
        default_value = "before"
    )]
    baseline_label: String,
}

/// The `--baseline` binary, checked to run before any scenario does: a wrong path would
/// otherwise show only as failed rows at the end of a long run.
fn baseline(bin: PathBuf, label: String) -> Result<scenarios::Baseline, String> {
    let out = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .map_err(|e| format!("--baseline {}: cannot run it: {e}", bin.display()))?;
    let version = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !version.starts_with("mcp-resources ") {
        return Err(format!(
            "--baseline {}: not an mcp-resources binary (`--version` printed {:?})",
            bin.display(),
            version.lines().next().unwrap_or_default()
        ));
    }
    if label.trim().is_empty() {
        return Err("--baseline-label: empty".into());
    }
    Ok(scenarios::Baseline { bin, label })
}

/// What the figures were measured on.
fn machine() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    serde_json::json!({
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu_model": model,
        "kernel": kernel.trim(),
    })
}

fn run(a: RunArgs) -> Result<(), String> {
    let baseline = a
        .baseline
        .map(|bin| baseline(bin, a.baseline_label))
        .transpose()?;
    let opendal = match (a.opendal, a.no_opendal) {
        (Some(bin), _) => Ok(bin),
        (None, Some(why)) => Err(why),
        (None, None) => Err("not installed (no --opendal given)".to_owned()),
    };
    // Before any scenario pins the driver, so the CPU count is the machine's.
    let mut m = machine();
    if let Some(b) = &baseline {
        m["baseline"] = serde_json::json!({ "bin": b.bin, "label": b.label });
    }
    let me = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let big_dirs = if a.quick { 100 } else { 1000 };
    let fx = fixtures::ensure(&a.cache.join("fixtures"), big_dirs)?;
    let node = match (a.node, a.peers) {
        (Some(n), Some(p)) => Ok((n, p)),
        _ => Err("Node peers not installed (no --node/--peers given)".to_owned()),
    };
    let env = scenarios::Env {
        server: a.server,
        me,
        cache: a.cache.clone(),
        fx,
        quick: a.quick,
        node,
        opendal,
        baseline,
    };
    if let Some(b) = &env.baseline {
        env.baseline_accepts_config()
            .map_err(|e| format!("--baseline {}: {e}", b.bin.display()))?;
    }
    type Scenario = fn(&scenarios::Env) -> Vec<report::Row>;
    let all: [(&str, Scenario); 15] = [
        ("startup", scenarios::startup),
        ("stdio", scenarios::stdio_read),
        ("http", scenarios::http_read),
        ("list", scenarios::big_list),
        ("skills", scenarios::skills),
        ("blob", scenarios::blobs),
        ("notify", scenarios::notify),
        ("memory", scenarios::memory),
        ("sqlite", scenarios::sqlite),
        ("git", scenarios::git),
        ("api", scenarios::api),
        ("s3", scenarios::s3),
        ("gateway", gateway::gateway),
        ("cluster", cluster::cluster),
        ("skills-pull", skills_pull::skills_pull),
    ];
    let mut rows = Vec::new();
    for (name, f) in all {
        if a.only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|x| x == name))
        {
            continue;
        }
        eprintln!("bench: scenario {name}");
        let t = std::time::Instant::now();
        rows.extend(f(&env));
        eprintln!(
            "bench: scenario {name} took {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    m["quick"] = a.quick.into();
    let table = report::table(&rows);
    // Which two builds the "ours / before" rows compare, named where the table is read.
    let compared = env.baseline.as_ref().map_or_else(String::new, |b| {
        format!(
            "mcp-resources: {}; baseline \"{}\": {}\n",
            env.server.display(),
            b.label,
            b.bin.display()
        )
    });
    println!(
        "\nmcp-resources benchmark — {} × {}{}\n{compared}",
        m["cpus"],
        m["cpu_model"].as_str().unwrap_or("?"),
        if a.quick {
            " (quick run: smaller fixtures, shorter phases)"
        } else {
            ""
        }
    );
    println!("{table}");
    let json = report::json(&rows, m.clone());
    let out = a.cache.join("results.json");
    std::fs::write(&out, serde_json::to_string_pretty(&json).expect("json"))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let md = a.cache.join("bench-results.md");
    let text = format!(
        "# mcp-resources benchmark\n\nMachine: {} × {}, Linux {}{}\n\n{}{}",
        m["cpus"],
        m["cpu_model"].as_str().unwrap_or("?"),
        m["kernel"].as_str().unwrap_or("?"),
        if a.quick { " (quick run)" } else { "" },
        if compared.is_empty() {
            String::new()
        } else {
            format!("Compared: {}\n\n", compared.trim_end())
        },
        report::markdown(&rows)
    );
    std::fs::write(&md, text).map_err(|e| format!("{}: {e}", md.display()))?;
    eprintln!("bench: wrote {} and {}", out.display(), md.display());
    Ok(())
}
