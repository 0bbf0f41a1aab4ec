"""Streamable HTTP end to end: `mcp-resources serve ... --http 127.0.0.1:PORT`, both eras on
one endpoint, driven by the official SDK (`streamable_http_client`) and by raw HTTP (httpx2,
the HTTP library mcp 2.3.0 ships with) where the wire itself is under test.

SDK facts used here (mcp 2.3.0):
* `streamable_http_client(url, http_client=httpx2.AsyncClient(...), terminate_on_close=...)`
  is the transport; headers (the bearer token) go on the `httpx2.AsyncClient`. In legacy mode
  the SDK opens the GET stream after `initialize` and sends DELETE on exit when
  `terminate_on_close`; it logs "Session termination failed: N" unless the answer is 200 or
  204 (the server answers 204).
* 2026-07-28 POSTs carry `MCP-Protocol-Version`, `Mcp-Method` (and `Mcp-Name` for
  resources/read) headers and the client `_meta`; `raw_2026` below builds the same by hand.
* `CacheableResult.cache_scope` defaults to "private" in the SDK models, so whether the server
  *sent* it is checked with `model_fields_set`.

Every wait is bounded (5 s unless a test says why not), so a hang fails the test.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import ResourceTemplateReference

from conftest import (
    BIN,
    CALL_TIMEOUT,
    INVALID_PARAMS,
    NOT_FOUND,
    UPDATED,
    Conn,
    Notes,
    _leaves,
    canon,
    content_bytes,
    quote_path,
    rel_uri,
    toml_str,
    write,
)

pytestmark = pytest.mark.anyio

WAIT = 5.0
DEADLINE = 1.0  # a change is notified within 1 s
RELEASE = 2.0  # released subscriptions show in /metrics within 2 s
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "e2e-raw", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
TEXT = "Grüße, 世界! 🦀\n\ttabbed line\r\nCRLF line\r\nno trailing newline"
BINARY = bytes(range(256)) * 64 + b"\x00\xff\xfe\xc3\x28\xed\xa0\x80"


# --------------------------------------------------------------------------- config


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(v)


def write_http_config(
    path: Path,
    mounts: list[dict[str, Any]],
    *,
    server: dict[str, Any] | None = None,
    http: dict[str, Any] | None = None,
    bearer_tokens: list[str] | None = None,
    scoped_tokens: list[tuple[str, list[str]]] | None = None,
) -> Path:
    lines: list[str] = []
    if server:
        lines += ["[server]", *(f"{k} = {toml_value(v)}" for k, v in server.items()), ""]
    if http:
        lines += ["[http]", *(f"{k} = {toml_value(v)}" for k, v in http.items()), ""]
    if bearer_tokens is not None or scoped_tokens:
        lines.append("[http.auth]")
        if bearer_tokens is not None:
            lines.append(f"bearer_tokens = {toml_value(bearer_tokens)}")
        for token, scopes in scoped_tokens or []:
            lines += ["", "[[http.auth.scoped_token]]", f"token = {toml_str(token)}", f"scopes = {toml_value(scopes)}"]
        lines.append("")
    for m in mounts:
        lines += ["", "[[mount]]", 'kind = "files"', *(f"{k} = {toml_value(v)}" for k, v in m.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- server process


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out


@dataclass
class HttpServer:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    path: str = "/mcp"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + self.path

    def stderr(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def metrics(self) -> dict[str, float]:
        async with httpx2.AsyncClient(timeout=WAIT) as h:
            r = await h.get(self.base + "/metrics")
        assert r.status_code == 200, f"/metrics answered {r.status_code}: {r.text[:300]}"
        return parse_metrics(r.text)

    async def wait_metrics(self, want: dict[str, float], timeout: float = RELEASE) -> dict[str, float]:
        """Poll /metrics until every key has the wanted value; fail naming what differs."""
        deadline = time.monotonic() + timeout
        while True:
            got = await self.metrics()
            diff = {k: got.get(k) for k, v in want.items() if got.get(k) != v}
            if not diff:
                return got
            if time.monotonic() >= deadline:
                raise AssertionError(f"/metrics after {timeout}s: wanted {want}, differing: {diff}")
            await anyio.sleep(0.05)


class HttpServeFactory:
    """Starts `mcp-resources serve ... --http 127.0.0.1:PORT` processes; kills leftovers at teardown."""

    def __init__(self, request: pytest.FixtureRequest, logdir: Path):
        self._request = request
        self._logdir = logdir
        self._procs: list[subprocess.Popen[bytes]] = []
        self._n = 0

    def spawn(
        self,
        *paths: os.PathLike[str] | str,
        config: os.PathLike[str] | str | None = None,
        listen: str | None = None,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
        path: str = "/mcp",
    ) -> HttpServer:
        port = free_port()
        args = ["serve", *[os.fspath(p) for p in paths]]
        if config is not None:
            args += ["--config", os.fspath(config)]
        args += ["--http", listen or f"127.0.0.1:{port}", *(extra or [])]
        if listen is not None:
            port = int(listen.rpartition(":")[2])
        full_env = dict(os.environ)
        full_env.pop("RUST_LOG", None)
        if "MCPR_RUST_LOG" in os.environ:
            full_env["RUST_LOG"] = os.environ["MCPR_RUST_LOG"]
        full_env.update(env or {})
        self._n += 1
        log_path = self._logdir / f"http-server-{self._n}.stderr"
        logs = getattr(self._request.node, "_mcpr_logs", [])
        logs.append((log_path, " ".join([os.fspath(BIN), *args])))
        self._request.node._mcpr_logs = logs
        with open(log_path, "wb") as errlog:
            proc = subprocess.Popen(
                [os.fspath(BIN), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errlog,
                env=full_env,
            )
        self._procs.append(proc)
        return HttpServer(proc, port, log_path, path)

    def start(self, *paths: os.PathLike[str] | str, **kw: Any) -> HttpServer:
        """Spawn and wait (at most 5 s) for `GET /healthz` to answer 200."""
        srv = self.spawn(*paths, **kw)
        deadline = time.monotonic() + WAIT
        with httpx2.Client(timeout=0.5) as h:
            while True:
                rc = srv.proc.poll()
                if rc is not None:
                    raise AssertionError(f"server exited with {rc} before serving:\n{srv.stderr()[-2000:]}")
                try:
                    if h.get(srv.base + "/healthz").status_code == 200:
                        return srv
                except httpx2.TransportError:
                    pass
                if time.monotonic() >= deadline:
                    raise AssertionError(f"/healthz did not answer 200 within {WAIT}s:\n{srv.stderr()[-2000:]}")
                time.sleep(0.02)

    def close(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=WAIT)


@pytest.fixture
def http_serve(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    factory = HttpServeFactory(request, tmp_path_factory.mktemp("httplogs"))
    yield factory
    factory.close()


# --------------------------------------------------------------------------- SDK over HTTP


@dataclass
class HttpConn(Conn):
    session_ids: list[str] = field(default_factory=list)


@asynccontextmanager
async def connect(
    srv: HttpServer, mode: str, *, token: str | None = None, terminate: bool = True
) -> AsyncIterator[HttpConn]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    seen: list[str] = []

    async def on_response(resp: httpx2.Response) -> None:
        sid = resp.headers.get("mcp-session-id")
        if sid and sid not in seen:
            seen.append(sid)

    http = httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(CALL_TIMEOUT, read=120),
        event_hooks={"response": [on_response]},
    )
    notes = Notes()
    client = Client(
        streamable_http_client(srv.url, http_client=http, terminate_on_close=terminate),
        mode=mode,
        message_handler=notes.handler,
        cache=None,
        read_timeout_seconds=CALL_TIMEOUT,
    )
    try:
        async with http, client:
            yield HttpConn(client, mode, notes, seen)
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


# --------------------------------------------------------------------------- raw HTTP


def raw_client(**kw: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(timeout=httpx2.Timeout(WAIT), **kw)


def parse_sse(text: str) -> list[tuple[str | None, str]]:
    """(id, data) of each event in a complete SSE body."""
    out = []
    for block in re.split(r"\r?\n\r?\n", text):
        ev_id, data = None, []
        for line in block.splitlines():
            if line.startswith("id:"):
                ev_id = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if ev_id is not None or data:
            out.append((ev_id, "\n".join(data)))
    return out


def messages_of(resp: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages in a POST response, whether JSON or SSE."""
    ctype = resp.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        body = resp.json()
        return body if isinstance(body, list) else [body]
    assert ctype.startswith("text/event-stream"), f"unexpected content-type {ctype!r}: {resp.text[:300]}"
    return [json.loads(d) for _, d in parse_sse(resp.text) if d.strip()]


def reply_to(resp: httpx2.Response, req_id: int) -> dict[str, Any]:
    msgs = [m for m in messages_of(resp) if m.get("id") == req_id]
    assert len(msgs) == 1, f"expected one reply to id {req_id}, got {messages_of(resp)!r:.500}"
    return msgs[0]


def legacy_headers(session: str | None = None, **extra: str) -> dict[str, str]:
    h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if session is not None:
        h["Mcp-Session-Id"] = session
        h["MCP-Protocol-Version"] = LEGACY
    h.update(extra)
    return h


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "e2e-raw", "version": "1"}},
}


async def raw_initialize(h: httpx2.AsyncClient, srv: HttpServer, **extra: str) -> str:
    """A legacy session by hand: initialize + notifications/initialized; returns its id."""
    r = await h.post(srv.url, json=INIT, headers=legacy_headers(**extra))
    assert r.status_code == 200, f"initialize answered {r.status_code}: {r.text[:300]}"
    sid = r.headers.get("mcp-session-id")
    assert sid, f"initialize answer carries no Mcp-Session-Id: {dict(r.headers)}"
    assert reply_to(r, 1)["result"]["protocolVersion"] == LEGACY
    r = await h.post(
        srv.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=legacy_headers(sid, **extra)
    )
    assert r.status_code == 202, f"notifications/initialized answered {r.status_code}: {r.text[:300]}"
    return sid


async def raw_legacy_call(
    h: httpx2.AsyncClient, srv: HttpServer, sid: str, req_id: int, method: str, params: dict[str, Any]
) -> dict[str, Any]:
    r = await h.post(
        srv.url,
        json={"jsonrpc": "2.0", "id": req_id, "method": method, "params": params},
        headers=legacy_headers(sid),
    )
    assert r.status_code == 200, f"{method} answered {r.status_code}: {r.text[:300]}"
    return reply_to(r, req_id)


def raw_2026(method: str, params: dict[str, Any], req_id: int = 1, **extra: str) -> dict[str, Any]:
    """kwargs for `httpx2.AsyncClient.post` carrying one 2026-07-28 request."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if method == "resources/read":
        headers["Mcp-Name"] = params["uri"]
    headers.update(extra)
    body = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": {**params, "_meta": MODERN_META}}
    return {"json": body, "headers": headers}


class SseReader:
    """Consumes an SSE response in a background task, so waits can time out without
    tearing down the stream."""

    def __init__(self) -> None:
        self.events: list[httpx2.ServerSentEvent] = []
        self.ended = False
        self.error: Exception | None = None

    async def run(self, resp: httpx2.Response) -> None:
        try:
            async for ev in httpx2.EventSource(resp):
                self.events.append(ev)
        except Exception as e:  # noqa: BLE001 - recorded for the assertion messages
            self.error = e
        finally:
            self.ended = True

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(ev.data) for ev in self.events if ev.data.strip()]

    def updates(self, uri: str) -> list[dict[str, Any]]:
        return [m for m in self.messages() if m.get("method") == UPDATED and m.get("params", {}).get("uri") == uri]

    async def wait(self, pred, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not pred():
            if self.ended or time.monotonic() >= deadline:
                return bool(pred())
            await anyio.sleep(0.02)
        return True


def sse_headers(sid: str, **extra: str) -> dict[str, str]:
    return {"Accept": "text/event-stream", "Mcp-Session-Id": sid, "MCP-Protocol-Version": LEGACY, **extra}


STREAM_TIMEOUT = httpx2.Timeout(WAIT, read=None)  # streams are bounded by the test's own waits


def templates_for(root: Path) -> list[str]:
    q = quote_path(canon(root))
    return [f"file://{q}/{{+path}}", f"file://{q}/{{+path}}{{?offset,length,head,tail}}"]


# =========================================================================== 1. both eras


async def test_http_list_read_templates_completion_not_found(http_serve, mode, base):
    root = base / "root"
    names = ["a.txt", "b/c.txt", "b/d e.txt", "bin.dat", "sub/file1.txt", "sub/file2.txt", "sub/other.txt"]
    for n in names:
        write(root / n, f"content of {n}\n")
    write(root / "a.txt", TEXT)
    write(root / "bin.dat", BINARY)
    cfg = write_http_config(base / "c.toml", [{"root": str(root)}], server={"page_size": 3})
    srv = http_serve.start(config=cfg)
    async with connect(srv, mode) as c:
        listed, sizes = await c.list_all()
        assert [r.name for r in listed] == names
        assert [r.uri for r in listed] == [rel_uri(root, n) for n in names]
        assert sizes == [3, 3, 1]

        text = await c.read_one(rel_uri(root, "a.txt"))
        assert text.uri == rel_uri(root, "a.txt")
        assert text.text == TEXT
        blob = await c.read_one(rel_uri(root, "bin.dat"))
        assert getattr(blob, "blob", None) is not None, "binary data must be a base64 blob"
        assert content_bytes(blob) == BINARY

        assert sorted(t.uri_template for t in await c.templates_all()) == sorted(templates_for(root))

        ref = ResourceTemplateReference(type="ref/resource", uri=templates_for(root)[0])
        done = await c.call(c.client.complete(ref, {"name": "path", "value": "sub/fi"}))
        assert done.completion.values == ["sub/file1.txt", "sub/file2.txt"]

        await c.assert_not_found(rel_uri(root, "missing.txt"))
        await c.assert_not_found(rel_uri(root, "b/nope/deeper.txt"))


async def test_2026_single_replies_are_json(http_serve, base):
    """2026-07-28 is stateless: no session id; a one-message reply is plain JSON."""
    root = base / "root"
    write(root / "f.txt", "hello\n")
    uri = rel_uri(root, "f.txt")
    srv = http_serve.start(str(root))
    async with raw_client() as h:
        r = await h.post(srv.url, **raw_2026("resources/read", {"uri": uri}))
        assert r.status_code == 200, r.text[:300]
        assert r.headers.get("content-type", "").split(";")[0] == "application/json"
        assert "mcp-session-id" not in r.headers
        body = r.json()
        assert body["id"] == 1
        assert body["result"]["contents"] == [{"uri": uri, "mimeType": "text/plain", "text": "hello\n"}]
        r = await h.post(srv.url, **raw_2026("resources/read", {"uri": rel_uri(root, "nope.txt")}, req_id=2))
        assert r.headers.get("content-type", "").split(";")[0] == "application/json"
        err = r.json()["error"]
        assert err["code"] == NOT_FOUND[MODERN]
        assert err["data"]["uri"] == rel_uri(root, "nope.txt")


async def test_custom_endpoint_path(http_serve, base):
    root = base / "root"
    write(root / "f.txt", "x")
    cfg = write_http_config(base / "c.toml", [{"root": str(root)}], http={"path": "/custom/mcp"})
    srv = http_serve.start(config=cfg, path="/custom/mcp")
    async with connect(srv, MODERN) as c:
        assert (await c.read_one(rel_uri(root, "f.txt"))).text == "x"
    async with raw_client() as h:
        r = await h.post(srv.base + "/mcp", **raw_2026("resources/list", {}))
        assert r.status_code == 404, f"/mcp should not be served when [http] path moves it: {r.status_code}"


# =========================================================================== 2. legacy sessions


async def test_legacy_subscribe_update_then_delete_releases(http_serve, base):
    root = base / "root"
    p = write(root / "watched.txt", "v1\n")
    uri = rel_uri(root, "watched.txt")
    srv = http_serve.start(str(root))
    async with connect(srv, "legacy", terminate=False) as c:
        await c.call(c.client.subscribe_resource(uri))
        await srv.wait_metrics({"mcp_sessions": 1, "mcp_subscribers": 1, "mcp_watched_resources": 1})
        mark = c.notes.mark()
        p.write_text("v2\n")
        note = await c.notes.wait_for(lambda n: n.method == UPDATED and n.uri == uri, DEADLINE, mark)
        assert note is not None, f"no {UPDATED} within {DEADLINE}s: {[(n.method, n.params) for n in c.notes.since(mark)]}"
        assert len(c.session_ids) == 1, c.session_ids
        sid = c.session_ids[0]
    # The client went away without DELETE: the session and its subscription live on.
    await anyio.sleep(0.3)
    await srv.wait_metrics({"mcp_sessions": 1, "mcp_subscribers": 1, "mcp_watched_resources": 1})
    async with raw_client() as h:
        r = await h.delete(srv.url, headers=legacy_headers(sid))
        # 204, not rmcp's 202: the SDK logs a 202 as a failed termination (issue #20).
        assert r.status_code == 204, f"DELETE answered {r.status_code}: {r.text[:300]}"
        await srv.wait_metrics(
            {"mcp_sessions": 0, "mcp_subscribers": 0, "mcp_watched_resources": 0, "mcp_list_listeners": 0}
        )
        r = await h.post(
            srv.url, json={"jsonrpc": "2.0", "id": 9, "method": "ping"}, headers=legacy_headers(sid)
        )
        assert r.status_code == 404, f"a request on a deleted session should get 404, got {r.status_code}"


async def test_sdk_session_termination_is_not_a_failure(http_serve, base, caplog):
    """The SDK's DELETE on exit is answered 204, so it logs no failed termination (it did for
    rmcp's 202), and the session is gone."""
    root = base / "root"
    write(root / "f.txt", "x\n")
    srv = http_serve.start(str(root))
    caplog.set_level("DEBUG", logger="mcp")
    async with connect(srv, "legacy") as c:
        assert (await c.read_one(rel_uri(root, "f.txt"))).text == "x\n"
        await srv.wait_metrics({"mcp_sessions": 1})
    failed = [r.getMessage() for r in caplog.records if "termination failed" in r.getMessage()]
    assert failed == [], failed
    await srv.wait_metrics({"mcp_sessions": 0})


async def test_listen_streams_per_client_limit(http_serve, base):
    """One listen stream more than `max_listen_streams_per_client` ends with an error naming
    the setting; closing a stream makes room."""
    root = base / "root"
    write(root / "f.txt", "1\n")
    uri = rel_uri(root, "f.txt")
    cfg = write_http_config(base / "c.toml", [{"root": str(root)}], server={"max_listen_streams_per_client": 1})
    srv = http_serve.start(config=cfg)
    async with connect(srv, MODERN) as c:
        async with c.client.listen(resource_subscriptions=[uri]):
            await srv.wait_metrics({"mcp_listen_streams": 1})
            # The error arrives after the acknowledgment, so the SDK reports the stream as
            # lost, with the server's error as the cause.
            with pytest.raises(SubscriptionLost) as refused:
                with anyio.fail_after(DEADLINE):
                    async with c.client.listen(resource_subscriptions=[uri]) as second:
                        await second.__anext__()
            cause = refused.value.__cause__
            assert isinstance(cause, MCPError), repr(cause)
            assert "max_listen_streams_per_client" in cause.error.message, cause.error
        await srv.wait_metrics({"mcp_listen_streams": 0, "mcp_watched_resources": 0})
        async with c.client.listen(resource_subscriptions=[uri]):
            await srv.wait_metrics({"mcp_listen_streams": 1})


async def test_legacy_max_subscriptions_per_session(http_serve, base):
    root = base / "root"
    for n in "abc":
        write(root / f"{n}.txt", n)
    cfg = write_http_config(base / "c.toml", [{"root": str(root)}], server={"max_subscriptions_per_session": 2})
    srv = http_serve.start(config=cfg)
    async with connect(srv, "legacy") as c:
        await c.call(c.client.subscribe_resource(rel_uri(root, "a.txt")))
        await c.call(c.client.subscribe_resource(rel_uri(root, "b.txt")))
        err = await c.error_of(c.client.subscribe_resource(rel_uri(root, "c.txt")))
        assert err.code == INVALID_PARAMS, (err.code, err.message)
        assert "max_subscriptions_per_session" in err.message, err.message
        # Re-subscribing to one already held is not a new subscription.
        await c.call(c.client.subscribe_resource(rel_uri(root, "a.txt")))


async def test_legacy_idle_session_expires_and_releases(http_serve, base):
    root = base / "root"
    write(root / "f.txt", "x")
    cfg = write_http_config(base / "c.toml", [{"root": str(root)}], http={"session_idle_timeout_ms": 1000})
    srv = http_serve.start(config=cfg)
    async with raw_client() as h:
        sid = await raw_initialize(h, srv)
        reply = await raw_legacy_call(h, srv, sid, 2, "resources/subscribe", {"uri": rel_uri(root, "f.txt")})
        assert reply.get("result") == {}, reply
        await srv.wait_metrics({"mcp_sessions": 1, "mcp_subscribers": 1, "mcp_watched_resources": 1}, 0.5)
        # Idle for 1 s: the session is closed and its subscription released (1 s + slack).
        await srv.wait_metrics({"mcp_sessions": 0, "mcp_subscribers": 0, "mcp_watched_resources": 0}, WAIT)
        r = await h.post(srv.url, json={"jsonrpc": "2.0", "id": 3, "method": "ping"}, headers=legacy_headers(sid))
        assert r.status_code == 404, f"a request on an expired session should get 404, got {r.status_code}"


# =========================================================================== 3. resumption


async def _resume_scenario(srv: HttpServer, root: Path, p: Path, *, from_priming: bool) -> None:
    uri = rel_uri(root, "f.txt")
    async with raw_client() as h:
        sid = await raw_initialize(h, srv)
        last_id: str | None = None
        async with h.stream("GET", srv.url, headers=sse_headers(sid), timeout=STREAM_TIMEOUT) as resp:
            assert resp.status_code == 200, f"GET stream answered {resp.status_code}"
            assert resp.headers.get("content-type", "").startswith("text/event-stream")
            reader = SseReader()
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run, resp)
                assert await reader.wait(lambda: len(reader.events) >= 1, WAIT), (
                    f"no priming event on the GET stream within {WAIT}s (error: {reader.error!r})"
                )
                priming = reader.events[0]
                if from_priming:
                    assert priming.id, (
                        f"the GET stream's priming event carries no event id, so a client cannot resume "
                        f"from it: {priming!r}"
                    )
                    last_id = priming.id
                reply = await raw_legacy_call(h, srv, sid, 2, "resources/subscribe", {"uri": uri})
                assert reply.get("result") == {}, reply
                if not from_priming:
                    # One change delivered live; its event id is where we resume from.
                    await anyio.sleep(0.1)
                    p.write_text("live\n")
                    assert await reader.wait(lambda: reader.updates(uri), DEADLINE), (
                        f"no live {UPDATED} on the GET stream: {reader.events!r}"
                    )
                    await anyio.sleep(0.3)
                    ev = [e for e in reader.events if e.data.strip() and json.loads(e.data).get("method") == UPDATED][-1]
                    assert ev.id, f"a notification on the GET stream carries no event id: {ev!r}"
                    last_id = ev.id
                tg.cancel_scope.cancel()
        # The GET stream is dropped. Two changes while away, each well past the debounce.
        await anyio.sleep(0.3)
        p.write_text("away 1\n")
        await anyio.sleep(0.6)
        p.write_text("away 2 (longer)\n")
        await anyio.sleep(0.6)
        assert last_id is not None
        async with h.stream(
            "GET", srv.url, headers=sse_headers(sid, **{"Last-Event-ID": last_id}), timeout=STREAM_TIMEOUT
        ) as resp:
            assert resp.status_code == 200, f"resuming GET answered {resp.status_code}"
            reader = SseReader()
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run, resp)
                await reader.wait(lambda: len(reader.updates(uri)) >= 2, WAIT)
                tg.cancel_scope.cancel()
        got = reader.updates(uri)
        if not from_priming:
            again = [e for e in reader.events if e.id == last_id and e.data.strip()]
            assert again == [], (
                f"the replay after Last-Event-ID {last_id!r} re-delivered that event itself: {again!r}; "
                f"all replayed: {reader.events!r}"
            )
        assert len(got) == 2, (
            f"resuming with Last-Event-ID {last_id!r} should replay both {UPDATED} sent while away; "
            f"got {len(got)}; events: {reader.events!r}; stream error: {reader.error!r}"
        )


async def test_legacy_resume_from_priming_event_replays_missed(http_serve, base):
    root = base / "root"
    p = write(root / "f.txt", "v1\n")
    srv = http_serve.start(str(root))
    await _resume_scenario(srv, root, p, from_priming=True)


async def test_legacy_resume_from_notification_replays_missed(http_serve, base):
    """The same resumption, from the id of a notification received before the drop (isolates
    replay from the priming event)."""
    root = base / "root"
    p = write(root / "f.txt", "v1\n")
    srv = http_serve.start(str(root))
    await _resume_scenario(srv, root, p, from_priming=False)


# =========================================================================== 4. 2026 listen


async def test_2026_listen_update_and_close_releases(http_serve, base):
    root = base / "root"
    p = write(root / "f.txt", "1\n")
    uri = rel_uri(root, "f.txt")
    srv = http_serve.start(str(root))
    async with connect(srv, MODERN) as c:
        async with c.client.listen(resource_subscriptions=[uri]) as sub:
            assert sub.honored.resource_subscriptions == [uri], sub.honored
            await srv.wait_metrics({"mcp_subscribers": 1, "mcp_watched_resources": 1})
            p.write_text("2\n")
            with anyio.move_on_after(DEADLINE):
                ev = await sub.__anext__()
            assert ev == ResourceUpdated(uri=uri), f"expected ResourceUpdated({uri}) within {DEADLINE}s"
        await srv.wait_metrics({"mcp_watched_resources": 0, "mcp_subscribers": 0})
        assert (await c.read_one(uri)).text == "2\n"
    assert (await srv.metrics())["mcp_sessions"] == 0, "2026-07-28 must not create legacy sessions"


async def test_2026_raw_listen_stream_close_releases(http_serve, base):
    """Closing the HTTP response of a subscriptions/listen (no cancel message) releases it."""
    root = base / "root"
    p = write(root / "f.txt", "1\n")
    uri = rel_uri(root, "f.txt")
    srv = http_serve.start(str(root))
    async with raw_client() as h:
        kw = raw_2026("subscriptions/listen", {"notifications": {"resourceSubscriptions": [uri]}})
        async with h.stream("POST", srv.url, timeout=STREAM_TIMEOUT, **kw) as resp:
            assert resp.status_code == 200
            assert resp.headers.get("content-type", "").startswith("text/event-stream")
            reader = SseReader()
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run, resp)
                await srv.wait_metrics({"mcp_subscribers": 1, "mcp_watched_resources": 1})
                await anyio.sleep(0.1)
                p.write_text("2\n")
                assert await reader.wait(lambda: reader.updates(uri), DEADLINE), reader.events
                tg.cancel_scope.cancel()
    await srv.wait_metrics({"mcp_watched_resources": 0, "mcp_subscribers": 0})


# =========================================================================== 5. auth


@dataclass
class AuthSetup:
    srv: HttpServer
    public_url: str
    docs: Path
    finance: Path
    token: str = "unscoped-Tok3n-0123456789"
    docs_token: str = "docs-Tok3n-9876543210"


def start_auth_server(http_serve: HttpServeFactory, base: Path) -> AuthSetup:
    docs, finance = base / "docs", base / "finance"
    write(docs / "guide.md", "# guide\n")
    write(docs / "b.txt", "docs b\n")
    write(finance / "ledger.csv", "a,b\n1,2\n")
    port = free_port()
    public_url = f"http://127.0.0.1:{port}/mcp"
    setup = AuthSetup(None, public_url, docs, finance)  # type: ignore[arg-type]
    token_file = write(base / "tokens", f"# tokens\n\n{setup.token}\n")
    cfg = write_http_config(
        base / "auth.toml",
        [{"root": str(docs), "scope": "docs"}, {"root": str(finance), "scope": "finance"}],
        http={"public_url": public_url},
        bearer_tokens=[f"file:{token_file}"],
        scoped_tokens=[("env:DOCS_TOKEN", ["docs"])],
    )
    setup.srv = http_serve.start(config=cfg, listen=f"127.0.0.1:{port}", env={"DOCS_TOKEN": setup.docs_token})
    return setup


def www_authenticate(resp: httpx2.Response) -> dict[str, str]:
    value = resp.headers.get("www-authenticate", "")
    assert value.startswith("Bearer"), f"WWW-Authenticate should be a Bearer challenge: {value!r}"
    return dict(re.findall(r'([a-z_]+)="([^"]*)"', value))


async def test_auth_tokens_and_metadata(http_serve, base):
    a = start_auth_server(http_serve, base)
    srv = a.srv
    metadata_url = f"http://127.0.0.1:{srv.port}/.well-known/oauth-protected-resource/mcp"
    async with raw_client() as h:
        kw = raw_2026("resources/list", {})
        r = await h.post(srv.url, **kw)
        assert r.status_code == 401, f"no token: {r.status_code} {r.text[:200]}"
        assert www_authenticate(r).get("resource_metadata") == metadata_url, r.headers.get("www-authenticate")

        r = await h.post(srv.url, json=kw["json"], headers={**kw["headers"], "Authorization": "Bearer not-a-token"})
        assert r.status_code == 401, f"wrong token: {r.status_code}"
        params = www_authenticate(r)
        assert params.get("error") == "invalid_token", r.headers.get("www-authenticate")
        assert params.get("resource_metadata") == metadata_url

        # A prefix of a valid token is not a valid token.
        r = await h.post(srv.url, json=kw["json"], headers={**kw["headers"], "Authorization": f"Bearer {a.token[:-1]}"})
        assert r.status_code == 401

        for tok in (a.token, a.docs_token):
            r = await h.post(srv.url, json=kw["json"], headers={**kw["headers"], "Authorization": f"Bearer {tok}"})
            assert r.status_code == 200, f"valid token refused: {r.status_code} {r.text[:200]}"

        r = await h.post(srv.url, json=INIT, headers=legacy_headers())
        assert r.status_code == 401, f"legacy initialize without a token: {r.status_code}"

        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            r = await h.get(srv.base + path)
            assert r.status_code == 200, f"{path}: {r.status_code}"
            assert r.headers.get("content-type", "").startswith("application/json")
            assert r.json()["resource"] == a.public_url, r.json()


async def test_auth_unscoped_token_sees_every_mount(http_serve, mode, base):
    a = start_auth_server(http_serve, base)
    async with connect(a.srv, mode, token=a.token) as c:
        listed, _ = await c.list_all()
        assert sorted(r.uri for r in listed) == sorted(
            [rel_uri(a.docs, "b.txt"), rel_uri(a.docs, "guide.md"), rel_uri(a.finance, "ledger.csv")]
        )
        assert sorted(t.uri_template for t in await c.templates_all()) == sorted(
            templates_for(a.docs) + templates_for(a.finance)
        )
        assert (await c.read_one(rel_uri(a.finance, "ledger.csv"))).text == "a,b\n1,2\n"


async def test_auth_scoped_token_sees_only_its_mounts(http_serve, mode, base):
    a = start_auth_server(http_serve, base)
    fin_uri = rel_uri(a.finance, "ledger.csv")
    async with connect(a.srv, mode, token=a.docs_token) as c:
        page = await c.list_page()
        listed, _ = await c.list_all()
        assert sorted(r.uri for r in listed) == sorted([rel_uri(a.docs, "b.txt"), rel_uri(a.docs, "guide.md")])
        assert sorted(t.uri_template for t in await c.templates_all()) == sorted(templates_for(a.docs))
        assert (await c.read_one(rel_uri(a.docs, "guide.md"))).text == "# guide\n"
        await c.assert_not_found(fin_uri)
        await c.assert_not_found(rel_uri(a.finance, "nonexistent.csv"))
        if mode == "legacy":
            err = await c.error_of(c.client.subscribe_resource(fin_uri))
            assert err.code == NOT_FOUND["legacy"], (err.code, err.message)
            assert isinstance(err.data, dict) and err.data.get("uri") == fin_uri, err.data
            return
        # 2026-07-28: answers depend on who asks.
        read = await c.read(rel_uri(a.docs, "guide.md"))
        for what, result in (("resources/list", page), ("resources/read", read)):
            assert "cache_scope" in result.model_fields_set, f"{what}: the server sent no cacheScope"
            assert result.cache_scope == "private", f"{what}: cacheScope {result.cache_scope!r}"
        # Subscribing to a hidden resource: not-found (-32602), or at least not honoured, as for
        # a URI no mount serves; and never a notification.
        try:
            async with c.client.listen(resource_subscriptions=[fin_uri]) as sub:
                honored = list(sub.honored.resource_subscriptions or [])
                await anyio.sleep(0.2)
                (a.finance / "ledger.csv").write_text("changed\n")
                with anyio.move_on_after(DEADLINE):
                    leaked = await sub.__anext__()
                    raise AssertionError(f"a scoped token was notified about a hidden mount: {leaked!r}")
        except MCPError as e:
            assert e.code == NOT_FOUND[MODERN], (e.code, e.message)
            assert isinstance(e.data, dict) and e.data.get("uri") == fin_uri, e.data
        else:
            assert fin_uri not in honored, (
                f"subscriptions/listen acknowledged a URI of a mount the token may not see "
                f"(honored={honored}); expected -32602 not-found or omission from the acknowledgment"
            )


async def test_literal_token_in_config_is_refused(http_serve, base):
    root = base / "root"
    write(root / "f.txt", "x")
    secret = "literal-S3cret-in-config"
    cfg = base / "bad.toml"
    cfg.write_text(
        "[http]\n"
        "[http.auth]\n"
        f"bearer_tokens = [{toml_str(secret)}]\n"  # line 3
        "\n[[mount]]\nkind = \"files\"\n"
        f"root = {toml_str(str(root))}\n"
    )
    srv = http_serve.spawn(config=cfg)
    try:
        rc = srv.proc.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        raise AssertionError("the server started with a literal token in its config") from None
    err = srv.stderr()
    assert rc != 0
    assert f"{cfg}:3" in err, f"the error should name {cfg}:3: {err!r}"
    assert secret not in err, "the error message echoes the secret"


# =========================================================================== 6. Host / Origin


async def test_host_and_origin_checks(http_serve, base):
    root = base / "root"
    write(root / "f.txt", "x")
    srv = http_serve.start(str(root))
    kw = raw_2026("resources/list", {})

    async def status(**headers: str) -> int:
        async with raw_client() as h:
            r = await h.post(srv.url, json=kw["json"], headers={**kw["headers"], **headers})
            return r.status_code

    assert await status() == 200
    for host in ("evil.example.com", f"evil.example.com:{srv.port}", f"10.0.0.1:{srv.port}"):
        assert await status(Host=host) == 403, f"Host {host!r} accepted"
    for host in (f"localhost:{srv.port}", f"127.0.0.1:{srv.port}", f"[::1]:{srv.port}", "localhost"):
        assert await status(Host=host) == 200, f"loopback Host {host!r} refused"
    for origin in ("https://evil.example.com", "http://evil.example.com:5173", "null"):
        assert await status(Origin=origin) == 403, f"Origin {origin!r} accepted"
    for origin in ("http://localhost:5173", "http://127.0.0.1:3000", f"http://localhost:{srv.port}"):
        assert await status(Origin=origin) == 200, f"local Origin {origin!r} refused"
    # The legacy era is guarded the same way.
    async with raw_client() as h:
        r = await h.post(srv.url, json=INIT, headers=legacy_headers(Origin="https://evil.example.com"))
        assert r.status_code == 403
        r = await h.post(srv.url, json=INIT, headers=legacy_headers(Host="evil.example.com"))
        assert r.status_code == 403


async def test_configured_hosts_and_origins(http_serve, base):
    root = base / "root"
    write(root / "f.txt", "x")
    cfg = write_http_config(
        base / "c.toml",
        [{"root": str(root)}],
        http={"allowed_hosts": ["mcp.example.test"], "allowed_origins": ["https://app.example.test"]},
    )
    srv = http_serve.start(config=cfg)
    kw = raw_2026("resources/list", {})
    async with raw_client() as h:

        async def status(**headers: str) -> int:
            return (await h.post(srv.url, json=kw["json"], headers={**kw["headers"], **headers})).status_code

        assert await status(Host=f"mcp.example.test:{srv.port}") == 200
        assert await status(Host="evil.example.com") == 403
        assert await status(Host=f"mcp.example.test:{srv.port}", Origin="https://app.example.test") == 200
        assert await status(Host=f"mcp.example.test:{srv.port}", Origin="https://evil.example.com") == 403


# =========================================================================== 7. limits


async def test_oversized_body_413(http_serve, base):
    root = base / "root"
    write(root / "f.txt", "x")
    cfg = write_http_config(base / "c.toml", [{"root": str(root)}], http={"max_body_bytes": 2048})
    srv = http_serve.start(config=cfg)
    uri = rel_uri(root, "f.txt")
    async with raw_client() as h:
        r = await h.post(srv.url, **raw_2026("resources/read", {"uri": uri}))
        assert r.status_code == 200, "a small body must pass"
        kw = raw_2026("resources/read", {"uri": uri, "padding": "p" * 4096})
        r = await h.post(srv.url, **kw)
        assert r.status_code == 413, f"oversized body: {r.status_code} {r.text[:200]}"
        body = r.json()
        assert body.get("jsonrpc") == "2.0" and isinstance(body.get("error", {}).get("code"), int), body
        assert "max_body_bytes" in body["error"]["message"], body


async def test_rate_limit_429_with_retry_after(http_serve, base):
    root = base / "root"
    write(root / "f.txt", "x")
    cfg = write_http_config(
        base / "c.toml", [{"root": str(root)}], http={"rate_limit_per_second": 1, "rate_limit_burst": 3}
    )
    srv = http_serve.start(config=cfg)
    kw = raw_2026("resources/list", {})
    async with raw_client() as h:
        codes = [(await h.post(srv.url, **kw)).status_code for _ in range(3)]
        assert codes == [200, 200, 200], f"the burst should pass: {codes}"
        r = await h.post(srv.url, **kw)
        assert r.status_code == 429, f"beyond the burst: {r.status_code}"
        retry = r.headers.get("retry-after")
        assert retry is not None and retry.isdigit() and 1 <= int(retry) <= 5, f"Retry-After: {retry!r}"
        assert isinstance(r.json().get("error", {}).get("code"), int), r.text[:200]
        await anyio.sleep(int(retry))
        r = await h.post(srv.url, **kw)
        assert r.status_code == 200, f"after Retry-After the client may go on: {r.status_code}"


async def test_max_sessions_503(http_serve, base):
    root = base / "root"
    write(root / "f.txt", "x")
    cfg = write_http_config(base / "c.toml", [{"root": str(root)}], http={"max_sessions": 2})
    srv = http_serve.start(config=cfg)
    async with raw_client() as h:
        s1 = await raw_initialize(h, srv)
        await raw_initialize(h, srv)
        r = await h.post(srv.url, json=INIT, headers=legacy_headers())
        assert r.status_code == 503, f"a third session: {r.status_code} {r.text[:200]}"
        assert "max_sessions" in r.json()["error"]["message"], r.text[:300]
        # Existing sessions keep working; ending one makes room.
        assert "result" in await raw_legacy_call(h, srv, s1, 5, "resources/list", {})
        r = await h.delete(srv.url, headers=legacy_headers(s1))
        assert r.status_code in (200, 202, 204)
        await srv.wait_metrics({"mcp_sessions": 1})
        await raw_initialize(h, srv)
        # 2026-07-28 requests are not sessions and are not capped by max_sessions.
        r = await h.post(srv.url, **raw_2026("resources/list", {}))
        assert r.status_code == 200


# =========================================================================== 8. non-loopback


async def test_non_loopback_without_auth_is_refused(http_serve, base):
    root = base / "root"
    write(root / "f.txt", "x")
    port = free_port()
    srv = http_serve.spawn(str(root), listen=f"0.0.0.0:{port}")
    try:
        rc = srv.proc.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        raise AssertionError("the server started on 0.0.0.0 without authentication") from None
    err = srv.stderr()
    assert rc != 0
    assert "authentication" in err.lower(), err
    assert "--insecure-no-auth" in err, err

    srv = http_serve.start(str(root), listen=f"0.0.0.0:{free_port()}", extra=["--insecure-no-auth"])
    async with connect(srv, MODERN) as c:
        assert (await c.read_one(rel_uri(root, "f.txt"))).text == "x"


# =========================================================================== 9. graceful shutdown


BIG = 60 * 1024 * 1024
BIG_READ_TIMEOUT = 30.0
"""A 60 MiB read takes ~5 s in a debug build; the read itself gets this bound, everything
else stays at 5 s."""


def big_file(root: Path) -> tuple[Path, str]:
    chunk = hashlib.sha256(b"seed").digest() * 32768  # 1 MiB, not all one byte
    p = root / "big.bin"
    root.mkdir(parents=True, exist_ok=True)
    with open(p, "wb") as f:
        for i in range(BIG // len(chunk)):
            f.write(bytes([i % 256]) + chunk[1:])
    return p, hashlib.sha256(p.read_bytes()).hexdigest()


async def _read_in_flight_then_sigterm(srv: HttpServer, uri: str):
    """Start the big read, wait until /metrics shows it in flight, SIGTERM. Returns
    (response or exception, time of SIGTERM, time the response was complete, probe status)."""
    out: dict[str, Any] = {}

    async def do_read() -> None:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(BIG_READ_TIMEOUT)) as h:
            try:
                out["resp"] = await h.post(srv.url, **raw_2026("resources/read", {"uri": uri}))
            except Exception as e:  # noqa: BLE001
                out["resp"] = e
            out["done"] = time.monotonic()

    async with anyio.create_task_group() as tg:
        tg.start_soon(do_read)
        deadline = time.monotonic() + WAIT
        while (await srv.metrics()).get("mcp_http_inflight_requests", 0) < 1:
            assert "done" not in out, "the read finished before it could be observed in flight"
            assert time.monotonic() < deadline, "the read never showed in mcp_http_inflight_requests"
            await anyio.sleep(0.02)
        out["sigterm"] = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        await anyio.sleep(0.3)
        # New requests are refused while the in-flight one finishes.
        async with raw_client() as h:
            try:
                r = await h.post(srv.url, **raw_2026("resources/list", {}))
                out["probe"] = r.status_code
            except httpx2.TransportError as e:
                out["probe"] = f"connection error: {type(e).__name__}"
    return out


async def test_graceful_shutdown_finishes_read_in_flight(http_serve, base):
    root = base / "root"
    p, digest = big_file(root)
    uri = rel_uri(root, "big.bin") + f"?offset=0&length={BIG}"
    cfg = write_http_config(
        base / "c.toml",
        [{"root": str(root)}],
        server={"max_read_bytes": "64MiB", "request_timeout_ms": 60000},
        http={"shutdown_grace_ms": 30000},
    )
    srv = http_serve.start(config=cfg)
    out = await _read_in_flight_then_sigterm(srv, uri)
    resp = out["resp"]
    assert out["probe"] in (503,) or str(out["probe"]).startswith("connection error"), (
        f"a new request during shutdown got {out['probe']!r}, expected 503 or a refused connection"
    )
    assert isinstance(resp, httpx2.Response), f"the in-flight read failed: {resp!r}"
    assert resp.status_code == 200, resp.text[:300]
    assert out["done"] > out["sigterm"], "the read completed before SIGTERM; nothing was in flight"
    content = resp.json()["result"]["contents"]
    assert len(content) == 1
    data = base64.b64decode(content[0]["blob"], validate=True)
    assert len(data) == BIG and hashlib.sha256(data).hexdigest() == digest, "the read was not byte-exact"
    try:
        rc = srv.proc.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the server did not exit within {WAIT}s after the in-flight read finished") from None
    assert rc == 0, f"exit code {rc} after SIGTERM:\n{srv.stderr()[-2000:]}"


async def test_shutdown_grace_bounds_the_wait(http_serve, base):
    """With shutdown_grace_ms = 300 the server does not wait ~5 s for the big read."""
    root = base / "root"
    big_file(root)
    uri = rel_uri(root, "big.bin") + f"?offset=0&length={BIG}"
    cfg = write_http_config(
        base / "c.toml",
        [{"root": str(root)}],
        server={"max_read_bytes": "64MiB", "request_timeout_ms": 60000},
        http={"shutdown_grace_ms": 300},
    )
    srv = http_serve.start(config=cfg)
    out = await _read_in_flight_then_sigterm(srv, uri)
    # The read needs ~5 s; with a 300 ms grace the server must not wait for it. Cut off, it
    # answers a JSON-RPC error saying the server is shutting down (or, when its answer was
    # already on the way out, the connection is aborted): never contents.
    resp = out["resp"]
    # A machine fast enough to finish the read inside the grace may answer it: that is the
    # grace doing its job, not waiting past it (0.1 s for what the socket buffers still hold
    # when the last frame has left the server).
    within_grace = out["done"] - out["sigterm"] < 0.3 + 0.1
    if isinstance(resp, httpx2.Response) and resp.status_code == 200 and not within_grace:
        answer = resp.json()
        assert "result" not in answer, (
            f"the in-flight read completed {out['done'] - out['sigterm']:.2f}s after SIGTERM although "
            "shutdown_grace_ms = 300: the server waited for it"
        )
        assert "shutting down" in answer["error"]["message"], answer
    try:
        rc = srv.proc.wait(timeout=max(0.1, out["sigterm"] + WAIT - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the server had not exited {WAIT}s after SIGTERM") from None
    took = time.monotonic() - out["sigterm"]
    assert took <= 0.3 + 3.0, f"exit took {took:.2f}s after SIGTERM with shutdown_grace_ms = 300"
    assert rc == 0, f"exit code {rc}:\n{srv.stderr()[-2000:]}"


async def test_sigterm_closes_sse_streams_and_exits_0(http_serve, base):
    root = base / "root"
    write(root / "f.txt", "x")
    srv = http_serve.start(str(root))
    async with raw_client() as h:
        sid = await raw_initialize(h, srv)
        async with h.stream("GET", srv.url, headers=sse_headers(sid), timeout=STREAM_TIMEOUT) as resp:
            assert resp.status_code == 200
            reader = SseReader()
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.run, resp)
                await reader.wait(lambda: len(reader.events) >= 1, WAIT)
                srv.proc.send_signal(signal.SIGTERM)
                assert await reader.wait(lambda: reader.ended, WAIT), "the GET stream stayed open after SIGTERM"
                tg.cancel_scope.cancel()
    try:
        rc = srv.proc.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        raise AssertionError("the server did not exit within 5 s of SIGTERM with an open SSE stream") from None
    assert rc == 0, srv.stderr()[-2000:]


# =========================================================================== 10. health


async def test_healthz_and_readyz(http_serve, base):
    r1, r2 = base / "one", base / "two"
    write(r1 / "f.txt", "one\n")
    write(r2 / "g.txt", "two\n")
    srv = http_serve.start(str(r1), str(r2))
    async with raw_client() as h:
        r = await h.get(srv.base + "/healthz")
        assert (r.status_code, r.text.strip()) == (200, "ok")

        r = await h.get(srv.base + "/readyz")
        assert r.status_code == 200, r.text
        lines = r.text.strip().splitlines()
        assert len(lines) == 2, lines
        assert all(line.startswith("ready ") for line in lines), lines
        assert any(canon(r1) in line for line in lines) and any(canon(r2) in line for line in lines), lines

        shutil.rmtree(r2)
        deadline = time.monotonic() + WAIT
        while (r := await h.get(srv.base + "/readyz")).status_code == 200 and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert r.status_code == 503, f"/readyz {WAIT}s after a mount root was deleted: {r.status_code} {r.text!r}"
        lines = r.text.strip().splitlines()
        assert len(lines) == 2, lines
        (bad,) = [line for line in lines if canon(r2) in line]
        (good,) = [line for line in lines if canon(r1) in line]
        assert good.startswith("ready "), lines
        assert not bad.startswith("ready "), lines
        r = await h.get(srv.base + "/healthz")
        assert r.status_code == 200, "liveness does not depend on mounts"


GAUGES = (
    "mcp_sessions",
    "mcp_subscribers",
    "mcp_watched_resources",
    "mcp_list_listeners",
    "mcp_list_watch_active",
    "mcp_http_inflight_requests",
)


async def test_metrics_count_a_read(http_serve, base):
    root = base / "root"
    write(root / "f.txt", "one\n")
    srv = http_serve.start(str(root))
    before = await srv.metrics()
    key = 'mcp_requests_total{method="resources/read",outcome="ok"}'
    two_xx = 'mcp_http_responses_total{class="2xx"}'
    async with connect(srv, MODERN) as c:
        assert (await c.read_one(rel_uri(root, "f.txt"))).text == "one\n"
    after = await srv.metrics()
    assert after.get(key) == before.get(key, 0) + 1, (before.get(key), after.get(key))
    assert after.get(two_xx, 0) >= before.get(two_xx, 0) + 1, (before.get(two_xx), after.get(two_xx))
    assert any(
        k.startswith("mcp_request_duration_seconds_bucket{") and 'method="resources/read"' in k for k in after
    ), "no mcp_request_duration_seconds_bucket for resources/read"
    missing = [g for g in GAUGES if g not in after]
    assert missing == [], f"/metrics lacks gauges {missing}"
