"""Windowed reads (?offset&length, ?head, ?tail) and the max_read_bytes limit."""

from __future__ import annotations

import base64
import random

import pytest
from mcp.shared.uri_template import UriTemplate

from conftest import INVALID_PARAMS, content_bytes, LIMIT_DEFAULT, quote_path, canon, rel_uri, write, write_config

pytestmark = pytest.mark.anyio


def big_text() -> bytes:
    rng = random.Random(7)
    lines = [f"line {i:05d} " + "x" * rng.randrange(0, 80) + "\n" for i in range(5000)]
    return "".join(lines).encode()


def windowed_template(root) -> UriTemplate:
    return UriTemplate.parse(f"file://{quote_path(canon(root))}/{{+path}}{{?offset,length,head,tail}}")


@pytest.mark.parametrize(
    "query,slicer",
    [
        ({"offset": "0", "length": "100"}, lambda d: d[:100]),
        ({"offset": "12345", "length": "678"}, lambda d: d[12345 : 12345 + 678]),
        ({"offset": "1", "length": "1"}, lambda d: d[1:2]),
        ({"head": "10"}, lambda d: b"".join(d.splitlines(keepends=True)[:10])),
        ({"head": "1"}, lambda d: d.splitlines(keepends=True)[0]),
        ({"tail": "7"}, lambda d: b"".join(d.splitlines(keepends=True)[-7:])),
        ({"tail": "1"}, lambda d: d.splitlines(keepends=True)[-1]),
    ],
    ids=["range-start", "range-middle", "range-1-byte", "head-10", "head-1", "tail-7", "tail-1"],
)
async def test_windowed_read_text(serve, mode, base, query, slicer):
    root = base / "root"
    data = big_text()
    write(root / "big.txt", data)
    uri = windowed_template(root).expand({"path": "big.txt", **query})
    assert "?" in uri
    async with serve(mode, str(root)) as c:
        content = await c.read_one(uri)
    assert content.uri == uri, "a windowed read answers with the requested URI"
    assert content_bytes(content) == slicer(data)


async def test_windowed_range_past_eof_returns_remainder(serve, mode, base):
    root = base / "root"
    data = big_text()
    write(root / "big.txt", data)
    off = len(data) - 10
    uri = rel_uri(root, "big.txt") + f"?offset={off}&length=1000"
    async with serve(mode, str(root)) as c:
        content = await c.read_one(uri)
    assert content_bytes(content) == data[off:]


async def test_tail_without_trailing_newline(serve, mode, base):
    root = base / "root"
    data = b"first\nsecond\nthird\nlast line without newline"
    write(root / "f.txt", data)
    async with serve(mode, str(root)) as c:
        t2 = await c.read_one(rel_uri(root, "f.txt") + "?tail=2")
        h2 = await c.read_one(rel_uri(root, "f.txt") + "?head=2")
    assert content_bytes(t2) == b"third\nlast line without newline"
    assert content_bytes(h2) == b"first\nsecond\n"


async def test_windowed_read_binary_is_exact(serve, mode, base):
    root = base / "root"
    data = bytearray(random.Random(3).randbytes(100_000))
    data[50_000:50_008] = b"\x00\xff\xfe\x00\xc3\x28\x80\x00"  # NULs + invalid UTF-8 inside the window
    data = bytes(data)
    write(root / "blob.bin", data)
    uri = rel_uri(root, "blob.bin") + "?offset=50000&length=4096"
    async with serve(mode, str(root)) as c:
        content = await c.read_one(uri)
    assert content.uri == uri
    assert getattr(content, "blob", None) is not None
    assert base64.b64decode(content.blob, validate=True) == data[50000 : 50000 + 4096]


SIZE_20MIB = 20 * 1024 * 1024


def pattern(n: int) -> bytes:
    block = bytes(range(256)) * 4096  # 1 MiB, position-dependent bytes
    return (block * (n // len(block) + 1))[:n]


async def test_too_large_is_an_error_naming_size_and_limit(serve, mode, base):
    root = base / "root"
    data = pattern(SIZE_20MIB)
    write(root / "huge.bin", data)
    uri = rel_uri(root, "huge.bin")
    async with serve(mode, str(root)) as c:
        err = await c.error_of(c.client.read_resource(uri))
        assert err.code == INVALID_PARAMS, f"too-large should be {INVALID_PARAMS}, got {err.code}: {err.message}"
        assert str(SIZE_20MIB) in err.message, err.message
        assert str(LIMIT_DEFAULT) in err.message, err.message
        # ...while a window of the same file works, byte-exact.
        win = rel_uri(root, "huge.bin") + "?offset=10000000&length=1000"
        content = await c.read_one(win)
        assert content.uri == win
        assert content_bytes(content) == data[10_000_000:10_001_000]
        content = await c.read_one(rel_uri(root, "huge.bin") + "?offset=0&length=1000")
        assert content_bytes(content) == data[:1000]


async def test_too_large_text_file(serve, mode, base):
    root = base / "root"
    data = b"0123456789abcdef\n" * (SIZE_20MIB // 17 + 1)
    write(root / "huge.txt", data)
    async with serve(mode, str(root)) as c:
        err = await c.error_of(c.client.read_resource(rel_uri(root, "huge.txt")))
        assert err.code == INVALID_PARAMS
        assert str(len(data)) in err.message and str(LIMIT_DEFAULT) in err.message, err.message
        head = await c.read_one(rel_uri(root, "huge.txt") + "?head=3")
        assert content_bytes(head) == b"0123456789abcdef\n" * 3
        tail = await c.read_one(rel_uri(root, "huge.txt") + "?tail=2")
        assert content_bytes(tail) == b"0123456789abcdef\n" * 2


async def test_limit_boundary_is_inclusive(serve, mode, base):
    root = base / "root"
    at = pattern(LIMIT_DEFAULT)
    write(root / "at-limit.bin", at)
    write(root / "over-limit.bin", pattern(LIMIT_DEFAULT + 1))
    async with serve(mode, str(root)) as c:
        content = await c.read_one(rel_uri(root, "at-limit.bin"))
        assert content_bytes(content) == at
        err = await c.error_of(c.client.read_resource(rel_uri(root, "over-limit.bin")))
        assert err.code == INVALID_PARAMS
        assert str(LIMIT_DEFAULT + 1) in err.message and str(LIMIT_DEFAULT) in err.message, err.message


async def test_configured_limit(serve, mode, base):
    root = base / "root"
    write(root / "small.txt", "x" * 1024)
    write(root / "bigger.txt", "y" * 1025)
    cfg = write_config(base / "cfg.toml", [root], max_read_bytes="1KiB")
    async with serve(mode, config=cfg) as c:
        assert (await c.read_one(rel_uri(root, "small.txt"))).text == "x" * 1024
        err = await c.error_of(c.client.read_resource(rel_uri(root, "bigger.txt")))
        assert err.code == INVALID_PARAMS
        assert "1025" in err.message and "1024" in err.message, err.message
