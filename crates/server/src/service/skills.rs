//! SEP-2640 skills in protocol-neutral terms: `skills/list` pages with our signed cursors,
//! `skills/get`, and reads of `skill://` URIs through the mount that holds the bytes (with
//! every rule of that mount, and the caller's scopes).

use std::sync::Arc;

use mcpr_core::{CacheHints, Error, ResourceUri, Result};
use rmcp::model::Skill;

use super::{
    IN_SKILLS, LISTING_SKILLS, ReadOutcome, SCAN_SKILLS, ScanPage, Service, hints_for,
    invalid_cursor, parse_uri, visible,
};
use crate::SCAN_MAX_PAGES;
use crate::grant::Grant;
use crate::layers::metered;
use crate::skills::catalog::SKILL_SCHEME;
use crate::skills::{SkillEntry, SkillSource};

/// What a skill's `SKILL.md` URI ends with after its folder.
const SKILL_MD_SUFFIX: &str = "/SKILL.md";

/// One page of `skills/list`.
#[derive(Debug, Clone)]
pub struct SkillsPage {
    /// The skills, by URI.
    pub skills: Vec<Skill>,
    /// The signed cursor of the next page, `None` after the last.
    pub next_cursor: Option<String>,
    /// Cache hints for this caller.
    pub hints: CacheHints,
}

impl Service {
    /// Whether the server has a skills catalog (a mount carries skills).
    pub fn has_skills(&self) -> bool {
        self.state.skills.is_some()
    }

    /// Whether a caller holding `grant` may see the mount of skills source `source`.
    fn sees_source(&self, grant: Option<&Grant>, source: &SkillSource) -> bool {
        self.state
            .router
            .mounts()
            .get(source.index as usize)
            .is_some_and(|m| visible(grant, m))
    }

    /// The skills a caller holding `grant` may see, sorted by URI: those of the mounts its
    /// scopes cover, two mounts' skills of one URI settled among those mounts only.
    async fn skills_for(&self, grant: Option<&Grant>) -> Result<Arc<Vec<SkillEntry>>> {
        match &self.state.skills {
            Some(catalog) => {
                catalog
                    .visible(&|s: &SkillSource| self.sees_source(grant, s))
                    .await
            }
            None => Ok(Arc::default()),
        }
    }

    /// At most `n` of the skills a caller holding `grant` may see whose URI comes after
    /// `after`, by URI: the caller's shared, URI-sorted view and the positions in it, so a
    /// page costs a search and its own skills, not a copy of every skill.
    async fn visible_skills_after(
        &self,
        grant: Option<&Grant>,
        after: &str,
        n: usize,
    ) -> Result<(Arc<Vec<SkillEntry>>, Vec<usize>)> {
        let all = self.skills_for(grant).await?;
        let start = all.partition_point(|s| s.uri.as_str() <= after);
        let page = (start..all.len()).take(n).collect();
        Ok((all, page))
    }

    /// The cache hints of skills results: the strictest over the mounts carrying skills.
    fn skills_hints(&self, grant: Option<&Grant>) -> CacheHints {
        hints_for(grant, self.state.list_cache)
    }

    /// One page of the skills a caller holding `grant` may see, from `cursor`.
    pub async fn list_skills(
        &self,
        grant: Option<&Grant>,
        cursor: Option<&str>,
    ) -> Result<SkillsPage> {
        metered(
            &self.state.metrics,
            "skills/list",
            self.skills_page(grant, cursor),
        )
        .await
    }

    async fn skills_page(&self, grant: Option<&Grant>, cursor: Option<&str>) -> Result<SkillsPage> {
        let after = match cursor {
            None => None,
            Some(c) => match self.open_cursor(c, IN_SKILLS)? {
                Some((0, rest)) => {
                    Some(String::from_utf8(rest).map_err(|_| invalid_cursor("unknown position"))?)
                }
                _ => return Err(invalid_cursor("it does not continue skills/list")),
            },
        };
        let size = self.state.settings.page_size.max(1);
        let (all, mut page) = self
            .visible_skills_after(grant, after.as_deref().unwrap_or(""), size + 1)
            .await?;
        let next_cursor = if page.len() > size {
            page.truncate(size);
            page.last()
                .map(|&last| self.tagged_cursor(0, IN_SKILLS, &[all[last].uri.as_bytes()]))
        } else {
            None
        };
        Ok(SkillsPage {
            skills: page.iter().map(|&i| all[i].to_skill()).collect(),
            next_cursor,
            hints: self.skills_hints(grant),
        })
    }

    /// The skill whose `SKILL.md` is `uri`, for a caller holding `grant`; invalid params
    /// (-32602, as SEP-2640 asks) when there is none it may see.
    pub async fn get_skill(&self, grant: Option<&Grant>, uri: &str) -> Result<(Skill, CacheHints)> {
        metered(
            &self.state.metrics,
            "skills/get",
            self.find_skill(grant, uri),
        )
        .await
    }

    async fn find_skill(&self, grant: Option<&Grant>, uri: &str) -> Result<(Skill, CacheHints)> {
        let found = match &self.state.skills {
            Some(catalog) => {
                catalog
                    .skill(uri, &|s: &SkillSource| self.sees_source(grant, s))
                    .await?
            }
            None => None,
        };
        found
            .map(|s| (s.to_skill(), self.skills_hints(grant)))
            .ok_or_else(|| {
                Error::invalid_params(format!("no skill is served at {uri}")).with_uri(uri)
            })
    }

    /// The URI to watch for a subscription to `uri`: itself, or for a `skill://` URI the
    /// mount URI holding its bytes (not found when no skill the caller may see has it).
    pub(super) async fn watched_uri(
        &self,
        grant: Option<&Grant>,
        uri: &ResourceUri,
    ) -> Result<ResourceUri> {
        match self.skill_target(grant, uri.as_str()).await? {
            Some(target) => ResourceUri::parse(&target),
            None => Ok(uri.clone()),
        }
    }

    /// For a `skill://` URI (when a mount carries skills), the mount URI holding its bytes,
    /// not found when no skill the caller holding `grant` may see has it; `None` for any
    /// other URI.
    async fn skill_target(&self, grant: Option<&Grant>, raw: &str) -> Result<Option<String>> {
        let Some(catalog) = self
            .state
            .skills
            .as_ref()
            .filter(|_| raw.starts_with(SKILL_SCHEME))
        else {
            return Ok(None);
        };
        let (_, target) = catalog
            .resolve(raw, &|s: &SkillSource| self.sees_source(grant, s))
            .await?;
        Ok(Some(target))
    }

    /// For a `skill://` URI in the catalog's last listing, the mount URI holding its bytes,
    /// without looking again (for the synchronous acknowledgment of a listen).
    pub(super) fn known_skill_target(&self, uri: &ResourceUri) -> Option<ResourceUri> {
        let catalog = self.state.skills.as_ref()?;
        if !uri.as_str().starts_with(SKILL_SCHEME) {
            return None;
        }
        let last = catalog.last();
        let target = last
            .iter()
            .flat_map(|s| &s.files)
            .find(|f| f.uri == uri.as_str())?;
        ResourceUri::parse(&target.target).ok()
    }

    /// Subscribe registry subscriber `id` to `uri` as a replica holding a roaming session's
    /// stream does for its recorded subscriptions: a `skill://` URI is watched as the
    /// mount URI behind it and named as recorded.
    pub async fn subscribe_recorded_here(&self, id: u64, uri: &str) -> Result<()> {
        let name = parse_uri(uri)?;
        let target = self.watched_uri(None, &name).await?;
        self.state
            .registry
            .subscribe_as(id, name.as_str(), &target)
            .await
    }

    /// Have the catalog hold its watches (by listing once in the background), so skills
    /// appearing or going are told to list listeners even before anyone lists skills.
    pub(super) fn watch_skills(&self) {
        if let Some(catalog) = self.state.skills.clone() {
            tokio::spawn(async move {
                // A walk that failed was logged by the catalog; a listing asks again.
                let _ = catalog.shared().await;
            });
        }
    }

    /// Read `raw`: a `skill://` URI through the mount holding its bytes, named as asked;
    /// any other URI as [`Service::read`] reads it.
    pub(super) async fn read_any(&self, grant: Option<&Grant>, raw: &str) -> Result<ReadOutcome> {
        let Some(target) = self.skill_target(grant, raw).await? else {
            return self.read_uri(grant, raw).await;
        };
        let mut out = self
            .read_uri(grant, &target)
            .await
            .map_err(|e| as_asked(e, raw, &target))?;
        for c in &mut out.contents {
            c.uri = raw.to_owned();
        }
        Ok(out)
    }

    /// For a `skill://` URI naming a valid skill's folder or a folder under it, among the
    /// skills a caller holding `grant` may see: the mount's directory URI behind it, the
    /// URI as asked (without a trailing `/`), and the mount's URI of the skill's own folder
    /// (its children must be under it). `None` for any other URI; not found, naming only
    /// the URI asked, for a `skill://` URI that is no such folder.
    pub(super) async fn skill_folder(
        &self,
        grant: Option<&Grant>,
        uri: &str,
    ) -> Result<Option<SkillFolder>> {
        let Some(catalog) = self
            .state
            .skills
            .as_ref()
            .filter(|_| uri.starts_with(SKILL_SCHEME))
        else {
            return Ok(None);
        };
        let asked = uri.trim_end_matches('/');
        for entry in self.skills_for(grant).await?.iter() {
            let Some(folder) = entry.uri.strip_suffix(SKILL_MD_SUFFIX) else {
                continue;
            };
            let Some(rest) = asked.strip_prefix(folder) else {
                continue;
            };
            if !(rest.is_empty() || rest.starts_with('/')) {
                continue;
            }
            let Some(md) = entry.files.iter().find(|f| f.uri == entry.uri) else {
                continue;
            };
            let target_folder = md
                .target
                .strip_suffix(SKILL_MD_SUFFIX)
                .unwrap_or(&md.target);
            let mut target = format!("{target_folder}{rest}");
            // Prefix-style directories (s3) end in `/`, as the source's root does.
            if catalog.sources()[entry.source].root.ends_with('/') {
                target.push('/');
            }
            return Ok(Some(SkillFolder {
                target,
                asked: asked.to_owned(),
                skill_root: target_folder.to_owned(),
            }));
        }
        Err(Error::not_found(uri))
    }

    /// `resources/list` with every visible skill's `SKILL.md` after the mounts' resources
    /// (`text/markdown`, named and described by its frontmatter). Cursors into that part
    /// carry a tag of their own; any other cursor is the mounts' listing's.
    pub(super) async fn list_with_skills(
        &self,
        grant: Option<&Grant>,
        cursor: Option<&str>,
    ) -> Result<super::ListPage> {
        if self.state.skills.is_none() {
            return self.list_page(grant, cursor).await;
        }
        let size = self.state.settings.page_size.max(1);
        // A cursor inside the skills part, or the mounts' page before it.
        let in_skills = cursor.and_then(|c| match self.open_cursor(c, LISTING_SKILLS) {
            Ok(Some((0, rest))) => Some(String::from_utf8(rest).unwrap_or_default()),
            _ => None,
        });
        let (mut page, after) = match in_skills {
            Some(after) => (
                super::ListPage {
                    items: Vec::new(),
                    next_cursor: None,
                    hints: hints_for(grant, self.state.list_cache),
                    skipped: Vec::new(),
                },
                after,
            ),
            None => {
                let mut page = self.list_page(grant, cursor).await?;
                self.describe_skill_files(grant, &mut page.items).await?;
                if page.next_cursor.is_some() {
                    return Ok(page);
                }
                (page, String::new())
            }
        };
        let room = size.saturating_sub(page.items.len());
        let (all, mut rest) = self.visible_skills_after(grant, &after, room + 1).await?;
        if rest.len() > room {
            rest.truncate(room);
            let last = rest.last().map_or(after.as_str(), |&i| all[i].uri.as_str());
            page.next_cursor = Some(self.tagged_cursor(0, LISTING_SKILLS, &[last.as_bytes()]));
        }
        page.items.extend(rest.iter().map(|&i| &all[i]).map(|s| {
            let md = s.files.iter().find(|f| f.uri == s.uri);
            let mut meta = mcpr_core::ResourceMeta {
                uri: s.uri.clone(),
                size: md.map(|f| f.size),
                ..Default::default()
            };
            describe_as_skill(&mut meta, s);
            meta
        }));
        Ok(page)
    }

    /// Every listing entry (of `resources/list`, a directory read, the tool bridge's
    /// listings and searches) that is a skill's `SKILL.md` by its mount URI, described as
    /// the skill entry is (`text/markdown`, name, title and description from the
    /// frontmatter), from the skills the caller holding `grant` may see: a client finds the
    /// skill whichever URI it meets first, and a hidden mount's skill describes nothing.
    pub(super) async fn describe_skill_files(
        &self,
        grant: Option<&Grant>,
        items: &mut [mcpr_core::ResourceMeta],
    ) -> Result<()> {
        if self.state.skills.is_none() || items.is_empty() {
            return Ok(());
        }
        let skills = self.skills_for(grant).await?;
        let by_target: std::collections::HashMap<&str, &SkillEntry> = skills
            .iter()
            .filter_map(|s| {
                let md = s.files.iter().find(|f| f.uri == s.uri)?;
                Some((md.target.as_str(), s))
            })
            .collect();
        for m in items {
            if let Some(s) = by_target.get(m.uri.as_str()) {
                describe_as_skill(m, s);
            }
        }
        Ok(())
    }
}

impl Service {
    /// Whether [`Service::scan`] under `prefix` walks the skills' files: a `skill://`
    /// prefix, when a mount carries skills.
    pub(super) fn is_skills_prefix(&self, prefix: &str) -> bool {
        self.state.skills.is_some() && prefix.starts_with(SKILL_SCHEME)
    }

    /// [`Service::scan`] under a `skill://` `prefix`: the files of the skills a caller
    /// holding `grant` may see whose URI starts with `prefix` and that `keep` accepts,
    /// skill by skill in URI order and each skill's files in URI order, with their sizes
    /// from the manifest; a skill's `SKILL.md` named and described by its frontmatter,
    /// every other file named by its path after `skill://`. As bounded as the mounts'
    /// scan: at most [`SCAN_MAX_PAGES`] pages' worth of files examined per call, stopping
    /// once a page's worth matched; the cursor (tagged for this walk only) continues after
    /// the last file examined.
    pub(super) async fn scan_skills(
        &self,
        grant: Option<&Grant>,
        cursor: Option<&str>,
        prefix: &str,
        keep: &(dyn Fn(&mcpr_core::ResourceMeta) -> bool + Sync),
    ) -> Result<ScanPage> {
        let after = match cursor {
            None => None,
            Some(c) => match self.open_cursor(c, SCAN_SKILLS)? {
                Some((0, rest)) => {
                    let text =
                        String::from_utf8(rest).map_err(|_| invalid_cursor("unknown position"))?;
                    let (skill, file) = text
                        .split_once('\n')
                        .ok_or_else(|| invalid_cursor("unknown position"))?;
                    Some((skill.to_owned(), file.to_owned()))
                }
                _ => {
                    return Err(invalid_cursor(
                        "it does not continue a listing under a skill:// prefix",
                    ));
                }
            },
        };
        let size = self.state.settings.page_size.max(1);
        let budget = SCAN_MAX_PAGES * size;
        let all = self.skills_for(grant).await?;
        let start = after
            .as_ref()
            .map_or(0, |(skill, _)| all.partition_point(|s| s.uri < *skill));
        let (mut items, mut examined, mut next) = (Vec::new(), 0usize, None);
        let mut last: Option<(&str, &str)> = None;
        'skills: for s in &all[start..] {
            let folder = s.uri.strip_suffix("SKILL.md").unwrap_or(&s.uri);
            // A skill none of whose files can start with the prefix is not examined.
            if !(folder.starts_with(prefix) || prefix.starts_with(folder)) {
                continue;
            }
            for f in &s.files {
                let resumed_past = after
                    .as_ref()
                    .is_some_and(|(skill, file)| s.uri == *skill && f.uri <= *file);
                if resumed_past || !f.uri.starts_with(prefix) {
                    continue;
                }
                if items.len() >= size || examined >= budget {
                    next = last;
                    break 'skills;
                }
                examined += 1;
                last = Some((s.uri.as_str(), f.uri.as_str()));
                let mut meta = mcpr_core::ResourceMeta {
                    uri: f.uri.clone(),
                    name: f.uri.trim_start_matches(SKILL_SCHEME).to_owned(),
                    size: Some(f.size),
                    ..Default::default()
                };
                if f.uri == s.uri {
                    describe_as_skill(&mut meta, s);
                }
                if keep(&meta) {
                    items.push(meta);
                }
            }
        }
        Ok(ScanPage {
            items,
            next_cursor: next.map(|(skill, file)| {
                self.tagged_cursor(0, SCAN_SKILLS, &[skill.as_bytes(), b"\n", file.as_bytes()])
            }),
            examined,
            skipped: Vec::new(),
        })
    }
}

/// `meta`, a listing entry of `skill`'s `SKILL.md`, named, titled and described by its
/// frontmatter (a `title` field, when the frontmatter has one as text).
fn describe_as_skill(meta: &mut mcpr_core::ResourceMeta, skill: &SkillEntry) {
    meta.name = skill.frontmatter.name.clone();
    meta.description = Some(skill.frontmatter.description.clone());
    meta.mime_type = Some("text/markdown".into());
    if let Some(title) = skill
        .frontmatter
        .extra
        .get("title")
        .and_then(|t| t.as_str())
    {
        meta.title = Some(title.to_owned());
    }
}

/// A `skill://` folder and the mount's folder behind it (see [`Service::skill_folder`]).
pub(super) struct SkillFolder {
    /// The mount's directory URI to read.
    pub(super) target: String,
    /// The `skill://` URI as asked, without a trailing `/`.
    pub(super) asked: String,
    /// The mount's URI of the skill's own folder, without a trailing `/`.
    pub(super) skill_root: String,
}

/// `e`, an error of the mount's URI `target` behind the `skill://` URI `asked`, as about
/// `asked` only: a caller names skills, and the mount's path (which may say where a mount
/// lives, or that it exists) is not for it.
pub(super) fn as_asked(mut e: Error, asked: &str, target: &str) -> Error {
    if e.kind == mcpr_core::ErrorKind::NotFound {
        return Error::not_found(asked);
    }
    let bare = target.trim_end_matches('/');
    if !bare.is_empty() {
        e.message = e.message.replace(bare, asked);
    }
    if e.uri.is_some() {
        e.uri = Some(asked.to_owned());
    }
    e.details = e.details.map(|d| {
        d.into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(t) if t.contains(bare) => {
                    (k, serde_json::Value::String(t.replace(bare, asked)))
                }
                other => (k, other),
            })
            .collect()
    });
    e
}
