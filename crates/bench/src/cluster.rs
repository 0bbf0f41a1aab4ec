//! The `cluster` scenario: one file change fanned out to 10,000
//! `subscriptions/listen` streams, first on one replica, then spread over three replicas joined
//! by a NATS server the driver starts; and what the NATS hop adds to one notification.
//!
//! The streams are read by one thread through epoll, so the driver costs a few system calls per
//! notification instead of 10,000 woken threads competing with the servers for the two cores.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::event::epoll;

use crate::report::{Row, fmt_value};
use crate::scenarios::{Env, META_2026, free_addr, guard};
use crate::soak::{Scan, gauge, is_timeout, metrics};
use crate::stats::Samples;

const S: &str = "listen fan-out";
/// Listen streams in the fan-out.
const STREAMS: usize = 10_000;
/// Streams whose requests are sent before their answers are read while opening: enough to keep
/// the server busy, few enough to stay inside its listen backlog (128 as `ss -ltn` shows it):
/// with 200, connects past the backlog lost their SYN and waited a 1 s retransmit, and 10,000
/// streams on one replica took 35-39 s to open instead of about 2.
const BATCH: usize = 64;
/// Descriptors beyond the streams that the driver or a server may hold (binary, logs, epoll,
/// inotify, NATS, the runtime).
const SPARE_FDS: u64 = 512;

/// The rows: one replica, then three (or why not), then the NATS hop.
pub fn cluster(env: &Env) -> Vec<Row> {
    let mut rows = Vec::new();
    let files = env.cache.join("cluster/files");
    // Absolute: the configs name the root, and are read relative to their own directory.
    let prepared = std::fs::create_dir_all(&files)
        .and_then(|()| std::fs::write(files.join("watched.txt"), "00000000\n"))
        .and_then(|()| files.canonicalize())
        .map_err(|e| format!("{}: {e}", files.display()))
        // Children inherit the limit, so raising it here raises it for every server started
        // below too.
        .and_then(|f| raise_nofile(STREAMS as u64 + SPARE_FDS).map(|()| f));
    let files = match prepared {
        Ok(f) => f,
        Err(e) => return vec![Row::skipped(S, "mcp-resources", format!("failed: {e}"))],
    };
    let dir = files.parent().unwrap_or(&files).to_owned();
    let single = guard(
        S,
        "mcp-resources, 1 replica",
        single_replica(env, &dir, &files),
    );
    let one_last = value(&single, "10,000 streams: write → last stream p50");
    let one_hop = value(&single, "1 stream: write → notification p50");
    rows.extend(single);
    let nats = nats_server();
    match &nats {
        Some(nats) => rows.extend(guard(
            S,
            "mcp-resources, 3 replicas",
            three_replicas(env, &dir, &files, nats, one_last, one_hop),
        )),
        None => {
            eprintln!("bench: cluster: skipped: nats-server not found");
            rows.push(Row::skipped(
                S,
                "mcp-resources, 3 replicas",
                "skipped: nats-server not found (looked in PATH and /usr/sbin, /usr/local/bin)"
                    .into(),
            ));
        }
    }
    rows.extend(crate::cluster_flap::flapping(
        env,
        &dir,
        &files,
        nats.as_deref(),
    ));
    rows
}

/// A figure already measured, by metric name, to compare against.
fn value(rows: &[Row], metric: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.metric == metric)
        .and_then(|r| r.value)
}

const FANOUT_NOTE: &str = "10,000 subscriptions/listen streams (2026-07-28, HTTP/1.1 on loopback, one connection each, read by one driver thread through epoll) on the same file of a files mount, debounce_ms = 0; the file is changed once per repetition (one pwrite of the same length); time from the write call until the first / the last stream has read its notifications/resources/updated. p50 and p99 are over the repetitions (with fewer than 100, p99 is the slowest). Driver and servers share the 2 cores, placed by the scheduler. A missed or duplicated notification adds a row saying how many";
const OPEN_NOTE: &str = "from the first connect until the replicas' /metrics show 10,000 subscriptions between them; requests sent 64 at a time (inside the server's listen backlog of 128), each batch's answers read before the next is sent";
const HOP_NOTE: &str = "one subscriptions/listen stream on one file, the file changed every 30 ms (one pwrite of the same length); time from the write call to the notification at the client, debounce_ms = 0. In the cluster the watcher is the replica holding the mount's lease (mcp_cluster_watcher = 1); every replica, the watcher included, gets a shared mount's changes from NATS";

/// One replica without `[cluster]`: one stream, then 10,000.
fn single_replica(env: &Env, dir: &Path, files: &Path) -> Result<Vec<Row>, String> {
    let config = write_config(dir, "single", files, None)?;
    let mut r = Replica::start(env, dir, "single", &config)?;
    let uri = file_uri(files);
    let path = files.join("watched.txt");
    let mut rows = Vec::new();
    let who = "mcp-resources, 1 replica";
    let mut hop = one_stream(&mut r, &uri, &path, env.reps(200))?;
    let (p50, p99) = (hop.p50_us() / 1000.0, hop.p99_us() / 1000.0);
    rows.push(Row::new(S, who, "1 stream: write → notification p50", p50, "ms").note(HOP_NOTE));
    rows.push(Row::new(S, who, "1 stream: write → notification p99", p99, "ms").note(HOP_NOTE));
    let addrs = [r.addr.clone()];
    let f = fanout(&addrs, &uri, &path, env.reps(20))?;
    r.check()?;
    rows.extend(f.rows(who, None));
    Ok(rows)
}

/// Three replicas of one cluster on a NATS server of our own.
fn three_replicas(
    env: &Env,
    dir: &Path,
    files: &Path,
    nats: &Path,
    one_last: Option<f64>,
    one_hop: Option<f64>,
) -> Result<Vec<Row>, String> {
    let nats = Nats::start(nats, dir)?;
    let mut replicas = Vec::new();
    for i in 1..=3 {
        let name = format!("r{i}");
        let config = write_config(dir, &name, files, Some((&nats.url, &name)))?;
        replicas.push(Replica::start(env, dir, &name, &config)?);
    }
    let watcher = wait_watcher(&mut replicas)?;
    let other = (watcher + 1) % replicas.len();
    let uri = file_uri(files);
    let path = files.join("watched.txt");
    let changes = env.reps(200);
    let who = "mcp-resources, 3 replicas";
    let mut rows = Vec::new();
    let mut hops = Vec::new();
    for (at, label) in [
        (watcher, "1 stream on the watcher"),
        (other, "1 stream on another replica"),
    ] {
        let mut s = one_stream(&mut replicas[at], &uri, &path, changes)?;
        let (p50, p99) = (s.p50_us() / 1000.0, s.p99_us() / 1000.0);
        hops.push(p50);
        let vs = one_hop.map_or_else(String::new, |h| {
            format!("1 replica: {} ms ({:+.2} ms)", fmt_value(h), p50 - h)
        });
        rows.push(
            Row::new(
                S,
                who,
                &format!("{label}: write → notification p50"),
                p50,
                "ms",
            )
            .compare(vs)
            .note(HOP_NOTE),
        );
        rows.push(
            Row::new(
                S,
                who,
                &format!("{label}: write → notification p99"),
                p99,
                "ms",
            )
            .note(HOP_NOTE),
        );
    }
    // Every replica, the watcher included, gets a shared mount's changes from NATS, so the
    // hop is what a cluster adds over one replica without one.
    let (base, against) = match one_hop {
        Some(h) => (h, "1 replica without [cluster]"),
        None => (hops[0], "the watcher"),
    };
    rows.push(
        Row::new(
            S,
            who,
            &format!("NATS hop: added p50 (another replica − {against})"),
            hops[1] - base,
            "ms",
        )
        .note(HOP_NOTE),
    );
    let addrs: Vec<String> = replicas.iter().map(|r| r.addr.clone()).collect();
    let f = fanout(&addrs, &uri, &path, env.reps(20))?;
    for r in &mut replicas {
        r.check()?;
    }
    rows.extend(f.rows(who, one_last));
    Ok(rows)
}

/// What the fan-out measured.
struct Fanout {
    first: Samples,
    last: Samples,
    missed: usize,
    duplicates: usize,
    streams: usize,
    /// From the first connect until the replicas hold every subscription.
    opened: Duration,
}

impl Fanout {
    fn rows(mut self, who: &str, single_last: Option<f64>) -> Vec<Row> {
        let ms = |us: f64| us / 1000.0;
        let last50 = ms(self.last.p50_us());
        let vs = single_last.map_or_else(String::new, |s| {
            format!("1 replica: {} ms ({:.2}×)", fmt_value(s), last50 / s)
        });
        let n = "10,000 streams";
        let mut rows = vec![
            Row::new(
                S,
                who,
                &format!("{n}: write → last stream p50"),
                last50,
                "ms",
            )
            .compare(vs)
            .note(FANOUT_NOTE),
            Row::new(
                S,
                who,
                &format!("{n}: write → last stream p99"),
                ms(self.last.p99_us()),
                "ms",
            )
            .note(FANOUT_NOTE),
            Row::new(
                S,
                who,
                &format!("{n}: write → first stream p50"),
                ms(self.first.p50_us()),
                "ms",
            )
            .note(FANOUT_NOTE),
            Row::new(
                S,
                who,
                &format!("{n}: opened until all subscribed"),
                self.opened.as_secs_f64(),
                "s",
            )
            .note(OPEN_NOTE),
        ];
        if self.missed > 0 {
            rows.push(
                Row::new(
                    S,
                    who,
                    &format!(
                        "stream-changes without a notification within 10 s (of {})",
                        self.streams
                    ),
                    self.missed as f64,
                    "",
                )
                .note(FANOUT_NOTE),
            );
        }
        if self.duplicates > 0 {
            rows.push(
                Row::new(
                    S,
                    who,
                    "duplicate notifications",
                    self.duplicates as f64,
                    "",
                )
                .note(FANOUT_NOTE),
            );
        }
        rows
    }
}

/// Open 10,000 streams over `addrs` (round robin), then change the file `reps` times.
fn fanout(addrs: &[String], uri: &str, path: &Path, reps: usize) -> Result<Fanout, String> {
    let t = Instant::now();
    let mut streams = Streams::open(addrs, STREAMS, uri)?;
    let acknowledged = t.elapsed();
    wait_subscriptions(addrs, STREAMS as u64)?;
    let opened = t.elapsed();
    eprintln!(
        "bench: cluster: {STREAMS} streams on {} replica(s) acknowledged in {:.1} s, subscribed in {:.1} s",
        addrs.len(),
        acknowledged.as_secs_f64(),
        opened.as_secs_f64()
    );
    // The first change is not timed: it proves every stream is wired end to end.
    let warm = streams.round(|| touch(path, 0), Duration::from_secs(30))?;
    if warm.missing > 0 {
        return Err(format!(
            "{} of {STREAMS} streams got no notification for the warm-up change within 30 s",
            warm.missing
        ));
    }
    let mut f = Fanout {
        first: Samples::with_capacity(reps),
        last: Samples::with_capacity(reps),
        missed: 0,
        duplicates: 0,
        streams: STREAMS * reps,
        opened,
    };
    for i in 1..=reps {
        std::thread::sleep(Duration::from_millis(200));
        let r = streams.round(|| touch(path, i), Duration::from_secs(10))?;
        f.missed += r.missing;
        f.duplicates += r.duplicates;
        if let (Some(first), Some(last)) = (r.first, r.last) {
            f.first.push(first);
            f.last.push(last);
        }
    }
    drop(streams);
    wait_subscriptions_gone(addrs)?;
    Ok(f)
}

/// One stream on replica `r`, `changes` timed changes (after one untimed): the latencies.
fn one_stream(r: &mut Replica, uri: &str, path: &Path, changes: usize) -> Result<Samples, String> {
    let addrs = [r.addr.clone()];
    let mut s = Streams::open(&addrs, 1, uri)?;
    wait_subscriptions(&addrs, 1)?;
    let warm = s.round(|| touch(path, 0), Duration::from_secs(10))?;
    if warm.missing > 0 {
        return Err("the stream got no notification for the warm-up change within 10 s".into());
    }
    let mut lat = Samples::with_capacity(changes);
    let (mut missed, mut duplicates) = (0, 0);
    for i in 1..=changes {
        std::thread::sleep(Duration::from_millis(30));
        let round = s.round(|| touch(path, i), Duration::from_secs(2))?;
        duplicates += round.duplicates;
        match round.first {
            Some(d) => lat.push(d),
            None => missed += 1,
        }
    }
    drop(s);
    wait_subscriptions_gone(&addrs)?;
    r.check()?;
    if missed > 0 || duplicates > 0 {
        return Err(format!(
            "of {changes} changes, {missed} reached the stream late or never (2 s) and {duplicates} twice"
        ));
    }
    Ok(lat)
}

/// Change the watched file with one `pwrite` of the same length: one modification, so one
/// notification per stream. (`fs::write` truncates, then writes: two modifications, which the
/// mount's `debounce_ms = 0` reports as two changes.)
pub(crate) fn touch(path: &Path, i: usize) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.write_all_at(format!("{:08}\n", i % 100_000_000).as_bytes(), 0))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn file_uri(files: &Path) -> String {
    format!("file://{}/watched.txt", files.display())
}

// ------------------------------------------------------------------------------ streams

/// The HTTP request opening one listen stream on `uri`.
fn listen_request(addr: &str, uri: &str, id: usize) -> String {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"subscriptions/listen","params":{{"notifications":{{"resourceSubscriptions":[{}]}},{META_2026}}}}}"#,
        serde_json::Value::from(uri)
    );
    format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: subscriptions/listen\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

struct Stream {
    sock: TcpStream,
    scan: Scan,
    /// The first bytes of the body, to show what a stream that ended carried.
    start: Vec<u8>,
    /// Notifications since the round began.
    seen: usize,
    /// When the first of them arrived.
    at: Option<Instant>,
}

/// Listen streams read together through one epoll set.
pub(crate) struct Streams {
    ep: OwnedFd,
    list: Vec<Stream>,
    /// Streams without a notification yet this round.
    waiting: usize,
    events: Vec<epoll::Event>,
    buf: Vec<u8>,
}

/// One change, as the streams saw it.
pub(crate) struct Round {
    first: Option<Duration>,
    last: Option<Duration>,
    pub(crate) missing: usize,
    pub(crate) duplicates: usize,
    /// Each stream's first notification, by stream.
    pub(crate) each: Vec<Option<Duration>>,
    /// Notifications that arrived after the previous round ended (50 ms after its last
    /// stream's first one) and before this one began: late duplicates of earlier changes,
    /// or their first notification after that round gave up.
    pub(crate) late: usize,
}

impl Streams {
    /// `n` streams, stream `i` on `addrs[i % addrs.len()]`, each answered 200 with an event
    /// stream.
    pub(crate) fn open(addrs: &[String], n: usize, uri: &str) -> Result<Self, String> {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| format!("epoll: {e}"))?;
        let mut list = Vec::with_capacity(n);
        let t = Instant::now();
        for first in (0..n).step_by(BATCH) {
            if first > 0 && first % 2000 == 0 {
                eprintln!(
                    "bench: cluster: {first} of {n} streams acknowledged after {:.1} s",
                    t.elapsed().as_secs_f64()
                );
            }
            let mut batch = Vec::with_capacity(BATCH);
            for i in first..(first + BATCH).min(n) {
                let addr = &addrs[i % addrs.len()];
                let mut s =
                    TcpStream::connect(addr).map_err(|e| format!("stream {i}: connect: {e}"))?;
                s.set_nodelay(true)
                    .and_then(|()| s.set_read_timeout(Some(Duration::from_secs(30))))
                    .and_then(|()| s.write_all(listen_request(addr, uri, i).as_bytes()))
                    .map_err(|e| format!("stream {i}: send: {e}"))?;
                batch.push(s);
            }
            for mut sock in batch {
                let i = list.len();
                let rest = read_head(&mut sock).map_err(|e| format!("stream {i}: {e}"))?;
                sock.set_nonblocking(true)
                    .map_err(|e| format!("stream {i}: {e}"))?;
                epoll::add(
                    &ep,
                    &sock,
                    epoll::EventData::new_u64(i as u64),
                    epoll::EventFlags::IN,
                )
                .map_err(|e| format!("epoll add: {e}"))?;
                let mut scan = Scan::default();
                scan.feed(&rest);
                let mut start = rest;
                start.truncate(512);
                list.push(Stream {
                    sock,
                    scan,
                    start,
                    seen: 0,
                    at: None,
                });
                let s = &list[i];
                if s.scan.ended {
                    return Err(ended(i, s));
                }
            }
        }
        Ok(Self {
            ep,
            list,
            waiting: 0,
            events: Vec::with_capacity(1024),
            buf: vec![0; 64 * 1024],
        })
    }

    /// Let whatever is in flight arrive and be dropped, then time one `change`: until every
    /// stream has a notification or `timeout` passes, then a little longer to catch a second
    /// one.
    pub(crate) fn round(
        &mut self,
        change: impl FnOnce() -> Result<(), String>,
        timeout: Duration,
    ) -> Result<Round, String> {
        let seen = |list: &[Stream]| list.iter().map(|s| s.seen).sum::<usize>();
        let before = seen(&self.list);
        self.pump(Instant::now() + Duration::from_millis(20), false)?;
        let late = seen(&self.list) - before;
        for s in &mut self.list {
            s.seen = 0;
            s.at = None;
        }
        self.waiting = self.list.len();
        let t0 = Instant::now();
        change()?;
        self.pump(t0 + timeout, true)?;
        let missing = self.waiting;
        // A duplicate from a second replica noticing the same change would come within a
        // NATS round trip of the first.
        self.pump(Instant::now() + Duration::from_millis(50), false)?;
        let times = self.list.iter().filter_map(|s| s.at);
        let (first, last) = times.fold((None, None), |(lo, hi): (Option<Instant>, _), t| {
            (
                Some(lo.map_or(t, |l| l.min(t))),
                Some(hi.map_or(t, |h: Instant| h.max(t))),
            )
        });
        Ok(Round {
            first: first.map(|t| t - t0),
            last: last.map(|t| t - t0),
            missing,
            duplicates: self.list.iter().map(|s| s.seen.saturating_sub(1)).sum(),
            each: self.list.iter().map(|s| s.at.map(|t| t - t0)).collect(),
            late,
        })
    }

    /// Read what arrives until `deadline`, or (with `until_all`) until every stream has a
    /// notification this round.
    fn pump(&mut self, deadline: Instant, until_all: bool) -> Result<(), String> {
        loop {
            if until_all && self.waiting == 0 {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            let timeout = rustix::event::Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            };
            self.events.clear();
            match epoll::wait(
                &self.ep,
                rustix::buffer::spare_capacity(&mut self.events),
                Some(&timeout),
            ) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(format!("epoll wait: {e}")),
            }
            for ev in &self.events {
                let i = ev.data.u64() as usize;
                let s = &mut self.list[i];
                match s.sock.read(&mut self.buf) {
                    Ok(0) => return Err(ended(i, s)),
                    Ok(k) => {
                        let n = s.scan.feed(&self.buf[..k]) as usize;
                        if n > 0 {
                            if s.seen == 0 {
                                s.at = Some(Instant::now());
                                self.waiting = self.waiting.saturating_sub(1);
                            }
                            s.seen += n;
                        }
                        if s.start.len() < 512 {
                            let room = 512 - s.start.len();
                            s.start.extend_from_slice(&self.buf[..k.min(room)]);
                        }
                        if s.scan.ended {
                            return Err(ended(i, s));
                        }
                    }
                    Err(e) if is_timeout(&e) => {}
                    Err(e) => return Err(format!("stream {i}: receive: {e}")),
                }
            }
        }
    }
}

fn ended(i: usize, s: &Stream) -> String {
    format!(
        "listen stream {i} ended by itself; it began: {}",
        crate::proc::preview(&s.start)
    )
}

/// Read a response head (blocking); the body bytes that came with it. Anything but a 200
/// event stream is an error showing the head.
fn read_head(s: &mut TcpStream) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = crate::http::find(&buf, b"\r\n\r\n") {
            break i;
        }
        match s.read(&mut chunk) {
            Ok(0) => return Err("closed before the response head".into()),
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
            Err(e) if is_timeout(&e) => return Err("no response head within 30 s".into()),
            Err(e) => return Err(format!("receive: {e}")),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") || !head.contains("text/event-stream") {
        return Err(format!(
            "expected a 200 event stream, got: {}",
            crate::proc::preview(&buf)
        ));
    }
    Ok(buf[end + 4..].to_vec())
}

/// Sum of a gauge over the replicas.
fn gauge_sum(addrs: &[String], name: &str) -> Result<u64, String> {
    let mut sum = 0;
    for a in addrs {
        let m = metrics(a)?;
        sum += gauge(&m, name).ok_or_else(|| format!("{a}/metrics has no {name}"))?;
    }
    Ok(sum)
}

/// The acknowledgment of a listen goes out before its watch is registered: wait until the
/// replicas hold `n` subscriptions between them.
pub(crate) fn wait_subscriptions(addrs: &[String], n: u64) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let have = gauge_sum(addrs, "mcp_subscriptions")?;
        if have >= n {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "the replicas hold {have} subscriptions 60 s after {n} listens were acknowledged"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Closed streams are released: the next measurement starts from none.
fn wait_subscriptions_gone(addrs: &[String]) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let have = gauge_sum(addrs, "mcp_subscriptions")?;
        if have == 0 {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "the replicas still hold {have} subscriptions 60 s after every stream closed"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------- processes

/// Raise the soft `RLIMIT_NOFILE` to the hard limit; an error when that is below `need`.
fn raise_nofile(need: u64) -> Result<(), String> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let lim = getrlimit(Resource::Nofile);
    // An unlimited hard limit still cannot pass the kernel's nr_open; ask for what we need.
    let want = lim.maximum.unwrap_or(need.max(1 << 16));
    if lim.current.is_some_and(|c| c < want) {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(want),
                maximum: lim.maximum,
            },
        )
        .map_err(|e| format!("cannot raise RLIMIT_NOFILE to {want}: {e}"))?;
    }
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    if now < need {
        return Err(format!(
            "RLIMIT_NOFILE is {now} (hard limit {}), {need} descriptors are needed for {STREAMS} streams; raise the hard limit (ulimit -Hn)",
            lim.maximum.map_or("unlimited".into(), |m| m.to_string())
        ));
    }
    Ok(())
}

/// A config for one replica: the watched directory, limits opened for 10,000 streams from one
/// address, and with `cluster` (NATS URL, replica id) the cluster and a shared mount.
fn write_config(
    dir: &Path,
    name: &str,
    files: &Path,
    cluster: Option<(&str, &str)>,
) -> Result<PathBuf, String> {
    let (cluster, shared) = match cluster {
        Some((url, replica)) => (
            format!(
                "[cluster]\nnats_url = \"{url}\"\nname = \"bench\"\nreplica = \"{replica}\"\nlease_ttl_ms = 1000\nsecret = \"mcpr-bench cluster secret, 32+ bytes\"\n\n"
            ),
            "shared = true\n",
        ),
        None => (String::new(), ""),
    };
    let text = format!(
        "# Written by mcpr-bench (scenario cluster).\n[server]\nmax_listen_streams_per_client = {}\nmax_watches = {}\n\n[http]\nrate_limit_per_second = 0\n\n{cluster}[[mount]]\nkind = \"files\"\nroot = \"{}\"\ndebounce_ms = 0\n{shared}",
        STREAMS * 2,
        STREAMS * 4,
        files.display()
    );
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}

/// A child process killed on drop, its stderr in a log file quoted when it fails.
pub(crate) struct Proc {
    child: Child,
    what: String,
    log: PathBuf,
}

impl Proc {
    pub(crate) fn spawn(what: &str, cmd: &mut Command, log: PathBuf) -> Result<Self, String> {
        let err = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        Ok(Self {
            child,
            what: what.into(),
            log,
        })
    }

    /// An error if the process has exited, with the end of its log.
    pub(crate) fn check(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(st)) => Err(format!("{} exited ({st}): {}", self.what, self.log_tail())),
            Err(e) => Err(format!("{}: {e}", self.what)),
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let cut = text.len().saturating_sub(800);
        let cut = (cut..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        text[cut..].trim().to_owned()
    }

    /// Wait until `addr` accepts connections; an error if the process exits first.
    pub(crate) fn wait_port(&mut self, addr: &str) -> Result<(), String> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            self.check()?;
            if TcpStream::connect(addr).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "{} does not listen on {addr} after 20 s",
            self.what
        ))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `mcp-resources serve --http` on a free loopback port.
struct Replica {
    proc: Proc,
    addr: String,
}

impl Replica {
    fn start(env: &Env, dir: &Path, name: &str, config: &Path) -> Result<Self, String> {
        let addr = free_addr()?;
        let mut cmd = Command::new(&env.server);
        cmd.args(["serve", "--log-level", "warn", "--config"])
            .arg(config)
            .args(["--http", &addr]);
        let mut proc = Proc::spawn(
            &format!("replica {name}"),
            &mut cmd,
            dir.join(format!("{name}.log")),
        )?;
        proc.wait_port(&addr)?;
        Ok(Self { proc, addr })
    }

    fn check(&mut self) -> Result<(), String> {
        self.proc.check()
    }
}

/// Our own `nats-server -js` on a free loopback port, its store under the cache directory.
struct Nats {
    _proc: Proc,
    url: String,
    store: PathBuf,
}

impl Nats {
    fn start(bin: &Path, dir: &Path) -> Result<Self, String> {
        let addr = free_addr()?;
        let port = addr.rsplit(':').next().unwrap_or_default().to_owned();
        let store = dir.join(format!("nats-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&store);
        let mut cmd = Command::new(bin);
        cmd.args(["-js", "-a", "127.0.0.1", "-p", &port, "-sd"])
            .arg(&store);
        let mut proc = Proc::spawn("nats-server", &mut cmd, dir.join("nats.log"))?;
        proc.wait_port(&addr)?;
        Ok(Self {
            _proc: proc,
            url: format!("nats://{addr}"),
            store,
        })
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        // The process is killed first (fields drop after this), so the store may still be
        // written to: removing it is best effort, and the next run starts clean anyway.
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// `nats-server` from PATH or the usual system places.
fn nats_server() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/bin".into()])
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
}

/// The index of the replica holding the mount's lease, once exactly one does (30 s at most).
fn wait_watcher(replicas: &mut [Replica]) -> Result<usize, String> {
    let start = Instant::now();
    loop {
        let mut holders = Vec::new();
        for (i, r) in replicas.iter_mut().enumerate() {
            r.check()?;
            if is_watcher(&metrics(&r.addr)?) {
                holders.push(i);
            }
        }
        if let [one] = holders[..] {
            return Ok(one);
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "30 s after start {} replicas report mcp_cluster_watcher = 1 for the mount (want exactly one)",
                holders.len()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether `/metrics` says this replica watches a mount.
pub(crate) fn is_watcher(metrics: &str) -> bool {
    metrics.lines().any(|l| {
        l.starts_with("mcp_cluster_watcher{")
            && l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .is_some_and(|v| v == 1.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watcher_is_read_from_metrics() {
        assert!(is_watcher(
            "mcp_cluster_connected 1\nmcp_cluster_watcher{mount=\"files\"} 1\n"
        ));
        assert!(!is_watcher("mcp_cluster_watcher{mount=\"files\"} 0\n"));
        assert!(!is_watcher("mcp_cluster_connected 1\n"));
    }

    #[test]
    fn a_listen_request_has_its_length() {
        let r = listen_request("127.0.0.1:1", "file:///x/watched.txt", 7);
        let (head, body) = r.split_once("\r\n\r\n").expect("head");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(
            v["params"]["notifications"]["resourceSubscriptions"][0],
            "file:///x/watched.txt"
        );
    }
}
