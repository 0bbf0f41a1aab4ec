"""resources/read: byte-exact text and blob contents, sensible MIME types, directory reads."""

from __future__ import annotations

import base64
import json
import os
import random

import pytest

from conftest import content_bytes, mime_base, rel_uri, root_uri, write

pytestmark = pytest.mark.anyio

TEXT = "Grüße, 世界! 🦀\n\ttabbed line\r\nCRLF line\r\nno trailing newline"
PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\xcf\xc0\xf0\x1f\x00\x05\x00\x01\xff\x89\x99=\x1d"
    b"\x00\x00\x00\x00IEND\xaeB`\x82"
)


def random_binary(n: int, seed: int = 1234) -> bytes:
    rng = random.Random(seed)
    data = bytearray(rng.getrandbits(8) for _ in range(n))
    # Guarantee NULs and byte sequences that are not valid UTF-8 anywhere.
    data[0:8] = b"\x00\xff\xfe\x00\xc3\x28\x80\x00"
    data[-4:] = b"\xed\xa0\x80\x00"  # encoded surrogate: invalid UTF-8
    return bytes(data)


async def test_text_read_is_exact(serve, mode, base):
    root = base / "root"
    write(root / "notes.txt", TEXT)
    uri = rel_uri(root, "notes.txt")
    async with serve(mode, str(root)) as c:
        content = await c.read_one(uri)
    assert content.uri == uri
    assert getattr(content, "text", None) is not None, "a UTF-8 .txt file should be returned as text"
    assert content.text == TEXT
    assert mime_base(content.mime_type) == "text/plain"


async def test_binary_read_is_exact_base64_blob(serve, mode, base):
    root = base / "root"
    data = random_binary(64 * 1024)
    write(root / "random.bin", data)
    uri = rel_uri(root, "random.bin")
    async with serve(mode, str(root)) as c:
        content = await c.read_one(uri)
    assert content.uri == uri
    assert getattr(content, "blob", None) is not None, "binary data must be a base64 blob"
    assert base64.b64decode(content.blob, validate=True) == data
    assert mime_base(content.mime_type) == "application/octet-stream"


@pytest.mark.parametrize(
    "name,data,mime,kind",
    [
        ("README.md", b"# Title\n\n*hi*\n", "text/markdown", "text"),
        ("image.png", PNG, "image/png", "blob"),
        ("data.json", b'{"k": [1, 2, "\xc3\xa9"]}\n', "application/json", None),
        ("page.html", b"<!doctype html><p>x</p>\n", "text/html", "text"),
        ("style.css", b"p { color: red }\n", "text/css", "text"),
        ("noext", b"plain words\n", None, None),
    ],
)
async def test_mime_types_and_exact_bytes(serve, mode, base, name, data, mime, kind):
    root = base / "root"
    write(root / name, data)
    uri = rel_uri(root, name)
    async with serve(mode, str(root)) as c:
        content = await c.read_one(uri)
        listed, _ = await c.list_all()
    assert content.uri == uri
    assert content_bytes(content) == data
    if kind == "text":
        assert getattr(content, "text", None) is not None, f"{name} should be text"
    if kind == "blob":
        assert getattr(content, "blob", None) is not None, f"{name} should be a blob"
    if mime is not None:
        assert mime_base(content.mime_type) == mime
    # Contract: every list entry carries a mimeType, and it agrees with the read.
    (entry,) = [r for r in listed if r.uri == uri]
    assert entry.mime_type is not None, f"list entry for {name} has no mimeType (read says {content.mime_type!r})"
    assert mime_base(entry.mime_type) == mime_base(content.mime_type)


async def test_invalid_utf8_in_text_extension_is_not_corrupted(serve, mode, base):
    """A .txt whose bytes are not UTF-8 must still round-trip exactly (so: as a blob)."""
    root = base / "root"
    data = b"latin-1 caf\xe9\n\x00nul and \xff\xfe\n"
    write(root / "legacy.txt", data)
    uri = rel_uri(root, "legacy.txt")
    async with serve(mode, str(root)) as c:
        content = await c.read_one(uri)
    assert getattr(content, "blob", None) is not None, f"lossy text returned: {getattr(content, 'text', None)!r}"
    assert base64.b64decode(content.blob, validate=True) == data


async def test_empty_file(serve, mode, base):
    root = base / "root"
    write(root / "empty.txt", b"")
    uri = rel_uri(root, "empty.txt")
    async with serve(mode, str(root)) as c:
        content = await c.read_one(uri)
    assert content.uri == uri
    assert content_bytes(content) == b""


async def test_reads_with_tricky_names(serve, mode, base):
    root = base / "root"
    names = ["with space.txt", "ünïcödé.txt", "hash#tag.txt", "per%cent.txt", "quest?ion.txt", "lit%41eral.txt"]
    for n in names:
        write(root / "dir #1" / n, f"content of {n}\n")
    async with serve(mode, str(root)) as c:
        listed, _ = await c.list_all()
        assert sorted(r.name for r in listed) == sorted(f"dir #1/{n}" for n in names)
        for n in names:
            uri = rel_uri(root, f"dir #1/{n}")
            content = await c.read_one(uri)
            assert content.uri == uri
            assert content.text == f"content of {n}\n"


async def test_modified_file_is_reread(serve, mode, base):
    root = base / "root"
    p = write(root / "f.txt", "one\n")
    uri = rel_uri(root, "f.txt")
    async with serve(mode, str(root)) as c:
        assert (await c.read_one(uri)).text == "one\n"
        p.write_text("two two\n")
        assert (await c.read_one(uri)).text == "two two\n"


def dir_entries(content) -> dict:
    assert mime_base(content.mime_type) == "application/json"
    assert getattr(content, "text", None) is not None, "directory listing should be JSON text"
    return json.loads(content.text)


async def test_directory_reads(serve, mode, base):
    root = base / "root"
    write(root / "b.txt", "bbb")
    write(root / "a.md", "# a\n")
    write(root / "sub" / "inner.txt", "inner")
    write(root / "sub" / "z.bin", b"\x00\x01")
    (root / "sub" / "nested").mkdir()
    os.symlink("b.txt", root / "link")
    async with serve(mode, str(root)) as c:
        root_content = await c.read_one(root_uri(root))
        sub_uri = rel_uri(root, "sub")
        sub_content = await c.read_one(sub_uri)
    assert root_content.uri == root_uri(root)
    doc = dir_entries(root_content)
    assert doc["uri"] == root_uri(root)
    assert doc["truncated"] is False
    entries = doc["entries"]
    assert [e["name"] for e in entries] == ["a.md", "b.txt", "link", "sub"]
    by = {e["name"]: e for e in entries}
    assert by["a.md"]["type"] == "file" and by["a.md"]["size"] == 4
    assert by["b.txt"]["type"] == "file" and by["b.txt"]["size"] == 3
    assert by["link"]["type"] == "symlink"
    assert by["sub"]["type"] == "directory"
    for name, e in by.items():
        assert e["uri"] == rel_uri(root, name), e

    assert sub_content.uri == sub_uri
    doc = dir_entries(sub_content)
    assert doc["uri"] == sub_uri
    assert doc["truncated"] is False
    assert [(e["name"], e["type"]) for e in doc["entries"]] == [
        ("inner.txt", "file"),
        ("nested", "directory"),
        ("z.bin", "file"),
    ]
    assert [e["uri"] for e in doc["entries"]] == [
        rel_uri(root, "sub/inner.txt"),
        rel_uri(root, "sub/nested"),
        rel_uri(root, "sub/z.bin"),
    ]
    assert {e["name"]: e.get("size") for e in doc["entries"] if e["type"] == "file"} == {"inner.txt": 5, "z.bin": 2}


async def test_missing_file_is_not_found(serve, mode, base):
    root = base / "root"
    write(root / "present.txt", "x")
    async with serve(mode, str(root)) as c:
        await c.assert_not_found(rel_uri(root, "absent.txt"))
        await c.assert_not_found(rel_uri(root, "present.txt/child"))
