//! Skills (SEP-2640): an organisation's agent skills published from the skills folders of
//! any files, git or s3 mount, and the skills a gateway (`mcp`) mount's upstream publishes. `frontmatter` parses a `SKILL.md`'s YAML; `catalog` finds
//! the skills through the providers' operations and keeps their manifests' digests.

pub mod catalog;
pub mod frontmatter;

pub use catalog::{
    Catalog, CatalogStats, MODE_META, NotPublished, SkillEntry, SkillFile, SkillSource,
    SourceReport,
};

use mcpr_core::Provider;

/// A mount's skills settings (`skills`, `skills_prefix`, `skills_ref`), by mount index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillsSetting {
    /// The mount's index, in mount order.
    pub mount: usize,
    /// The skills folder inside the mount (`.` for its root).
    pub path: String,
    /// Put before every skill path of the mount in `skill://` URIs; empty for none.
    pub prefix: String,
    /// For git mounts, the ref whose tree is served (when not set, the mount's default ref:
    /// its `default_ref`, else `HEAD`).
    pub rev: Option<String>,
}

/// The directory URI of a mount's skills folder: the folder under the mount's first URI
/// prefix, at the ref for git (whose URIs name a ref first), ending in `/` for s3 (whose
/// "directories" are key prefixes).
pub fn root_uri(provider: &dyn Provider, setting: &SkillsSetting) -> Option<String> {
    let info = provider.info();
    let base = info.uri_prefixes.first()?;
    let path = setting.path.trim_matches('/');
    let path = if path == "." { "" } else { path };
    let mut uri = base.trim_end_matches('/').to_owned();
    if info.kind == "git" {
        uri = base.clone();
        if !uri.ends_with('/') {
            uri.push('/');
        }
        // The ref the mount serves by default (its `default_ref`), unless `skills_ref` pins
        // another.
        let rev = match &setting.rev {
            Some(r) => r.clone(),
            None => provider.default_ref().unwrap_or_else(|| "HEAD".to_owned()),
        };
        uri.push_str(&rev);
    }
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        uri.push('/');
        uri.push_str(segment);
    }
    if info.kind == "s3" {
        uri.push('/');
    }
    Some(uri)
}

/// Whether `provider`'s mount relays skills of its own (a gateway mount: its upstream's)
/// rather than holding a skills folder.
pub fn relays(provider: &dyn Provider) -> bool {
    provider.info().kind == "mcp"
}

/// The catalog over the mounts `settings` names, or `None` when none carries skills.
pub(crate) fn catalog_for(
    settings: &crate::Settings,
    router: &crate::Router,
) -> Option<std::sync::Arc<Catalog>> {
    let sources: Vec<SkillSource> = settings
        .skills
        .iter()
        .filter_map(|s| {
            let mount = router.mounts().get(s.mount)?;
            Some(SkillSource {
                mount: mount.name.to_string(),
                index: mount.index,
                root: root_uri(mount.provider.as_ref(), s)?,
                at: mount.clone(),
                prefix: s.prefix.trim_matches('/').to_owned(),
                relay: relays(mount.provider.as_ref()),
            })
        })
        .collect();
    (!sources.is_empty()).then(|| {
        std::sync::Arc::new(Catalog::new(
            sources,
            settings.max_read_bytes,
            settings.request_timeout,
        ))
    })
}
