//! A stdio upstream's process: started in a process group of its own with only `PATH`,
//! `HOME` and the configured `env` (never our own environment, which may hold our secrets),
//! its stderr copied to our log line by line (bounded, marked with the mount, every `env`
//! value masked: an upstream may print its own environment), and the whole group killed and
//! reaped when the connection ends or we do.
//!
//! On Linux, when the binary offers it ([`crate::guard::enable`]), the command runs under
//! the guard ([`crate::guard`]), which takes it and every process it started (`npx` starts
//! node) down when we are killed outright (SIGKILL, the OOM killer) and no code of ours
//! runs. The guard's death signal (`PR_SET_PDEATHSIG`) fires when the *thread* that started
//! it ends, so every upstream is started from one thread that lives as long as the process
//! (a runtime worker may end earlier: `block_in_place` hands its thread to the blocking
//! pool, which ends idle threads).

use std::process::Stdio;
use std::time::{Duration, Instant};

use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop, ProcessGroup};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use crate::config::Secret;

/// The longest stderr line logged; the rest of a longer line is dropped.
const MAX_STDERR_LINE: usize = 2048;
/// The most stderr lines logged per second; more are counted and the count logged.
const MAX_STDERR_LINES_PER_SECOND: u32 = 50;
/// Secret values shorter than this are not masked in stderr lines: `1` or `on` would mask
/// every such character of every line and say which characters the secret is made of.
const MIN_MASKED_CHARS: usize = 4;
/// What a masked secret value reads as in our log.
const MASK: &str = "<redacted>";

/// The secret values (`env`, `headers`) to mask in what an upstream prints, longest first
/// (so a value that contains another is masked whole), without control characters (as the
/// line they are looked for in).
#[derive(Debug, Clone, Default)]
pub(crate) struct Masks(Vec<String>);

impl Masks {
    pub(crate) fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut v: Vec<String> = values
            .into_iter()
            .map(without_controls)
            .filter(|v| v.chars().count() >= MIN_MASKED_CHARS)
            .collect();
        v.sort_by_key(|s| std::cmp::Reverse(s.len()));
        v.dedup();
        Self(v)
    }

    /// `line` with every value replaced by [`MASK`]; when the line was `cut` short, a start
    /// of a value at its very end (the rest of the value fell past the cut) goes too.
    pub(crate) fn apply(&self, line: &str, cut: bool) -> String {
        let mut out = line.to_owned();
        for v in &self.0 {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), MASK);
            }
        }
        if cut {
            let partial = self
                .0
                .iter()
                .flat_map(|v| v.char_indices().skip(1).map(|(i, _)| &v[..i]))
                .filter(|start| out.ends_with(start))
                .map(str::len)
                .max();
            if let Some(n) = partial {
                out.truncate(out.len() - n);
                out.push_str(MASK);
            }
        }
        out
    }
}

/// `s` without control characters other than tab.
fn without_controls(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control() || *c == '\t')
        .collect()
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// How long the guard, asked to end, gets to kill the upstream's tree before its whole
/// group is killed (it needs moments; it gives up on a tree that keeps forking after 2 s).
#[cfg(target_os = "linux")]
const GUARD_ENDS_WITHIN: Duration = Duration::from_secs(3);

/// The running upstream process; dropping it kills its process group.
pub(crate) struct Child {
    inner: Option<Box<dyn ChildWrapper>>,
    /// Started through the guard, which can end what left the group too.
    guarded: bool,
}

impl Child {
    /// Start `command args` with `env`, its stderr logged for `mount`. The error says what
    /// could not be started (the command, never the environment).
    pub(crate) fn spawn(
        mount: &str,
        command: &str,
        args: &[String],
        env: &[Secret],
    ) -> Result<(Self, ChildStdout, ChildStdin), String> {
        #[cfg(target_os = "linux")]
        let mut cmd = match crate::guard::exe() {
            Some(exe) => {
                // The guard would start anything; one that cannot start the command could
                // only say so on its stderr. Said here instead, as a direct start would.
                let path = env
                    .iter()
                    .find(|e| e.name == "PATH")
                    .map(|e| std::ffi::OsString::from(&e.value))
                    .or_else(|| std::env::var_os("PATH"));
                if !startable(command, path.as_deref()) {
                    return Err(format!(
                        "cannot start `{command}`: no such executable file (on PATH)"
                    ));
                }
                let mut c = tokio::process::Command::new(exe);
                c.arg(crate::guard::GUARD_ARG)
                    .arg(std::process::id().to_string())
                    .arg(command);
                c
            }
            None => tokio::process::Command::new(command),
        };
        #[cfg(not(target_os = "linux"))]
        let mut cmd = tokio::process::Command::new(command);
        cmd.args(args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for key in ["PATH", "HOME"] {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        for e in env {
            cmd.env(&e.name, &e.value);
        }
        let mut wrap = CommandWrap::from(cmd);
        wrap.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
        let spawned =
            crate::guard::on_keeper_thread(tokio::runtime::Handle::current(), move || wrap.spawn());
        let mut child = spawned.map_err(|e| format!("cannot start `{command}`: {e}"))?;
        let stdin = child.inner_mut().stdin().take();
        let stdout = child.inner_mut().stdout().take();
        let stderr = child.inner_mut().stderr().take();
        #[cfg(target_os = "linux")]
        let guarded = crate::guard::exe().is_some();
        #[cfg(not(target_os = "linux"))]
        let guarded = false;
        let this = Self {
            inner: Some(child),
            guarded,
        };
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            return Err(format!("`{command}` started without stdin or stdout"));
        };
        if let Some(stderr) = stderr {
            let masks = Masks::new(env.iter().map(|e| e.value.as_str()));
            tokio::spawn(log_stderr(mount.to_owned(), stderr, masks));
        }
        Ok((this, stdout, stdin))
    }

    /// The exit status, if the process has ended.
    pub(crate) fn exited(&mut self) -> Option<String> {
        let child = self.inner.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }
}

/// Whether `command` names an executable file: as it is when it holds a `/`, else in a
/// folder of `path` (the lookup the start of a program makes).
#[cfg(target_os = "linux")]
fn startable(command: &str, path: Option<&std::ffi::OsStr>) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &std::path::Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        return executable(std::path::Path::new(command));
    }
    path.is_some_and(|p| std::env::split_paths(p).any(|dir| executable(&dir.join(command))))
}

impl Drop for Child {
    fn drop(&mut self) {
        let Some(mut child) = self.inner.take() else {
            return;
        };
        let rt = tokio::runtime::Handle::try_current().ok();
        // The guard first, asked to end: it kills the upstream's whole tree, a helper that
        // left the group included, which the group's SIGKILL below would miss (it would
        // kill the guard before it could). Then the group, whatever is left of it.
        #[cfg(target_os = "linux")]
        if self.guarded
            && let Some(rt) = &rt
            && let Some(pid) = child
                .id()
                .and_then(|p| rustix::process::Pid::from_raw(p as i32))
            && rustix::process::kill_process(pid, rustix::process::Signal::TERM).is_ok()
        {
            rt.spawn(async move {
                let _ = tokio::time::timeout(GUARD_ENDS_WITHIN, child.wait()).await;
                let _ = child.start_kill();
                let _ = child.wait().await;
            });
            return;
        }
        // SIGKILL to the whole group: an upstream that started helpers (npx starts node)
        // leaves none behind.
        let _ = child.start_kill();
        // Reap it so that no zombie stays; without a runtime (the process is ending) init
        // reaps it after us.
        if let Some(rt) = rt {
            rt.spawn(async move {
                let _ = child.wait().await;
            });
        } else {
            let _ = child.try_wait();
        }
    }
}

/// Copy `stderr` to our log a line at a time, each line cut to [`MAX_STDERR_LINE`] bytes
/// (and said to be cut) and stripped of control characters, every secret of `masks` in it
/// masked (a secret's start before the cut included), at most
/// [`MAX_STDERR_LINES_PER_SECOND`] a second. The lines left out of a second are counted and
/// the count logged when the second ends, whether or not the upstream writes again, and a
/// last line without its newline is logged at the end.
async fn log_stderr(mount: String, stderr: ChildStderr, masks: Masks) {
    let mut reader = BufReader::new(stderr);
    // Whether the line in hand lost bytes past the bound.
    let mut truncated = false;
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let mut window = Instant::now();
    let mut logged = 0u32;
    let mut dropped = 0u64;
    let said_dropped = |dropped: u64| {
        tracing::warn!(mount = %mount, "upstream stderr: {dropped} more lines not logged (more than {MAX_STDERR_LINES_PER_SECOND} a second)");
    };
    loop {
        let window_ends = tokio::time::Instant::from_std(window + Duration::from_secs(1));
        let read = tokio::select! {
            r = reader.fill_buf() => Some(match r {
                Ok([]) | Err(_) => None,
                Ok(buf) => Some(match buf.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        let room = MAX_STDERR_LINE.saturating_sub(line.len());
                        truncated |= i > room;
                        line.extend_from_slice(&buf[..i.min(room)]);
                        (true, i + 1)
                    }
                    None => {
                        let room = MAX_STDERR_LINE.saturating_sub(line.len());
                        truncated |= buf.len() > room;
                        line.extend_from_slice(&buf[..buf.len().min(room)]);
                        (false, buf.len())
                    }
                }),
            }),
            // Only waited for while lines were left out: their count is due at the window's end.
            () = tokio::time::sleep_until(window_ends), if dropped > 0 => None,
        };
        let done = match read {
            // The window ended with lines left out.
            None => {
                said_dropped(dropped);
                window = Instant::now();
                logged = 0;
                dropped = 0;
                continue;
            }
            Some(None) => {
                // The end: a last line without its newline, then the count.
                if !line.is_empty() && logged < MAX_STDERR_LINES_PER_SECOND {
                    log_line(&mount, &line, truncated, &masks);
                } else if !line.is_empty() {
                    dropped += 1;
                }
                if dropped > 0 {
                    said_dropped(dropped);
                }
                return;
            }
            Some(Some((done, used))) => {
                reader.consume(used);
                done
            }
        };
        if !done {
            continue;
        }
        if window.elapsed() >= Duration::from_secs(1) {
            if dropped > 0 {
                said_dropped(dropped);
            }
            window = Instant::now();
            logged = 0;
            dropped = 0;
        }
        if logged < MAX_STDERR_LINES_PER_SECOND {
            log_line(&mount, &line, truncated, &masks);
            logged += 1;
        } else {
            dropped += 1;
        }
        line.clear();
        truncated = false;
    }
}

/// Log one stderr line of the upstream of `mount` (bounded, masked, its cut said).
fn log_line(mount: &str, line: &[u8], truncated: bool, masks: &Masks) {
    let text = without_controls(&String::from_utf8_lossy(line));
    let text = cut(masks.apply(&text, truncated), MAX_STDERR_LINE + MASK.len());
    if truncated {
        tracing::info!(mount = %mount, "upstream stderr: {text} [cut at {MAX_STDERR_LINE} bytes]");
    } else {
        tracing::info!(mount = %mount, "upstream stderr: {text}");
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_whole_and_short_values_left() {
        let m = Masks::new(["s3cret-value", "s3cret", "on", "a\u{1b}bcd"]);
        assert_eq!(
            m.apply("API_KEY=s3cret-value OTHER=s3cret FLAG=on X=abcd", false),
            "API_KEY=<redacted> OTHER=<redacted> FLAG=on X=<redacted>"
        );
        // A line cut short right after a secret's start: the start goes too.
        assert_eq!(m.apply("KEY=s3cre", true), "KEY=<redacted>");
        assert_eq!(m.apply("KEY=s3cre", false), "KEY=s3cre");
        assert_eq!(cut("aé".to_owned(), 2), "a");
    }

    #[test]
    fn startable_finds_what_exec_would() {
        let path = std::env::var_os("PATH");
        assert!(startable("sh", path.as_deref()));
        assert!(!startable("sh", None), "no PATH, no lookup");
        assert!(!startable("no-such-command-here", path.as_deref()));
        assert!(!startable("/nonexistent/mcp-server", path.as_deref()));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("server");
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        let shown = file.display().to_string();
        assert!(!startable(&shown, None), "not executable");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(startable(&shown, None));
        assert!(startable("server", Some(dir.path().as_os_str())));
        assert!(
            !startable(&dir.path().display().to_string(), None),
            "a folder"
        );
    }
}
