//! The system calls every floor makes: the directory opened once, and the file read per
//! request with the four calls any reader needs (`openat`, `fstat` for the size, `read`,
//! `close`).

use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};

/// `dir`, opened once for the files read beneath it.
pub fn open_dir(dir: &str) -> Result<OwnedFd, String> {
    rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{dir}: {e}"))
}

/// `file` beneath `root` into `text` (its buffer reused): `openat`, `fstat` for the size,
/// `read`, `close` (the drop).
pub fn read_into(root: &OwnedFd, file: &str, text: &mut Vec<u8>) -> Result<(), String> {
    let fd = rustix::fs::openat(root, file, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| format!("{file}: {e}"))?;
    let size = rustix::fs::fstat(&fd).map_err(|e| e.to_string())?.st_size;
    text.clear();
    text.resize(usize::try_from(size).unwrap_or(0) + 1, 0);
    let n = rustix::io::read(&fd, &mut text[..]).map_err(|e| e.to_string())?;
    text.truncate(n);
    Ok(())
}
