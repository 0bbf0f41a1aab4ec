#!/usr/bin/env python3
"""Rebuild the committed seed corpora (fuzz/corpus/<target>/) from the test suites' string
literals and fixtures. Run from the repository root: python3 fuzz/seeds.py"""

import glob
import hashlib
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIT = re.compile(r'(?<![A-Za-z0-9_#])"((?:[^"\\\n]|\\.)*)"')
RAW = re.compile(r'r#"(.*?)"#', re.S)


def unescape(s):
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and s[i + 2 : i + 3] == "{":
                end = s.index("}", i)
                out.append(chr(int(s[i + 3 : end], 16)))
                i = end + 1
                continue
            out.append({"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'"}.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def literals(paths):
    found = []
    for p in paths:
        text = open(p, encoding="utf-8").read()
        found += [unescape(m) for m in LIT.findall(text)]
        found += RAW.findall(text)
    seen, out = set(), []
    for s in found:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def rs(*patterns):
    return sorted(p for pat in patterns for p in glob.glob(os.path.join(ROOT, pat), recursive=True))


def write(target, items, limit=400):
    d = os.path.join(ROOT, "fuzz/corpus", target)
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
        os.remove(os.path.join(d, old))
    for item in items[:limit]:
        data = item if isinstance(item, bytes) else item.encode()
        name = hashlib.sha1(data).hexdigest()[:16]
        open(os.path.join(d, name), "wb").write(data)
    print(f"{target}: {min(len(items), limit)} seeds")


tests = rs("crates/**/tests/**/*.rs", "crates/**/src/**/*.rs")
all_lits = literals(tests)
uri_re = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:\S*$")

uris = [s for s in all_lits if uri_re.match(s) and "{" not in s and len(s) < 300]
write("uri", uris + ["x:", ":a", "file://localhost/a?b=c&d", "a b:c", "db://x/y?z"])

tpl_lits = literals(rs("crates/core/src/template.rs", "crates/core/tests/template_props.rs", "crates/provider-http/**/*.rs", "crates/provider-files/src/*.rs"))
templates = [s for s in tpl_lits if "{" in s and "}" in s and " " not in s and len(s) < 120]
targets = [s for s in tpl_lits if "{" not in s and " " not in s and 0 < len(s) < 120]
pairs = []
for t in templates:
    lead = t.split("{", 1)[0][:4]
    match = [u for u in targets if u.startswith(lead)][:4] or targets[:1]
    pairs += [f"{t}\n{u}" for u in match]
write("template", pairs, limit=500)

write("cursor", [b"", b"\x00\x00\x00\x03a/b/c.txt", b"AAAA", b"AQAAAANhL2IvYy50eHQ", b"not base64!", bytes(range(64))])

configs = [open(p, encoding="utf-8").read() for p in rs("examples/**/*.toml", "tests/**/*.toml", "crates/**/tests/**/*.toml")]
toml_lits = [s for s in all_lits if ("[[mount]]" in s or "[server]" in s or "[http]" in s)]
write("config", configs + toml_lits)

sql_lits = literals(rs("crates/provider-sql/**/*.rs", "examples/**/*.toml"))
sql = [s for s in sql_lits if re.match(r"(?is)^\s*(with|select|insert|update|delete|pragma|attach|create|drop|values|explain|begin|;|/\*|--)", s)]
write("sql_guard", sql)

jsonl = []
for s in all_lits:
    if s.startswith("{") and '"jsonrpc"' in s:
        jsonl.append(s if s.endswith("\n") else s + "\n")
init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "f", "version": "1"}}})
read = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "file:///x"}})
extra = [
    b"\x00" + (init + "\n" + read + "\n").encode(),
    b"\x01" + (init + "\n" + read + "\n").encode(),
    b"\x00[1,2]\n{\n\xff\xfe\n" + b"[" * 600 + b"\n",
    b"\x01" + b"x" * 700 + b"\n" + read.encode() + b"\n" + read.encode(),
    b'\x00{"jsonrpc":"2.0","id":1e400,"method":"ping"}\n{"jsonrpc":"2.0","id":[],"method":"ping"}\n',
]
write("stdio_line", extra + [b"\x00" + s.encode() for s in jsonl])

paths = ["a.txt", "dir/b.md", "dir/sub/c.txt", "%C3%A9%20dir/100%25%20sure%3F.txt", "link_in", "link_out", "dir/link_up/secret.txt",
         "abs_link/secret.txt", "dir/sibling/x.txt", "../outside/secret.txt", "%2E%2E/outside/secret.txt", ".env", "dir/server.key",
         "a.txt?head=1", "a.txt?offset=1&length=2", "dir/", "dir", "", "La.txt", "file:///etc/passwd", "dir/%2e%2e/a.txt", "dir//b.md"]
write("files_path", paths + [s for s in all_lits if s.startswith("file:///srv/docs")][:50])

api = [s for s in all_lits if s.startswith("api://")]
write("http_target", api + ["api://w/beijing/forecast", "api://w/fixed", "api://s/search?q=a&page=2", "api://r/o/r/issues?state=open&labels=x",
                            "api://p/a/b/c", "api://m/x.y", "api://e/abcd/l1,l2", "api://w/%2E%2E/forecast"])

# answer_escape: a shape byte (repeats, a second content), then text; the literals that hold
# something JSON escapes (quotes, backslashes, control characters) or multi-byte UTF-8.
esc = [s for s in all_lits if any(c in s for c in '"\\\n\t\r\x01\x1f\x7f') or any(ord(c) > 127 for c in s)]
write("answer_escape", [b"\x00plain text", b"\x45a\"b\\c\nd\te\x01\x1f\x7f\xc3\xa9\xe2\x9c\x93", b"\x3f\xf0\x9f\x98\x80\"\\", b"\x01\xff\xfe invalid utf8"]
      + [bytes([len(s) % 128]) + s.encode() for s in esc])
