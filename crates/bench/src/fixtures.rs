//! The fixtures, generated once under the cache directory and reused while their `.complete`
//! marker is there: a tree of small files, a large tree (1000 × 1000 empty files), 1 MiB and
//! 8 MiB binaries, and an SQLite database.

use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the fixtures are.
pub struct Fixtures {
    /// Small tree: `f1k.txt`, `blob1m.bin`, `blob8m.bin`, `watched.txt`, `tree/dNN/fNN.txt`.
    pub small: PathBuf,
    /// The large tree: `dirs` × 1000 empty files.
    pub big: PathBuf,
    /// Files in the large tree.
    pub big_files: usize,
    /// The SQLite database.
    pub db: PathBuf,
}

/// Files under `small/tree`, each one a subscription target.
pub const TREE_FILES: usize = 10_000;
/// The 1 KiB text file every read scenario serves; its first line identifies it.
pub const TEXT_1K_HEAD: &str = "mcpr-bench 1 KiB text fixture";

/// Generate what is missing. `big_dirs` directories of 1000 files make the large tree.
pub fn ensure(dir: &Path, big_dirs: usize) -> Result<Fixtures, String> {
    let err = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
    let dir = dir.canonicalize().map_err(|e| err(dir, e))?;
    let small = dir.join("small");
    if !small.join(".complete").exists() {
        let t = Instant::now();
        std::fs::create_dir_all(small.join("tree")).map_err(|e| err(&small, e))?;
        let mut text = format!("{TEXT_1K_HEAD}\n");
        while text.len() < 1024 {
            text.push_str("the quick brown fox jumps over the lazy dog 0123456789\n");
        }
        text.truncate(1023);
        text.push('\n');
        write(&small.join("f1k.txt"), text.as_bytes())?;
        write(&small.join("watched.txt"), b"0\n")?;
        write(&small.join("blob1m.bin"), &noise(1 << 20, 1))?;
        write(&small.join("blob8m.bin"), &noise(8 << 20, 2))?;
        for d in 0..TREE_FILES / 100 {
            let sub = small.join(format!("tree/d{d:02}"));
            std::fs::create_dir_all(&sub).map_err(|e| err(&sub, e))?;
            for f in 0..100 {
                write(&sub.join(format!("f{f:02}.txt")), b"small file\n")?;
            }
        }
        write(&small.join(".complete"), b"")?;
        eprintln!("bench: generated {} in {:?}", small.display(), t.elapsed());
    }
    let big = dir.join(format!("big-{big_dirs}k"));
    if !big.join(".complete").exists() {
        let t = Instant::now();
        big_tree(&big, big_dirs)?;
        write(&big.join(".complete"), b"")?;
        eprintln!(
            "bench: generated {} ({} files) in {:?}",
            big.display(),
            big_dirs * 1000,
            t.elapsed()
        );
    }
    let db = dir.join("bench.sqlite");
    if !dir.join(".db-complete").exists() {
        let _ = std::fs::remove_file(&db);
        database(&db)?;
        write(&dir.join(".db-complete"), b"")?;
    }
    Ok(Fixtures {
        small,
        big,
        big_files: big_dirs * 1000,
        db,
    })
}

fn write(p: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(p, bytes).map_err(|e| format!("{}: {e}", p.display()))
}

/// Incompressible bytes (xorshift), so nothing downstream gets a free ride.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ seed;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// `dirs` directories of 1000 empty files; one thread per core, since creating a million
/// inodes is all syscalls.
fn big_tree(big: &Path, dirs: usize) -> Result<(), String> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    for d in (t..dirs).step_by(threads) {
                        let sub = big.join(format!("d{d:03}"));
                        std::fs::create_dir_all(&sub)
                            .map_err(|e| format!("{}: {e}", sub.display()))?;
                        for f in 0..1000 {
                            let p = sub.join(format!("f{f:03}.txt"));
                            std::fs::File::create(&p)
                                .map_err(|e| format!("{}: {e}", p.display()))?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        crate::load::join_all(handles, "fixture")
    });
    results.into_iter().collect()
}

/// A table of 10,000 rows to page through.
fn database(path: &Path) -> Result<(), String> {
    let e = |e: rusqlite::Error| format!("{}: {e}", path.display());
    let mut conn = rusqlite::Connection::open(path).map_err(e)?;
    conn.execute_batch(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL, note TEXT);",
    )
    .map_err(e)?;
    let tx = conn.transaction().map_err(e)?;
    {
        let mut stmt = tx
            .prepare("INSERT INTO items (id, name, price, note) VALUES (?1, ?2, ?3, ?4)")
            .map_err(e)?;
        for i in 0..10_000i64 {
            stmt.execute(rusqlite::params![
                i,
                format!("item {i}"),
                i as f64 * 0.25,
                "a short note"
            ])
            .map_err(e)?;
        }
    }
    tx.commit().map_err(e)
}
