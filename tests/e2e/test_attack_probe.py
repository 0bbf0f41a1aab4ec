"""Issue #20 items 6 and 13 against the built binary over real pipes (no SDK: the point is
what a misbehaving client sends). Every malformed line gets an answer, so no client hangs;
a client that never reads stdout cannot grow the server without bound."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse

from conftest import BIN, write

INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": "init",
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
)
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})


def serve(root):
    return subprocess.Popen(
        [str(BIN), "serve", str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )


def file_uri(path) -> str:
    return "file://" + urllib.parse.quote(str(path))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_malformed_lines_are_answered_not_dropped(base):
    root = (base / "root").resolve()
    write(root / "a.txt", "hello\n")
    localhost = file_uri(root / "a.txt").replace("file:///", "file://localhost/", 1)
    lines = [
        INIT.encode(),
        INITIALIZED.encode(),
        b'{"jsonrpc":"2.0","id":1,"method":"resources/list","params":[]}',
        b'{"jsonrpc":"2.0","id":2,"method":"ping","params":"x"}',
        b'{"jsonrpc":"2.0","id":3,"method":"pi\xff\xfeng"}',
        b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":5,"method":"ping"}{"jsonrpc":"2.0","id":6,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":7,"method":"resources/list","params":{"cursor":1}}',
        b'{"jsonrpc":"2.0","id":8,"method":"resources/read","params":{"uri":12}}',
        json.dumps({"jsonrpc": "2.0", "id": 9, "method": "resources/read", "params": {"uri": localhost}}).encode(),
        b'{"jsonrpc":"2.0","id":10,"method":"ping"}',
    ]
    proc = serve(root)
    try:
        out, _ = proc.communicate(b"\n".join(lines) + b"\n", timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    answers = [json.loads(l) for l in out.splitlines()]
    by_id = {json.dumps(a.get("id")): a for a in answers if a.get("id") is not None}
    nulls = [a for a in answers if a.get("id") is None]
    assert by_id["1"]["error"]["code"] == -32602, answers
    assert by_id["2"]["error"]["code"] == -32602, answers
    assert by_id["7"]["error"]["code"] == -32602 and "cursor" in by_id["7"]["error"]["message"], answers
    assert by_id["8"]["error"]["code"] == -32602 and "uri" in by_id["8"]["error"]["message"], answers
    assert by_id["9"]["result"]["contents"][0]["text"] == "hello\n", answers
    assert "result" in by_id["10"], answers
    assert sorted(a["error"]["code"] for a in nulls) == [-32700, -32700, -32600], answers


def test_a_client_that_never_reads_does_not_grow_the_server(base):
    root = (base / "root").resolve()
    write(root / "big.txt", "x" * 200_000)
    uri = file_uri(root / "big.txt")
    requests = 3000
    payload = [INIT, INITIALIZED] + [
        json.dumps({"jsonrpc": "2.0", "id": i, "method": "resources/read", "params": {"uri": uri}})
        for i in range(requests)
    ]
    data = ("\n".join(payload) + "\n").encode()
    proc = serve(root)
    try:
        writer = threading.Thread(target=lambda: (proc.stdin.write(data), proc.stdin.close()), daemon=True)
        writer.start()
        # Nobody reads stdout: unbounded, 3,000 answers of 200 KB are 600 MB.
        time.sleep(4)
        held = rss_kib(proc.pid)
        assert held < 150 * 1024, f"{held} KiB resident with nobody reading"
        assert writer.is_alive(), "the server took every request while nobody read an answer"
        # Reading again: every request is answered.
        got = 0
        while got < requests + 1:
            line = proc.stdout.readline()
            assert line, f"closed after {got} answers"
            got += 1
        writer.join(timeout=20)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
