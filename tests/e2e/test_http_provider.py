"""api:// and https:// (kinds `api` and `web`) through the official client in both eras, against
a real HTTP upstream on loopback (Python's http.server in a thread): list, templates, reads
(JSON text, Markdown from HTML), completion, template attacks checked against the request
line the upstream saw, the SSRF guard, cache hints, polling subscriptions, and the secret
header kept out of every answer and the server's debug log.

The mounts say `allow_private = true` because the upstream is on loopback; one test runs
without it and checks that nothing reaches the upstream."""

from __future__ import annotations

import json
import threading
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from mcp_types import ResourceTemplateReference

from conftest import INVALID_PARAMS, UPDATED, mime_base, toml_str

pytestmark = pytest.mark.anyio

TOKEN = "e2e-SECRET-token-9"
NOTIFY_WITHIN = 3.0
"""Polling every 200 ms with jitter: a change is seen well within this."""


class Upstream:
    """Documents by path, every request line and its headers recorded, 304 for a matching
    If-None-Match, redirects and error statuses, and /echo/ answering with the request line."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.lock = threading.Lock()
        up = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                with up.lock:
                    up.seen.append((self.requestline, {k.lower(): v for k, v in self.headers.items()}))
                    path = urlsplit(self.path).path
                    doc = dict(up.docs.get(path, {}))
                if path.startswith("/echo/"):
                    return self.reply(200, self.requestline.encode(), {"Content-Type": "text/plain"})
                if not doc:
                    return self.reply(404, b"no such page", {"Content-Type": "text/plain"})
                if "status" in doc:
                    headers = {"Location": doc["location"]} if "location" in doc else {}
                    return self.reply(doc["status"], b"upstream error page", headers)
                headers = {"Content-Type": doc["type"]}
                if "etag" in doc:
                    headers["ETag"] = doc["etag"]
                    if self.headers.get("If-None-Match") == doc["etag"]:
                        return self.reply(304, b"", headers)
                if "cache" in doc:
                    headers["Cache-Control"] = doc["cache"]
                self.reply(200, doc["body"], headers)

            def reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if status != 304:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if status != 304:
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set(self, path: str, body: bytes | str, type_: str, **extra: Any) -> None:
        with self.lock:
            self.docs[path] = {"body": body.encode() if isinstance(body, str) else body, "type": type_, **extra}

    def count(self, needle: str) -> int:
        with self.lock:
            return sum(1 for line, _ in self.seen if needle in line)

    def requests(self) -> list[tuple[str, dict[str, str]]]:
        with self.lock:
            return list(self.seen)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream():
    up = Upstream()
    up.set("/forecast/beijing", json.dumps({"city": "beijing", "days": 7}), "application/json")
    up.set("/forecast/shanghai", json.dumps({"city": "shanghai", "days": 7}), "application/json")
    up.set("/current/beijing", json.dumps({"t": 21}), "application/json", etag='"c1"')
    up.set(
        "/docs/index.html",
        "<html><head><title>Docs</title></head><body><h1>Docs</h1><p>Start <a href=\"/docs/a.html\">here</a>.</p></body></html>",
        "text/html; charset=utf-8",
        cache="public, max-age=60",
    )
    up.set("/docs/away", b"", "text/plain", status=302, location="/private/x")
    up.set("/private/x", "must never be fetched", "text/plain")
    yield up
    up.close()


def write_config(path: Path, up: Upstream, *, allow_private: bool = True) -> Path:
    private = str(allow_private).lower()
    b = up.base
    path.write_text(
        f"""
[[mount]]
kind = "api"
name = "weather"
allow_private = {private}
poll_interval_ms = 200
default_ttl_ms = 0
timeout_ms = 3000

[[mount.endpoint]]
uri = "api://weather/{{city}}/forecast"
url = {toml_str(b + "/forecast/{city}?units=metric")}
name = "forecast"
description = "Seven-day forecast for one city"
headers = {{ Authorization = {toml_str("Bearer " + TOKEN)} }}
params.city = {{ enum = ["beijing", "shanghai"] }}

[[mount.endpoint]]
uri = "api://weather/beijing/current"
url = {toml_str(b + "/current/beijing")}
name = "current"

[[mount.endpoint]]
uri = "api://weather/echo/{{v}}"
url = {toml_str(b + "/echo/{v}/tail?fixed=1")}
name = "echo"

[[mount]]
kind = "web"
allow = [{toml_str(b + "/docs/")}]
pages = [{toml_str(b + "/docs/index.html")}]
allow_private = {private}
poll_interval_ms = 200
max_convert_bytes = "1MiB"
max_html_depth = 128
max_conversions = 2
"""
    )
    return path


@asynccontextmanager
async def subscribed(c, uri: str):
    if c.mode == "legacy":
        await c.call(c.client.subscribe_resource(uri))
        yield None
    else:
        async with c.client.listen(resource_subscriptions=[uri]) as sub:
            assert sub.honored.resource_subscriptions == [uri], sub.honored
            yield sub


async def next_update(c, sub, mark: int, timeout: float) -> str | None:
    if sub is None:
        note = await c.notes.wait_for(lambda n: n.method == UPDATED, timeout, mark)
        return None if note is None else note.uri
    with anyio.move_on_after(timeout):
        ev = await sub.__anext__()
        return getattr(ev, "uri", repr(ev))
    return None


async def test_api_and_web_list_read_complete(serve, mode, base, upstream):
    cfg = write_config(base / "http.toml", upstream)
    async with serve(mode, config=cfg) as c:
        listed, _ = await c.list_all()
        uris = {r.uri for r in listed}
        page = upstream.base + "/docs/index.html"
        assert {"api://weather/beijing/current", page} <= uris, uris
        templates = {t.uri_template for t in await c.templates_all()}
        assert {"api://weather/{city}/forecast", upstream.base + "/docs/{+path}"} <= templates, templates

        f = await c.read_one("api://weather/beijing/forecast")
        assert mime_base(f.mime_type) == "application/json"
        assert json.loads(f.text) == {"city": "beijing", "days": 7}
        line, headers = [r for r in upstream.requests() if "/forecast/beijing" in r[0]][-1]
        assert line == "GET /forecast/beijing?units=metric HTTP/1.1"
        assert headers.get("authorization") == "Bearer " + TOKEN

        err = await c.error_of(c.client.read_resource("api://weather/paris/forecast"))
        assert err.code == INVALID_PARAMS and "not one of" in err.message, err.message
        assert upstream.count("/forecast/paris") == 0

        ref = ResourceTemplateReference(type="ref/resource", uri="api://weather/{city}/forecast")
        comp = (await c.call(c.client.complete(ref, {"name": "city", "value": "sh"}))).completion
        assert comp.values == ["shanghai"]

        md = await c.read_one(page)
        assert mime_base(md.mime_type) == "text/markdown"
        assert md.text.startswith("# Docs"), md.text
        assert f"[here]({upstream.base}/docs/a.html)" in md.text, "links come out absolute"

        # Served from the cache the second time (max-age=60), with the remaining freshness.
        before = upstream.count("/docs/index.html")
        result = await c.read(page)
        assert upstream.count("/docs/index.html") == before
        if mode != "legacy":
            assert 0 < result.ttl_ms <= 60_000, result.ttl_ms
            assert result.cache_scope == "public"
            creds = await c.read("api://weather/shanghai/forecast")
            assert creds.cache_scope == "private", "a request with credentials is private"

        # Off the allow list by redirect, and outside it directly.
        err = await c.error_of(c.client.read_resource(upstream.base + "/docs/away"))
        assert err.code == INVALID_PARAMS and "allow list" in err.message, err.message
        assert upstream.count("/private/") == 0
        await c.assert_not_found(upstream.base + "/private/x")
        await c.assert_not_found(upstream.base + "/docs/missing.html")


DEEP_PAGES = {
    "/docs/ul.html": "<ul><li>x" * 1000 + "deepest-ul",
    "/docs/div.html": "<div>" * 3000 + "deepest-div",
    "/docs/quote.html": "<blockquote>x" * 5000 + "deepest-quote",
}


async def test_hostile_html_leaves_the_server_running(serve, mode, base, upstream):
    for path, page in DEEP_PAGES.items():
        upstream.set(path, page, "text/html")
    upstream.set("/docs/big.html", "<p>" + "word " * 220_000 + "</p>", "text/html")
    cfg = write_config(base / "http.toml", upstream)
    async with serve(mode, config=cfg) as c:
        # Nesting that overflowed htmd's recursion and aborted the process: refused past four
        # times max_html_depth (128 here), naming it; flattened between.
        for path in DEEP_PAGES:
            err = await c.error_of(c.client.read_resource(upstream.base + path))
            assert err.code == INVALID_PARAMS, err
            assert "more than 512 deep" in err.message and "max_html_depth" in err.message, err.message
        upstream.set("/docs/nested.html", "<blockquote>x" * 300 + "deepest", "text/html")
        md = await c.read_one(upstream.base + "/docs/nested.html")
        assert "deepest" in md.text
        assert max(line.count(">") for line in md.text.splitlines()) < 128, "flattened past 128 levels"
        # Polled with no read at all: the poller converts each page every 200 ms.
        uri = upstream.base + "/docs/quote.html"
        async with subscribed(c, uri):
            before = upstream.count("/docs/quote.html")
            with anyio.fail_after(10):
                while upstream.count("/docs/quote.html") < before + 3:
                    await anyio.sleep(0.1)
        # More HTML than max_convert_bytes: refused naming the setting.
        err = await c.error_of(c.client.read_resource(upstream.base + "/docs/big.html"))
        assert "max_convert_bytes" in err.message and "1048576" in err.message, err.message
        md = await c.read_one(upstream.base + "/docs/index.html")
        assert md.text.startswith("# Docs"), "the server still answers"


ATTACKS = [
    ("x%3Fy%3D1", "/echo/x%3Fy%3D1/tail?fixed=1"),
    ("a%23b", "/echo/a%23b/tail?fixed=1"),
    ("a%0D%0AX-Evil%3A%201", "/echo/a%0D%0AX-Evil%3A%201/tail?fixed=1"),
]

# Values that would put an encoded `/` or `\` (or a dot segment behind one) into the upstream
# path, which servers that decode before routing would follow: refused unless the endpoint
# sets allow_encoded_slash (and dot segments always).
ENCODED_SEPARATORS = [
    "..%2Fadmin",
    "..%2F..%2Fadmin%2Fkeys",
    "a%2Fb",
    "%2F",
    "a%5Cb",
    "https%3A%2F%2Fevil.example%2F",
]


async def test_template_attacks_reach_the_upstream_as_data(serve, mode, base, upstream):
    cfg = write_config(base / "http.toml", upstream)
    async with serve(mode, config=cfg) as c:
        for value, target in ATTACKS:
            got = await c.read_one(f"api://weather/echo/{value}")
            want = f"GET {target} HTTP/1.1"
            assert got.text == want, (value, got.text)
            line, headers = upstream.requests()[-1]
            assert line == want
            assert "x-evil" not in headers
            assert headers["host"] == f"127.0.0.1:{upstream.port}"
        before = len(upstream.requests())
        for value in ["..", ".", "%2e%2e", "%2E"]:
            err = await c.error_of(c.client.read_resource(f"api://weather/echo/{value}"))
            assert err.code == INVALID_PARAMS, (value, err.code, err.message)
        for value in ENCODED_SEPARATORS:
            err = await c.error_of(c.client.read_resource(f"api://weather/echo/{value}"))
            assert err.code == INVALID_PARAMS, (value, err.code, err.message)
            assert "allow_encoded_slash" in err.message or "`..`" in err.message, (value, err.message)
        for uri in ["api://weather/echo/a/b", "api://weather/echo/x?y=1"]:
            await c.assert_not_found(uri)
        assert len(upstream.requests()) == before, "refused reads reached the upstream"


async def test_private_addresses_refused_without_allow_private(serve, mode, base, upstream):
    cfg = write_config(base / "http.toml", upstream, allow_private=False)
    async with serve(mode, config=cfg) as c:
        for uri in ["api://weather/beijing/current", upstream.base + "/docs/index.html"]:
            err = await c.error_of(c.client.read_resource(uri))
            assert err.code == INVALID_PARAMS, (uri, err.code, err.message)
            assert "refused" in err.message and "non-public" in err.message, err.message
        assert upstream.requests() == [], "nothing may reach a loopback upstream"


async def test_subscription_fires_on_change_only(serve, mode, base, upstream):
    cfg = write_config(base / "http.toml", upstream)
    uri = "api://weather/beijing/current"
    async with serve(mode, config=cfg) as c:
        await c.read_one(uri)
        async with subscribed(c, uri) as sub:
            mark = c.notes.mark()
            assert await next_update(c, sub, mark, 1.0) is None, "notified without a change"
            conditional = [h for line, h in upstream.requests() if "/current/" in line and "if-none-match" in h]
            assert conditional, "polls are conditional when the upstream gave an ETag"
            upstream.set("/current/beijing", json.dumps({"t": 25}), "application/json", etag='"c2"')
            mark = c.notes.mark()
            assert await next_update(c, sub, mark, NOTIFY_WITHIN) == uri
            assert json.loads((await c.read_one(uri)).text) == {"t": 25}


async def test_secret_header_stays_out_of_answers_and_trace_log(serve, mode, base, upstream, monkeypatch, request):
    monkeypatch.setenv("MCPR_RUST_LOG", "trace")
    upstream.set("/forecast/shanghai", b"", "text/plain", status=503)
    cfg = write_config(base / "http.toml", upstream)
    answers: list[str] = []
    async with serve(mode, config=cfg) as c:
        listed, _ = await c.list_all()
        answers.append(repr(listed))
        answers.append(repr(await c.templates_all()))
        answers.append(repr(await c.read("api://weather/beijing/forecast")))
        err = await c.error_of(c.client.read_resource("api://weather/shanghai/forecast"))
        assert "503" in err.message and "error page" not in err.message, err.message
        answers.append(f"{err.code} {err.message} {err.data!r}")
    assert any(TOKEN in h.get("authorization", "") for _, h in upstream.requests()), "the upstream got the token"
    for text in answers:
        assert TOKEN not in text, text
    log_path = request.node._mcpr_logs[-1][0]
    log = log_path.read_text(errors="replace")
    assert "api://weather" in log, f"the trace log should mention the reads: {log[-2000:]}"
    assert TOKEN not in log
