//! The protocol-neutral `Service` over real providers in temp dirs: listing across mounts with
//! scopes, reads a grant may not see, completion on a mount that does not declare it (also
//! through rmcp's client, as a client sees it), and the subscription limit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use mcpr_core::{
    Capabilities, Contents, ContentsBody, Error, ErrorKind, Page, PageRequest, Provider,
    ProviderInfo, ReadLimits, ResourceMeta, ResourceUri, Result, TemplateMeta,
};
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::http::Grant;
use mcpr_server::{
    ChangeTokens, CompletionRef, McpHandler, Notice, ServerState, Service, Settings, to_mcp_error,
};
use rmcp::ServiceExt;
use rmcp::model::{
    ArgumentInfo, CompleteRequestParams, ProtocolVersion, Reference, ResourceTemplateReference,
};
use rmcp::service::{ClientLifecycleMode, serve_client_with_lifecycle};

/// Notes in a directory as `note://NAME` resources: lists and reads them and advertises the
/// template `note://{name}`, but declares no completion. A real provider over real files,
/// standing for any source that addresses resources by template without suggesting values.
struct NotesProvider {
    dir: PathBuf,
    info: ProviderInfo,
    templates: Arc<[TemplateMeta]>,
}

impl NotesProvider {
    fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            info: ProviderInfo {
                kind: "notes",
                label: "notes".into(),
                uri_prefixes: vec!["note://".into()],
                capabilities: Capabilities {
                    list: true,
                    read: true,
                    templates: true,
                    complete: false,
                    watch: false,
                    list_changed: false,
                },
                cache: Default::default(),
            },
            templates: vec![TemplateMeta {
                uri_template: "note://{name}".into(),
                name: "note".into(),
                title: None,
                description: Some("One note by name".into()),
                mime_type: Some("text/plain".into()),
            }]
            .into(),
        }
    }
}

#[async_trait]
impl Provider for NotesProvider {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .map_err(|e| Error::internal(e.to_string()))?
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let after = page.after.map(|a| String::from_utf8(a).unwrap());
        let items = names
            .into_iter()
            .filter(|n| after.as_ref().is_none_or(|a| n > a))
            .take(page.limit + 1)
            .map(|n| {
                let meta = ResourceMeta {
                    uri: format!("note://{n}"),
                    name: n.clone(),
                    ..Default::default()
                };
                (n.into_bytes(), meta)
            })
            .collect();
        Ok(Page::from_lookahead(items, page.limit))
    }

    async fn read(&self, uri: &ResourceUri, _limits: &ReadLimits) -> Result<mcpr_core::ReadOutput> {
        let name = uri.as_str().strip_prefix("note://").unwrap_or_default();
        if name.is_empty() || name.contains('/') {
            return Err(Error::not_found(uri.as_str()));
        }
        let text = std::fs::read_to_string(self.dir.join(name))
            .map_err(|_| Error::not_found(uri.as_str()))?;
        Ok(vec![Contents {
            uri: uri.as_str().to_owned(),
            mime_type: Some("text/plain".into()),
            body: ContentsBody::Text(text),
            meta: None,
        }]
        .into())
    }

    fn templates(&self) -> Arc<[TemplateMeta]> {
        self.templates.clone()
    }
}

/// Two directories: a public files mount with `a0.txt`..`a4.txt` and a notes mount with
/// `n0`..`n2` that needs the scope `notes`.
struct Two {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    files: PathBuf,
    state: Arc<ServerState>,
    providers: Vec<(Arc<dyn Provider>, Option<String>)>,
}

fn two_mounts(settings: Settings) -> Two {
    let files_dir = tempfile::tempdir().unwrap();
    let notes_dir = tempfile::tempdir().unwrap();
    let files = files_dir.path().canonicalize().unwrap();
    for i in 0..5 {
        std::fs::write(files.join(format!("a{i}.txt")), format!("file {i}")).unwrap();
    }
    for i in 0..3 {
        std::fs::write(notes_dir.path().join(format!("n{i}")), format!("note {i}")).unwrap();
    }
    let files_provider: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(&files)).unwrap());
    let notes: Arc<dyn Provider> = Arc::new(NotesProvider::new(notes_dir.path()));
    let providers = vec![(files_provider, None), (notes, Some("notes".into()))];
    let state = ServerState::with_bus(
        settings,
        providers.clone(),
        Arc::new(mcpr_core::LocalBus::default()),
    );
    Two {
        _dirs: (files_dir, notes_dir),
        files,
        state,
        providers,
    }
}

impl Two {
    /// Another server over the same mounts (the same build and layout), with `settings`.
    fn another_server(&self, settings: Settings) -> Service {
        Service::new(ServerState::with_bus(
            settings,
            self.providers.clone(),
            Arc::new(mcpr_core::LocalBus::default()),
        ))
    }
}

/// Cursors are sealed under a secret: a server of the same build and mounts with a secret
/// of its own (random, as every server without `[cluster]`, and as the same server after a
/// restart) refuses another's cursor with -32602, saying why; one that shares the secret
/// (a cluster's replicas share `[cluster] secret`) continues the listing.
#[tokio::test]
async fn a_cursor_continues_only_on_a_server_sharing_its_secret() {
    let shared = |page_size| Settings {
        cursor_secret: Some(mcpr_core::CursorSecret::new(
            b"one cluster's secret, 32 bytes+",
        )),
        ..settings(page_size)
    };
    let t = two_mounts(shared(3));
    let first = Service::new(t.state.clone())
        .list(None, None)
        .await
        .unwrap();
    let cursor = first.next_cursor.expect("8 entries on pages of 3");

    let err = t
        .another_server(settings(3))
        .list(None, Some(&cursor))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidCursor, "{err}");
    assert!(
        err.message
            .contains("another server build, configuration or run"),
        "{err}"
    );
    assert_eq!(to_mcp_error(err).code.0, -32602);

    let second = t
        .another_server(shared(3))
        .list(None, Some(&cursor))
        .await
        .unwrap();
    let here = Service::new(t.state.clone())
        .list(None, Some(&cursor))
        .await
        .unwrap();
    let uris =
        |p: &mcpr_server::ListPage| p.items.iter().map(|m| m.uri.clone()).collect::<Vec<_>>();
    assert_eq!(uris(&second), uris(&here));
    assert_eq!(second.items.len(), 3);
}

fn grant(scopes: &[&str], personal: bool) -> Grant {
    Grant {
        scopes: Some(
            scopes
                .iter()
                .map(|s| s.to_string())
                .collect::<BTreeSet<_>>(),
        ),
        personal,
    }
}

/// Every URI a caller holding `grant` lists, page by page, and how many pages it took.
async fn list_all(service: &Service, grant: Option<&Grant>) -> (Vec<String>, usize) {
    let mut uris = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = service.list(grant, cursor.as_deref()).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 3, "a page holds at most page_size");
        uris.extend(page.items.into_iter().map(|m| m.uri));
        cursor = page.next_cursor;
        if cursor.is_none() {
            return (uris, pages);
        }
    }
}

fn settings(page_size: usize) -> Settings {
    Settings {
        page_size,
        ..Settings::default()
    }
}

/// A mount whose listing fails (its source is gone) does not hide what the mounts before it
/// listed, nor fail the listing: the page holds their entries, ends the list, and names the
/// mount it left out with that mount's error.
#[tokio::test]
async fn a_failing_mount_is_left_out_after_the_earlier_entries_and_named() {
    let t = two_mounts(settings(10));
    let service = Service::new(t.state.clone());
    std::fs::remove_dir_all(t._dirs.1.path()).unwrap();
    let first = service.list(None, None).await.unwrap();
    assert_eq!(first.items.len(), 5, "the files mount's entries are served");
    assert_eq!(
        first.next_cursor, None,
        "the list ends past the failing mount"
    );
    assert_eq!(first.skipped.len(), 1);
    assert_eq!(first.skipped[0].mount, "note://");
    assert_eq!(
        first.skipped[0].error.kind,
        ErrorKind::Internal,
        "{first:?}"
    );
    assert!(!first.skipped[0].partial);
}

#[tokio::test]
async fn list_pages_across_mounts_and_hides_mounts_outside_the_grant() {
    let t = two_mounts(settings(3));
    let service = Service::new(t.state.clone());
    let files: Vec<String> = (0..5)
        .map(|i| encode_path_uri(&t.files.join(format!("a{i}.txt"))))
        .collect();
    let notes: Vec<String> = (0..3).map(|i| format!("note://n{i}")).collect();

    // Unrestricted: both mounts, in mount order, every entry once, across page boundaries
    // inside a mount and between mounts.
    let (all, pages) = list_all(&service, None).await;
    assert_eq!(all, [files.clone(), notes.clone()].concat());
    assert_eq!(pages, 3);
    let (with_scope, _) = list_all(&service, Some(&grant(&["notes"], false))).await;
    assert_eq!(with_scope, all);

    // Without the scope the notes mount does not exist: not listed, and the files mount's
    // last page says there is no more.
    let (without, pages) = list_all(&service, Some(&grant(&[], false))).await;
    assert_eq!(without, files);
    assert_eq!(pages, 2);

    // A cursor that does not verify is an invalid cursor, -32602 on the wire.
    let err = service
        .list(None, Some("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidCursor);
    assert!(err.message.starts_with("invalid cursor: "), "{err}");
    assert_eq!(to_mcp_error(err).code.0, -32602);

    // The listing's hints: public, unless the grant is personal.
    let page = service.list(None, None).await.unwrap();
    assert_eq!(page.hints.scope, mcpr_core::CacheScope::Public);
    let page = service
        .list(Some(&grant(&["notes"], true)), None)
        .await
        .unwrap();
    assert_eq!(page.hints.scope, mcpr_core::CacheScope::Private);
    assert!(t.state.metrics().count("resources/list", "ok") >= 8);
    assert_eq!(
        t.state.metrics().count("resources/list", "invalid_params"),
        1
    );
}

#[tokio::test]
async fn read_of_a_mount_outside_the_grant_is_not_found() {
    let t = two_mounts(settings(100));
    let service = Service::new(t.state.clone());

    let read = service
        .read(Some(&grant(&["notes"], true)), "note://n1")
        .await
        .unwrap();
    assert_eq!(read.contents.len(), 1);
    assert_eq!(read.contents[0].body, ContentsBody::Text("note 1".into()));
    assert_eq!(read.hints.scope, mcpr_core::CacheScope::Private);

    // Without the scope, an existing note answers exactly what a missing one does.
    let hidden = service
        .read(Some(&grant(&[], false)), "note://n1")
        .await
        .unwrap_err();
    let missing = service.read(None, "note://nope").await.unwrap_err();
    assert_eq!(hidden.kind, ErrorKind::NotFound);
    assert_eq!(hidden.message, "Resource not found: note://n1");
    assert_eq!(
        (missing.kind, missing.message.replace("nope", "n1")),
        (hidden.kind, hidden.message.clone())
    );

    // The public mount is readable with any grant; a URI no mount owns is not found; a URI
    // that is not one is invalid params naming it.
    let uri = encode_path_uri(&t.files.join("a2.txt"));
    let read = service.read(Some(&grant(&[], false)), &uri).await.unwrap();
    assert_eq!(read.contents[0].body, ContentsBody::Text("file 2".into()));
    assert_eq!(read.hints.scope, mcpr_core::CacheScope::Public);
    let err = service.read(None, "s3://bucket/x").await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound);
    let err = service.read(None, "no scheme").await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    assert_eq!(err.uri.as_deref(), Some("no scheme"));

    let m = t.state.metrics();
    assert_eq!(m.count("resources/read", "ok"), 2);
    assert_eq!(m.count("resources/read", "not_found"), 3);
    assert_eq!(m.count("resources/read", "invalid_params"), 1);
}

#[tokio::test]
async fn complete_on_a_mount_without_completion_is_unsupported() {
    let t = two_mounts(settings(100));
    let service = Service::new(t.state.clone());
    let all = Some(grant(&["notes"], false));

    let err = service
        .complete(
            all.as_ref(),
            CompletionRef::Template("note://{name}"),
            "name",
            "n",
            BTreeMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unsupported);
    assert_eq!(err.message, "notes mounts do not complete arguments");

    // The files mount declares completion and answers, with `total` always set.
    let templates = service.templates(all.as_ref()).await.unwrap().templates;
    assert_eq!(templates.len(), 3, "{templates:?}");
    let done = service
        .complete(
            all.as_ref(),
            CompletionRef::Template(&templates[0].uri_template),
            "path",
            "a",
            BTreeMap::new(),
        )
        .await
        .unwrap();
    assert_eq!(done.values.len(), 5, "{done:?}");
    assert_eq!(done.total, Some(5));

    // An argument the template does not have is invalid params naming the ones it has, not
    // an empty completion that reads as "nothing starts with that".
    let unknown = service
        .complete(
            all.as_ref(),
            CompletionRef::Template(&templates[0].uri_template),
            "no_such_argument",
            "a",
            BTreeMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(unknown.kind, ErrorKind::InvalidParams);
    assert!(
        unknown
            .message
            .contains("has no argument \"no_such_argument\"")
            && unknown.message.contains("its arguments are path"),
        "{}",
        unknown.message
    );

    // A template the caller may not see is as unknown as one nobody advertises.
    let hidden = service
        .complete(
            Some(&grant(&[], false)),
            CompletionRef::Template("note://{name}"),
            "name",
            "n",
            BTreeMap::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(hidden.kind, ErrorKind::InvalidParams);
    assert_eq!(
        hidden.message,
        "no resource template \"note://{name}\"; see resources/templates/list"
    );
    let visible = service.templates(Some(&grant(&[], false))).await.unwrap();
    assert_eq!(visible.templates.len(), 2);
    let prompt = service
        .complete(None, CompletionRef::Other, "x", "", BTreeMap::new())
        .await
        .unwrap_err();
    assert_eq!(prompt.kind, ErrorKind::InvalidParams);
}

/// What an rmcp client sees: completing a template of a mount without completion is the
/// -32602 "unsupported" error, in both eras, not an empty completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rmcp_client_completing_an_undeclared_mount_gets_unsupported() {
    let t = two_mounts(settings(100));
    for mode in [
        ClientLifecycleMode::Initialize,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    ] {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let handler = McpHandler::new(t.state.clone());
        tokio::spawn(async move {
            if let Ok(running) = handler.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let client = serve_client_with_lifecycle((), client_io, mode)
            .await
            .expect("client connects");
        let request = CompleteRequestParams::new(
            Reference::Resource(ResourceTemplateReference::new("note://{name}")),
            ArgumentInfo::new("name", "n"),
        );
        let err = client.complete(request).await.unwrap_err();
        let text = format!("{err:?}");
        assert!(
            text.contains("-32602") && text.contains("notes mounts do not complete arguments"),
            "{text}"
        );
        client.cancel().await.unwrap();
    }
    assert_eq!(
        t.state
            .metrics()
            .count("completion/complete", "invalid_params"),
        2
    );
}

#[tokio::test]
async fn a_subscriber_holds_at_most_the_configured_number_of_uris() {
    let t = two_mounts(Settings {
        max_subscriptions_per_session: 2,
        ..Settings::default()
    });
    let service = Service::new(t.state.clone());
    let (subscriber, _notices) = service.add_subscriber(None);
    let id = subscriber.id();
    let uri = |i: usize| encode_path_uri(&t.files.join(format!("a{i}.txt")));

    service.subscribe(None, &uri(0), || id).await.unwrap();
    service.subscribe(None, &uri(1), || id).await.unwrap();
    // Subscribing again to a URI already held is not one more.
    service.subscribe(None, &uri(1), || id).await.unwrap();
    let err = service.subscribe(None, &uri(2), || id).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    assert_eq!(
        err.message,
        "this session already has 2 subscriptions, the limit (max_subscriptions_per_session); unsubscribe from some first"
    );
    assert_eq!(err.uri.as_deref(), Some(uri(2).as_str()));
    assert_eq!(t.state.registry().stats().watched_uris, 2);

    // Room again after an unsubscribe.
    service.unsubscribe(id, &uri(0)).await.unwrap();
    service.subscribe(None, &uri(2), || id).await.unwrap();

    // A URI of a mount outside the grant is not found, and registers no subscriber.
    let before = t.state.registry().stats().subscribers;
    let err = service
        .subscribe(Some(&grant(&[], false)), "note://n0", || {
            panic!("no subscriber is needed for a refused subscribe")
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound);
    assert_eq!(t.state.registry().stats().subscribers, before);

    // Dropping the subscriber releases everything it held.
    drop(subscriber);
    let stats = t.state.registry().stats();
    assert_eq!((stats.subscribers, stats.watched_uris), (0, 0));
}

#[tokio::test]
async fn a_change_between_a_listens_acceptance_and_its_start_is_reported_first() {
    let t = two_mounts(settings(100));
    let service = Service::new(t.state.clone());
    let tokens = ChangeTokens::default();
    let watched = encode_path_uri(&t.files.join("a0.txt"));

    // Only URIs of a mount that declares watching are accepted (notes do not).
    let mut uris = vec![watched.clone(), "note://n0".into(), "not a uri".into()];
    service.prepare_listen(&uris, &tokens).await;
    service.accept_listen(&mut uris);
    assert_eq!(uris, std::slice::from_ref(&watched));

    // The client changes the resource the moment it sees the acknowledgment, before the
    // listen has its watch.
    std::fs::write(t.files.join("a0.txt"), "changed, and longer than before").unwrap();
    let mut listen = service
        .listen(None, None, &uris, false, &tokens)
        .await
        .unwrap();
    let first = tokio::time::timeout(std::time::Duration::from_secs(2), listen.next())
        .await
        .expect("a notice at once");
    assert_eq!(first, Some(Notice::Updated(watched)));
    assert_eq!(t.state.registry().stats().watched_uris, 1);

    drop(listen);
    assert_eq!(t.state.registry().stats(), Default::default());
}
