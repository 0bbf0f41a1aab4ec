"""Special files (FIFO) and pagination cursor integrity."""

from __future__ import annotations

import os
import time

import pytest

from conftest import CALL_TIMEOUT, INVALID_PARAMS, rel_uri, write, write_config

pytestmark = pytest.mark.anyio


async def test_fifo_is_skipped_and_not_readable(serve, mode, base):
    root = base / "root"
    write(root / "a.txt", "a")
    write(root / "sub" / "b.txt", "b")
    os.mkfifo(root / "pipe")
    os.mkfifo(root / "sub" / "zz pipe")
    async with serve(mode, str(root)) as c:
        t0 = time.monotonic()
        resources, _ = await c.list_all()  # bounded by CALL_TIMEOUT per page
        assert [r.name for r in resources] == ["a.txt", "sub/b.txt"]
        for rel in ["pipe", "sub/zz pipe"]:
            await c.assert_not_found(rel_uri(root, rel))
            await c.assert_not_found(rel_uri(root, rel) + "?head=1")
            await c.assert_not_found(rel_uri(root, rel) + "?offset=0&length=10")
        assert time.monotonic() - t0 < CALL_TIMEOUT
        # The server is still responsive afterwards (nothing is stuck opening the FIFO).
        assert (await c.read_one(rel_uri(root, "a.txt"))).text == "a"


def make_files(root, n: int = 30) -> list[str]:
    rels = [f"f{i:02d}.txt" for i in range(n)]
    for r in rels:
        write(root / r, r)
    return rels


def tamper_flip(cursor: str) -> str:
    idx = [i for i, ch in enumerate(cursor) if ch.isalnum()]
    assert idx, f"cursor has no alphanumeric characters: {cursor!r}"
    i = idx[len(idx) // 2]
    ch = cursor[i]
    repl = "A" if ch != "A" else "B"
    return cursor[:i] + repl + cursor[i + 1 :]


async def first_cursor(c) -> tuple[str, list[str]]:
    page = await c.list_page()
    assert page.next_cursor, "a 30-file root with page_size 7 must paginate"
    return page.next_cursor, [r.name for r in page.resources]


@pytest.mark.parametrize(
    "how",
    ["flip-middle", "flip-first", "flip-last", "truncate-half", "truncate-1", "append", "garbage", "reversed"],
)
async def test_tampered_cursor_is_invalid_params(serve, mode, base, how):
    root = base / "root"
    rels = make_files(root)
    cfg = write_config(base / "cfg.toml", [root], page_size=7)
    async with serve(mode, config=cfg) as c:
        cursor, first = await first_cursor(c)
        assert first == rels[:7]
        if how == "flip-middle":
            bad = tamper_flip(cursor)
        elif how == "flip-first":
            bad = ("B" if cursor[0] == "A" else "A") + cursor[1:]
        elif how == "flip-last":
            bad = cursor[:-1] + ("B" if cursor[-1] == "A" else "A")
        elif how == "truncate-half":
            bad = cursor[: len(cursor) // 2]
        elif how == "truncate-1":
            bad = cursor[:-1]
        elif how == "append":
            bad = cursor + "AAAA"
        elif how == "garbage":
            bad = "not a cursor at all"
        else:
            bad = cursor[::-1]
        assert bad != cursor
        err = await c.error_of(c.client.list_resources(cursor=bad))
        assert err.code == INVALID_PARAMS, f"{how}: expected {INVALID_PARAMS}, got {err.code} ({err.message})"
        # The genuine cursor still works, and continues exactly where page 1 ended.
        page2 = await c.list_page(cursor)
        assert [r.name for r in page2.resources] == rels[7:14]


async def test_cursor_from_a_server_with_another_root_is_rejected(serve, mode, base):
    root_a = base / "root-a"
    root_b = base / "root-b"
    rels = make_files(root_a)
    make_files(root_b)  # same relative names: a naive cursor would "work"
    cfg_a = write_config(base / "a.toml", [root_a], page_size=7)
    cfg_b = write_config(base / "b.toml", [root_b], page_size=7)
    async with serve(mode, config=cfg_b) as b:
        foreign, _ = await first_cursor(b)
    async with serve(mode, config=cfg_a) as a:
        err = await a.error_of(a.client.list_resources(cursor=foreign))
        assert err.code == INVALID_PARAMS, f"expected {INVALID_PARAMS}, got {err.code} ({err.message})"
        own, first = await first_cursor(a)
        assert first == rels[:7]
        assert own != foreign
