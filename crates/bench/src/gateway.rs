//! The `gateway` scenario: a 1 KiB file read through an `mcp` mount whose upstream is our own
//! release binary over stdio, next to the same read asked of that upstream directly (the
//! cost of going to the source), uncached and with the mount's read cache on; and the time
//! from a write of a file the upstream serves to the `updated` notice at a client of the
//! gateway, next to the same notice from the upstream directly.
//!
//! Beside them, the relay floor (`relay.rs`): the direct read through a process that passes
//! bytes unread, the least any gateway costs here.
//!
//! The sides take turns for a few rounds so that a slow moment of the machine lands on each
//! side alike; throughput is each side's median round, latency all its rounds' samples.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fixtures::TEXT_1K_HEAD;
use crate::load::{self, Outcome};
use crate::proc::{StdioServer, Watchdog};
use crate::report::{Row, fmt_value};
use crate::scenarios::{Env, change_latency, guard, read_req};
use crate::stats::Samples;

const S: &str = "gateway read 1 KiB";
const N: &str = "gateway write → resources/updated";
/// The gateway's mount name: its URIs are `up+<upstream URI>`.
const MOUNT: &str = "up";
/// What a gateway mount is held to: what it may add to a lone read's p50, the share of the
/// upstream's throughput it keeps, and the share of our own file read a cached read keeps.
const ADDED_P50_US: f64 = 50.0;
const THROUGHPUT_SHARE: f64 = 0.85;
const CACHED_SHARE: f64 = 0.90;

/// `v` with its sign, as the table writes figures.
fn signed(v: f64) -> String {
    match v < 0.0 {
        true => format!("-{}", fmt_value(-v)),
        false => format!("+{}", fmt_value(v)),
    }
}

/// One side's measurements over the rounds.
#[derive(Default)]
struct Side {
    latency: Samples,
    rps: Vec<f64>,
}

impl Side {
    fn add(&mut self, o: Outcome) {
        self.latency.append(o.latency);
        self.rps.push(o.rps);
    }

    fn median_rps(&self) -> f64 {
        let mut v = self.rps.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }
}

/// The upstream's config: the small tree, debounce 0, and a `ttl_ms` on the mount so its
/// answers say how long they stay fresh (a files mount's answers say `ttlMs` 0 otherwise,
/// and the gateway caches an answer only as long as its upstream allows).
fn upstream_config(env: &Env) -> Result<PathBuf, String> {
    let p = env.cache.join("gateway-upstream.toml");
    let text = format!(
        "# Written by mcpr-bench: the gateway scenario's upstream.\n[server]\nmax_read_bytes = \"16MiB\"\nmax_subscriptions_per_session = 20000\n\n[[mount]]\nkind = \"files\"\nroot = {}\ndebounce_ms = 0\nttl_ms = 60000\n",
        serde_json::to_string(&env.fx.small.display().to_string()).expect("string")
    );
    std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}

/// A gateway config: one `mcp` mount running our server on `upstream` over stdio, with the
/// read cache on when `ttl_ms` > 0.
fn gateway_config(env: &Env, upstream: &Path, ttl_ms: u64) -> Result<PathBuf, String> {
    let p = env.cache.join(format!("gateway-{ttl_ms}.toml"));
    let q = |p: &Path| serde_json::to_string(&p.display().to_string()).expect("string");
    let text = format!(
        r#"# Written by mcpr-bench: our own server as a stdio upstream behind an mcp mount.
[server]
page_size = 1000
max_read_bytes = "16MiB"
max_subscriptions_per_session = 20000

[[mount]]
kind = "mcp"
name = "{MOUNT}"
command = {}
args = ["serve", "--log-level", "error", "--config", {}]
ttl_ms = {ttl_ms}
"#,
        q(&env.server),
        q(upstream)
    );
    std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}

/// The rows: direct, through the gateway, through the gateway's cache; then the notices.
pub fn gateway(env: &Env) -> Vec<Row> {
    let mut rows = Vec::new();
    let r = (|| -> Result<Vec<Row>, String> {
        let upstream = upstream_config(env)?;
        let plain = gateway_config(env, &upstream, 0)?;
        let cached = gateway_config(env, &upstream, 60_000)?;
        let uri = env.file_uri("f1k.txt");
        let through = format!("{MOUNT}+{uri}");
        let direct_req = read_req(&uri);
        let through_req = read_req(&through);
        // The relay floor runs the same upstream, behind `mcpr-bench relay`.
        let relay = || {
            let mut c = std::process::Command::new(&env.me);
            c.arg("relay")
                .arg(&env.server)
                .args(["serve", "--log-level", "error", "--config"])
                .arg(&upstream);
            c
        };
        let (direct_cmd, plain_cmd, cached_cmd) = (
            || env.ours(&upstream),
            || env.ours(&plain),
            || env.ours(&cached),
        );
        // Each side: how its server starts, the request it is asked, its config (for errors).
        type Cmd<'a> = &'a dyn Fn() -> std::process::Command;
        type Req<'a> = &'a (dyn Fn(u64) -> String + Sync);
        let sides: [(Cmd, Req, &Path); 4] = [
            (&direct_cmd, &direct_req, &upstream),
            (&relay, &direct_req, &upstream),
            (&plain_cmd, &through_req, &plain),
            (&cached_cmd, &through_req, &cached),
        ];
        let mut measured: [Side; 4] = Default::default();
        for _ in 0..if env.quick { 1 } else { 3 } {
            for ((cmd, req, config), side) in sides.iter().zip(measured.iter_mut()) {
                let mut s = StdioServer::spawn(&mut cmd(), false)?;
                let _w = Watchdog::arm(s.pid(), Duration::from_secs(120));
                s.initialize()?;
                let o = load::stdio(&mut s, req, TEXT_1K_HEAD, false, env.plan())?;
                if o.errors > 0 {
                    return Err(format!(
                        "{} error answers from {}",
                        o.errors,
                        config.display()
                    ));
                }
                side.add(o);
            }
        }
        let [mut direct, mut floor, mut plain, mut cached] = measured;
        let (d50, d_rps) = (direct.latency.p50_us(), direct.median_rps());
        let (f50, f_rps) = (floor.latency.p50_us(), floor.median_rps());
        let note_direct = "resources/read of file://…/f1k.txt asked of our server directly over stdio (the upstream: a files mount with ttl_ms = 60000, release build): the cost of going to the source, and our own file read";
        let note_floor = "the relay floor: the same direct read with `mcpr-bench relay` between the driver and the upstream, passing bytes both ways unread (one read and one write per chunk): one more pipe and one more process each way, what any stdio gateway costs at least on this machine";
        let note_plain = "the same read as up+file://…/f1k.txt through an mcp mount (ttl_ms = 0) whose stdio upstream is that server: one upstream request per read";
        let note_cached = "the same read through an mcp mount with ttl_ms = 60000: served from the mount's read cache (the upstream allows 60 s), answered in place as our own file read is; against that file read (direct)";
        let mut out = Vec::new();
        for (subject, side, note) in [
            ("direct (upstream)", &mut direct, note_direct),
            ("relay floor", &mut floor, note_floor),
            ("gateway", &mut plain, note_plain),
            ("gateway cached", &mut cached, note_cached),
        ] {
            let (p50, p99, rps) = (
                side.latency.p50_us(),
                side.latency.p99_us(),
                side.median_rps(),
            );
            let mut r50 = Row::new(S, subject, "p50 (1 in flight)", p50, "µs").note(note);
            let mut r_rps =
                Row::new(S, subject, "throughput (32 in flight)", rps, "req/s").note(note);
            if subject != "direct (upstream)" {
                let mut c50 = format!("{} µs over direct", signed(p50 - d50));
                let mut c_rps = format!("{:.0} % of direct", 100.0 * rps / d_rps);
                if subject == "gateway" {
                    c50 += &format!("; {} µs over the relay floor", signed(p50 - f50));
                    c_rps += &format!("; {:.0} % of the relay floor", 100.0 * rps / f_rps);
                }
                r50 = r50.compare(c50);
                r_rps = r_rps.compare(c_rps);
            }
            match subject {
                "gateway" => {
                    r50 = r50.target("≤ direct + 50 µs", p50 - d50 <= ADDED_P50_US);
                    r_rps = r_rps.target("≥ 85 % of direct", rps >= THROUGHPUT_SHARE * d_rps);
                }
                "gateway cached" => {
                    r_rps = r_rps.target("≥ 90 % of our file read", rps >= CACHED_SHARE * d_rps);
                }
                _ => {}
            }
            out.push(r50);
            out.push(Row::new(S, subject, "p99 (1 in flight)", p99, "µs").note(note));
            out.push(r_rps);
        }
        Ok(out)
    })();
    rows.extend(guard(S, "gateway", r));
    rows.extend(notices(env));
    rows
}

/// Write → `updated`: a legacy subscription of one file directly and through the gateway.
fn notices(env: &Env) -> Vec<Row> {
    let mut rows = Vec::new();
    let r = (|| -> Result<Vec<Row>, String> {
        let upstream = upstream_config(env)?;
        let plain = gateway_config(env, &upstream, 0)?;
        let uri = env.file_uri("watched.txt");
        let path = env.fx.small.join("watched.txt");
        let mut out = Vec::new();
        let mut direct_p50 = None;
        for (subject, config, sub) in [
            ("direct (upstream)", &upstream, uri.clone()),
            ("gateway", &plain, format!("{MOUNT}+{uri}")),
        ] {
            let mut s = StdioServer::spawn(&mut env.ours(config), false)?;
            let _w = Watchdog::arm(s.pid(), Duration::from_secs(300));
            s.initialize()?;
            let (mut lat, missed) = change_latency(&mut s, &path, &sub, env.reps(200))?;
            let note = "legacy resources/subscribe, then the file is rewritten in place; from the write call to the notification line at the client (upstream debounce_ms = 0); through the gateway the upstream's notice is relayed under the mount's URI";
            let (p50, p99) = (lat.p50_us() / 1000.0, lat.p99_us() / 1000.0);
            let mut r50 = Row::new(N, subject, "p50", p50, "ms").note(note);
            if let Some(d) = direct_p50 {
                r50 = r50.compare(format!("{} ms over direct", signed(p50 - d)));
            }
            direct_p50 = direct_p50.or(Some(p50));
            out.push(r50);
            out.push(Row::new(N, subject, "p99", p99, "ms").note(note));
            if missed > 0 {
                out.push(
                    Row::new(
                        N,
                        subject,
                        "writes without a notice within 2 s",
                        missed as f64,
                        "",
                    )
                    .note(note),
                );
            }
        }
        Ok(out)
    })();
    rows.extend(guard(N, "gateway", r));
    rows
}
