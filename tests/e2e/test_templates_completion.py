"""resources/templates/list and completion/complete on the `path` argument."""

from __future__ import annotations

import pytest
from mcp.shared.uri_template import UriTemplate
from mcp_types import ResourceTemplateReference

from conftest import quote_path, rel_uri, canon, write, write_config

pytestmark = pytest.mark.anyio


def templates_for(root) -> list[str]:
    q = quote_path(canon(root))
    return [f"file://{q}/{{+path}}", f"file://{q}/{{+path}}{{?offset,length,head,tail}}"]


async def test_templates_listed_per_root(serve, mode, base):
    r1 = base / "first root"
    r2 = base / "zweite-wurzel-ü"
    write(r1 / "x.txt", "1")
    write(r2 / "y.txt", "2")
    async with serve(mode, str(r1), str(r2)) as c:
        templates = await c.templates_all()
    got = [t.uri_template for t in templates]
    assert sorted(got) == sorted(templates_for(r1) + templates_for(r2))
    for t in got:
        UriTemplate.parse(t)  # every advertised template is valid RFC 6570 for the SDK


async def test_read_uri_built_from_template(serve, mode, base):
    root = base / "root"
    rel = "deep dir/ünï/file name.txt"
    write(root / rel, "from the template\n")
    async with serve(mode, str(root)) as c:
        templates = [t.uri_template for t in await c.templates_all()]
        plain = [t for t in templates if t.endswith("/{+path}")]
        assert plain == [templates_for(root)[0]]
        uri = UriTemplate.parse(plain[0]).expand({"path": rel})
        assert uri == rel_uri(root, rel)
        content = await c.read_one(uri)
        assert content.uri == uri
        assert content.text == "from the template\n"
        # The template also matches the URIs the server lists.
        listed, _ = await c.list_all()
        assert UriTemplate.parse(plain[0]).match(listed[0].uri) == {"path": rel}


def completion_tree(root):
    for rel in ["sub/file1.txt", "sub/file2.txt", "sub/final/x.txt", "sub/other.txt", "top.txt"]:
        write(root / rel, rel)
    write(root / "sub" / ".env", "SECRET=1")
    write(root / "sub" / "secret.pem", "-----BEGIN PRIVATE KEY-----")
    write(root / "sub" / "id_rsa", "key")
    write(root / "sub" / "filtered.log", "gitignored")
    write(root / "sub" / "fill.log", "gitignored")
    write(root / "sub" / ".hidden-file", "hidden")
    write(root / ".gitignore", "*.log\n")
    write(root / ".git" / "config", "[core]\n")
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    for i in range(150):
        write(root / "many" / f"f{i:03d}.txt", "m")


async def complete(c, root, value: str):
    ref = ResourceTemplateReference(type="ref/resource", uri=templates_for(root)[0])
    result = await c.call(c.client.complete(ref, {"name": "path", "value": value}))
    return result.completion


@pytest.mark.parametrize(
    "value,expected",
    [
        ("sub/fi", ["sub/file1.txt", "sub/file2.txt", "sub/final/"]),
        ("sub/", ["sub/file1.txt", "sub/file2.txt", "sub/final/", "sub/other.txt"]),
        ("sub/final/", ["sub/final/x.txt"]),
        ("", ["many/", "sub/", "top.txt"]),
        ("t", ["top.txt"]),
        ("sub/se", []),  # secret.pem: denied
        ("sub/id", []),  # id_rsa: denied
        ("sub/fil", ["sub/file1.txt", "sub/file2.txt"]),  # fill.log/filtered.log: gitignored
        ("sub/.", []),  # .env and .hidden-file: hidden (and .env denied)
        ("nope/x", []),
    ],
)
async def test_completion_lists_the_typed_directory(serve, mode, base, value, expected):
    root = base / "root"
    completion_tree(root)
    async with serve(mode, str(root)) as c:
        comp = await complete(c, root, value)
    assert comp.values == expected
    assert comp.total == len(expected), f"completion.total should be set: {comp!r}"
    assert comp.has_more is False


@pytest.mark.parametrize(
    "value,expected",
    [
        ("sub/.", ["sub/.hidden-file"]),  # hidden shown, .env still denied
        ("sub/se", []),
        ("sub/id", []),
        (".", [".gitignore"]),  # .git is denied even with hidden = true
    ],
)
async def test_completion_with_hidden_true_still_denies(serve, mode, base, value, expected):
    root = base / "root"
    completion_tree(root)
    cfg = write_config(base / "cfg.toml", [root], hidden=True)
    async with serve(mode, config=cfg) as c:
        comp = await complete(c, root, value)
    assert comp.values == expected


async def test_completion_caps_at_100_with_has_more_and_total(serve, mode, base):
    root = base / "root"
    completion_tree(root)
    async with serve(mode, str(root)) as c:
        comp = await complete(c, root, "many/")
        narrowed = await complete(c, root, "many/f14")
    assert comp.values == [f"many/f{i:03d}.txt" for i in range(100)]
    assert comp.has_more is True
    assert comp.total == 150
    assert narrowed.values == [f"many/f{i:03d}.txt" for i in range(140, 150)]
    assert narrowed.has_more is False
    assert narrowed.total == 10


async def test_completion_values_expand_to_readable_uris(serve, mode, base):
    root = base / "root"
    write(root / "dir ü" / "file #1.txt", "one")
    async with serve(mode, str(root)) as c:
        comp = await complete(c, root, "dir ü/")
        assert comp.values == ["dir ü/file #1.txt"]
        # {+path} keeps reserved characters such as '#', so build the URI by percent-encoding.
        uri = rel_uri(root, comp.values[0])
        assert (await c.read_one(uri)).text == "one"
