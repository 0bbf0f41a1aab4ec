//! Whether a mount's tree is on a network or FUSE file system, where any `stat`, `open` or
//! `read` can block for as long as the server or the FUSE daemon stays silent (NFS hard
//! mounts wait for ever). Such a mount is never read in place: every read goes to the
//! blocking pool, where the request timeout bounds what the client waits and a stuck call
//! holds a pool thread, not a runtime worker or the stdio reader.
//!
//! Decided once, when the mount is created: `fstatfs` of the root, and the mount table for
//! any network or FUSE mount beneath it. A mount made beneath the root later is not seen.

use std::os::fd::AsFd;
use std::path::Path;

/// `f_type` of the network and user-space file systems (`linux/magic.h`, and the file
/// systems' own sources for those it does not list).
const REMOTE_MAGIC: &[(u32, &str)] = &[
    (0x6969, "nfs"),
    (0x517B, "smb"),
    (0xFF53_4D42, "cifs"),
    (0xFE53_4D42, "smb2"),
    (0x6573_5546, "fuse"),
    (0x00C3_6400, "ceph"),
    (0x5346_414F, "afs"),
    (0x6B41_4653, "afs"),
    (0x7375_7245, "coda"),
    (0x0102_1997, "9p"),
    (0x564C, "ncp"),
    (0x0116_1970, "gfs2"),
    (0x7461_636F, "ocfs2"),
    (0x0BD0_0BD0, "lustre"),
    (0x2003_0528, "orangefs"),
    (0x4750_4653, "gpfs"),
    (0x786F_4256, "vboxsf"),
];

/// The name of the network or FUSE file system with magic number `magic`, if it is one.
pub(crate) fn remote_by_magic(magic: u32) -> Option<&'static str> {
    REMOTE_MAGIC
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| *name)
}

/// Whether a file system type as `/proc/self/mountinfo` names it is a network or FUSE one.
pub(crate) fn remote_by_name(fstype: &str) -> bool {
    const NAMES: &[&str] = &[
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ncpfs",
        "ncp",
        "9p",
        "afs",
        "ceph",
        "glusterfs",
        "lustre",
        "gfs2",
        "ocfs2",
        "gpfs",
        "pvfs2",
        "orangefs",
        "vboxsf",
        "virtiofs",
        "fuse",
        "fuseblk",
        "davfs",
    ];
    NAMES.contains(&fstype) || fstype.starts_with("fuse.")
}

/// Why the tree at `root` (open as `fd`, canonical) must not be read in place, or `None`
/// when it is all on local file systems.
pub(crate) fn remote_reason(fd: impl AsFd, root: &Path) -> Option<String> {
    if let Ok(st) = rustix::fs::fstatfs(fd) {
        // The magic numbers are 32-bit; `f_type`'s width varies by architecture.
        #[allow(clippy::unnecessary_cast)]
        let magic = st.f_type as u32;
        if let Some(name) = remote_by_magic(magic) {
            return Some(format!("its root is on a {name} file system"));
        }
    }
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    remote_beneath(&table, root)
        .map(|(at, fstype)| format!("{at} beneath its root is a {fstype} mount"))
}

/// The first network or FUSE mount at or beneath `root` in `mountinfo` (the format of
/// `/proc/self/mountinfo`): its mount point and type.
pub(crate) fn remote_beneath(mountinfo: &str, root: &Path) -> Option<(String, String)> {
    let root = root.to_str()?;
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let at = unescape(before.split(' ').nth(4)?);
        let fstype = after.split(' ').next()?;
        let beneath = at == root
            || at
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with('/') || root.ends_with('/'));
        (beneath && remote_by_name(fstype)).then(|| (at, fstype.to_owned()))
    })
}

/// A mount point as `mountinfo` writes it, with its octal escapes (`\040` for a space)
/// undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let d = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(d, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /srv/data rw,relatime shared:2 - xfs /dev/sdb1 rw
41 40 0:36 / /srv/data/nfs\\040share rw,relatime shared:3 - nfs4 server:/export rw
42 22 0:37 / /home/u/mnt rw,nosuid shared:4 - fuse.sshfs u@host: rw
43 22 0:38 / /srv/database rw shared:5 - cifs //host/db rw
";

    #[test]
    fn network_and_fuse_file_systems_are_told_by_magic_and_by_name() {
        assert_eq!(remote_by_magic(0x6969), Some("nfs"));
        assert_eq!(remote_by_magic(0xFF53_4D42), Some("cifs"));
        assert_eq!(remote_by_magic(0x6573_5546), Some("fuse"));
        // ext4, xfs, tmpfs, btrfs, overlayfs: local.
        for local in [0xEF53, 0x5846_5342, 0x0102_1994, 0x9123_683E, 0x794C_7630] {
            assert_eq!(remote_by_magic(local), None, "{local:#x}");
        }
        for name in [
            "nfs",
            "nfs4",
            "cifs",
            "fuse.sshfs",
            "fuseblk",
            "9p",
            "virtiofs",
        ] {
            assert!(remote_by_name(name), "{name}");
        }
        for name in ["ext4", "xfs", "tmpfs", "btrfs", "overlay", "fusectl"] {
            assert!(!remote_by_name(name), "{name}");
        }
    }

    #[test]
    fn a_network_mount_at_or_beneath_the_root_is_found_and_one_beside_it_is_not() {
        let found = |root: &str| remote_beneath(TABLE, Path::new(root));
        assert_eq!(
            found("/srv/data"),
            Some(("/srv/data/nfs share".into(), "nfs4".into()))
        );
        assert_eq!(
            found("/srv/data/nfs share/sub"),
            None,
            "a mount above the root is statfs's to see"
        );
        assert_eq!(
            found("/srv/data/nfs share"),
            Some(("/srv/data/nfs share".into(), "nfs4".into()))
        );
        assert_eq!(
            found("/home/u"),
            Some(("/home/u/mnt".into(), "fuse.sshfs".into()))
        );
        // `/srv/database` is beside `/srv/data`, not beneath it.
        assert_eq!(found("/srv/dat"), None);
        assert_eq!(found("/var"), None);
        assert!(found("/").is_some());
    }

    /// Over a tree that is not read in place, `read_now` never answers and `read` answers
    /// what an in-place read does: files (linked or not), directories, and the errors.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_remote_tree_is_read_on_the_pool_with_the_same_answers() {
        use crate::{FilesConfig, FilesProvider, encode_path_uri};
        use mcpr_core::{PageRequest, Provider, ReadLimits, ResourceUri};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("small.txt"), "small").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.md"), "a").unwrap();
        std::os::unix::fs::symlink("small.txt", root.join("link.txt")).unwrap();
        std::fs::write(root.join(".env"), "SECRET=1").unwrap();
        let local = FilesProvider::new(FilesConfig::new(&root)).unwrap();
        let remote = FilesProvider::new_as_if_remote(FilesConfig::new(&root)).unwrap();
        assert!(local.inner_for_tests().in_place);
        assert!(!remote.inner_for_tests().in_place);
        let limits = ReadLimits { max_bytes: 1 << 20 };
        let parse = |rel: &str| ResourceUri::parse(&encode_path_uri(&root.join(rel))).unwrap();
        for rel in [
            "small.txt",
            "link.txt",
            "sub",
            "sub/a.md",
            "missing.txt",
            ".env",
        ] {
            let u = parse(rel);
            // A path the rules deny is refused before the tree is touched, in place.
            if rel != ".env" {
                assert!(
                    remote.read_now(&u, &limits).is_none(),
                    "{rel} read in place"
                );
            }
            let want = local.read(&u, &limits).await;
            let got = remote.read(&u, &limits).await;
            match (want, got) {
                (Ok(want), Ok(got)) => assert_eq!(want, got, "{rel}"),
                (Err(want), Err(got)) => {
                    assert_eq!((want.kind, want.message), (got.kind, got.message), "{rel}")
                }
                (want, got) => panic!("{rel}: {want:?} in place, {got:?} on the pool"),
            }
        }
        let page = || PageRequest {
            after: None,
            limit: 10,
        };
        let want = local.read_directory(&parse("sub"), page()).await.unwrap();
        let got = remote.read_directory(&parse("sub"), page()).await.unwrap();
        assert_eq!(want.items, got.items);
        let err = remote
            .read_directory(&parse("small.txt"), page())
            .await
            .unwrap_err();
        assert_eq!(err.kind, mcpr_core::ErrorKind::InvalidParams, "{err:?}");
    }

    #[test]
    fn a_local_tree_is_read_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let fd = std::fs::File::open(&root).unwrap();
        // The test's own temporary directory is on a local file system on every machine
        // that runs the suite (a network one would be named here).
        assert_eq!(remote_reason(&fd, &root), None);
    }
}
