"""resources/list pagination: every regular file exactly once, in component-wise byte order."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import canon, rel_uri, sort_key, write, write_config

pytestmark = pytest.mark.anyio

# Names chosen to trap naive encoders and naive sorters.
TRICKY = [
    "plain.txt",
    "with space.txt",
    "ünïcödé.md",
    "🦀 crab.rs",
    "hash#tag.txt",
    "per%cent.txt",
    "lit%41eral.txt",  # must be encoded as %2541, not decoded to "A"
    "quest?ion.txt",
    "semi;colon+plus=eq&amp.txt",
    "tilde~dash-under_score.txt",
    "UPPER.TXT",
    "[brackets] (parens) 'quote'.txt",
]


def build_tree(root: Path, total: int) -> list[str]:
    """Create `total` regular files under root in nested dirs; return their root-relative paths."""
    rels: list[str] = []
    # Component-order traps at the top: plain string sort of full paths puts "a b" before
    # "a/..." (0x20 < 0x2f); component-wise order puts "a" (dir) first.
    for rel in ["a/inner.txt", "a b", "a.txt", "a-/x.txt", "a b c/deep/deeper/f.txt"]:
        rels.append(rel)
    i = 0
    while len(rels) < total:
        d1 = f"dir {i % 7} ü#%?"[: 6 + (i % 11)]  # vary names, include odd chars
        d2 = ["sub", "sub dir", "süb", "s#b", "s%b", "s?b"][i % 6]
        name = f"{i:05d} {TRICKY[i % len(TRICKY)]}"
        rels.append(f"{d1}/{d2}/{name}" if i % 3 else f"{d1}/{name}")
        i += 1
    rels = rels[:total]
    for n, rel in enumerate(rels):
        write(root / rel, f"{n}:{rel}\n")
    assert len(set(rels)) == len(rels)
    return rels


async def enumerate_all(serve, mode: str, root: Path, page_size: int, cfg: Path):
    write_config(cfg, [root], page_size=page_size)
    async with serve(mode, config=cfg) as c:
        started = time.monotonic()
        resources, sizes = await c.list_all()
        return resources, sizes, time.monotonic() - started


def check_listing(root: Path, rels: list[str], resources, sizes: list[int], page_size: int) -> None:
    expected_order = sorted(rels, key=sort_key)
    names = [r.name for r in resources]
    dupes = {n for n in names if names.count(n) > 1} if len(names) != len(set(names)) else set()
    assert not dupes, f"duplicate entries: {sorted(dupes)[:10]}"
    missing = set(rels) - set(names)
    extra = set(names) - set(rels)
    assert not missing and not extra, f"missing={sorted(missing)[:10]} extra={sorted(extra)[:10]}"
    assert names == expected_order, "listing is not in component-wise byte order"
    # Every page but the last is full; the last is non-empty unless the listing is empty.
    assert all(s == page_size for s in sizes[:-1]), f"short non-final page: {sizes[:20]}..."
    assert 0 < sizes[-1] <= page_size, f"last page size {sizes[-1]}"
    assert len(sizes) == -(-len(rels) // page_size)
    # URIs: canonical root + percent-encoded relative path; size is the byte length.
    for r in resources:
        assert r.uri == rel_uri(root, r.name), (r.uri, r.name)
        assert r.size == (root / r.name).stat().st_size, r.name


@pytest.mark.parametrize("page_size", [7, 100])
async def test_pagination_3000_files(serve, mode, base, page_size):
    root = base / "root"
    rels = build_tree(root, 3000)
    resources, sizes, _ = await enumerate_all(serve, mode, root, page_size, base / "cfg.toml")
    check_listing(root, rels, resources, sizes, page_size)


@pytest.mark.slow
async def test_pagination_page_size_1(serve, mode, base):
    """3,000 round trips; falls back to 600 files if MCPR_PAGE1_FILES says so."""
    total = int(os.environ.get("MCPR_PAGE1_FILES", "3000"))
    root = base / "root"
    rels = build_tree(root, total)
    resources, sizes, elapsed = await enumerate_all(serve, mode, root, 1, base / "cfg.toml")
    check_listing(root, rels, resources, sizes, 1)
    print(f"page_size=1, {total} files: {elapsed:.1f}s")


async def test_pages_concatenate_across_mounts_in_config_order(serve, mode, base):
    """Two mounts: all of mount B after all of mount A (config order), not merged/sorted."""
    a = base / "zzz-first"
    b = base / "aaa-second"
    rels_a = [f"f{i:02d}.txt" for i in range(10)]
    rels_b = [f"g{i:02d}.txt" for i in range(9)]
    for r in rels_a:
        write(a / r, r)
    for r in rels_b:
        write(b / r, r)
    cfg = write_config(base / "cfg.toml", [a, b], page_size=4)
    async with serve(mode, config=cfg) as c:
        resources, sizes = await c.list_all()
    uris = [r.uri for r in resources]
    assert uris == [rel_uri(a, r) for r in rels_a] + [rel_uri(b, r) for r in rels_b]
    assert sizes == [4, 4, 4, 4, 3]


async def test_list_excludes_directories_hidden_and_gitignored(serve, mode, base):
    root = base / "root"
    write(root / "keep.txt", "k")
    write(root / "sub" / "keep2.txt", "k")
    (root / "emptydir").mkdir()
    write(root / ".hidden.txt", "h")
    write(root / ".hiddendir" / "x.txt", "h")
    write(root / ".gitignore", "*.log\nbuild/\n")
    (root / ".git").mkdir()
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(root / "debug.log", "ignored")
    write(root / "sub" / "deep.log", "ignored")
    write(root / "build" / "out.txt", "ignored")
    write(root / "data.sqlite", "extra deny")
    cfg = write_config(base / "cfg.toml", [root], deny=["*.sqlite"])
    async with serve(mode, config=cfg) as c:
        resources, _ = await c.list_all()
    assert [r.name for r in resources] == ["keep.txt", "sub/keep2.txt"]
    assert [r.uri for r in resources] == [rel_uri(root, "keep.txt"), rel_uri(root, "sub/keep2.txt")]


@pytest.mark.parametrize("hidden,respect_gitignore", [(True, True), (False, False), (True, False)])
async def test_list_honours_hidden_and_respect_gitignore(serve, mode, base, hidden, respect_gitignore):
    root = base / "root"
    write(root / "keep.txt", "k")
    write(root / ".hidden.txt", "h")
    write(root / ".gitignore", "*.log\n")
    (root / ".git").mkdir()
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(root / "debug.log", "ignored unless respect_gitignore = false")
    write(root / ".env", "always denied")
    cfg = write_config(base / "cfg.toml", [root], hidden=hidden, respect_gitignore=respect_gitignore)
    async with serve(mode, config=cfg) as c:
        resources, _ = await c.list_all()
    expected = ["keep.txt"]
    if hidden:
        expected += [".gitignore", ".hidden.txt"]
    if not respect_gitignore:
        expected += ["debug.log"]
    assert [r.name for r in resources] == sorted(expected, key=sort_key)


async def test_list_entry_metadata(serve, mode, base):
    root = base / "root"
    files = {
        "doc.md": (b"# Title\n", "text/markdown"),
        "notes.txt": (b"hello\n", "text/plain"),
        "data.json": (b'{"a": 1}\n', "application/json"),
        "pic.png": (b"\x89PNG\r\n\x1a\n" + b"\x00" * 24, "image/png"),
    }
    mtime = 1_614_834_367  # 2021-03-04T05:06:07Z
    for name, (data, _) in files.items():
        p = write(root / name, data)
        os.utime(p, (mtime, mtime))
    async with serve(mode, str(root)) as c:
        resources, _ = await c.list_all()
    by_name = {r.name: r for r in resources}
    assert sorted(by_name) == sorted(files)
    from datetime import datetime, timezone

    for name, (data, mime) in files.items():
        r = by_name[name]
        assert r.uri == rel_uri(root, name)
        assert r.size == len(data)
        assert (r.mime_type or "").split(";")[0] == mime, (name, r.mime_type)
        assert r.annotations is not None and r.annotations.last_modified, f"{name}: no annotations.lastModified"
        ts = datetime.fromisoformat(r.annotations.last_modified.replace("Z", "+00:00"))
        assert ts.tzinfo is not None, f"lastModified without a time zone: {r.annotations.last_modified}"
        assert abs(ts.timestamp() - mtime) < 1.0, (name, r.annotations.last_modified)


async def test_root_given_through_a_symlink_is_canonicalized(serve, mode, base):
    real = base / "real root"
    write(real / "f.txt", "x")
    link = base / "link-to-root"
    link.symlink_to(real)
    async with serve(mode, str(link)) as c:
        resources, _ = await c.list_all()
    assert [r.uri for r in resources] == [rel_uri(canon(real), "f.txt")]
    assert "/real%20root/f.txt" in resources[0].uri
