//! A small read-only reader for git's reftable ref storage (`extensions.refStorage =
//! reftable`), because gix cannot read it yet.
//!
//! Only what the provider needs is read: the ref records of every table in
//! `reftable/tables.list`, merged into one name → value map (later tables override earlier
//! ones, deletions dropped). Reflogs, the object index and the ref index are never read:
//! ref blocks are scanned in order, which is cheap because ref records are small, and it
//! keeps the parser small enough to bounds-check every length it reads.
//!
//! The layout (git's `Documentation/technical/reftable.adoc`):
//!
//! ```text
//! header   'REFT', version (1|2), block_size (u24), min/max update index (u64 each),
//!          [v2: hash id (u32)]                                   24 or 28 bytes
//! 'r' blocks  type (u8), block_len (u24), records, restart offsets (u24 each),
//!             restart count (u16); the first block contains the file header, so its
//!             block_len and restart offsets count from the start of the file
//! 'i' / 'o' / 'g' blocks   ref index, objects, logs: not read
//! footer   the header again, five u64 positions, CRC-32 of the footer  68 or 72 bytes
//! ```
//!
//! A ref record is `varint(prefix_len) varint(suffix_len << 3 | type) suffix
//! varint(update_index_delta) value`, its name the previous name's first `prefix_len` bytes
//! followed by `suffix`. Types: 0 deletion, 1 one object id, 2 an object id and its peeled
//! id, 3 a symbolic ref (`varint(len) target`).
//!
//! Every length and offset read from a file is checked against the bytes there are: a
//! corrupt table is an error naming the file and what is wrong, never a panic.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gix::ObjectId;

/// What a ref record holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    /// A ref pointing at an object.
    Id(ObjectId),
    /// A ref pointing at an annotated tag, with the object the tag peels to.
    Peeled { id: ObjectId, peeled: ObjectId },
    /// A symbolic ref (`HEAD` → `refs/heads/main`).
    Symbolic(Vec<u8>),
}

impl Value {
    /// The object the ref points at directly; `None` for a symbolic ref.
    pub(crate) fn id(&self) -> Option<ObjectId> {
        match self {
            Value::Id(id) | Value::Peeled { id, .. } => Some(*id),
            Value::Symbolic(_) => None,
        }
    }

    /// The object the ref points at with annotated tags peeled, when the table recorded it
    /// (it always does for tags git writes), else the direct target.
    pub(crate) fn peeled(&self) -> Option<ObjectId> {
        match self {
            Value::Id(id) | Value::Peeled { peeled: id, .. } => Some(*id),
            Value::Symbolic(_) => None,
        }
    }
}

/// Why a reftable could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Error(pub(crate) String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

type Result<T> = std::result::Result<T, Error>;

fn corrupt<T>(what: impl fmt::Display) -> Result<T> {
    Err(Error(what.to_string()))
}

const MAGIC: &[u8; 4] = b"REFT";
/// `hash_id` values of version 2 tables.
const HASH_SHA1: u32 = u32::from_be_bytes(*b"sha1");
const HASH_SHA256: u32 = u32::from_be_bytes(*b"s256");

/// A bounds-checked cursor over one table's bytes.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Reads may not go past this offset (the end of the records of the current block).
    end: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        match self.pos.checked_add(n) {
            Some(next) if next <= self.end => {
                let s = &self.buf[self.pos..next];
                self.pos = next;
                Ok(s)
            }
            _ => corrupt(format!(
                "{what} at offset {} runs past the end of its block ({} bytes wanted, {} left)",
                self.pos,
                n,
                self.end.saturating_sub(self.pos)
            )),
        }
    }

    /// Git's variable-length integer (the "offset" encoding of packs: each continuation
    /// adds one before shifting, so every value has exactly one encoding).
    fn varint(&mut self, what: &str) -> Result<u64> {
        let mut c = self.take(1, what)?[0];
        let mut val = u64::from(c & 0x7f);
        while c & 0x80 != 0 {
            val = match val
                .checked_add(1)
                .filter(|v| v.leading_zeros() >= 7)
                .map(|v| v << 7)
            {
                Some(v) => v,
                None => return corrupt(format!("{what} at offset {} overflows", self.pos)),
            };
            c = self.take(1, what)?[0];
            val |= u64::from(c & 0x7f);
        }
        Ok(val)
    }

    fn varint_len(&mut self, what: &str) -> Result<usize> {
        let v = self.varint(what)?;
        usize::try_from(v).or_else(|_| corrupt(format!("{what} {v} is too large")))
    }
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |acc, b| (acc << 8) | u64::from(*b))
}

/// CRC-32 (IEEE, as zlib computes it). The footer is the only thing checked, so a bitwise
/// loop is fast enough and saves a dependency.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Parse one table: its ref records in name order, deletions included (they hide a ref of
/// an older table). `hash_len` is the repository's object id length in bytes.
pub(crate) fn parse_table(buf: &[u8], hash_len: usize) -> Result<Vec<(Vec<u8>, Option<Value>)>> {
    if buf.len() < 24 {
        return corrupt(format!(
            "the file is {} bytes, shorter than a reftable header",
            buf.len()
        ));
    }
    if &buf[..4] != MAGIC {
        return corrupt("bad magic: not a reftable file");
    }
    let version = buf[4];
    let (header_len, footer_len) = match version {
        1 => (24, 68),
        2 => (28, 72),
        v => return corrupt(format!("unsupported reftable version {v}")),
    };
    if buf.len() < header_len + footer_len {
        return corrupt(format!(
            "the file is {} bytes, shorter than a version {version} header and footer",
            buf.len()
        ));
    }
    let block_size = usize::try_from(be(&buf[5..8])).unwrap_or(usize::MAX);
    let table_hash_len = match version {
        1 => 20,
        _ => match u32::from_be_bytes([buf[24], buf[25], buf[26], buf[27]]) {
            HASH_SHA1 => 20,
            HASH_SHA256 => 32,
            h => return corrupt(format!("unknown hash id {h:#010x}")),
        },
    };
    if table_hash_len != hash_len {
        return corrupt(format!(
            "the table holds {}-byte object ids, the repository uses {hash_len}-byte ones",
            table_hash_len
        ));
    }

    // The footer repeats the header and closes with a CRC-32 of itself.
    let footer_start = buf.len() - footer_len;
    let footer = &buf[footer_start..];
    if footer[..header_len] != buf[..header_len] {
        return corrupt("the footer does not repeat the header (truncated or corrupt file)");
    }
    let stored_crc = u32::from_be_bytes([
        footer[footer_len - 4],
        footer[footer_len - 3],
        footer[footer_len - 2],
        footer[footer_len - 1],
    ]);
    if crc32(&footer[..footer_len - 4]) != stored_crc {
        return corrupt("the footer's CRC-32 does not match (truncated or corrupt file)");
    }
    let pos = |i: usize| be(&footer[header_len + 8 * i..header_len + 8 * i + 8]);
    let (ref_index, obj, log) = (pos(0), pos(1) >> 5, pos(3));
    // Ref blocks come first; they end where the first other section starts.
    let mut refs_end = footer_start;
    for p in [ref_index, obj, log] {
        if p == 0 {
            continue;
        }
        match usize::try_from(p) {
            Ok(p) if p <= footer_start => refs_end = refs_end.min(p),
            _ => return corrupt(format!("a section position ({p}) lies past the footer")),
        }
    }

    let mut out: Vec<(Vec<u8>, Option<Value>)> = Vec::new();
    let mut block_off = 0usize;
    // The first block holds the file header before its own block header.
    let mut header_off = header_len;
    while block_off + header_off < refs_end {
        let start = block_off + header_off;
        let kind = buf[start];
        match kind {
            b'r' => {}
            // Another section: the ref blocks are done.
            b'i' | b'o' | b'g' => break,
            k => {
                return corrupt(format!(
                    "unknown block type {k:#04x} at offset {start} (expected 'r', 'i', 'o' or 'g')"
                ));
            }
        }
        if start + 4 > refs_end {
            return corrupt(format!("the block header at offset {start} is truncated"));
        }
        let block_len = usize::try_from(be(&buf[start + 1..start + 4])).unwrap_or(usize::MAX);
        let block_end = block_off.saturating_add(block_len);
        // The smallest block: its header, no records, a restart count.
        if block_len < header_off + 4 + 2 || block_end > refs_end {
            return corrupt(format!(
                "the ref block at offset {block_off} claims {block_len} bytes, which does not fit the file"
            ));
        }
        parse_ref_block(buf, block_off, start + 4, block_end, hash_len, &mut out)?;
        // Blocks are padded with zeros to `block_size` unless the writer left them unaligned;
        // like git's reader, a zero after the block means padding.
        let padded = block_size != 0
            && block_len < block_size
            && buf.get(block_end).is_some_and(|b| *b == 0);
        block_off = if padded {
            block_off.saturating_add(block_size)
        } else {
            block_end
        };
        header_off = 0;
    }
    Ok(out)
}

/// Parse the records of the ref block `[block_off, block_end)` whose records start at
/// `records_start`, appending them to `out` (whose last name continues the sort check).
fn parse_ref_block(
    buf: &[u8],
    block_off: usize,
    records_start: usize,
    block_end: usize,
    hash_len: usize,
    out: &mut Vec<(Vec<u8>, Option<Value>)>,
) -> Result<()> {
    let restart_count = usize::from(u16::from_be_bytes([buf[block_end - 2], buf[block_end - 1]]));
    let restarts_start = (block_end - 2)
        .checked_sub(3 * restart_count)
        .filter(|s| *s >= records_start)
        .map_or_else(
            || {
                corrupt(format!(
                    "the ref block at offset {block_off} claims {restart_count} restart points, more than it can hold"
                ))
            },
            Ok,
        )?;
    if restart_count == 0 && restarts_start > records_start {
        return corrupt(format!(
            "the ref block at offset {block_off} has records but no restart point"
        ));
    }
    // Restart offsets count from the block's start (the file's start for the first block)
    // and must point at a record.
    for i in 0..restart_count {
        let at = restarts_start + 3 * i;
        let off = usize::try_from(be(&buf[at..at + 3])).unwrap_or(usize::MAX);
        let abs = block_off.saturating_add(off);
        if abs < records_start || abs >= restarts_start {
            return corrupt(format!(
                "restart point {i} of the ref block at offset {block_off} ({off}) lies outside its records"
            ));
        }
    }
    let mut r = Reader {
        buf,
        pos: records_start,
        end: restarts_start,
    };
    // Prefix compression starts afresh in every block.
    let mut name: Vec<u8> = Vec::new();
    while r.pos < r.end {
        let at = r.pos;
        let prefix = r.varint_len("a name prefix length")?;
        let suffix_and_type = r.varint("a name suffix length")?;
        let suffix_len = usize::try_from(suffix_and_type >> 3).unwrap_or(usize::MAX);
        let value_type = suffix_and_type & 7;
        if prefix > name.len() {
            return corrupt(format!(
                "the record at offset {at} shares {prefix} bytes with a {}-byte previous name",
                name.len()
            ));
        }
        let suffix = r.take(suffix_len, "a name suffix")?;
        name.truncate(prefix);
        name.extend_from_slice(suffix);
        if let Some((last, _)) = out.last()
            && last.as_slice() >= name.as_slice()
        {
            return corrupt(format!(
                "the record at offset {at} is out of order ({:?} after {:?})",
                String::from_utf8_lossy(&name),
                String::from_utf8_lossy(last)
            ));
        }
        r.varint("an update index delta")?;
        let value = match value_type {
            0 => None,
            1 => Some(Value::Id(oid(r.take(hash_len, "an object id")?)?)),
            2 => {
                let id = oid(r.take(hash_len, "an object id")?)?;
                let peeled = oid(r.take(hash_len, "a peeled object id")?)?;
                Some(Value::Peeled { id, peeled })
            }
            3 => {
                let len = r.varint_len("a symbolic ref length")?;
                Some(Value::Symbolic(
                    r.take(len, "a symbolic ref target")?.to_vec(),
                ))
            }
            t => {
                return corrupt(format!(
                    "the record at offset {at} has unknown value type {t}"
                ));
            }
        };
        out.push((name.clone(), value));
    }
    Ok(())
}

fn oid(bytes: &[u8]) -> Result<ObjectId> {
    ObjectId::try_from(bytes).or_else(|e| corrupt(format!("bad object id: {e}")))
}

/// The refs of one stack, merged: name → value, deletions applied.
#[derive(Debug, Default)]
pub(crate) struct Refs {
    map: BTreeMap<Vec<u8>, Value>,
}

impl Refs {
    /// Merge the tables of a stack, oldest first: a later record for a name replaces an
    /// earlier one, and a deletion removes it.
    pub(crate) fn merge(tables: impl IntoIterator<Item = Vec<(Vec<u8>, Option<Value>)>>) -> Self {
        let mut map = BTreeMap::new();
        for table in tables {
            for (name, value) in table {
                match value {
                    Some(v) => {
                        map.insert(name, v);
                    }
                    None => {
                        map.remove(&name);
                    }
                }
            }
        }
        Self { map }
    }

    pub(crate) fn get(&self, name: &[u8]) -> Option<&Value> {
        self.map.get(name)
    }

    /// Every ref whose name starts with `prefix`, in name order.
    pub(crate) fn prefixed<'a>(
        &'a self,
        prefix: &[u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a Value)> {
        self.map
            .range::<[u8], _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(n, _)| n.starts_with(prefix))
            .map(|(n, v)| (n.as_slice(), v))
    }
}

/// How many times a read starts over when a table listed in `tables.list` vanished (a
/// concurrent compaction replaced it) before giving up.
const RELOAD_ATTEMPTS: usize = 10;

/// One reftable stack (`$GIT_DIR/reftable`), re-read when `tables.list` changes.
///
/// Table files are never modified once written (every update or compaction writes new
/// files with new names and then replaces `tables.list` atomically), so the content of
/// `tables.list` identifies the merged state: while it is unchanged, the cached merge is
/// current, and checking costs one small file read.
pub(crate) struct Stack {
    dir: PathBuf,
    hash_len: usize,
    cache: Mutex<Option<(Vec<u8>, Arc<Refs>)>>,
}

impl Stack {
    pub(crate) fn new(dir: PathBuf, hash_len: usize) -> Self {
        Self {
            dir,
            hash_len,
            cache: Mutex::new(None),
        }
    }

    /// The directory of the stack (watched for changes).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The current merged refs.
    pub(crate) fn refs(&self) -> Result<Arc<Refs>> {
        let list_path = self.dir.join("tables.list");
        let mut previous: Option<Vec<u8>> = None;
        for _ in 0..RELOAD_ATTEMPTS {
            let list = std::fs::read(&list_path)
                .or_else(|e| corrupt(format!("cannot read {}: {e}", list_path.display())))?;
            if let Some((cached, refs)) = &*mcpr_core::sync::lock(&self.cache)
                && *cached == list
            {
                return Ok(refs.clone());
            }
            match self.load(&list)? {
                Ok(refs) => {
                    let refs = Arc::new(refs);
                    *mcpr_core::sync::lock(&self.cache) = Some((list, refs.clone()));
                    return Ok(refs);
                }
                // The same list twice, missing the same table: not a race, a broken stack.
                Err(missing) if previous.as_ref() == Some(&list) => {
                    return corrupt(format!(
                        "{} names table {}, which does not exist",
                        list_path.display(),
                        missing.display()
                    ));
                }
                // A compaction removed a table after we read the list: read the new list.
                Err(_) => previous = Some(list),
            }
        }
        corrupt(format!(
            "{} kept changing while it was read ({RELOAD_ATTEMPTS} attempts)",
            list_path.display()
        ))
    }

    /// Read and merge the tables `list` names; `Ok(Err(path))` when one no longer exists.
    fn load(&self, list: &[u8]) -> Result<std::result::Result<Refs, PathBuf>> {
        let mut tables = Vec::new();
        for line in list.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            // Table names are plain file names written by git; anything else would read
            // outside the stack's directory.
            let name = match std::str::from_utf8(line) {
                Ok(n) if !n.contains('/') && !n.starts_with('.') => n,
                _ => {
                    return corrupt(format!(
                        "{}/tables.list names {:?}, which is not a table file name",
                        self.dir.display(),
                        String::from_utf8_lossy(line)
                    ));
                }
            };
            let path = self.dir.join(name);
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Err(path)),
                Err(e) => return corrupt(format!("cannot read {}: {e}", path.display())),
            };
            let table = parse_table(&bytes, self.hash_len)
                .map_err(|e| Error(format!("reftable {}: {e}", path.display())))?;
            tables.push(table);
        }
        Ok(Ok(Refs::merge(tables)))
    }
}

/// The reftable ref storage of a repository: its stack, and for a linked worktree the
/// worktree's own stack, which holds `HEAD` and the other per-worktree refs.
pub(crate) struct Store {
    common: Stack,
    worktree: Option<Stack>,
}

/// How many symbolic refs are followed before giving up (git's limit is 5).
const MAX_SYMREF_DEPTH: usize = 5;

/// Whether git keeps `name` per worktree: root refs (`HEAD`, `ORIG_HEAD`: no `/`) and the
/// `refs/worktree/`, `refs/bisect/` and `refs/rewritten/` namespaces.
fn per_worktree(name: &[u8]) -> bool {
    !name.contains(&b'/')
        || [&b"refs/worktree/"[..], b"refs/bisect/", b"refs/rewritten/"]
            .iter()
            .any(|p| name.starts_with(p))
}

impl Store {
    /// The store of a repository whose git directory is `git_dir` and common directory
    /// `common_dir` (the same unless `git_dir` is a linked worktree's).
    pub(crate) fn new(git_dir: &Path, common_dir: &Path, hash_len: usize) -> Self {
        let common = Stack::new(common_dir.join("reftable"), hash_len);
        let worktree =
            (git_dir != common_dir).then(|| Stack::new(git_dir.join("reftable"), hash_len));
        Self { common, worktree }
    }

    /// The directories whose changes can move refs.
    pub(crate) fn dirs(&self) -> Vec<&Path> {
        std::iter::once(self.common.dir())
            .chain(self.worktree.as_ref().map(Stack::dir))
            .collect()
    }

    /// A consistent view of the current refs.
    pub(crate) fn view(&self) -> Result<View> {
        Ok(View {
            common: self.common.refs()?,
            worktree: self.worktree.as_ref().map(Stack::refs).transpose()?,
        })
    }
}

/// The refs at one moment.
pub(crate) struct View {
    common: Arc<Refs>,
    worktree: Option<Arc<Refs>>,
}

impl View {
    /// The record of full ref name `name`.
    pub(crate) fn get(&self, name: &[u8]) -> Option<&Value> {
        match &self.worktree {
            Some(wt) if per_worktree(name) => wt.get(name),
            _ => self.common.get(name),
        }
    }

    /// The ref a name as typed finds, in the order git (and gix) try: the name itself for
    /// an all-caps root ref, then `refs/<n>`, `refs/tags/<n>`, `refs/heads/<n>`,
    /// `refs/remotes/<n>`, and finally `refs/remotes/<n>/HEAD`. A full name (`refs/…`) is
    /// only itself.
    pub(crate) fn find(&self, name: &str) -> Option<(String, &Value)> {
        if name.is_empty() {
            return None;
        }
        let mut candidates = Vec::new();
        if name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
            candidates.push(name.to_owned());
        }
        if name.starts_with("refs/") {
            candidates.push(name.to_owned());
        } else {
            for dir in ["", "tags/", "heads/", "remotes/"] {
                candidates.push(format!("refs/{dir}{name}"));
            }
            if name != "HEAD" {
                candidates.push(format!("refs/remotes/{name}/HEAD"));
            }
        }
        candidates
            .into_iter()
            .find_map(|c| self.get(c.as_bytes()).map(|v| (c, v)))
    }

    /// Follow `value` through symbolic refs to an object id, annotated tags peeled where
    /// the table recorded it; `None` for a dangling or too deep chain.
    pub(crate) fn peel<'a>(&'a self, mut value: &'a Value) -> Option<ObjectId> {
        for _ in 0..MAX_SYMREF_DEPTH {
            match value {
                Value::Symbolic(target) => value = self.get(target)?,
                v => return v.peeled(),
            }
        }
        None
    }

    /// Every ref whose full name starts with `prefix`, sorted by name.
    pub(crate) fn prefixed<'a>(&'a self, prefix: &[u8]) -> Vec<(&'a [u8], &'a Value)> {
        let mut out: Vec<(&[u8], &Value)> = match &self.worktree {
            None => self.common.prefixed(prefix).collect(),
            Some(wt) => self
                .common
                .prefixed(prefix)
                .filter(|(n, _)| !per_worktree(n))
                .chain(wt.prefixed(prefix).filter(|(n, _)| per_worktree(n)))
                .collect(),
        };
        out.sort_unstable_by(|a, b| a.0.cmp(b.0));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        // The inverse of `Reader::varint`.
        let mut tmp = vec![(v & 0x7f) as u8];
        v >>= 7;
        while v != 0 {
            v -= 1;
            tmp.push(0x80 | (v & 0x7f) as u8);
            v >>= 7;
        }
        tmp.reverse();
        out.extend_from_slice(&tmp);
    }

    fn id(b: u8) -> Vec<u8> {
        vec![b; 20]
    }

    /// A version 1 table with one unaligned ref block holding `records`
    /// (name, prefix length, type, value bytes); a record with prefix 0 is a restart point.
    fn table(records: &[(&[u8], usize, u8, Vec<u8>)]) -> Vec<u8> {
        table_v(1, records)
    }

    fn table_v(version: u8, records: &[(&[u8], usize, u8, Vec<u8>)]) -> Vec<u8> {
        let mut buf = Vec::new();
        buf.extend_from_slice(b"REFT");
        buf.push(version);
        buf.extend_from_slice(&[0, 0x10, 0]); // block_size 4096
        buf.extend_from_slice(&1u64.to_be_bytes());
        buf.extend_from_slice(&2u64.to_be_bytes());
        if version == 2 {
            buf.extend_from_slice(b"sha1");
        }
        let header = buf.clone();
        let len_at = buf.len() + 1;
        buf.push(b'r');
        buf.extend_from_slice(&[0, 0, 0]); // block_len, patched below
        let mut restarts = Vec::new();
        for (name, prefix, ty, value) in records {
            if *prefix == 0 {
                restarts.push(buf.len());
            }
            varint(*prefix as u64, &mut buf);
            varint(
                (((name.len() - prefix) as u64) << 3) | u64::from(*ty),
                &mut buf,
            );
            buf.extend_from_slice(&name[*prefix..]);
            varint(0, &mut buf);
            buf.extend_from_slice(value);
        }
        for r in &restarts {
            buf.extend_from_slice(&(*r as u32).to_be_bytes()[1..]);
        }
        buf.extend_from_slice(&(restarts.len() as u16).to_be_bytes());
        let len = buf.len() as u32;
        buf[len_at..len_at + 3].copy_from_slice(&len.to_be_bytes()[1..]);
        let mut footer = header;
        for _ in 0..5 {
            footer.extend_from_slice(&0u64.to_be_bytes());
        }
        let crc = crc32(&footer);
        footer.extend_from_slice(&crc.to_be_bytes());
        buf.extend_from_slice(&footer);
        buf
    }

    fn sample() -> Vec<u8> {
        let mut sym = Vec::new();
        varint(15, &mut sym);
        sym.extend_from_slice(b"refs/heads/main");
        let mut peeled = id(3);
        peeled.extend_from_slice(&id(4));
        table(&[
            (b"HEAD", 0, 3, sym),
            (b"refs/heads/gone", 0, 0, Vec::new()),
            (b"refs/heads/main", 11, 1, id(1)),
            (b"refs/tags/v1", 5, 2, peeled),
        ])
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn varints_round_trip() {
        for v in [0, 1, 127, 128, 255, 16_383, 16_384, 1 << 40, u64::MAX >> 1] {
            let mut b = Vec::new();
            varint(v, &mut b);
            let mut r = Reader {
                buf: &b,
                pos: 0,
                end: b.len(),
            };
            assert_eq!(r.varint("v").unwrap(), v);
            assert_eq!(r.pos, b.len());
        }
        // Ten continuation bytes cannot fit 64 bits.
        let b = [0xff; 11];
        let mut r = Reader {
            buf: &b,
            pos: 0,
            end: b.len(),
        };
        assert!(r.varint("v").is_err());
    }

    #[test]
    fn parses_every_value_type() {
        let recs = parse_table(&sample(), 20).unwrap();
        let names: Vec<&[u8]> = recs.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(
            names,
            [
                &b"HEAD"[..],
                b"refs/heads/gone",
                b"refs/heads/main",
                b"refs/tags/v1"
            ]
        );
        assert_eq!(
            recs[0].1,
            Some(Value::Symbolic(b"refs/heads/main".to_vec()))
        );
        assert_eq!(recs[1].1, None);
        assert_eq!(
            recs[2].1,
            Some(Value::Id(ObjectId::try_from(&id(1)[..]).unwrap()))
        );
        assert_eq!(
            recs[3].1,
            Some(Value::Peeled {
                id: ObjectId::try_from(&id(3)[..]).unwrap(),
                peeled: ObjectId::try_from(&id(4)[..]).unwrap(),
            })
        );
    }

    #[test]
    fn later_tables_override_and_delete() {
        let older = parse_table(&sample(), 20).unwrap();
        let newer = parse_table(
            &table(&[
                (b"refs/heads/gone", 0, 1, id(9)),
                (b"refs/heads/main", 11, 0, Vec::new()),
            ]),
            20,
        )
        .unwrap();
        let refs = Refs::merge([older, newer]);
        assert!(refs.get(b"refs/heads/main").is_none());
        assert_eq!(
            refs.get(b"refs/heads/gone").and_then(Value::id),
            Some(ObjectId::try_from(&id(9)[..]).unwrap())
        );
        let heads: Vec<&[u8]> = refs.prefixed(b"refs/heads/").map(|(n, _)| n).collect();
        assert_eq!(heads, [&b"refs/heads/gone"[..]]);
    }

    #[test]
    fn version_2_headers_carry_the_hash() {
        let b = table_v(2, &[(b"refs/heads/main", 0, 1, id(1))]);
        let recs = parse_table(&b, 20).unwrap();
        assert_eq!(recs.len(), 1);
        assert!(parse_table(&b, 32).unwrap_err().0.contains("object ids"));
        // An unknown hash id (footer repeated so only the header check can fail).
        let mut bad = b.clone();
        bad[24..28].copy_from_slice(b"md5!");
        let n = bad.len();
        bad[n - 72 + 24..n - 72 + 28].copy_from_slice(b"md5!");
        assert!(parse_table(&bad, 20).unwrap_err().0.contains("hash id"));
    }

    /// A table written by git itself (small padded blocks, restart points every 4 records,
    /// a ref index and object blocks), then every byte of it changed: each variant parses or
    /// fails, none panics. Skipped where git is not installed.
    #[test]
    fn real_tables_survive_every_single_byte_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str], stdin: Option<&str>| {
            use std::io::Write;
            let mut c = std::process::Command::new("git");
            c.current_dir(dir.path())
                .args([
                    "-c",
                    "reftable.blockSize=256",
                    "-c",
                    "reftable.restartInterval=4",
                ])
                .args(args)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped());
            let mut child = c.spawn().ok()?;
            if let Some(s) = stdin {
                child.stdin.take()?.write_all(s.as_bytes()).ok()?;
            }
            let out = child.wait_with_output().ok()?;
            out.status.success().then_some(out.stdout)
        };
        if git(&["init", "-q", "--ref-format=reftable"], None).is_none() {
            eprintln!("git with reftable support is not available; skipped");
            return;
        }
        let tree = git(&["mktree"], Some("")).unwrap();
        let tree = String::from_utf8(tree).unwrap();
        let commit = git(
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.com",
                "commit-tree",
                "-m",
                "empty",
                tree.trim(),
            ],
            None,
        )
        .unwrap();
        let commit = String::from_utf8(commit).unwrap();
        let mut input = String::new();
        for i in 0..150 {
            input.push_str(&format!("create refs/heads/b{i:03} {}\n", commit.trim()));
        }
        git(&["update-ref", "--stdin"], Some(&input)).unwrap();
        git(&["pack-refs", "--all"], None).unwrap();
        let stack = dir.path().join(".git/reftable");
        let list = std::fs::read_to_string(stack.join("tables.list")).unwrap();
        let bytes = std::fs::read(stack.join(list.trim())).unwrap();
        let recs = parse_table(&bytes, 20).unwrap();
        let heads = recs
            .iter()
            .filter(|(n, v)| n.starts_with(b"refs/heads/b") && v.is_some())
            .count();
        assert_eq!(heads, 150);
        // The ref blocks end where the ref index starts; later sections are never parsed.
        let footer = &bytes[bytes.len() - 68..];
        let refs_end = usize::try_from(be(&footer[24..32])).unwrap();
        assert!(
            refs_end > 4 * 256,
            "several ref blocks before the index at {refs_end}"
        );
        for i in 0..refs_end {
            for x in [0x00, 0x01, 0x72, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] = x;
                let _ = parse_table(&b, 20);
            }
        }
        for n in 0..bytes.len() {
            parse_table(&bytes[..n], 20).expect_err("truncated");
        }
    }

    #[test]
    fn a_table_with_no_refs_is_empty() {
        let recs = parse_table(&table(&[]), 20).unwrap();
        assert!(recs.is_empty());
    }

    /// Every corruption is an error, never a panic.
    #[test]
    fn corrupt_tables_are_errors() {
        let good = sample();
        let err = |b: &[u8]| parse_table(b, 20).expect_err("corrupt").0;

        // Truncated anywhere (footer or blocks missing).
        for n in 0..good.len() {
            parse_table(&good[..n], 20).expect_err("truncated");
        }
        assert!(err(&good[..10]).contains("shorter"));
        // Bad magic.
        let mut b = good.clone();
        b[0] = b'X';
        assert!(err(&b).contains("magic"));
        // Unknown version.
        let mut b = good.clone();
        b[4] = 9;
        assert!(err(&b).contains("version"));
        // Wrong hash length for the repository.
        assert!(parse_table(&good, 32).unwrap_err().0.contains("object ids"));
        // A footer that does not check out.
        let mut b = good.clone();
        let n = b.len();
        b[n - 1] ^= 1;
        assert!(err(&b).contains("CRC"));

        // Corrupt the block but keep the footer valid, so the block checks are reached.
        let with_block = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            f(&mut b);
            parse_table(&b, 20)
        };
        // A block length past the end of the file.
        assert!(
            with_block(&|b| b[25..28].copy_from_slice(&[0xff, 0xff, 0xff]))
                .unwrap_err()
                .0
                .contains("does not fit")
        );
        // A block length too small for its own header.
        with_block(&|b| b[25..28].copy_from_slice(&[0, 0, 10])).unwrap_err();
        // An unknown block type.
        assert!(
            with_block(&|b| b[24] = b'z')
                .unwrap_err()
                .0
                .contains("block type")
        );
        // A restart count larger than the block.
        let block_end = usize::try_from(be(&good[25..28])).unwrap();
        with_block(&|b| b[block_end - 2..block_end].copy_from_slice(&[0xff, 0xff])).unwrap_err();
        // A restart offset outside the records.
        with_block(&|b| b[block_end - 5..block_end - 2].copy_from_slice(&[0xff, 0, 0]))
            .unwrap_err();
        // A name suffix longer than the block (first record: prefix 0, then suffix/type).
        with_block(&|b| b[29] = 0x7f).unwrap_err();
        // A prefix longer than the previous name.
        with_block(&|b| b[28] = 0x40).unwrap_err();
        // Every single-byte change inside the block: an error or a parse, never a panic.
        for i in 24..block_end {
            for x in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let _ = with_block(&|b| b[i] = x);
            }
        }
    }
}
