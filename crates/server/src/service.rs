//! [`Service`]: every MCP resource operation, once, in protocol-neutral terms. It takes the
//! caller's [`Grant`] and plain values and returns core types and core [`Error`]s.
//!
//! The rmcp handler ([`crate::McpHandler`]) and the direct read paths of stdio and HTTP are
//! adapters over it, and so would be a tool bridge or a cluster node: each parses its own
//! wire format, calls the service, and maps the answer back. JSON-RPC codes (through
//! [`crate::to_mcp_error`]), protocol eras (cache hints only for 2026-07-28 peers, not-found
//! as -32602 there) and rmcp types stay in the adapters. The request timeout and the request
//! metrics are applied here, around providers and operations, by [`crate::layers`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcpr_core::{
    CacheHints, CacheScope, Completion, CompletionRequest, Contents, Error, ErrorKind, PageCursor,
    PageRequest, ReadLimits, ReadOutput, ResourceMeta, ResourceUri, Result, TemplateMeta,
};

use crate::ServerState;
use crate::grant::{Grant, Identity};
use crate::layers::{Layered, Op, declares, metered};
use crate::registry::{ListenSlot, Notice, Registry, is_over_budget, over_budget};
use crate::router::{Mount, Router};

mod directory;
mod skills;
pub use directory::DirectoryPage;
pub use skills::SkillsPage;

/// Position tags: the first byte of a cursor's position says which walk it continues, so a
/// cursor of one walk is refused by another. All of them here, one value each.
/// `resources/list`: resume at the start of the mount, or after a provider position.
const AT_START: u8 = 0;
const AFTER: u8 = 1;
/// `resources/directory/read` (`service/directory.rs`).
const IN_DIRECTORY: u8 = 2;
/// `skills/list` (`service/skills.rs`).
const IN_SKILLS: u8 = 3;
/// `resources/list` inside the skills' `SKILL.md` entries, which follow the mounts'
/// resources (`service/skills.rs`).
const LISTING_SKILLS: u8 = 4;
/// [`Service::scan`] under a `skill://` prefix, over the skills' files
/// (`service/skills.rs`).
const SCAN_SKILLS: u8 = 5;

/// The most values one completion answer carries (the MCP limit).
pub const MAX_COMPLETION_VALUES: usize = 100;

/// The most listing pages one [`Service::scan`] call examines.
pub const SCAN_MAX_PAGES: usize = 20;

/// About the longest one [`Service::scan`] call keeps walking (it finishes the page it is on).
pub const SCAN_MAX_TIME: Duration = Duration::from_secs(2);

/// Where a listing resumes: a mount index, and the provider position to resume after
/// (`None`: the start of that mount).
type Position = (usize, Option<Vec<u8>>);

/// How long an unclaimed change token is kept (a listen whose acknowledgment failed).
const TOKEN_TTL: Duration = Duration::from_secs(30);

/// The protocol-neutral server: cheap to clone (one `Arc`), shared by every session.
#[derive(Clone)]
pub struct Service {
    state: Arc<ServerState>,
}

/// One page of `resources/list`.
#[derive(Debug, Clone, PartialEq)]
pub struct ListPage {
    /// The resources on this page, in mount order, then each provider's order.
    pub items: Vec<ResourceMeta>,
    /// The opaque cursor of the next page; `None` on the last one.
    pub next_cursor: Option<String>,
    /// The cache hints of a listing for this caller.
    pub hints: CacheHints,
    /// The mounts this page left out because their source failed, in mount order.
    pub skipped: Vec<SkippedMount>,
}

/// One call's worth of a filtered walk of the listing ([`Service::scan`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ScanPage {
    /// The resources that matched, in listing order.
    pub items: Vec<ResourceMeta>,
    /// The cursor that continues the walk; `None` once every mount has been walked.
    pub next_cursor: Option<String>,
    /// How many resources this call examined.
    pub examined: usize,
    /// The mounts this call's walk left out because their source failed, in mount order.
    pub skipped: Vec<SkippedMount>,
}

/// The `_meta` key under which a listing names the mounts it left out
/// ([`ListPage::skipped`]): a list of `{"mount", "message", "partial"}`.
pub const UNAVAILABLE_META_KEY: &str = "io.github.mcp-resources/unavailable";

/// A mount a listing left out because its source failed (it is down, timed out, or answered
/// nonsense): the listing goes on with the next mount instead of failing as a whole.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedMount {
    /// The mount's name: its first URI prefix.
    pub mount: String,
    /// What its provider answered, as a read of it would (no secret in it).
    pub error: Error,
    /// Whether the failure came while continuing inside the mount, whose first entries went
    /// out on earlier pages: the rest of it is left out.
    pub partial: bool,
}

/// What one walk over the mounts ([`Service::gather`]) brought back.
struct Gathered {
    items: Vec<ResourceMeta>,
    /// Where the next page starts; `None` after the last.
    next: Option<Position>,
    skipped: Vec<SkippedMount>,
    /// Whether some mount's list call answered (with entries or none).
    listed: bool,
    /// The strictest hints of a page that had its own (a gateway's upstream's `ttlMs`).
    hints: Option<CacheHints>,
}

/// The URI templates a caller may see.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateList {
    /// Every visible mount's templates, in mount order.
    pub templates: Vec<TemplateMeta>,
    /// The cache hints of a listing for this caller.
    pub hints: CacheHints,
}

/// The answer to one read.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadOutcome {
    /// What the provider returned.
    pub contents: Vec<Contents>,
    /// The mount's cache hints as they apply to this caller (`private` for a personal grant).
    pub hints: CacheHints,
}

/// What a completion is for: MCP completes arguments of prompts and of resource templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionRef<'a> {
    /// A resource template, exactly as `resources/templates/list` gave it.
    Template(&'a str),
    /// A prompt, or any other kind of reference: this server offers only resource templates.
    Other,
}

/// A subscriber in the registry (a legacy session's, or a listen stream's); dropping it
/// removes the subscriber and releases every watch only it needed.
pub struct Subscriber {
    registry: Arc<Registry>,
    id: u64,
}

impl Subscriber {
    /// The subscriber's id in the registry.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.registry.remove(self.id);
    }
}

/// Change tokens ([`mcpr_core::Provider::change_token`]) taken before a listen is
/// acknowledged, per URI, oldest first, until the listen that asked for them starts; see
/// [`Service::prepare_listen`]. Keep one per adapter instance (per handler): a listen must
/// claim the token taken for its own acknowledgment, or a change between two acknowledgments
/// could be compared away.
#[derive(Default)]
pub struct ChangeTokens(Mutex<TokenMap>);

/// Per URI, the tokens waiting for their listen, each with the time it was taken.
type TokenMap = HashMap<String, VecDeque<(Instant, Option<String>)>>;

impl ChangeTokens {
    fn lock(&self) -> std::sync::MutexGuard<'_, TokenMap> {
        // The map stays consistent whatever panicked while holding it.
        mcpr_core::sync::lock(&self.0)
    }

    /// Remember `token` for `uri`, dropping tokens nobody claimed in time.
    fn stash(&self, uri: &ResourceUri, token: Option<String>) {
        let now = Instant::now();
        let mut map = self.lock();
        map.retain(|_, q| {
            q.retain(|(t, _)| now.duration_since(*t) < TOKEN_TTL);
            !q.is_empty()
        });
        map.entry(uri.as_str().to_owned())
            .or_default()
            .push_back((now, token));
    }

    /// The oldest token stashed for `uri`: if two listens race, the older one can only
    /// cause an extra notification, never a missed one.
    fn take(&self, uri: &ResourceUri) -> Option<Option<String>> {
        let mut map = self.lock();
        let q = map.get_mut(uri.as_str())?;
        let (_, token) = q.pop_front()?;
        if q.is_empty() {
            map.remove(uri.as_str());
        }
        Some(token)
    }
}

/// A running listen: its notices, starting with what changed while it was being set up,
/// until it is dropped, which releases its subscriptions and its place among its client's
/// listen streams.
pub struct Listen {
    subscriber: Subscriber,
    _slot: ListenSlot,
    initial: VecDeque<Notice>,
    notices: crate::mailbox::Receiver,
}

impl Listen {
    /// The subscriber id of this listen.
    pub fn id(&self) -> u64 {
        self.subscriber.id()
    }

    /// The next notice to send; `None` when the registry is gone.
    pub async fn next(&mut self) -> Option<Notice> {
        match self.initial.pop_front() {
            Some(n) => Some(n),
            None => self.notices.recv().await,
        }
    }
}

/// Whether a caller holding `grant` may see `mount`.
pub(crate) fn visible(grant: Option<&Grant>, mount: &Mount) -> bool {
    grant.is_none_or(|g| g.allows(mount.scope.as_deref()))
}

/// The limits every read of `settings` runs under.
fn read_limits(settings: &crate::Settings) -> ReadLimits {
    ReadLimits {
        max_bytes: settings.max_read_bytes,
    }
}

/// What a read of `mount` answers a caller holding `grant`: a result with hints of its own
/// (an HTTP answer's remaining freshness) carries those, else the mount's; the caller's
/// grant can still only make them stricter.
fn read_outcome(grant: Option<&Grant>, mount: &Mount, out: ReadOutput) -> ReadOutcome {
    ReadOutcome {
        contents: out.contents,
        hints: hints_for(grant, out.hints.unwrap_or(mount.provider.info().cache)),
    }
}

/// Cache hints for a caller: answers that depend on who asks are `private`.
fn hints_for(grant: Option<&Grant>, mut hints: CacheHints) -> CacheHints {
    if grant.is_some_and(|g| g.personal) {
        hints.scope = CacheScope::Private;
    }
    hints
}

/// The mounts a caller holding `grant` may hear list changes of; `None` for all.
fn visible_mounts(router: &Router, grant: Option<&Grant>) -> Option<Vec<u32>> {
    grant.filter(|g| g.scopes.is_some()).map(|g| {
        router
            .mounts()
            .iter()
            .filter(|m| g.allows(m.scope.as_deref()))
            .map(|m| m.index)
            .collect()
    })
}

/// The error of a session hub that did not answer.
fn hub_error(e: RecordError) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!("the shared session store did not answer: {e}"),
    )
}

/// Why a [`SubscriptionRecord`] did not answer.
pub type RecordError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Where a roaming legacy session's subscriptions are recorded, for replicas sharing it:
/// the service checks a subscription and records it there, and whichever replica holds the
/// session's notification stream watches it. The HTTP transport's session hub is one
/// (`crate::http::SessionHub`); the service knows only this.
#[async_trait::async_trait]
pub trait SubscriptionRecord: Send + Sync {
    /// The URIs `session` is subscribed to.
    async fn subscriptions(&self, session: &str) -> std::result::Result<Vec<String>, RecordError>;
    /// Add (`subscribed`) or remove `uri` from the session's subscriptions and tell the
    /// replica watching them; returns the set afterwards.
    async fn set_subscription(
        &self,
        session: &str,
        uri: &str,
        subscribed: bool,
    ) -> std::result::Result<Vec<String>, RecordError>;
}

/// The refusal of a subscription beyond `max_subscriptions_per_session` (`max`).
fn too_many_subscriptions(max: usize, uri: &str) -> Error {
    Error::invalid_params(format!(
        "this session already has {max} subscriptions, the limit (max_subscriptions_per_session); unsubscribe from some first"
    ))
    .with_uri(uri)
}

/// `raw` parsed, or invalid params naming it.
fn parse_uri(raw: &str) -> Result<ResourceUri> {
    ResourceUri::parse(raw).map_err(|e| Error::invalid_params(e.message).with_uri(raw))
}

fn invalid_cursor(why: &str) -> Error {
    Error::new(ErrorKind::InvalidCursor, format!("invalid cursor: {why}"))
}

/// Whether a listing goes on past a mount whose list call failed with `e`. A failure of the
/// source (unavailable, timed out, a transport error, an answer that makes no sense, a local
/// failure) costs only that mount. A position inside the mount (`resumed`) that the mount
/// refuses as malformed is the caller's error, from the cursor it sent, and is answered.
fn skips(e: &Error, resumed: bool) -> bool {
    !resumed || !matches!(e.kind, ErrorKind::InvalidCursor | ErrorKind::InvalidParams)
}

/// How long a listing asks a mount that is in an outage (left out of an earlier listing and
/// not listed since): a quarter of the request timeout, at least one second.
fn outage_probe(timeout: Duration) -> Duration {
    (timeout / 4).max(Duration::from_secs(1))
}

/// The answer to a first listing page that could list no mount at all, every one it tried
/// having failed: their errors, rather than an empty list that looks like "nothing here".
fn none_listed(mut skipped: Vec<SkippedMount>) -> Error {
    if skipped.len() == 1 {
        return skipped.remove(0).error;
    }
    let kind = skipped[0].error.kind;
    let each: Vec<String> = skipped
        .iter()
        .map(|s| {
            format!(
                "{}: {}",
                s.mount,
                mcpr_core::redact_urls_in(&s.error.message)
            )
        })
        .collect();
    Error::new(
        kind,
        format!("no mount could be listed: {}", each.join("; ")),
    )
}

/// The first wait before a mount in an outage is asked again whether it is back; each
/// further wait doubles, up to [`RECOVERY_PROBE_MAX`].
const RECOVERY_PROBE_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two probes of a mount in an outage. Short, because a return is
/// noticed up to this late (plus a probe's own time): with half a minute, an upstream cut for
/// 30 s could be back for as long again before any client heard of it. A probe is one
/// first-entry listing (one small request to the source) per mount in an outage and replica,
/// every 4 s at most: little next to the requests the clients make.
const RECOVERY_PROBE_MAX: Duration = Duration::from_secs(4);

/// Ends the outage of `mount`, if it was in one: logged once, and every stream that hears
/// list changes of the mount told that its entries are back (they were left out of the
/// listings, named unavailable in their `_meta`). Each replica finds this on its own, so it
/// is told to this replica's streams only.
fn back_if_out(state: &ServerState, mount: &Mount) {
    if state.list_skips.listed(mount.index as usize) {
        tracing::info!(mount = %mount.name, "the mount lists again; listings include it");
        state.registry.list_changed_here(mount.index);
    }
}

/// Asks mount `index` for its first entry while it is in an outage: from one second apart,
/// doubling up to [`RECOVERY_PROBE_MAX`]. Each probe is bounded like a listing's ask of a
/// mount in an outage ([`outage_probe`]), not by the whole request timeout: against a source
/// that hangs, a probe would otherwise take that long each time (30 s by default) and its
/// return be noticed as late. When it answers, the outage ends ([`back_if_out`]). Ends when a
/// listing ended the outage first, or when the server is gone (it holds no strong reference
/// to it).
async fn probe_until_back(state: std::sync::Weak<ServerState>, index: usize) {
    let mut wait = RECOVERY_PROBE_FIRST;
    loop {
        tokio::time::sleep(wait).await;
        let Some(state) = state.upgrade() else {
            return;
        };
        if !state.list_skips.is_out(index) {
            return;
        }
        let Some(mount) = state.router.mounts().get(index) else {
            return;
        };
        let first = PageRequest {
            after: None,
            limit: 1,
        };
        let answer = Layered::new(mount, outage_probe(state.settings.request_timeout))
            .list(first)
            .await;
        if answer.is_ok() {
            back_if_out(&state, mount);
            return;
        }
        wait = (wait * 2).min(RECOVERY_PROBE_MAX);
    }
}

impl Service {
    /// The service over `state`.
    pub fn new(state: Arc<ServerState>) -> Self {
        Self { state }
    }

    /// The shared state it serves.
    pub fn state(&self) -> &Arc<ServerState> {
        &self.state
    }

    /// `mount`'s provider behind the layer every call goes through (capability check,
    /// request timeout).
    fn layered<'a>(&self, mount: &'a Mount) -> Layered<'a> {
        Layered::new(mount, self.state.settings.request_timeout)
    }

    /// The current change token of `uri` from the mount that owns it, through the layer, as
    /// the watching seam sees it (a cluster's shared mount: the token of the replica that
    /// watches it, where this one's provider has none).
    async fn change_token(&self, uri: &ResourceUri) -> Option<String> {
        let mount = self.state.router.route(uri)?;
        self.layered(mount)
            .change_token_via(self.state.registry.watching(), uri)
            .await
    }

    /// The mount owning `uri` if the caller may see it. A mount the caller's grant does not
    /// cover answers exactly like a missing one.
    fn visible_route(&self, grant: Option<&Grant>, uri: &ResourceUri) -> Option<&Mount> {
        self.state.router.route(uri).filter(|m| visible(grant, m))
    }

    /// One page of the resources a caller holding `grant` may see, across mounts in order,
    /// starting at `cursor` (from the previous page's [`ListPage::next_cursor`]).
    ///
    /// Waits first until any list watches being started are in place, so a change right
    /// after the listing is reported. A cursor that does not verify, or that names a mount or
    /// position this server does not have, is [`ErrorKind::InvalidCursor`].
    ///
    /// A mount whose source fails is left out and named in [`ListPage::skipped`] (see
    /// [`Service::gather`]); only a first page that could list no mount at all answers the
    /// failures as an error.
    pub async fn list(&self, grant: Option<&Grant>, cursor: Option<&str>) -> Result<ListPage> {
        metered(
            &self.state.metrics,
            "resources/list",
            self.list_with_skills(grant, cursor),
        )
        .await
    }

    async fn list_page(&self, grant: Option<&Grant>, cursor: Option<&str>) -> Result<ListPage> {
        let state = &self.state;
        state.registry.wait_list_ready().await;
        let start = match cursor {
            None => (0usize, None),
            Some(c) => self.decode_cursor(c)?,
        };
        let g = self.gather(grant, start, &|_| true).await?;
        if cursor.is_none() && g.next.is_none() && !g.listed && !g.skipped.is_empty() {
            return Err(none_listed(g.skipped));
        }
        Ok(ListPage {
            items: g.items,
            next_cursor: g.next.map(|n| self.encode_cursor(n)),
            // A page's own hints are stricter than its mount's, never looser: the
            // listing's hints stay the smallest of every mount's.
            hints: hints_for(
                grant,
                g.hints
                    .map_or(state.list_cache, |h| h.min(state.list_cache)),
            ),
            skipped: g.skipped,
        })
    }

    /// Mount `mount` answered a listing: the end of its outage, if it was in one.
    fn mount_listed(&self, mount: &Mount) {
        back_if_out(&self.state, mount);
    }

    /// Mount `mount` was left out of a listing for `e`: counted each time, logged once per
    /// outage (until it lists again).
    fn mount_skipped(&self, mount: &Mount, e: &Error) {
        if self.state.list_skips.skipped(mount.index as usize) {
            // Nobody may list again for a long time, and the clients that were told this
            // mount is unavailable should hear when it is back: it is asked on its own.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(probe_until_back(
                    Arc::downgrade(&self.state),
                    mount.index as usize,
                ));
            }
            tracing::warn!(
                mount = %mount.name,
                "listings leave this mount out until it answers (its reads fail too): {}",
                mcpr_core::redact_urls_in(&e.message)
            );
        }
    }

    /// Up to one page of entries from position `start` on, across the mounts that the caller
    /// may see and `wanted` keeps, and where the next page starts (`None` after the last).
    ///
    /// A mount whose list call fails ([`skips`]) is left out and the walk goes on with the
    /// next one: one source that is down must not take the others' entries with it. Left out
    /// while continuing inside it, the rest of that mount is skipped too, so the cursors
    /// always move forward (no entry twice, no loop) and the page says what is missing.
    async fn gather(
        &self,
        grant: Option<&Grant>,
        (mut idx, mut after): Position,
        wanted: &(dyn Fn(&Mount) -> bool + Sync),
    ) -> Result<Gathered> {
        let mounts = self.state.router.mounts();
        let page_size = self.state.settings.page_size;
        let timeout = self.state.settings.request_timeout;
        // One deadline for the whole walk: several mounts that hang must not each take the
        // request timeout in turn, so that the client gives up before any answer. The first
        // mount asked always gets the full timeout, so every page moves the cursor forward.
        let deadline = Instant::now() + timeout;
        let mut asked = false;
        let mut out = Gathered {
            items: Vec::with_capacity(page_size),
            next: None,
            skipped: Vec::new(),
            listed: false,
            hints: None,
        };
        while idx < mounts.len() {
            let mount = &mounts[idx];
            if !declares(mount, Op::List) || !visible(grant, mount) || !wanted(mount) {
                idx += 1;
                after = None;
                continue;
            }
            // The limit's source, named in a timeout error: a mount asked after others gets
            // only what the page has left, and saying "timed out after 995 ms (request_timeout)" of a
            // 1000 ms setting would send an operator looking for a setting nobody made.
            let (mut budget, mut setting) = if asked {
                (
                    deadline.saturating_duration_since(Instant::now()),
                    "what this page had left of request_timeout",
                )
            } else {
                (timeout, "request_timeout")
            };
            if budget.is_zero() {
                // Out of time: the next page starts at this mount, where this one stopped.
                out.next = Some((idx, after));
                break;
            }
            if self.state.list_skips.is_out(mount.index as usize) {
                // A mount already left out of a listing is asked again on every page (so its
                // recovery shows at once), but not for long: each page of a walk past it
                // would otherwise wait the full timeout again.
                let probe = outage_probe(timeout);
                if probe < budget {
                    budget = probe;
                    setting = "the probe of a mount left out of the last listing, a quarter of \
                               request_timeout and at least 1 s";
                }
            }
            asked = true;
            let resume = after.take();
            let resumed = resume.is_some();
            let listed = Layered::bounded_by(mount, budget, setting)
                .list(PageRequest {
                    after: resume,
                    limit: page_size - out.items.len(),
                })
                .await;
            let page = match listed {
                Ok(page) => page,
                Err(e) if skips(&e, resumed) => {
                    self.mount_skipped(mount, &e);
                    out.skipped.push(SkippedMount {
                        mount: mount.name.to_string(),
                        error: e,
                        partial: resumed,
                    });
                    idx += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.mount_listed(mount);
            out.listed = true;
            out.items.extend(page.items);
            if let Some(h) = page.hints {
                out.hints = Some(out.hints.map_or(h, |o| o.min(h)));
            }
            if let Some(pos) = page.next {
                out.next = Some((idx, Some(pos)));
                break;
            }
            idx += 1;
            if out.items.len() >= page_size {
                if idx < mounts.len() {
                    out.next = Some((idx, None));
                }
                break;
            }
        }
        Ok(out)
    }

    /// The signed cursor that resumes at `position`.
    fn encode_cursor(&self, (mount, after): Position) -> String {
        match after {
            None => self.tagged_cursor(mount as u32, AT_START, &[]),
            Some(pos) => self.tagged_cursor(mount as u32, AFTER, &[&pos]),
        }
    }

    /// The resources a caller holding `grant` may see whose URI starts with `prefix` (if
    /// given) and that `keep` accepts, walked from `cursor` as [`Service::list`] walks them,
    /// but with a bounded amount of work per call: at most [`SCAN_MAX_PAGES`] listing pages
    /// and about [`SCAN_MAX_TIME`], stopping early once a page's worth has matched. The
    /// answer's cursor continues the walk (it is an ordinary listing cursor); a page may hold
    /// no match and still have a next cursor.
    ///
    /// Mounts none of whose URI prefixes can hold a URI starting with `prefix` are skipped
    /// without being listed; mounts whose source fails are left out as [`Service::list`]
    /// leaves them out, and named in [`ScanPage::skipped`]. The tool bridge's `list_resources` with a prefix and
    /// `search_resources` are this walk. Under a `skill://` prefix (when a mount carries
    /// skills) the walk is over the files of the skills the caller may see instead, each
    /// skill's `SKILL.md` named and described by its frontmatter.
    pub async fn scan(
        &self,
        grant: Option<&Grant>,
        cursor: Option<&str>,
        prefix: Option<&str>,
        keep: &(dyn Fn(&ResourceMeta) -> bool + Sync),
    ) -> Result<ScanPage> {
        self.scan_as("resources/list", grant, cursor, prefix, keep)
            .await
    }

    /// [`Service::scan`] for a search (the tool bridge's `search_resources`): the same walk,
    /// counted in the metrics as `search_resources`, not as a listing.
    pub async fn search(
        &self,
        grant: Option<&Grant>,
        cursor: Option<&str>,
        prefix: Option<&str>,
        keep: &(dyn Fn(&ResourceMeta) -> bool + Sync),
    ) -> Result<ScanPage> {
        self.scan_as("search_resources", grant, cursor, prefix, keep)
            .await
    }

    /// The walk of [`Service::scan`], metered as `method`.
    async fn scan_as(
        &self,
        method: &'static str,
        grant: Option<&Grant>,
        cursor: Option<&str>,
        prefix: Option<&str>,
        keep: &(dyn Fn(&ResourceMeta) -> bool + Sync),
    ) -> Result<ScanPage> {
        metered(&self.state.metrics, method, async {
            if let Some(prefix) = prefix.filter(|p| self.is_skills_prefix(p)) {
                return self.scan_skills(grant, cursor, prefix, keep).await;
            }
            let state = &self.state;
            state.registry.wait_list_ready().await;
            let mut at = match cursor {
                None => Some((0usize, None)),
                Some(c) => Some(self.decode_cursor(c)?),
            };
            let wanted = |m: &Mount| {
                prefix.is_none_or(|p| {
                    m.provider
                        .info()
                        .uri_prefixes
                        .iter()
                        .any(|mp| mp.starts_with(p) || p.starts_with(mp.as_str()))
                })
            };
            let began = Instant::now();
            let page_size = state.settings.page_size;
            let (mut items, mut examined, mut pages) = (Vec::new(), 0usize, 0usize);
            let (mut skipped, mut listed) = (Vec::new(), false);
            while let Some(start) = at.take() {
                let resume = start.clone();
                let g = match self.gather(grant, start, &wanted).await {
                    Ok(found) => found,
                    // Matches already found are not lost to an error that is not a mount's
                    // outage (those are skipped inside `gather`): the cursor stays before it,
                    // so the next call reports it.
                    Err(_) if pages > 0 => {
                        at = Some(resume);
                        break;
                    }
                    Err(e) => return Err(e),
                };
                pages += 1;
                examined += g.items.len();
                listed |= g.listed;
                skipped.extend(g.skipped);
                // Described before `keep` looks, so a search by a skill's name or
                // description finds its SKILL.md.
                let mut found = g.items;
                self.describe_skill_files(grant, &mut found).await?;
                items.extend(
                    found
                        .into_iter()
                        .filter(|r| prefix.is_none_or(|p| r.uri.starts_with(p)) && keep(r)),
                );
                at = g.next;
                if items.len() >= page_size
                    || pages >= SCAN_MAX_PAGES
                    || began.elapsed() >= SCAN_MAX_TIME
                {
                    break;
                }
            }
            if cursor.is_none() && at.is_none() && !listed && !skipped.is_empty() {
                return Err(none_listed(skipped));
            }
            Ok(ScanPage {
                items,
                next_cursor: at.map(|at| self.encode_cursor(at)),
                examined,
                skipped,
            })
        })
        .await
    }

    /// The signed cursor of mount `mount` whose position is `tag` then `parts`, in order.
    fn tagged_cursor(&self, mount: u32, tag: u8, parts: &[&[u8]]) -> String {
        let mut position = Vec::with_capacity(1 + parts.iter().map(|p| p.len()).sum::<usize>());
        position.push(tag);
        for p in parts {
            position.extend_from_slice(p);
        }
        self.state.codec.encode(&PageCursor { mount, position })
    }

    /// `cursor`'s mount and its position after `tag`; `None` when it is this server's but
    /// continues another walk, invalid when it is not this server's.
    fn open_cursor(&self, cursor: &str, tag: u8) -> Result<Option<(u32, Vec<u8>)>> {
        let pc = self
            .state
            .codec
            .decode(cursor)
            .map_err(|e| invalid_cursor(&e.to_string()))?;
        Ok(match pc.position.split_first() {
            Some((&t, rest)) if t == tag => Some((pc.mount, rest.to_vec())),
            _ => None,
        })
    }

    /// `cursor` as (mount index, provider position to resume after).
    fn decode_cursor(&self, cursor: &str) -> Result<Position> {
        let pc = self
            .state
            .codec
            .decode(cursor)
            .map_err(|e| invalid_cursor(&e.to_string()))?;
        if pc.mount as usize >= self.state.router.mounts().len() {
            return Err(invalid_cursor("it names a mount this server does not have"));
        }
        let after = match pc.position.split_first() {
            Some((&AT_START, [])) => None,
            Some((&AFTER, rest)) => Some(rest.to_vec()),
            _ => return Err(invalid_cursor("unknown position")),
        };
        Ok((pc.mount as usize, after))
    }

    /// The URI templates of every mount a caller holding `grant` may see.
    pub async fn templates(&self, grant: Option<&Grant>) -> Result<TemplateList> {
        metered(&self.state.metrics, "resources/templates/list", async {
            let templates = self
                .state
                .router
                .mounts()
                .iter()
                .filter(|m| visible(grant, m))
                .flat_map(|m| self.layered(m).templates().to_vec())
                .collect();
            Ok(TemplateList {
                templates,
                hints: hints_for(grant, self.state.list_cache),
            })
        })
        .await
    }

    /// Read `uri` for a caller holding `grant` (`None` over stdio, or HTTP without
    /// authentication). A URI of a mount the caller may not see is not found, like one no
    /// mount owns; a mount that does not declare reads answers [`ErrorKind::Unsupported`].
    ///
    /// With [`Service::read_now`], the service's one read entry point, in the two forms the
    /// provider's read has ([`mcpr_core::Provider::read`], [`mcpr_core::Provider::read_now`]):
    /// one function cannot be both a future and a plain call, and the direct paths run the
    /// in-place try and the wait in different places (a watched thread, then a task).
    pub async fn read(&self, grant: Option<&Grant>, uri: &str) -> Result<ReadOutcome> {
        let read = metered(
            &self.state.metrics,
            "resources/read",
            self.read_any(grant, uri),
        );
        tokio::select! {
            // The read first: a small file's read completes on its first poll, and the
            // shutdown token then costs nothing (no random pick, no waiter registered).
            biased;
            r = read => r,
            () = self.state.reads_cut.cancelled() => Err(Error::new(
                ErrorKind::Unavailable,
                "the server is shutting down: this read was still running when the shutdown \
                 grace period (shutdown_grace_ms) ended; try again",
            )
            .with_uri(uri)),
        }
    }

    /// [`Service::read`] done in place, when it can finish without waiting: the same answer
    /// and the same metrics, or `None` when `read` must be called (the provider would wait,
    /// the read budget is spent, the URI names a skill). A small file's read costs no future
    /// this way (see [`mcpr_core::Provider::read_now`]). What `read` adds around it needs no
    /// future either: a read that is done at once is never cut off by the request timeout
    /// or by shutdown, there as here. The timeout cannot interrupt a read running on the
    /// calling thread, so providers answer in place only reads that cannot hang (a small
    /// file on a local file system); anything on a network or FUSE file system waits for
    /// `read`, bounded there. A panic in the provider fails this read alone.
    pub(crate) fn read_now(&self, grant: Option<&Grant>, raw: &str) -> Option<Result<ReadOutcome>> {
        // A skill's URI is looked up in its catalog, which may wait.
        if self.state.skills.is_some() && raw.starts_with(crate::skills::catalog::SKILL_SCHEME) {
            return None;
        }
        let start = Instant::now();
        // A panic in the provider fails this read alone, as `read`'s does (see `metered`).
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let (uri, mount) = match self.read_route(grant, raw) {
                Ok(routed) => routed,
                Err(e) => return Some(Err(e)),
            };
            let settings = &self.state.settings;
            // A budget spent is waited for, by `read`.
            let _held = self
                .state
                .read_budget
                .try_reserve(settings.max_read_bytes)?;
            let read = self.layered(mount).read_now(&uri, &read_limits(settings))?;
            Some(read.map(|out| read_outcome(grant, mount, out)))
        }))
        .unwrap_or_else(|_| Some(Err(crate::layers::panicked("resources/read").with_uri(raw))))?;
        crate::layers::record(&self.state.metrics, "resources/read", start, &read);
        Some(read)
    }

    async fn read_uri(&self, grant: Option<&Grant>, raw: &str) -> Result<ReadOutcome> {
        let (uri, mount) = self.read_route(grant, raw)?;
        let settings = &self.state.settings;
        // The most this read can bring into memory, held while its provider runs.
        let _held = self
            .state
            .read_budget
            .reserve(settings.max_read_bytes, settings.request_timeout)
            .await?;
        let out = self
            .layered(mount)
            .read(&uri, &read_limits(settings))
            .await?;
        Ok(read_outcome(grant, mount, out))
    }

    /// `raw` parsed and routed to the mount a caller holding `grant` reads it from: where
    /// [`Service::read_uri`] and [`Service::read_now`] start. A mount that does not
    /// declare reads refuses here, before the read takes any of the budget, as the layer
    /// would refuse it.
    fn read_route(&self, grant: Option<&Grant>, raw: &str) -> Result<(ResourceUri, &Mount)> {
        let uri = parse_uri(raw)?;
        let mount = self
            .visible_route(grant, &uri)
            .ok_or_else(|| Error::not_found(uri.as_str()))?;
        self.layered(mount).check(Op::Read, Some(&uri))?;
        Ok((uri, mount))
    }

    /// Suggestions for `argument` of `reference`, given what the user typed (`value`) and
    /// the arguments already resolved (`context`).
    ///
    /// A template no visible mount advertises is invalid params; a template whose mount does
    /// not declare completion answers [`ErrorKind::Unsupported`], like any other undeclared
    /// operation, rather than an empty list that would look like "nothing matches". At most
    /// [`MAX_COMPLETION_VALUES`] values come back, and `total` is always set, so a client
    /// can tell "nothing matched" from "unknown".
    pub async fn complete(
        &self,
        grant: Option<&Grant>,
        reference: CompletionRef<'_>,
        argument: &str,
        value: &str,
        context: BTreeMap<String, String>,
    ) -> Result<Completion> {
        metered(&self.state.metrics, "completion/complete", async {
            let CompletionRef::Template(template) = reference else {
                return Err(Error::invalid_params(
                    "this server has no prompts; complete ref/resource templates",
                ));
            };
            let mount = self
                .state
                .router
                .route_template(template)
                .filter(|m| visible(grant, m))
                .ok_or_else(|| {
                    Error::invalid_params(format!(
                        "no resource template {template:?}; see resources/templates/list"
                    ))
                })?;
            // An argument the template does not have can never complete: say so, rather
            // than an empty list that reads as "nothing starts with that".
            if let Ok(parsed) = mcpr_core::template::UriTemplate::parse(template) {
                let names = parsed.variables();
                if !names.contains(&argument) {
                    return Err(Error::invalid_params(format!(
                        "the template {template:?} has no argument {argument:?}; its arguments \
                         are {}",
                        names.join(", ")
                    )));
                }
            }
            let mut done = self
                .layered(mount)
                .complete(CompletionRequest {
                    template: template.to_owned(),
                    argument: argument.to_owned(),
                    value: value.to_owned(),
                    context,
                })
                .await?;
            done.values.truncate(MAX_COMPLETION_VALUES);
            done.total = Some(done.total.unwrap_or(done.values.len() as u32));
            Ok(done)
        })
        .await
    }

    /// Register a subscriber for a caller holding `grant`: its notices arrive on the
    /// receiver, list changes only of mounts the caller may see, until the [`Subscriber`] is
    /// dropped.
    pub fn add_subscriber(&self, grant: Option<&Grant>) -> (Subscriber, crate::mailbox::Receiver) {
        let registry = self.state.registry.clone();
        let (id, rx) = registry.add_scoped_subscriber(visible_mounts(&self.state.router, grant));
        (Subscriber { registry, id }, rx)
    }

    /// Subscribe to changes of `uri` for a caller holding `grant`. `subscriber` gives the
    /// subscriber id; it is called only once the URI is known to be one the caller may see,
    /// so a refused subscribe registers nothing. A subscriber holds at most
    /// `max_subscriptions_per_session` URIs; one more is invalid params naming the limit.
    pub async fn subscribe(
        &self,
        grant: Option<&Grant>,
        uri: &str,
        subscriber: impl FnOnce() -> u64,
    ) -> Result<()> {
        metered(&self.state.metrics, "resources/subscribe", async {
            let name = parse_uri(uri)?;
            let uri = self.watched_uri(grant, &name).await?;
            if self
                .state
                .router
                .route(&uri)
                .is_some_and(|m| !visible(grant, m))
            {
                return Err(Error::not_found(name.as_str()));
            }
            let id = subscriber();
            let registry = &self.state.registry;
            let max = self.state.settings.max_subscriptions_per_session;
            if !registry.is_subscribed(id, name.as_str()) && registry.subscription_count(id) >= max
            {
                return Err(too_many_subscriptions(max, name.as_str()));
            }
            registry.subscribe_as(id, name.as_str(), &uri).await
        })
        .await
    }

    /// Subscribe roaming legacy session `session` to `uri`: checked as
    /// [`Service::subscribe`] checks it (the caller may see it, its mount watches, the
    /// per-session limit), then recorded in `hub`, whose holder of the session's stream
    /// watches it.
    pub async fn subscribe_recorded(
        &self,
        grant: Option<&Grant>,
        uri: &str,
        hub: &(impl SubscriptionRecord + ?Sized),
        session: &str,
    ) -> Result<()> {
        metered(&self.state.metrics, "resources/subscribe", async {
            let name = parse_uri(uri)?;
            let target = self.watched_uri(grant, &name).await?;
            let uri = name;
            let mount = self
                .state
                .router
                .route(&target)
                .filter(|m| visible(grant, m))
                .ok_or_else(|| Error::not_found(uri.as_str()))?;
            self.layered(mount).check(Op::Watch, Some(&target))?;
            let held = hub.subscriptions(session).await.map_err(hub_error)?;
            let max = self.state.settings.max_subscriptions_per_session;
            let new = !held.iter().any(|u| u == uri.as_str());
            if new && held.len() >= max {
                return Err(too_many_subscriptions(max, uri.as_str()));
            }
            if new {
                // Start the watch once here, as a local subscription would, and let it go:
                // a URI the source refuses to watch (missing, denied) is refused to this
                // client now, not accepted and then silent on whichever replica holds the
                // stream.
                let registry = &self.state.registry;
                let (probe, _rx) = registry.add_subscriber();
                let watched = registry.subscribe(probe, &target).await;
                registry.remove(probe);
                watched?;
            }
            hub.set_subscription(session, uri.as_str(), true)
                .await
                .map_err(hub_error)?;
            Ok(())
        })
        .await
    }

    /// Remove `uri` from roaming session `session`'s recorded subscriptions.
    pub async fn unsubscribe_recorded(
        &self,
        uri: &str,
        hub: &(impl SubscriptionRecord + ?Sized),
        session: &str,
    ) -> Result<()> {
        metered(&self.state.metrics, "resources/unsubscribe", async {
            hub.set_subscription(session, uri, false)
                .await
                .map_err(hub_error)?;
            Ok(())
        })
        .await
    }

    /// Stop telling subscriber `id` about `uri`; the provider watch ends with its last
    /// subscriber. Unsubscribing from something never subscribed is not an error.
    pub async fn unsubscribe(&self, id: u64, uri: &str) -> Result<()> {
        metered(&self.state.metrics, "resources/unsubscribe", async {
            self.state.registry.unsubscribe(id, uri);
            Ok(())
        })
        .await
    }

    /// Whether any mount reports list changes (what `listChanged` announces).
    pub fn reports_list_changes(&self) -> bool {
        self.state
            .router
            .mounts()
            .iter()
            .any(|m| declares(m, Op::WatchList))
    }

    /// Register subscriber `id` for list changes and return at once; the list watches, if
    /// nobody holds them yet, start in the background, and [`Service::list`] waits for them.
    /// For a legacy session, which registers while answering `initialize`, so that no change
    /// after its first listing can be missed.
    pub fn listen_for_list_changes(&self, id: u64) {
        if self.state.registry.register_list_listener(id) {
            let registry = self.state.registry.clone();
            tokio::spawn(async move { registry.acquire_list_watches().await });
        }
        self.watch_skills();
    }

    /// `uri` parsed, with its mount, if a listen accepts it: its mount declares watching.
    fn listenable(&self, uri: &str) -> Option<(ResourceUri, &Mount)> {
        let parsed = ResourceUri::parse(uri).ok()?;
        let parsed = self.known_skill_target(&parsed).unwrap_or(parsed);
        let mount = self
            .state
            .router
            .route(&parsed)
            .filter(|m| declares(m, Op::Watch))?;
        Some((parsed, mount))
    }

    /// Stash in `tokens` the current change token of each of `uris` that
    /// [`Service::accept_listen`] will accept, before the acknowledgment of that listen goes
    /// out: a client may change a resource the moment it sees the acknowledgment, before
    /// [`Service::listen`] has a watch in place, and `listen` compares against these.
    ///
    /// Tokens come from the providers through the layer (asynchronously: for files a `stat`
    /// on the blocking pool), which is why this is apart from the synchronous
    /// `accept_listen` that rmcp's `accepted_subscription_filter` calls.
    pub async fn prepare_listen(&self, uris: &[String], tokens: &ChangeTokens) {
        let max = self.state.settings.max_subscriptions_per_session;
        // All at once: each token is bounded by the request timeout, and so, together, are
        // they, however many URIs a listen names.
        // A skill URI the catalog has not seen yet (no listing since the start) is looked
        // up first, so the acknowledgment, which consults only the last listing, keeps it.
        if uris.iter().take(max).any(|u| {
            u.starts_with(crate::skills::catalog::SKILL_SCHEME)
                && ResourceUri::parse(u)
                    .ok()
                    .is_some_and(|p| self.known_skill_target(&p).is_none())
        }) && let Some(catalog) = &self.state.skills
        {
            // A walk that failed leaves the URI unknown here; the listen then refuses it.
            let _ = catalog.shared().await;
        }
        let taken = futures::future::join_all(uris.iter().take(max).filter_map(|u| {
            let (target, mount) = self.listenable(u)?;
            let name = ResourceUri::parse(u).ok()?;
            Some(async move {
                let token = self
                    .layered(mount)
                    .change_token_via(self.state.registry.watching(), &target)
                    .await;
                (name, token)
            })
        }))
        .await;
        for (name, token) in taken {
            tokens.stash(&name, token);
        }
    }

    /// Which of `uris` a listen about to be acknowledged will watch: at most
    /// `max_subscriptions_per_session` of them, owned by a mount that declares watching; the
    /// rest are removed, so the acknowledgment tells the client what is honoured. Their
    /// change tokens were taken by [`Service::prepare_listen`].
    pub fn accept_listen(&self, uris: &mut Vec<String>) {
        uris.truncate(self.state.settings.max_subscriptions_per_session);
        uris.retain(|u| self.listenable(u).is_some());
    }

    /// Start a listen for a caller holding `grant`, known as `client` (`None` for the one
    /// peer of stdio): watch `uris` (as accepted by [`Service::accept_listen`], with `tokens`
    /// from [`Service::prepare_listen`]) and, with `list_changed`, the list.
    ///
    /// Refused, with an error naming the setting, when `client` already holds
    /// `max_listen_streams_per_client` listens, or when watching `uris` would take the server
    /// past `max_watches` subscriptions.
    ///
    /// A URI of a mount the caller may not see is never watched (the acknowledgment went out
    /// before the grant could be consulted). Each URI whose change token differs from the
    /// one taken at acceptance starts the listen with an update notice, and a listen that
    /// had to start the list watches with one list-changed notice, because creations during
    /// the start-up walk cannot be seen.
    ///
    /// Counted as `subscriptions/listen`, with the time to set the stream up (not how long
    /// it then stays open).
    pub async fn listen(
        &self,
        grant: Option<&Grant>,
        client: Option<&Identity>,
        uris: &[String],
        list_changed: bool,
        tokens: &ChangeTokens,
    ) -> Result<Listen> {
        metered(
            &self.state.metrics,
            "subscriptions/listen",
            self.start_listen(grant, client, uris, list_changed, tokens),
        )
        .await
    }

    async fn start_listen(
        &self,
        grant: Option<&Grant>,
        client: Option<&Identity>,
        uris: &[String],
        list_changed: bool,
        tokens: &ChangeTokens,
    ) -> Result<Listen> {
        let registry = &self.state.registry;
        let max_streams = self.state.settings.max_listen_streams_per_client;
        let slot = registry.open_listen(client.map_or("stdio", Identity::as_str), max_streams)?;
        // The tokens stashed for a refused listen expire unclaimed.
        if uris.len() > registry.watch_budget_left() {
            return Err(over_budget(self.state.settings.max_watches));
        }
        let (subscriber, notices) = self.add_subscriber(grant);
        let id = subscriber.id();
        let router = &self.state.router;
        let mut before = Vec::new();
        for uri in uris {
            let Ok(name) = ResourceUri::parse(uri) else {
                continue;
            };
            let token = tokens.take(&name);
            let Ok(parsed) = self.watched_uri(grant, &name).await else {
                continue;
            };
            if router.route(&parsed).is_some_and(|m| !visible(grant, m)) {
                continue;
            }
            let token = match token {
                Some(t) => t,
                None => self.change_token(&parsed).await,
            };
            before.push((name, parsed, token));
        }
        let fresh_list = list_changed && registry.add_list_listener(id).await;
        if list_changed {
            self.watch_skills();
        }
        let mut initial = VecDeque::new();
        for (name, parsed, token) in before {
            if let Err(e) = registry.subscribe_as(id, name.as_str(), &parsed).await {
                // Others took the budget meanwhile: the whole listen is refused (dropping the
                // subscriber releases what it got), never a part passed off as the whole.
                if is_over_budget(&e) {
                    return Err(e);
                }
                tracing::debug!(uri = %parsed, error = %e, "listen: cannot watch");
                continue;
            }
            if token.is_some() && self.change_token(&parsed).await != token {
                initial.push_back(Notice::Updated(name.as_str().to_owned()));
            }
        }
        if fresh_list {
            initial.push_back(Notice::ListChanged);
        }
        Ok(Listen {
            subscriber,
            _slot: slot,
            initial,
            notices,
        })
    }
}
