//! `resources/list`: an api mount's fixed endpoints and a web mount's `pages`, in URI order,
//! paged by keyset (the position is the last URI served).

use mcpr_core::{Error, ErrorKind, Page, PageRequest, ResourceMeta, Result};

use crate::config::{HttpConfig, HttpKind};

/// The listed resources of a mount, sorted by URI, without duplicates.
pub(crate) fn resources(config: &HttpConfig) -> Vec<ResourceMeta> {
    let mut out: Vec<ResourceMeta> = match config.kind {
        HttpKind::Api => config
            .endpoints
            .iter()
            .filter(|e| !e.uri.contains('{'))
            .map(|e| ResourceMeta {
                uri: e.uri.clone(),
                name: e.name.clone(),
                description: e.description.clone(),
                mime_type: e.mime_type.clone(),
                ..ResourceMeta::default()
            })
            .collect(),
        HttpKind::Web => config
            .pages
            .iter()
            .filter_map(|p| crate::target::web_url(&config.allow, p).map(|_| p))
            .map(|p| ResourceMeta {
                uri: p.clone(),
                name: page_name(p),
                title: None,
                description: Some(format!("The web page {p}")),
                mime_type: (config.html == crate::HtmlMode::Markdown)
                    .then(|| "text/markdown".to_owned())
                    .filter(|_| looks_like_html(p)),
                ..ResourceMeta::default()
            })
            .collect(),
    };
    out.sort_by(|a, b| a.uri.cmp(&b.uri));
    out.dedup_by(|a, b| a.uri == b.uri);
    out
}

/// The last path segment of a page URL, or its host: a short programmatic name.
fn page_name(url: &str) -> String {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or(url)
        .to_owned()
}

/// Pages whose URL says HTML (`.html`, `.htm` or a directory): only these are advertised as
/// Markdown before they are read; anything else leaves the type to the upstream.
fn looks_like_html(url: &str) -> bool {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    path.ends_with('/') || path.ends_with(".html") || path.ends_with(".htm")
}

/// One page after `page.after` (a URI served before).
pub(crate) fn page(all: &[ResourceMeta], page: &PageRequest) -> Result<Page<ResourceMeta>> {
    let start = match &page.after {
        None => 0,
        Some(pos) => {
            let after = std::str::from_utf8(pos)
                .ok()
                .filter(|s| !s.is_empty() && s.len() <= 8192 && !s.contains('\0'))
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidCursor,
                        "the list position is not a URI this mount could have served",
                    )
                })?;
            all.partition_point(|m| m.uri.as_str() <= after)
        }
    };
    let limit = page.limit.max(1);
    let items: Vec<(Vec<u8>, ResourceMeta)> = all[start..]
        .iter()
        .take(limit + 1)
        .map(|m| (m.uri.clone().into_bytes(), m.clone()))
        .collect();
    Ok(Page::from_lookahead(items, limit))
}
