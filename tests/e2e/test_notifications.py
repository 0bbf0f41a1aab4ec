"""Change notifications.

legacy:      resources/subscribe + notifications/resources/updated; list_changed after initialize.
2026-07-28:  subscriptions/listen with resourceSubscriptions / resourcesListChanged; leaving the
             `listen()` context cancels the request (the SDK sends notifications/cancelled).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated, Subscription

from conftest import LIST_CHANGED, UPDATED, Conn, content_bytes, rel_uri, write

pytestmark = pytest.mark.anyio

DEADLINE = 1.0  # contract: a change is notified within 1 s (debounce is 50 ms)
QUIET = 1.5  # no notification may arrive within this window after unsubscribing
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"


async def next_event(sub: Subscription, timeout: float):
    with anyio.move_on_after(timeout):
        return await sub.__anext__()
    return None


async def drain(sub: Subscription, quiet: float = 0.3) -> list:
    """Consume events until none arrives for `quiet` seconds."""
    got = []
    while (ev := await next_event(sub, quiet)) is not None:
        got.append(ev)
    return got


class Watch:
    """One subscription to `uri`, era-appropriate, with a uniform 'wait for update' API."""

    def __init__(self, conn: Conn, uri: str, sub: Subscription | None):
        self.conn, self.uri, self.sub = conn, uri, sub

    async def expect_update(self, what: str) -> None:
        if self.sub is None:
            mark = self._mark
            note = await self.conn.notes.wait_for(lambda n: n.method == UPDATED and n.uri == self.uri, DEADLINE, mark)
            assert note is not None, (
                f"no {UPDATED} for {self.uri} within {DEADLINE}s after {what}; "
                f"got {[(n.method, n.params) for n in self.conn.notes.since(mark)]}"
            )
        else:
            ev = await next_event(self.sub, DEADLINE)
            assert ev == ResourceUpdated(uri=self.uri), f"after {what}: expected ResourceUpdated({self.uri}), got {ev!r}"
        await self.settle()

    async def settle(self) -> None:
        """Let debounced stragglers arrive, then start a fresh observation window."""
        if self.sub is None:
            await anyio.sleep(0.3)
        else:
            await drain(self.sub)
        self._mark = self.conn.notes.mark()

    _mark = 0


ARM_GRACE = 0.1
"""Pause after subscribing before changing files, so the scenario tests below exercise their
own behaviour; `test_change_right_after_subscribe_is_notified` covers the no-pause case."""


@asynccontextmanager
async def watching(conn: Conn, uri: str, grace: float = ARM_GRACE) -> AsyncIterator[Watch]:
    if conn.mode == "legacy":
        result = await conn.call(conn.client.subscribe_resource(uri))
        assert result is not None
        w = Watch(conn, uri, None)
        w._mark = conn.notes.mark()
        await anyio.sleep(grace)
        yield w
    else:
        async with conn.client.listen(resource_subscriptions=[uri]) as sub:
            assert sub.honored.resource_subscriptions == [uri], f"server did not honor the subscription: {sub.honored!r}"
            w = Watch(conn, uri, sub)
            w._mark = conn.notes.mark()
            await anyio.sleep(grace)
            yield w


async def test_change_right_after_subscribe_is_notified(serve, mode, base):
    """The subscribe response / listen acknowledgment means "armed": a write made the
    moment it arrives must still be notified."""
    root = base / "root"
    p = write(root / "f.txt", "1\n")
    uri = rel_uri(root, "f.txt")
    async with serve(mode, str(root)) as c, watching(c, uri, grace=0) as w:
        p.write_text("2\n")
        await w.expect_update("a write immediately after the subscription was acknowledged")


async def test_legacy_capabilities_advertise_subscribe_and_list_changed(serve, base):
    root = base / "root"
    write(root / "f.txt", "x")
    async with serve("legacy", str(root)) as c:
        caps = c.client.server_capabilities
    assert caps.resources is not None
    assert caps.resources.subscribe is True
    assert caps.resources.list_changed is True


async def test_modify_notifies(serve, mode, base):
    root = base / "root"
    p = write(root / "watched.txt", "v1\n")
    other = write(root / "other.txt", "o1\n")
    uri = rel_uri(root, "watched.txt")
    async with serve(mode, str(root)) as c, watching(c, uri) as w:
        with open(p, "a") as f:
            f.write("appended\n")
        await w.expect_update("append")
        p.write_text("rewritten in place\n")
        await w.expect_update("in-place rewrite")
        # A change to a file nobody subscribed to must not produce resources/updated.
        mark = c.notes.mark()
        other.write_text("o2\n")
        await anyio.sleep(DEADLINE)
        stray = [n for n in c.notes.since(mark, UPDATED)]
        assert stray == [], f"updated notifications for an unsubscribed file: {[(n.params) for n in stray]}"
        if w.sub is not None:
            assert await next_event(w.sub, 0.1) is None


async def test_atomic_replace_notifies(serve, mode, base):
    root = base / "root"
    p = write(root / "config.yaml", "a: 1\n")
    uri = rel_uri(root, "config.yaml")
    async with serve(mode, str(root)) as c, watching(c, uri) as w:
        for n in range(2):  # twice: a watch on the old inode would catch only the first
            tmp = root / f".config.yaml.tmp{n}"
            tmp.write_text(f"a: {n + 2}\n")
            os.replace(tmp, p)
            await w.expect_update(f"atomic replace #{n + 1}")
        assert content_bytes(await c.read_one(uri)) == b"a: 3\n"


async def test_delete_notifies(serve, mode, base):
    root = base / "root"
    p = write(root / "doomed.txt", "bye\n")
    uri = rel_uri(root, "doomed.txt")
    async with serve(mode, str(root)) as c, watching(c, uri) as w:
        p.unlink()
        await w.expect_update("delete")
        await c.assert_not_found(uri)
        # Re-creating the file at the same path notifies again.
        p.write_text("back\n")
        await w.expect_update("re-create")


async def test_nested_file_notifies(serve, mode, base):
    root = base / "root"
    p = write(root / "a" / "b c" / "ü.txt", "1")
    uri = rel_uri(root, "a/b c/ü.txt")
    async with serve(mode, str(root)) as c, watching(c, uri) as w:
        p.write_text("2")
        await w.expect_update("modify nested")


async def test_legacy_unsubscribe_stops_notifications(serve, base):
    root = base / "root"
    p = write(root / "f.txt", "1\n")
    uri = rel_uri(root, "f.txt")
    async with serve("legacy", str(root)) as c:
        await c.call(c.client.subscribe_resource(uri))
        mark = c.notes.mark()
        p.write_text("2\n")
        assert await c.notes.wait_for(lambda n: n.method == UPDATED and n.uri == uri, DEADLINE, mark)
        await anyio.sleep(0.3)
        await c.call(c.client.unsubscribe_resource(uri))
        mark = c.notes.mark()
        p.write_text("3\n")
        await anyio.sleep(QUIET)
        late = c.notes.since(mark, UPDATED)
        assert late == [], f"notified after unsubscribe: {[n.params for n in late]}"


async def test_2026_cancelling_listen_stops_notifications(serve, base):
    root = base / "root"
    p = write(root / "f.txt", "1\n")
    uri = rel_uri(root, "f.txt")
    async with serve("2026-07-28", str(root)) as c:
        async with c.client.listen(resource_subscriptions=[uri]) as sub:
            mark = c.notes.mark()
            await anyio.sleep(ARM_GRACE)
            p.write_text("2\n")
            assert await next_event(sub, DEADLINE) == ResourceUpdated(uri=uri)
            # The frame carried the listen request's id in _meta (how the SDK routes it); the
            # message_handler tee runs in a spawned task, so give it a moment.
            stamped = await c.notes.wait_for(lambda n: n.method == UPDATED and n.uri == uri, 0.5, mark)
            assert stamped is not None, "the event did not reach message_handler"
            assert stamped.params.get("_meta", {}).get(SUBSCRIPTION_ID_KEY) == sub.subscription_id
            await drain(sub)
        # Leaving the context cancelled the listen request.
        await anyio.sleep(0.2)
        mark = c.notes.mark()
        p.write_text("3\n")
        await anyio.sleep(QUIET)
        late = c.notes.since(mark)
        assert late == [], f"notified after the listen was cancelled: {[(n.method, n.params) for n in late]}"
        # The session is still usable after the cancel.
        assert (await c.read_one(uri)).text == "3\n"


async def test_2026_two_listens_are_independent(serve, base):
    root = base / "root"
    pa = write(root / "a.txt", "a")
    pb = write(root / "b.txt", "b")
    ua, ub = rel_uri(root, "a.txt"), rel_uri(root, "b.txt")
    async with serve("2026-07-28", str(root)) as c:
        async with c.client.listen(resource_subscriptions=[ua]) as sa:
            async with c.client.listen(resource_subscriptions=[ub]) as sb:
                await anyio.sleep(ARM_GRACE)
                pb.write_text("b2")
                assert await next_event(sb, DEADLINE) == ResourceUpdated(uri=ub)
                assert await next_event(sa, 0.5) is None, "listen A received B's update"
                await drain(sb)
            # B is cancelled; A still works.
            pa.write_text("a2")
            assert await next_event(sa, DEADLINE) == ResourceUpdated(uri=ua)


async def test_list_changed_on_create_and_delete(serve, mode, base):
    root = base / "root"
    write(root / "existing.txt", "x")
    write(root / "deep" / "er" / "keep.txt", "x")
    async with serve(mode, str(root)) as c:
        listed, _ = await c.list_all()
        assert [r.name for r in listed] == ["deep/er/keep.txt", "existing.txt"]
        if mode == "legacy":
            await _list_changed_legacy(c, root)
        else:
            async with c.client.listen(resources_list_changed=True) as sub:
                assert sub.honored.resources_list_changed is True
                await anyio.sleep(ARM_GRACE)
                await _list_changed_2026(c, root, sub)


async def _list_changed_legacy(c: Conn, root) -> None:
    for what, action in _list_actions(root):
        mark = c.notes.mark()
        action()
        note = await c.notes.wait_for(lambda n: n.method == LIST_CHANGED, DEADLINE, mark)
        assert note is not None, f"no {LIST_CHANGED} within {DEADLINE}s after {what}"
        await anyio.sleep(0.3)


async def _list_changed_2026(c: Conn, root, sub: Subscription) -> None:
    for what, action in _list_actions(root):
        action()
        ev = await next_event(sub, DEADLINE)
        assert ev == ResourcesListChanged(), f"after {what}: expected ResourcesListChanged, got {ev!r}"
        await drain(sub)


def _list_actions(root):
    return [
        ("create at root", lambda: write(root / "new.txt", "n")),
        ("delete at root", lambda: (root / "new.txt").unlink()),
        ("create in nested dir", lambda: write(root / "deep" / "er" / "new2.txt", "n")),
        ("create in a new dir", lambda: write(root / "fresh dir" / "f.txt", "n")),
        ("delete nested", lambda: (root / "deep" / "er" / "new2.txt").unlink()),
    ]


async def test_list_changed_reflects_in_listing(serve, mode, base):
    root = base / "root"
    write(root / "a.txt", "x")
    async with serve(mode, str(root)) as c:
        before, _ = await c.list_all()
        write(root / "b.txt", "y")
        await anyio.sleep(0.3)
        after, _ = await c.list_all()
    assert [r.name for r in before] == ["a.txt"]
    assert [r.name for r in after] == ["a.txt", "b.txt"]


async def test_2026_no_notifications_without_listen(serve, base):
    """At 2026-07-28 change notifications ride listen streams only, and only when requested."""
    root = base / "root"
    p = write(root / "f.txt", "1")
    uri = rel_uri(root, "f.txt")
    async with serve("2026-07-28", str(root)) as c:
        await c.read_one(uri)
        write(root / "new.txt", "n")
        p.write_text("2")
        await anyio.sleep(DEADLINE)
        assert c.notes.since(0) == [], [(n.method, n.params) for n in c.notes.since(0)]
        # A listen for one resource does not deliver list_changed it did not ask for.
        async with c.client.listen(resource_subscriptions=[uri]) as sub:
            mark = c.notes.mark()
            write(root / "newer.txt", "n")
            await anyio.sleep(DEADLINE)
            got = [(n.method, n.params) for n in c.notes.since(mark)]
            assert all(m != LIST_CHANGED for m, _ in got), got
            assert await next_event(sub, 0.1) is None


async def test_burst_of_writes_is_debounced(serve, mode, base):
    """30 writes within a few milliseconds are coalesced (debounce 50 ms), not 30 notifications."""
    root = base / "root"
    p = write(root / "f.txt", "0\n")
    uri = rel_uri(root, "f.txt")
    async with serve(mode, str(root)) as c, watching(c, uri):
        mark = c.notes.mark()
        with open(p, "a") as f:
            for i in range(30):
                f.write(f"{i}\n")
                f.flush()  # one write(2) each; the whole burst takes well under the 50 ms debounce
        await anyio.sleep(DEADLINE)
        got = [n for n in c.notes.since(mark, UPDATED) if n.uri == uri]
        assert 1 <= len(got) <= 3, f"expected the burst coalesced into 1-3 notifications, got {len(got)}"
