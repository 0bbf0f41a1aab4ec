//! `Service::read_directory` (SEP-2640 `resources/directory/read`) over a real files mount:
//! pages with signed cursors bound to their directory, subfolders as `inode/directory`, the
//! spec's error for a file, not found for what a grant may not see.

use std::collections::BTreeSet;
use std::sync::Arc;

use mcpr_core::{ErrorKind, Provider};
use mcpr_provider_files::{FilesConfig, FilesProvider, encode_path_uri};
use mcpr_server::http::Grant;
use mcpr_server::{ServerState, Service, Settings, to_mcp_error};

struct Setup {
    _dir: tempfile::TempDir,
    root: String,
    service: Service,
}

fn setup(scope: Option<&str>) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for i in 0..7 {
        std::fs::write(root.join(format!("f{i}.md")), format!("file {i}")).unwrap();
    }
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::write(root.join("sub/x.txt"), "x").unwrap();
    std::fs::write(root.join(".env"), "SECRET=1").unwrap();
    let settings = Settings {
        page_size: 3,
        ..Settings::default()
    };
    let files: Arc<dyn Provider> = Arc::new(FilesProvider::new(FilesConfig::new(&root)).unwrap());
    let state = ServerState::with_bus(
        settings,
        vec![(files, scope.map(str::to_owned))],
        Arc::new(mcpr_core::LocalBus::default()),
    );
    Setup {
        _dir: dir,
        root: encode_path_uri(&root),
        service: Service::new(state),
    }
}

/// Every entry of `dir`, page by page, and how many pages it took.
async fn read_all(service: &Service, grant: Option<&Grant>, dir: &str) -> (Vec<String>, usize) {
    let (mut out, mut pages, mut cursor) = (Vec::new(), 0, None::<String>);
    loop {
        let page = service
            .read_directory(grant, dir, cursor.as_deref())
            .await
            .unwrap();
        pages += 1;
        assert!(page.items.len() <= 3, "a page over the page size");
        out.extend(page.items.into_iter().map(|m| {
            let dir_mark = m.mime_type.as_deref() == Some("inode/directory");
            if dir_mark {
                format!("{}/", m.uri)
            } else {
                m.uri
            }
        }));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return (out, pages),
        }
    }
}

#[tokio::test]
async fn directory_pages_carry_signed_cursors_without_gap_or_duplicate() {
    let s = setup(None);
    let (entries, pages) = read_all(&s.service, None, &s.root).await;
    let r = &s.root;
    let mut want: Vec<String> = (0..7).map(|i| format!("{r}/f{i}.md")).collect();
    want.push(format!("{r}/sub/"));
    assert_eq!(
        entries, want,
        "every visible child once, in name order, .env left out"
    );
    assert_eq!(pages, 3);
    let unique: BTreeSet<_> = entries.iter().collect();
    assert_eq!(unique.len(), entries.len());

    let (sub, _) = read_all(&s.service, None, &format!("{r}/sub")).await;
    assert_eq!(
        sub,
        vec![format!("{r}/sub/deeper/"), format!("{r}/sub/x.txt")]
    );
    let (empty, _) = read_all(&s.service, None, &format!("{r}/sub/deeper")).await;
    assert!(empty.is_empty());
}

#[tokio::test]
async fn a_cursor_continues_only_its_own_directory() {
    let s = setup(None);
    let r = &s.root;
    let first = s.service.read_directory(None, r, None).await.unwrap();
    let cursor = first.next_cursor.expect("more than a page");
    let e = s
        .service
        .read_directory(None, &format!("{r}/sub"), Some(&cursor))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidCursor, "{e:?}");
    // A listing cursor is no directory cursor, and the other way round.
    let listing = s.service.list(None, None).await.unwrap();
    let list_cursor = listing.next_cursor.expect("more than a page");
    let e = s
        .service
        .read_directory(None, r, Some(&list_cursor))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidCursor);
    let e = s.service.list(None, Some(&cursor)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidCursor);
    // A forged one.
    let mut forged = cursor.clone();
    forged.replace_range(0..1, if forged.starts_with('A') { "B" } else { "A" });
    let e = s
        .service
        .read_directory(None, r, Some(&forged))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidCursor);
}

#[tokio::test]
async fn a_file_is_not_a_directory_and_hidden_things_are_not_found() {
    let s = setup(Some("docs"));
    let r = &s.root;
    let docs = Grant {
        scopes: Some(["docs".to_owned()].into_iter().collect()),
        personal: false,
    };
    let e = s
        .service
        .read_directory(Some(&docs), &format!("{r}/f1.md"), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidParams);
    assert!(e.message.contains("not a directory"), "{}", e.message);
    assert_eq!(to_mcp_error(e).code.0, -32602);
    for missing in [
        format!("{r}/nope"),
        format!("{r}/.env"),
        "file:///etc".into(),
    ] {
        let e = s
            .service
            .read_directory(Some(&docs), &missing, None)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{missing}: {e:?}");
    }
    // Without the mount's scope, the directory does not exist.
    let none = Grant {
        scopes: Some(BTreeSet::new()),
        personal: false,
    };
    let e = s
        .service
        .read_directory(Some(&none), r, None)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
}
