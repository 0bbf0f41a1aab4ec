//! Request metrics in the Prometheus text format, kept with atomics so recording costs a few
//! nanoseconds on the request path. Shared by every transport; the HTTP edge adds its own
//! HTTP-level counters and gauges when it renders `/metrics`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The MCP methods counted separately; anything else is `other`.
pub const METHODS: &[&str] = &[
    "initialize",
    "server/discover",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "completion/complete",
    // The tool bridge's search walks the listings, but is not one: its own series.
    "search_resources",
    "resources/directory/read",
    "skills/list",
    "skills/get",
    "other",
];

/// Outcomes: success, or the error class the client saw (by its JSON-RPC code, see
/// [`outcome_of`]). `other_error` stays last: an unknown label is counted there.
pub const OUTCOMES: &[&str] = &[
    "ok",
    "not_found",
    "invalid_params",
    "internal",
    "timeout",
    "other_error",
];

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

struct Histogram {
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Histogram {
    fn new() -> Self {
        Self {
            buckets: BUCKETS.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }

    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        // Buckets are cumulative in the exposition format; storing per-bucket counts and
        // summing at render time keeps recording to one increment.
        if let Some(i) = BUCKETS.iter().position(|&b| secs <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            d.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }
}

/// Counters and latency histograms of MCP requests.
pub struct Metrics {
    requests: Vec<AtomicU64>,
    latency: Vec<Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            requests: (0..METHODS.len() * OUTCOMES.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            latency: METHODS.iter().map(|_| Histogram::new()).collect(),
        }
    }
}

impl Metrics {
    /// Record one request of `method` that ended with `outcome` after `elapsed`.
    pub fn record(&self, method: &str, outcome: &str, elapsed: Duration) {
        let m = METHODS
            .iter()
            .position(|&x| x == method)
            .unwrap_or(METHODS.len() - 1);
        let o = OUTCOMES
            .iter()
            .position(|&x| x == outcome)
            .unwrap_or(OUTCOMES.len() - 1);
        self.requests[m * OUTCOMES.len() + o].fetch_add(1, Ordering::Relaxed);
        self.latency[m].observe(elapsed);
    }

    /// How many requests of `method` ended with `outcome` (for tests and health checks).
    pub fn count(&self, method: &str, outcome: &str) -> u64 {
        let (Some(m), Some(o)) = (
            METHODS.iter().position(|&x| x == method),
            OUTCOMES.iter().position(|&x| x == outcome),
        ) else {
            return 0;
        };
        self.requests[m * OUTCOMES.len() + o].load(Ordering::Relaxed)
    }

    /// Append the request counters and histograms in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        out.push_str("# HELP mcp_requests_total MCP requests by method and outcome.\n# TYPE mcp_requests_total counter\n");
        for (m, method) in METHODS.iter().enumerate() {
            for (o, outcome) in OUTCOMES.iter().enumerate() {
                let n = self.requests[m * OUTCOMES.len() + o].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "mcp_requests_total{{method=\"{method}\",outcome=\"{outcome}\"}} {n}"
                );
            }
        }
        out.push_str(
            "# HELP mcp_request_duration_seconds Time to answer an MCP request.\n# TYPE mcp_request_duration_seconds histogram\n",
        );
        for (m, method) in METHODS.iter().enumerate() {
            let h = &self.latency[m];
            let mut cumulative = 0;
            for (i, b) in BUCKETS.iter().enumerate() {
                cumulative += h.buckets[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "mcp_request_duration_seconds_bucket{{method=\"{method}\",le=\"{b}\"}} {cumulative}"
                );
            }
            let count = h.count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "mcp_request_duration_seconds_bucket{{method=\"{method}\",le=\"+Inf\"}} {count}"
            );
            let sum = h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(
                out,
                "mcp_request_duration_seconds_sum{{method=\"{method}\"}} {sum}"
            );
            let _ = writeln!(
                out,
                "mcp_request_duration_seconds_count{{method=\"{method}\"}} {count}"
            );
        }
    }
}

/// Per mount: how many listings left it out because its source failed
/// (`mcp_list_skipped_total{mount}`), and whether it is in such an outage now, so that the
/// listing's warning is logged once per outage rather than once per request.
pub struct ListSkips {
    mounts: Vec<MountSkips>,
}

struct MountSkips {
    name: std::sync::Arc<str>,
    skipped: AtomicU64,
    out: std::sync::atomic::AtomicBool,
}

impl ListSkips {
    /// Counters for the mounts named `names`, in mount order.
    pub(crate) fn new(names: impl IntoIterator<Item = std::sync::Arc<str>>) -> Self {
        Self {
            mounts: names
                .into_iter()
                .map(|name| MountSkips {
                    name,
                    skipped: AtomicU64::new(0),
                    out: Default::default(),
                })
                .collect(),
        }
    }

    /// Count a listing that left mount `index` out; `true` when this begins an outage (the
    /// one caller, however many listings fail at once, that should say so).
    pub(crate) fn skipped(&self, index: usize) -> bool {
        let Some(m) = self.mounts.get(index) else {
            return false;
        };
        m.skipped.fetch_add(1, Ordering::Relaxed);
        !m.out.swap(true, Ordering::AcqRel)
    }

    /// Whether mount `index` is in an outage: left out of a listing and not listed since.
    pub(crate) fn is_out(&self, index: usize) -> bool {
        self.mounts
            .get(index)
            .is_some_and(|m| m.out.load(Ordering::Acquire))
    }

    /// Mount `index` answered a listing; `true` when this ends an outage. A plain load
    /// first, so a healthy listing writes nothing shared.
    pub(crate) fn listed(&self, index: usize) -> bool {
        self.mounts
            .get(index)
            .is_some_and(|m| m.out.load(Ordering::Acquire) && m.out.swap(false, Ordering::AcqRel))
    }

    /// How many listings left the mount named `mount` out.
    pub fn count(&self, mount: &str) -> u64 {
        self.mounts
            .iter()
            .find(|m| &*m.name == mount)
            .map_or(0, |m| m.skipped.load(Ordering::Relaxed))
    }

    /// Append `mcp_list_skipped_total`, one series per mount, in Prometheus text format.
    /// Only the mounts `shown` (by index) get a series: a scoped token sees only its own.
    pub fn render(&self, out: &mut String, shown: impl Fn(usize) -> bool) {
        out.push_str("# HELP mcp_list_skipped_total Listings (resources/list pages, tool scans) that left a mount out because its source failed.\n# TYPE mcp_list_skipped_total counter\n");
        for (_, m) in self.mounts.iter().enumerate().filter(|(i, _)| shown(*i)) {
            let _ = writeln!(
                out,
                "mcp_list_skipped_total{{mount=\"{}\"}} {}",
                escape_label(&m.name),
                m.skipped.load(Ordering::Relaxed)
            );
        }
    }
}

/// The provider operations [`crate::layers::Layered`] counts, in label order.
pub const PROVIDER_OPS: &[&str] = &[
    "list",
    "read",
    "complete",
    "watch",
    "watch_list",
    "change_token",
    "readiness",
    "read_directory",
];

/// How a provider call ended: answered, failed, refused by the layer because the mount does
/// not declare it, or cut off at the request timeout.
pub const PROVIDER_OUTCOMES: &[&str] = &["ok", "error", "unsupported", "timeout"];

/// One mount's provider calls by operation and outcome
/// (`mcp_provider_calls_total{mount,op,outcome}`), counted by the layer every call goes
/// through, so a source that times out or fails shows on its own mount rather than only in
/// the request totals of whatever method reached it.
pub struct ProviderCalls {
    counts: Vec<AtomicU64>,
}

impl Default for ProviderCalls {
    fn default() -> Self {
        Self {
            counts: (0..PROVIDER_OPS.len() * PROVIDER_OUTCOMES.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
}

impl ProviderCalls {
    /// Count one call of operation number `op` ([`PROVIDER_OPS`]) that ended with outcome
    /// number `outcome` ([`PROVIDER_OUTCOMES`]).
    pub(crate) fn record(&self, op: usize, outcome: usize) {
        if let Some(c) = self.counts.get(op * PROVIDER_OUTCOMES.len() + outcome) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many calls of `op` ended with `outcome` (for tests and health checks).
    pub fn count(&self, op: &str, outcome: &str) -> u64 {
        let (Some(o), Some(r)) = (
            PROVIDER_OPS.iter().position(|&x| x == op),
            PROVIDER_OUTCOMES.iter().position(|&x| x == outcome),
        ) else {
            return 0;
        };
        self.counts[o * PROVIDER_OUTCOMES.len() + r].load(Ordering::Relaxed)
    }
}

/// Append `mcp_provider_calls_total`, one series per mount, operation and outcome, in
/// Prometheus text format.
pub fn render_provider_calls<'a>(
    mounts: impl IntoIterator<Item = (&'a str, &'a ProviderCalls)>,
    out: &mut String,
) {
    out.push_str("# HELP mcp_provider_calls_total Calls the server made to a mount's provider, by operation and outcome (unsupported: refused before the provider was asked; timeout: cut off at request_timeout_ms).
# TYPE mcp_provider_calls_total counter
");
    for (mount, calls) in mounts {
        let mount = escape_label(mount);
        for (o, op) in PROVIDER_OPS.iter().enumerate() {
            for (r, outcome) in PROVIDER_OUTCOMES.iter().enumerate() {
                let n = calls.counts[o * PROVIDER_OUTCOMES.len() + r].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "mcp_provider_calls_total{{mount=\"{mount}\",op=\"{op}\",outcome=\"{outcome}\"}} {n}"
                );
            }
        }
    }
}

/// The outcome label of a JSON-RPC error code. -32001 is a request that ran out of time:
/// the edge's other -32001 (unauthorized, beside HTTP 401/403) never reaches a handler,
/// where requests are counted.
pub fn outcome_of(code: i32) -> &'static str {
    match code {
        -32002 => "not_found",
        -32602 => "invalid_params",
        -32603 => "internal",
        crate::wire::codes::REQUEST_TIMEOUT => "timeout",
        _ => "other_error",
    }
}

/// The counters providers export ([`mcpr_core::Provider::counters`]), one family per name,
/// each mount a series labelled with its kind and label.
pub fn render_provider_counters(
    mounts: &[(&str, &str, Vec<mcpr_core::Counter>)],
    out: &mut String,
) {
    /// (kind, mount label, value) of one mount's series.
    type Series<'a> = Vec<(&'a str, &'a str, u64)>;
    let mut families: std::collections::BTreeMap<&str, (&str, Series)> = Default::default();
    for (kind, label, counters) in mounts {
        for c in counters {
            families
                .entry(c.name)
                .or_insert((c.help, Vec::new()))
                .1
                .push((kind, label, c.value));
        }
    }
    for (name, (help, series)) in families {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} counter\n");
        for (kind, label, v) in series {
            let _ = writeln!(
                out,
                "{name}{{kind=\"{}\",mount=\"{}\"}} {v}",
                escape_label(kind),
                escape_label(label)
            );
        }
    }
}

/// A Prometheus label value: `\`, `"` and newlines escaped.
pub(crate) fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_provider_counters_per_mount() {
        let c = |value| mcpr_core::Counter {
            name: "mcpr_http_cache_hits_total",
            help: "Reads served from the cache.",
            value,
        };
        let mut s = String::new();
        render_provider_counters(
            &[
                ("api", "api weather", vec![c(3)]),
                ("files", "/srv", vec![]),
                ("web", "web \"q\"", vec![c(4)]),
            ],
            &mut s,
        );
        assert_eq!(
            s,
            "# HELP mcpr_http_cache_hits_total Reads served from the cache.\n# TYPE mcpr_http_cache_hits_total counter\nmcpr_http_cache_hits_total{kind=\"api\",mount=\"api weather\"} 3\nmcpr_http_cache_hits_total{kind=\"web\",mount=\"web \\\"q\\\"\"} 4\n"
        );
    }

    #[test]
    fn renders_counts_and_cumulative_buckets() {
        let m = Metrics::default();
        m.record("resources/read", "ok", Duration::from_micros(30));
        m.record("resources/read", "ok", Duration::from_millis(3));
        m.record("resources/read", "not_found", Duration::from_micros(30));
        m.record("bogus", "weird", Duration::from_secs(60));
        let mut s = String::new();
        m.render(&mut s);
        assert!(s.contains("mcp_requests_total{method=\"resources/read\",outcome=\"ok\"} 2\n"));
        assert!(
            s.contains("mcp_requests_total{method=\"resources/read\",outcome=\"not_found\"} 1\n")
        );
        assert!(s.contains("mcp_requests_total{method=\"other\",outcome=\"other_error\"} 1\n"));
        assert_eq!(outcome_of(-32001), "timeout");
        assert_eq!(outcome_of(-32603), "internal");
        assert!(
            s.contains(
                "mcp_request_duration_seconds_bucket{method=\"resources/read\",le=\"0.00005\"} 2\n"
            ),
            "{s}"
        );
        assert!(s.contains(
            "mcp_request_duration_seconds_bucket{method=\"resources/read\",le=\"0.005\"} 3\n"
        ));
        assert!(
            s.contains("mcp_request_duration_seconds_bucket{method=\"other\",le=\"+Inf\"} 1\n")
        );
        assert_eq!(m.count("resources/read", "ok"), 2);
    }
}
