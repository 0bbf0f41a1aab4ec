//! What `check-config` and a failing start tell the user: errors opening a source name the
//! file, the line and the mount; relative paths are the config file's; the offline check says
//! what it did not contact and `--connect` reports each mount; an empty config and a listen
//! address without an IP are refused with what to write instead.

mod client_common;

use std::path::Path;
use std::process::Command;

use client_common::{Out, bin, run, workspace};

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn check_config(config: &Path, extra: &[&str]) -> Out {
    let mut cmd = Command::new(bin());
    cmd.arg("check-config").args(extra).arg(config);
    run(cmd)
}

/// `serve --config` over stdio, which fails before it reads anything when a mount cannot open.
fn serve(config: &Path) -> Out {
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--log-level", "error", "--config"])
        .arg(config);
    run(cmd)
}

/// A PostgreSQL server on 127.0.0.1:5432, or a skip (a failure under `CI=true`).
fn postgres_here() -> Option<()> {
    match std::net::TcpStream::connect("127.0.0.1:5432") {
        Ok(_) => Some(()),
        Err(e) => client_common::absent("PostgreSQL at 127.0.0.1:5432", e),
    }
}

#[test]
fn errors_opening_a_source_name_the_file_line_and_mount() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();

    // `repo = "."` in a folder that is no repository: the folder is named in full.
    let cfg = write(
        dir.path(),
        "git.toml",
        "# a comment\n[[mount]]\nkind = \"git\"\nrepo = \".\"\n",
    );
    for out in [serve(&cfg), check_config(&cfg, &[])] {
        assert_eq!(out.code, Some(1), "{out:?}");
        let want = format!("{d}/git.toml:3: mount 1 (git): git repository {d} cannot be opened");
        let all = format!("{}{}", out.text(), out.stderr);
        assert!(all.contains(&want), "{want}\n{all}");
    }

    // A relative SQLite path that leads nowhere.
    let cfg = write(
        dir.path(),
        "missing.toml",
        "[[mount]]\nkind = \"files\"\nroot = \".\"\n[[mount]]\nkind = \"sqlite\"\nname = \"app\"\nurl = \"sqlite://app.db\"\n",
    );
    for out in [serve(&cfg), check_config(&cfg, &[])] {
        assert_eq!(out.code, Some(1), "{out:?}");
        let want =
            format!("{d}/missing.toml:5: mount 2 (sqlite): cannot open SQLite database {d}/app.db");
        let all = format!("{}{}", out.text(), out.stderr);
        assert!(all.contains(&want), "{want}\n{all}");
    }

    // A named query the database refuses.
    std::fs::copy(
        workspace().join("examples/app.db"),
        dir.path().join("app.db"),
    )
    .unwrap();
    let cfg = write(
        dir.path(),
        "query.toml",
        "[[mount]]\nkind = \"sqlite\"\nname = \"app\"\nurl = \"sqlite://./app.db\"\n[[mount.query]]\nuri = \"db://users/active/list\"\nsql = \"select id from users where active = 1\"\n",
    );
    for out in [serve(&cfg), check_config(&cfg, &[])] {
        assert_eq!(out.code, Some(1), "{out:?}");
        let all = format!("{}{}", out.text(), out.stderr);
        assert!(
            all.contains(&format!("{d}/query.toml:2: mount 1 (sqlite): "))
                && all.contains("active"),
            "{all}"
        );
    }

    // Two mounts of one folder: both declarations are named.
    let cfg = write(
        dir.path(),
        "twice.toml",
        "[[mount]]\nkind = \"files\"\nroot = \".\"\n\n[[mount]]\nkind = \"files\"\nroot = \"./\"\n",
    );
    for out in [serve(&cfg), check_config(&cfg, &[])] {
        assert_eq!(out.code, Some(1), "{out:?}");
        let want = format!(
            "{d}/twice.toml:6: mount 2 (files): two mounts serve the same URI prefix file://{d}: this one and {d}/twice.toml:2: mount 1 (files)"
        );
        let all = format!("{}{}", out.text(), out.stderr);
        assert!(all.contains(&want), "{want}\n{all}");
    }
}

#[test]
fn relative_paths_are_the_config_files_wherever_the_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    std::fs::write(dir.path().join("docs/a.md"), "a\n").unwrap();
    std::fs::write(dir.path().join("tokens"), "tok\n").unwrap();
    std::fs::copy(
        workspace().join("examples/app.db"),
        dir.path().join("app.db"),
    )
    .unwrap();
    write(
        dir.path(),
        "team.toml",
        "[http.auth]\nbearer_tokens = [\"file:tokens\"]\n[[mount]]\nkind = \"files\"\nroot = \"docs\"\n[[mount]]\nkind = \"sqlite\"\nname = \"app\"\nurl = \"sqlite://app.db\"\n",
    );
    // Run from the folder above, naming the config by a relative path into its own folder.
    let above = dir.path().parent().unwrap();
    let rel = Path::new(dir.path().file_name().unwrap()).join("team.toml");
    let mut cmd = Command::new(bin());
    cmd.arg("check-config").arg(&rel).current_dir(above);
    let out = run(cmd).ok();
    let d = dir.path().display();
    assert!(
        out.contains(&format!("-> file://{d}/docs"))
            && out.contains(&format!("app (sqlite://{d}/app.db)"))
            && out.contains("1 unscoped token(s)"),
        "{out}"
    );
}

#[test]
fn offline_check_says_what_it_did_not_contact_and_connect_reports_each_mount() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    std::fs::write(dir.path().join("docs/a.md"), "a\n").unwrap();
    // A PostgreSQL server that is not there (a closed loopback port).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let cfg = write(
        dir.path(),
        "c.toml",
        &format!(
            "[[mount]]\nkind = \"files\"\nroot = \"docs\"\n[[mount]]\nkind = \"postgres\"\nname = \"shop\"\nurl = \"postgres://reader:hunter2@127.0.0.1:{port}/shop\"\n"
        ),
    );
    let out = check_config(&cfg, &[]);
    let text = out.ok();
    assert!(
        text.contains("OK, checked offline")
            && text.contains("c.toml:5: mount 2 (postgres): not contacted (a network source; check-config --connect tries it)"),
        "{text}"
    );
    let out = check_config(&cfg, &["--connect"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    let text = out.text();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(": mount ")).collect();
    assert_eq!(lines.len(), 2, "one line per mount: {text}");
    assert!(lines[0].contains("mount 1 (files): ok: "), "{}", lines[0]);
    assert!(
        lines[1].contains("mount 2 (postgres): ") && !lines[1].contains("ok: "),
        "{}",
        lines[1]
    );
    assert!(
        out.stderr.contains("1 of 2 mounts failed")
            && !text.contains("hunter2")
            && !out.stderr.contains("hunter2"),
        "{out:?}"
    );
}

#[test]
fn a_missing_postgres_database_is_named_with_its_mount() {
    if postgres_here().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "pg.toml",
        "[[mount]]\nkind = \"postgres\"\nname = \"gone\"\nurl = \"postgres://postgres@127.0.0.1:5432/doesnotexist\"\n",
    );
    // Offline, it is not contacted; connected, and when serving, the error names the mount.
    assert!(check_config(&cfg, &[]).ok().contains("not contacted"));
    let d = dir.path().display();
    for out in [check_config(&cfg, &["--connect"]), serve(&cfg)] {
        assert_eq!(out.code, Some(1), "{out:?}");
        let all = format!("{}{}", out.text(), out.stderr);
        assert!(
            all.contains(&format!("{d}/pg.toml:2: mount 1 (postgres): "))
                && all.contains("doesnotexist"),
            "{all}"
        );
    }
}

#[test]
fn an_empty_config_is_refused_by_check_config_as_by_serve() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "empty.toml", "[server]\nname = \"x\"\n");
    for out in [check_config(&cfg, &[]), serve(&cfg)] {
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(out.stderr.contains("nothing to serve"), "{}", out.stderr);
    }
}

#[test]
fn the_http_and_cluster_settings_read_are_printed_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "h.toml",
        "[http]\nlisten = \"127.0.0.1:9000\"\nmax_sessions = 7\n[http.auth]\nbearer_tokens = [\"env:H8_TOKEN\"]\n[cluster]\nnats_url = \"nats://u:natspw@127.0.0.1:4222\"\nname = \"c1\"\nreplica = \"r1\"\nsecret = \"${H8_CLUSTER_SECRET}\"\n[[mount]]\nkind = \"files\"\nroot = \".\"\n",
    );
    let mut cmd = Command::new(bin());
    cmd.arg("check-config")
        .arg(&cfg)
        .env("H8_TOKEN", "tok-secret")
        .env("H8_CLUSTER_SECRET", "cluster-secret-of-at-least-32-bytes");
    let out = run(cmd).ok();
    assert!(
        out.contains("http: listen=127.0.0.1:9000 path=/mcp")
            && out.contains("max_sessions=7")
            && out.contains("auth: 1 unscoped token(s), 0 scoped token(s)")
            && out.contains("cluster: nats_url=nats://***@127.0.0.1:4222 name=c1 replica=r1"),
        "{out}"
    );
    assert!(
        !out.contains("tok-secret") && !out.contains("natspw") && !out.contains("cluster-secret"),
        "{out}"
    );
}

/// A base64 NATS password holds `/` (and `+`, `=`): `check-config` still shows the URL as
/// `nats://***@host:port`, none of the password before or after the `/`.
#[test]
fn a_nats_password_with_a_slash_is_masked_whole() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "c.toml",
        "[cluster]\nnats_url = \"nats://app:Zm9v/YmFy+cXV4=@127.0.0.1:4222\"\nname = \"c1\"\nreplica = \"r1\"\nsecret = \"cluster-secret-of-at-least-32-bytes\"\n[[mount]]\nkind = \"files\"\nroot = \".\"\n",
    );
    let out = check_config(&cfg, &[]).ok();
    assert!(
        out.contains("cluster: nats_url=nats://***@127.0.0.1:4222 name=c1 replica=r1"),
        "{out}"
    );
    for part in ["Zm9v", "YmFy", "cXV4", "app:"] {
        assert!(!out.contains(part), "{part}: {out}");
    }
    // The log line of a replica joining the cluster, written before NATS is contacted.
    let mut cmd = Command::new(bin());
    cmd.args([
        "serve",
        "--log-level",
        "info",
        "--http",
        "127.0.0.1:0",
        "--config",
    ])
    .arg(&cfg)
    .current_dir(dir.path());
    let serving = client_common::Lines::spawn(cmd);
    let started = std::time::Instant::now();
    let log = loop {
        let log = serving.stderr();
        if log.contains("joining the cluster") {
            break log;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "no join line: {log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(log.contains("nats://***@127.0.0.1:4222"), "{log}");
    for part in ["Zm9v", "YmFy", "cXV4", "app:"] {
        assert!(!log.contains(part), "{part}: {log}");
    }
}

#[test]
fn a_listen_address_without_an_ip_gets_the_address_to_write() {
    let docs = workspace().join("examples/docs");
    for given in ["8080", ":8080", "localhost:8080"] {
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--http", given]).arg(&docs);
        let out = run(cmd);
        assert_eq!(out.code, Some(2), "{given}: {out:?}");
        assert!(
            out.stderr.contains("use 127.0.0.1:8080"),
            "{given}: {}",
            out.stderr
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "l.toml",
        "[http]\nlisten = \"localhost:8080\"\n[[mount]]\nkind = \"files\"\nroot = \".\"\n",
    );
    let out = check_config(&cfg, &[]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("l.toml:2: `http.listen`") && out.stderr.contains("use 127.0.0.1:8080"),
        "{}",
        out.stderr
    );
}
