"""A mount whose source is down, through the official Python SDK over stdio in both eras: a
client that follows cursors over a config with a dead S3 mount (its endpoint a closed
loopback port) gets every file, whichever mount comes first; the page that left the mount
out names it in `_meta`; the server warns once for the outage, not once per listing; reads
of the mount keep their clear error. A PostgreSQL mount that is down at start does not
hold the server's first answer. And a read from a source that hangs (an endpoint that takes
the connection and never answers) answers the SDK's own request timeout, -32001."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from conftest import rel_uri, toml_str, write
from mcp_types import REQUEST_TIMEOUT

pytestmark = pytest.mark.anyio

UNAVAILABLE = "io.github.mcp-resources/unavailable"
SECRET = "dead-mount-secret-access-key"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def files_mount(root: Path) -> list[str]:
    return ["", "[[mount]]", 'kind = "files"', f"root = {toml_str(str(root))}"]


def dead_s3_mount(bucket: str) -> list[str]:
    return [
        "",
        "[[mount]]",
        'kind = "s3"',
        f"bucket = {toml_str(bucket)}",
        'region = "us-east-1"',
        f'endpoint = "http://127.0.0.1:{closed_port()}"',
        "allow_http = true",
        'access_key_id = "AKIADEADMOUNTKEYID01"',
        f"secret_access_key = {toml_str(SECRET)}",
    ]


def meta_of(page) -> dict:
    return page.model_dump(by_alias=True, mode="json").get("_meta") or {}


@pytest.mark.parametrize("s3_first", [False, True], ids=["files-first", "s3-first"])
async def test_cursors_over_a_dead_s3_mount_reach_every_file(serve, mode, base, s3_first):
    root = base / "docs"
    names = [f"n{i}.md" for i in range(7)]
    for n in names:
        write(root / n, f"# {n}\n")
    mounts = [dead_s3_mount("gone-bucket"), files_mount(root)]
    if not s3_first:
        mounts.reverse()
    config = base / "dead.toml"
    config.write_text("\n".join(["[server]", "page_size = 3", *sum(mounts, [])]) + "\n")

    async with serve(mode, config=config) as c:
        # Twice: the second walk leaves the mount out again, without a second warning.
        for _ in range(2):
            pages = []
            cursor = None
            for _ in range(20):
                page = await c.list_page(cursor)
                pages.append(page)
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert cursor is None, "the listing ends"
            uris = [r.uri for p in pages for r in p.resources]
            assert uris == [rel_uri(root, n) for n in names], "every file, once, in order"

            named = [meta_of(p).get(UNAVAILABLE) for p in pages]
            left_out = [i for i, n in enumerate(named) if n]
            assert left_out == [0 if s3_first else len(pages) - 1], named
            (entry,) = named[left_out[0]]
            assert entry["mount"] == "s3://gone-bucket/"
            assert entry["partial"] is False
            assert "bucket `gone-bucket` cannot be reached" in entry["message"]
            assert SECRET not in entry["message"]

        err = await c.error_of(c.client.read_resource("s3://gone-bucket/report.csv"))
        assert "cannot be reached" in err.message

    log = Path(serve._logdir).glob("*.stderr")
    text = "\n".join(p.read_text() for p in log)
    warnings = [
        line
        for line in text.splitlines()
        if "listings leave this mount out" in line and "mount=s3://gone-bucket/" in line
    ]
    assert len(warnings) == 1, text
    assert SECRET not in text


async def test_a_dead_postgres_mount_does_not_delay_the_first_answer(serve, mode, base):
    root = base / "docs"
    write(root / "a.md", "# a\n")
    config = base / "pg-down.toml"
    config.write_text(
        "\n".join(
            [
                "[[mount]]",
                'kind = "postgres"',
                'name = "pg"',
                f'url = "postgres://reader:s3cret-pw@127.0.0.1:{closed_port()}/shop"',
                *files_mount(root),
            ]
        )
        + "\n"
    )
    started = time.monotonic()
    async with serve(mode, config=config) as c:
        page = await c.list_page()
        elapsed = time.monotonic() - started
        # It took over 3 s when start-up waited for the pool's connect timeout.
        assert elapsed < 1.5, f"the first answer took {elapsed:.2f} s"
        assert [r.uri for r in page.resources] == [rel_uri(root, "a.md")]
        (entry,) = meta_of(page)[UNAVAILABLE]
        assert entry["mount"] == "db://pg"
        assert entry["message"].startswith('postgres database of mount "pg" is unavailable: ')
        assert entry["message"].count("is unavailable") == 1
        assert "s3cret-pw" not in entry["message"]

        err = await c.error_of(c.client.read_resource("db://pg/tables/orders"))
        assert err.message.count("is unavailable") == 1, err.message


async def test_a_read_from_a_hung_source_answers_the_sdks_request_timeout(serve, mode, base):
    # A listening socket nobody accepts on: the connection is made, no answer ever comes.
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        port = hung.getsockname()[1]
        config = base / "hung.toml"
        config.write_text(
            "\n".join(
                [
                    "[server]",
                    "request_timeout_ms = 500",
                    "",
                    "[[mount]]",
                    'kind = "s3"',
                    'bucket = "hung-bucket"',
                    'region = "us-east-1"',
                    f'endpoint = "http://127.0.0.1:{port}"',
                    "allow_http = true",
                    'access_key_id = "AKIAHUNGMOUNTKEYID01"',
                    f"secret_access_key = {toml_str(SECRET)}",
                ]
            )
            + "\n"
        )
        async with serve(mode, config=config) as c:
            uri = "s3://hung-bucket/report.csv"
            started = time.monotonic()
            err = await c.error_of(c.client.read_resource(uri))
            elapsed = time.monotonic() - started
            assert REQUEST_TIMEOUT == -32001
            assert err.code == REQUEST_TIMEOUT, (err.code, err.message)
            assert err.message == f"{uri} timed out after 500 ms (request_timeout)"
            assert isinstance(err.data, dict) and err.data.get("temporary") is True, err.data
            assert err.data.get("uri") == uri, err.data
            assert 0.45 <= elapsed < 3, f"answered after {elapsed:.2f} s"
