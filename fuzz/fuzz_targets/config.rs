//! The TOML config loader of the binary on any text: never a panic, and every error names
//! the file, the line and the key (`path:line: `key`: what is wrong`).

#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcpr_core::config::ProviderRegistry;

/// A real directory for `root = "."` and relative paths to resolve against.
fn dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir(d.path().join("docs")).expect("docs");
        std::fs::write(d.path().join("docs/a.md"), "a\n").expect("a.md");
        d
    })
    .path()
}

fn registry() -> &'static ProviderRegistry {
    static REGISTRY: OnceLock<ProviderRegistry> = OnceLock::new();
    REGISTRY.get_or_init(mcp_resources::providers::registry)
}

fuzz_target!(|text: &str| {
    let path = dir().join("mcp-resources.toml");
    let env = |name: &str| (name == "SET").then(|| "value".to_owned());
    let Err(e) = mcp_resources::config::parse(&path, text, &env, registry()) else {
        return;
    };
    let msg = e.to_string();
    let prefix = format!("{}:", path.display());
    let rest = msg
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("the error does not name the file: {msg}"));
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    assert!(digits > 0, "the error does not name the line: {msg}");
    let line: usize = rest[..digits].parse().expect("digits");
    assert!(
        line >= 1 && line <= text.lines().count().max(1) + 1,
        "line {line} is not in the file: {msg}"
    );
    let rest = &rest[digits..];
    assert!(
        rest.starts_with(": `") && rest[3..].contains("`: "),
        "the error does not name the key: {msg}"
    );
});
