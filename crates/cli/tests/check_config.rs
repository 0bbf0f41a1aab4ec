//! What `check-config` and a failing start tell the user: errors opening a source name the
//! file, the line and the mount; relative paths are the config file's; the offline check says
//! what it did not contact and `--connect` reports each mount; a database that refuses a
//! mount's login costs only that mount, which recovers on its own; skills folders and skills
//! that would not be served fail the check and are warned of at start; a mistyped key is told
//! the key it was near; an empty config and a listen address without an IP are refused with
//! what to write instead; a gateway's pass-through prefix over another mount's URIs is refused
//! by `serve` and `check-config` alike, before any upstream is started.

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

/// A MariaDB server on 127.0.0.1:3306, or a skip (a failure under `CI=true`).
fn mariadb_here() -> Option<()> {
    match std::net::TcpStream::connect("127.0.0.1:3306") {
        Ok(_) => Some(()),
        Err(e) => client_common::absent("MariaDB at 127.0.0.1:3306", e),
    }
}

/// The test's PostgreSQL role and MariaDB user, dropped however the test ends.
struct Logins {
    pg_role: String,
    my_user: String,
    /// A PostgreSQL database the config names before it exists.
    pg_db: String,
}

impl Logins {
    fn admin<T>(f: impl AsyncFnOnce() -> T) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f())
    }

    fn pg(sql: &str) {
        use sqlx::{Connection as _, Executor as _};
        Self::admin(async || {
            let mut c = sqlx::PgConnection::connect("postgres://postgres@127.0.0.1:5432/test")
                .await
                .unwrap();
            c.execute(sql).await.unwrap();
        });
    }

    fn my(sql: &str) {
        use sqlx::{Connection as _, Executor as _};
        Self::admin(async || {
            let mut c = sqlx::MySqlConnection::connect("mysql://root@127.0.0.1:3306/test")
                .await
                .unwrap();
            c.execute(sql).await.unwrap();
        });
    }
}

impl Drop for Logins {
    fn drop(&mut self) {
        let (role, user, db) = (
            self.pg_role.clone(),
            self.my_user.clone(),
            self.pg_db.clone(),
        );
        // Its own thread: the drop may run while a panic unwinds anywhere.
        let _ = std::thread::spawn(move || {
            Self::pg(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
            Self::pg(&format!("DROP ROLE IF EXISTS {role}"));
            Self::my(&format!("DROP USER IF EXISTS '{user}'@'%'"));
        })
        .join();
    }
}

/// A 2026-07-28 `resources/list` over HTTP on `addr`: the result.
fn list_over_http(addr: &str) -> serde_json::Value {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let answer = http(
        addr,
        &format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: resources/list\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    let json = answer
        .lines()
        .find_map(|l| {
            l.strip_prefix("data: ")
                .or_else(|| l.starts_with('{').then_some(l))
        })
        .unwrap_or_else(|| panic!("no JSON answer: {answer}"));
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["result"].clone()
}

/// One HTTP/1.1 exchange on `addr`: the whole answer, headers and body.
fn http(addr: &str, request: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
}

/// `GET /readyz` on `addr`: the whole answer.
fn readyz(addr: &str) -> String {
    http(
        addr,
        "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
}

/// A database that refuses a mount's login (a PostgreSQL role that does not exist, a
/// MariaDB password rotated under the server, a PostgreSQL database not created yet) costs
/// only that mount: `serve` starts, the files mount beside them is served, and each refused
/// mount is not ready with the server's reason on `/readyz` and in the listing's `_meta`, as
/// `check-config --connect` says it; the offline check says "not contacted", never ok. Once
/// the logins work (the role created, the password set to the one configured, the database
/// created) the three mounts are ready again without a restart. The password is never shown. (PostgreSQL here trusts 127.0.0.1, so a wrong password
/// would pass; an unknown role is its refusal.)
#[test]
fn a_database_that_refuses_the_login_costs_only_its_mount_and_it_recovers() {
    if postgres_here().is_none() || mariadb_here().is_none() {
        return;
    }
    const SECRET: &str = "rotated-secret-9Zq";
    let tag = format!(
        "{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let logins = Logins {
        pg_role: format!("mcpr_cc_{tag}"),
        my_user: format!("mcpr_cc_{tag}"),
        pg_db: format!("mcpr_cc_db_{tag}"),
    };
    Logins::my(&format!(
        "CREATE USER '{}'@'%' IDENTIFIED BY 'the-password-before'",
        logins.my_user
    ));
    Logins::my(&format!(
        "GRANT SELECT ON test.* TO '{}'@'%'",
        logins.my_user
    ));

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.md"), "a\n").unwrap();
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let cfg = write(
        dir.path(),
        "rotated.toml",
        &format!(
            "[http]\nlisten = \"{listen}\"\n[[mount]]\nkind = \"files\"\nroot = \".\"\n[[mount]]\nkind = \"postgres\"\nname = \"pgrole\"\nurl = \"postgres://{role}:{SECRET}@127.0.0.1:5432/test\"\n[[mount]]\nkind = \"mysql\"\nname = \"myrot\"\nurl = \"mysql://{user}:{SECRET}@127.0.0.1:3306/test\"\n[[mount]]\nkind = \"postgres\"\nname = \"pgdb\"\nurl = \"postgres://postgres@127.0.0.1:5432/{db}\"\n",
            role = logins.pg_role,
            user = logins.my_user,
            db = logins.pg_db
        ),
    );
    let no_secret = |what: &str, text: &str| {
        assert!(!text.contains(SECRET), "{what} shows the password: {text}");
    };

    // Offline: the two databases are not contacted, and not called ok.
    let text = check_config(&cfg, &[]).ok();
    for n in [7, 11, 15] {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("rotated.toml:{n}: mount")))
            .unwrap_or_else(|| panic!("no line for line {n}: {text}"));
        assert!(
            line.contains("not contacted") && !line.contains("ok"),
            "{line}"
        );
    }
    // Connected: each refused mount fails with the server's reason.
    let out = check_config(&cfg, &["--connect"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    let text = out.text();
    no_secret("check-config --connect", &format!("{text}{}", out.stderr));
    assert!(
        text.contains("mount 1 (files): ok: ")
            && text.contains(&format!("role \"{}\" does not exist", logins.pg_role))
            && text.contains(&format!("Access denied for user '{}'", logins.my_user))
            && text.contains(&format!("database \"{}\" does not exist", logins.pg_db))
            && out.stderr.contains("3 of 4 mounts failed"),
        "{text}\n{}",
        out.stderr
    );

    // Served: every mount starts; the two refused ones are not ready, saying why.
    let mut child = Command::new(bin())
        .args(["serve", "--config"])
        .arg(&cfg)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = log.clone();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let mut s = sink.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    let server = client_common::Guard(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !log.lock().unwrap().contains("serving MCP on") {
        assert!(
            std::time::Instant::now() < deadline,
            "not serving: {}",
            log.lock().unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let ready = readyz(&listen);
    no_secret("/readyz", &ready);
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    assert!(
        ready.contains(&format!("ready {}", dir.path().display()))
            && ready.contains("NOT READY pgrole (")
            && ready.contains(&format!("role \"{}\" does not exist", logins.pg_role))
            && ready.contains("NOT READY myrot (")
            && ready.contains(&format!("Access denied for user '{}'", logins.my_user))
            && ready.contains("NOT READY pgdb (")
            && ready.contains(&format!("database \"{}\" does not exist", logins.pg_db)),
        "{ready}"
    );
    let listed = list_over_http(&listen);
    let shown = listed.to_string();
    no_secret("the listing", &shown);
    assert!(shown.contains("a.md"), "the files mount is listed: {shown}");
    let left_out = listed["_meta"]["io.github.mcp-resources/unavailable"].to_string();
    assert!(
        left_out.contains("pgrole") && left_out.contains("myrot") && left_out.contains("pgdb"),
        "{shown}"
    );

    // The logins made to work and the database created, the server untouched: every mount
    // recovers on its own.
    Logins::pg(&format!("CREATE ROLE {} LOGIN", logins.pg_role));
    Logins::pg(&format!("CREATE DATABASE {}", logins.pg_db));
    Logins::my(&format!(
        "ALTER USER '{}'@'%' IDENTIFIED BY '{SECRET}'",
        logins.my_user
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let ready = readyz(&listen);
        if ready.starts_with("HTTP/1.1 200") {
            assert!(!ready.contains("NOT READY"), "{ready}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not ready again within 20 s: {ready}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    drop(server);
    no_secret("the server's log", &log.lock().unwrap());
    assert!(
        log.lock().unwrap().contains("not ready until it answers"),
        "serve warns at start: {}",
        log.lock().unwrap()
    );
    drop(logins);
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

/// `[server] max_conversions` reaches the process's conversion budget, which the web mounts
/// share: `check-config` reads it back from the budget after setting it as `serve` does;
/// without the key it is one per core.
#[test]
fn max_conversions_is_the_process_budget_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let cores = std::thread::available_parallelism()
        .map_or(2, usize::from)
        .clamp(1, 256);
    // Another value than the default, so the line cannot show the default by mistake.
    let set = if cores == 3 { 5 } else { 3 };
    for (server, want) in [
        (format!("max_conversions = {set}\n"), set),
        (String::new(), cores),
    ] {
        let cfg = write(
            dir.path(),
            "c.toml",
            &format!("[server]\nname = \"c\"\n{server}[[mount]]\nkind = \"files\"\nroot = \".\"\n"),
        );
        let out = check_config(&cfg, &[]).ok();
        let line = out
            .lines()
            .find(|l| l.starts_with("server: "))
            .unwrap_or_else(|| panic!("no server line: {out}"));
        assert!(
            line.ends_with(&format!(" max_conversions={want}")),
            "{server:?}: {line}"
        );
    }
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
    let (_serving, log) = serve_until_joining(&cfg, dir.path());
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

/// A folder with a files mount's skills: `skills/good` (valid), `skills/nodesc` (its
/// `SKILL.md` has no `description`), and `notes.md` (a file); and a git repository of the
/// same skills.
fn skills_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    for (name, front) in [
        ("good", "name: good\ndescription: A skill that is served.\n"),
        ("nodesc", "name: nodesc\n"),
    ] {
        std::fs::create_dir_all(docs.join("skills").join(name)).unwrap();
        std::fs::write(
            docs.join("skills").join(name).join("SKILL.md"),
            format!("---\n{front}---\nBody.\n"),
        )
        .unwrap();
    }
    std::fs::write(docs.join("notes.md"), "notes\n").unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
            .args(args)
            .current_dir(&repo)
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(repo.join("skills/good")).unwrap();
    std::fs::copy(
        docs.join("skills/good/SKILL.md"),
        repo.join("skills/good/SKILL.md"),
    )
    .unwrap();
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "skills"]);
    dir
}

/// Each way a skills setting leaves a mount with skills it does not serve fails
/// `check-config`, offline (the folder is on this machine), on a line naming the mount and
/// the reason: a `skills` folder that does not exist or is a file, a `skills_ref` that does
/// not resolve, a `SKILL.md` without `description` (on a line of its own, beside the count of
/// skills served). `--connect` lists each skill served too. A valid setting passes.
#[test]
fn skills_settings_that_serve_nothing_fail_check_config_with_the_reason() {
    let dir = skills_fixture();
    let d = dir.path().display().to_string();
    let files = |skills: &str| {
        format!("[[mount]]\nkind = \"files\"\nroot = \"docs\"\nskills = \"{skills}\"\n")
    };
    for (name, text, want) in [
        (
            "missing.toml",
            files("nope"),
            format!("skills folder file://{d}/docs/nope: the skills folder cannot be read: "),
        ),
        (
            "file.toml",
            files("notes.md"),
            format!(
                "skills folder file://{d}/docs/notes.md: the skills folder cannot be read: file://{d}/docs/notes.md is not a directory"
            ),
        ),
        (
            "ref.toml",
            "[[mount]]\nkind = \"git\"\nrepo = \"repo\"\nskills = \"skills\"\nskills_ref = \"no-such-branch\"\n".to_owned(),
            "the skills folder cannot be read: ".to_owned(),
        ),
        (
            "nodesc.toml",
            files("skills"),
            format!(
                "skills folder file://{d}/docs/skills: 1 skill(s), 1 left out\n  left out file://{d}/docs/skills/nodesc/SKILL.md: its frontmatter needs `description` as a string"
            ),
        ),
    ] {
        let cfg = write(dir.path(), name, &text);
        let out = check_config(&cfg, &[]);
        assert_eq!(out.code, Some(1), "{name}: {out:?}");
        let report = out.text();
        assert!(
            report.contains(&format!("{name}:2: mount 1 (")) && report.contains(&want),
            "{name}: want {want}\n{report}"
        );
        assert!(
            out.stderr.contains("1 of 1 mounts failed"),
            "{name}: {}",
            out.stderr
        );
        if name == "ref.toml" {
            assert!(
                report.contains("`skills_ref = \"no-such-branch\"`"),
                "{report}"
            );
        }
    }
    // --connect lists the skill served beside the one left out.
    let out = check_config(&dir.path().join("nodesc.toml"), &["--connect"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.text()
            .contains("  skill skill://good/SKILL.md\n  left out "),
        "{}",
        out.text()
    );
    // Valid settings pass, and say what they serve.
    let cfg = write(
        dir.path(),
        "good.toml",
        "[[mount]]\nkind = \"git\"\nrepo = \"repo\"\nskills = \"skills\"\nskills_ref = \"main\"\n",
    );
    let text = check_config(&cfg, &["--connect"]).ok();
    assert!(
        text.contains("skills folder git://main/skills: 1 skill(s)\n  skill skill://good/SKILL.md"),
        "{text}"
    );
}

/// `serve` reads the skills folders at start and warns of what it will not serve, before
/// any client lists skills: the skill it leaves out (with the reason) and a folder it
/// cannot read.
#[test]
fn serve_warns_at_start_of_skills_it_will_not_serve() {
    use std::io::BufRead as _;
    let dir = skills_fixture();
    let d = dir.path().display().to_string();
    for (skills, want) in [
        (
            "skills",
            format!(
                "its frontmatter needs `description` as a string mount=file://{d}/docs file=file://{d}/docs/skills/nodesc/SKILL.md"
            ),
        ),
        (
            "nope",
            format!("file://{d}/docs/nope: the skills folder cannot be read"),
        ),
    ] {
        let cfg = write(
            dir.path(),
            "serve.toml",
            &format!("[[mount]]\nkind = \"files\"\nroot = \"docs\"\nskills = \"{skills}\"\n"),
        );
        // A client's pipe on stdin, kept open and silent: the warning comes unasked.
        let mut child = Command::new(bin())
            .args(["serve", "--config"])
            .arg(&cfg)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let server = client_common::Guard(child);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = String::new();
        let found = loop {
            match rx.recv_timeout(std::time::Duration::from_secs(20)) {
                Ok(line) if line.contains(" WARN ") && line.contains(&want) => break true,
                Ok(line) => {
                    seen.push_str(&line);
                    seen.push('\n');
                }
                Err(_) => break false,
            }
        };
        assert!(found, "no warning {want:?} at start:\n{seen}");
        drop(server);
    }
}

/// A mistyped key of a mount is told every key valid there, the keys every mount takes
/// (`skills`, `scope`, `ttl_ms`...) among them, and the one it was nearest.
#[test]
fn a_mistyped_mount_key_is_told_the_nearest_of_every_key_valid_there() {
    let dir = tempfile::tempdir().unwrap();
    for (typo, nearest) in [
        ("skils", "skills"),
        ("skills_prefx", "skills_prefix"),
        ("scop", "scope"),
        ("ttl", "ttl_ms"),
        ("cache_scop", "cache_scope"),
        ("shard", "shared"),
        ("debounce", "debounce_ms"),
    ] {
        let cfg = write(
            dir.path(),
            "typo.toml",
            &format!("[[mount]]\nkind = \"files\"\nroot = \".\"\n{typo} = \"x\"\n"),
        );
        let out = check_config(&cfg, &[]);
        assert_eq!(out.code, Some(1), "{out:?}");
        let e = &out.stderr;
        assert!(
            e.contains(&format!(
                "typo.toml:4: `mount.{typo}`: unknown field `{typo}`"
            )) && e.contains(&format!("; did you mean `{nearest}`?")),
            "{typo}: {e}"
        );
        for key in [
            "root",
            "kind",
            "skills",
            "skills_prefix",
            "skills_ref",
            "scope",
            "ttl_ms",
            "cache_scope",
            "shared",
        ] {
            assert!(
                e.contains(&format!("`{key}`")),
                "{typo}: {key} missing: {e}"
            );
        }
    }
}

/// An api mount lists its fixed endpoints from the config alone, so `--connect` used to say
/// "ok" without asking the upstream anything. It now reads the first one: an upstream that
/// is down fails the check, and one that answers is reported with what was read.
#[test]
fn connect_fetches_an_api_mounts_first_endpoint_rather_than_calling_it_ok_unasked() {
    use std::io::{Read as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    let config = |port: u16| {
        write(
            dir.path(),
            "api.toml",
            &format!(
                "[[mount]]\nkind = \"api\"\nname = \"status\"\nallow_private = true\n[[mount.endpoint]]\nuri = \"api://status/now\"\nurl = \"http://127.0.0.1:{port}/now\"\nname = \"now\"\n"
            ),
        )
    };
    // Down: a closed loopback port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let out = check_config(&config(port), &["--connect"]);
    assert_eq!(
        out.code,
        Some(1),
        "an upstream that is down passed: {out:?}"
    );
    let text = out.text();
    assert!(
        text.contains("mount 1 (api): ") && !text.contains("ok: "),
        "{text}"
    );
    // Up: an upstream that answers every request with a small JSON body, and counts them.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = asked.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = r#"{"status":"up"}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let out = check_config(&config(port), &["--connect"]);
    let text = out.ok();
    assert!(
        text.contains("mount 1 (api): ok: ") && text.contains("(read api://status/now)"),
        "{text}"
    );
    assert!(
        asked.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "the upstream was never asked: {text}"
    );
}

/// The offline check contacts no network source but shows what each will serve, from the
/// file alone: a PostgreSQL mount's overview and named query templates, an api mount's
/// endpoints, a web mount's allowed prefixes, an s3 bucket's keys. The servers named are
/// closed loopback ports, so a contact would fail the check. With `--connect`, the same
/// URIs are shown once the PostgreSQL mount is opened (when PostgreSQL is here), and an api
/// mount with only templates, which has nothing to fetch, is "not fetched", never "ok".
#[test]
fn offline_check_shows_the_uris_network_mounts_will_serve() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let pg = |url: &str| {
        format!(
            "[[mount]]\nkind = \"postgres\"\nname = \"shop\"\nurl = \"{url}\"\n[[mount.query]]\nuri = \"db://orders/{{status}}/list\"\nsql = \"select 1 as n where :status = 'open'\"\n"
        )
    };
    let api = format!(
        "[[mount]]\nkind = \"api\"\nname = \"weather\"\nallow_private = true\n[[mount.endpoint]]\nuri = \"api://weather/{{city}}/forecast\"\nurl = \"http://127.0.0.1:{port}/f?city={{city}}\"\n"
    );
    let web_and_s3 = format!(
        "[[mount]]\nkind = \"web\"\nallow = [\"https://docs.example.com/\"]\n[[mount]]\nkind = \"s3\"\nbucket = \"my-bucket\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:{port}\"\nallow_http = true\n"
    );
    let cfg = write(
        dir.path(),
        "net.toml",
        &format!(
            "{}{api}{web_and_s3}",
            pg(&format!("postgres://reader:hunter2@127.0.0.1:{port}/shop"))
        ),
    );
    let text = check_config(&cfg, &[]).ok();
    let line = |n: usize| {
        text.lines()
            .find(|l| l.contains(&format!(": mount {n} (")))
            .unwrap_or_else(|| panic!("no line for mount {n}: {text}"))
            .to_owned()
    };
    let expected = [
        (1, "postgres", "db://shop, db://orders/{status}/list"),
        (2, "api", "api://weather/{city}/forecast"),
        (3, "web", "https://docs.example.com/{+path}"),
        (4, "s3", "s3://my-bucket/{+key}"),
    ];
    for (n, kind, uris) in expected {
        assert!(
            line(n).ends_with(&format!(
                "mount {n} ({kind}): not contacted (a network source; check-config --connect tries it) -> {uris}"
            )),
            "{}",
            line(n)
        );
    }
    assert!(!text.contains("hunter2"), "{text}");

    // Connected: the api mount lists nothing and is not called ok; with PostgreSQL here,
    // the opened mount shows the URIs the offline check showed.
    let api_only = write(dir.path(), "api.toml", &api);
    let out = check_config(&api_only, &["--connect"]);
    let text = out.ok();
    assert!(
        text.contains("mount 1 (api): not fetched: api weather -> api://weather/{city}/forecast (nothing listed, so nothing fetched)")
            && !text.contains("ok: "),
        "{text}"
    );
    if postgres_here().is_none() {
        return;
    }
    let pg = write(
        dir.path(),
        "pg.toml",
        &pg("postgres://postgres@127.0.0.1:5432/test"),
    );
    let out = check_config(&pg, &["--connect"]);
    let text = out.text();
    assert!(
        text.contains("mount 1 (postgres): ")
            && text.contains(" -> db://shop, db://orders/{status}/list"),
        "{text}"
    );
}

/// Without `replica`, `serve` names itself by host name and its process id; `check-config`,
/// another process, shows that name with `<pid>` for the id it cannot know, and the host
/// part is the one `serve` then uses.
#[test]
fn a_default_replica_is_shown_as_serve_will_name_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "c.toml",
        "[cluster]\nnats_url = \"nats://127.0.0.1:4222\"\nname = \"c1\"\nsecret = \"cluster-secret-of-at-least-32-bytes\"\n[[mount]]\nkind = \"files\"\nroot = \".\"\n",
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();
    let out = check_config(&cfg, &[]).ok();
    assert!(
        out.contains(&format!(
            "name=c1 replica={host}-<pid> (the default: host name and the process id of serve) lease_ttl_ms=5000"
        )),
        "{out}"
    );
    let (_serving, log) = serve_until_joining(&cfg, dir.path());
    let named = log
        .split(&format!("replica={host}-"))
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|pid| pid.parse::<u32>().ok());
    assert!(named.is_some(), "serve is not named {host}-PID: {log}");
}

/// `serve --http` of `cfg` from `dir`, and its log once it has the line of a replica joining
/// the cluster (written before NATS is contacted).
fn serve_until_joining(cfg: &Path, dir: &Path) -> (client_common::Lines, String) {
    let mut cmd = Command::new(bin());
    cmd.args([
        "serve",
        "--log-level",
        "info",
        "--http",
        "127.0.0.1:0",
        "--config",
    ])
    .arg(cfg)
    .current_dir(dir);
    let serving = client_common::Lines::spawn(cmd);
    let started = std::time::Instant::now();
    loop {
        let log = serving.stderr();
        if log.contains("joining the cluster") {
            return (serving, log);
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "no join line: {log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A gateway mount whose `prefixes` overlap a files mount's URIs: `serve`, `check-config` and
/// `check-config --connect` all refuse the configuration naming both mounts, from the
/// configuration alone: the upstream (which would leave a mark) is never started.
#[test]
fn a_gateway_prefix_overlap_is_refused_before_any_upstream_starts() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("docs");
    std::fs::create_dir(&root).unwrap();
    let mark = dir.path().join("started");
    let cfg = write(
        dir.path(),
        "gateway.toml",
        &format!(
            "[[mount]]\nkind = \"files\"\nroot = {:?}\n\n[[mount]]\nkind = \"mcp\"\nname = \"up\"\ncommand = \"sh\"\nargs = [\"-c\", \"touch \\\"$0\\\"; sleep 30\", {:?}]\nprefixes = [\"file://\"]\ntimeout_ms = 1000\n",
            root.display().to_string(),
            mark.display().to_string()
        ),
    );
    for (what, out) in [
        ("check-config", check_config(&cfg, &[])),
        ("check-config --connect", check_config(&cfg, &["--connect"])),
        ("serve", serve(&cfg)),
    ] {
        assert_eq!(out.code, Some(1), "{what}: {out:?}");
        let all = format!("{}{}", out.text(), out.stderr);
        for want in [
            "gateway.toml:",
            "mount 2 (mcp)",
            "mount mcp up: runs `sh",
            "passes upstream URIs under file:// through unchanged",
            "overlaps mount",
            &root.display().to_string(),
        ] {
            assert!(all.contains(want), "{what}: {want}\n{all}");
        }
        assert!(!mark.exists(), "{what} started the upstream");
    }
}
