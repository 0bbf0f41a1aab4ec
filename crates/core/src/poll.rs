//! Poll-and-compare watching: a [`Poller`] re-checks watched resources on an interval (with
//! jitter) or when woken, compares each one's fingerprint with the last one seen, and reports
//! `updated` (or `list_changed`) only when it differs.
//!
//! A provider supplies a [`PollSource`]: how to fingerprint one resource (a ref's entry id, a
//! query result's hash, an ETag, an S3 HEAD), and optionally a cheaper "did anything change
//! at all" probe per round and the event sources that wake the poller early (inotify on ref
//! storage, PostgreSQL `LISTEN`). The poller owns what every such watcher needs the same way:
//!
//! - **One check per target** however many keys and guards: the source maps each watched key
//!   to the [`PollKey`] of what it looks at ([`PollSource::poll_key`]: the S3 object behind
//!   every window URI of it, the upstream URL behind every URI that fetches it), a target is
//!   checked once per round, and every sink of every key mapped to it is told, each with its
//!   own URI. The last [`WatchGuard`] of the last key stops the task and drops the source's
//!   event sources.
//! - **A rate limit** ([`PollConfig::max_checks_per_second`]): a token bucket (a second's
//!   worth of burst) caps the checks a mount makes, however many targets are watched. Checks
//!   over the cap stay due and wait their turn, oldest first, so every target is still
//!   checked, less often (and a deferred one is made even in a round the probe would skip);
//!   each is counted once ([`Poller::throttled_counter`], `mcp_poll_throttled_total` at
//!   `/metrics`). While throttled, the task runs about ten rounds a second.
//! - **An interval with jitter**: each target is due `interval × (1 ± jitter/2)` after its last
//!   check, so many keys (and many servers) do not all poll in the same instant. The jitter is
//!   a hash of the key, the time and std's per-process random hash keys: no `rand` needed.
//! - **Wake now** ([`Waker::wake`]): an event source wakes the poller, which waits the
//!   debounce (folding a burst into one round) and checks every key.
//! - **Failures are not changes**: a check that fails keeps the last good fingerprint,
//!   notifies nobody and is retried with exponential backoff.
//!
//! The poller is a tokio task and checks are async, because most sources are (SQL drivers,
//! HTTP, S3). A source whose checks block (gix, rusqlite) runs them through
//! [`crate::blocking::run_blocking`]; git does so once per round for all its keys
//! ([`PollSource::check_all`]), so it costs one hop to the blocking pool per round, where a
//! thread of its own per watched repository cost a parked thread and its stack all the time.
//! Targets are checked one after another within a round, not concurrently: a round is as
//! gentle on the source as the old per-provider loops were, and jitter already spreads
//! targets out.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::collections::hash_map::RandomState;
use std::fmt::Debug;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::change::{ChangeSink, WatchGuard};
use crate::error::Result;
use crate::provider::Counter;
use crate::uri::ResourceUri;

/// Allowed `max_poll_requests_per_second`, the mount setting behind
/// [`PollConfig::max_checks_per_second`], for every provider that offers it.
pub const MAX_POLL_REQUESTS_PER_SECOND: std::ops::RangeInclusive<u64> = 1..=10_000;

/// The name of the counter of deferred checks at `/metrics` ([`Poller::throttled_counter`]).
pub const THROTTLED_METRIC: &str = "mcp_poll_throttled_total";

/// What is watched: one resource, or the set of resources of the mount.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Watched {
    /// One resource; a change is reported as `updated(uri)`.
    Resource(ResourceUri),
    /// The mount's listing; a change is reported as `list_changed`.
    List,
}

impl Watched {
    /// Report a change of this key to `sink`.
    pub fn notify(&self, sink: &ChangeSink) {
        match self {
            Watched::Resource(uri) => sink.updated(uri.as_str()),
            Watched::List => sink.list_changed(),
        }
    }
}

/// What one check looks at ([`PollSource::poll_key`]). Watched keys with the same poll key
/// share one check per round and one fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PollKey {
    /// The mount's listing.
    List,
    /// One object, named as the source likes (an S3 key, an upstream URL).
    Object(String),
}

impl PollKey {
    /// Each key its own target: a resource by its URI as written, the listing as the listing.
    pub fn of(key: &Watched) -> Self {
        match key {
            Watched::Resource(uri) => PollKey::Object(uri.as_str().to_owned()),
            Watched::List => PollKey::List,
        }
    }
}

/// Why a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A [`Waker`] was woken (after the debounce).
    Woken,
    /// A key's interval or retry time came.
    Timer,
}

/// What a round checks, as decided by [`PollSource::round`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// The default: after a wake-up every key, on a timer the keys that are due.
    Scheduled,
    /// Something changed: check every key now.
    All,
    /// Nothing changed since the last round: check only failed keys whose retry is due (and
    /// checks the rate limit deferred), and push the others' next check one interval on.
    Skip,
}

/// How a [`Poller`] schedules checks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PollConfig {
    /// Time between two checks of a key; `None`: only wake-ups (and retries) check.
    pub interval: Option<Duration>,
    /// Fraction of the interval (and of retry delays) that is random, 0.0..=1.0: a delay `d`
    /// becomes `d × (1 − jitter/2 + jitter × u)`, `u` uniform in 0..1.
    pub jitter: f64,
    /// Quiet period after a wake-up before the round, so a burst of events is one round.
    pub debounce: Duration,
    /// Delay before the first retry of a failed check; it doubles with each failure in a row.
    pub retry_min: Duration,
    /// The longest delay between retries.
    pub retry_max: Duration,
    /// The most checks per second, over all targets (`None`: no limit). A token bucket
    /// holding one second's worth: checks beyond it are deferred to when tokens come back.
    pub max_checks_per_second: Option<u32>,
}

impl PollConfig {
    /// Check every `interval` (10 % jitter, no debounce, no rate limit); retries start at
    /// one interval and back off to a minute (or the interval, when longer).
    pub fn every(interval: Duration) -> Self {
        Self {
            interval: Some(interval),
            jitter: 0.1,
            debounce: Duration::ZERO,
            retry_min: interval,
            retry_max: interval.max(Duration::from_secs(60)),
            max_checks_per_second: None,
        }
    }

    /// Check only when woken; failed checks are retried from one second up to a minute.
    pub fn on_wake_only() -> Self {
        Self {
            interval: None,
            jitter: 0.1,
            debounce: Duration::ZERO,
            retry_min: Duration::from_secs(1),
            retry_max: Duration::from_secs(60),
            max_checks_per_second: None,
        }
    }

    /// The same with a debounce after each wake-up.
    pub fn with_debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// The same with retries from `min` doubling up to `max` (`max` is at least `min`).
    pub fn with_retry(mut self, min: Duration, max: Duration) -> Self {
        self.retry_min = min;
        self.retry_max = max.max(min);
        self
    }

    /// The same with another jitter fraction (clamped to 0.0..=1.0).
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter.clamp(0.0, 1.0);
        self
    }

    /// The same with at most `n` checks a second (at least 1).
    pub fn with_max_checks_per_second(mut self, n: u32) -> Self {
        self.max_checks_per_second = Some(n.max(1));
        self
    }
}

/// How a provider looks at what is watched. Implemented once per provider; the [`Poller`]
/// does the scheduling, comparing and notifying.
#[async_trait]
pub trait PollSource: Send + Sync + 'static {
    /// What a check of one key sees: compared with the previous one through
    /// [`changed`](Self::changed). Represent "deleted" or "not found" as a value of its own
    /// (it is a change), and keep failures out of it (return an error instead).
    type Fingerprint: Clone + PartialEq + Debug + Send + Sync + 'static;

    /// Look at `key` now. `last` is what the last successful check saw (`None`: nothing yet),
    /// for conditional requests or to reuse work when nothing moved. An error means "could
    /// not look this time" (the source is down, a timeout): nobody is notified, `last` is
    /// kept, and the key is retried with backoff.
    ///
    /// `key` is one of the keys of a [`PollKey`] (any of them: the answer must not depend on
    /// which); every key of it is told of a change.
    async fn check(
        &self,
        key: &Watched,
        last: Option<&Self::Fingerprint>,
    ) -> Result<Self::Fingerprint>;

    /// Look at several keys in one round; one result per key, in order. The default checks
    /// them one after another; a source overrides it to share work across keys (one
    /// repository handle, one hop to the blocking pool).
    async fn check_all(
        &self,
        keys: &[(Watched, Option<Self::Fingerprint>)],
    ) -> Vec<Result<Self::Fingerprint>> {
        let mut out = Vec::with_capacity(keys.len());
        for (key, last) in keys {
            out.push(self.check(key, last.as_ref()).await);
        }
        out
    }

    /// What `key` looks at. Keys with the same poll key are checked once per round together
    /// and share the fingerprint, so give two keys the same one only when a check of either
    /// sees the same thing and [`changed`](Self::changed) answers the same for both (window
    /// URIs of one object; URIs that fetch one upstream URL). The default: every key its own.
    /// Called when a key is watched: keep it cheap and free of I/O.
    fn poll_key(&self, key: &Watched) -> PollKey {
        PollKey::of(key)
    }

    /// Whether `new` differs from `old` as the subscribers of `key` see it (default: `!=`).
    /// A fingerprint may carry more than what is compared (the commit a ref pointed at, to
    /// reuse a lookup); it is stored whatever this answers.
    fn changed(&self, key: &Watched, old: &Self::Fingerprint, new: &Self::Fingerprint) -> bool {
        let _ = key;
        old != new
    }

    /// Called before each round: a cheap probe can say that nothing changed anywhere
    /// ([`Round::Skip`]) or that everything must be re-checked ([`Round::All`]).
    async fn round(&self, cause: Cause) -> Round {
        let _ = cause;
        Round::Scheduled
    }

    /// Start the event sources that wake the poller early (inotify, `LISTEN`); called when
    /// the poller's task starts. What it returns is kept for as long as the task runs and
    /// dropped when it stops, which must stop those sources.
    fn start(&self, waker: Waker) -> Box<dyn Send> {
        let _ = waker;
        Box::new(())
    }
}

/// Wakes a [`Poller`] for a round of checks now (after its debounce). Cheap to clone, never
/// blocks, and may be called from any thread; wake-ups while a round runs cause one more
/// round after it, so none is lost.
#[derive(Clone)]
pub struct Waker(Arc<Signal>);

impl Waker {
    /// Ask for a round of every key.
    pub fn wake(&self) {
        self.0.woken.store(true, Ordering::SeqCst);
        self.0.notify.notify_one();
    }
}

impl Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Waker")
    }
}

struct Signal {
    notify: Notify,
    /// Set by a wake-up; the notify alone may also mean "the schedule changed".
    woken: AtomicBool,
}

/// One polled target: the keys that look at it with who to tell, what was seen, when to
/// look next.
struct Target<F> {
    /// Each watched key of this target with its subscribers.
    keys: HashMap<Watched, HashMap<u64, ChangeSink>>,
    /// `None`: nothing seen yet, so the first successful check is reported as a change (a
    /// subscriber whose first read failed must learn when the resource is there).
    last: Option<F>,
    /// `None`: only on a wake-up.
    due: Option<Instant>,
    failures: u32,
    /// A check the rate limit deferred: made when due whatever the round probe says, since
    /// the round that wanted it may have been the only one to know of a change.
    owed: bool,
}

struct State<F> {
    next_id: u64,
    targets: HashMap<PollKey, Target<F>>,
    task: Option<JoinHandle<()>>,
}

struct Shared<S: PollSource> {
    label: String,
    source: Weak<S>,
    config: PollConfig,
    signal: Arc<Signal>,
    state: Mutex<State<S::Fingerprint>>,
    /// Checks deferred by the rate limit, since the start.
    throttled: AtomicU64,
    /// Whether the first deferral was logged.
    warned: AtomicBool,
}

impl<S: PollSource> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, State<S::Fingerprint>> {
        crate::sync::lock(&self.state)
    }

    /// When a target checked now is next due.
    fn next_check(&self, key: &PollKey, now: Instant) -> Option<Instant> {
        self.config
            .interval
            .map(|i| now + jittered(i, self.config.jitter, key))
    }

    /// When a target that failed `failures` times in a row is retried.
    fn retry_at(&self, key: &PollKey, failures: u32, now: Instant) -> Instant {
        let c = &self.config;
        let exp = failures.saturating_sub(1).min(20);
        let delay = c
            .retry_min
            .saturating_mul(1u32 << exp)
            .min(c.retry_max.max(c.retry_min));
        now + jittered(delay, c.jitter, key)
    }
}

/// A poll-and-compare watcher for one mount: keys with their subscribers, and a task that runs
/// while any key is watched. See the module documentation.
pub struct Poller<S: PollSource> {
    shared: Arc<Shared<S>>,
}

impl<S: PollSource> Clone for Poller<S> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<S: PollSource> Debug for Poller<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller")
            .field("label", &self.shared.label)
            .field("config", &self.shared.config)
            .finish()
    }
}

impl<S: PollSource> Poller<S> {
    /// A poller over `source`, named `label` in logs. It holds the source weakly, so a
    /// source may own its poller; the task ends when the source is gone.
    pub fn new(label: impl Into<String>, source: Weak<S>, config: PollConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                label: label.into(),
                source,
                config,
                signal: Arc::new(Signal {
                    notify: Notify::new(),
                    woken: AtomicBool::new(false),
                }),
                state: Mutex::new(State {
                    next_id: 0,
                    targets: HashMap::new(),
                    task: None,
                }),
                throttled: AtomicU64::new(0),
                warned: AtomicBool::new(false),
            }),
        }
    }

    /// Watch `key` for `sink` until the guard is dropped. `initial` is what the caller saw
    /// when it set the watch up (read it *before* calling this, so a change in between is
    /// seen by the first check); `None` when that failed, which makes the first successful
    /// check a change. A target already polled (for this key or another with the same
    /// [`PollKey`]) keeps the fingerprint it has, so no subscriber misses a change that is
    /// not yet checked.
    ///
    /// Starts the task (on the current tokio runtime) if it was not running.
    pub fn watch(
        &self,
        key: Watched,
        sink: ChangeSink,
        initial: Option<S::Fingerprint>,
    ) -> WatchGuard {
        let target = self.poll_key(&key);
        self.attach(target, key, sink, Some(initial))
            .expect("attach with a starting point always watches")
    }

    /// Watch `key` for `sink` if its target is already polled, with no look of its own: the
    /// target's fingerprint is the starting point (a change since it was taken is reported,
    /// at worst once more than needed). `None` when the target is not polled yet: look, then
    /// [`watch`](Self::watch). This is what keeps many URIs of one object (windows) from each
    /// costing a request when subscribed.
    pub fn join(&self, key: &Watched, sink: &ChangeSink) -> Option<WatchGuard> {
        let target = self.poll_key(key);
        self.attach(target, key.clone(), sink.clone(), None)
    }

    fn poll_key(&self, key: &Watched) -> PollKey {
        match self.shared.source.upgrade() {
            Some(source) => source.poll_key(key),
            None => PollKey::of(key),
        }
    }

    /// Add the subscription; `initial` `None` joins an existing target only.
    fn attach(
        &self,
        target: PollKey,
        key: Watched,
        sink: ChangeSink,
        initial: Option<Option<S::Fingerprint>>,
    ) -> Option<WatchGuard> {
        let sh = &self.shared;
        let mut st = sh.lock();
        let id = st.next_id;
        st.next_id += 1;
        let t = match st.targets.entry(target.clone()) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let initial = initial?;
                v.insert(Target {
                    keys: HashMap::new(),
                    last: initial,
                    due: sh.next_check(&target, Instant::now()),
                    failures: 0,
                    owed: false,
                })
            }
        };
        t.keys.entry(key.clone()).or_default().insert(id, sink);
        if st.task.as_ref().is_none_or(JoinHandle::is_finished) {
            st.task = Some(tokio::spawn(run(self.shared.clone())));
        } else {
            // The task may be sleeping towards a later time than this target's first check.
            sh.signal.notify.notify_one();
        }
        Some(WatchGuard::new(Release {
            shared: Arc::downgrade(&self.shared),
            target,
            key,
            id,
        }))
    }

    /// A handle that wakes this poller.
    pub fn waker(&self) -> Waker {
        Waker(self.shared.signal.clone())
    }

    /// Whether the task runs (it must stop with the last guard).
    pub fn is_running(&self) -> bool {
        self.shared
            .lock()
            .task
            .as_ref()
            .is_some_and(|t| !t.is_finished())
    }

    /// What the last check of `key`'s target saw, when that check succeeded: the state the
    /// next check is compared with, so any state other than it is reported to every
    /// subscriber of the target as long as one watches. `None` when the target is not polled,
    /// nothing was seen yet (its first look failed), or its last check failed (what it holds
    /// is older than the failure).
    ///
    /// This is what a provider's change token comes from ([`crate::Provider::change_token`],
    /// through [`token_digest`]): no request of its own, and a token that names a state the
    /// poller reports the change from, never one it skipped.
    pub fn last_seen(&self, key: &Watched) -> Option<S::Fingerprint> {
        let target = self.poll_key(key);
        let st = self.shared.lock();
        let t = st.targets.get(&target)?;
        if t.failures > 0 {
            return None;
        }
        t.last.clone()
    }

    /// How many targets are polled (keys sharing a [`PollKey`] count once).
    pub fn watched(&self) -> usize {
        self.shared.lock().targets.len()
    }

    /// How many checks the rate limit deferred since the poller was made.
    pub fn throttled(&self) -> u64 {
        self.shared.throttled.load(Ordering::Relaxed)
    }

    /// [`throttled`](Self::throttled) as the provider counter `mcp_poll_throttled_total`,
    /// for [`crate::Provider::counters`].
    pub fn throttled_counter(&self) -> Counter {
        Counter {
            name: THROTTLED_METRIC,
            help: "Change checks deferred because the mount reached its max_poll_requests_per_second.",
            value: self.throttled(),
        }
    }
}

/// Removes one subscription when dropped; the last one of the last key stops the task.
struct Release<S: PollSource> {
    shared: Weak<Shared<S>>,
    target: PollKey,
    key: Watched,
    id: u64,
}

impl<S: PollSource> Drop for Release<S> {
    fn drop(&mut self) {
        let Some(sh) = self.shared.upgrade() else {
            return;
        };
        let mut st = sh.lock();
        if let Some(t) = st.targets.get_mut(&self.target) {
            if let Some(sinks) = t.keys.get_mut(&self.key) {
                sinks.remove(&self.id);
                if sinks.is_empty() {
                    t.keys.remove(&self.key);
                }
            }
            if t.keys.is_empty() {
                st.targets.remove(&self.target);
            }
        }
        if st.targets.is_empty()
            && let Some(task) = st.task.take()
        {
            // Aborting drops the task's future, and with it the source's event sources.
            task.abort();
        }
    }
}

/// A change token made of `parts` (a fingerprint's fields, each tagged by the caller): the
/// first 16 bytes of a SHA-256 over them, length-prefixed, in hex. The same parts give the
/// same token in every process and build (replicas of a cluster compare them), different
/// parts a different one, and nothing of the parts (an ETag, a hash of rows) shows in it.
pub fn token_digest(parts: &[&[u8]]) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `d` with `jitter` of it spread at random around it.
fn jittered(d: Duration, jitter: f64, key: &PollKey) -> Duration {
    if jitter <= 0.0 || d.is_zero() {
        return d;
    }
    // RandomState's keys are random per process (and differ per instance), so this varies
    // between keys, calls and servers without a random number generator of our own.
    let mut h = RandomState::new().build_hasher();
    key.hash(&mut h);
    std::time::SystemTime::now().hash(&mut h);
    let u = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
    d.mul_f64(1.0 - jitter / 2.0 + jitter * u)
}

/// The rate limit: tokens for checks, one second's worth at most, refilled continuously.
struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(per_second: u32, now: Instant) -> Self {
        let rate = f64::from(per_second.max(1));
        Self {
            rate,
            tokens: rate,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        self.at = now;
    }

    /// When `n` tokens are there.
    fn ready_at(&self, n: f64, now: Instant) -> Instant {
        let wait = (n - self.tokens).max(0.0) / self.rate;
        now + Duration::from_secs_f64(wait)
    }

    /// The tokens a throttled round waits for: a tenth of a second's worth, at least one.
    fn batch(&self) -> f64 {
        (self.rate / 10.0).ceil().max(1.0)
    }
}

/// The poller's task: sleep until the first key is due or a wake-up, then run a round.
async fn run<S: PollSource>(shared: Arc<Shared<S>>) {
    let Some(source) = shared.source.upgrade() else {
        return;
    };
    let _events = source.start(Waker(shared.signal.clone()));
    // Hold the source only during a round, so the task never keeps a dropped provider alive.
    drop(source);
    let mut bucket = shared
        .config
        .max_checks_per_second
        .map(|n| Bucket::new(n, Instant::now()));
    loop {
        let mut next = shared.lock().targets.values().filter_map(|t| t.due).min();
        if let (Some(at), Some(b)) = (next, bucket.as_mut()) {
            // Over the limit, targets stay due: wait for enough tokens for a tenth of a
            // second's checks, so a throttled mount runs about ten rounds a second, not one
            // per token.
            let now = Instant::now();
            b.refill(now);
            next = Some(at.max(b.ready_at(b.batch(), now)));
        }
        let woken = tokio::select! {
            _ = shared.signal.notify.notified() => shared.signal.woken.swap(false, Ordering::SeqCst),
            _ = sleep_until(next) => false,
        };
        let cause = if woken {
            if !shared.config.debounce.is_zero() {
                tokio::time::sleep(shared.config.debounce).await;
                // The rest of the burst is folded into this round.
                shared.signal.woken.store(false, Ordering::SeqCst);
            }
            Cause::Woken
        } else if next.is_some_and(|at| at <= Instant::now()) {
            Cause::Timer
        } else {
            // Only the schedule changed (a key was added): work out the next time again.
            continue;
        };
        let Some(source) = shared.source.upgrade() else {
            return;
        };
        round(&shared, &source, cause, bucket.as_mut()).await;
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One round: pick the targets, keep within the rate limit, check them, compare, notify,
/// reschedule.
async fn round<S: PollSource>(
    shared: &Shared<S>,
    source: &S,
    cause: Cause,
    bucket: Option<&mut Bucket>,
) {
    let decision = source.round(cause).await;
    let now = Instant::now();
    let batch: Vec<(PollKey, Watched, Option<S::Fingerprint>)> = {
        let mut st = shared.lock();
        let mut picked: Vec<(Option<Instant>, PollKey)> = Vec::new();
        for (key, t) in st.targets.iter_mut() {
            let due = t.due.is_some_and(|d| d <= now);
            let take = match decision {
                Round::All => true,
                Round::Scheduled => cause == Cause::Woken || due,
                Round::Skip => due && (t.failures > 0 || t.owed),
            };
            if take {
                picked.push((t.due, key.clone()));
            } else if due {
                t.due = shared.next_check(key, now);
            }
        }
        if let Some(bucket) = bucket {
            bucket.refill(now);
            let allowed = bucket.tokens.floor() as usize;
            if picked.len() > allowed {
                // The longest waiting first: a deferred target keeps the time it came due, so
                // a mount over its limit still gets round every target, each less often.
                picked.sort_by_key(|(due, _)| *due);
                let deferred = picked.split_off(allowed);
                let mut newly = 0;
                for (_, key) in deferred {
                    if let Some(t) = st.targets.get_mut(&key) {
                        // Still due, so the task comes back for it as soon as tokens are.
                        t.due = Some(t.due.map_or(now, |d| d.min(now)));
                        newly += u64::from(!t.owed);
                        t.owed = true;
                    }
                }
                // Counted once per check that had to wait, however many rounds it waits.
                shared.throttled.fetch_add(newly, Ordering::Relaxed);
                if newly > 0 && !shared.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(poller = %shared.label, limit = bucket.rate, "change checks reached the mount's max_poll_requests_per_second; checks are spaced out, so each target is checked less often than the poll interval");
                }
            }
            bucket.tokens -= picked.len() as f64;
        }
        picked
            .into_iter()
            .filter_map(|(_, key)| {
                let t = st.targets.get(&key)?;
                let watched = t.keys.keys().next()?.clone();
                Some((key, watched, t.last.clone()))
            })
            .collect()
    };
    if batch.is_empty() {
        return;
    }
    let keys: Vec<(Watched, Option<S::Fingerprint>)> = batch
        .iter()
        .map(|(_, w, last)| (w.clone(), last.clone()))
        .collect();
    let results = source.check_all(&keys).await;
    let now = Instant::now();
    let mut st = shared.lock();
    for ((target, watched, _), result) in batch.into_iter().zip(results) {
        // A target dropped meanwhile stays silent.
        let Some(t) = st.targets.get_mut(&target) else {
            continue;
        };
        t.owed = false;
        match result {
            Ok(fp) => {
                let changed = t
                    .last
                    .as_ref()
                    .is_none_or(|old| source.changed(&watched, old, &fp));
                if changed {
                    for (key, sinks) in &t.keys {
                        for sink in sinks.values() {
                            key.notify(sink);
                        }
                    }
                }
                t.last = Some(fp);
                t.failures = 0;
                t.due = shared.next_check(&target, now);
            }
            Err(err) => {
                t.failures = t.failures.saturating_add(1);
                let at = shared.retry_at(&target, t.failures, now);
                t.due = Some(at);
                if t.failures == 1 {
                    tracing::warn!(poller = %shared.label, key = ?watched, error = %err, "checking for changes failed; retrying with backoff");
                } else {
                    tracing::debug!(poller = %shared.label, key = ?watched, error = %err, failures = t.failures, "checking for changes failed again");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The clock is tokio's paused test clock: timers fire in order as soon as every task is
    //! idle, so intervals, backoff and debounce are exact and the tests do not wait.

    use std::sync::atomic::AtomicUsize;

    use tokio::sync::broadcast;

    use super::*;
    use crate::change::{ChangeBus, ChangeEvent, LocalBus};
    use crate::error::{Error, ErrorKind};

    /// A source over values kept in memory: `None` makes the check of that URI fail.
    #[derive(Default)]
    struct Values {
        values: Mutex<HashMap<String, Option<u64>>>,
        checks: Mutex<Vec<String>>,
        listing: Mutex<u64>,
        gate: Mutex<Option<Round>>,
        started: AtomicUsize,
        stopped: Arc<AtomicUsize>,
    }

    impl Values {
        fn set(&self, uri: &str, v: Option<u64>) {
            self.values.lock().unwrap().insert(uri.to_owned(), v);
        }
        fn checks(&self) -> Vec<String> {
            std::mem::take(&mut *self.checks.lock().unwrap())
        }
    }

    struct Stopped(Arc<AtomicUsize>);
    impl Drop for Stopped {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[async_trait]
    impl PollSource for Values {
        type Fingerprint = u64;

        async fn check(&self, key: &Watched, _last: Option<&u64>) -> Result<u64> {
            let name = match key {
                // A query is a window of the value: the same thing to look at.
                Watched::Resource(u) => u.without_query().to_owned(),
                Watched::List => "list".to_owned(),
            };
            self.checks.lock().unwrap().push(name.clone());
            if *key == Watched::List {
                return Ok(*self.listing.lock().unwrap());
            }
            match self.values.lock().unwrap().get(&name) {
                Some(Some(v)) => Ok(*v),
                _ => Err(Error::new(ErrorKind::Unavailable, "source down")),
            }
        }

        fn poll_key(&self, key: &Watched) -> PollKey {
            match key {
                Watched::Resource(u) => PollKey::Object(u.without_query().to_owned()),
                Watched::List => PollKey::List,
            }
        }

        async fn round(&self, _cause: Cause) -> Round {
            self.gate.lock().unwrap().unwrap_or(Round::Scheduled)
        }

        fn start(&self, _waker: Waker) -> Box<dyn Send> {
            self.started.fetch_add(1, Ordering::SeqCst);
            Box::new(Stopped(self.stopped.clone()))
        }
    }

    fn res(u: &str) -> Watched {
        Watched::Resource(ResourceUri::parse(u).unwrap())
    }

    fn bus() -> (Arc<LocalBus>, broadcast::Receiver<ChangeEvent>) {
        let bus = Arc::new(LocalBus::default());
        let rx = bus.subscribe();
        (bus, rx)
    }

    fn drain(rx: &mut broadcast::Receiver<ChangeEvent>) -> Vec<ChangeEvent> {
        let mut out = Vec::new();
        while let Ok(e) = rx.try_recv() {
            out.push(e);
        }
        out
    }

    fn updated(uri: &str) -> ChangeEvent {
        ChangeEvent::Updated { uri: uri.into() }
    }

    const SEC: Duration = Duration::from_secs(1);

    fn no_jitter(interval: Duration) -> PollConfig {
        PollConfig::every(interval).with_jitter(0.0)
    }

    #[tokio::test(start_paused = true)]
    async fn one_check_per_key_and_only_changes_are_reported() {
        let src = Arc::new(Values::default());
        src.set("x://a", Some(1));
        let p = Poller::new("t", Arc::downgrade(&src), no_jitter(SEC));
        let (bus, mut rx) = bus();
        // Two guards on one key (two mounts), one on the list.
        let g1 = p.watch(res("x://a"), ChangeSink::new(bus.clone(), "m1"), Some(1));
        let g2 = p.watch(res("x://a"), ChangeSink::new(bus.clone(), "m2"), Some(1));
        let gl = p.watch(Watched::List, ChangeSink::new(bus.clone(), "m1"), Some(0));
        assert_eq!(p.watched(), 2);
        tokio::time::sleep(SEC * 3 + SEC / 2).await;
        assert_eq!(src.checks().iter().filter(|c| *c == "x://a").count(), 3);
        assert_eq!(drain(&mut rx), [], "nothing changed");
        src.set("x://a", Some(2));
        *src.listing.lock().unwrap() = 1;
        tokio::time::sleep(SEC).await;
        let got = drain(&mut rx);
        // Both subscribers of the key hear it (the bus carries the URI; the registry tells
        // the mounts apart), the list watch hears list_changed once.
        assert_eq!(got.iter().filter(|e| **e == updated("x://a")).count(), 2);
        assert_eq!(
            got.iter()
                .filter(|e| **e == ChangeEvent::ListChanged { mount: "m1".into() })
                .count(),
            1
        );
        tokio::time::sleep(SEC * 2).await;
        assert_eq!(drain(&mut rx), [], "a change is reported once");
        drop((g1, g2, gl));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_notifies_nobody_keeps_the_last_and_backs_off() {
        let src = Arc::new(Values::default());
        src.set("x://a", Some(1));
        let cfg = no_jitter(SEC).with_retry(SEC, SEC * 4);
        let p = Poller::new("t", Arc::downgrade(&src), cfg);
        let (bus, mut rx) = bus();
        let _g = p.watch(res("x://a"), ChangeSink::new(bus.clone(), "m0"), Some(1));
        tokio::time::sleep(SEC + SEC / 2).await;
        assert_eq!(src.checks().len(), 1);
        src.set("x://a", None);
        // Checks at 2 (fails), then retries at 3, 5, 9, 13: 1, 2, 4, 4 (capped) seconds apart.
        tokio::time::sleep(SEC * 12).await;
        assert_eq!(src.checks().len(), 5, "retries back off");
        assert_eq!(drain(&mut rx), [], "a failure is not a change");
        // Back with the value it had: still no change; the backoff is over.
        src.set("x://a", Some(1));
        tokio::time::sleep(SEC * 4).await;
        assert_eq!(drain(&mut rx), []);
        let n = src.checks().len();
        tokio::time::sleep(SEC * 3).await;
        assert_eq!(
            src.checks().len(),
            3,
            "one check per interval again (after {n})"
        );
        src.set("x://a", Some(5));
        tokio::time::sleep(SEC).await;
        assert_eq!(drain(&mut rx), [updated("x://a")]);
    }

    #[tokio::test(start_paused = true)]
    async fn last_seen_is_the_last_good_check_of_the_target_and_only_while_polled() {
        let src = Arc::new(Values::default());
        src.set("x://a", Some(1));
        let p = Poller::new(
            "t",
            Arc::downgrade(&src),
            no_jitter(SEC).with_retry(SEC, SEC),
        );
        let (bus, mut rx) = bus();
        assert_eq!(p.last_seen(&res("x://a")), None, "not polled");
        let g = p.watch(res("x://a"), ChangeSink::new(bus.clone(), "m0"), Some(1));
        // A window of the same target shares what was seen; no check is made for it.
        assert_eq!(p.last_seen(&res("x://a?head=1")), Some(1));
        assert_eq!(p.last_seen(&res("x://b")), None);
        assert_eq!(src.checks(), Vec::<String>::new());
        src.set("x://a", Some(2));
        tokio::time::sleep(SEC + SEC / 2).await;
        assert_eq!(drain(&mut rx), [updated("x://a")]);
        assert_eq!(
            p.last_seen(&res("x://a")),
            Some(2),
            "after the change it reported"
        );
        // The source down: what the poller holds is older than the failure.
        src.set("x://a", None);
        tokio::time::sleep(SEC).await;
        assert_eq!(p.last_seen(&res("x://a")), None);
        src.set("x://a", Some(2));
        tokio::time::sleep(SEC).await;
        assert_eq!(p.last_seen(&res("x://a")), Some(2));
        assert_eq!(
            drain(&mut rx),
            [],
            "a recovery to the same state is no change"
        );
        drop(g);
        assert_eq!(p.last_seen(&res("x://a")), None, "the last guard gone");
        // Nothing seen yet: no token, whatever the source holds.
        let _g = p.watch(res("x://a"), ChangeSink::new(bus.clone(), "m0"), None);
        assert_eq!(p.last_seen(&res("x://a")), None);
    }

    #[test]
    fn a_token_digest_depends_on_every_part_and_its_bounds() {
        let t = token_digest(&[b"etag", b"\"v1\""]);
        assert_eq!(t.len(), 32);
        assert_eq!(t, token_digest(&[b"etag", b"\"v1\""]));
        assert_ne!(t, token_digest(&[b"etag", b"\"v2\""]));
        // Where one part ends counts: no two splits of the same bytes collide.
        assert_ne!(token_digest(&[b"ab", b"c"]), token_digest(&[b"a", b"bc"]));
        assert!(!t.contains("v1"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unknown_start_makes_the_first_success_a_change() {
        let src = Arc::new(Values::default());
        let p = Poller::new("t", Arc::downgrade(&src), no_jitter(SEC));
        let (bus, mut rx) = bus();
        // The subscriber's first read failed: nothing known yet.
        let _g = p.watch(res("x://a"), ChangeSink::new(bus.clone(), "m0"), None);
        tokio::time::sleep(SEC * 2 + SEC / 2).await;
        assert_eq!(drain(&mut rx), []);
        src.set("x://a", Some(7));
        tokio::time::sleep(SEC * 2).await;
        assert_eq!(drain(&mut rx), [updated("x://a")]);
    }

    #[tokio::test(start_paused = true)]
    async fn wakeups_check_every_key_once_per_burst_after_the_debounce() {
        let src = Arc::new(Values::default());
        src.set("x://a", Some(1));
        src.set("x://b", Some(1));
        let cfg = PollConfig::on_wake_only().with_debounce(Duration::from_millis(50));
        let p = Poller::new("t", Arc::downgrade(&src), cfg);
        let (bus, mut rx) = bus();
        let _a = p.watch(res("x://a"), ChangeSink::new(bus.clone(), "m0"), Some(1));
        let _b = p.watch(res("x://b"), ChangeSink::new(bus.clone(), "m0"), Some(1));
        tokio::time::sleep(SEC * 60).await;
        assert_eq!(
            src.checks(),
            Vec::<String>::new(),
            "no interval: no polling"
        );
        src.set("x://b", Some(2));
        let w = p.waker();
        for _ in 0..5 {
            w.wake();
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(src.checks().len(), 0, "the debounce is still running");
        w.wake();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut checked = src.checks();
        checked.sort();
        assert_eq!(checked, ["x://a", "x://b"], "one round for the burst");
        assert_eq!(drain(&mut rx), [updated("x://b")]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_round_probe_can_skip_or_force_every_key() {
        let src = Arc::new(Values::default());
        src.set("x://a", Some(1));
        let p = Poller::new("t", Arc::downgrade(&src), no_jitter(SEC * 10));
        let (bus, mut rx) = bus();
        let _g = p.watch(res("x://a"), ChangeSink::new(bus.clone(), "m0"), Some(1));
        *src.gate.lock().unwrap() = Some(Round::Skip);
        src.set("x://a", Some(2));
        p.waker().wake();
        tokio::time::sleep(SEC * 25).await;
        assert_eq!(src.checks().len(), 0, "skipped rounds check nothing");
        *src.gate.lock().unwrap() = Some(Round::All);
        p.waker().wake();
        tokio::time::sleep(SEC / 10).await;
        assert_eq!(src.checks().len(), 1);
        assert_eq!(drain(&mut rx), [updated("x://a")]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_guard_stops_the_task_and_its_event_sources() {
        let src = Arc::new(Values::default());
        src.set("x://a", Some(1));
        let p = Poller::new("t", Arc::downgrade(&src), no_jitter(SEC));
        let (bus, _rx) = bus();
        let g1 = p.watch(res("x://a"), ChangeSink::new(bus.clone(), "m0"), Some(1));
        let g2 = p.watch(Watched::List, ChangeSink::new(bus.clone(), "m0"), Some(0));
        tokio::time::sleep(SEC / 10).await;
        assert!(p.is_running());
        assert_eq!(src.started.load(Ordering::SeqCst), 1);
        drop(g1);
        tokio::time::sleep(SEC * 2).await;
        assert!(p.is_running(), "the list watch still needs the task");
        assert_eq!(src.checks(), ["list", "list"]);
        drop(g2);
        assert!(!p.is_running());
        tokio::time::sleep(SEC / 10).await;
        assert_eq!(
            src.stopped.load(Ordering::SeqCst),
            1,
            "event sources dropped"
        );
        tokio::time::sleep(SEC * 3).await;
        assert_eq!(src.checks().len(), 0, "no check after the last guard");
        // Watching again starts it again, with its event sources.
        let _g = p.watch(res("x://a"), ChangeSink::new(bus.clone(), "m0"), Some(1));
        tokio::time::sleep(SEC / 10).await;
        assert!(p.is_running());
        assert_eq!(src.started.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_source_ends_the_task() {
        let src = Arc::new(Values::default());
        src.set("x://a", Some(1));
        let p = Poller::new("t", Arc::downgrade(&src), no_jitter(SEC));
        let (bus, _rx) = bus();
        let _g = p.watch(res("x://a"), ChangeSink::new(bus.clone(), "m0"), Some(1));
        tokio::time::sleep(SEC / 10).await;
        drop(src);
        tokio::time::sleep(SEC * 2).await;
        assert!(!p.is_running());
    }

    #[tokio::test(start_paused = true)]
    async fn keys_of_one_target_share_one_check_and_each_hears_its_own_uri() {
        let src = Arc::new(Values::default());
        src.set("x://a", Some(1));
        let p = Poller::new("t", Arc::downgrade(&src), no_jitter(SEC));
        let (bus, mut rx) = bus();
        let sink = ChangeSink::new(bus.clone(), "m0");
        let first = p.watch(res("x://a?w=0"), sink.clone(), Some(1));
        // Joining needs no look of its own; a target nobody polls cannot be joined.
        assert!(p.join(&res("x://b?w=1"), &sink).is_none());
        let mut guards: Vec<WatchGuard> = (1..200)
            .map(|i| p.join(&res(&format!("x://a?w={i}")), &sink).unwrap())
            .collect();
        assert_eq!(p.watched(), 1, "200 window URIs, one target");
        tokio::time::sleep(SEC * 5 + SEC / 2).await;
        assert_eq!(src.checks(), vec!["x://a"; 5], "one check per interval");
        assert_eq!(drain(&mut rx), []);
        src.set("x://a", Some(2));
        tokio::time::sleep(SEC).await;
        let mut got = drain(&mut rx);
        got.sort_by_key(|e| format!("{e:?}"));
        let mut want: Vec<ChangeEvent> =
            (0..200).map(|i| updated(&format!("x://a?w={i}"))).collect();
        want.sort_by_key(|e| format!("{e:?}"));
        assert_eq!(got, want, "every subscribed URI hears the change once");
        // The target outlives the key it was set up with, and ends with its last key.
        drop(first);
        guards.truncate(1);
        src.set("x://a", Some(3));
        tokio::time::sleep(SEC).await;
        assert_eq!(drain(&mut rx), [updated("x://a?w=1")]);
        assert!(p.is_running());
        drop(guards);
        assert!(!p.is_running());
        assert_eq!(p.watched(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_limit_spreads_checks_counts_them_and_reaches_every_target() {
        let src = Arc::new(Values::default());
        for i in 0..100 {
            src.set(&format!("x://k{i}"), Some(1));
        }
        let cfg = no_jitter(SEC).with_max_checks_per_second(10);
        let p = Poller::new("t", Arc::downgrade(&src), cfg);
        let (bus, mut rx) = bus();
        let _g: Vec<WatchGuard> = (0..100)
            .map(|i| {
                let sink = ChangeSink::new(bus.clone(), "m0");
                p.watch(res(&format!("x://k{i}")), sink, Some(1))
            })
            .collect();
        // 100 targets due every second, 10 checks a second allowed: a burst of 10 (a second's
        // worth), then 10 a second, never more, where unlimited would be 100 a second.
        let mut per_second = Vec::new();
        for _ in 0..20 {
            tokio::time::sleep(SEC).await;
            per_second.push(src.checks());
        }
        let counts: Vec<usize> = per_second.iter().map(Vec::len).collect();
        let total: usize = counts.iter().sum();
        assert!(total <= 10 * 20 + 10, "over the limit: {counts:?}");
        assert!(
            counts.iter().all(|&n| n <= 20) && counts[3..].iter().all(|&n| n <= 11),
            "over the limit: {counts:?}"
        );
        assert!(total >= 180, "spread, not stalled: {counts:?}");
        assert!(p.throttled() >= 80, "deferrals counted: {}", p.throttled());
        assert_eq!(p.throttled_counter().name, "mcp_poll_throttled_total");
        assert_eq!(p.throttled_counter().value, p.throttled());
        // Every target gets its turn within the 20 s.
        let seen: std::collections::BTreeSet<&String> = per_second.iter().flatten().collect();
        assert_eq!(seen.len(), 100, "some targets were never checked");
        // A change of any of them is still reported, within a round of all of them.
        src.set("x://k57", Some(2));
        tokio::time::sleep(SEC * 12).await;
        assert_eq!(drain(&mut rx), [updated("x://k57")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deferred_check_is_made_even_when_the_probe_says_skip() {
        let src = Arc::new(Values::default());
        for i in 0..3 {
            src.set(&format!("x://k{i}"), Some(1));
        }
        // One check a second, no interval: only wake-ups check.
        let cfg = PollConfig::on_wake_only().with_max_checks_per_second(1);
        let p = Poller::new("t", Arc::downgrade(&src), cfg);
        let (bus, mut rx) = bus();
        let _g: Vec<WatchGuard> = (0..3)
            .map(|i| {
                let sink = ChangeSink::new(bus.clone(), "m0");
                p.watch(res(&format!("x://k{i}")), sink, Some(1))
            })
            .collect();
        for i in 0..3 {
            src.set(&format!("x://k{i}"), Some(2));
        }
        // The probe saw the change once (All); later rounds would skip, but the two checks
        // the limit deferred are owed and made.
        *src.gate.lock().unwrap() = Some(Round::All);
        p.waker().wake();
        tokio::time::sleep(SEC / 10).await;
        *src.gate.lock().unwrap() = Some(Round::Skip);
        assert_eq!(src.checks().len(), 1);
        tokio::time::sleep(SEC * 3).await;
        assert_eq!(src.checks().len(), 2, "the deferred checks came");
        assert_eq!(drain(&mut rx).len(), 3, "every change reported");
        assert_eq!(p.throttled(), 2);
    }

    #[test]
    fn jitter_stays_within_its_fraction_and_varies() {
        let key = PollKey::Object("x://a".into());
        let d = Duration::from_secs(10);
        let all: Vec<Duration> = (0..200).map(|_| jittered(d, 0.2, &key)).collect();
        assert!(
            all.iter()
                .all(|j| *j >= d.mul_f64(0.9) && *j <= d.mul_f64(1.1))
        );
        let distinct: std::collections::BTreeSet<_> = all.iter().collect();
        assert!(distinct.len() > 100, "jitter must vary: {}", distinct.len());
        assert_eq!(jittered(d, 0.0, &key), d);
    }
}
