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

/// Drive a stdio server. `raw` reads every line as the answer (the echo floor, whose
/// answers look like requests).
pub fn stdio(
    s: &mut StdioServer,
    make: MakeRequest,
    check: &str,
    raw: bool,
    plan: Plan,
) -> Result<Outcome, String> {
    let mut id = 1u64;
    let mut next = || {
        id += 1;
        make(id)
    };
    let recv = |s: &mut StdioServer| -> Result<bool, String> {
        let line = if raw {
            s.recv_line()?
        } else {
            s.recv_response()?
        };
        Ok(!raw && is_error(line))
    };
    s.send_now(next().as_bytes())?;
    let first = if raw {
        s.recv_line()?
    } else {
        s.recv_response()?
    };
    verify(first, check)?;
    for _ in 0..plan.warmup {
        s.send_now(next().as_bytes())?;
        recv(s)?;
    }
    let mut errors = 0;
    let mut latency = Samples::with_capacity(plan.iters);
    let phase = Instant::now();
    for _ in 0..plan.iters {
        let msg = next();
        let t = Instant::now();
        s.send_now(msg.as_bytes())?;
        errors += u64::from(recv(s)?);
        latency.push(t.elapsed());
        if phase.elapsed() > plan.max_latency_phase {
            break;
        }
    }
    // Throughput: keep WINDOW requests outstanding; send one for every answer.
    for _ in 0..WINDOW {
        s.send(next().as_bytes())?;
    }
    s.flush()?;
    let start = Instant::now();
    let mut done = 0u64;
    let elapsed = loop {
        errors += u64::from(recv(s)?);
        done += 1;
        let el = start.elapsed();
        if el >= plan.throughput_phase {
            break el;
        }
        s.send_now(next().as_bytes())?;
    };
    for _ in 1..WINDOW {
        recv(s)?;
    }
    Ok(Outcome {
        latency,
        rps: done as f64 / elapsed.as_secs_f64(),
        errors,
    })
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
    let mut c = Conn::connect(&t.addr)?;
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
                    let mut c = Conn::connect(&t.addr)?;
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
