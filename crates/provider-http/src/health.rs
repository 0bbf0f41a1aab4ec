//! Which upstream hosts of an api mount are out, for its listing and `/readyz`: learnt from
//! the mount's own requests, and asked again with a GET the mount is configured for.
//!
//! Tracked per host (scheme, host and port), and only for the hosts written out in the
//! endpoints' URL templates: an endpoint whose host comes from a value is not tracked (a
//! client's value must not put the mount out), and a templated endpoint on a written-out
//! host counts for that host. A request to a tracked host that times out, cannot connect or
//! breaks off before its answer is whole is evidence against the host; any answer, an error
//! status included, is evidence for it. The host is out when its **probe resource** fails:
//! the first of its fixed endpoints (by URI), or, for a host with only templated endpoints,
//! the last URI that was answered there (before any, the one that failed). A failing read of
//! another URI (a slow query on a templated endpoint, say) only has the probe resource read
//! again, and so does a read the server gave up on before the mount's own timeout.
//!
//! While a host is out, reads still go to it (the first answer ends the outage); the mount's
//! listing fails with the reason, so the server leaves it out of listings, names it
//! unavailable and probes it until it lists again (which is when clients hear
//! `list_changed`); its readiness fails with the same reason. Both read the probe resource
//! again first (at most one request per host at a time and one a second, each within the
//! mount's `timeout_ms`) and wait for it at most [`ASK_WAIT`]. Readiness also asks a host
//! that nothing has asked for [`STALE_AFTER`], so an idle mount's `/readyz` is not older
//! news than that. A probe is an ordinary read of a resource the mount serves (a change
//! check, as a subscription's poll makes): the same GET with the endpoint's headers, under
//! the same address policy and redirect checks, so it asks nothing a client could not.

use std::collections::BTreeMap;
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

use mcpr_core::sync::lock;
use mcpr_core::{Error, ErrorKind, Result, UriTemplate};

use crate::provider::Inner;
use crate::read::{Mode, serve};
use crate::target::Compiled;

/// How long a listing or a readiness check waits for the probes it started (or found
/// running): a host that is back usually answers well within it, and one that is not must
/// not hold a listing (the server asks a mount in an outage for at least 1 s).
pub(crate) const ASK_WAIT: Duration = Duration::from_millis(750);
/// The least time between two probes of one host: a caller of `/readyz` in a loop must not
/// become a request loop against the upstream.
pub(crate) const PROBE_GAP: Duration = Duration::from_secs(1);
/// Readiness asks a host that no request has reached for this long.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(60);

/// Whether a request's first host was heard from, as the fetch saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reached {
    /// It answered: any status, a redirect, a whole body, a body over the limit.
    Answered,
    /// It timed out, could not be connected to, or broke off before the answer was whole.
    Unreachable,
    /// Nothing was sent (the address policy or the allow list refused the request).
    NotAsked,
}

/// One tracked host.
#[derive(Debug)]
struct Host {
    /// `scheme://host:port`, as [`crate::error::origin`] writes it.
    origin: String,
    /// The resource URI whose read decides whether the host is out (see the module's
    /// documentation); `None` until a templated-only host is first read.
    probe: Option<String>,
    /// Whether `probe` is a fixed endpoint's (then it never changes).
    fixed: bool,
    /// Why the host is out, and since when; `None` while it is not.
    out: Option<(Error, Instant)>,
    /// Whether a probe is running.
    probing: bool,
    /// When the last probe started.
    probed: Option<Instant>,
    /// When a request to it last started or was answered.
    heard: Option<Instant>,
    /// When it last answered.
    answered: Option<Instant>,
}

/// What to do after an outcome was recorded.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Nothing,
    /// Read the host's probe resource (host index).
    Probe(usize),
}

/// The tracked hosts of one api mount.
pub(crate) struct Hosts {
    /// The mount's name, for logs.
    mount: String,
    table: Mutex<Vec<Host>>,
    /// Bumped when a probe ends.
    ended: tokio::sync::watch::Sender<u64>,
    /// The mount, to read probe resources with; set once it is built.
    inner: Weak<Inner>,
}

/// The origin of an endpoint's URL template when it is written out, not taken from a value:
/// the literal text before the first expression holds the whole authority (the scheme,
/// `://`, and the host and port up to a `/`, `?` or `#`, or the end of a template with no
/// expression).
pub(crate) fn fixed_origin(url: &UriTemplate) -> Option<String> {
    let literal = url.literal_prefix();
    let whole = url.variables().is_empty();
    let host_at = literal.find("://")? + 3;
    let end = match literal[host_at..].find(['/', '?', '#']) {
        Some(i) => host_at + i,
        None if whole => literal.len(),
        None => return None,
    };
    let parsed = reqwest::Url::parse(&literal[..end]).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return None;
    }
    Some(crate::error::origin(&parsed))
}

impl Hosts {
    /// The hosts of `endpoints` (an api mount's; a web mount passes none), reading probes
    /// through `inner`.
    pub(crate) fn new(mount: &str, endpoints: &[Compiled], inner: Weak<Inner>) -> Self {
        let mut by_origin: BTreeMap<String, Option<String>> = BTreeMap::new();
        for c in endpoints {
            let Some(origin) = fixed_origin(&c.url) else {
                continue;
            };
            let probe = by_origin.entry(origin).or_default();
            if c.uri.is_none() && probe.as_ref().is_none_or(|p| c.endpoint.uri < *p) {
                *probe = Some(c.endpoint.uri.clone());
            }
        }
        let hosts = by_origin
            .into_iter()
            .map(|(origin, probe)| Host {
                origin,
                fixed: probe.is_some(),
                probe,
                out: None,
                probing: false,
                probed: None,
                heard: None,
                answered: None,
            })
            .collect();
        Self {
            mount: mount.to_owned(),
            table: Mutex::new(hosts),
            ended: tokio::sync::watch::Sender::new(0),
            inner,
        }
    }

    /// The tracked host `url` goes to, if any.
    fn index(&self, url: &reqwest::Url) -> Option<usize> {
        let hosts = lock(&self.table);
        if hosts.is_empty() {
            return None;
        }
        let origin = crate::error::origin(url);
        hosts.iter().position(|h| h.origin == origin)
    }

    /// A request for `uri` to `url` starts; the guard records its outcome
    /// ([`Attempt::finish`]), or, dropped unfinished, that it was given up on.
    pub(crate) fn attempt<'a>(&'a self, uri: &'a str, url: &reqwest::Url) -> Attempt<'a> {
        let host = self.index(url);
        let started = Instant::now();
        if let Some(i) = host {
            lock(&self.table)[i].heard = Some(started);
        }
        Attempt {
            hosts: self,
            host,
            uri,
            started,
            done: false,
        }
    }

    /// Host `i` answered a request for `uri`.
    fn answered(&self, i: usize, uri: &str) {
        let back = {
            let mut hosts = lock(&self.table);
            let h = &mut hosts[i];
            let now = Instant::now();
            h.heard = Some(now);
            h.answered = Some(now);
            if !h.fixed && h.probe.as_deref() != Some(uri) {
                h.probe = Some(uri.to_owned());
            }
            h.out.take().map(|(_, since)| (h.origin.clone(), since))
        };
        if let Some((origin, since)) = back {
            tracing::info!(
                mount = %self.mount,
                upstream = %origin,
                "the upstream answers again after {} s; the mount lists and is ready again",
                since.elapsed().as_secs()
            );
        }
    }

    /// A request for `uri` to host `i` failed with `e` before the host answered.
    fn failed(&self, i: usize, uri: &str, e: &Error) -> Next {
        let went_out = {
            let mut hosts = lock(&self.table);
            let h = &mut hosts[i];
            if h.probe.is_none() {
                h.probe = Some(uri.to_owned());
            }
            if h.probe.as_deref() != Some(uri) {
                // Another resource: only its probe resource says whether the host is out.
                return if h.out.is_some() {
                    Next::Nothing
                } else {
                    Next::Probe(i)
                };
            }
            match &mut h.out {
                // Still out: the newest reason, the outage's start kept.
                Some((why, _)) => {
                    *why = e.clone();
                    None
                }
                None => {
                    h.out = Some((e.clone(), Instant::now()));
                    Some(h.origin.clone())
                }
            }
        };
        if let Some(origin) = went_out {
            tracing::warn!(
                mount = %self.mount,
                upstream = %origin,
                "the upstream is unavailable; the mount's listing and readiness say so until it answers again: {}",
                mcpr_core::redact_urls_in(&e.message)
            );
        }
        Next::Nothing
    }

    /// A request to host `i` that started at `started` was given up on by its caller before
    /// the mount's own timeout: unless the host was heard from since, its probe resource is
    /// read (the caller's limit was not the mount's).
    fn abandoned(&self, i: usize, started: Instant) -> Next {
        let hosts = lock(&self.table);
        let h = &hosts[i];
        if h.out.is_some() || h.answered.is_some_and(|t| t > started) {
            Next::Nothing
        } else {
            Next::Probe(i)
        }
    }

    /// Reads host `i`'s probe resource in a task of its own (so its outcome is recorded
    /// whoever waits for it), unless one is running or due: at most one at a time, and the
    /// next no sooner than [`PROBE_GAP`] after the last began (it waits for that, rather
    /// than being dropped: the evidence that asked for it would be lost).
    fn probe(&self, i: usize) {
        let (uri, wait) = {
            let mut hosts = lock(&self.table);
            let h = &mut hosts[i];
            if h.probing {
                return;
            }
            let Some(uri) = h.probe.clone() else {
                return;
            };
            let now = Instant::now();
            let wait = h.probed.map_or(Duration::ZERO, |t| {
                (t + PROBE_GAP).saturating_duration_since(now)
            });
            h.probing = true;
            h.probed = Some(now + wait);
            (uri, wait)
        };
        let (Some(inner), Ok(rt)) = (self.inner.upgrade(), tokio::runtime::Handle::try_current())
        else {
            lock(&self.table)[i].probing = false;
            return;
        };
        tracing::debug!(mount = %self.mount, uri, "probing the upstream");
        rt.spawn(async move {
            tokio::time::sleep(wait).await;
            let limit = inner.poll_limit();
            // The outcome is recorded by the read's own attempt.
            let _ = serve(&inner, &uri, limit, Mode::Check).await;
            lock(&inner.hosts.table)[i].probing = false;
            inner.hosts.ended.send_modify(|n| *n += 1);
        });
    }

    /// Whether the mount can serve: an error naming each host that is out and why, after
    /// reading their probe resources again (and, with `stale`, those of the hosts nothing
    /// asked for [`STALE_AFTER`]) and waiting for those reads at most [`ASK_WAIT`].
    pub(crate) async fn check(&self, stale: bool) -> Result<()> {
        let ask: Vec<usize> = {
            let hosts = lock(&self.table);
            let now = Instant::now();
            hosts
                .iter()
                .enumerate()
                .filter(|(_, h)| {
                    h.out.is_some()
                        || (stale
                            && h.probe.is_some()
                            && h.heard.is_none_or(|t| now.duration_since(t) >= STALE_AFTER))
                })
                .map(|(i, _)| i)
                .collect()
        };
        if ask.is_empty() {
            return Ok(());
        }
        // Before the probes start, so that none ends unseen.
        let mut ended = self.ended.subscribe();
        for &i in &ask {
            self.probe(i);
        }
        let deadline = tokio::time::Instant::now() + ASK_WAIT;
        while ask.iter().any(|&i| lock(&self.table)[i].probing) {
            if tokio::time::timeout_at(deadline, ended.changed())
                .await
                .is_err()
            {
                break;
            }
        }
        self.outage()
    }

    /// The hosts that are out, as one error; `Ok` when none is.
    pub(crate) fn outage(&self) -> Result<()> {
        let hosts = lock(&self.table);
        let each: Vec<String> = hosts
            .iter()
            .filter_map(|h| {
                let (why, since) = h.out.as_ref()?;
                Some(format!(
                    "the upstream {} has been unavailable for {} s: {}",
                    h.origin,
                    since.elapsed().as_secs(),
                    why.message
                ))
            })
            .collect();
        if each.is_empty() {
            Ok(())
        } else {
            Err(Error::new(ErrorKind::Unavailable, each.join("; ")))
        }
    }
}

/// One request to an upstream, for [`Hosts`]: finished with its outcome, or dropped
/// unfinished when its caller gave up on it.
pub(crate) struct Attempt<'a> {
    hosts: &'a Hosts,
    host: Option<usize>,
    uri: &'a str,
    started: Instant,
    done: bool,
}

impl Attempt<'_> {
    /// The request ended: `reached` says whether the host answered, `error` what failed.
    pub(crate) fn finish(mut self, reached: Reached, error: Option<&Error>) {
        self.done = true;
        let Some(i) = self.host else {
            return;
        };
        let next = match (reached, error) {
            (Reached::Answered, _) => {
                self.hosts.answered(i, self.uri);
                Next::Nothing
            }
            (Reached::Unreachable, Some(e)) => self.hosts.failed(i, self.uri, e),
            _ => Next::Nothing,
        };
        if let Next::Probe(i) = next {
            self.hosts.probe(i);
        }
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(i) = self.host
            && let Next::Probe(i) = self.hosts.abandoned(i, self.started)
        {
            self.hosts.probe(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Endpoint;

    fn compiled(pairs: &[(&str, &str)]) -> Vec<Compiled> {
        pairs
            .iter()
            .map(|(uri, url)| Compiled::new(&Endpoint::new(*uri, *url)).unwrap())
            .collect()
    }

    fn hosts(pairs: &[(&str, &str)]) -> Hosts {
        Hosts::new("t", &compiled(pairs), Weak::new())
    }

    fn url(u: &str) -> reqwest::Url {
        reqwest::Url::parse(u).unwrap()
    }

    fn timeout(uri: &str) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!("{uri}: the upstream http://a.test timed out after 1 s (timeout_ms)"),
        )
    }

    #[test]
    fn only_written_out_hosts_are_tracked() {
        let t = |s: &str| fixed_origin(&UriTemplate::parse_for_expansion(s).unwrap());
        assert_eq!(
            t("https://api.test/v1/x").as_deref(),
            Some("https://api.test")
        );
        assert_eq!(
            t("http://API.test:8080/u/{id}").as_deref(),
            Some("http://api.test:8080")
        );
        assert_eq!(
            t("https://api.test:443?q={q}").as_deref(),
            Some("https://api.test")
        );
        assert_eq!(t("https://api.test").as_deref(), Some("https://api.test"));
        // The host, or part of it, from a value: not tracked.
        assert_eq!(t("https://{region}.api.test/x"), None);
        assert_eq!(t("https://api.test{suffix}/x"), None);
        assert_eq!(t("{+base}/x"), None);
        assert_eq!(t("https://api.test:{port}/x"), None);
    }

    #[test]
    fn each_host_probes_its_first_fixed_endpoint() {
        let h = hosts(&[
            ("api://m/z", "http://a.test/z"),
            ("api://m/b", "http://a.test/b"),
            ("api://m/u/{id}", "http://a.test/u/{id}"),
            ("api://m/t/{id}", "http://t.test/t/{id}"),
            ("api://m/r/{r}", "http://{r}.test/r"),
        ]);
        let hosts = lock(&h.table);
        let seen: Vec<(&str, Option<&str>, bool)> = hosts
            .iter()
            .map(|h| (h.origin.as_str(), h.probe.as_deref(), h.fixed))
            .collect();
        assert_eq!(
            seen,
            [
                ("http://a.test", Some("api://m/b"), true),
                ("http://t.test", None, false)
            ]
        );
    }

    #[test]
    fn the_probe_resource_failing_puts_the_host_out_and_an_answer_ends_it() {
        let h = hosts(&[
            ("api://m/s", "http://a.test/s"),
            ("api://m/other", "http://b.test/o"),
        ]);
        assert!(h.outage().is_ok());
        h.attempt("api://m/s", &url("http://a.test/s"))
            .finish(Reached::Unreachable, Some(&timeout("api://m/s")));
        let e = h.outage().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable);
        assert!(
            e.message.starts_with(
                "the upstream http://a.test has been unavailable for 0 s: api://m/s: "
            ) && e.message.contains("timed out after 1 s"),
            "{e}"
        );
        assert!(!e.message.contains("b.test"), "{e}");
        // Refused before anything was sent: no news either way.
        h.attempt("api://m/s", &url("http://a.test/s"))
            .finish(Reached::NotAsked, Some(&Error::invalid_params("refused")));
        assert!(h.outage().is_err());
        // Any answer, an error status too, ends it.
        h.attempt("api://m/s", &url("http://a.test/s")).finish(
            Reached::Answered,
            Some(&Error::new(ErrorKind::Unavailable, "HTTP 503")),
        );
        assert!(h.outage().is_ok());
    }

    #[test]
    fn another_resource_failing_only_asks_for_a_probe() {
        let h = hosts(&[
            ("api://m/s", "http://a.test/s"),
            ("api://m/q/{q}", "http://a.test/q/{q}"),
        ]);
        let uri = "api://m/q/slow";
        assert_eq!(h.failed(0, uri, &timeout(uri)), Next::Probe(0));
        assert!(h.outage().is_ok(), "a slow query is not an outage");
        // Once out, a failure elsewhere adds nothing.
        assert_eq!(
            h.failed(0, "api://m/s", &timeout("api://m/s")),
            Next::Nothing
        );
        assert_eq!(h.failed(0, uri, &timeout(uri)), Next::Nothing);
        assert!(h.outage().is_err());
        // The reason follows the probe resource's newest failure, the start is kept.
        let refused = Error::new(ErrorKind::Unavailable, "api://m/s: cannot connect: refused");
        assert_eq!(h.failed(0, "api://m/s", &refused), Next::Nothing);
        assert!(h.outage().unwrap_err().message.contains("cannot connect"));
    }

    #[test]
    fn a_templated_only_host_probes_what_answered_last() {
        let h = hosts(&[("api://m/u/{id}", "http://t.test/u/{id}")]);
        let t = url("http://t.test/u/1");
        // Nothing answered yet: the failing URI is all there is to ask.
        h.attempt("api://m/u/1", &t)
            .finish(Reached::Unreachable, Some(&timeout("api://m/u/1")));
        assert!(h.outage().is_err());
        h.attempt("api://m/u/2", &t).finish(Reached::Answered, None);
        assert!(h.outage().is_ok());
        assert_eq!(lock(&h.table)[0].probe.as_deref(), Some("api://m/u/2"));
        // Another URI failing now asks for a probe of api://m/u/2 instead.
        assert_eq!(
            h.failed(0, "api://m/u/3", &timeout("api://m/u/3")),
            Next::Probe(0)
        );
        assert!(h.outage().is_ok());
    }

    #[test]
    fn untracked_hosts_change_nothing() {
        let h = hosts(&[
            ("api://m/s", "http://a.test/s"),
            ("api://m/r/{r}", "http://{r}.test/r"),
        ]);
        h.attempt("api://m/r/x", &url("http://x.test/r"))
            .finish(Reached::Unreachable, Some(&timeout("api://m/r/x")));
        assert!(h.outage().is_ok());
        let none = hosts(&[("api://m/r/{r}", "http://{r}.test/r")]);
        assert!(lock(&none.table).is_empty());
    }

    #[test]
    fn a_request_given_up_on_asks_for_a_probe_unless_the_host_answered_since() {
        let h = hosts(&[("api://m/s", "http://a.test/s")]);
        let started = Instant::now();
        assert_eq!(h.abandoned(0, started), Next::Probe(0));
        std::thread::sleep(Duration::from_millis(2));
        h.answered(0, "api://m/s");
        assert_eq!(h.abandoned(0, started), Next::Nothing);
        h.failed(0, "api://m/s", &timeout("api://m/s"));
        assert_eq!(h.abandoned(0, Instant::now()), Next::Nothing, "already out");
    }
}
