//! `skills-pull`: the terminal client's `skills pull` of a 50-file skill from our server over
//! HTTP, end to end as a user runs it (the client process started, `skills/get`, 50 reads
//! verified against their digests, the folder renamed into place), in each era.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::report::Row;
use crate::scenarios::{Env, free_addr, guard};
use crate::stats::Samples;

const S: &str = "skills-pull";
/// Files in the skill, `SKILL.md` included.
const FILES: usize = 50;
/// Bytes of each file other than `SKILL.md`.
const FILE_BYTES: usize = 8 * 1024;

/// A skill of [`FILES`] files under `dir/skills/bulk`, and a config serving it.
fn fixture(dir: &Path) -> Result<std::path::PathBuf, String> {
    let err = |e: std::io::Error| format!("{}: {e}", dir.display());
    let root = dir.join("skills");
    let skill = root.join("bulk");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(skill.join("ref")).map_err(err)?;
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: bulk\ndescription: A skill of fifty files, for the benchmark\n---\nRead ref/.\n",
    )
    .map_err(err)?;
    for i in 1..FILES {
        // Text that differs per file, so no two digests are alike.
        let line = format!("file {i:02}: the quick brown fox jumps over the lazy dog\n");
        let body: String = line.repeat(FILE_BYTES / line.len() + 1)[..FILE_BYTES].to_owned();
        std::fs::write(skill.join(format!("ref/part-{i:02}.md")), body).map_err(err)?;
    }
    let config = dir.join("skills-pull.toml");
    std::fs::write(
        &config,
        format!(
            "# Written by mcpr-bench.\n[[mount]]\nkind = \"files\"\nroot = \"{}\"\nskills = \".\"\n",
            root.display()
        ),
    )
    .map_err(err)?;
    Ok(config)
}

/// The server on a free port, killed on drop.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn skills_pull(env: &Env) -> Vec<Row> {
    let r = (|| -> Result<Vec<Row>, String> {
        let dir = env.cache.join("skills-pull");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let config = fixture(&dir)?;
        let addr = free_addr()?;
        let _server = Server(
            Command::new(&env.server)
                .args(["serve", "--log-level", "error", "--http", &addr, "--config"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start the server: {e}"))?,
        );
        let start = Instant::now();
        while std::net::TcpStream::connect(&addr).is_err() {
            if start.elapsed() > Duration::from_secs(20) {
                return Err(format!("nothing listens on {addr} after 20 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let url = format!("http://{addr}/mcp");
        let into = dir.join("pulled");
        let mut rows = Vec::new();
        for protocol in ["2026-07-28", "legacy"] {
            let mut lat = Samples::default();
            // One unmeasured pull first: the server's first skills/get hashes the files.
            for rep in 0..=env.reps(10) {
                let _ = std::fs::remove_dir_all(&into);
                let t = Instant::now();
                let out = Command::new(&env.server)
                    .args(["skills", "pull", "skill://bulk/SKILL.md"])
                    .arg(&into)
                    .args(["--protocol", protocol, "--url", &url])
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| format!("cannot run the client: {e}"))?;
                let took = t.elapsed();
                if !out.status.success() {
                    return Err(format!(
                        "skills pull failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                let pulled = std::fs::read_dir(into.join("bulk/ref"))
                    .map_err(|e| format!("the pulled skill: {e}"))?
                    .count();
                if pulled != FILES - 1 {
                    return Err(format!("pulled {pulled} files of ref/, not {}", FILES - 1));
                }
                if rep > 0 {
                    lat.push(took);
                }
            }
            let p50 = lat.p50_us() / 1000.0;
            rows.push(
                Row::new(
                    S,
                    "mcp-resources",
                    &format!("skills pull, {FILES} files, HTTP {protocol}"),
                    p50,
                    "ms",
                )
                .note("client process start to exit: skills/get, every file read and its size and sha256 digest checked, renamed into place; median"),
            );
        }
        Ok(rows)
    })();
    guard(S, "mcp-resources", r)
}
