//! The suite itself must fail a provider that breaks the contract: an in-memory provider,
//! correct by default, with one fault switched on per run, and the panic naming the fault.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use mcpr_core::{
    Capabilities, Contents, ContentsBody, Error, ErrorKind, Page, PageRequest, Provider,
    ProviderInfo, ReadLimits, ReadOutput, ResourceMeta, ResourceUri, Result,
};
use mcpr_testkit::{Fixture, run_suite};

const PREFIX: &str = "mem://m";

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    ListsOutsidePrefix,
    AcceptsGarbagePosition,
    TruncatesOverLimit,
    ListsWhenUndeclared,
    TrailingEmptyPage,
    TokenWithoutSaying,
    DirectoryPagesOverlap,
    FileReadsAsDirectory,
}

struct Mem {
    info: ProviderInfo,
    items: BTreeMap<String, Vec<u8>>,
    fault: Fault,
}

fn items() -> BTreeMap<String, Vec<u8>> {
    (0..7)
        .map(|i| {
            (
                format!("{PREFIX}/r{i}"),
                format!("resource {i}\n").into_bytes(),
            )
        })
        .collect()
}

impl Mem {
    fn with_fault(fault: Fault) -> Arc<dyn Provider> {
        let mut items = items();
        if fault == Fault::ListsOutsidePrefix {
            items.insert("mem://m-evil/x".into(), b"x".to_vec());
        }
        Arc::new(Self {
            info: ProviderInfo {
                kind: "mem",
                label: "memory".into(),
                uri_prefixes: vec![PREFIX.into()],
                capabilities: Capabilities {
                    list: fault != Fault::ListsWhenUndeclared,
                    read: true,
                    ..Capabilities::default()
                },
                cache: Default::default(),
            },
            items,
            fault,
        })
    }
}

#[async_trait]
impl Provider for Mem {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        // A position is the last URI served; anything else is refused.
        let after = match &page.after {
            None => None,
            Some(a) => match std::str::from_utf8(a) {
                Ok(s) if s.starts_with("mem://") => Some(s.to_owned()),
                _ if self.fault == Fault::AcceptsGarbagePosition => None,
                _ => return Err(Error::new(ErrorKind::InvalidCursor, "bad position")),
            },
        };
        let rest: Vec<(Vec<u8>, ResourceMeta)> = self
            .items
            .keys()
            .filter(|u| after.as_ref().is_none_or(|a| u.as_str() > a.as_str()))
            .map(|u| {
                let meta = ResourceMeta {
                    uri: u.clone(),
                    name: u.clone(),
                    ..Default::default()
                };
                (u.clone().into_bytes(), meta)
            })
            .collect();
        let mut out = Page::from_lookahead(rest.clone(), page.limit);
        if self.fault == Fault::TrailingEmptyPage && rest.len() == page.limit {
            out.next = rest.last().map(|(p, _)| p.clone());
        }
        Ok(out)
    }

    async fn read(&self, uri: &ResourceUri, limits: &ReadLimits) -> Result<ReadOutput> {
        let mut bytes = self
            .items
            .get(uri.as_str())
            .ok_or_else(|| Error::not_found(uri.as_str()))?
            .clone();
        if bytes.len() as u64 > limits.max_bytes {
            if self.fault != Fault::TruncatesOverLimit {
                return Err(Error::too_large(
                    uri.as_str(),
                    "the item",
                    Some(bytes.len() as u64),
                    mcpr_core::Limit::read(limits.max_bytes),
                    None,
                ));
            }
            bytes.truncate(limits.max_bytes as usize);
        }
        Ok(vec![Contents {
            uri: uri.as_str().into(),
            mime_type: None,
            body: ContentsBody::Text(String::from_utf8(bytes).unwrap()),
            meta: None,
        }]
        .into())
    }

    async fn read_directory(
        &self,
        uri: &ResourceUri,
        page: PageRequest,
    ) -> Result<Page<ResourceMeta>> {
        // One flat directory, the prefix itself; its children are the items.
        if uri.as_str() != PREFIX {
            if !self.items.contains_key(uri.as_str()) {
                return Err(Error::not_found(uri.as_str()));
            }
            if self.fault != Fault::FileReadsAsDirectory {
                return Err(mcpr_core::not_a_directory(uri.as_str()));
            }
        }
        let after = page
            .after
            .as_ref()
            .map(|a| String::from_utf8_lossy(a).into_owned());
        let rest: Vec<(Vec<u8>, ResourceMeta)> = self
            .items
            .keys()
            .filter(|_| uri.as_str() == PREFIX)
            .filter(|u| after.as_ref().is_none_or(|a| u.as_str() > a.as_str()))
            .map(|u| {
                let meta = ResourceMeta {
                    uri: u.clone(),
                    name: u.clone(),
                    ..Default::default()
                };
                (u.clone().into_bytes(), meta)
            })
            .collect();
        let mut out = Page::from_lookahead(rest.clone(), page.limit);
        if self.fault == Fault::DirectoryPagesOverlap && out.next.is_some() && out.items.len() > 1 {
            // Resume before the last entry served: the next page repeats it.
            out.next = Some(out.items[out.items.len() - 2].uri.clone().into_bytes());
        }
        Ok(out)
    }

    async fn change_token(&self, _uri: &ResourceUri) -> Option<String> {
        (self.fault == Fault::TokenWithoutSaying).then(|| "t".into())
    }
}

struct Fx;

#[async_trait]
impl Fixture for Fx {
    fn expected(&self) -> Vec<(String, Vec<u8>)> {
        items().into_iter().collect()
    }
    fn missing_uri(&self) -> String {
        format!("{PREFIX}/nope")
    }
    async fn modify(&self, _uri: &str) {}
    async fn add(&self) -> String {
        unreachable!("the memory provider declares no list_changed")
    }
    fn directories(&self) -> Vec<String> {
        vec![PREFIX.into()]
    }
    fn unknown_positions(&self) -> Vec<(Vec<u8>, Option<String>)> {
        vec![
            (
                format!("{PREFIX}/r3x").into_bytes(),
                Some(format!("{PREFIX}/r4")),
            ),
            (format!("{PREFIX}/z").into_bytes(), None),
        ]
    }
}

/// Run the suite on a provider with `fault`; the panic message, if it failed.
async fn failure(fault: Fault) -> Option<String> {
    let task = tokio::spawn(async move { run_suite(Mem::with_fault(fault), &Fx).await });
    let panic = task.await.err()?.into_panic();
    Some(
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_correct_provider_passes() {
    assert_eq!(failure(Fault::None).await, None);
}

#[tokio::test]
async fn each_broken_contract_is_named() {
    for (fault, names) in [
        (Fault::ListsOutsidePrefix, "prefixes:"),
        (
            Fault::AcceptsGarbagePosition,
            "positions: malformed position",
        ),
        (Fault::TruncatesOverLimit, "too large:"),
        (Fault::ListsWhenUndeclared, "unsupported: list"),
        (
            Fault::TrailingEmptyPage,
            "list: the last page must have `next` None",
        ),
        (Fault::TokenWithoutSaying, "change_token:"),
        (Fault::DirectoryPagesOverlap, "without a gap or a duplicate"),
        (
            Fault::FileReadsAsDirectory,
            "a directory read of a file must fail",
        ),
    ] {
        let msg = failure(fault)
            .await
            .unwrap_or_else(|| panic!("the suite passed a provider that breaks {names:?}"));
        assert!(msg.contains(names), "expected {names:?} in: {msg}");
    }
}
