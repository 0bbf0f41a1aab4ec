//! Load loops: one request in flight for latency, a window of requests in flight for
//! throughput, over a pipe or over HTTP connections.

use std::time::{Duration, Instant};

use crate::http::Conn;
use crate::proc::{StdioServer, preview};
use crate::stats::Samples;

/// Requests kept in flight for throughput figures.
pub const WINDOW: usize = 32;

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
    let mut latency = Samples::with_capacity(plan.iters);
    d.latency(
        plan.iters,
        &mut latency,
        Instant::now() + plan.max_latency_phase,
    )?;
    let (done, elapsed) = d.throughput(plan.throughput_phase)?;
    Ok(Outcome {
        latency,
        rps: done as f64 / elapsed.as_secs_f64(),
        errors: d.errors,
    })
}

/// One side of [`stdio_interleaved`]: the server, its requests, the answer check, and
/// whether answers are read raw.
pub type Side<'a, 'm> = (&'a mut StdioServer, MakeRequest<'m>, &'a str, bool);

/// Drive stdio servers in alternating rounds, so all see the same machine: on a shared VM
/// the round-trip time of even the echo floor drifts by tens of microseconds over seconds,
/// and measuring one server after the other would compare different moments. The outcomes
/// are in the order of `sides`.
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
    let mut totals = vec![(0u64, Duration::ZERO); drivers.len()];
    for _ in 0..rounds {
        for (d, (n, t)) in drivers.iter_mut().zip(&mut totals) {
            let (dn, dt) = d.throughput(phase)?;
            (*n, *t) = (*n + dn, *t + dt);
        }
    }
    Ok(drivers
        .into_iter()
        .zip(latency)
        .zip(totals)
        .map(|((d, latency), (n, t))| Outcome {
            latency,
            rps: n as f64 / t.as_secs_f64(),
            errors: d.errors,
        })
        .collect())
}

/// `plan.iters` one-in-flight round trips for each driver, taken in `rounds` alternating
/// rounds; the samples in the order of `drivers`.
fn latency_rounds(
    drivers: &mut [StdioDriver],
    plan: Plan,
    rounds: usize,
) -> Result<Vec<Samples>, String> {
    let mut latency: Vec<Samples> = drivers
        .iter()
        .map(|_| Samples::with_capacity(plan.iters))
        .collect();
    let per = plan.iters.div_ceil(rounds);
    let end = Instant::now() + plan.max_latency_phase;
    for _ in 0..rounds {
        for (d, l) in drivers.iter_mut().zip(&mut latency) {
            d.latency(per, l, end)?;
        }
    }
    Ok(latency)
}

/// The latency half of [`stdio_interleaved`] alone (`plan.throughput_phase` is not used): for
/// answers too large to keep a window of them in flight, such as blob reads. The samples and
/// the count of error answers, in the order of `sides`.
pub fn stdio_interleaved_latency(
    sides: Vec<Side>,
    plan: Plan,
    rounds: usize,
) -> Result<Vec<(Samples, u64)>, String> {
    let mut drivers = sides
        .into_iter()
        .map(|(s, make, check, raw)| StdioDriver::start(s, make, check, raw, plan.warmup))
        .collect::<Result<Vec<_>, _>>()?;
    let latency = latency_rounds(&mut drivers, plan, rounds.max(1))?;
    Ok(latency
        .into_iter()
        .zip(drivers)
        .map(|(l, d)| (l, d.errors))
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
    fn call(&self, c: &mut Conn, id: u64) -> Result<(bool, Vec<u8>), String> {
        let h: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let r = c.post(&self.path, &h, (self.make)(id).as_bytes())?;
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
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("load thread panicked".into()))
            })
            .collect()
    });
    let elapsed = start.elapsed();
    let mut done = 0;
    for r in results {
        let (d, e) = r?;
        done += d;
        errors += e;
    }
    Ok(Outcome {
        latency,
        rps: done as f64 / elapsed.as_secs_f64(),
        errors,
    })
}
