//! Focused checks of the URI forms, reads, listing metadata, history paging, completion and
//! the safety rules, each against a real repository.

mod common;

use common::{TestRepo, json, kind, read, rfc3339, text, two_commits};
use mcpr_core::{
    CompletionRequest, ContentsBody, ErrorKind, PageRequest, Provider, ReadLimits, ResourceUri,
};
use mcpr_provider_git::{GitConfig, GitProvider};

fn provider(repo: &TestRepo) -> GitProvider {
    GitProvider::new(GitConfig::new(repo.path())).unwrap()
}

/// main: x = "one", then "two"; feature/x and tags at the first commit.
#[tokio::test]
async fn every_ref_form_is_addressable() {
    let (r, c1, c2) = two_commits(TestRepo::new());
    let p = provider(&r);
    assert_eq!(text(&p, "git://main/x").await, "two\n");
    assert_eq!(
        text(&p, "git://main/docs/CHANGELOG.md").await,
        "# changes\n"
    );
    assert_eq!(text(&p, "git://feature%2Fx/x").await, "one\n");
    assert_eq!(text(&p, "git://feature%2fx/x").await, "one\n");
    assert_eq!(text(&p, "git://v0.1/x").await, "one\n");
    assert_eq!(text(&p, "git://v1.0/x").await, "one\n");
    assert_eq!(text(&p, "git://HEAD/x").await, "two\n");
    assert_eq!(text(&p, "git://refs%2Fheads%2Fmain/x").await, "two\n");
    assert_eq!(text(&p, "git://refs%2Ftags%2Fv1.0/x").await, "one\n");
    assert_eq!(text(&p, &format!("git://{c1}/x")).await, "one\n");
    assert_eq!(text(&p, &format!("git://{}/x", &c1[..7])).await, "one\n");
    assert_eq!(
        text(&p, &format!("git://{}/x", c2.to_uppercase())).await,
        "two\n"
    );
    // The commit resource: message, author, date, parents; an annotated tag is peeled.
    let c = json(&p, "git://main").await;
    assert_eq!(c["id"], c2.as_str());
    assert_eq!(c["message"], "second\n");
    assert_eq!(c["author"]["name"], "Ada Lovelace");
    assert_eq!(c["committer"]["date"], rfc3339(r.now()).as_str());
    assert_eq!(c["parents"][0]["id"], c1.as_str());
    assert_eq!(c["parents"][0]["uri"], format!("git://{c1}").as_str());
    assert_eq!(json(&p, "git://v1.0").await["id"], c1.as_str());
    for unknown in [
        "git://nope/x",
        "git://nope",
        "git://main~1/x",
        "git://main%5E/x",
        "git://feature/x",
        "git://refs%2Fheads%2Fnope/x",
        "git://main/nope",
        "git://0000000/x",
    ] {
        assert_eq!(kind(&p, unknown).await, ErrorKind::NotFound, "{unknown}");
    }
}

#[tokio::test]
async fn named_form_and_shadowed_refs() {
    let (r, _, _) = two_commits(TestRepo::new());
    // A tag and a branch with the same name: git's lookup picks the tag, so the branch is
    // listed under its full name.
    r.git(&["branch", "dup", "feature/x"]);
    r.git(&["tag", "dup", "main"]);
    let mut cfg = GitConfig::new(r.path());
    cfg.name = Some("docs".into());
    cfg.default = false;
    let p = GitProvider::new(cfg).unwrap();
    assert_eq!(p.info().uri_prefixes, vec!["git://@docs".to_owned()]);
    assert_eq!(text(&p, "git://@docs/main/x").await, "two\n");
    assert_eq!(text(&p, "git://@docs/feature%2Fx/x").await, "one\n");
    assert_eq!(kind(&p, "git://main/x").await, ErrorKind::NotFound);
    let page = p
        .list(PageRequest {
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    let uris: Vec<&str> = page.items.iter().map(|m| m.uri.as_str()).collect();
    assert!(uris.contains(&"git://@docs/dup"), "{uris:?}");
    assert!(uris.contains(&"git://@docs/refs%2Fheads%2Fdup"), "{uris:?}");
    assert!(uris.contains(&"git://@docs/feature%2Fx"), "{uris:?}");
    assert!(uris.contains(&"git://@docs/main/x"), "{uris:?}");
    assert_eq!(json(&p, "git://@docs/dup").await["message"], "second\n");
    assert_eq!(
        json(&p, "git://@docs/refs%2Fheads%2Fdup").await["message"],
        "first\n"
    );
    // Every template parses and the default-and-named mount answers both forms.
    let mut cfg = GitConfig::new(r.path());
    cfg.name = Some("docs".into());
    let both = GitProvider::new(cfg).unwrap();
    assert_eq!(text(&both, "git://main/x").await, "two\n");
    assert_eq!(text(&both, "git://@docs/main/x").await, "two\n");
    assert_eq!(both.templates().len(), 6);
    // A mount with neither form is refused.
    let mut bad = GitConfig::new(r.path());
    bad.default = false;
    assert!(GitProvider::new(bad).is_err());
    let mut bad = GitConfig::new(r.path());
    bad.name = Some("a/b".into());
    assert!(GitProvider::new(bad).is_err());
    let mut bad = GitConfig::new(r.path());
    bad.default_ref = Some("nope".into());
    assert_eq!(
        GitProvider::new(bad).err().unwrap().kind,
        ErrorKind::InvalidParams
    );
}

#[tokio::test]
async fn bare_repository_and_default_ref() {
    let (r, _, _) = two_commits(TestRepo::new());
    let bare = tempfile::tempdir().unwrap();
    let bare_path = bare.path().join("repo.git");
    r.git(&["clone", "-q", "--bare", ".", bare_path.to_str().unwrap()]);
    let mut cfg = GitConfig::new(&bare_path);
    cfg.default_ref = Some("feature/x".into());
    let p = GitProvider::new(cfg).unwrap();
    assert_eq!(text(&p, "git://main/x").await, "two\n");
    let page = p
        .list(PageRequest {
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    let uris: Vec<&str> = page.items.iter().map(|m| m.uri.as_str()).collect();
    assert!(uris.contains(&"git://feature%2Fx/x"), "{uris:?}");
    assert!(!uris.contains(&"git://main/x"), "{uris:?}");
}

#[tokio::test]
async fn symlinks_and_submodules_are_reported_not_followed() {
    let r = TestRepo::new();
    r.write("real.txt", b"inside\n");
    std::os::unix::fs::symlink("real.txt", r.dir.path().join("link.txt")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", r.dir.path().join("escape")).unwrap();
    std::os::unix::fs::symlink("../../..", r.dir.path().join("up")).unwrap();
    r.add_submodule(
        "sub",
        "1234567890abcdef1234567890abcdef12345678",
        "../lib.git",
    );
    r.commit("links");
    let p = provider(&r);
    let c = read(&p, "git://main/link.txt").await.unwrap();
    assert_eq!(c[0].mime_type.as_deref(), Some("inode/symlink"));
    assert_eq!(c[0].body, ContentsBody::Text("real.txt".into()));
    let meta = c[0].meta.as_ref().unwrap();
    assert_eq!(meta["io.github.mcp-resources/git"]["type"], "symlink");
    assert_eq!(text(&p, "git://main/escape").await, "/etc/passwd");
    for through in [
        "git://main/escape/x",
        "git://main/up/etc/passwd",
        "git://main/link.txt/x",
        "git://main/sub/README.md",
    ] {
        assert_eq!(kind(&p, through).await, ErrorKind::NotFound, "{through}");
    }
    let s = json(&p, "git://main/sub").await;
    assert_eq!(s["type"], "submodule");
    assert_eq!(s["commit"], "1234567890abcdef1234567890abcdef12345678");
    assert_eq!(s["url"], "../lib.git");
    let root = json(&p, "git://main/").await;
    let types: Vec<(String, String)> = root["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        types.contains(&("link.txt".into(), "symlink".into())),
        "{types:?}"
    );
    assert!(
        types.contains(&("sub".into(), "submodule".into())),
        "{types:?}"
    );
    assert!(
        types.contains(&("real.txt".into(), "file".into())),
        "{types:?}"
    );
    let page = p
        .list(PageRequest {
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    let link = page.items.iter().find(|m| m.name == "link.txt").unwrap();
    assert_eq!(link.mime_type.as_deref(), Some("inode/symlink"));
    let sub = page.items.iter().find(|m| m.name == "sub").unwrap();
    assert_eq!(sub.mime_type.as_deref(), Some("application/json"));
}

#[tokio::test]
async fn size_limit_names_size_and_limit() {
    let r = TestRepo::new();
    r.write("big.txt", &vec![b'a'; 5000]);
    // 32 MiB of zeros: tiny compressed, so only the header says how big it is.
    r.write("huge.bin", &vec![0u8; 32 << 20]);
    r.write("bin.dat", &[0, 159, 146, 150, 255]);
    r.write("image", b"\x89PNG\r\n\x1a\nrest");
    r.commit("big");
    let p = provider(&r);
    let small = ReadLimits { max_bytes: 1000 };
    let err = p
        .read(&ResourceUri::parse("git://main/big.txt").unwrap(), &small)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::TooLarge);
    assert!(
        err.message.contains("5000") && err.message.contains("1000"),
        "{}",
        err.message
    );
    assert_eq!(err.details.as_ref().unwrap()["size"], 5000);
    let t = std::time::Instant::now();
    let err = p
        .read(&ResourceUri::parse("git://main/huge.bin").unwrap(), &small)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::TooLarge);
    assert!(
        err.message.contains(&(32u64 << 20).to_string()),
        "{}",
        err.message
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(1),
        "{:?}",
        t.elapsed()
    );
    let c = read(&p, "git://main/bin.dat").await.unwrap();
    assert_eq!(c[0].body, ContentsBody::Blob(vec![0, 159, 146, 150, 255]));
    let c = read(&p, "git://main/image").await.unwrap();
    assert_eq!(c[0].mime_type.as_deref(), Some("image/png"));
    let c = read(&p, "git://main/big.txt").await.unwrap();
    assert_eq!(c[0].mime_type.as_deref(), Some("text/plain"));
}

#[tokio::test]
async fn history_pages_follow_first_parents() {
    let r = TestRepo::new();
    let mut touching = Vec::new();
    for i in 0..7 {
        r.write("x", format!("{i}\n").as_bytes());
        touching.push(r.commit(&format!("x {i}")));
        r.write("y", format!("{i}\n").as_bytes());
        r.commit(&format!("y {i}"));
    }
    touching.reverse();
    let p = provider(&r);
    let mut seen = Vec::new();
    let mut uri = "git://main/x?history&limit=3".to_owned();
    let mut pages = 0;
    loop {
        let doc = json(&p, &uri).await;
        pages += 1;
        for c in doc["commits"].as_array().unwrap() {
            seen.push(c["id"].as_str().unwrap().to_owned());
            assert_eq!(
                c["at"],
                format!("git://{}/x", c["id"].as_str().unwrap()).as_str()
            );
        }
        match doc["next"].as_str() {
            Some(n) => uri = n.to_owned(),
            None => break,
        }
    }
    assert_eq!(seen, touching);
    assert!(pages >= 3, "{pages} pages");
    // The whole ref: every commit.
    let doc = json(&p, "git://main?history&limit=100").await;
    assert_eq!(doc["commits"].as_array().unwrap().len(), 14);
    assert!(doc.get("next").is_none());
    // A bounded scan: at most 3 commits examined per page, yet paging reaches the end.
    let mut cfg = GitConfig::new(r.path());
    cfg.history_scan_limit = 3;
    let bounded = GitProvider::new(cfg).unwrap();
    let doc = json(&bounded, "git://main/x?history&limit=100").await;
    assert_eq!(doc["scanned"], 3);
    assert!(doc["commits"].as_array().unwrap().len() <= 2);
    assert!(doc["next"].is_string());
    // Bad cursors and parameters.
    assert_eq!(
        kind(
            &p,
            "git://main/x?history&after=0000000000000000000000000000000000000000"
        )
        .await,
        ErrorKind::InvalidParams
    );
    assert_eq!(
        kind(&p, "git://main/x?history&limit=0").await,
        ErrorKind::InvalidParams
    );
    assert_eq!(
        kind(&p, "git://main/nope?history").await,
        ErrorKind::NotFound
    );
    assert_eq!(
        kind(&p, "git://main/x?after=y").await,
        ErrorKind::InvalidParams
    );
}

#[tokio::test]
async fn last_modified_is_the_commit_that_changed_the_path() {
    let r = TestRepo::new();
    r.write("old", b"old\n");
    r.write("new", b"1\n");
    r.commit("first");
    let first = r.now();
    r.write("new", b"2\n");
    r.commit("second");
    let second = r.now();
    r.write("other", b"x\n");
    r.commit("third");
    let p = provider(&r);
    let page = p
        .list(PageRequest {
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    let lm = |name: &str| {
        page.items
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("{name} listed"))
            .last_modified
            .clone()
    };
    assert_eq!(lm("old"), Some(rfc3339(first)));
    assert_eq!(lm("new"), Some(rfc3339(second)));
    assert_eq!(lm("other"), Some(rfc3339(r.now())));
    assert_eq!(lm("main"), Some(rfc3339(r.now())));
    // With a depth of 1, "old" is beyond the bound: no date rather than a wrong one.
    let mut cfg = GitConfig::new(r.path());
    cfg.last_modified_depth = 1;
    let shallow = GitProvider::new(cfg).unwrap();
    let page = shallow
        .list(PageRequest {
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    let old = page.items.iter().find(|m| m.name == "old").unwrap();
    assert_eq!(old.last_modified, None);
}

#[tokio::test]
async fn completion_of_refs_and_paths_at_the_ref() {
    let (r, _, _) = two_commits(TestRepo::new());
    r.git(&["checkout", "-q", "feature/x"]);
    r.write("only-on-feature/f.txt", b"f\n");
    r.commit("feature");
    r.git(&["checkout", "-q", "main"]);
    let p = provider(&r);
    let complete = |arg: &str, value: &str, ctx: &[(&str, &str)]| {
        let req = CompletionRequest {
            template: "git://{ref}/{+path}".into(),
            argument: arg.into(),
            value: value.into(),
            context: ctx
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let p = &p;
        async move { p.complete(req).await.unwrap().values }
    };
    assert_eq!(complete("ref", "fea", &[]).await, vec!["feature/x"]);
    assert_eq!(complete("ref", "v", &[]).await, vec!["v0.1", "v1.0"]);
    assert!(complete("ref", "", &[]).await.contains(&"HEAD".to_owned()));
    assert_eq!(complete("path", "d", &[]).await, vec!["docs/"]);
    assert_eq!(
        complete("path", "docs/", &[]).await,
        vec!["docs/CHANGELOG.md"]
    );
    assert!(complete("path", "only", &[]).await.is_empty());
    assert_eq!(
        complete("path", "only", &[("ref", "feature/x")]).await,
        vec!["only-on-feature/"]
    );
    let err = p
        .complete(CompletionRequest {
            template: "git://{ref}/{+path}".into(),
            argument: "nope".into(),
            value: String::new(),
            context: Default::default(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidParams);
}

#[tokio::test]
async fn directory_reads_continue_in_blocks() {
    let r = TestRepo::new();
    for i in 0..1005 {
        r.write(&format!("d/f{i:04}"), b"x");
    }
    r.commit("many");
    let p = provider(&r);
    let doc = json(&p, "git://main/d").await;
    assert_eq!(doc["entries"].as_array().unwrap().len(), 1000);
    assert_eq!(doc["truncated"], true);
    let next = doc["next"].as_str().unwrap();
    assert_eq!(next, "git://main/d?after=f0999");
    let doc = json(&p, next).await;
    assert_eq!(doc["entries"].as_array().unwrap().len(), 5);
    assert_eq!(doc["truncated"], false);
    assert_eq!(
        kind(&p, "git://main/d/f0001?after=x").await,
        ErrorKind::InvalidParams
    );
}

#[tokio::test]
async fn forged_cursors_are_invalid() {
    let (r, _, _) = two_commits(TestRepo::new());
    let p = provider(&r);
    for bad in [
        b"x".to_vec(),
        b"t".to_vec(),
        b"t../etc".to_vec(),
        b"t/abs".to_vec(),
    ] {
        let err = p
            .list(PageRequest {
                after: Some(bad.clone()),
                limit: 10,
            })
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidCursor, "{bad:?}");
    }
}

#[tokio::test]
async fn non_repositories_and_unknown_ref_storage_are_refused_clearly() {
    let plain = tempfile::tempdir().unwrap();
    let err = GitProvider::new(GitConfig::new(plain.path()))
        .err()
        .unwrap();
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    // A ref storage git may add later is refused rather than read as if it were files.
    let r = TestRepo::new();
    r.write("x", b"x\n");
    r.commit("one");
    let config = r.path().join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[extensions]\n\trefStorage = future\n");
    text = text.replace("repositoryformatversion = 0", "repositoryformatversion = 1");
    std::fs::write(&config, text).unwrap();
    let err = GitProvider::new(GitConfig::new(r.path())).err().unwrap();
    assert_eq!(err.kind, ErrorKind::InvalidParams);
    assert!(err.message.contains("future"), "{}", err.message);
}

#[tokio::test]
async fn nothing_is_written_to_the_repository() {
    let (r, _, _) = two_commits(TestRepo::new());
    let snapshot = || {
        let out = std::process::Command::new("find")
            .arg(r.path().join(".git"))
            .args(["-printf", "%p %s %T@\n"])
            .output()
            .unwrap();
        let mut lines: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    };
    let before = snapshot();
    let p = provider(&r);
    let _ = p
        .list(PageRequest {
            after: None,
            limit: 100,
        })
        .await
        .unwrap();
    for u in [
        "git://main/x",
        "git://main",
        "git://main/x?history",
        "git://main/",
    ] {
        read(&p, u).await.unwrap();
    }
    assert_eq!(before, snapshot());
}

/// The default deny rules and the mount's `deny` apply to git paths as to files: secrets in
/// the tree are not listed, read (plain, as history, as a directory), completed or watched,
/// and each answer is exactly the one a path that does not exist gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_paths_answer_as_missing_everywhere() {
    use std::sync::Arc;
    use std::time::Duration;

    use mcpr_core::{ChangeBus as _, ChangeEvent, ChangeSink, Error, LocalBus};

    let r = TestRepo::new();
    for (path, body) in [
        ("README.md", "readme"),
        (".env", "SECRET=1"),
        ("app/.env.production", "SECRET=2"),
        ("app/main.rs", "fn main() {}"),
        ("certs/server.pem", "-----BEGIN"),
        ("certs/Deploy.PEM", "-----BEGIN"),
        ("certs/ca.txt", "public"),
        ("home/.ssh/authorized_keys", "ssh-ed25519 AAAA"),
        ("home/id_rsa", "-----BEGIN OPENSSH"),
        ("home/notes.md", "notes"),
        ("reports/private/q1.csv", "a,b"),
        ("reports/q1.csv", "c,d"),
    ] {
        r.write(path, body.as_bytes());
    }
    r.commit("tree with secrets");
    let mut cfg = GitConfig::new(r.path());
    cfg.deny = vec!["reports/private/".into()];
    let p = GitProvider::new(cfg).unwrap();

    let denied = [
        "git://main/.env",
        "git://main/app/.env.production",
        "git://main/certs/server.pem",
        "git://main/certs/Deploy.PEM",
        "git://main/home/.ssh",
        "git://main/home/.ssh/authorized_keys",
        "git://main/home/id_rsa",
        "git://main/reports/private",
        "git://main/reports/private/q1.csv",
        "git://main/.env?history",
        "git://main/home/.ssh?after=a",
        "git://HEAD/.env",
    ];
    for uri in denied {
        let e = read(&p, uri).await.expect_err(uri);
        assert_eq!(e, Error::not_found(uri), "{uri}");
        let missing = uri
            .replace("main/", "main/no-such-")
            .replace("HEAD/", "HEAD/nope");
        let m = read(&p, &missing).await.expect_err(&missing);
        assert_eq!(m.kind, e.kind, "{uri} vs {missing}");
    }
    // What stays visible is served.
    assert_eq!(text(&p, "git://main/README.md").await, "readme");
    assert_eq!(text(&p, "git://main/reports/q1.csv").await, "c,d");

    // The listing.
    let mut listed = Vec::new();
    let mut after = None;
    loop {
        let page = p.list(PageRequest { after, limit: 3 }).await.unwrap();
        listed.extend(page.items.into_iter().map(|m| m.uri));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    let files: Vec<&str> = listed
        .iter()
        .filter_map(|u| u.strip_prefix("git://main/"))
        .collect();
    assert_eq!(
        files,
        [
            "README.md",
            "app/main.rs",
            "certs/ca.txt",
            "home/notes.md",
            "reports/q1.csv"
        ]
    );

    // Directory reads.
    let names = |doc: serde_json::Value| -> Vec<String> {
        doc["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names(json(&p, "git://main/").await),
        ["README.md", "app", "certs", "home", "reports"]
    );
    assert_eq!(names(json(&p, "git://main/home").await), ["notes.md"]);
    assert_eq!(names(json(&p, "git://main/certs").await), ["ca.txt"]);
    assert_eq!(names(json(&p, "git://main/reports").await), ["q1.csv"]);

    // Completion.
    let complete = |value: &str| {
        let req = CompletionRequest {
            template: "git://{ref}/{+path}".into(),
            argument: "path".into(),
            value: value.into(),
            context: Default::default(),
        };
        let p = &p;
        async move { p.complete(req).await.unwrap().values }
    };
    assert_eq!(
        complete("").await,
        ["README.md", "app/", "certs/", "home/", "reports/"]
    );
    assert_eq!(complete(".e").await, Vec::<String>::new());
    assert_eq!(complete("home/").await, ["home/notes.md"]);
    assert_eq!(complete("home/.ssh/").await, Vec::<String>::new());
    assert_eq!(complete("certs/").await, ["certs/ca.txt"]);

    // Watches and change tokens.
    let bus = Arc::new(LocalBus::default());
    for uri in ["git://main/.env", "git://main/home/.ssh/authorized_keys"] {
        let u = ResourceUri::parse(uri).unwrap();
        let e = p
            .watch(&u, ChangeSink::new(bus.clone(), "m0"))
            .await
            .map(drop)
            .expect_err(uri);
        assert_eq!(e, Error::not_found(uri));
        assert_eq!(p.change_token(&u).await, None, "{uri}");
    }
    assert!(
        p.change_token(&ResourceUri::parse("git://main/README.md").unwrap())
            .await
            .is_some()
    );

    // A denied file coming does not change the listing: no list_changed; a visible one does.
    let mut rx = bus.subscribe();
    let _g = p
        .watch_list(ChangeSink::new(bus.clone(), "m0"))
        .await
        .unwrap();
    let lc = ChangeEvent::ListChanged { mount: "m0".into() };
    // (In directories that exist: a new directory shows in its parent's directory read.)
    r.write("app/.env.local", b"SECRET=3");
    r.write("certs/new.key", b"k");
    r.write("home/.ssh/known_hosts", b"h");
    r.commit("more secrets");
    let got = common::events(&mut rx, Duration::from_millis(1500)).await;
    assert!(!got.contains(&lc), "{got:?}");
    r.write("config/app.toml", b"x = 1");
    r.commit("a visible file");
    common::expect(&mut rx, &lc, Duration::from_secs(3)).await;
}
