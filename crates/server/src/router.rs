//! The router: which mount owns a URI (longest prefix at a boundary) or a template.

use std::sync::Arc;

use mcpr_core::{Provider, ResourceUri};

/// One mounted provider and its position in the mount list.
#[derive(Clone)]
pub struct Mount {
    /// Position in config order; cursors name mounts by it.
    pub index: u32,
    /// The mount's name on the change bus: its first URI prefix, unique within a config and
    /// the same on every replica that mounts the same source (unlike `index`).
    pub name: Arc<str>,
    /// The provider.
    pub provider: Arc<dyn Provider>,
    /// The token scope a caller needs to see this mount over HTTP; `None` for everyone.
    pub scope: Option<String>,
    /// The calls made to `provider`, counted by the layer they all go through.
    pub calls: Arc<crate::metrics::ProviderCalls>,
}

/// The name on the change bus of the mount at position `index` served by `provider`: its
/// first URI prefix (the same on every replica mounting the same source).
pub fn mount_name(index: usize, provider: &dyn Provider) -> String {
    provider
        .info()
        .uri_prefixes
        .first()
        .map_or_else(|| format!("#{index}"), Clone::clone)
}

/// What a mount serves, as a reader should see it ([`mcpr_core::addresses`]): for the
/// `initialize` / `server/discover` instructions and `check-config`.
pub fn mount_addresses(provider: &dyn Provider) -> Vec<String> {
    mcpr_core::addresses(&provider.info().uri_prefixes, &provider.templates())
}

/// Maps URIs and templates to mounts.
#[derive(Clone)]
pub struct Router {
    mounts: Arc<Vec<Mount>>,
    /// (prefix, mount index), longest prefix first, so the first match is the best one.
    prefixes: Arc<Vec<(String, u32)>>,
}

impl Router {
    /// A router over `providers` (each with the scope it requires) in mount order.
    pub fn new(providers: Vec<(Arc<dyn Provider>, Option<String>)>) -> Self {
        let mounts: Vec<Mount> = providers
            .into_iter()
            .enumerate()
            .map(|(i, (provider, scope))| Mount {
                index: i as u32,
                name: mount_name(i, &*provider).into(),
                provider,
                scope,
                calls: Default::default(),
            })
            .collect();
        let mut prefixes: Vec<(String, u32)> = mounts
            .iter()
            .flat_map(|m| {
                m.provider
                    .info()
                    .uri_prefixes
                    .iter()
                    .map(move |p| (p.clone(), m.index))
            })
            .collect();
        prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        Self {
            mounts: Arc::new(mounts),
            prefixes: Arc::new(prefixes),
        }
    }

    /// Every mount in order.
    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    /// The mount owning `uri`: the longest prefix that matches at a boundary, so that
    /// `file:///srv/docs` does not own `file:///srv/docs-evil/x`.
    pub fn route(&self, uri: &ResourceUri) -> Option<&Mount> {
        // `file://localhost/…` is matched as `file:///…`; the provider reads it the same way.
        let s = uri.routing_form();
        self.prefixes.iter().find_map(|(p, idx)| {
            let rest = s.strip_prefix(p.as_str())?;
            // A prefix ending in `+` is a whole scheme word of a gateway mount
            // (`everything+` of `everything+demo://x`): what follows is another URI.
            let at_boundary =
                p.ends_with(['/', '+']) || rest.is_empty() || rest.starts_with(['/', '?', '#']);
            at_boundary.then(|| &self.mounts[*idx as usize])
        })
    }

    /// The mount named `name` on the change bus.
    pub fn by_name(&self, name: &str) -> Option<&Mount> {
        self.mounts.iter().find(|m| &*m.name == name)
    }

    /// The mount that advertises `template` exactly.
    pub fn route_template(&self, template: &str) -> Option<&Mount> {
        self.mounts.iter().find(|m| {
            m.provider
                .templates()
                .iter()
                .any(|t| t.uri_template == template)
        })
    }
}
