"""The server's own CPU time per request at one in flight over stdio (perf stat -p).

    python3 cpu_per_request.py BIN read-modern|read-legacy|list N DIR

`read-*` reads DIR/f1k.txt (written here if missing, 1024 bytes); `list` asks for the first
page of `resources/list` of DIR (fill it first, e.g. 100,000 files). Prints the median
round trip and the server's task-clock, context switches and instructions per request.
Run binaries alternately on an otherwise idle machine: a figure is only comparable with
one taken in the same sitting.
"""

import json
import os
import subprocess
import sys
import time

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}


def line(obj):
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def main():
    binary, mode, n, root = sys.argv[1], sys.argv[2], int(sys.argv[3]), os.path.abspath(sys.argv[4])
    small = os.path.join(root, "f1k.txt")
    if mode.startswith("read") and not os.path.exists(small):
        with open(small, "w") as f:
            f.write("a" * 1024)

    def request(i):
        if mode == "list":
            return line({"jsonrpc": "2.0", "id": i, "method": "resources/list", "params": {}})
        params = {"uri": "file://" + small}
        if mode == "read-modern":
            params["_meta"] = META
        return line({"jsonrpc": "2.0", "id": i, "method": "resources/read", "params": params})

    server = subprocess.Popen(
        [binary, "serve", "--log-level", "error", root],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    if mode != "read-modern":
        server.stdin.write(line(INIT))
        server.stdin.flush()
        server.stdout.readline()
        server.stdin.write(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        server.stdin.flush()
    time.sleep(0.2)
    perf = subprocess.Popen(
        ["perf", "stat", "-x,", "-e", "task-clock,context-switches,instructions",
         "-p", str(server.pid)],
        stderr=subprocess.PIPE,
    )
    time.sleep(0.3)
    lat = []
    for i in range(1, n + 1):
        began = time.perf_counter()
        server.stdin.write(request(i))
        server.stdin.flush()
        server.stdout.readline()
        lat.append(time.perf_counter() - began)
    perf.send_signal(2)
    counted = perf.communicate()[1].decode()
    server.stdin.close()
    server.wait()
    lat.sort()
    figures = []
    for row in counted.strip().splitlines():
        f = row.split(",")
        if len(f) > 3 and not f[0].startswith("<"):
            value = float(f[0]) / n
            # perf reports task-clock in milliseconds.
            if f[2] == "task-clock":
                figures.append(f"CPU {value * 1000:.2f} µs")
            else:
                figures.append(f"{f[2]} {value:.2f}")
    print(f"{os.path.basename(binary)} {mode}: p50 {lat[n // 2] * 1e6:.1f} µs; " + "; ".join(figures) + " per request")


if __name__ == "__main__":
    main()
