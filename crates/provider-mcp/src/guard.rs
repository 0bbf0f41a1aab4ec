//! The guard of a stdio upstream (Linux): our own binary run as a hidden subcommand between
//! the gateway and the upstream command, so that nothing the upstream started outlives the
//! gateway, even when the gateway is killed with SIGKILL and runs no code of its own.
//!
//! The guard asks the kernel for SIGTERM when the gateway dies (`PR_SET_PDEATHSIG`; it then
//! checks that the gateway did not die before that) and is a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`), so every process the upstream starts, however deep and
//! whatever session or group it moves to, is re-parented to the guard rather than to init
//! when its own parent ends. It starts the command, keeps no copy of the upstream's stdin
//! and stdout, and waits for signals. When the command exits, or the gateway dies, or someone
//! asks it to end, it kills its whole descendant tree and ends itself with the command's
//! exit code (or 128 + the signal). The guard is the upstream's process group leader, so
//! the gateway's own ending of the group (SIGKILL to all of it) is unchanged.
//!
//! All of it in safe code (the workspace forbids `unsafe`): rustix for `prctl`, `kill` and
//! `wait`, tokio's signal streams for the signals.

#[cfg(target_os = "linux")]
use std::ffi::OsString;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
#[cfg(target_os = "linux")]
use std::time::{Duration, Instant};

/// The hidden first argument that makes our binary a guard: `GUARD_ARG <the gateway's pid>
/// command args…`.
#[cfg(target_os = "linux")]
pub const GUARD_ARG: &str = "__mcp-upstream-guard";

/// Set by a binary that runs [`run_if_asked`] first thing in `main`.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Start stdio upstreams through the guard: only for a binary whose `main` calls
/// [`run_if_asked`] before anything else (ours), since the guard is this very binary run
/// again. Without it (a test of this crate, another program using it) upstreams are started
/// directly, still with `PR_SET_PDEATHSIG`, and what they start themselves may outlive a
/// SIGKILL of ours.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// The guard to start, when there is one: this very binary, by `/proc/self/exe`, which
/// still names the running binary after an upgrade replaced its file.
pub(crate) fn exe() -> Option<&'static Path> {
    (cfg!(target_os = "linux") && ENABLED.load(Ordering::Relaxed))
        .then_some(Path::new("/proc/self/exe"))
}

type Job = Box<dyn FnOnce() + Send>;

/// Run `f` on the one thread that starts upstream processes, inside `rt`, and return what it
/// returns. That thread lives as long as the process, so a death signal bound to it
/// (`PR_SET_PDEATHSIG` fires when the starting *thread* ends) means our death and nothing
/// else.
pub(crate) fn on_keeper_thread<R: Send + 'static>(
    rt: tokio::runtime::Handle,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    static KEEPER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("mcp-upstream-starter".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .ok()
            .map(|_| tx)
    });
    let (done_tx, done_rx) = mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let _in_runtime = rt.enter();
        let _ = done_tx.send(f());
    });
    match keeper {
        Some(tx) => {
            if let Err(mpsc::SendError(job)) = tx.send(job) {
                job();
            }
        }
        // No thread could be made: started here, bound to this thread's life instead.
        None => job(),
    }
    // Starting a process takes a fork and an exec: a moment of this worker's time.
    done_rx
        .recv()
        .expect("the starter thread answers every job")
}

/// How long the guard keeps killing a tree that keeps forking before it gives up.
#[cfg(target_os = "linux")]
const CLEANUP_WITHIN: Duration = Duration::from_secs(2);

/// Run as the guard when the process was started as one (`args[1]` is [`GUARD_ARG`]):
/// `Some(exit code)` once it is done; `None` for any other command line.
#[cfg(target_os = "linux")]
pub fn run_if_asked() -> Option<u8> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != GUARD_ARG {
        return None;
    }
    let parent = args.next().and_then(|p| p.to_str()?.parse::<i32>().ok());
    let (Some(parent), Some(command)) = (parent, args.next()) else {
        eprintln!("{GUARD_ARG}: usage: {GUARD_ARG} PID COMMAND [ARGS…]");
        return Some(2);
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{GUARD_ARG}: no runtime: {e}");
            return Some(1);
        }
    };
    Some(rt.block_on(guard(parent, command, args.collect())))
}

/// The guard's life: see the module's documentation.
#[cfg(target_os = "linux")]
async fn guard(parent: i32, command: OsString, args: Vec<OsString>) -> u8 {
    use rustix::process::{Signal, getppid, set_child_subreaper, set_parent_process_death_signal};
    use tokio::signal::unix::{SignalKind, signal};

    // The handlers first, so that the death signal asked for below finds one.
    let streams = [
        SignalKind::child(),
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
        SignalKind::quit(),
    ]
    .map(signal);
    let [
        Ok(mut child),
        Ok(mut term),
        Ok(mut int),
        Ok(mut hup),
        Ok(mut quit),
    ] = streams
    else {
        eprintln!("{GUARD_ARG}: cannot handle signals");
        return 1;
    };
    if let Err(e) = set_parent_process_death_signal(Some(Signal::TERM)) {
        eprintln!("{GUARD_ARG}: cannot ask for the gateway's death signal: {e}");
    }
    // The gateway died before the line above: nothing would tell us now.
    if getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent) {
        return 1;
    }
    // Any pid turns the attribute on.
    if let Err(e) = set_child_subreaper(Some(rustix::process::getpid())) {
        eprintln!("{GUARD_ARG}: cannot become a subreaper: {e}");
    }
    let started = match std::process::Command::new(&command).args(&args).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot start `{}`: {e}", command.to_string_lossy());
            return 127;
        }
    };
    let pid = rustix::process::Pid::from_child(&started);
    // Reaped by `reap`, never by this handle.
    drop(started);
    // The upstream's stdin and stdout are the command's alone: its EOF is the gateway's
    // EOF, and the gateway's EOF the command's. stderr stays ours too, for the lines above.
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = rustix::stdio::dup2_stdin(&null);
        let _ = rustix::stdio::dup2_stdout(&null);
    }
    loop {
        let asked = tokio::select! {
            _ = child.recv() => None,
            _ = term.recv() => Some(signo::TERM),
            _ = int.recv() => Some(signo::INT),
            _ = hup.recv() => Some(signo::HUP),
            _ = quit.recv() => Some(signo::QUIT),
        };
        if let Some(sig) = asked {
            // The gateway died (the death signal), or we were asked to end.
            kill_descendants();
            return 128 + sig;
        }
        if let Some(status) = reap(Some(pid)) {
            kill_descendants();
            return status
                .exit_status()
                .map(|c| c as u8)
                .or_else(|| {
                    status
                        .terminating_signal()
                        .map(|s| 128u8.saturating_add(s as u8))
                })
                .unwrap_or(1);
        }
    }
}

/// The numbers of the signals that end the guard, for its exit code (128 + the number).
#[cfg(target_os = "linux")]
mod signo {
    pub(super) const HUP: u8 = 1;
    pub(super) const INT: u8 = 2;
    pub(super) const QUIT: u8 = 3;
    pub(super) const TERM: u8 = 15;
}

/// Reap every child that ended; the wait status of `command` when it was among them.
#[cfg(target_os = "linux")]
fn reap(command: Option<rustix::process::Pid>) -> Option<rustix::process::WaitStatus> {
    // `wait`, any child (-1); rustix's `waitpid(None, …)` is pid 0, the children of our
    // own process group only, which misses one that moved to a group or session of its own.
    use rustix::process::{WaitOptions, wait};
    let mut found = None;
    loop {
        match wait(WaitOptions::NOHANG) {
            Ok(Some((pid, status))) => {
                if Some(pid) == command {
                    found = Some(status);
                }
            }
            // A signal (the next SIGCHLD) came in between: ask again.
            Err(rustix::io::Errno::INTR) => {}
            Ok(None) | Err(_) => return found,
        }
    }
}

/// Our children now: the processes whose parent is us (after a parent of theirs ended, the
/// descendants it left are re-parented to us, the subreaper).
#[cfg(target_os = "linux")]
fn children() -> Vec<rustix::process::Pid> {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name().into_string().ok()?;
        let pid = rustix::process::Pid::from_raw(name.parse().ok()?)?;
        let stat = std::fs::read_to_string(format!("/proc/{name}/stat")).ok()?;
        // `pid (comm) state ppid …`, where comm may hold spaces and parentheses.
        let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
        (ppid == me).then_some(pid)
    })
    .collect()
}

/// Kill every descendant: each child with SIGKILL, reaped, until none is left (the ones a
/// killed child leaves come to us and go the same way), for at most [`CLEANUP_WITHIN`].
#[cfg(target_os = "linux")]
fn kill_descendants() {
    use rustix::process::{Signal, WaitOptions, kill_process, wait};
    let deadline = Instant::now() + CLEANUP_WITHIN;
    loop {
        for pid in children() {
            // A child of ours not reaped yet: its pid cannot have been reused.
            let _ = kill_process(pid, Signal::KILL);
        }
        reap(None);
        // Done when no child is left at all (ECHILD), not on any other error: an EINTR (a
        // SIGCHLD of the very kills above) would end the guard with children left.
        let none_left = matches!(wait(WaitOptions::NOHANG), Err(rustix::io::Errno::CHILD));
        if none_left || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
