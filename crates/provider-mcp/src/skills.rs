//! The upstream's SEP-2640 skills (`skills/list`, every page), for the server's skills
//! catalog: each skill's manifest with its files' URIs rewritten to the mount's own, so the
//! catalog reads their bytes through the mount and checks them against the upstream's
//! digests before it publishes anything. What the upstream sends is bounded like a listing.

use mcpr_core::{RelayedSkill, RelayedSkillFile, Result};
use rmcp::model::{PaginatedRequestParams, SKILL_MD, SkillResources};

use crate::config::{MAX_PAGE_ENTRIES, MAX_UPSTREAM_CURSOR};
use crate::conn::Shared;
use crate::error;

/// The most `skills/list` pages asked for in one walk: an upstream that pages forever must
/// not hold the catalog; past this the walk fails as the upstream's fault.
const MAX_SKILL_PAGES: usize = 100;
/// The most skills taken from one upstream.
const MAX_SKILLS: usize = 10_000;
/// The most files one skill's manifest may name here; the catalog's own limit (the spec's
/// 512) then leaves a larger skill out with its reason.
const MAX_MANIFEST_FILES: usize = 4096;

const SCHEME: &str = "skill://";

/// Every skill the upstream lists, or `None` when it does not declare the extension.
pub(crate) async fn relayed(shared: &Shared) -> Result<Option<Vec<RelayedSkill>>> {
    let conn = shared.conn()?;
    if !conn
        .peer
        .peer_info()
        .is_some_and(|i| i.capabilities.supports_skills())
    {
        return Ok(None);
    }
    let name = shared.name();
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_SKILL_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let res = shared
            .call("skills/list", None, conn.peer.list_skills(Some(params)))
            .await?;
        if res.skills.len() > MAX_PAGE_ENTRIES {
            return Err(error::hostile(
                name,
                "skills/list",
                format!(
                    "a page of {} skills, more than the limit of {MAX_PAGE_ENTRIES}",
                    res.skills.len()
                ),
            ));
        }
        for skill in res.skills {
            if let Some(s) = relayed_skill(shared, &skill.uri, skill.resources) {
                out.push(s);
            }
        }
        if out.len() > MAX_SKILLS {
            return Err(error::hostile(
                name,
                "skills/list",
                format!("more than {MAX_SKILLS} skills"),
            ));
        }
        match res.next_cursor {
            None => return Ok(Some(out)),
            Some(c) if c.len() > MAX_UPSTREAM_CURSOR => {
                return Err(error::hostile(
                    name,
                    "skills/list",
                    format!("a cursor over {MAX_UPSTREAM_CURSOR} bytes"),
                ));
            }
            Some(c) => cursor = Some(c),
        }
    }
    Err(error::hostile(
        name,
        "skills/list",
        format!("more than {MAX_SKILL_PAGES} pages"),
    ))
}

/// One upstream entry as the catalog takes it, or `None` (logged) when its URI is no
/// `skill://…/SKILL.md` or its manifest is too large to consider.
fn relayed_skill(shared: &Shared, uri: &str, files: SkillResources) -> Option<RelayedSkill> {
    let path = uri
        .strip_prefix(SCHEME)
        .and_then(|p| p.strip_suffix(SKILL_MD))
        .and_then(|p| p.strip_suffix('/'))
        .filter(|p| !p.is_empty() && p.split('/').all(|s| !s.is_empty()));
    let Some(path) = path else {
        tracing::warn!(mount = %shared.name(), "skills/list: left out {uri:?}: not a skill://…/SKILL.md URI");
        return None;
    };
    let files = match files {
        SkillResources::Dynamic => None,
        SkillResources::Files(files) if files.len() > MAX_MANIFEST_FILES => {
            tracing::warn!(mount = %shared.name(), "skills/list: left out {uri:?}: a manifest of {} files", files.len());
            return None;
        }
        SkillResources::Files(files) => {
            let mut out = Vec::with_capacity(files.len());
            for f in files {
                // A file the mount cannot name (a URI that does not parse) has no bytes to
                // check against its digest: the skill cannot be published whole.
                let Some(ours) = shared.map.ours_checked(&f.uri) else {
                    tracing::warn!(mount = %shared.name(), "skills/list: left out {uri:?}: its file {:?} is no URI", f.uri);
                    return None;
                };
                let inside = f
                    .uri
                    .strip_prefix(SCHEME)
                    .and_then(|u| u.strip_prefix(path))
                    .and_then(|u| u.strip_prefix('/'))
                    .filter(|u| !u.is_empty())
                    .unwrap_or_default();
                out.push(RelayedSkillFile {
                    path: inside.to_owned(),
                    uri: ours,
                    digest: f.digest,
                    size: f.size,
                });
            }
            Some(out)
        }
        // A kind of manifest this rmcp does not know yet: nothing to check bytes against.
        _ => None,
    };
    Some(RelayedSkill {
        path: path.to_owned(),
        files,
    })
}
