"""Transport-level behaviour of the stdio server process (raw pipes, no SDK)."""

from __future__ import annotations

import json
import subprocess
import time

from conftest import BIN, write

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


def test_exits_promptly_when_stdin_closes(base):
    root = base / "root"
    write(root / "f.txt", "x")
    proc = subprocess.Popen(
        [str(BIN), "serve", str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        proc.stdin.write((json.dumps(INIT) + "\n").encode())
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        t0 = time.monotonic()
        proc.stdin.close()
        rc = proc.wait(timeout=5)
        assert rc == 0, f"exit status {rc}"
        assert time.monotonic() - t0 < 2.0, "the SDK would SIGTERM a server that lingers past 2 s"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_stdout_carries_only_json_rpc(base):
    """Logs go to stderr: every stdout line is a JSON-RPC message, answered in order."""
    root = base / "root"
    write(root / "f.txt", "x")
    msgs = [
        INIT,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {}},
    ]
    out = subprocess.run(
        [str(BIN), "serve", str(root)],
        input="".join(json.dumps(m) + "\n" for m in msgs).encode(),
        capture_output=True,
        timeout=10,
    ).stdout.decode()
    parsed = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert all(p.get("jsonrpc") == "2.0" for p in parsed), parsed
    responses = {p["id"]: p for p in parsed if "id" in p}
    assert sorted(responses) == [1, 2]
    assert [r["name"] for r in responses[2]["result"]["resources"]] == ["f.txt"]


META_2026 = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
}


def test_a_shell_pipeline_gets_every_answer_and_exit_0(base):
    """`printf … | mcp-resources serve DIR`: stdin closes right after the lines, before any
    lifecycle is chosen or while requests run; each is answered once, and the exit is 0."""
    root = base / "root"
    write(root / "f.txt", "x")
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META_2026}},
        {"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {}},
    ]
    script = "printf '%s\\n' \"$@\" | \"$BIN\" serve \"$ROOT\""
    proc = subprocess.run(
        ["sh", "-c", script, "sh", *(json.dumps(m) for m in lines)],
        env={"BIN": str(BIN), "ROOT": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=10,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    answers = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert sorted(a["id"] for a in answers) == [1, 2], answers
    by_id = {a["id"]: a for a in answers}
    assert "2026-07-28" in by_id[1]["result"]["supportedVersions"]
    # Before any lifecycle, a request without `_meta` is refused, not dropped.
    assert by_id[2]["error"]["code"] == -32602


def test_empty_stdin_exits_0_and_writes_nothing(base):
    root = base / "root"
    write(root / "f.txt", "x")
    # A pipe closed at once: a client that left before sending anything.
    proc = subprocess.run([str(BIN), "serve", str(root)], input=b"", capture_output=True, timeout=10)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == b""


def test_stdin_at_dev_null_is_refused_with_exit_1(base):
    # /dev/null is no client (systemd, docker without -i): nothing would ever be served.
    root = base / "root"
    write(root / "f.txt", "x")
    proc = subprocess.run([str(BIN), "serve", str(root)], stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    assert proc.returncode == 1, proc.stderr.decode()
    assert b"stdin is closed or /dev/null" in proc.stderr and b"--http ADDR" in proc.stderr, proc.stderr.decode()
    assert proc.stdout == b""
