"""The tool bridge (issue #17) end to end: the official Python SDK calling every tool of
`mcp-resources serve` with `[server] tools = true` (stdio) or `--tools` (HTTP), in both eras;
per-mount scopes through the tools; and, without the bridge, tools/* and prompts/* answered
"method not found" (-32601; HTTP 404 in 2026-07-28).

SDK facts used here (mcp 2.3.0): `Client.list_tools()`, `Client.call_tool(name, arguments)`
returning a `CallToolResult` (`content` of `TextContent` / `ImageContent` / `EmbeddedResource`,
`is_error`, `structured_content`); a JSON-RPC error raises `MCPError` with `.code`.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from conftest import CALL_TIMEOUT, Conn, rel_uri, toml_str, write
from test_http import MODERN_META, connect, http_serve, write_http_config  # noqa: F401 (a fixture)

pytestmark = pytest.mark.anyio

TOOLS = [
    "list_resources",
    "read_resource",
    "list_resource_templates",
    "complete_resource_argument",
    "search_resources",
]
# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgAAIAAAUAAQ0KLbQAAAAASUVORK5CYII="
)
BINARY = bytes([0, 255, 1, 2, 254]) * 10


def make_tree(root: Path) -> None:
    write(root / "notes.md", "# Notes\nsecond line\n")
    write(root / "pic.png", PNG)
    write(root / "data.bin", BINARY)
    write(root / "big.txt", "x" * 4096)
    for i in range(30):
        write(root / "many" / f"f{i:02}.txt", "f")
    write(root / "many" / "zz-needle.md", "found")


def stdio_config(path: Path, root: Path) -> Path:
    path.write_text(
        "[server]\ntools = true\npage_size = 10\nmax_read_bytes = \"1KiB\"\n\n"
        f'[[mount]]\nkind = "files"\nroot = {toml_str(str(root))}\n'
    )
    return path


def only_text(result: Any) -> str:
    assert len(result.content) == 1, result
    assert result.content[0].type == "text", result
    return result.content[0].text


def json_of(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    value = json.loads(only_text(result))
    assert result.structured_content == value, "structured content is the same JSON"
    return value


def error_text(result: Any) -> str:
    assert result.is_error is True, result
    return only_text(result)


async def call(c: Conn, name: str, args: dict[str, Any] | None = None) -> Any:
    return await c.call(c.client.call_tool(name, args or {}))


async def exercise_every_tool(c: Conn, root: Path) -> None:
    """Every tool against `make_tree(root)`, served with page_size 10 and a 1 KiB read limit."""
    tools = (await c.call(c.client.list_tools())).tools
    assert [t.name for t in tools] == TOOLS
    for t in tools:
        assert t.annotations is not None and t.annotations.read_only_hint is True, t
        assert t.input_schema["type"] == "object", t
        assert t.description and len(t.description) > 100, t
    by_name = {t.name: t for t in tools}
    assert by_name["read_resource"].input_schema["required"] == ["uri"]
    assert by_name["search_resources"].input_schema["required"] == ["query"]

    # list_resources: from the start with no arguments, then by cursor; the same listing as
    # resources/list.
    listed: list[str] = []
    page = json_of(await call(c, "list_resources"))
    for _ in range(20):
        listed += [r["uri"] for r in page["resources"]]
        if "nextCursor" not in page:
            break
        page = json_of(await call(c, "list_resources", {"cursor": page["nextCursor"]}))
    direct, _ = await c.list_all()
    assert listed == [r.uri for r in direct]
    assert len(listed) == 35
    under = rel_uri(root, "many/")
    page = json_of(await call(c, "list_resources", {"prefix": under}))
    assert page["resources"] and all(r["uri"].startswith(under) for r in page["resources"])

    # read_resource: text, image, other binary as an embedded blob, a window.
    r = await call(c, "read_resource", {"uri": rel_uri(root, "notes.md")})
    assert not r.is_error and only_text(r) == "# Notes\nsecond line\n"
    r = await call(c, "read_resource", {"uri": rel_uri(root, "pic.png")})
    assert r.content[0].type == "image", r
    assert r.content[0].mime_type == "image/png"
    assert base64.b64decode(r.content[0].data) == PNG
    r = await call(c, "read_resource", {"uri": rel_uri(root, "data.bin")})
    assert r.content[0].type == "resource", r
    assert r.content[0].resource.uri == rel_uri(root, "data.bin")
    assert base64.b64decode(r.content[0].resource.blob) == BINARY
    r = await call(c, "read_resource", {"uri": rel_uri(root, "notes.md") + "?head=1"})
    assert only_text(r) == "# Notes\n"

    # Failures are isError results with resources/read's message.
    missing = rel_uri(root, "missing.md")
    err = await c.error_of(c.client.read_resource(missing))
    assert error_text(await call(c, "read_resource", {"uri": missing})) == err.message
    too_large = error_text(await call(c, "read_resource", {"uri": rel_uri(root, "big.txt")}))
    err = await c.error_of(c.client.read_resource(rel_uri(root, "big.txt")))
    assert too_large == err.message and "1024" in too_large
    assert "not found" in error_text(await call(c, "read_resource", {"uri": "file:///etc/passwd"})).lower()
    assert "uri" in error_text(await call(c, "read_resource", {}))
    assert "invalid cursor" in error_text(await call(c, "list_resources", {"cursor": "nope"}))

    # Templates with their arguments, and completion as completion/complete gives it.
    templates = json_of(await call(c, "list_resource_templates"))["resourceTemplates"]
    direct_templates = await c.templates_all()
    assert [t["uriTemplate"] for t in templates] == [t.uri_template for t in direct_templates]
    first = templates[0]
    assert first["arguments"], first
    done = json_of(
        await call(
            c,
            "complete_resource_argument",
            {"template": first["uriTemplate"], "argument": first["arguments"][0], "value": "many/zz"},
        )
    )
    assert done["values"] == ["many/zz-needle.md"], done
    assert done["total"] == 1 and done["hasMore"] is False

    # search_resources: substring, any case, followed to the end; a glob.
    hits: list[str] = []
    args: dict[str, Any] = {"query": "NEEDLE"}
    for _ in range(20):
        found = json_of(await call(c, "search_resources", args))
        hits += [m["uri"] for m in found["matches"]]
        if "nextCursor" not in found:
            break
        args = {"query": "NEEDLE", "cursor": found["nextCursor"]}
    assert hits == [rel_uri(root, "many/zz-needle.md")]
    found = json_of(await call(c, "search_resources", {"query": "*.md"}))
    assert rel_uri(root, "notes.md") in [m["uri"] for m in found["matches"]]
    assert all(m["uri"].endswith(".md") for m in found["matches"])
    assert "empty" in error_text(await call(c, "search_resources", {"query": ""}))

    # An unknown tool is a protocol error (-32602); prompts do not exist (-32601).
    err = await c.error_of(c.client.call_tool("delete_everything", {}))
    assert err.code == -32602 and "unknown tool" in err.message, err
    err = await c.error_of(c.client.list_prompts())
    assert err.code == -32601, err


async def test_every_tool_over_stdio(serve, mode, base):
    root = base / "root"
    make_tree(root)
    async with serve(mode, config=stdio_config(base / "c.toml", root)) as c:
        await exercise_every_tool(c, root)


async def test_every_tool_over_http(http_serve, mode, base):
    root = base / "root"
    make_tree(root)
    cfg = write_http_config(
        base / "c.toml", [{"root": str(root)}], server={"page_size": 10, "max_read_bytes": "1KiB"}
    )
    srv = http_serve.start(config=cfg, extra=["--tools"])
    async with connect(srv, mode) as c:
        await exercise_every_tool(c, root)


async def test_tools_respect_mount_scopes(http_serve, mode, base):
    docs, fin = base / "docs", base / "finance"
    write(docs / "guide.md", "# guide")
    write(fin / "ledger.csv", "a,b")
    cfg = write_http_config(
        base / "c.toml",
        [{"root": str(docs), "scope": "docs"}, {"root": str(fin), "scope": "finance"}],
        server={"tools": True},
        scoped_tokens=[("env:DOCS_TOKEN", ["docs"]), ("env:ALL_TOKEN", ["docs", "finance"])],
    )
    srv = http_serve.start(config=cfg, env={"DOCS_TOKEN": "docs-token", "ALL_TOKEN": "all-token"})
    ledger = rel_uri(fin, "ledger.csv")
    async with connect(srv, mode, token="docs-token") as c:
        listed = json_of(await call(c, "list_resources"))["resources"]
        assert [r["uri"] for r in listed] == [rel_uri(docs, "guide.md")]
        msg = error_text(await call(c, "read_resource", {"uri": ledger}))
        assert msg == f"Resource not found: {ledger}"
        assert json_of(await call(c, "search_resources", {"query": "ledger"}))["matches"] == []
        templates = json_of(await call(c, "list_resource_templates"))["resourceTemplates"]
        assert not any(str(fin) in t["uriTemplate"] for t in templates)
    async with connect(srv, mode, token="all-token") as c:
        assert only_text(await call(c, "read_resource", {"uri": ledger})) == "a,b"
        found = json_of(await call(c, "search_resources", {"query": "ledger"}))["matches"]
        assert [m["uri"] for m in found] == [ledger]


async def test_without_the_bridge_tools_and_prompts_are_method_not_found_stdio(serve, mode, base):
    root = base / "root"
    write(root / "a.md", "a")
    async with serve(mode, root) as c:
        for aw in (
            c.client.list_tools(),
            c.client.call_tool("read_resource", {"uri": rel_uri(root, "a.md")}),
            c.client.list_prompts(),
            c.client.get_prompt("anything"),
        ):
            err = await c.error_of(aw)
            assert err.code == -32601, err


async def test_without_the_bridge_tools_and_prompts_are_404_over_http(http_serve, mode, base):
    root = base / "root"
    write(root / "a.md", "a")
    srv = http_serve.start(str(root))
    async with connect(srv, mode) as c:
        for aw in (c.client.list_tools(), c.client.list_prompts()):
            err = await c.error_of(aw)
            assert err.code == -32601, err
    # 2026-07-28 on the wire: HTTP 404, as for any other unknown method.
    async with httpx2.AsyncClient(timeout=CALL_TIMEOUT) as h:
        for method, params in [
            ("tools/list", {}),
            ("prompts/list", {}),
            ("prompts/get", {"name": "x"}),
            ("tools/call", {"name": "read_resource", "arguments": {}}),
        ]:
            headers = {
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "mcp-protocol-version": "2026-07-28",
                "mcp-method": method,
            }
            if "name" in params:
                headers["mcp-name"] = params["name"]
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": MODERN_META}}
            r = await h.post(srv.url, json=body, headers=headers)
            assert r.status_code == 404, f"{method}: {r.status_code} {r.text[:300]}"
            assert r.json()["error"]["code"] == -32601, r.text
