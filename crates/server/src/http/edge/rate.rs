//! The per-client rate limit: a token bucket per client address, refilled at
//! `rate_limit_per_second` up to `rate_limit_burst`; a client with an empty bucket gets 429
//! with `Retry-After`.

use mcpr_core::sync::lock;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::response::Response;
use http::{HeaderValue, StatusCode};

use super::gate::Gate;
use super::step::{Inner, Step};
use super::{no_peer, peer, refuse};
use crate::wire::codes;

/// Past this many clients, those idle long enough to have refilled are forgotten: bounds the
/// memory a flood of distinct addresses can take.
const MAX_CLIENTS: usize = 100_000;

struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The buckets of every client, and their rate.
pub(crate) struct RateLimiter {
    /// Sustained requests per second per client; 0 (or less) turns the limit off.
    rate: f64,
    burst: u32,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

impl RateLimiter {
    pub(super) fn new(rate: f64, burst: u32) -> Self {
        Self {
            rate,
            burst,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn enabled(&self) -> bool {
        self.rate > 0.0
    }

    /// A token of `ip`'s bucket, or how long until it has one.
    fn take_token(&self, ip: IpAddr) -> Result<(), Duration> {
        let rate = self.rate;
        let burst = f64::from(self.burst.max(1));
        let now = Instant::now();
        let mut buckets = lock(&self.buckets);
        if buckets.len() > MAX_CLIENTS {
            buckets.retain(|_, b| now.duration_since(b.last).as_secs_f64() * rate < burst);
        }
        let b = buckets.entry(ip).or_insert(Bucket {
            tokens: burst,
            last: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() * rate).min(burst);
        b.last = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / rate))
        }
    }

    /// The 429 for a client that must wait `wait`.
    fn refusal(&self, wait: Duration) -> Response {
        let mut r = refuse(
            StatusCode::TOO_MANY_REQUESTS,
            codes::INTERNAL_ERROR,
            format!(
                "rate limit exceeded: at most {} requests per second per client (burst {}); retry in {} ms",
                self.rate,
                self.burst,
                wait.as_millis()
            ),
        );
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            r.headers_mut().insert(http::header::RETRY_AFTER, v);
        }
        r
    }
}

/// Takes a token of the client's bucket for every request.
#[derive(Clone)]
pub(crate) struct RateLimit(pub(super) Arc<RateLimiter>);

impl<S: Inner> Step<S> for RateLimit {
    type Future = Gate<S, S::Future>;

    fn call(&self, inner: &mut S, req: Request) -> Self::Future {
        if !self.0.enabled() {
            return Gate::pass(inner, req);
        }
        let Some(peer) = peer(&req) else {
            return Gate::refuse(no_peer());
        };
        match self.0.take_token(peer.ip()) {
            Ok(()) => Gate::pass(inner, req),
            Err(wait) => Gate::refuse(self.0.refusal(wait)),
        }
    }
}
