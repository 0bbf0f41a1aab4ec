//! Load loops: one request in flight for latency, a window of requests in flight for
//! throughput, over a pipe or over HTTP connections.

use std::time::{Duration, Instant};

use crate::http::Conn;
use crate::proc::{StdioServer, preview};
use crate::stats::Samples;

/// Requests kept in flight for throughput figures.
pub const WINDOW: usize = 32;

/// The results of scoped threads, in order; a thread that panicked counts as an error
/// naming `what` ran on it.
pub fn join_all<T>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Result<T, String>>>,
    what: &str,
) -> Vec<Result<T, String>> {
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(format!("{what} thread panicked")))
        })
        .collect()
}

/// How much load to apply.
#[derive(Clone, Copy)]
pub struct Plan {
    /// Latency samples to take (one in flight).
    pub iters: usize,
    /// Upper bound on the latency phase, for slow servers.
    pub max_latency_phase: Duration,
    /// Length of the throughput phase.
    pub throughput_phase: Duration,
    /// Untimed requests first (JIT, caches, allocator).
    pub warmup: usize,
}

/// What a load run measured.
pub struct Outcome {
    /// One-in-flight latencies.
    pub latency: Samples,
    /// Completed requests per second with `WINDOW` in flight.
    pub rps: f64,
    /// The same, in each round of [`stdio_interleaved`] (one entry for a lone run): how far
    /// a comparison of two sides moved from round to round.
    pub round_rps: Vec<f64>,
    /// Responses that were errors.
    pub errors: u64,
}

/// A request line for id `n`.
pub type MakeRequest<'a> = &'a (dyn Fn(u64) -> String + Sync);

/// Whether a response line is a JSON-RPC error (every server writes it near the start).
fn is_error(line: &[u8]) -> bool {
    let head = &line[..line.len().min(64)];
    head.windows(8).any(|w| w == b"\"error\":")
}

/// Check one answer before measuring, so a misconfigured run fails loudly instead of
/// timing error messages.
pub fn verify(body: &[u8], check: &str) -> Result<(), String> {
    let ok = !is_error(body)
        && (check.is_empty() || crate::http::find(body, check.as_bytes()).is_some());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "unexpected answer (wanted {check:?}): {}",
            preview(body)
        ))
    }
}

/// A stdio server under load, measured in phases so that two servers can take turns (see
/// [`stdio_interleaved`]).
struct StdioDriver<'a, 'm> {
    s: &'a mut StdioServer,
    make: MakeRequest<'m>,
    raw: bool,
    id: u64,
    errors: u64,
}

impl<'a, 'm> StdioDriver<'a, 'm> {
    /// Check the first answer, then warm up. `raw` reads every line as the answer (the echo
    /// floor, whose answers look like requests).
    fn start(
        s: &'a mut StdioServer,
        make: MakeRequest<'m>,
        check: &str,
        raw: bool,
        warmup: usize,
    ) -> Result<Self, String> {
        let mut d = Self {
            s,
            make,
            raw,
            id: 1,
            errors: 0,
        };
        let first = d.next();
        d.s.send_now(first.as_bytes())?;
        let answer = if raw {
            d.s.recv_line()?
        } else {
            d.s.recv_response()?
        };
        verify(answer, check)?;
        for _ in 0..warmup {
            let msg = d.next();
            d.s.send_now(msg.as_bytes())?;
            d.recv()?;
        }
        Ok(d)
    }

    fn next(&mut self) -> String {
        self.id += 1;
        (self.make)(self.id)
    }

    fn recv(&mut self) -> Result<(), String> {
        let line = if self.raw {
            self.s.recv_line()?
        } else {
            self.s.recv_response()?
        };
        self.errors += u64::from(!self.raw && is_error(line));
        Ok(())
    }

    /// `n` one-in-flight round trips, stopping early at `deadline`.
    fn latency(&mut self, n: usize, out: &mut Samples, deadline: Instant) -> Result<(), String> {
        for _ in 0..n {
            let msg = self.next();
            let t = Instant::now();
            self.s.send_now(msg.as_bytes())?;
            self.recv()?;
            out.push(t.elapsed());
            if Instant::now() > deadline {
                break;
            }
        }
        Ok(())
    }

    /// Keep `WINDOW` requests outstanding for `phase`, sending one for every answer; the
    /// requests answered and the time taken.
    fn throughput(&mut self, phase: Duration) -> Result<(u64, Duration), String> {
        for _ in 0..WINDOW {
            let msg = self.next();
            self.s.send(msg.as_bytes())?;
        }
        self.s.flush()?;
        let start = Instant::now();
        let mut done = 0u64;
        let elapsed = loop {
            self.recv()?;
            done += 1;
            let el = start.elapsed();
            if el >= phase {
                break el;
            }
            let msg = self.next();
            self.s.send_now(msg.as_bytes())?;
        };
        for _ in 1..WINDOW {
            self.recv()?;
        }
        Ok((done, elapsed))
    }
}

/// Drive a stdio server: latency with one request in flight, then throughput.
pub fn stdio(
    s: &mut StdioServer,
    make: MakeRequest,
    check: &str,
    raw: bool,
    plan: Plan,
) -> Result<Outcome, String> {
    let mut d = StdioDriver::start(s, make, check, raw, plan.warmup)?;
    // `drive --one` asks for as many as fit in its time.
    let mut latency = Samples::with_capacity(plan.iters.min(1 << 20));
    d.latency(
        plan.iters,
        &mut latency,
        Instant::now() + plan.max_latency_phase,
    )?;
    // No throughput phase (`drive --one`): no burst of 32 at the end either, and no rate.
    let rps = match plan.throughput_phase.is_zero() {
        true => 0.0,
        false => {
            let (done, elapsed) = d.throughput(plan.throughput_phase)?;
            done as f64 / elapsed.as_secs_f64()
        }
    };
    Ok(Outcome {
        latency,
        rps,
        round_rps: vec![rps],
        errors: d.errors,
    })
}

/// One side of [`stdio_interleaved`]: the server, its requests, the answer check, and
/// whether answers are read raw.
pub type Side<'a, 'm> = (&'a mut StdioServer, MakeRequest<'m>, &'a str, bool);

/// The order the sides take their turns in, in round `round` of `n` sides: reversed every
/// other round, so no side always follows the same other one (two builds compared within
/// a round would otherwise always meet the machine in the same order, the later one in
/// whatever state the earlier one left it).
pub fn turns(n: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |i| if round % 2 == 1 { n - 1 - i } else { i })
}

/// Drive stdio servers in alternating rounds, so all see the same machine: on a shared VM
/// the round-trip time of even the echo floor drifts by tens of microseconds over seconds,
/// and measuring one server after the other would compare different moments. The sides
/// take their turns in the order of [`turns`]; the outcomes are in the order of `sides`.
pub fn stdio_interleaved(
    sides: Vec<Side>,
    plan: Plan,
    rounds: usize,
) -> Result<Vec<Outcome>, String> {
    let mut drivers = sides
        .into_iter()
        .map(|(s, make, check, raw)| StdioDriver::start(s, make, check, raw, plan.warmup))
        .collect::<Result<Vec<_>, _>>()?;
    let rounds = rounds.max(1);
    let latency = latency_rounds(&mut drivers, plan, rounds)?;
    let phase = plan.throughput_phase / rounds as u32;
    let mut totals = vec![(0u64, Duration::ZERO, Vec::with_capacity(rounds)); drivers.len()];
    for round in 0..rounds {
        for i in turns(drivers.len(), round) {
            let (d, (n, t, each)) = (&mut drivers[i], &mut totals[i]);
            let (dn, dt) = d.throughput(phase)?;
            (*n, *t) = (*n + dn, *t + dt);
            each.push(dn as f64 / dt.as_secs_f64());
        }
    }
    Ok(drivers
        .into_iter()
        .zip(latency)
        .zip(totals)
        .map(|((d, (latency, _)), (n, t, round_rps))| Outcome {
            latency,
            rps: n as f64 / t.as_secs_f64(),
            round_rps,
            errors: d.errors,
        })
        .collect())
}

/// `plan.iters` one-in-flight round trips for each driver, taken in `rounds` alternating
/// rounds; the samples and each round's median (µs), in the order of `drivers`.
fn latency_rounds(
    drivers: &mut [StdioDriver],
    plan: Plan,
    rounds: usize,
) -> Result<Vec<(Samples, Vec<f64>)>, String> {
    let mut latency: Vec<(Samples, Vec<f64>)> = drivers
        .iter()
        .map(|_| {
            (
                Samples::with_capacity(plan.iters),
                Vec::with_capacity(rounds),
            )
        })
        .collect();
    let per = plan.iters.div_ceil(rounds);
    let end = Instant::now() + plan.max_latency_phase;
    for round in 0..rounds {
        for i in turns(drivers.len(), round) {
            let (d, (all, medians)) = (&mut drivers[i], &mut latency[i]);
            let mut round = Samples::with_capacity(per);
            d.latency(per, &mut round, end)?;
            medians.push(round.p50_us());
            all.append(round);
        }
    }
    Ok(latency)
}

/// What [`stdio_interleaved_latency`] measured for one side.
pub struct LatencyOutcome {
    /// Every one-in-flight latency.
    pub latency: Samples,
    /// The median latency of each round, in µs: how far a comparison of two sides moved
    /// from round to round.
    pub round_p50_us: Vec<f64>,
    /// Responses that were errors.
    pub errors: u64,
}

/// The latency half of [`stdio_interleaved`] alone (`plan.throughput_phase` is not used): for
/// answers too large to keep a window of them in flight, such as blob reads. The outcomes
/// are in the order of `sides`.
pub fn stdio_interleaved_latency(
    sides: Vec<Side>,
    plan: Plan,
    rounds: usize,
) -> Result<Vec<LatencyOutcome>, String> {
    let mut drivers = sides
        .into_iter()
        .map(|(s, make, check, raw)| StdioDriver::start(s, make, check, raw, plan.warmup))
        .collect::<Result<Vec<_>, _>>()?;
    let latency = latency_rounds(&mut drivers, plan, rounds.max(1))?;
    Ok(latency
        .into_iter()
        .zip(drivers)
        .map(|((latency, round_p50_us), d)| LatencyOutcome {
            latency,
            round_p50_us,
            errors: d.errors,
        })
        .collect())
}

/// An address and how to make one request there.
struct HttpCall<'a, 'c> {
    addr: &'a str,
    call: Call<'c>,
}

impl HttpCall<'_, '_> {
    fn call(&self, c: &mut Conn, id: u64) -> Result<(bool, Vec<u8>), String> {
        (self.call)(c, id)
    }
}

/// One HTTP request target: endpoint, headers per request, and the body for id `n`.
pub struct HttpTarget<'a> {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Endpoint path.
    pub path: String,
    /// Headers to send with every request.
    pub headers: Vec<(String, String)>,
    /// The body for id `n`.
    pub make: MakeRequest<'a>,
}

impl HttpTarget<'_> {
    /// The request for id `id` on `c`, and the whole answer.
    pub fn post(&self, c: &mut Conn, id: u64) -> Result<crate::http::Response, String> {
        let h: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        c.post(&self.path, &h, (self.make)(id).as_bytes())
    }

    fn call(&self, c: &mut Conn, id: u64) -> Result<(bool, Vec<u8>), String> {
        let r = self.post(c, id)?;
        let msg = r.message().unwrap_or_default().to_vec();
        Ok((r.status != 200 || is_error(&msg), msg))
    }
}

/// Drive an HTTP server: one connection for latency, `WINDOW` connections (one thread each)
/// for throughput.
pub fn http(t: &HttpTarget, check: &str, plan: Plan) -> Result<Outcome, String> {
    drive_http(&t.addr, &|c, id| t.call(c, id), check, plan)
}

/// Drive plain GETs of `path` at `addr` the same way as [`http`]: the floor a proxying
/// provider is compared with.
pub fn http_get(addr: &str, path: &str, check: &str, plan: Plan) -> Result<Outcome, String> {
    drive_http(
        addr,
        &|c, _| {
            let r = c.get(path)?;
            Ok((r.status != 200, r.body))
        },
        check,
        plan,
    )
}

/// One request on a connection: (was it an error, the answer).
type Call<'a> = &'a (dyn Fn(&mut Conn, u64) -> Result<(bool, Vec<u8>), String> + Sync);

fn drive_http(addr: &str, call: Call, check: &str, plan: Plan) -> Result<Outcome, String> {
    let t = &HttpCall { addr, call };
    let mut c = Conn::connect(t.addr)?;
    let (_, first) = t.call(&mut c, 1)?;
    verify(&first, check)?;
    for i in 0..plan.warmup {
        t.call(&mut c, i as u64 + 2)?;
    }
    let mut errors = 0;
    let mut latency = Samples::with_capacity(plan.iters);
    let phase = Instant::now();
    for i in 0..plan.iters {
        let id = 1_000_000 + i as u64;
        let start = Instant::now();
        let (err, _) = t.call(&mut c, id)?;
        latency.push(start.elapsed());
        errors += u64::from(err);
        if phase.elapsed() > plan.max_latency_phase {
            break;
        }
    }
    drop(c);
    let start = Instant::now();
    let results: Vec<Result<(u64, u64), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WINDOW)
            .map(|w| {
                s.spawn(move || {
                    let mut c = Conn::connect(t.addr)?;
                    let (mut done, mut errs) = (0u64, 0u64);
                    let mut id = 10_000_000 * (w as u64 + 1);
                    while start.elapsed() < plan.throughput_phase {
                        id += 1;
                        let (err, _) = t.call(&mut c, id)?;
                        done += 1;
                        errs += u64::from(err);
                    }
                    Ok((done, errs))
                })
            })
            .collect();
        join_all(handles, "load")
    });
    let elapsed = start.elapsed();
    let mut done = 0;
    for r in results {
        let (d, e) = r?;
        done += d;
        errors += e;
    }
    let rps = done as f64 / elapsed.as_secs_f64();
    Ok(Outcome {
        latency,
        rps,
        round_rps: vec![rps],
        errors,
    })
}

/// What [`http_interleaved`] measured for one server.
pub struct HttpOutcome {
    /// Latencies with one request in flight on one connection.
    pub one: Samples,
    /// Requests per second on that one connection.
    pub one_rps: f64,
    /// The same, in each round.
    pub one_round_rps: Vec<f64>,
    /// Latencies with `conns` connections, one request in flight on each.
    pub many: Samples,
    /// Requests per second over the `conns` connections.
    pub many_rps: f64,
    /// The same, in each round.
    pub many_round_rps: Vec<f64>,
    /// Server CPU time per request in the `conns`-connection phases, in µs, when its pid
    /// was given (user + system time of every thread, from `/proc/PID/stat`).
    pub cpu_us_per_req: Option<f64>,
    /// Answers that were errors.
    pub errors: u64,
}

/// One server in [`http_interleaved`]: its target, the text its answer must hold, and its
/// pid for CPU accounting.
pub struct HttpSide<'a, 'm> {
    /// Where and what to send.
    pub target: &'a HttpTarget<'m>,
    /// Text the first answer must contain.
    pub check: &'a str,
    /// The server's process, for its CPU time.
    pub pid: Option<u32>,
}

/// The keep-alive connections one side is driven over, kept for the whole run.
struct HttpDriver<'a, 'm> {
    side: &'a HttpSide<'a, 'm>,
    one: Conn,
    many: Vec<Conn>,
    id: u64,
    errors: u64,
}

impl HttpDriver<'_, '_> {
    fn call(&mut self, timed: Option<&mut Samples>) -> Result<(), String> {
        self.id += 1;
        let start = Instant::now();
        let (err, _) = self.side.target.call(&mut self.one, self.id)?;
        if let Some(t) = timed {
            t.push(start.elapsed());
        }
        self.errors += u64::from(err);
        Ok(())
    }

    /// Every connection busy for `phase`, one request in flight on each: requests answered,
    /// time taken, their latencies.
    fn many(&mut self, phase: Duration, round: u64) -> Result<(u64, Duration, Samples), String> {
        let target = self.side.target;
        let start = Instant::now();
        let results: Vec<Result<(u64, u64, Samples), String>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .many
                .iter_mut()
                .enumerate()
                .map(|(w, c)| {
                    s.spawn(move || {
                        let mut lat = Samples::with_capacity(4096);
                        let (mut done, mut errs) = (0u64, 0u64);
                        let mut id = 1_000_000_000 * (w as u64 + 1) + 10_000_000 * round;
                        while start.elapsed() < phase {
                            id += 1;
                            let t = Instant::now();
                            let (err, _) = target.call(c, id)?;
                            lat.push(t.elapsed());
                            done += 1;
                            errs += u64::from(err);
                        }
                        Ok((done, errs, lat))
                    })
                })
                .collect();
            join_all(handles, "load")
        });
        let elapsed = start.elapsed();
        let (mut done, mut lat) = (0, Samples::default());
        for r in results {
            let (d, e, l) = r?;
            done += d;
            self.errors += e;
            lat.append(l);
        }
        Ok((done, elapsed, lat))
    }
}

/// User plus system CPU time of every thread of `pid` so far.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after it are fixed.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name and state.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let hz = rustix::param::clock_ticks_per_second();
    Some(Duration::from_nanos(ticks * 1_000_000_000 / hz.max(1)))
}

/// Drive HTTP servers in alternating rounds so all see the same machine (as
/// [`stdio_interleaved`] does for pipes, in the order of [`turns`]): in each round every side first answers its share of
/// `plan.iters` requests one at a time on one connection, then keeps `conns` connections
/// busy for its share of `plan.throughput_phase`. Every side keeps its connections (opened
/// and warmed up before the first round) for the whole run.
pub fn http_interleaved(
    sides: &[HttpSide],
    plan: Plan,
    rounds: usize,
    conns: usize,
) -> Result<Vec<HttpOutcome>, String> {
    let mut drivers = Vec::with_capacity(sides.len());
    for side in sides {
        let mut one = Conn::connect(&side.target.addr)?;
        let (_, first) = side.target.call(&mut one, 1)?;
        verify(&first, side.check)?;
        let many = (0..conns)
            .map(|_| Conn::connect(&side.target.addr))
            .collect::<Result<Vec<_>, _>>()?;
        let mut d = HttpDriver {
            side,
            one,
            many,
            id: 1,
            errors: 0,
        };
        for _ in 0..plan.warmup {
            d.call(None)?;
        }
        for c in &mut d.many {
            d.id += 1;
            side.target.call(c, d.id)?;
        }
        drivers.push(d);
    }
    let rounds = rounds.max(1);
    let per = plan.iters.div_ceil(rounds);
    let end = Instant::now() + plan.max_latency_phase;
    let n = drivers.len();
    let mut one: Vec<(Samples, Duration)> = (0..n)
        .map(|_| (Samples::with_capacity(plan.iters), Duration::ZERO))
        .collect();
    let mut many: Vec<(Samples, u64, Duration, Duration)> = (0..n)
        .map(|_| (Samples::default(), 0, Duration::ZERO, Duration::ZERO))
        .collect();
    // Each side's req/s in each round, on one connection and on `conns`.
    let mut each_round: Vec<(Vec<f64>, Vec<f64>)> = (0..n)
        .map(|_| (Vec::with_capacity(rounds), Vec::with_capacity(rounds)))
        .collect();
    let phase = plan.throughput_phase / rounds as u32;
    for round in 0..rounds {
        for i in turns(n, round) {
            let (d, (lat, took), (each, _)) = (&mut drivers[i], &mut one[i], &mut each_round[i]);
            let (start, before) = (Instant::now(), lat.len());
            for _ in 0..per {
                d.call(Some(lat))?;
                if Instant::now() > end {
                    break;
                }
            }
            let t = start.elapsed();
            *took += t;
            each.push((lat.len() - before) as f64 / t.as_secs_f64());
        }
        for i in turns(n, round) {
            let (d, (lat, done, took, cpu), (_, each)) =
                (&mut drivers[i], &mut many[i], &mut each_round[i]);
            let before = d.side.pid.and_then(cpu_time);
            let (dn, dt, l) = d.many(phase, round as u64)?;
            if let (Some(b), Some(a)) = (before, d.side.pid.and_then(cpu_time)) {
                *cpu += a.saturating_sub(b);
            }
            each.push(dn as f64 / dt.as_secs_f64());
            lat.append(l);
            *done += dn;
            *took += dt;
        }
    }
    Ok(drivers
        .into_iter()
        .zip(one)
        .zip(many)
        .zip(each_round)
        .map(
            |(((d, (one, one_took)), (many, done, took, cpu)), (one_round_rps, many_round_rps))| {
                HttpOutcome {
                    one_rps: one.len() as f64 / one_took.as_secs_f64(),
                    one_round_rps,
                    one,
                    many,
                    many_rps: done as f64 / took.as_secs_f64(),
                    many_round_rps,
                    cpu_us_per_req: d
                        .side
                        .pid
                        .filter(|_| done > 0 && !cpu.is_zero())
                        .map(|_| cpu.as_secs_f64() * 1e6 / done as f64),
                    errors: d.errors,
                }
            },
        )
        .collect())
}

/// The load of the published cross-language MCP benchmarks (TM Dev Lab v1 and v2, k6): a
/// fixed number of clients for a fixed time, each repeating one iteration: for every tool
/// call a whole legacy session (`initialize`, `notifications/initialized`, the `tools/call`,
/// `DELETE`), then one more session for `tools/list`, then a pause.
pub struct SessionShape<'a> {
    /// `127.0.0.1:PORT`.
    pub addr: &'a str,
    /// The MCP endpoint.
    pub path: &'a str,
    /// Concurrent clients (k6 virtual users), one keep-alive connection each.
    pub clients: usize,
    /// Run first without counting (k6 ramp-up and the script's excluded warm-up).
    pub warmup: Duration,
    /// The counted window.
    pub duration: Duration,
    /// The pause at the end of every iteration.
    pub think: Duration,
    /// The `params` of each `tools/call` of an iteration, as JSON.
    pub calls: &'a [String],
    /// Text every tool result must hold.
    pub check: &'a str,
}

/// What a [`SessionShape`] run measured in its counted window.
pub struct SessionOutcome {
    /// Latencies of the `tools/call` requests (the published latency figures are these).
    pub calls: Samples,
    /// `initialize`, `tools/call` and `tools/list` requests answered (what the published
    /// RPS counts: not `notifications/initialized` nor `DELETE`).
    pub mcp_requests: u64,
    /// Every HTTP request answered.
    pub http_requests: u64,
    /// The counted window.
    pub window: Duration,
    /// HTTP requests that failed (a status ≥ 400, or no answer).
    pub http_failed: u64,
    /// Tool calls without a successful result (a JSON-RPC error, `isError`, or not the text).
    pub call_errors: u64,
}

/// Per client: what it counted.
#[derive(Default)]
struct SessionTally {
    calls: Samples,
    mcp: u64,
    http: u64,
    http_failed: u64,
    call_errors: u64,
}

/// Run `shape`: `clients` threads, each on its own connection.
pub fn sessions(shape: &SessionShape) -> Result<SessionOutcome, String> {
    let start = Instant::now();
    let (from, to) = (shape.warmup, shape.warmup + shape.duration);
    let results: Vec<Result<SessionTally, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..shape.clients)
            .map(|_| s.spawn(move || session_client(shape, start, from, to)))
            .collect();
        join_all(handles, "client")
    });
    let mut out = SessionOutcome {
        calls: Samples::default(),
        mcp_requests: 0,
        http_requests: 0,
        window: shape.duration,
        http_failed: 0,
        call_errors: 0,
    };
    for r in results {
        let t = r?;
        out.calls.append(t.calls);
        out.mcp_requests += t.mcp;
        out.http_requests += t.http;
        out.http_failed += t.http_failed;
        out.call_errors += t.call_errors;
    }
    Ok(out)
}

const K6_INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"k6-bench","version":"1.0"}}}"#;

/// One client of [`sessions`]: iterations until `to` (since `start`); what finished inside
/// `from..to` is counted.
fn session_client(
    shape: &SessionShape,
    start: Instant,
    from: Duration,
    to: Duration,
) -> Result<SessionTally, String> {
    let mut c = Conn::connect(shape.addr)?;
    let mut t = SessionTally {
        calls: Samples::with_capacity(1 << 16),
        ..SessionTally::default()
    };
    let lists = "{}".to_owned();
    while start.elapsed() < to {
        for params in shape.calls.iter().map(Some).chain([None]) {
            let (method, params) = match params {
                Some(p) => ("tools/call", p),
                None => ("tools/list", &lists),
            };
            if session(shape, &mut c, &mut t, start, from..to, method, params).is_err() {
                // k6 counts a request that got no answer as failed and goes on, on a new
                // connection; so does this client.
                t.http_failed += 1;
                if method == "tools/call" && (from..to).contains(&start.elapsed()) {
                    t.call_errors += 1;
                }
                c = Conn::connect(shape.addr)?;
            }
        }
        std::thread::sleep(shape.think);
    }
    Ok(t)
}

/// One session: `initialize`, `notifications/initialized`, the call, `DELETE`.
fn session(
    shape: &SessionShape,
    c: &mut Conn,
    t: &mut SessionTally,
    start: Instant,
    window: std::ops::Range<Duration>,
    method: &str,
    params: &str,
) -> Result<(), String> {
    let counted = |t: &mut SessionTally, ok: bool, mcp: bool| {
        if window.contains(&start.elapsed()) {
            t.http += 1;
            t.mcp += u64::from(mcp);
            t.http_failed += u64::from(!ok);
        }
    };
    let r = c.post(shape.path, &[], K6_INITIALIZE.as_bytes())?;
    counted(t, r.status < 400, true);
    let sid = r.header("mcp-session-id").map(str::to_owned);
    let mut headers = Vec::new();
    if let Some(sid) = &sid {
        headers.push(("mcp-session-id", sid.as_str()));
    }
    let r = c.post(shape.path, &headers, crate::proc::INITIALIZED.as_bytes())?;
    counted(t, r.status < 400, false);
    let body = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"{method}","params":{params}}}"#);
    let sent = Instant::now();
    let r = c.post(shape.path, &headers, body.as_bytes())?;
    let took = sent.elapsed();
    counted(t, r.status < 400, true);
    if method == "tools/call" && window.contains(&start.elapsed()) {
        t.calls.push(took);
        let msg = r.message().unwrap_or_default();
        let ok = r.status == 200
            && !is_error(msg)
            && crate::http::find(msg, b"\"result\"").is_some()
            && crate::http::find(msg, b"\"isError\":true").is_none()
            && crate::http::find(msg, shape.check.as_bytes()).is_some();
        t.call_errors += u64::from(!ok);
    }
    if sid.is_some() {
        let r = c.delete(shape.path, &headers)?;
        counted(t, r.status < 400, false);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::turns;

    #[test]
    fn every_other_round_takes_the_turns_in_reverse() {
        let order = |round| turns(3, round).collect::<Vec<_>>();
        assert_eq!(order(0), [0, 1, 2]);
        assert_eq!(order(1), [2, 1, 0]);
        assert_eq!(order(2), [0, 1, 2]);
        assert_eq!(turns(0, 1).count(), 0);
    }
}
