//! The catalog: skills found under the `skills` folders of mounts, through the providers'
//! own operations (directory reads, reads, change tokens), so files, git and s3 mounts
//! behave alike and every rule of a mount (sandbox, deny, hidden, size limit) applies to its
//! skills without a line here.
//!
//! A skill is a folder holding a `SKILL.md`; its manifest is every file under the folder
//! that the mount serves, with a `sha256:` digest and size. Digests (and parsed
//! frontmatters) are cached by the file's fingerprint (its change token, else size and
//! modification time), so a second listing of unchanged skills hashes nothing.
//!
//! The skills a walk found are kept per source, and reused while nothing changed: before a
//! walk reads a folder it has the mount watch it (a git mount's tree at the ref is watched
//! once, at the skills folder, which covers every file below), and any change the watches
//! report marks the source for a new walk. A source whose mount cannot watch a folder (s3,
//! whose folders are key prefixes) keeps its walk for the mount's `poll_interval_ms`, the
//! time the mount itself takes to look again. Callers that come while a walk runs wait for
//! it and share its result, and a walk is bounded in provider requests and in time. A new
//! walk that finds a different set of skills tells the registry, which sends
//! `notifications/resources/list_changed` to the streams that listen.
//!
//! A caller sees the skills of the mounts it may see, and nothing else: views are merged per
//! set of visible sources, so two mounts' skills of one URI are settled among the mounts the
//! caller sees, and a skill of a hidden mount neither answers nor hides another.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use std::time::{Duration, Instant};

use futures::FutureExt as _;
use mcpr_core::sync::lock;
use mcpr_core::{
    ChangeBus, ChangeEvent, ChangeFeed, ChangeSink, ContentsBody, DIRECTORY_MIME_TYPE, Error,
    ErrorKind, Limit, LocalWatching, PageRequest, ReadLimits, ResourceMeta, ResourceUri, Result,
    WatchGuard,
};

use crate::layers::Layered;
use crate::router::Mount;
use rmcp::model::{SKILL_MD, Skill, SkillFrontmatter, SkillResource, SkillResources};

/// The URI scheme of skills.
pub const SKILL_SCHEME: &str = "skill://";
/// The most files one skill may hold (the spec's limit); a larger one is left out.
pub const MAX_SKILL_FILES: usize = 512;
/// The most bytes one skill may hold (the spec's limit); a larger one is left out.
pub const MAX_SKILL_BYTES: u64 = 16 * 1024 * 1024;
/// The most directories one discovery walks per source: a skills folder is a catalog, not
/// a whole file system; past this the rest of the folder is not searched (and it is logged).
pub const MAX_WALK_DIRS: usize = 20_000;
/// The deepest folder a discovery or a manifest descends to.
pub const MAX_WALK_DEPTH: usize = 16;
/// The most provider requests (directory pages and file reads) one walk of a source makes:
/// past this the walk fails as a whole rather than answer with part of the folder. A first
/// walk of 1,000 skills of 5 files in two folders each makes about 9,000 (each folder a
/// page and its details, each file a read).
pub const MAX_WALK_REQUESTS: usize = 50_000;
/// The longest one walk of a source may take, all its requests together.
pub const MAX_WALK_TIME: Duration = Duration::from_secs(60);
/// The most views (sets of visible sources) kept merged at once; past this they are merged
/// again as asked.
const MAX_VIEWS: usize = 64;
/// Entries per directory-read page the catalog asks for.
const DIR_PAGE: usize = 1000;

/// One mount's skills folder.
pub struct SkillSource {
    /// The mount's name, for logs.
    pub mount: String,
    /// The mount's index in the router (scopes apply per mount).
    pub index: u32,
    /// The mount, whose provider the catalog calls through the server's one layer
    /// ([`Layered`]: capability check, request timeout, call counts).
    pub at: Mount,
    /// The URI of the skills folder in the mount, as a directory read takes it.
    pub root: String,
    /// Segments put before every skill path of this source (`skills_prefix`), without
    /// slashes at the ends; empty for none.
    pub prefix: String,
    /// The mount publishes skills of its own ([`mcpr_core::Provider::relayed_skills`]: a
    /// gateway mount relaying its upstream's) rather than holding a folder to walk; `root`
    /// then only names the mount in reports.
    pub relay: bool,
}

/// One file of a skill's manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// Its `skill://` URI.
    pub uri: String,
    /// The URI of the mount's resource that holds its bytes.
    pub target: String,
    /// `sha256:` and 64 hex digits.
    pub digest: String,
    /// Bytes.
    pub size: u64,
    /// Its permission bits (`0o777` at most), when the mount knows them (files: the file's
    /// mode; git: `100755` or `100644`).
    pub mode: Option<u32>,
}

/// The `_meta` key of a skill entry that carries its files' modes: an object from each file's
/// `skill://` URI to its permission bits as a JSON integer (`493` for `0o755`). On the skill
/// entry, not on each file's: rmcp's manifest entry (`SkillResource`) has no `_meta` of its
/// own, and a client parsing it would drop one.
pub const MODE_META: &str = "io.github.mcp-resources/mode";

/// A file of a skill's folder that the mount does not serve, so the skill's manifest lacks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotPublished {
    /// The `SKILL.md` URI of the skill.
    pub skill: String,
    /// The file's path inside the skill's folder (a folder's ends in `/`), or, for those past
    /// the bound, how many more.
    pub file: String,
    /// The rule that leaves it out.
    pub reason: String,
}

/// One valid skill.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillEntry {
    /// The `skill://…/SKILL.md` URI.
    pub uri: String,
    /// Index of its source.
    pub source: usize,
    /// Its parsed frontmatter.
    pub frontmatter: SkillFrontmatter,
    /// Every file, `SKILL.md` included, sorted by URI.
    pub files: Vec<SkillFile>,
}

impl SkillEntry {
    /// As rmcp's `Skill` (the manifest of its files).
    pub fn to_skill(&self) -> Skill {
        let skill = Skill::new(
            self.uri.clone(),
            self.frontmatter.clone(),
            SkillResources::Files(
                self.files
                    .iter()
                    .map(|f| SkillResource::new(f.uri.clone(), f.digest.clone(), f.size))
                    .collect(),
            ),
        );
        let modes: serde_json::Map<String, serde_json::Value> = self
            .files
            .iter()
            .filter_map(|f| Some((f.uri.clone(), f.mode?.into())))
            .collect();
        if modes.is_empty() {
            return skill;
        }
        let mut meta = rmcp::model::MetaObject::new();
        meta.0.insert(MODE_META.to_owned(), modes.into());
        skill.with_meta(meta)
    }
}

/// What a cached file was when it was hashed.
#[derive(Clone)]
struct Hashed {
    fingerprint: String,
    digest: String,
    size: u64,
    /// For a `SKILL.md`: its frontmatter, or why it is not one.
    frontmatter: Option<std::result::Result<SkillFrontmatter, String>>,
}

/// Counters the catalog keeps for `/metrics` and tests.
#[derive(Debug, Default)]
pub struct CatalogStats {
    /// Files read and hashed (a warm listing adds none).
    pub hashed: AtomicU64,
    /// Skills left out (invalid frontmatter, too large, unreadable), counted per listing.
    pub invalid: AtomicU64,
    /// Skill URIs two sources both produced (the first source's skill kept).
    pub collisions: AtomicU64,
    /// Walks of a source's skills folder (a warm listing of a watched source adds none).
    pub walks: AtomicU64,
}

impl CatalogStats {
    /// Append the catalog's counters in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        for (name, help, v) in [
            (
                "mcp_skills_invalid_total",
                "Skills left out of skills/list (invalid SKILL.md, over the spec's limits, unreadable), once per walk that met them.",
                &self.invalid,
            ),
            (
                "mcp_skills_collisions_total",
                "Skill URIs served by two mounts; the first mount's skill is kept.",
                &self.collisions,
            ),
            (
                "mcp_skills_files_hashed_total",
                "Skill files read and hashed for a manifest (unchanged files are not hashed again).",
                &self.hashed,
            ),
            (
                "mcp_skills_walks_total",
                "Walks of a mount's skills folder (a listing while nothing changed walks none).",
                &self.walks,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
    }
}

/// What the last walk of a source found, kept while its watches report no change.
struct Walked {
    /// The source's generation when the walk started: a change reported during the walk
    /// makes the next listing walk again.
    generation: u64,
    /// Which walk of the source this was (1 for the first): a caller that came before it
    /// started takes its result as its own.
    seq: u64,
    /// When it ended.
    done: Instant,
    /// Its valid skills (before collisions with other sources are settled), or why the
    /// walk failed when no earlier walk had an answer.
    skills: Result<Arc<Vec<SkillEntry>>>,
    /// The watches of every folder the walk read; `None` when the mount could not watch
    /// one (then this walk is reused only for the mount's poll interval).
    guards: Option<Vec<WatchGuard>>,
    /// The skills it left out, each file with the reason.
    left_out: Vec<(String, String)>,
    /// Files of its skills' folders that the mount does not serve.
    not_published: Vec<NotPublished>,
    /// Why the skills folder itself could not be read, when it could not.
    error: Option<String>,
}

/// What one walk of a source found: its valid skills, the skills it left out (each file with
/// the reason), and why the skills folder itself could not be read, when it could not.
struct WalkFound {
    skills: Vec<SkillEntry>,
    left_out: Vec<(String, String)>,
    not_published: Vec<NotPublished>,
    error: Option<String>,
}

/// What the last walk of one source found: for `check-config`, and the start-up warnings
/// of a folder that holds no skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceReport {
    /// The mount's name.
    pub mount: String,
    /// The URI of its skills folder.
    pub root: String,
    /// The `SKILL.md` URI of each valid skill, in the order found.
    pub skills: Vec<String>,
    /// Each skill left out: its file and why.
    pub left_out: Vec<(String, String)>,
    /// Files of valid skills' folders that the mount's rules (deny list, hidden files,
    /// ignore files) leave out of their manifests: a pull will not have them.
    pub not_published: Vec<NotPublished>,
    /// Why the skills folder could not be read (missing, a file, a ref that does not
    /// resolve); then it has no skills.
    pub error: Option<String>,
}

/// One source's walk cache.
#[derive(Default)]
struct SourceState {
    /// Bumped by every change a watch of the source reports.
    generation: Arc<AtomicU64>,
    /// Walks started so far.
    started: AtomicU64,
    /// The last walk; one walk at a time per source, and the callers that wait meanwhile
    /// take its result.
    walked: tokio::sync::Mutex<Option<Walked>>,
}

/// The skills of some sources merged, with the sources' walks they came from: while every
/// source answers with the same walk, the merge is the answer and nothing is copied.
struct View {
    from: Vec<Arc<Vec<SkillEntry>>>,
    merged: Arc<Vec<SkillEntry>>,
}

/// The bus the catalog's own watches publish on: not the server's change bus (nothing here
/// is for subscribers, and in a cluster every replica keeps its own catalog), just a mark
/// that the source changed and a wake-up for the task that looks again.
struct Invalidate {
    generation: Arc<AtomicU64>,
    wake: Arc<tokio::sync::Notify>,
}

impl ChangeBus for Invalidate {
    fn publish(&self, _mount: &str, _event: ChangeEvent) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_one();
    }

    fn feed(&self) -> ChangeFeed {
        // Nobody reads this bus's events, only the marks `publish` leaves.
        ChangeFeed::new().0
    }

    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ChangeEvent> {
        tokio::sync::broadcast::channel(1).1
    }
}

/// Told which mount (by index) had skills appear or disappear.
type ListChanged = Box<dyn Fn(u32) + Send + Sync>;

/// The skills of every source, their manifests and the digest cache.
pub struct Catalog {
    sources: Vec<SkillSource>,
    states: Vec<SourceState>,
    /// Woken by the sources' watches.
    wake: Arc<tokio::sync::Notify>,
    /// Who hears of skills appearing or disappearing (the registry, see
    /// [`Catalog::start`]).
    on_list_changed: OnceLock<ListChanged>,
    /// Set when the catalog goes, for the task of [`Catalog::start`].
    closed: AtomicBool,
    read_limit: u64,
    timeout: Duration,
    /// Provider requests one walk may make.
    walk_requests: usize,
    /// Time one walk may take.
    walk_time: Duration,
    cache: Mutex<HashMap<String, Hashed>>,
    warned: Mutex<HashSet<String>>,
    /// The last listing of every source, for resolving `skill://` URIs without walking again.
    snapshot: Mutex<Arc<Vec<SkillEntry>>>,
    /// The merged views, by which sources they hold.
    views: Mutex<HashMap<Vec<bool>, View>>,
    /// Counters.
    pub stats: CatalogStats,
}

impl Drop for Catalog {
    fn drop(&mut self) {
        // Ends the task of `start`, which finds the catalog gone.
        self.closed.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }
}

/// The watches one walk starts, before it reads each folder, so no change after the read
/// can go unseen; and what the walk may still spend.
struct Watches {
    sink: ChangeSink,
    /// A git mount's watch of the skills folder covers its whole tree at the ref.
    recursive: bool,
    guards: Option<Vec<WatchGuard>>,
    /// The URI of the skills folder walked, for the error of a walk over its budget.
    root: String,
    /// Provider requests one walk may make, and those left to this one.
    requests: usize,
    requests_left: usize,
    /// Set once the walk wanted more requests than it may make: the walk then fails whole.
    over: bool,
}

impl Watches {
    async fn folder(&mut self, provider: &Layered<'_>, dir: &str, root: bool) {
        if self.recursive && !root {
            return;
        }
        self.file(provider, dir).await;
    }

    /// Watch one URI (a folder, or a relayed skill's file): its changes make the next listing
    /// walk again. A watch that fails leaves the walk unwatched.
    async fn file(&mut self, provider: &Layered<'_>, uri: &str) {
        let Some(guards) = self.guards.as_mut() else {
            return;
        };
        let watched = match ResourceUri::parse(uri) {
            Ok(uri) => {
                provider
                    .watch(&LocalWatching, &uri, self.sink.clone())
                    .await
            }
            Err(e) => Err(e),
        };
        match watched {
            Ok(g) => guards.push(g),
            Err(_) => self.guards = None,
        }
    }

    /// Take one provider request from the walk's budget, or the error of a walk over it.
    fn spend(&mut self) -> Result<()> {
        if self.requests_left == 0 {
            self.over = true;
            return Err(self.over_budget());
        }
        self.requests_left -= 1;
        Ok(())
    }

    /// The error of a walk that wanted more provider requests than it may make
    /// ([`MAX_WALK_REQUESTS`], or the limit the catalog was given).
    fn over_budget(&self) -> Error {
        Error::too_large(
            &self.root,
            "walking the skills folder",
            None,
            Limit::of(
                self.requests as u64,
                "provider requests",
                "the most one walk of a skills folder makes",
            ),
            Some("keep fewer files under the skills folder"),
        )
    }
}

/// The message a panic carried.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Why a skill is left out (named in its one warning).
struct LeftOut {
    file: String,
    reason: String,
}

/// What [`Catalog::folder_details`] found in the folders of one skill.
#[derive(Default)]
struct Details {
    /// Permission bits by the mount's URI of each file.
    modes: HashMap<String, u32>,
    /// Paths inside the skill's folder the mount leaves out, each with the rule.
    hidden: Vec<(String, String)>,
    /// How many more were left out than the mount named.
    more: usize,
}

fn left_out(file: &str, reason: impl Into<String>) -> LeftOut {
    LeftOut {
        file: file.to_owned(),
        reason: reason.into(),
    }
}

/// `uri` without the trailing `/` a prefix-style directory URI (s3) carries.
fn bare(uri: &str) -> &str {
    uri.strip_suffix('/').unwrap_or(uri)
}

/// The last path segment of `uri`.
fn last_segment(uri: &str) -> &str {
    bare(uri).rsplit('/').next().unwrap_or_default()
}

/// The MIME type a git mount gives a symbolic link it stores (its content is the target path).
const SYMLINK_MIME_TYPE: &str = "inode/symlink";

fn is_dir(m: &ResourceMeta) -> bool {
    m.mime_type.as_deref() == Some(DIRECTORY_MIME_TYPE)
}

/// The bytes of a read's first content.
fn bytes_of(contents: Vec<mcpr_core::Contents>) -> Vec<u8> {
    match contents.into_iter().next().map(|c| c.body) {
        Some(ContentsBody::Text(t)) => t.into_bytes(),
        Some(ContentsBody::Blob(b)) => b,
        None => Vec::new(),
    }
}

impl Catalog {
    /// A catalog over `sources`, reading files up to `read_limit` bytes each (the server's
    /// `max_read_bytes`: a file the mount would not serve is not in a manifest).
    /// Each provider call is bounded by `timeout` (the server's request timeout).
    pub fn new(sources: Vec<SkillSource>, read_limit: u64, timeout: Duration) -> Self {
        Self {
            states: sources.iter().map(|_| SourceState::default()).collect(),
            wake: Arc::new(tokio::sync::Notify::new()),
            on_list_changed: OnceLock::new(),
            closed: AtomicBool::new(false),
            sources,
            read_limit,
            timeout,
            walk_requests: MAX_WALK_REQUESTS,
            walk_time: MAX_WALK_TIME,
            cache: Mutex::new(HashMap::new()),
            warned: Mutex::new(HashSet::new()),
            snapshot: Mutex::new(Arc::new(Vec::new())),
            views: Mutex::new(HashMap::new()),
            stats: CatalogStats::default(),
        }
    }

    /// This catalog with each walk of a source bounded by `requests` provider requests
    /// (directory pages and file reads) and `time`, instead of [`MAX_WALK_REQUESTS`] and
    /// [`MAX_WALK_TIME`].
    pub fn with_walk_limits(mut self, requests: usize, time: Duration) -> Self {
        self.walk_requests = requests;
        self.walk_time = time;
        self
    }

    /// The sources.
    pub fn sources(&self) -> &[SkillSource] {
        &self.sources
    }

    /// Have `list_changed` told (with the mount's index) when a new walk of a source finds
    /// skills appeared or gone, and, while `want_walk` says someone listens, walk again as
    /// soon as a source's watches report a change (else the next listing walks). The task
    /// ends with the catalog. Call once, inside the runtime.
    pub fn start(
        self: &Arc<Self>,
        list_changed: impl Fn(u32) + Send + Sync + 'static,
        want_walk: impl Fn() -> bool + Send + 'static,
    ) {
        if self.on_list_changed.set(Box::new(list_changed)).is_err() {
            return;
        }
        let wake = self.wake.clone();
        let catalog: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                wake.notified().await;
                let Some(catalog) = catalog.upgrade() else {
                    return;
                };
                if catalog.closed.load(Ordering::Relaxed) {
                    return;
                }
                if want_walk() {
                    // A failed walk was logged by the walk; the next change tries again.
                    let _ = catalog.shared().await;
                }
            }
        });
    }

    /// Warn once per file and reason; count every time.
    fn leave_out(&self, source: &SkillSource, why: &LeftOut) {
        self.stats.invalid.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}\0{}", why.file, why.reason);
        if lock(&self.warned).insert(key) {
            tracing::warn!(
                mount = %source.mount,
                file = %why.file,
                "skill left out of skills/list: {}",
                why.reason
            );
        }
    }

    /// Warn once per file and rule that a skill's folder holds a file its manifest lacks.
    fn not_published(&self, source: &SkillSource, h: &NotPublished) {
        let key = format!("unpublished\0{}\0{}\0{}", h.skill, h.file, h.reason);
        if lock(&self.warned).insert(key) {
            tracing::warn!(
                mount = %source.mount,
                skill = %h.skill,
                "{} is in the skill's folder but not in its manifest ({}); a pull of the skill will not have it",
                h.file,
                h.reason
            );
        }
    }

    /// Every page of directory `dir`, watched first, each page a request of the walk's.
    async fn children(
        &self,
        provider: &Layered<'_>,
        dir: &str,
        walk: &mut Watches,
        root: bool,
    ) -> Result<Vec<ResourceMeta>> {
        walk.folder(provider, dir, root).await;
        let uri = ResourceUri::parse(dir)?;
        let mut out = Vec::new();
        let mut after = None;
        loop {
            walk.spend()?;
            let page = provider
                .read_directory(
                    &uri,
                    PageRequest {
                        after,
                        limit: DIR_PAGE,
                    },
                )
                .await?;
            out.extend(page.items);
            match page.next {
                Some(n) => after = Some(n),
                None => return Ok(out),
            }
        }
    }

    /// The skill folders under source `s`'s root, breadth first: a folder holding a
    /// `SKILL.md` is a skill and is not searched further.
    async fn discover(
        &self,
        s: &SkillSource,
        watches: &mut Watches,
    ) -> Result<Vec<(String, Vec<ResourceMeta>)>> {
        let mut found = Vec::new();
        let mut queue = std::collections::VecDeque::from([(s.root.clone(), 0usize)]);
        let mut walked = 0usize;
        while let Some((dir, depth)) = queue.pop_front() {
            walked += 1;
            if walked > MAX_WALK_DIRS {
                tracing::warn!(
                    mount = %s.mount,
                    "the skills folder {} holds more than {MAX_WALK_DIRS} folders; the rest is not searched",
                    s.root
                );
                break;
            }
            let is_root = dir == s.root;
            let entries = match self
                .children(
                    &Layered::new(&s.at, self.timeout),
                    &dir,
                    &mut *watches,
                    is_root,
                )
                .await
            {
                Ok(e) => e,
                // The root itself failing fails the source, and so does a walk over its
                // budget; a folder that went away since it was listed is skipped.
                Err(e) if dir == s.root || watches.over => return Err(e),
                Err(_) => continue,
            };
            let has_skill_md = dir != s.root
                && entries
                    .iter()
                    .any(|m| !is_dir(m) && last_segment(&m.uri) == SKILL_MD);
            if has_skill_md {
                found.push((dir, entries));
                continue;
            }
            if depth < MAX_WALK_DEPTH {
                // A link to a folder elsewhere lists its children under their own paths:
                // what is not under the skills folder is not searched.
                let root = bare(&s.root);
                queue.extend(
                    entries
                        .into_iter()
                        .filter(|m| {
                            is_dir(m)
                                && bare(&m.uri)
                                    .strip_prefix(root)
                                    .is_some_and(|r| r.starts_with('/'))
                        })
                        .map(|m| (m.uri, depth + 1)),
                );
            }
        }
        Ok(found)
    }

    /// The cache key of a file's state, or `None` when the source gives nothing to tell
    /// versions apart by (then it is hashed every time).
    async fn fingerprint(
        provider: &Layered<'_>,
        uri: &ResourceUri,
        m: &ResourceMeta,
    ) -> Option<String> {
        match provider.change_token(uri).await {
            Some(t) => Some(format!("t:{t}:{:?}", m.size)),
            None => m
                .last_modified
                .as_ref()
                .map(|lm| format!("m:{lm}:{:?}", m.size)),
        }
    }

    /// The digest and size of `m` (and its frontmatter when `skill_md`), from the cache when
    /// its fingerprint is unchanged, else read through the mount and hashed.
    async fn hashed(
        &self,
        provider: &Layered<'_>,
        m: &ResourceMeta,
        skill_md: bool,
        walk: &mut Watches,
    ) -> Result<Hashed> {
        let uri = ResourceUri::parse(&m.uri)?;
        let fingerprint = Self::fingerprint(provider, &uri, m).await;
        self.hashed_as(provider, m, skill_md, walk, fingerprint)
            .await
    }

    /// [`Catalog::hashed`] with the fingerprint already known (`None`: none, read and hash
    /// every time).
    async fn hashed_as(
        &self,
        provider: &Layered<'_>,
        m: &ResourceMeta,
        skill_md: bool,
        walk: &mut Watches,
        fingerprint: Option<String>,
    ) -> Result<Hashed> {
        let uri = ResourceUri::parse(&m.uri)?;
        if let Some(fp) = &fingerprint
            && let Some(h) = lock(&self.cache).get(&m.uri)
            && &h.fingerprint == fp
            && (!skill_md || h.frontmatter.is_some())
        {
            return Ok(h.clone());
        }
        walk.spend()?;
        let bytes = bytes_of(
            provider
                .read(
                    &uri,
                    &ReadLimits {
                        max_bytes: self.read_limit,
                    },
                )
                .await?
                .contents,
        );
        self.stats.hashed.fetch_add(1, Ordering::Relaxed);
        // Hashing up to a skill's 16 MiB and parsing YAML are CPU work: on the blocking pool,
        // not on the async worker that serves other requests meanwhile.
        let (digest, size, frontmatter) =
            mcpr_core::run_blocking("skill file hashing", move || {
                let frontmatter = skill_md.then(|| match std::str::from_utf8(&bytes) {
                    Ok(text) => super::frontmatter::parse(text).map_err(|e| e.to_string()),
                    Err(_) => Err("it is not UTF-8 text".to_owned()),
                });
                Ok((
                    rmcp::model::sha256_digest(&bytes),
                    bytes.len() as u64,
                    frontmatter,
                ))
            })
            .await?;
        let h = Hashed {
            fingerprint: fingerprint.clone().unwrap_or_default(),
            digest,
            size,
            frontmatter,
        };
        if fingerprint.is_some() {
            lock(&self.cache).insert(m.uri.clone(), h.clone());
        }
        Ok(h)
    }

    /// The modes and the entries left out of folder `dir` of a skill (at `at` inside the
    /// skill's folder: `""` for the folder itself, else `/sub`), one request of the walk's,
    /// into `details`. A mount that cannot tell leaves both unknown: the skill is still served.
    async fn folder_details(
        &self,
        provider: &Layered<'_>,
        dir: &str,
        at: &str,
        details: &mut Details,
        walk: &mut Watches,
    ) -> std::result::Result<(), LeftOut> {
        walk.spend()
            .map_err(|e| left_out(dir, format!("its folder cannot be read: {}", e.message)))?;
        let Ok(uri) = ResourceUri::parse(dir) else {
            return Ok(());
        };
        let found = match provider.folder_details(&uri).await {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!("{dir}: no modes or left-out files known: {}", e.message);
                return Ok(());
            }
        };
        details.modes.extend(found.modes);
        for (name, reason) in found.left_out {
            let (name, slash) = match name.strip_suffix('/') {
                Some(n) => (n, "/"),
                None => (name.as_str(), ""),
            };
            let name = name.rsplit('/').next().unwrap_or(name);
            details
                .hidden
                .push((format!("{at}/{name}{slash}")[1..].to_owned(), reason));
        }
        details.more += found.more_left_out;
        Ok(())
    }

    /// The skill in folder `dir` of source `si` (its entries already read), or why not; with
    /// the files of its folder the mount leaves out.
    ///
    /// Its files are named by the path the walk took from the folder, never by slicing the
    /// URIs the mount answered: a link to a folder lists that folder's children under their
    /// own paths, which may be anywhere in the mount. An entry whose URI is not under the
    /// skill's folder is not part of the skill and is left out of its manifest.
    async fn skill_at(
        &self,
        si: usize,
        dir: &str,
        entries: Vec<ResourceMeta>,
        walk: &mut Watches,
    ) -> std::result::Result<(SkillEntry, Vec<NotPublished>), LeftOut> {
        let s = &self.sources[si];
        let layered = Layered::new(&s.at, self.timeout);
        let provider = &layered;
        let root = bare(&s.root);
        let folder = bare(dir);
        let rel = folder
            .strip_prefix(root)
            .and_then(|r| r.strip_prefix('/'))
            .filter(|r| !r.is_empty())
            .ok_or_else(|| left_out(dir, "its folder is not under the skills folder"))?;
        let base = if s.prefix.is_empty() {
            format!("{SKILL_SCHEME}{rel}")
        } else {
            format!("{SKILL_SCHEME}{}/{rel}", s.prefix)
        };
        let skill_md = format!("{folder}/{SKILL_MD}");
        let md_path = format!("/{SKILL_MD}");
        let inside = |uri: &str| {
            bare(uri)
                .strip_prefix(folder)
                .is_some_and(|r| r.starts_with('/'))
        };
        // Every file under the folder, by a walk bounded in files and depth, each with its
        // path from the folder (starting with `/`).
        let mut files: Vec<(String, ResourceMeta)> = Vec::new();
        let mut details = Details::default();
        self.folder_details(provider, dir, "", &mut details, &mut *walk)
            .await?;
        let mut pending = vec![(String::new(), entries, 0usize)];
        let mut total = 0u64;
        while let Some((at, list, depth)) = pending.pop() {
            for m in list {
                let name = last_segment(&m.uri);
                if name.is_empty() || name == "." || name == ".." || !inside(&m.uri) {
                    continue;
                }
                let path = format!("{at}/{name}");
                if is_dir(&m) {
                    if depth >= MAX_WALK_DEPTH {
                        return Err(left_out(
                            &skill_md,
                            format!("it nests folders deeper than {MAX_WALK_DEPTH}"),
                        ));
                    }
                    let sub = self
                        .children(provider, &m.uri, &mut *walk, false)
                        .await
                        .map_err(|e| {
                            left_out(&m.uri, format!("its folder cannot be read: {}", e.message))
                        })?;
                    self.folder_details(provider, &m.uri, &path, &mut details, &mut *walk)
                        .await?;
                    pending.push((path, sub, depth + 1));
                    continue;
                }
                // A link stored in a git tree reads as the path it names, typed
                // `inode/symlink`, never as the file there: installed as a skill file it
                // would be a file holding a path (possibly one outside the mount), so a
                // manifest leaves it out, like a link out of a files mount.
                if m.mime_type.as_deref() == Some(SYMLINK_MIME_TYPE) {
                    continue;
                }
                total += m.size.unwrap_or(0);
                files.push((path, m));
                if files.len() > MAX_SKILL_FILES {
                    return Err(left_out(
                        &skill_md,
                        format!("it holds more than {MAX_SKILL_FILES} files (the spec's limit)"),
                    ));
                }
                if total > MAX_SKILL_BYTES {
                    return Err(left_out(
                        &skill_md,
                        format!(
                            "it holds more than {MAX_SKILL_BYTES} bytes (the spec's limit of 16 MiB)"
                        ),
                    ));
                }
            }
        }
        let mut manifest = Vec::with_capacity(files.len());
        let mut frontmatter = None;
        let mut total = 0u64;
        for (path, m) in &files {
            let is_md = *path == md_path;
            let h = self
                .hashed(provider, m, is_md, &mut *walk)
                .await
                .map_err(|e| left_out(&m.uri, format!("it cannot be read: {}", e.message)))?;
            total += h.size;
            if total > MAX_SKILL_BYTES {
                return Err(left_out(
                    &skill_md,
                    format!(
                        "it holds more than {MAX_SKILL_BYTES} bytes (the spec's limit of 16 MiB)"
                    ),
                ));
            }
            if is_md {
                frontmatter = Some(
                    h.frontmatter
                        .clone()
                        .unwrap_or_else(|| Err("unread".into())),
                );
            }
            manifest.push(SkillFile {
                uri: format!("{base}{path}"),
                target: m.uri.clone(),
                digest: h.digest,
                size: h.size,
                mode: details.modes.get(&m.uri).copied(),
            });
        }
        let frontmatter = frontmatter
            .ok_or_else(|| left_out(&skill_md, "its SKILL.md is not served by the mount"))?
            .map_err(|why| left_out(&skill_md, why))?;
        manifest.sort_by(|a, b| a.uri.cmp(&b.uri));
        let entry = SkillEntry {
            uri: format!("{base}/{SKILL_MD}"),
            source: si,
            frontmatter,
            files: manifest,
        };
        // The spec's rules: name by the Agent Skills rules and equal to the folder's name,
        // the manifest inside the folder, no file twice.
        entry
            .to_skill()
            .validate()
            .map_err(|e| left_out(&skill_md, e.to_string()))?;
        let mut hidden: Vec<NotPublished> = details
            .hidden
            .into_iter()
            .map(|(file, reason)| NotPublished {
                skill: entry.uri.clone(),
                file,
                reason,
            })
            .collect();
        if details.more > 0 {
            hidden.push(NotPublished {
                skill: entry.uri.clone(),
                file: format!("{} more", details.more),
                reason: format!(
                    "left out too (a folder's report names at most {})",
                    mcpr_core::MAX_LEFT_OUT
                ),
            });
        }
        Ok((entry, hidden))
    }

    /// How long a walk of source `si` is reused without asking the mount whether anything
    /// changed, when the mount cannot watch the folder: the mount's poll interval (s3), the
    /// time it takes itself to look again; `None` for a mount that does not poll.
    fn reuse_for(&self, si: usize) -> Option<Duration> {
        self.sources[si].at.provider.poll_interval()
    }

    /// Source `si`'s valid skills: from its last walk while its watches report no change
    /// (or, for a source that cannot be watched, for the mount's poll interval), else walked
    /// again (then told to the registry if the set of skills differs). Callers that come
    /// while a walk runs wait for it and take its result. A walk that fails (over its
    /// budget of requests or time, or a fault in it) answers with the last walk that
    /// succeeded, else with its error.
    async fn source_skills(&self, si: usize) -> Result<Arc<Vec<SkillEntry>>> {
        let s = &self.sources[si];
        let state = &self.states[si];
        // A walk that starts after this caller came is as fresh as one it would start.
        let arrived = state.started.load(Ordering::SeqCst);
        let mut walked = state.walked.lock().await;
        let generation = state.generation.load(Ordering::SeqCst);
        if let Some(w) = walked.as_ref()
            && w.generation == generation
            && (w.guards.is_some()
                || w.seq > arrived
                || self.reuse_for(si).is_some_and(|d| w.done.elapsed() < d))
        {
            return w.skills.clone();
        }
        let seq = state.started.fetch_add(1, Ordering::SeqCst) + 1;
        self.stats.walks.fetch_add(1, Ordering::Relaxed);
        let mut walk = Watches {
            sink: ChangeSink::new(
                Arc::new(Invalidate {
                    generation: state.generation.clone(),
                    wake: self.wake.clone(),
                }),
                s.mount.clone(),
            ),
            recursive: s.at.provider.info().kind == "git",
            guards: Some(Vec::new()),
            root: s.root.clone(),
            requests: self.walk_requests,
            requests_left: self.walk_requests,
            over: false,
        };
        // A fault inside the walk (a provider's panic, or one of ours) fails this walk, not
        // the caller, and leaves nothing half done: the lock is let go and the next caller
        // walks again.
        let outcome = AssertUnwindSafe(tokio::time::timeout(
            self.walk_time,
            self.walk(si, &mut walk),
        ))
        .catch_unwind()
        .await;
        let found = match outcome {
            Ok(Ok(found)) => found,
            Ok(Err(_)) => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "the walk of the skills folder took more than {} ms (the limit of one walk)",
                    self.walk_time.as_millis()
                ),
            )),
            Err(panic) => Err(Error::internal(format!(
                "the walk of the skills folder failed: {}",
                panic_message(&*panic)
            ))),
        };
        let before = walked
            .as_ref()
            .and_then(|w| w.skills.as_ref().ok())
            .cloned();
        let (skills, guards, left_out, not_published, error) = match found {
            Ok(found) => (
                Ok(Arc::new(found.skills)),
                walk.guards,
                found.left_out,
                found.not_published,
                found.error,
            ),
            Err(e) => {
                let key = format!("walk\0{}\0{}", s.root, e.message);
                if lock(&self.warned).insert(key) {
                    tracing::warn!(mount = %s.mount, "{}: {}", s.root, e.message);
                }
                let why = e.message.clone();
                // The last whole answer stands; not kept past the poll interval, if any.
                (
                    before.clone().ok_or(e),
                    None,
                    Vec::new(),
                    Vec::new(),
                    Some(why),
                )
            }
        };
        let uris = |v: &[SkillEntry]| v.iter().map(|e| e.uri.clone()).collect::<HashSet<_>>();
        let changed = match (&before, &skills) {
            (Some(before), Ok(now)) => uris(before) != uris(now),
            _ => false,
        };
        *walked = Some(Walked {
            generation,
            seq,
            done: Instant::now(),
            skills: skills.clone(),
            guards,
            left_out,
            not_published,
            error,
        });
        drop(walked);
        if changed && let Some(tell) = self.on_list_changed.get() {
            tell(s.index);
        }
        skills
    }

    /// Each source's skills, those left out and why, and a skills folder that cannot be
    /// read, as a listing would find them now (walking the sources whose last walk is not
    /// current).
    pub async fn report(&self) -> Vec<SourceReport> {
        let mut out = Vec::with_capacity(self.sources.len());
        for (si, s) in self.sources.iter().enumerate() {
            let skills = self.source_skills(si).await;
            let walked = self.states[si].walked.lock().await;
            let (left_out, not_published, error) = walked
                .as_ref()
                .map(|w| (w.left_out.clone(), w.not_published.clone(), w.error.clone()))
                .unwrap_or_default();
            out.push(SourceReport {
                mount: s.mount.clone(),
                root: s.root.clone(),
                skills: skills
                    .as_ref()
                    .map(|v| v.iter().map(|e| e.uri.clone()).collect())
                    .unwrap_or_default(),
                left_out,
                not_published,
                error: error.or_else(|| skills.as_ref().err().map(|e| e.message.clone())),
            });
        }
        out
    }

    /// One walk of source `si`: its skills with those it left out, or why the walk failed
    /// as a whole (its budget spent). A skill that cannot be had is left out and logged; a
    /// skills folder that cannot be read leaves the source without skills, logged.
    async fn walk(&self, si: usize, walk: &mut Watches) -> Result<WalkFound> {
        if self.sources[si].relay {
            return self.relay_walk(si, walk).await;
        }
        let s = &self.sources[si];
        let mut skills = Vec::new();
        let (mut left, mut error) = (Vec::new(), None);
        let mut not_published = Vec::new();
        match self.discover(s, &mut *walk).await {
            Ok(found) => {
                for (dir, entries) in found {
                    match self.skill_at(si, &dir, entries, &mut *walk).await {
                        Ok((entry, hidden)) => {
                            for h in &hidden {
                                self.not_published(s, h);
                            }
                            not_published.extend(hidden);
                            skills.push(entry);
                        }
                        Err(_) if walk.over => return Err(walk.over_budget()),
                        Err(why) => {
                            self.leave_out(s, &why);
                            left.push((why.file, why.reason));
                        }
                    }
                }
            }
            Err(_) if walk.over => return Err(walk.over_budget()),
            Err(e) => {
                let why = left_out(
                    &s.root,
                    format!("the skills folder cannot be read: {}", e.message),
                );
                error = Some(why.reason.clone());
                let key = format!("{}\0{}", why.file, why.reason);
                if lock(&self.warned).insert(key) {
                    tracing::warn!(mount = %s.mount, "{}: {}", why.file, why.reason);
                }
                // Not kept: a folder that failed is asked again next time.
                walk.guards = None;
            }
        }
        if walk.over {
            return Err(walk.over_budget());
        }
        Ok(WalkFound {
            skills,
            left_out: left,
            not_published,
            error,
        })
    }

    /// One walk of a relaying source (a gateway mount): the skills its upstream lists, each
    /// file read through the mount and checked against the upstream's digest and size, so
    /// a manifest we publish describes the bytes we relay. A skill whose bytes differ, or
    /// that breaks a rule a walked skill keeps, is left out with the reason; an upstream
    /// that cannot list its skills now (down) leaves the source without skills, asked again
    /// next time. Watched: the mount's list changes (an upstream's skills come and go with
    /// its `list_changed`) and every file.
    async fn relay_walk(&self, si: usize, walk: &mut Watches) -> Result<WalkFound> {
        let s = &self.sources[si];
        let layered = Layered::new(&s.at, self.timeout);
        // Watched before the listing, so a change after it is not missed.
        match layered.watch_list(&LocalWatching, walk.sink.clone()).await {
            Ok(g) => {
                if let Some(guards) = walk.guards.as_mut() {
                    guards.push(g);
                }
            }
            Err(_) => walk.guards = None,
        }
        walk.spend()?;
        let listed = match layered.relayed_skills().await {
            Ok(listed) => listed.unwrap_or_default(),
            Err(e) => {
                let why = format!("the upstream's skills cannot be listed: {}", e.message);
                let key = format!("{}\0{why}", s.root);
                if lock(&self.warned).insert(key) {
                    tracing::warn!(mount = %s.mount, "{why}");
                }
                walk.guards = None;
                return Ok(WalkFound {
                    skills: Vec::new(),
                    left_out: Vec::new(),
                    not_published: Vec::new(),
                    error: Some(why),
                });
            }
        };
        let (mut skills, mut left) = (Vec::new(), Vec::new());
        for skill in listed {
            match self.relayed_at(si, skill, &layered, &mut *walk).await {
                Ok(entry) => skills.push(entry),
                Err(_) if walk.over => return Err(walk.over_budget()),
                Err(why) => {
                    self.leave_out(s, &why);
                    left.push((why.file, why.reason));
                }
            }
        }
        if walk.over {
            return Err(walk.over_budget());
        }
        Ok(WalkFound {
            skills,
            left_out: left,
            not_published: Vec::new(),
            error: None,
        })
    }

    /// The relayed skill `skill` of source `si` under our `skill://` URIs, its files read
    /// through the mount and checked against the upstream's manifest, or why not.
    async fn relayed_at(
        &self,
        si: usize,
        skill: mcpr_core::RelayedSkill,
        provider: &Layered<'_>,
        walk: &mut Watches,
    ) -> std::result::Result<SkillEntry, LeftOut> {
        let s = &self.sources[si];
        let base = if s.prefix.is_empty() {
            format!("{SKILL_SCHEME}{}", skill.path)
        } else {
            format!("{SKILL_SCHEME}{}/{}", s.prefix, skill.path)
        };
        let skill_md = format!("{base}/{SKILL_MD}");
        let files = skill.files.ok_or_else(|| {
            left_out(
                &skill_md,
                "the upstream's manifest is dynamic: no digests to check the relayed bytes against",
            )
        })?;
        if files.len() > MAX_SKILL_FILES {
            return Err(left_out(
                &skill_md,
                format!("it holds more than {MAX_SKILL_FILES} files (the spec's limit)"),
            ));
        }
        if files.iter().map(|f| f.size).fold(0u64, u64::saturating_add) > MAX_SKILL_BYTES {
            return Err(left_out(
                &skill_md,
                format!("it holds more than {MAX_SKILL_BYTES} bytes (the spec's limit of 16 MiB)"),
            ));
        }
        let mut manifest = Vec::with_capacity(files.len());
        let mut frontmatter = None;
        for f in files {
            if f.path.is_empty() {
                return Err(left_out(
                    &skill_md,
                    format!(
                        "the upstream's manifest names {} outside the skill's folder",
                        f.uri
                    ),
                ));
            }
            walk.file(provider, &f.uri).await;
            let is_md = f.path == SKILL_MD;
            let m = ResourceMeta {
                uri: f.uri.clone(),
                size: Some(f.size),
                ..ResourceMeta::default()
            };
            // Bytes once checked against a digest need no new read while the upstream's
            // manifest names the same digest.
            let fingerprint = format!("r:{}:{}", f.digest, f.size);
            let h = self
                .hashed_as(provider, &m, is_md, &mut *walk, Some(fingerprint))
                .await
                .map_err(|e| left_out(&f.uri, format!("it cannot be read: {}", e.message)))?;
            if h.digest != f.digest || h.size != f.size {
                // Not kept: the next walk reads it again.
                lock(&self.cache).remove(&f.uri);
                return Err(left_out(
                    &f.uri,
                    format!(
                        "the bytes relayed ({} bytes, {}) differ from the upstream's manifest ({} bytes, {})",
                        h.size, h.digest, f.size, f.digest
                    ),
                ));
            }
            if is_md {
                frontmatter = Some(
                    h.frontmatter
                        .clone()
                        .unwrap_or_else(|| Err("unread".into())),
                );
            }
            manifest.push(SkillFile {
                uri: format!("{base}/{}", f.path),
                target: f.uri,
                digest: h.digest,
                size: h.size,
                mode: None,
            });
        }
        let frontmatter = frontmatter
            .ok_or_else(|| left_out(&skill_md, "the upstream's manifest has no SKILL.md"))?
            .map_err(|why| left_out(&skill_md, why))?;
        manifest.sort_by(|a, b| a.uri.cmp(&b.uri));
        let entry = SkillEntry {
            uri: skill_md.clone(),
            source: si,
            frontmatter,
            files: manifest,
        };
        entry
            .to_skill()
            .validate()
            .map_err(|e| left_out(&skill_md, e.to_string()))?;
        Ok(entry)
    }

    /// Every valid skill of every source, sorted by URI. A skill that is invalid, too
    /// large or unreadable is left out with one warning and counted; a source whose skills
    /// folder cannot be read is left out with its error logged. Two sources producing the
    /// same URI keep the first source's skill, counted and logged once. A source whose walk
    /// failed with no earlier answer fails the listing with its error.
    pub async fn skills(&self) -> Result<Vec<SkillEntry>> {
        Ok((*self.shared().await?).clone())
    }

    /// [`Catalog::skills`], shared: the same `Arc` while no source walked again.
    pub async fn shared(&self) -> Result<Arc<Vec<SkillEntry>>> {
        self.visible(&|_| true).await
    }

    /// The skills of the sources `sees` admits (the mounts a caller may see), sorted by URI,
    /// collisions settled among those sources only; shared while none of them walked again.
    pub async fn visible(
        &self,
        sees: &(dyn Fn(&SkillSource) -> bool + Sync),
    ) -> Result<Arc<Vec<SkillEntry>>> {
        let mask: Vec<bool> = self.sources.iter().map(sees).collect();
        let mut parts = Vec::with_capacity(self.sources.len());
        for (si, _) in mask.iter().enumerate().filter(|(_, seen)| **seen) {
            parts.push(self.source_skills(si).await?);
        }
        let all = mask.iter().all(|seen| *seen);
        if let Some(view) = lock(&self.views).get(&mask)
            && view.from.len() == parts.len()
            && view.from.iter().zip(&parts).all(|(a, b)| Arc::ptr_eq(a, b))
        {
            return Ok(view.merged.clone());
        }
        let mut by_uri: std::collections::BTreeMap<String, SkillEntry> = Default::default();
        for part in &parts {
            for entry in part.iter() {
                if by_uri.contains_key(&entry.uri) {
                    self.stats.collisions.fetch_add(1, Ordering::Relaxed);
                    let key = format!("collision\0{}", entry.uri);
                    if lock(&self.warned).insert(key) {
                        tracing::warn!(
                            mount = %self.sources[entry.source].mount,
                            "skill {} is also served by an earlier mount; that one is kept (set skills_prefix to tell them apart)",
                            entry.uri
                        );
                    }
                    continue;
                }
                by_uri.insert(entry.uri.clone(), entry.clone());
            }
        }
        let merged: Arc<Vec<SkillEntry>> = Arc::new(by_uri.into_values().collect());
        if all {
            *lock(&self.snapshot) = merged.clone();
        }
        let mut views = lock(&self.views);
        if views.len() >= MAX_VIEWS && !views.contains_key(&mask) {
            views.clear();
        }
        views.insert(
            mask,
            View {
                from: parts,
                merged: merged.clone(),
            },
        );
        Ok(merged)
    }

    /// The skill whose `SKILL.md` is `uri` among the sources `sees` admits, every file of
    /// its manifest checked against its source first (one change token each): a file
    /// changed since the last walk, even one whose watch has not reported yet, makes its
    /// source walk again.
    pub async fn skill(
        &self,
        uri: &str,
        sees: &(dyn Fn(&SkillSource) -> bool + Sync),
    ) -> Result<Option<SkillEntry>> {
        // A view is sorted by URI (merged through a BTreeMap).
        let all = self.visible(sees).await?;
        let Some(found) = all
            .binary_search_by(|s| s.uri.as_str().cmp(uri))
            .ok()
            .map(|i| all[i].clone())
        else {
            return Ok(None);
        };
        let s = &self.sources[found.source];
        let layered = Layered::new(&s.at, self.timeout);
        for f in &found.files {
            let Ok(target) = ResourceUri::parse(&f.target) else {
                continue;
            };
            let cached = lock(&self.cache)
                .get(&f.target)
                .map(|h| h.fingerprint.clone());
            let Some(token) = layered.change_token(&target).await else {
                continue;
            };
            // The cache's fingerprint of a file with a change token starts with it.
            if cached.is_some_and(|c| !c.starts_with(&format!("t:{token}:"))) {
                self.states[found.source]
                    .generation
                    .fetch_add(1, Ordering::SeqCst);
                return Ok(self
                    .visible(sees)
                    .await?
                    .iter()
                    .find(|s| s.uri == uri)
                    .cloned());
            }
        }
        Ok(Some(found))
    }

    /// The skills of the last listing of every source, without walking again (empty before
    /// the first).
    pub fn last(&self) -> Arc<Vec<SkillEntry>> {
        lock(&self.snapshot).clone()
    }

    /// The source and mount URI behind `skill_uri` (a `skill://` URI of a skill's file)
    /// among the sources `sees` admits, or not found naming `skill_uri` only. A URI no
    /// skill has is answered from the sources' last walks: while those are current (their
    /// watches quiet, or within a poll interval), looking costs no request.
    pub async fn resolve(
        &self,
        skill_uri: &str,
        sees: &(dyn Fn(&SkillSource) -> bool + Sync),
    ) -> Result<(usize, String)> {
        let skills = self.visible(sees).await?;
        skills
            .iter()
            .find_map(|entry| {
                entry
                    .files
                    .iter()
                    .find(|f| f.uri == skill_uri)
                    .map(|f| (entry.source, f.target.clone()))
            })
            .ok_or_else(|| Error::not_found(skill_uri))
    }
}
