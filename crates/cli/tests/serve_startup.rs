//! `serve` as a user starts it: mounts that would serve the same URIs are refused before
//! anything is served.

mod client_common;

use std::process::Command;

use client_common::{bin, client_stdio, run};

/// `serve DIR DIR/reports` would list every report twice under one URI: refused, both named,
/// in either order, from the command line and from a config file; a sibling that only shares
/// the start of the name (`DIR-old`) is not inside and is served.
#[test]
fn nested_roots_are_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let docs = base.join("docs");
    let reports = docs.join("reports");
    let sibling = base.join("docs-old");
    std::fs::create_dir_all(&reports).unwrap();
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::write(reports.join("q1.md"), "q1").unwrap();
    std::fs::write(sibling.join("old.md"), "old").unwrap();
    let (docs_s, reports_s) = (docs.display().to_string(), reports.display().to_string());

    for order in [[&docs_s, &reports_s], [&reports_s, &docs_s]] {
        let mut cmd = Command::new(bin());
        cmd.args(["serve", order[0], order[1]]);
        let out = run(cmd);
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(
            out.stderr
                .contains(&format!("mount {reports_s} (file://{reports_s})"))
                && out
                    .stderr
                    .contains(&format!("inside mount {docs_s} (file://{docs_s})"))
                && out.stderr.contains("listed twice"),
            "{}",
            out.stderr
        );
    }

    let config = base.join("nested.toml");
    std::fs::write(
        &config,
        format!(
            "[[mount]]\nkind = \"files\"\nroot = \"{reports_s}\"\n[[mount]]\nkind = \"files\"\nroot = \"{docs_s}\"\n"
        ),
    )
    .unwrap();
    let mut cmd = Command::new(bin());
    cmd.arg("check-config").arg(&config);
    let out = run(cmd);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("is inside mount"), "{}", out.stderr);

    let listed = run(client_stdio(
        &["ls"],
        &[
            "serve",
            "--log-level",
            "warn",
            &docs_s,
            &sibling.display().to_string(),
        ],
    ))
    .ok();
    assert!(
        listed.contains("reports/q1.md") && listed.contains("docs-old/old.md"),
        "{listed}"
    );
}
