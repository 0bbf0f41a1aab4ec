//! The relay floor: what any stdio gateway costs at least on this machine. A process sits
//! between the client and the upstream and passes bytes both ways as they come (one `read`,
//! one `write` per chunk, 64 KiB at most), never parsing them, so a request and its answer
//! each cross one more pipe and wake one more process than they do direct. A gateway that
//! rewrites URIs must read every message too; this one reads none, so nothing real can be
//! cheaper.

use std::os::fd::{AsFd, BorrowedFd};
use std::process::{Command, Stdio};

use rustix::io::Errno;

/// Runs `cmd` and relays our stdin to it and its stdout to ours until both end.
pub fn relay(cmd: &[String]) -> Result<(), String> {
    let (program, args) = cmd.split_first().ok_or("relay: no upstream command")?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("relay: cannot run {program}: {e}"))?;
    let up_in = child.stdin.take().ok_or("relay: no stdin")?;
    let up_out = child.stdout.take().ok_or("relay: no stdout")?;
    // Answers on a thread of their own, as a gateway's reader is: both directions at once.
    let answers = std::thread::spawn(move || pass(up_out.as_fd(), std::io::stdout().as_fd()));
    let requests = pass(std::io::stdin().as_fd(), up_in.as_fd());
    // Our stdin ended: the upstream's does too, and it ends its answers.
    drop(up_in);
    let answers = answers
        .join()
        .map_err(|_| "relay: the answer thread panicked".to_owned())?;
    let _ = child.wait();
    requests.and(answers)
}

/// Copies `from` to `to` a read at a time, writing each read's bytes before the next read
/// (system calls only, as the machine floors: no buffered I/O between).
fn pass(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<(), String> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match rustix::io::read(from, &mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(format!("relay: read: {e}")),
        };
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            match rustix::io::write(to, rest) {
                Ok(w) => rest = &rest[w..],
                Err(Errno::INTR) => {}
                Err(e) => return Err(format!("relay: write: {e}")),
            }
        }
    }
}
