//! The cluster scenario's flapping bus: three replicas and NATS in network namespaces, each
//! replica joined to NATS by its own veth pair (its bus link) and to the driver by another;
//! the watcher's bus link is cut and healed (`ip link set DEV down|up`) for a minute while one
//! file, watched by one listen stream on each replica, changes every 250 ms. Each change's
//! latency from the write to its notification on every stream, and how many stream-changes
//! were missed or heard twice.
//!
//! Needs root and `ip netns` (and `nats-server`); without them its row says why it did not
//! run. The namespaces' names carry the driver's process id and are removed when the run
//! ends (those of a driver that no longer exists are removed at start).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cluster::{Proc, Streams, touch, wait_subscriptions};
use crate::report::Row;
use crate::scenarios::Env;
use crate::stats::Samples;

const S: &str = "listen fan-out";
const WHO: &str = "mcp-resources, 3 replicas, flapping bus";
const PREFIX: &str = "mcprb";
/// One outage and the time up after it.
const DOWN: Duration = Duration::from_secs(1);
const UP: Duration = Duration::from_secs(2);
/// Between two changes of the file.
const EVERY: Duration = Duration::from_millis(250);
/// A stream-change not heard within this is counted missed.
const WITHIN: Duration = Duration::from_secs(10);
const NOTE: &str = "NATS and three replicas (lease_ttl_ms = 1000, one shared files mount, debounce_ms = 0) in network namespaces, each replica on its own veth pair to NATS; one subscriptions/listen stream per replica on one file. The bus link of the replica watching the mount at the start is cut for 1 s and up for 2 s, over and over, for 60 s (15 s with --quick; the kernel has no sch_netem: a cut is silence, not loss); the file changes every 250 ms (one pwrite of the same length), after every stream heard the previous change or 10 s passed. Latency: from the write to the notification, every stream-change counted (p99 over all of them). Missed: no notification within 10 s; duplicates: a second one for the same change (a lease won again says each subscribed resource may have changed; a replica cut off watches for its own clients until a TTL after the heal)";

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Why namespaces cannot be used here, if they cannot: root and a working `ip netns`.
fn unusable() -> Option<String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        })
        .unwrap_or_default();
    if uid != "0" {
        return Some(format!("not run: network namespaces need root (uid {uid})"));
    }
    ip(&["netns", "list"])
        .err()
        .map(|e| format!("not run: `ip netns` does not work here: {e}"))
}

/// The namespaces (`nats`, `r0`..`r2`) and links; dropping it deletes the namespaces, and
/// with them every veth (a pair dies with either end).
struct Net {
    tag: String,
    octet: u8,
    namespaces: Vec<String>,
}

impl Net {
    fn build(replicas: usize) -> Result<Self, String> {
        Self::sweep_leftovers();
        let pid = std::process::id();
        // 10.200-249.x.y: apart from the partition tests' 10.100-199.
        let octet = u8::try_from(200 + pid % 50).unwrap_or(200);
        let mut net = Self {
            tag: format!("{:04x}", pid & 0xffff),
            octet,
            namespaces: Vec::new(),
        };
        let nats = net.ns("nats");
        ip(&["netns", "add", &nats])?;
        net.namespaces.push(nats.clone());
        ip(&["-n", &nats, "link", "set", "lo", "up"])?;
        for k in 0..replicas {
            let r = net.ns(&format!("r{k}"));
            ip(&["netns", "add", &r])?;
            net.namespaces.push(r.clone());
            ip(&["-n", &r, "link", "set", "lo", "up"])?;
            // Bus link: `a` in the NATS namespace, `b` in the replica's.
            let (a, b) = (net.bus_dev(k), format!("bb{}{k}b", net.tag));
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            ip(&["link", "set", &a, "netns", &nats])?;
            ip(&["link", "set", &b, "netns", &r])?;
            let (bus_a, bus_b) = (
                format!("10.{octet}.{k}.1/24"),
                format!("10.{octet}.{k}.2/24"),
            );
            ip(&["-n", &nats, "addr", "add", &bus_a, "dev", &a])?;
            ip(&["-n", &r, "addr", "add", &bus_b, "dev", &b])?;
            ip(&["-n", &nats, "link", "set", &a, "up"])?;
            ip(&["-n", &r, "link", "set", &b, "up"])?;
            // Client link: `a` here, `b` in the replica's namespace.
            let (a, b) = (format!("bc{}{k}a", net.tag), format!("bc{}{k}b", net.tag));
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            ip(&["link", "set", &b, "netns", &r])?;
            let (cl_a, cl_b) = (
                format!("10.{octet}.{}.1/24", 100 + k),
                format!("10.{octet}.{}.2/24", 100 + k),
            );
            ip(&["addr", "add", &cl_a, "dev", &a])?;
            ip(&["-n", &r, "addr", "add", &cl_b, "dev", &b])?;
            ip(&["link", "set", &a, "up"])?;
            ip(&["-n", &r, "link", "set", &b, "up"])?;
        }
        Ok(net)
    }

    fn ns(&self, name: &str) -> String {
        format!("{PREFIX}-{}-{name}", std::process::id())
    }

    fn bus_dev(&self, k: usize) -> String {
        format!("bb{}{k}a", self.tag)
    }

    fn bus_link(&self, k: usize, up: bool) -> Result<(), String> {
        let dev = self.bus_dev(k);
        let state = if up { "up" } else { "down" };
        ip(&["-n", &self.ns("nats"), "link", "set", &dev, state])
    }

    /// Namespaces of drivers that are gone (killed before they removed theirs).
    fn sweep_leftovers() {
        let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
            return;
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            let Some(rest) = name.strip_prefix(&format!("{PREFIX}-")) else {
                continue;
            };
            let pid = rest.split('-').next().unwrap_or("");
            if !pid.is_empty() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// The rows, or one saying why they did not run.
pub fn flapping(env: &Env, dir: &Path, files: &Path, nats: Option<&Path>) -> Vec<Row> {
    if let Some(why) = unusable() {
        eprintln!("bench: cluster: flapping bus {why}");
        return vec![Row::skipped(S, WHO, why)];
    }
    let Some(nats) = nats else {
        return vec![Row::skipped(
            S,
            WHO,
            "skipped: nats-server not found".into(),
        )];
    };
    crate::scenarios::guard(S, WHO, run(env, dir, files, nats))
}

fn run(env: &Env, dir: &Path, files: &Path, nats_bin: &Path) -> Result<Vec<Row>, String> {
    // Declared first, dropped last: the processes inside die before their namespaces go.
    let net = Net::build(3)?;
    let o = net.octet;
    let dir = dir.join("flap");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let store = dir.join("js");
    let mut nats = Proc::spawn(
        "nats-server",
        Command::new("ip")
            .args(["netns", "exec", &net.ns("nats")])
            .arg(nats_bin)
            .args(["-js", "-a", "0.0.0.0", "-p", "4222", "-sd"])
            .arg(&store),
        dir.join("nats.log"),
    )?;
    let mut replicas = Vec::new();
    let mut addrs = Vec::new();
    for k in 0..3 {
        let host = format!("10.{o}.{}.2", 100 + k);
        let config = dir.join(format!("r{k}.toml"));
        let text = format!(
            "# Written by mcpr-bench (scenario cluster, flapping bus).\n[http]\nrate_limit_per_second = 0\nallowed_hosts = [\"{host}\"]\n\n[cluster]\nnats_url = \"nats://10.{o}.{k}.1:4222\"\nname = \"flap\"\nreplica = \"r{k}\"\nlease_ttl_ms = 1000\nsecret = \"mcpr-bench cluster secret, 32+ bytes\"\n\n[[mount]]\nkind = \"files\"\nroot = \"{}\"\ndebounce_ms = 0\nshared = true\n",
            files.display()
        );
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        let addr = format!("{host}:8080");
        let mut proc = Proc::spawn(
            &format!("replica r{k}"),
            Command::new("ip")
                .args(["netns", "exec", &net.ns(&format!("r{k}"))])
                .arg(&env.server)
                .args(["serve", "--log-level", "info", "--config"])
                .arg(&config)
                // The driver's private link: nobody else can reach it.
                .args(["--http", &addr, "--insecure-no-auth"]),
            dir.join(format!("r{k}.log")),
        )?;
        proc.wait_port(&addr)?;
        replicas.push(proc);
        addrs.push(addr);
    }
    let watcher = wait_watcher(&addrs, &mut replicas)?;
    let uri = format!("file://{}/watched.txt", files.display());
    let path = files.join("watched.txt");
    let mut streams = Streams::open(&addrs, 3, &uri)?;
    wait_subscriptions(&addrs, 3)?;
    let warm = streams.round(|| touch(&path, 0), Duration::from_secs(10))?;
    if warm.missing > 0 {
        return Err("a stream got no notification for the warm-up change within 10 s".into());
    }
    nats.check()?;

    let length = if env.quick {
        Duration::from_secs(15)
    } else {
        Duration::from_secs(60)
    };
    // The link flaps on its own schedule, whatever the changes are waiting for.
    let done = Arc::new(AtomicBool::new(false));
    let flapping = Instant::now();
    let flapper = {
        let done = done.clone();
        let (ns, dev) = (net.ns("nats"), net.bus_dev(watcher));
        std::thread::spawn(move || -> Result<usize, String> {
            let start = Instant::now();
            let mut outages = 0;
            while start.elapsed() < length && !done.load(Ordering::Relaxed) {
                ip(&["-n", &ns, "link", "set", &dev, "down"])?;
                outages += 1;
                std::thread::sleep(DOWN);
                ip(&["-n", &ns, "link", "set", &dev, "up"])?;
                std::thread::sleep(UP);
            }
            Ok(outages)
        })
    };
    let mut every = Samples::with_capacity(1000);
    let mut on_flapping = Samples::with_capacity(400);
    let (mut changes, mut missed, mut duplicates) = (0, 0, 0);
    let start = Instant::now();
    let mut failure = None;
    while start.elapsed() < length {
        std::thread::sleep(EVERY);
        changes += 1;
        let mut written = Instant::now();
        let round = match streams.round(
            || {
                written = Instant::now();
                touch(&path, changes)
            },
            WITHIN,
        ) {
            Ok(r) => r,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        missed += round.missing;
        if round.missing > 0 {
            // Where in the flapping it fell: the link goes down at every multiple of
            // DOWN + UP and comes back DOWN later.
            let at = written.duration_since(flapping).as_secs_f64();
            let missing: Vec<usize> = (0..3).filter(|k| round.each[*k].is_none()).collect();
            eprintln!(
                "bench: cluster: flapping bus: change {changes} (written {at:.2} s into the flapping, {:.2} s into its cycle) not heard within 10 s on stream(s) {missing:?}; the flapping replica is {watcher}",
                at % (DOWN + UP).as_secs_f64()
            );
        }
        duplicates += round.duplicates + round.late;
        for (k, t) in round.each.iter().enumerate() {
            if let Some(t) = t {
                every.push(*t);
                if k == watcher {
                    on_flapping.push(*t);
                }
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    let outages = flapper
        .join()
        .map_err(|_| "the flapping thread panicked".to_string())??;
    net.bus_link(watcher, true)?;
    if let Some(e) = failure {
        return Err(e);
    }
    // What arrives late still counts: a duplicate, or a change missed within 10 s.
    let tail = streams.round(|| touch(&path, changes + 1), WITHIN)?;
    duplicates += tail.late;
    for r in &mut replicas {
        r.check()?;
    }
    nats.check()?;
    let lease_wins = count_in_logs(&dir, "this replica now watches the mount");
    eprintln!(
        "bench: cluster: flapping bus: {outages} outages of replica {watcher}'s link in {:.0} s, {changes} changes, {missed} stream-changes missed, {duplicates} duplicates, {lease_wins} lease wins",
        length.as_secs_f64()
    );
    let ms = |us: f64| us / 1000.0;
    let stream_changes = changes * 3;
    Ok(vec![
        Row::new(
            S,
            WHO,
            "every stream: write → notification p50",
            ms(every.p50_us()),
            "ms",
        )
        .note(NOTE),
        Row::new(
            S,
            WHO,
            "every stream: write → notification p99",
            ms(every.p99_us()),
            "ms",
        )
        .note(NOTE),
        Row::new(
            S,
            WHO,
            "the flapping replica's stream: write → notification p50",
            ms(on_flapping.p50_us()),
            "ms",
        )
        .note(NOTE),
        Row::new(
            S,
            WHO,
            "the flapping replica's stream: write → notification p99",
            ms(on_flapping.p99_us()),
            "ms",
        )
        .note(NOTE),
        Row::new(
            S,
            WHO,
            &format!("stream-changes missed (of {stream_changes}, {outages} outages)"),
            missed as f64,
            "",
        )
        .note(NOTE),
        Row::new(
            S,
            WHO,
            &format!("duplicate notifications ({lease_wins} lease wins)"),
            duplicates as f64,
            "",
        )
        .note(NOTE),
    ])
}

/// The replica holding the mount's lease, once exactly one does (30 s at most).
fn wait_watcher(addrs: &[String], replicas: &mut [Proc]) -> Result<usize, String> {
    let start = Instant::now();
    loop {
        let mut holders = Vec::new();
        for (i, (a, r)) in addrs.iter().zip(replicas.iter_mut()).enumerate() {
            r.check()?;
            if crate::cluster::is_watcher(&crate::soak::metrics(a)?) {
                holders.push(i);
            }
        }
        if let [one] = holders[..] {
            return Ok(one);
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "30 s after start {} replicas watch the mount (want exactly one)",
                holders.len()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Lines containing `what` in the replicas' logs.
fn count_in_logs(dir: &Path, what: &str) -> usize {
    (0..3)
        .map(|k| {
            std::fs::read_to_string(dir.join(format!("r{k}.log")))
                .unwrap_or_default()
                .matches(what)
                .count()
        })
        .sum()
}
