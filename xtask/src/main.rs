//! Project automation, run as `cargo xtask <task>`: one place for what would otherwise be
//! shell scripts only one person understands.
//!
//! `cargo xtask test` is the project's single test command: it is what the README shows and
//! what `.ci/run` calls.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The Python packages the end-to-end suite needs, pinned in this file.
const E2E_REQUIREMENTS: &str = "tests/e2e/requirements.txt";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        _ => Err("usage: cargo xtask test [--rust-only]\n\n  test   run every test: the Rust workspace tests, then the Python SDK end-to-end suite against the built binary".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

fn test(args: &[String]) -> Result<(), String> {
    let root = root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run(Command::new(&cargo)
        .current_dir(&root)
        .args(["test", "--workspace", "--all-targets"]))?;
    if args.iter().any(|a| a == "--rust-only") {
        return Ok(());
    }
    // The Python suite drives the same binary a user runs.
    run(Command::new(&cargo)
        .current_dir(&root)
        .args(["build", "-p", "mcp-resources"]))?;
    let venv = root.join(".cache/venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        run(Command::new(base).args(["-m", "venv"]).arg(&venv))?;
    }
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(root.join(E2E_REQUIREMENTS)))?;
    run(Command::new(&python)
        .current_dir(&root)
        .env("MCPR_BIN", root.join("target/debug/mcp-resources"))
        .args(["-m", "pytest", "tests/e2e", "-q", "-p", "no:cacheprovider"]))
}
