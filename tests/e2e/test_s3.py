"""s3:// through the official client, in both eras: a bucket on a real S3-compatible server on
loopback (moto's `moto_server`, from tests/e2e/requirements.txt), served by the built binary.
Listing in pages with annotations, byte-exact reads of awkward keys (text and binary), a
prefix ("directory") read, completion of `key`, an overwrite notified as resources/updated
and a new key as list_changed.

moto_server is found next to this venv's python, at $MCPR_MOTO, or on PATH; without it the
tests skip, except under CI=true, where they fail."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import anyio
import pytest
from mcp_types import ResourceTemplateReference

from conftest import LIST_CHANGED, UPDATED, content_bytes, mime_base, quote_path, toml_str

pytestmark = pytest.mark.anyio

KEY_ID = "AKIAE2ETESTKEY000001"
SECRET = "e2eSecretThatMustNeverAppear000000000000"
DEADLINE = 3.0
"""Poll interval 200 ms with jitter and backoff: a change is notified well within this."""


def moto_binary() -> str | None:
    if os.environ.get("MCPR_MOTO"):
        return os.environ["MCPR_MOTO"]
    beside = Path(sys.executable).parent / "moto_server"
    if beside.exists():
        return str(beside)
    return shutil.which("moto_server")


@pytest.fixture(scope="module")
def moto():
    binary = moto_binary()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("moto_server is required under CI=true (pip install -r tests/e2e/requirements.txt)")
        pytest.skip("moto_server not found: pip install -r tests/e2e/requirements.txt")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "moto_server did not start"
            time.sleep(0.1)
    yield endpoint
    proc.terminate()
    proc.wait(timeout=10)


def s3_client(endpoint: str):
    import boto3  # installed with moto[server]

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
    )


AWKWARD = {
    "docs/a b.txt": b"space\n",
    "docs/plus+sign.txt": b"plus\n",
    "docs/100%.txt": b"percent\n",
    "docs/hash#tag.txt": b"hash\n",
    "docs/what?.txt": b"question\n",
    "docs/\u00fcn\u00efc\u00f6d\u00e9/\u65e5\u672c.md": "\u00fcn\u00efc\u00f6d\u00e9 \u2713\n".encode(),
    "bin/blob.bin": bytes([0, 159, 146, 150, 255, 0, 1]) * 100,
    "latest.json": b'{"ok": true}',
}


def key_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/" + quote_path(key.encode())


@pytest.fixture
def bucket(moto, tmp_path):
    name = f"e2e-{uuid.uuid4().hex[:12]}"
    s3 = s3_client(moto)
    s3.create_bucket(Bucket=name)
    for k, v in AWKWARD.items():
        s3.put_object(Bucket=name, Key=k, Body=v)
    config = tmp_path / "s3.toml"
    config.write_text(
        "\n".join(
            [
                "[server]",
                "page_size = 3",
                "",
                "[[mount]]",
                'kind = "s3"',
                f"bucket = {toml_str(name)}",
                'region = "us-east-1"',
                f"endpoint = {toml_str(moto)}",
                "allow_http = true",
                f"access_key_id = {toml_str(KEY_ID)}",
                f"secret_access_key = {toml_str(SECRET)}",
                "poll_interval_ms = 200",
            ]
        )
        + "\n"
    )
    yield name, s3, config
    for k in s3.list_objects_v2(Bucket=name).get("Contents", []):
        s3.delete_object(Bucket=name, Key=k["Key"])
    s3.delete_bucket(Bucket=name)


async def test_missing_bucket_is_named_and_the_other_mount_serves(serve, mode, bucket, request):
    name, _s3, config = bucket
    missing = name + "-missing"
    text = config.read_text() + "\n".join(
        [
            "",
            "# A bucket that does not exist: its mount is not ready, the other one serves.",
            "[[mount]]",
            'kind = "s3"',
            f"bucket = {toml_str(missing)}",
            'region = "us-east-1"',
            f"endpoint = {toml_str(_endpoint_of(config))}",
            "allow_http = true",
            f"access_key_id = {toml_str(KEY_ID)}",
            f"secret_access_key = {toml_str(SECRET)}",
        ]
    ) + "\n"
    config.write_text(text)
    async with serve(mode, config=config) as c:
        err = await c.error_of(c.client.read_resource(f"s3://{missing}/a.txt"))
        assert missing in err.message and "does not exist" in err.message, err.message
        assert KEY_ID not in str(err.data) + err.message and SECRET not in str(err.data) + err.message
        got = await c.read_one(key_uri(name, "latest.json"))
        assert content_bytes(got) == AWKWARD["latest.json"]
    for log_path, _ in request.node._mcpr_logs:
        text = Path(log_path).read_text()
        assert missing in text, "the start-up warning names the bucket"
        assert KEY_ID not in text and SECRET not in text, f"a key reached the log {log_path}"


def _endpoint_of(config: Path) -> str:
    for line in config.read_text().splitlines():
        if line.startswith("endpoint = "):
            return json.loads(line.split("=", 1)[1].strip())
    raise AssertionError("no endpoint in the config")


async def test_list_read_directory_and_complete(serve, mode, bucket, request):
    name, _s3, config = bucket
    async with serve(mode, config=config) as c:

        listed, sizes = await c.list_all()
        assert max(sizes) <= 3 and len(sizes) == 3, sizes
        keys = sorted(AWKWARD, key=lambda k: k.encode())
        assert [r.name for r in listed] == keys
        for r in listed:
            assert r.uri == key_uri(name, r.name)
            assert r.size == len(AWKWARD[r.name])
            assert r.annotations is not None and r.annotations.last_modified
            assert datetime.fromisoformat(r.annotations.last_modified.replace("Z", "+00:00")).tzinfo
            got = await c.read_one(r.uri)
            assert content_bytes(got) == AWKWARD[r.name], r.uri
        md = await c.read_one(key_uri(name, "docs/\u00fcn\u00efc\u00f6d\u00e9/\u65e5\u672c.md"))
        assert md.text == "\u00fcn\u00efc\u00f6d\u00e9 \u2713\n"
        blob = await c.read_one(key_uri(name, "bin/blob.bin"))
        assert getattr(blob, "blob", None) is not None

        listing = json.loads((await c.read_one(f"s3://{name}/docs/")).text)
        names = [e["name"] for e in listing["entries"]]
        assert names == sorted(
            ["a b.txt", "plus+sign.txt", "100%.txt", "hash#tag.txt", "what?.txt", "\u00fcn\u00efc\u00f6d\u00e9/"],
            key=lambda n: n.encode(),
        )
        assert listing["truncated"] is False
        root = json.loads((await c.read_one(f"s3://{name}/")).text)
        assert [e["name"] for e in root["entries"]] == ["bin/", "docs/", "latest.json"]

        templates = [t.uri_template for t in await c.templates_all()]
        assert f"s3://{name}/{{+key}}" in templates
        ref = ResourceTemplateReference(type="ref/resource", uri=f"s3://{name}/{{+key}}")
        comp = (await c.call(c.client.complete(ref, {"name": "key", "value": "docs/"}))).completion
        assert "docs/a b.txt" in comp.values and "docs/\u00fcn\u00efc\u00f6d\u00e9/" in comp.values

        await c.assert_not_found(key_uri(name, "docs/missing.txt"))
        windowed = await c.read_one(key_uri(name, "bin/blob.bin") + "?offset=0&length=4")
        assert content_bytes(windowed) == AWKWARD["bin/blob.bin"][0:4]
        assert mime_base(windowed.mime_type) == "application/octet-stream"
    for log_path, _ in request.node._mcpr_logs:
        text = Path(log_path).read_text()
        assert KEY_ID not in text and SECRET not in text, f"a key reached the log {log_path}"


async def test_overwrite_updates_and_new_key_changes_list(serve, mode, bucket):
    name, s3, config = bucket
    uri = key_uri(name, "latest.json")
    async with serve(mode, config=config) as c:
        if mode == "legacy":
            await c.call(c.client.subscribe_resource(uri))
            mark = c.notes.mark()
            s3.put_object(Bucket=name, Key="latest.json", Body=b'{"ok": false}')
            note = await c.notes.wait_for(lambda n: n.method == UPDATED and n.uri == uri, DEADLINE, mark)
            assert note is not None, f"no {UPDATED} for {uri}: {[(n.method, n.params) for n in c.notes.since(mark)]}"
            mark = c.notes.mark()
            s3.put_object(Bucket=name, Key="docs/new key.txt", Body=b"new")
            note = await c.notes.wait_for(lambda n: n.method == LIST_CHANGED, DEADLINE, mark)
            assert note is not None, f"no {LIST_CHANGED} after a new key"
        else:
            async with c.client.listen(resource_subscriptions=[uri], resources_list_changed=True) as sub:
                assert sub.honored.resource_subscriptions == [uri]
                await anyio.sleep(0.3)
                s3.put_object(Bucket=name, Key="latest.json", Body=b'{"ok": false}')
                seen = []
                with anyio.move_on_after(DEADLINE):
                    async for ev in sub:
                        seen.append(ev)
                        if getattr(ev, "uri", None) == uri:
                            break
                assert any(getattr(ev, "uri", None) == uri for ev in seen), f"no update for {uri}: {seen!r}"
                s3.put_object(Bucket=name, Key="docs/new key.txt", Body=b"new")
                seen = []
                with anyio.move_on_after(DEADLINE):
                    async for ev in sub:
                        seen.append(ev)
                        if type(ev).__name__ == "ResourcesListChanged":
                            break
                assert any(type(ev).__name__ == "ResourcesListChanged" for ev in seen), f"no list change: {seen!r}"
        got = await c.read_one(uri)
        assert content_bytes(got) == b'{"ok": false}'
