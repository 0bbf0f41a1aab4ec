//! The files provider's URI-to-path decoding against a real temporary tree: whatever URI a
//! client sends (any percent-encoding, `..`, `file://localhost`, a sibling directory sharing
//! the root's prefix, symlinks pointing out), a read never returns anything from outside the
//! root, nor a denied file.

#![no_main]

use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcpr_core::{ContentsBody, Provider, ReadLimits, ResourceUri};
use mcpr_provider_files::{FilesConfig, FilesProvider};

/// In files outside the root, and in their names.
const OUTSIDE: &str = "OUTSIDE-SECRET";
/// In a denied file inside the root.
const DENIED: &str = "DENIED-SECRET";

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    provider: FilesProvider,
    rt: tokio::runtime::Runtime,
}

fn tree() -> &'static Tree {
    static TREE: OnceLock<Tree> = OnceLock::new();
    TREE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        let root = base.join("root");
        let outside = base.join("outside");
        let sibling = base.join("root-evil");
        for d in [
            &root,
            &outside,
            &sibling,
            &root.join("dir/sub"),
            &root.join("é dir"),
        ] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let w = |p: PathBuf, text: &str| std::fs::write(p, text).expect("write");
        w(root.join("a.txt"), "inside a\n");
        w(root.join("dir/b.md"), "# inside b\n");
        w(root.join("dir/sub/c.txt"), "inside c\n");
        w(root.join("é dir/100% sure?.txt"), "inside d\n");
        w(root.join(".env"), &format!("{DENIED}=1\n"));
        w(root.join("dir/server.key"), &format!("{DENIED}\n"));
        w(outside.join("secret.txt"), &format!("{OUTSIDE}-CONTENT\n"));
        w(outside.join(format!("{OUTSIDE}-NAME.txt")), "x\n");
        w(sibling.join("x.txt"), &format!("{OUTSIDE}-SIBLING\n"));
        symlink("a.txt", root.join("link_in")).expect("symlink");
        symlink("../outside/secret.txt", root.join("link_out")).expect("symlink");
        symlink("../../outside", root.join("dir/link_up")).expect("symlink");
        symlink(&outside, root.join("abs_link")).expect("symlink");
        symlink("../root-evil", root.join("dir/sibling")).expect("symlink");
        let provider = FilesProvider::new(FilesConfig::new(&root)).expect("the files provider");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        Tree {
            _dir: dir,
            root,
            provider,
            rt,
        }
    })
}

fuzz_target!(|input: &str| {
    let t = tree();
    let root = t.root.display().to_string();
    // As given when it is a URI; else after `file://localhost` + root (first byte `L`) or
    // after the root's URI.
    let raw = if input.starts_with("file:") {
        input.to_owned()
    } else if let Some(rest) = input.strip_prefix('L') {
        format!("file://localhost{root}/{rest}")
    } else {
        format!("file://{root}/{input}")
    };
    let Ok(uri) = ResourceUri::parse(&raw) else {
        return;
    };
    let limits = ReadLimits { max_bytes: 1 << 20 };
    let Ok(contents) = t.rt.block_on(t.provider.read(&uri, &limits)) else {
        return;
    };
    for c in contents.contents {
        let text = match &c.body {
            ContentsBody::Text(s) => s.clone(),
            ContentsBody::Blob(b) => String::from_utf8_lossy(b).into_owned(),
        };
        for secret in [OUTSIDE, DENIED] {
            assert!(!text.contains(secret), "{raw} read {secret}: {text:?}");
            assert!(!c.uri.contains(secret), "{raw} named {}", c.uri);
        }
    }
});
