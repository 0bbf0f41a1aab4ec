"""Everything outside a root, or denied, answers NOT FOUND — indistinguishable from absent.

legacy: -32002 with data.uri == the requested URI; 2026-07-28: -32602 with data.uri.

Layout (all under a per-test canonical tmp dir B):
    B/x/root/                 the served root
    B/x/root-evil/secret.txt  sibling sharing the root's string prefix
    B/x/etc/passwd            what ROOT/../etc/passwd names
    B/etc/passwd              what ROOT/../../etc/passwd names
    B/outside/secret.txt      target of symlinks leaving the root
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import canon, content_bytes, quote_path, rel_uri, write, write_config

pytestmark = pytest.mark.anyio

SECRET = "TOP SECRET\n"


def build(base: Path) -> Path:
    root = base / "x" / "root"
    write(root / "ok.txt", "fine\n")
    write(root / "a" / "b", "a/b via a real slash\n")
    write(root / "sub" / "target.txt", "inside target\n")
    write(root / ".env", "API_KEY=hunter2\n")
    write(root / "sub" / ".env", "API_KEY=hunter3\n")
    write(root / "id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\n")
    write(root / ".ssh" / "id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\n")
    write(root / "secret.pem", "-----BEGIN PRIVATE KEY-----\n")
    write(root / ".git" / "config", "[core]\n\trepositoryformatversion = 0\n")
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(base / "x" / "root-evil" / "secret.txt", SECRET)
    write(base / "x" / "etc" / "passwd", SECRET)
    write(base / "etc" / "passwd", SECRET)
    write(base / "outside" / "secret.txt", SECRET)
    os.symlink("/etc/passwd", root / "passwd_link")
    os.symlink(base / "outside" / "secret.txt", root / "out_file_link")
    os.symlink(base / "outside", root / "out_dir_link")
    os.symlink("../../outside/secret.txt", root / "rel_out_link")
    os.symlink("sub/target.txt", root / "inner_link")
    os.symlink(root / "sub", root / "inner_dir_link")
    return root


def cases(root: Path) -> dict[str, str]:
    R = canon(root)
    QR = quote_path(R)
    depth = R.count("/")
    return {
        "dotdot": f"file://{QR}/../etc/passwd",
        "dotdot-deep": f"file://{QR}/" + "../" * depth + "etc/passwd",
        "dotdot-after-dir": f"file://{QR}/sub/../../etc/passwd",
        "enc-dotdot": f"file://{QR}/%2e%2e/%2e%2e/etc/passwd",
        "enc-dotdot-deep": f"file://{QR}/" + "%2e%2e/" * depth + "etc/passwd",
        "enc-dotdot-upper": f"file://{QR}/%2E%2E/etc/passwd",
        "enc-slash": f"file://{QR}/a%2Fb",
        "enc-slash-dotdot": f"file://{QR}/..%2Fetc%2Fpasswd",
        "absolute-outside": "file:///etc/passwd",
        "absolute-outside-tmp": "file://" + quote_path(str(root.parent.parent / "outside" / "secret.txt")),
        "symlink-to-etc-passwd": f"file://{QR}/passwd_link",
        "symlink-to-outside-file": f"file://{QR}/out_file_link",
        "relative-symlink-outside": f"file://{QR}/rel_out_link",
        "symlink-dir-outside-file": f"file://{QR}/out_dir_link/secret.txt",
        "symlink-dir-outside-itself": f"file://{QR}/out_dir_link",
        "sibling-prefix": "file://" + quote_path(R + "-evil/secret.txt"),
        "sibling-prefix-dir": "file://" + quote_path(R + "-evil"),
        "nul": f"file://{QR}/ok.txt%00",
        "nul-ext": f"file://{QR}/ok.txt%00.png",
        "long-name": f"file://{QR}/" + "a" * 5000,
        "long-path": f"file://{QR}/" + "/".join(["d" * 200] * 30) + "/f.txt",
        "dotenv": f"file://{QR}/.env",
        "dotenv-nested": f"file://{QR}/sub/.env",
        "id_rsa": f"file://{QR}/id_rsa",
        "ssh-id_rsa": f"file://{QR}/.ssh/id_rsa",
        "pem": f"file://{QR}/secret.pem",
        "git-config": f"file://{QR}/.git/config",
        "git-dir": f"file://{QR}/.git",
        "windowed-dotenv": f"file://{QR}/.env?head=1",
        "windowed-outside": f"file://{QR}/passwd_link?offset=0&length=10",
    }


CASE_IDS = list(cases(Path("/r")).keys())


@pytest.mark.parametrize("hidden", [False, True], ids=["hidden=false", "hidden=true"])
@pytest.mark.parametrize("case", CASE_IDS)
async def test_escape_is_not_found(serve, mode, base, case, hidden):
    """hidden=true makes the deny list (not the dot-file rule) responsible for .env/.git."""
    root = build(base)
    uri = cases(root)[case]
    cfg = write_config(base / "cfg.toml", [root], hidden=hidden)
    async with serve(mode, config=cfg) as c:
        await c.assert_not_found(uri)


async def test_symlink_inside_root_is_readable(serve, mode, base):
    root = build(base)
    async with serve(mode, str(root)) as c:
        content = await c.read_one(rel_uri(root, "inner_link"))
        assert content.uri == rel_uri(root, "inner_link")
        assert content_bytes(content) == b"inside target\n"
        via_dir = await c.read_one(rel_uri(root, "inner_dir_link/target.txt"))
        assert via_dir.text == "inside target\n"
        plain = await c.read_one(rel_uri(root, "ok.txt"))
        assert plain.text == "fine\n"


async def test_listing_never_shows_escapes_or_denied(serve, mode, base):
    root = build(base)
    cfg = write_config(base / "cfg.toml", [root], hidden=True)
    async with serve(mode, config=cfg) as c:
        resources, _ = await c.list_all()
    names = {r.name for r in resources}
    prefix = "file://" + quote_path(canon(root)) + "/"
    assert all(r.uri.startswith(prefix) for r in resources), [r.uri for r in resources]
    for denied in [".env", "sub/.env", "id_rsa", ".ssh/id_rsa", "secret.pem", ".git/config", ".git/HEAD"]:
        assert denied not in names, f"denied file listed: {denied}"
    for escaped in ["passwd_link", "out_file_link", "rel_out_link", "out_dir_link/secret.txt"]:
        assert escaped not in names, f"escaping symlink listed: {escaped}"
    # Regular files that are plainly allowed are all there.
    assert {"ok.txt", "a/b", "sub/target.txt"} <= names
    # Symlinks that stay inside are allowed but not required in listings.
    assert names - {"ok.txt", "a/b", "sub/target.txt", "inner_link", "inner_dir_link/target.txt"} == set()


async def test_not_found_message_does_not_leak_reason(serve, mode, base):
    """Denied and absent answer alike: same code, and the message does not say why."""
    root = build(base)
    async with serve(mode, str(root)) as c:
        denied = await c.assert_not_found(rel_uri(root, ".env"))
        absent = await c.assert_not_found(rel_uri(root, "no-such-file"))
    assert denied.code == absent.code
    assert denied.message.replace(rel_uri(root, ".env"), "<uri>") == absent.message.replace(
        rel_uri(root, "no-such-file"), "<uri>"
    )
