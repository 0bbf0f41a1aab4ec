"""Skills change notifications end to end, over stdio and Streamable HTTP, in both eras:
a client subscribed to a skill's file by its `skill://` URI (legacy `resources/subscribe`,
2026-07-28 `subscriptions/listen`) is told `notifications/resources/updated` under that
URI when the file in the files mount changes, and the next `skills/get` shows the new
digest; a new skill folder is a `notifications/resources/list_changed`.

`skills/get` is sent with the SDK's generic request (mcp 2.3.0 has no skills methods).
"""

from __future__ import annotations

import hashlib
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated
from pydantic import TypeAdapter

from conftest import LIST_CHANGED, UPDATED, Conn, toml_str, write
from test_http import connect, http_serve  # noqa: F401 (a fixture)

pytestmark = pytest.mark.anyio

DEADLINE = 5.0
FILE = "skill://review/checklist.md"
SKILL = "skill://review/SKILL.md"


class UriParams(types.RequestParams):
    uri: str


async def get_skill(c: Conn, uri: str) -> dict[str, Any]:
    request = types.Request(method="skills/get", params=UriParams(uri=uri))
    return await c.call(c.client.session.send_request(request, TypeAdapter(dict[str, Any])))


def digest_of(result: dict[str, Any], uri: str) -> str:
    skill = result.get("skill", result)
    (entry,) = [r for r in skill["resources"] if r["uri"] == uri]
    return entry["digest"]


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def skills_tree(base: Path) -> tuple[Path, Path]:
    root = base / "team"
    write(root / "skills/review/SKILL.md", "---\nname: review\ndescription: Reviews code\n---\nFollow the checklist.\n")
    write(root / "skills/review/checklist.md", "1. tests\n")
    cfg = base / "skills.toml"
    cfg.write_text(
        "[[mount]]\n"
        'kind = "files"\n'
        f"root = {toml_str(str(root))}\n"
        'skills = "skills"\n'
    )
    return root, cfg


async def exercise(c: Conn, root: Path) -> None:
    before = await get_skill(c, SKILL)
    assert digest_of(before, FILE) == sha(b"1. tests\n")
    new = b"1. tests\n2. docs\n"
    if c.mode == "legacy":
        await c.call(c.client.subscribe_resource(FILE))
        mark = c.notes.mark()
        await anyio.sleep(0.2)
        (root / "skills/review/checklist.md").write_bytes(new)
        note = await c.notes.wait_for(lambda n: n.method == UPDATED, DEADLINE, mark)
        assert note is not None and note.uri == FILE, f"updated under the skill URI: {c.notes.since(mark)}"
        after = await get_skill(c, SKILL)
        assert digest_of(after, FILE) == sha(new)
        mark = c.notes.mark()
        write(root / "skills/lint/SKILL.md", "---\nname: lint\ndescription: Lints\n---\n")
        note = await c.notes.wait_for(lambda n: n.method == LIST_CHANGED, DEADLINE, mark)
        assert note is not None, "a new skill is a list change"
    else:
        async with c.client.listen(resource_subscriptions=[FILE], resources_list_changed=True) as sub:
            assert sub.honored.resource_subscriptions == [FILE], f"not honoured: {sub.honored!r}"
            await anyio.sleep(0.2)
            (root / "skills/review/checklist.md").write_bytes(new)
            # A listen that started the list watches opens with one list_changed.
            with anyio.fail_after(DEADLINE):
                while (ev := await sub.__anext__()) == ResourcesListChanged():
                    pass
            assert ev == ResourceUpdated(uri=FILE), ev
            after = await get_skill(c, SKILL)
            assert digest_of(after, FILE) == sha(new)
            write(root / "skills/lint/SKILL.md", "---\nname: lint\ndescription: Lints\n---\n")
            with anyio.fail_after(DEADLINE):
                while (ev := await sub.__anext__()) != ResourcesListChanged():
                    pass
    # The new skill is listed and gettable.
    lint = await get_skill(c, "skill://lint/SKILL.md")
    assert lint


async def test_skill_file_change_notifies_under_its_skill_uri_stdio(serve, mode, base):
    root, cfg = skills_tree(base)
    async with serve(mode, config=cfg) as c:
        await exercise(c, root)


async def test_skill_file_change_notifies_under_its_skill_uri_http(http_serve, mode, base):  # noqa: F811
    root, cfg = skills_tree(base)
    srv = http_serve.start(config=cfg)
    async with connect(srv, mode) as c:
        await exercise(c, root)
