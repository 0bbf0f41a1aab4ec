//! `kind = "conformance"`: a test-only provider serving the fixtures the official MCP
//! conformance suite (`@modelcontextprotocol/conformance`) reads, so CI can run the suite's
//! resource scenarios against the real server, transport and handler.
//!
//! Fixtures: `test://static-text`, `test://static-binary` (a PNG), `test://watched-resource`,
//! and the template `test://template/{id}/data`. While `test://watched-resource` is watched,
//! its content changes every `tick` and subscribers are notified, so a subscription scenario
//! sees real updates. Not for production: it serves fixed test data.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use mcpr_core::{
    Capabilities, ChangeSink, Contents, ContentsBody, Error, Page, PageRequest, Provider,
    ProviderInfo, ReadLimits, ReadOutput, ResourceMeta, ResourceUri, Result, TemplateMeta,
    UriTemplate, WatchGuard,
};

/// The text the suite expects from `test://static-text`.
pub const STATIC_TEXT: &str = "This is the content of the static text resource.";
const TEMPLATE: &str = "test://template/{id}/data";
const WATCHED: &str = "test://watched-resource";

/// A 1×1 transparent PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

/// The conformance fixtures provider.
pub struct ConformanceProvider {
    info: ProviderInfo,
    templates: Arc<[TemplateMeta]>,
    template: UriTemplate,
    /// Bumped on every tick while watched; part of the watched resource's content.
    version: Arc<AtomicU64>,
    tick: Duration,
}

impl ConformanceProvider {
    /// A provider whose watched resource changes every `tick` while subscribed.
    pub fn new(tick: Duration) -> Self {
        Self {
            info: ProviderInfo {
                kind: "conformance",
                label: "conformance fixtures (test://)".into(),
                uri_prefixes: vec!["test://".into()],
                capabilities: Capabilities {
                    list: true,
                    read: true,
                    templates: true,
                    complete: false,
                    watch: true,
                    list_changed: false,
                },
                cache: Default::default(),
            },
            templates: vec![TemplateMeta {
                uri_template: TEMPLATE.into(),
                name: "template-data".into(),
                title: Some("Template data".into()),
                description: Some("Data for one id; the id appears in the content".into()),
                mime_type: Some("application/json".into()),
            }]
            .into(),
            template: UriTemplate::parse(TEMPLATE).expect("fixture template parses"),
            version: Arc::new(AtomicU64::new(0)),
            tick,
        }
    }

    fn fixtures(&self) -> Vec<ResourceMeta> {
        let meta = |uri: &str, name: &str, mime: &str, size: usize| ResourceMeta {
            uri: uri.into(),
            name: name.into(),
            mime_type: Some(mime.into()),
            size: Some(size as u64),
            ..Default::default()
        };
        vec![
            meta(
                "test://static-binary",
                "static-binary",
                "image/png",
                PNG.len(),
            ),
            meta(
                "test://static-text",
                "static-text",
                "text/plain",
                STATIC_TEXT.len(),
            ),
            meta(
                WATCHED,
                "watched-resource",
                "text/plain",
                self.watched_text().len(),
            ),
        ]
    }

    fn watched_text(&self) -> String {
        format!(
            "Watched resource, version {}",
            self.version.load(Ordering::Relaxed)
        )
    }
}

#[async_trait]
impl Provider for ConformanceProvider {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        let all = self.fixtures();
        let start = match page.after {
            Some(after) => all
                .iter()
                .position(|m| m.uri.as_bytes() > after.as_slice())
                .unwrap_or(all.len()),
            None => 0,
        };
        let end = (start + page.limit.max(1)).min(all.len());
        let next = (end < all.len()).then(|| all[end - 1].uri.clone().into_bytes());
        Ok(Page {
            items: all[start..end].to_vec(),
            next,
            hints: None,
        })
    }

    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<ReadOutput> {
        let text = |t: String, mime: &str| Contents {
            uri: uri.as_str().into(),
            mime_type: Some(mime.into()),
            body: ContentsBody::Text(t),
            meta: None,
        };
        let out = match uri.as_str() {
            "test://static-text" => text(STATIC_TEXT.into(), "text/plain"),
            "test://static-binary" => Contents {
                uri: uri.as_str().into(),
                mime_type: Some("image/png".into()),
                body: ContentsBody::Blob(PNG.to_vec()),
                meta: None,
            },
            WATCHED => text(self.watched_text(), "text/plain"),
            other => match self
                .template
                .matches(other)
                .and_then(|v| v.get("id").cloned())
            {
                Some(id) if !id.is_empty() => {
                    let escaped: String = id.chars().flat_map(char::escape_default).collect();
                    text(
                        format!(
                            "{{\"id\":\"{escaped}\",\"templateTest\":true,\"data\":\"Data for ID: {escaped}\"}}"
                        ),
                        "application/json",
                    )
                }
                _ => return Err(Error::not_found(other)),
            },
        };
        if let ContentsBody::Text(t) = &out.body
            && t.len() as u64 > limits.max_bytes
        {
            return Err(Error::too_large(
                &out.uri,
                "the fixture",
                Some(t.len() as u64),
                mcpr_core::Limit::read(limits.max_bytes),
                None,
            ));
        }
        Ok(vec![out].into())
    }

    fn templates(&self) -> Arc<[TemplateMeta]> {
        self.templates.clone()
    }

    async fn watch(&self, uri: &ResourceUri, sink: ChangeSink) -> Result<WatchGuard> {
        match uri.as_str() {
            WATCHED => {
                let version = self.version.clone();
                let tick = self.tick;
                let task = tokio::spawn(async move {
                    let mut interval = tokio::time::interval(tick);
                    interval.tick().await;
                    loop {
                        interval.tick().await;
                        version.fetch_add(1, Ordering::Relaxed);
                        sink.updated(WATCHED);
                    }
                });
                Ok(WatchGuard::new(AbortOnDrop(task)))
            }
            "test://static-text" | "test://static-binary" => Ok(WatchGuard::new(())),
            other if self.template.matches(other).is_some() => Ok(WatchGuard::new(())),
            other => Err(Error::not_found(other)),
        }
    }
}

/// Stops the ticking task when the last subscriber leaves.
/// Builds `kind = "conformance"` mounts. The fixtures take no settings besides the keys
/// every mount shares, so any other key is refused like an unknown key of any kind.
pub struct ConformanceFactory;

/// A conformance mount's table: empty.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConformanceToml {}

impl mcpr_core::config::ProviderFactory for ConformanceFactory {
    fn kinds(&self) -> &'static [&'static str] {
        &["conformance"]
    }

    /// Each replica makes up its own fixtures.
    fn sharing(&self) -> mcpr_core::config::Sharing {
        mcpr_core::config::Sharing::Never
    }

    fn configure(
        &self,
        table: &mcpr_core::config::MountTable<'_>,
        _common: &mcpr_core::config::MountCommon,
    ) -> std::result::Result<Box<dyn mcpr_core::config::MountSpec>, mcpr_core::config::ConfigError>
    {
        let ConformanceToml {} = table.parse()?;
        Ok(Box::new(ConformanceSpec))
    }
}

/// A conformance mount: the suite's fixtures with the watched resource ticking every 500 ms.
#[derive(Debug)]
struct ConformanceSpec;

#[async_trait]
impl mcpr_core::config::MountSpec for ConformanceSpec {
    fn kind(&self) -> &str {
        "conformance"
    }

    async fn build(&self) -> Result<Arc<dyn Provider>> {
        Ok(Arc::new(ConformanceProvider::new(Duration::from_millis(
            500,
        ))))
    }

    /// In-memory fixtures: nothing to reach.
    fn is_local(&self) -> bool {
        true
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fixtures_read_as_the_suite_expects() {
        let p = ConformanceProvider::new(Duration::from_millis(20));
        let limits = ReadLimits { max_bytes: 1 << 20 };
        let c = p
            .read(&ResourceUri::parse("test://static-text").unwrap(), &limits)
            .await
            .unwrap()
            .contents;
        assert_eq!(c[0].body, ContentsBody::Text(STATIC_TEXT.into()));
        let c = p
            .read(
                &ResourceUri::parse("test://template/123/data").unwrap(),
                &limits,
            )
            .await
            .unwrap()
            .contents;
        let ContentsBody::Text(t) = &c[0].body else {
            panic!("text")
        };
        assert!(t.contains("123"));
        let e = p
            .read(&ResourceUri::parse("test://nonexistent").unwrap(), &limits)
            .await
            .unwrap_err();
        assert_eq!(e.kind, mcpr_core::ErrorKind::NotFound);
        let page = p
            .list(PageRequest {
                after: None,
                limit: 2,
            })
            .await
            .unwrap();
        let rest = p
            .list(PageRequest {
                after: page.next.clone(),
                limit: 2,
            })
            .await
            .unwrap();
        assert_eq!(page.items.len() + rest.items.len(), 3);
        assert!(rest.next.is_none());
    }

    #[tokio::test]
    async fn watched_resource_changes_while_watched() {
        let p = ConformanceProvider::new(Duration::from_millis(20));
        let bus = Arc::new(mcpr_core::LocalBus::default());
        let mut rx = mcpr_core::ChangeBus::subscribe(bus.as_ref());
        let g = p
            .watch(
                &ResourceUri::parse(WATCHED).unwrap(),
                ChangeSink::new(bus.clone(), "m0"),
            )
            .await
            .unwrap();
        let ev = tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            ev,
            mcpr_core::ChangeEvent::Updated {
                uri: WATCHED.into()
            }
        );
        drop(g);
        tokio::time::sleep(Duration::from_millis(60)).await;
        while rx.try_recv().is_ok() {}
        assert!(
            tokio::time::timeout(Duration::from_millis(100), rx.recv())
                .await
                .is_err()
        );
    }
}
