"""Conformance suite for the ``MetadataStore`` protocol (odradek.interfaces).

Any implementation -- meta_local, meta_zk, meta_etcd or a third party's -- runs it against itself
by subclassing :class:`MetadataStoreConformance` in a test module and providing one fixture::

    class TestMyStore(MetadataStoreConformance):
        @pytest.fixture
        def metadata_store_factory(self, tmp_path):
            return lambda: MyStore(tmp_path / "meta")

The factory returns a new, unopened store each call. Every store one test makes must share the
same data (they act as sessions of different brokers on one cluster) and that data must be fresh
for each test (a new directory, ZooKeeper chroot or etcd key prefix). The suite opens stores with
``open(session_ttl_ms)`` and closes them at the end; ``close`` must be idempotent.

Semantics pinned down here, beyond the protocol's docstrings:
- keys are '/'-separated paths; ``list``/``watch`` prefixes used here end in '/', where a path
  prefix and a string prefix agree; keys are never ancestors in a visible way: a key's parent path
  is not itself a key unless written (ZooKeeper's implicit parent nodes must stay hidden);
- ``version`` changes on every write of a key; ``create_revision`` is fixed for a key's lifetime and
  larger for a key created later (broker epochs, leader fencing depend on it);
- a failed ``txn`` names the first failing check's index (``MetadataConflict.index``);
- ephemerals of a session vanish for everyone once that session is closed;
- a watch started from a ``list`` revision misses nothing that happened after the list: applying
  its events to the listed snapshot always ends in the current state, revisions never decrease and
  are all after the listed revision, and nothing is reported twice. A backend whose watches
  coalesce changes that happen between two re-reads (ZooKeeper: watches fire once and mean "re-read")
  sets ``watch_coalesces = True``; otherwise the exact sequence of changes must be reported;
- ``campaign`` blocks while another session leads, and returns at once, with the same epoch, to
  the session that leads already; each new leader gets a larger epoch; a write carrying a
  deposed leader's ``fence`` fails;
- ``next_id`` counts 1, 2, 3... per key, atomically across sessions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar

import pytest
import trio

from ..interfaces import (
    ABSENT,
    Check,
    Delete,
    Leadership,
    MetadataConflict,
    MetadataStore,
    Put,
    SessionState,
    Versioned,
    WatchEvent,
)

OpenStore = Callable[[], Awaitable[MetadataStore]]


class MetadataStoreConformance:
    """Base class of a metadata store's conformance tests; see the module docstring."""

    #: TTL passed to ``open``: long enough that no session of a passing test expires by itself.
    session_ttl_ms: ClassVar[int] = 10_000
    #: True when watches may merge several changes made between two re-reads into one event.
    watch_coalesces: ClassVar[bool] = False
    #: Upper bound for anything the suite waits for (a watch event, a campaign to be won).
    wait_s: ClassVar[float] = 10.0
    #: How long the suite waits to be sure something does *not* happen (a blocked campaign, a
    #: duplicate watch event). Real time: kept short, it only bounds how long a bug may hide.
    quiet_s: ClassVar[float] = 0.3

    # Every test and fixture here is async: marked for pytest-trio explicitly, so the suite runs
    # in a project that does not set ``trio_mode = true`` (a third party's, or none at all).
    pytestmark = pytest.mark.trio

    @pytest.fixture
    def metadata_store_factory(self) -> Callable[[], MetadataStore]:
        """Override: return a callable making a new unopened store on this test's fresh data."""
        pytest.fail(f"{type(self).__name__} must define the metadata_store_factory fixture")

    @pytest.fixture
    async def open_store(self, metadata_store_factory: Callable[[], MetadataStore]) -> AsyncIterator[OpenStore]:
        """``await open_store()`` gives an opened store (a new session); all are closed at the end."""
        stores: list[MetadataStore] = []

        async def open_() -> MetadataStore:
            store = metadata_store_factory()
            assert isinstance(store, MetadataStore), f"{store!r} does not implement MetadataStore"
            await store.open(self.session_ttl_ms)
            stores.append(store)
            return store

        yield open_
        with trio.CancelScope(shield=True):
            for store in reversed(stores):
                await store.close()

    @pytest.fixture
    async def store(self, open_store: OpenStore) -> MetadataStore:
        return await open_store()

    # -- session -------------------------------------------------------------------------------
    async def test_session_states_start_connected(self, store: MetadataStore) -> None:
        states = store.session_states()
        with trio.fail_after(self.wait_s):
            first = await states.__anext__()
        assert first is SessionState.CONNECTED
        await close_iterator(states)

    async def test_close_is_idempotent(self, open_store: OpenStore) -> None:
        s = await open_store()
        await s.close()
        await s.close()

    # -- reads and single-key writes -----------------------------------------------------------
    async def test_get_missing_is_none(self, store: MetadataStore) -> None:
        assert await store.get("/nothing/here") is None

    async def test_create_then_get(self, store: MetadataStore) -> None:
        created = await store.create("/topics/orders", b'{"partitions": 3}')
        assert isinstance(created, Versioned)
        assert created.value == b'{"partitions": 3}'
        assert await store.get("/topics/orders") == created

    async def test_create_existing_conflicts(self, store: MetadataStore) -> None:
        first = await store.create("/cluster/id", b"one")
        with pytest.raises(MetadataConflict) as info:
            await store.create("/cluster/id", b"two")
        assert info.value.key == "/cluster/id"
        assert await store.get("/cluster/id") == first

    async def test_put_any_creates_and_updates(self, store: MetadataStore) -> None:
        v1 = await store.put("/config/topics/t", b"a")
        got = await store.get("/config/topics/t")
        assert got is not None and got.value == b"a" and got.version == v1
        v2 = await store.put("/config/topics/t", b"b")
        assert v2 != v1
        again = await store.get("/config/topics/t")
        assert again is not None and again.value == b"b" and again.version == v2
        assert again.create_revision == got.create_revision  # a write keeps the key's lifetime

    async def test_put_expect_version(self, store: MetadataStore) -> None:
        created = await store.create("/state", b"0")
        v1 = await store.put("/state", b"1", expect=created.version)
        with pytest.raises(MetadataConflict):
            await store.put("/state", b"stale", expect=created.version)
        got = await store.get("/state")
        assert got is not None and got.value == b"1" and got.version == v1
        for version in (v1, 0):  # 0: the first version of a key on some stores, none on others
            with pytest.raises(MetadataConflict):
                await store.put("/missing", b"x", expect=version)
        assert await store.get("/missing") is None

    async def test_put_expect_absent(self, store: MetadataStore) -> None:
        v = await store.put("/seq", b"1", expect=ABSENT)
        got = await store.get("/seq")
        assert got is not None and got.version == v
        with pytest.raises(MetadataConflict):
            await store.put("/seq", b"2", expect=ABSENT)
        assert (await store.get("/seq")) == got

    async def test_delete(self, store: MetadataStore) -> None:
        assert await store.delete("/none") is False
        with pytest.raises(MetadataConflict):
            await store.delete("/none", expect=1)
        created = await store.create("/d", b"x")
        v2 = await store.put("/d", b"y")
        with pytest.raises(MetadataConflict):
            await store.delete("/d", expect=created.version)
        assert await store.get("/d") is not None
        assert await store.delete("/d", expect=v2) is True
        assert await store.get("/d") is None
        await store.put("/d", b"z")
        assert await store.delete("/d") is True
        assert await store.get("/d") is None

    async def test_recreated_key_has_larger_create_revision(self, store: MetadataStore) -> None:
        first = await store.create("/brokers/topics/t", b"1")
        await store.delete("/brokers/topics/t")
        second = await store.create("/brokers/topics/t", b"2")
        assert second.create_revision > first.create_revision

    # -- lists ---------------------------------------------------------------------------------
    async def test_list_is_a_snapshot_with_revision(self, store: MetadataStore) -> None:
        await store.put("/brokers/topics/a", b"A")
        await store.put("/brokers/topics/b", b"B")
        await store.put("/brokers/topics/b/partitions/0/state", b"S")
        await store.put("/brokers/other", b"O")
        items, rev1 = await store.list("/brokers/topics/")
        assert set(items) == {"/brokers/topics/a", "/brokers/topics/b", "/brokers/topics/b/partitions/0/state"}
        for key, versioned in items.items():
            assert await store.get(key) == versioned
        assert isinstance(rev1, int)
        again, rev_same = await store.list("/brokers/topics/")
        assert again == items and rev_same >= rev1
        await store.put("/brokers/topics/c", b"C")
        items2, rev2 = await store.list("/brokers/topics/")
        assert rev2 > rev1 and set(items2) == set(items) | {"/brokers/topics/c"}
        empty, _ = await store.list("/no/such/prefix/")
        assert empty == {}

    async def test_parent_paths_are_not_keys(self, store: MetadataStore) -> None:
        await store.put("/a/b/c", b"leaf")
        assert await store.get("/a/b") is None
        assert await store.get("/a") is None
        items, _ = await store.list("/a/")
        assert set(items) == {"/a/b/c"}
        assert await store.delete("/a/b") is False

    async def test_a_parent_path_fails_a_compare_and_set(self, store: MetadataStore) -> None:
        """A versioned put on a path that is only a parent of keys fails whatever the version
        (ZooKeeper's implicit parent znodes have versions too, and must not take data), and the
        path stays no key."""
        await store.put("/cas/parent/leaf", b"leaf")
        for version in (0, 1):
            with pytest.raises(MetadataConflict):
                await store.put("/cas/parent", b"x", expect=version)
        assert await store.get("/cas/parent") is None
        items, _ = await store.list("/cas/")
        assert set(items) == {"/cas/parent/leaf"}

    async def test_delete_parent_keeps_children(self, store: MetadataStore) -> None:
        await store.put("/t/x", b"parent")
        await store.put("/t/x/y", b"child")
        assert await store.delete("/t/x") is True
        assert await store.get("/t/x") is None
        child = await store.get("/t/x/y")
        assert child is not None and child.value == b"child"
        items, _ = await store.list("/t/")
        assert set(items) == {"/t/x/y"}
        recreated = await store.create("/t/x", b"again")
        assert await store.get("/t/x") == recreated

    async def test_delete_last_child_leaves_nothing(self, store: MetadataStore) -> None:
        await store.put("/gone/deep/key", b"1")
        assert await store.delete("/gone/deep/key") is True
        items, _ = await store.list("/gone/")
        assert items == {}
        await store.create("/gone/deep/key", b"2")  # the path is usable again

    # -- transactions --------------------------------------------------------------------------
    async def test_txn_applies_all(self, store: MetadataStore) -> None:
        a = await store.create("/txn/a", b"1")
        await store.create("/txn/b", b"1")
        await store.txn(
            [Check("/txn/a", a.version), Check("/txn/new", ABSENT)],
            [Put("/txn/a", b"2"), Put("/txn/new", b"n"), Delete("/txn/b")],
        )
        got_a = await store.get("/txn/a")
        got_new = await store.get("/txn/new")
        assert got_a is not None and got_a.value == b"2" and got_a.create_revision == a.create_revision
        assert got_new is not None and got_new.value == b"n"
        assert await store.get("/txn/b") is None

    async def test_txn_all_or_nothing_names_failing_check(self, store: MetadataStore) -> None:
        a = await store.create("/txn/a", b"1")
        b = await store.create("/txn/b", b"1")
        await store.put("/txn/b", b"2")  # b's version moves on
        before, _ = await store.list("/txn/")
        with pytest.raises(MetadataConflict) as info:
            await store.txn(
                [Check("/txn/a", a.version), Check("/txn/b", b.version)],
                [Put("/txn/a", b"x"), Put("/txn/c", b"x"), Delete("/txn/b")],
            )
        assert info.value.index == 1 and info.value.key == "/txn/b"
        after, _ = await store.list("/txn/")
        assert after == before
        with pytest.raises(MetadataConflict) as info:
            await store.txn([Check("/txn/zzz", ABSENT), Check("/txn/a", ABSENT)], [Put("/txn/d", b"x")])
        assert info.value.index == 1 and info.value.key == "/txn/a"
        assert await store.get("/txn/d") is None
        with pytest.raises(MetadataConflict) as info:
            await store.txn([Check("/txn/missing", a.version)], [Delete("/txn/a")])
        assert info.value.index == 0
        assert await store.get("/txn/a") == a

    async def test_txn_checks_are_atomic_under_concurrency(self, open_store: OpenStore) -> None:
        """Read-check-write increments from racing sessions lose no update (a check evaluated
        apart from its writes would let two sessions both write over one version)."""
        sessions = [await open_store() for _ in range(3)]
        await sessions[0].create("/race/counter", b"0")

        async def increment(s: MetadataStore, times: int) -> None:
            for _ in range(times):
                while True:
                    current = await s.get("/race/counter")
                    assert current is not None
                    try:
                        await s.txn(
                            [Check("/race/counter", current.version)],
                            [Put("/race/counter", str(int(current.value) + 1).encode()), Put("/race/last", b"x")],
                        )
                        break
                    except MetadataConflict as exc:
                        assert exc.index == 0

        with trio.fail_after(self.wait_s * 3):
            async with trio.open_nursery() as nursery:
                for s in sessions:
                    for _ in range(2):
                        nursery.start_soon(increment, s, 5)
        final = await sessions[0].get("/race/counter")
        assert final is not None and final.value == b"30"

    async def test_txn_without_checks(self, store: MetadataStore) -> None:
        await store.txn([], [Put("/plain/a", b"1"), Put("/plain/b", b"2"), Delete("/plain/never")])
        items, _ = await store.list("/plain/")
        assert {k: v.value for k, v in items.items()} == {"/plain/a": b"1", "/plain/b": b"2"}

    # -- ephemerals ----------------------------------------------------------------------------
    async def test_ephemerals_vanish_when_session_closes(self, open_store: OpenStore) -> None:
        a = await open_store()
        b = await open_store()
        await a.create("/live/a", b"1", ephemeral=True)
        await a.txn([], [Put("/live/b", b"2", ephemeral=True)])
        await a.create("/live/persistent", b"3")
        seen, _ = await b.list("/live/")
        assert set(seen) == {"/live/a", "/live/b", "/live/persistent"}
        await a.close()
        assert await b.get("/live/a") is None
        assert await b.get("/live/b") is None
        remaining, _ = await b.list("/live/")
        assert set(remaining) == {"/live/persistent"}
        await b.create("/live/a", b"mine", ephemeral=True)  # the key is free again

    # -- watches -------------------------------------------------------------------------------
    async def test_watch_is_gap_free_from_list_revision(self, open_store: OpenStore) -> None:
        s = await open_store()
        other = await open_store()
        p = "/watched/"
        await s.put(p + "a", b"a0")
        await s.put(p + "b", b"b0")
        await s.put("/elsewhere/x", b"ignored")
        snapshot, rev = await s.list(p)
        state = {k: v.value for k, v in snapshot.items()}
        writes: list[tuple[str, bytes | None]] = []

        # changes between the list and the watch must be delivered too
        await s.put(p + "a", b"a1")
        writes.append((p + "a", b"a1"))
        await s.delete(p + "b")
        writes.append((p + "b", None))
        await s.create(p + "c", b"c0")
        writes.append((p + "c", b"c0"))

        events: list[WatchEvent] = []
        watch = s.watch(p, after_revision=rev)
        try:
            await self._consume_until(watch, events, state, {p + "a": b"a1", p + "c": b"c0"})
            # changes by another session while watching, including an ephemeral dying with it
            await other.put(p + "a", b"a2")
            writes.append((p + "a", b"a2"))
            await other.create(p + "eph", b"e", ephemeral=True)
            writes.append((p + "eph", b"e"))
            await other.txn([], [Put(p + "d", b"d0"), Delete(p + "c")])
            writes += [(p + "d", b"d0"), (p + "c", None)]
            await other.put("/elsewhere/y", b"ignored")
            await self._consume_until(watch, events, state, {p + "a": b"a2", p + "d": b"d0", p + "eph": b"e"})
            await other.close()
            writes.append((p + "eph", None))
            await s.put(p + "a", b"a3")
            writes.append((p + "a", b"a3"))
            await self._consume_until(watch, events, state, {p + "a": b"a3", p + "d": b"d0"})
            with trio.move_on_after(self.quiet_s):
                extra = await watch.__anext__()
                pytest.fail(f"watch reported {extra!r} after every change had been delivered")
        finally:
            await close_iterator(watch)

        revisions = [e.revision for e in events]
        assert all(r > rev for r in revisions), (rev, events)
        assert revisions == sorted(revisions), events
        final = {k: v.value for k, v in (await s.list(p))[0].items()}
        assert state == final
        if not self.watch_coalesces:
            assert [(e.key, e.value) for e in events] == writes
        else:
            # coalesced: what is reported is a sub-sequence of the changes ending in every
            # key's final state, never the same change twice
            _assert_subsequence([(e.key, e.value) for e in events], writes)
        latest = await s.get(p + "a")
        last_a = [e for e in events if e.key == p + "a"][-1]
        assert latest is not None and last_a.version == latest.version

    async def _consume_until(
        self,
        watch: AsyncIterator[WatchEvent],
        events: list[WatchEvent],
        state: dict[str, bytes],
        expected: dict[str, bytes],
    ) -> None:
        """Apply watch events to ``state`` until it equals ``expected`` (a gap makes this time out)."""
        with trio.move_on_after(self.wait_s) as scope:
            while state != expected:
                event = await watch.__anext__()
                events.append(event)
                if event.value is None:
                    assert event.key in state, f"deletion of {event.key!r}, which the watcher never saw"
                    del state[event.key]
                else:
                    # every write in these tests changes the value: an event that does not is a duplicate
                    assert state.get(event.key) != event.value, f"duplicate event {event!r}"
                    state[event.key] = event.value
        if scope.cancelled_caught:
            pytest.fail(f"watch did not reach {expected!r} within {self.wait_s}s: state {state!r}, events {events!r}")

    async def test_watch_from_current_revision_sees_only_new_changes(self, store: MetadataStore) -> None:
        await store.put("/w2/old", b"1")
        _, rev = await store.list("/w2/")
        watch = store.watch("/w2/", after_revision=rev)
        try:
            await store.put("/w2/new", b"2")
            with trio.fail_after(self.wait_s):
                event = await watch.__anext__()
        finally:
            await close_iterator(watch)
        assert (event.key, event.value) == ("/w2/new", b"2") and event.revision > rev

    async def test_watch_events_carry_the_keys_create_revision(self, store: MetadataStore) -> None:
        """A write keeps the key's create revision, a re-creation gets a larger one: what tells a
        restarted broker's registration from an update when a store reports both as one write."""
        _, rev = await store.list("/w3/")
        watch = store.watch("/w3/", after_revision=rev)
        try:

            async def reported(value: bytes | None) -> WatchEvent:
                while True:  # a coalescing store may skip to the latest value
                    event = await next_event(watch, self.wait_s)
                    if event.key == "/w3/k" and event.value == value:
                        return event

            await store.put("/w3/k", b"1")
            first = await store.get("/w3/k")
            assert first is not None and (await reported(b"1")).create_revision == first.create_revision
            await store.put("/w3/k", b"2")
            assert (await reported(b"2")).create_revision == first.create_revision
            await store.delete("/w3/k")
            assert (await reported(None)).create_revision == 0
            await store.put("/w3/k", b"3")
            again = await store.get("/w3/k")
            assert again is not None and again.create_revision > first.create_revision
            assert (await reported(b"3")).create_revision == again.create_revision
            # deleted and created again between two events: still told apart from a write
            await store.delete("/w3/k")
            await store.put("/w3/k", b"4")
            last = await store.get("/w3/k")
            assert last is not None and (await reported(b"4")).create_revision == last.create_revision
            assert last.create_revision > again.create_revision
        finally:
            await close_iterator(watch)

    # -- brokers -------------------------------------------------------------------------------
    async def test_register_broker_epochs_increase(self, open_store: OpenStore) -> None:
        a = await open_store()
        b = await open_store()
        e1 = await a.register_broker(1, b'{"host": "h1"}')
        got = await b.get("/brokers/ids/1")
        assert got is not None and got.value == b'{"host": "h1"}' and got.create_revision == e1
        e2 = await a.register_broker(1, b'{"host": "h1b"}')  # same session re-registers
        assert e2 > e1
        with pytest.raises(MetadataConflict):
            await b.register_broker(1, b'{"host": "impostor"}')
        e_other = await b.register_broker(2, b'{"host": "h2"}')
        ids, _ = await a.list("/brokers/ids/")
        assert set(ids) == {"/brokers/ids/1", "/brokers/ids/2"}
        await a.close()  # broker 1 dies: its registration goes
        assert await b.get("/brokers/ids/1") is None
        e3 = await b.register_broker(1, b'{"host": "h1c"}')  # a restarted broker 1
        assert e3 > e2 and e3 > e_other

    # -- elections -----------------------------------------------------------------------------
    async def test_leader_is_none_without_campaign(self, store: MetadataStore) -> None:
        assert await store.leader("controller") is None

    async def test_a_campaign_by_the_leading_session_returns_its_leadership(self, store: MetadataStore) -> None:
        """The session that already leads campaigns again (a controller whose term ended on an
        error): it gets its leadership back at once, the same epoch, its fence still holding.
        A campaign that waited for its own key to go waited for ever, and the cluster had no
        controller until the session ended."""
        first = await store.campaign("again", b"A")
        with trio.fail_after(self.wait_s):
            second = await store.campaign("again", b"A")
        assert second.epoch == first.epoch
        await store.txn([second.fence], [Put("/led/again", b"1")])
        assert await store.leader("again") == (b"A", first.epoch)

    async def test_campaign_resign_and_fencing(self, open_store: OpenStore) -> None:
        a = await open_store()
        b = await open_store()
        la = await a.campaign("controller", b"A")
        assert isinstance(la, Leadership) and la.name == "controller"
        assert await b.leader("controller") == (b"A", la.epoch)
        await a.txn([la.fence], [Put("/controlled", b"by A")])
        won: list[Leadership] = []
        async with trio.open_nursery() as nursery:

            async def contend() -> None:
                won.append(await b.campaign("controller", b"B"))

            nursery.start_soon(contend)
            await trio.sleep(self.quiet_s)
            assert won == [], "campaign returned while another session led"
            await a.resign(la)
            with trio.fail_after(self.wait_s):
                while not won:
                    await trio.sleep(0.01)
        lb = won[0]
        assert lb.epoch > la.epoch
        assert await a.leader("controller") == (b"B", lb.epoch)
        with pytest.raises(MetadataConflict) as info:
            await a.txn([Check("/unrelated", ABSENT), la.fence], [Put("/controlled", b"by deposed A")])
        assert info.value.index == 1
        await b.txn([lb.fence], [Put("/controlled", b"by B")])
        got = await a.get("/controlled")
        assert got is not None and got.value == b"by B"

    async def test_leadership_passes_when_leader_session_closes(self, open_store: OpenStore) -> None:
        a = await open_store()
        b = await open_store()
        c = await open_store()
        la = await a.campaign("ctl", b"A")
        won: list[Leadership] = []
        async with trio.open_nursery() as nursery:

            async def contend(s: MetadataStore, value: bytes) -> None:
                won.append(await s.campaign("ctl", value))

            nursery.start_soon(contend, b, b"B")
            nursery.start_soon(contend, c, b"C")
            await trio.sleep(self.quiet_s)
            assert won == []
            await a.close()
            with trio.fail_after(self.wait_s):
                while not won:
                    await trio.sleep(0.01)
            first = won[0]
            assert first.epoch > la.epoch
            current = await c.leader("ctl")
            assert current in {(b"B", first.epoch), (b"C", first.epoch)}
            winner = b if current == (b"B", first.epoch) else c
            await winner.resign(first)
            with trio.fail_after(self.wait_s):
                while len(won) < 2:
                    await trio.sleep(0.01)
        assert won[1].epoch > won[0].epoch
        with pytest.raises(MetadataConflict):
            await winner.txn([first.fence], [Put("/x", b"stale")])

    async def test_leader_changes_follow_elections(self, open_store: OpenStore) -> None:
        """``leader_changes`` answers at once, then after every change: a new leader, a resign."""
        a = await open_store()
        b = await open_store()
        seen: list[tuple[bytes, int] | None] = []

        async def wait_for(expected: tuple[bytes, int] | None) -> None:
            with trio.fail_after(self.wait_s):
                while not seen or seen[-1] != expected:
                    await trio.sleep(0.01)

        async with trio.open_nursery() as nursery:

            async def follow() -> None:
                async for leader in b.leader_changes("followed"):
                    seen.append(leader)

            nursery.start_soon(follow)
            await wait_for(None)
            la = await a.campaign("followed", b"A")
            await wait_for((b"A", la.epoch))
            await a.resign(la)
            await wait_for(None)
            lb = await b.campaign("followed", b"B")
            await wait_for((b"B", lb.epoch))
            nursery.cancel_scope.cancel()

    async def test_campaign_again_after_resign_bumps_epoch(self, store: MetadataStore) -> None:
        first = await store.campaign("solo", b"me")
        await store.resign(first)
        assert await store.leader("solo") is None
        second = await store.campaign("solo", b"me")
        assert second.epoch > first.epoch
        with pytest.raises(MetadataConflict):
            await store.txn([first.fence], [Put("/solo-write", b"x")])
        await store.txn([second.fence], [Put("/solo-write", b"x")])

    # -- ids -----------------------------------------------------------------------------------
    async def test_next_id_counts_from_one(self, store: MetadataStore) -> None:
        assert [await store.next_id("/ids/producer") for _ in range(3)] == [1, 2, 3]
        assert await store.next_id("/ids/other") == 1

    async def test_next_id_is_atomic_across_sessions(self, open_store: OpenStore) -> None:
        sessions = [await open_store() for _ in range(3)]
        got: list[int] = []

        async def take(s: MetadataStore) -> None:
            got.append(await s.next_id("/brokers/seqid"))

        with trio.fail_after(self.wait_s * 3):
            async with trio.open_nursery() as nursery:
                for s in sessions:
                    for _ in range(6):
                        nursery.start_soon(take, s)
        assert sorted(got) == list(range(1, 19))


async def await_state(
    states: AsyncIterator[SessionState], wanted: SessionState, seen: list[SessionState], timeout_s: float = 20
) -> None:
    """Read ``session_states()`` until ``wanted`` arrives, appending every state to ``seen`` (fault
    tests: kill a server, then wait for SUSPENDED/LOST/CONNECTED); fails after ``timeout_s``."""
    with trio.fail_after(timeout_s):
        async for state in states:
            seen.append(state)
            if state is wanted:
                return


async def next_event(watch: AsyncIterator[WatchEvent], timeout_s: float = 10) -> WatchEvent:
    """The next event of a ``watch()`` iterator; fails after ``timeout_s``."""
    with trio.fail_after(timeout_s):
        return await watch.__anext__()


async def before_crash(
    store: MetadataStore,
) -> tuple[AsyncIterator[SessionState], list[SessionState], AsyncIterator[WatchEvent]]:
    """Set up a server-crash test on an opened store: an ephemeral ``/live/x``, the session feed
    read up to CONNECTED, and a watch of ``/keys/`` shown live by one event (``/keys/before``).

    Returns (session feed, states seen so far, watch); the test kills and restarts the server,
    then checks the watch resumes with ``next_event`` and closes both iterators."""
    await store.create("/live/x", b"1", ephemeral=True)
    _, revision = await store.list("/keys/")
    states = store.session_states()
    seen: list[SessionState] = []
    await await_state(states, SessionState.CONNECTED, seen)
    watch = store.watch("/keys/", after_revision=revision)
    await store.put("/keys/before", b"1")
    first = await next_event(watch)
    assert (first.key, first.value) == ("/keys/before", b"1")
    return states, seen, watch


async def close_iterator(iterator: Any) -> None:
    """Close an async generator early (a no-op for iterators without ``aclose``)."""
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        with trio.CancelScope(shield=True):
            await aclose()


def _assert_subsequence(reported: list[tuple[str, bytes | None]], writes: list[tuple[str, bytes | None]]) -> None:
    """``reported`` is ``writes`` with some entries left out: every report is a real change, in the
    order the changes happened per key, and no change is reported twice."""
    for key in {k for k, _ in writes}:
        mine = [v for k, v in reported if k == key]
        theirs = [v for k, v in writes if k == key]
        it = iter(theirs)
        assert all(any(v == w for w in it) for v in mine), f"{key}: {mine!r} is not a subsequence of {theirs!r}"
        if mine:
            assert mine[-1] == theirs[-1], f"{key}: last reported {mine[-1]!r}, last written {theirs[-1]!r}"
