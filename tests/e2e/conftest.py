"""End-to-end harness: drives the BUILT `mcp-resources` binary over real stdio with the
official Python MCP SDK (mcp==2.3.0), in both protocol eras.

SDK facts this harness relies on (verified against site-packages of mcp 2.3.0):

* `mcp.Client(server, *, mode=..., message_handler=..., cache=..., read_timeout_seconds=...)`
  (mcp/client/client.py). `server` may be any `Transport` (an async context manager yielding
  the stream pair), so we pass `stdio_client(params, errlog=<file>)` to capture the server's
  stderr per test. `mode="legacy"` runs the initialize handshake, `mode="2026-07-28"`
  adopts that version with a synthesized DiscoverResult (no wire traffic at connect).
* The client keeps a response cache by default (`cache=CacheConfig()`); we pass `cache=None`
  so every list/read reaches the server.
* Server notifications reach `message_handler(msg)` (mcp/client/session.py `_on_notify`) as
  typed models (`ResourceUpdatedNotification`, `ResourceListChangedNotification`, ...), in
  both eras; 2026 listen-stream frames are additionally demultiplexed into the
  `Subscription` returned by `Client.listen(...)` (mcp/client/subscriptions.py).
* JSON-RPC errors raise `mcp.shared.exceptions.MCPError` with `.code`, `.message`, `.data`.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("MCPR_BIN", str(REPO / "target" / "debug" / "mcp-resources")))

MODES = ["legacy", "2026-07-28"]
CALL_TIMEOUT = 5.0
"""Every request is wrapped in this, so a hang fails the test instead of the suite."""

NOT_FOUND = {"legacy": -32002, "2026-07-28": -32602}
INVALID_PARAMS = -32602

LIMIT_DEFAULT = 8 * 1024 * 1024

T = TypeVar("T")


# --------------------------------------------------------------------------- helpers


def canon(path: os.PathLike[str] | str) -> str:
    """Canonical absolute path (what the server uses as a root)."""
    return os.path.realpath(os.fspath(path))


def quote_path(path: str | bytes) -> str:
    """Percent-encode every byte outside `A-Z a-z 0-9 - . _ ~ /`, uppercase hex."""
    raw = path if isinstance(path, bytes) else os.fsencode(path)
    return urllib.parse.quote(raw, safe="/-._~")


def file_uri(path: str | bytes) -> str:
    """`file://` + percent-encoded absolute path. The path is used as given (not resolved),
    so a symlink's URI names the link."""
    return "file://" + quote_path(path)


def root_uri(root: os.PathLike[str] | str) -> str:
    return file_uri(canon(root))


def rel_uri(root: os.PathLike[str] | str, rel: str) -> str:
    """URI of `rel` (a `/`-separated path relative to `root`)."""
    return file_uri(canon(root) + "/" + rel)


def sort_key(rel: str) -> tuple[bytes, ...]:
    """Component-wise byte order of a root-relative path."""
    return tuple(os.fsencode(c) for c in rel.split("/"))


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


def mime_base(mime: str | None) -> str | None:
    return None if mime is None else mime.split(";")[0].strip().lower()


def toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string literal is a valid TOML basic string


def write_config(
    path: Path,
    roots: Iterable[os.PathLike[str] | str],
    *,
    page_size: int | None = None,
    max_read_bytes: str | None = None,
    hidden: bool | None = None,
    respect_gitignore: bool | None = None,
    deny: list[str] | None = None,
    debounce_ms: int | None = None,
) -> Path:
    lines = ["[server]"]
    if page_size is not None:
        lines.append(f"page_size = {page_size}")
    if max_read_bytes is not None:
        lines.append(f"max_read_bytes = {toml_str(max_read_bytes)}")
    for root in roots:
        lines += ["", "[[mount]]", 'kind = "files"', f"root = {toml_str(os.fspath(root))}"]
        if deny is not None:
            lines.append("deny = [" + ", ".join(toml_str(d) for d in deny) + "]")
        if respect_gitignore is not None:
            lines.append(f"respect_gitignore = {str(respect_gitignore).lower()}")
        if hidden is not None:
            lines.append(f"hidden = {str(hidden).lower()}")
        if debounce_ms is not None:
            lines.append(f"debounce_ms = {debounce_ms}")
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- notifications


@dataclass
class Note:
    t: float
    method: str
    params: dict[str, Any]

    @property
    def uri(self) -> str | None:
        return self.params.get("uri")


@dataclass
class Notes:
    """Records every server notification the SDK hands to `message_handler`."""

    items: list[Note] = field(default_factory=list)
    transport_errors: list[Exception] = field(default_factory=list)

    async def handler(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.transport_errors.append(message)
            return
        params = getattr(message, "params", None)
        dumped = params.model_dump(by_alias=True, mode="json", exclude_none=True) if params is not None else {}
        self.items.append(Note(time.monotonic(), message.method, dumped))

    def mark(self) -> int:
        return len(self.items)

    def since(self, mark: int, method: str | None = None) -> list[Note]:
        return [n for n in self.items[mark:] if method is None or n.method == method]

    async def wait_for(
        self, pred: Callable[[Note], bool], timeout: float, since: int = 0
    ) -> Note | None:
        deadline = time.monotonic() + timeout
        while True:
            for n in self.items[since:]:
                if pred(n):
                    return n
            if time.monotonic() >= deadline:
                return None
            await anyio.sleep(0.01)


UPDATED = "notifications/resources/updated"
LIST_CHANGED = "notifications/resources/list_changed"


# --------------------------------------------------------------------------- connection


@dataclass
class Conn:
    client: Client
    mode: str
    notes: Notes

    async def call(self, aw: Awaitable[T], timeout: float = CALL_TIMEOUT) -> T:
        with anyio.fail_after(timeout):
            return await aw

    async def list_page(self, cursor: str | None = None):
        return await self.call(self.client.list_resources(cursor=cursor))

    async def list_all(self, max_pages: int = 100_000) -> tuple[list[Any], list[int]]:
        """Every resource across all pages, plus the size of each page."""
        out: list[Any] = []
        sizes: list[int] = []
        cursor: str | None = None
        for _ in range(max_pages):
            page = await self.list_page(cursor)
            out.extend(page.resources)
            sizes.append(len(page.resources))
            cursor = page.next_cursor
            if cursor is None:
                return out, sizes
        raise AssertionError(f"pagination did not end after {max_pages} pages")

    async def templates_all(self) -> list[Any]:
        out: list[Any] = []
        cursor: str | None = None
        for _ in range(1000):
            page = await self.call(self.client.list_resource_templates(cursor=cursor))
            out.extend(page.resource_templates)
            cursor = page.next_cursor
            if cursor is None:
                return out
        raise AssertionError("template pagination did not end")

    async def read(self, uri: str):
        return await self.call(self.client.read_resource(uri))

    async def read_one(self, uri: str):
        result = await self.read(uri)
        assert len(result.contents) == 1, f"expected exactly one content for {uri}, got {len(result.contents)}"
        return result.contents[0]

    async def error_of(self, aw: Awaitable[Any], timeout: float = CALL_TIMEOUT) -> MCPError:
        try:
            result = await self.call(aw, timeout)
        except MCPError as e:
            return e
        raise AssertionError(f"expected a JSON-RPC error, got a result: {result!r:.500}")

    async def assert_not_found(self, uri: str) -> MCPError:
        err = await self.error_of(self.client.read_resource(uri))
        want = NOT_FOUND[self.mode]
        assert err.code == want, f"{uri!r}: expected not-found code {want}, got {err.code} ({err.message!r})"
        assert isinstance(err.data, dict), f"{uri!r}: error data should be an object, got {err.data!r}"
        assert err.data.get("uri") == uri, f"data.uri should echo the request: {err.data!r} vs {uri!r}"
        return err


class ServerFactory:
    def __init__(self, request: pytest.FixtureRequest, logdir: Path):
        self._request = request
        self._logdir = logdir
        self._n = 0

    @asynccontextmanager
    async def __call__(
        self,
        mode: str,
        *paths: os.PathLike[str] | str,
        config: os.PathLike[str] | str | None = None,
    ) -> AsyncIterator[Conn]:
        args = ["serve", *[os.fspath(p) for p in paths]]
        if config is not None:
            args += ["--config", os.fspath(config)]
        env = {}
        if "MCPR_RUST_LOG" in os.environ:
            env["RUST_LOG"] = os.environ["MCPR_RUST_LOG"]
        self._n += 1
        log_path = self._logdir / f"server-{self._n}.stderr"
        logs = getattr(self._request.node, "_mcpr_logs", [])
        logs.append((log_path, " ".join([os.fspath(BIN), *args])))
        self._request.node._mcpr_logs = logs
        params = StdioServerParameters(command=os.fspath(BIN), args=args, env=env)
        notes = Notes()
        with open(log_path, "w") as errlog:
            client = Client(
                stdio_client(params, errlog=errlog),
                mode=mode,
                message_handler=notes.handler,
                cache=None,
                read_timeout_seconds=CALL_TIMEOUT,
            )
            # No cancel scope around entering: the session's task group must not be
            # nested inside a scope that exits first. The legacy handshake is bounded by
            # read_timeout_seconds; 2026-07-28 adoption sends nothing.
            try:
                async with client:
                    yield Conn(client, mode, notes)
            except BaseExceptionGroup as group:
                # The SDK's task groups wrap whatever the test raised; surface the test's own
                # failure (assertion, MCPError, timeout) instead of a nested group.
                leaves = _leaves(group)
                if len(leaves) == 1:
                    raise leaves[0] from None
                raise


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


def content_bytes(content: Any) -> bytes:
    """The exact bytes a content item represents (text is UTF-8, blob is base64)."""
    if getattr(content, "blob", None) is not None:
        return base64.b64decode(content.blob, validate=True)
    return content.text.encode("utf-8")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session", autouse=True)
def server_binary() -> Path:
    if not BIN.is_file() or not os.access(BIN, os.X_OK):
        pytest.fail(
            f"mcp-resources binary not found or not executable at {BIN}. "
            "Build it first (`cargo build -p mcp-resources`) or point MCPR_BIN at it.",
            pytrace=False,
        )
    return BIN


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def serve(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ServerFactory:
    return ServerFactory(request, tmp_path_factory.mktemp("logs"))


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A canonical (symlink-free) scratch directory."""
    return Path(canon(tmp_path))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed:
        for log_path, cmdline in getattr(item, "_mcpr_logs", []):
            try:
                text = log_path.read_text(errors="replace")
            except OSError:
                continue
            rep.sections.append((f"server stderr: {cmdline}", text[-4000:] or "(empty)"))
