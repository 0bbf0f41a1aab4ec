"""Skills (SEP-2640) end to end against the built binary, over stdio and HTTP in both eras,
with the official SDK (which has no skills methods: `skills/list`, `skills/get` and
`resources/directory/read` go through its session as plain requests):

* a git repository of skills at two refs, mounted twice (`skills_ref = "v1"` pins the older
  one): each mount serves its own version, and every manifest digest and size is the bytes
  `resources/read` returns;
* a skill with bad frontmatter is left out of `skills/list` while the others are listed;
* a symlink inside a skill folder pointing outside the mount is in no manifest, cannot be
  read, and no directory read shows it.

One fixture tree and one HTTP server per module; a stdio server per test (a process start).
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Request
from pydantic import TypeAdapter

from conftest import (
    BIN,
    CALL_TIMEOUT,
    INVALID_PARAMS,
    MODES,
    NOT_FOUND,
    Conn,
    Notes,
    _leaves,
    canon,
    content_bytes,
    rel_uri,
    toml_str,
    write,
)

pytestmark = pytest.mark.anyio

WAIT = 5.0
DIRECTORY = "inode/directory"

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "Ada Lovelace",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada Lovelace",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ENV}, check=True, capture_output=True)


def skill_md(name: str, description: str) -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n\nRun scripts/run.py.\n"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The repository (v1, then a second commit on main), the files folder with a valid
    skill, two invalid ones and one holding links out of the mount, and the config."""
    base = Path(canon(tmp_path_factory.mktemp("skills")))
    repo = base / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo / "skills/pdf/SKILL.md", skill_md("pdf", "Fill PDF forms (v1)"))
    write(repo / "skills/pdf/scripts/run.py", "print('v1')\n")
    write(repo / "skills/pdf/forms/blank.bin", bytes([0, 1, 2, 255]))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v1")
    git(repo, "tag", "v1")
    write(repo / "skills/pdf/SKILL.md", skill_md("pdf", "Fill PDF forms (v2)"))
    write(repo / "skills/pdf/scripts/run.py", "print('v2, faster')\n")
    write(repo / "skills/pdf/forms/extra.txt", "only in v2\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v2")

    local = base / "local"
    outside = base / "outside"
    write(outside / "secret.txt", "outside the mount\n")
    write(local / "skills/good/SKILL.md", skill_md("good", "A valid skill"))
    write(local / "skills/good/scripts/run.py", "print('good')\n")
    # No description; and YAML that does not parse.
    write(local / "skills/broken/SKILL.md", "---\nname: broken\n---\nNo description.\n")
    write(local / "skills/unparsable/SKILL.md", "---\nname: [unclosed\ndescription: x\n---\n")
    write(local / "skills/linky/SKILL.md", skill_md("linky", "Has links out of the mount"))
    write(local / "skills/linky/ref.md", "inside\n")
    os.symlink(outside / "secret.txt", local / "skills/linky/leak.txt")
    os.symlink(outside, local / "skills/linky/outdir")

    config = base / "skills.toml"
    config.write_text(
        "\n".join(
            [
                "[server]",
                "page_size = 2",
                "",
                "[[mount]]",
                'kind = "git"',
                f"repo = {toml_str(str(repo))}",
                'name = "new"',
                'skills = "skills"',
                'skills_prefix = "new"',
                "",
                "[[mount]]",
                'kind = "git"',
                f"repo = {toml_str(str(repo))}",
                'name = "old"',
                'skills = "skills"',
                'skills_prefix = "old"',
                'skills_ref = "v1"',
                "",
                "[[mount]]",
                'kind = "files"',
                f"root = {toml_str(str(local))}",
                'skills = "skills"',
                'skills_prefix = "local"',
                "",
            ]
        )
    )
    return {"base": base, "repo": repo, "local": local, "outside": outside, "config": config}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_server(tree: dict[str, Any]):
    """One HTTP server for the module (both eras); its stderr path and URL."""
    port = free_port()
    log = tree["base"] / "http.stderr"
    env = dict(os.environ)
    env.pop("RUST_LOG", None)
    with open(log, "wb") as errlog:
        proc = subprocess.Popen(
            [os.fspath(BIN), "serve", "--config", os.fspath(tree["config"]), "--http", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            env=env,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT
    with httpx2.Client(timeout=0.5) as h:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited before serving:\n{log.read_text()[-2000:]}")
            try:
                if h.get(base + "/healthz").status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() >= deadline:
                proc.kill()
                raise AssertionError(f"/healthz did not answer within {WAIT}s:\n{log.read_text()[-2000:]}")
            time.sleep(0.02)
    yield {"url": base + "/mcp", "log": log}
    proc.kill()
    proc.wait(timeout=WAIT)


TRANSPORTS = [(t, m) for t in ("stdio", "http") for m in MODES]


@pytest.fixture(params=TRANSPORTS, ids=[f"{t}-{m}" for t, m in TRANSPORTS])
async def conn(request: pytest.FixtureRequest, tree: dict[str, Any], serve) -> AsyncIterator[Conn]:
    transport, mode = request.param
    if transport == "stdio":
        async with serve(mode, config=tree["config"]) as c:
            yield c
        return
    srv = request.getfixturevalue("http_server")
    async with _http(srv["url"], mode) as c:
        yield c


@asynccontextmanager
async def _http(url: str, mode: str) -> AsyncIterator[Conn]:
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(CALL_TIMEOUT))
    notes = Notes()
    client = Client(
        streamable_http_client(url, http_client=http),
        mode=mode,
        message_handler=notes.handler,
        cache=None,
        read_timeout_seconds=CALL_TIMEOUT,
    )
    try:
        async with http, client:
            yield Conn(client, mode, notes)
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


class _Raw(Request[dict[str, Any] | None, str]):
    """A request the SDK has no model for, sent through its session (which adds the
    2026-07-28 `_meta` and headers)."""

    method: str
    params: dict[str, Any] | None = None


_ANY = TypeAdapter(dict[str, Any])


async def raw(c: Conn, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return await c.call(c.client.session.send_request(_Raw(method=method, params=params), _ANY))


async def all_skills(c: Conn) -> dict[str, dict[str, Any]]:
    """Every skill of `skills/list`, by URI, following cursors (no skill twice)."""
    out: dict[str, dict[str, Any]] = {}
    params: dict[str, Any] = {}
    for _ in range(100):
        page = await raw(c, "skills/list", params)
        for s in page["skills"]:
            assert s["uri"] not in out, f"{s['uri']} listed twice"
            out[s["uri"]] = s
        if page.get("nextCursor") is None:
            return out
        params = {"cursor": page["nextCursor"]}
    raise AssertionError("skills/list did not end")


async def dir_entries(c: Conn, uri: str) -> list[dict[str, Any]]:
    """Every child of directory `uri`, following cursors (no entry twice)."""
    out: list[dict[str, Any]] = []
    params: dict[str, Any] = {"uri": uri}
    for _ in range(100):
        page = await raw(c, "resources/directory/read", params)
        for r in page["resources"]:
            assert all(o["uri"] != r["uri"] for o in out), f"{r['uri']} twice in {uri}"
            out.append(r)
        if page.get("nextCursor") is None:
            return out
        params = {"uri": uri, "cursor": page["nextCursor"]}
    raise AssertionError(f"directory read of {uri} did not end")


async def verified(c: Conn, skill: dict[str, Any]) -> dict[str, bytes]:
    """Every manifest file's bytes, read with resources/read and checked against its digest
    and size."""
    out: dict[str, bytes] = {}
    for f in skill["resources"]:
        content = await c.read_one(f["uri"])
        assert content.uri == f["uri"], "contents are named as asked"
        data = content_bytes(content)
        assert len(data) == f["size"], f"{f['uri']}: size {f['size']} but {len(data)} bytes read"
        assert f["digest"] == "sha256:" + hashlib.sha256(data).hexdigest(), f"{f['uri']}: digest"
        out[f["uri"]] = data
    return out


async def test_each_ref_serves_its_own_version_and_digests_match(conn: Conn):
    skills = await all_skills(conn)
    new, old = skills["skill://new/pdf/SKILL.md"], skills["skill://old/pdf/SKILL.md"]
    assert new["frontmatter"]["description"] == "Fill PDF forms (v2)"
    assert old["frontmatter"]["description"] == "Fill PDF forms (v1)"
    new_files, old_files = await verified(conn, new), await verified(conn, old)
    assert sorted(u.removeprefix("skill://new/") for u in new_files) == [
        "pdf/SKILL.md",
        "pdf/forms/blank.bin",
        "pdf/forms/extra.txt",
        "pdf/scripts/run.py",
    ]
    assert sorted(u.removeprefix("skill://old/") for u in old_files) == [
        "pdf/SKILL.md",
        "pdf/forms/blank.bin",
        "pdf/scripts/run.py",
    ]
    assert new_files["skill://new/pdf/scripts/run.py"] == b"print('v2, faster')\n"
    assert old_files["skill://old/pdf/scripts/run.py"] == b"print('v1')\n"
    digests = {m: {f["uri"].split("/", 3)[3]: f["digest"] for f in s["resources"]} for m, s in (("new", new), ("old", old))}
    assert digests["new"]["pdf/scripts/run.py"] != digests["old"]["pdf/scripts/run.py"]
    assert digests["new"]["pdf/forms/blank.bin"] == digests["old"]["pdf/forms/blank.bin"]
    # What v1 does not have is not found under the pinned mount.
    await conn.assert_not_found("skill://old/pdf/forms/extra.txt")
    # skills/get answers the same skill as the listing.
    got = await raw(conn, "skills/get", {"uri": "skill://old/pdf/SKILL.md"})
    got = got.get("skill", got)
    assert got["uri"] == old["uri"] and got["resources"] == old["resources"]
    # The pinned mount's folder reads as v1's.
    children = {r["uri"]: r.get("mimeType") for r in await dir_entries(conn, "skill://old/pdf/forms")}
    assert children == {"skill://old/pdf/forms/blank.bin": children["skill://old/pdf/forms/blank.bin"]}
    assert children["skill://old/pdf/forms/blank.bin"] != DIRECTORY


async def test_a_skill_with_bad_frontmatter_is_left_out_and_the_others_listed(conn: Conn):
    skills = await all_skills(conn)
    assert sorted(skills) == [
        "skill://local/good/SKILL.md",
        "skill://local/linky/SKILL.md",
        "skill://new/pdf/SKILL.md",
        "skill://old/pdf/SKILL.md",
    ]
    await verified(conn, skills["skill://local/good/SKILL.md"])
    for uri in ("skill://local/broken/SKILL.md", "skill://local/unparsable/SKILL.md"):
        err = await conn.error_of(raw(conn, "skills/get", {"uri": uri}))
        assert err.code == INVALID_PARAMS, (uri, err.code, err.message)
    # Nor does resources/list offer them as skills.
    listed, _ = await conn.list_all()
    skill_entries = sorted(r.uri for r in listed if r.uri.startswith("skill://"))
    assert skill_entries == sorted(skills)


async def test_a_link_out_of_the_mount_is_never_served_or_listed(conn: Conn, tree: dict[str, Any]):
    skills = await all_skills(conn)
    linky = skills["skill://local/linky/SKILL.md"]
    assert sorted(f["uri"] for f in linky["resources"]) == [
        "skill://local/linky/SKILL.md",
        "skill://local/linky/ref.md",
    ]
    await verified(conn, linky)
    for uri in ("skill://local/linky/leak.txt", "skill://local/linky/outdir/secret.txt"):
        await conn.assert_not_found(uri)
    # Nor through the mount's own URIs.
    for rel in ("skills/linky/leak.txt", "skills/linky/outdir/secret.txt"):
        await conn.assert_not_found(rel_uri(tree["local"], rel))
    children = sorted(r["uri"] for r in await dir_entries(conn, "skill://local/linky"))
    assert children == ["skill://local/linky/SKILL.md", "skill://local/linky/ref.md"]
    mount_children = sorted(r["uri"] for r in await dir_entries(conn, rel_uri(tree["local"], "skills/linky")))
    assert mount_children == [rel_uri(tree["local"], "skills/linky/SKILL.md"), rel_uri(tree["local"], "skills/linky/ref.md")]
    err = await conn.error_of(raw(conn, "resources/directory/read", {"uri": "skill://local/linky/outdir"}))
    assert err.code in (INVALID_PARAMS, NOT_FOUND[conn.mode]), (err.code, err.message)


async def test_the_left_out_skill_is_logged_once_naming_the_file(http_server: dict[str, Any], tree: dict[str, Any]):
    async with _http(http_server["url"], "2026-07-28") as c:
        await all_skills(c)
        await all_skills(c)
    log = http_server["log"].read_text()
    broken = os.fspath(tree["local"] / "skills/broken/SKILL.md")
    lines = [line for line in log.splitlines() if "skill left out" in line and "broken" in line]
    assert len(lines) == 1, log[-3000:]
    assert "description" in lines[0], lines[0]
    assert broken in lines[0] or "broken/SKILL.md" in lines[0], lines[0]
