"""meta_local: the embedded MetadataStore (persistence, CAS, ephemerals, watches, elections)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import trio
import trio.testing

from odradek.config import default_config
from odradek.errors import KafkaStorageError
from odradek.interfaces import (
    ABSENT,
    Check,
    Delete,
    MetadataCompacted,
    MetadataConflict,
    MetadataStore,
    Put,
    SessionState,
)
from odradek.manager import Plugins, build_plugin_manager
from odradek.plugins.meta_local import store as store_mod
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore, open_local_store


async def test_plugin_registers_local(tmp_path: Path) -> None:
    plugins = Plugins(build_plugin_manager(entry_points_enabled=False, extra=["odradek.plugins.meta_local.plugin"]))
    config = default_config(log_dirs=str(tmp_path / "data"))
    store = plugins.metadata("local").create(config)
    assert isinstance(store, MetadataStore)
    await store.open(6000)
    try:
        await store.create("/x", b"1")
    finally:
        await store.close()
    assert (tmp_path / "data" / FILE_NAME).exists()


async def test_cas_versions_and_txn(tmp_path: Path) -> None:
    async with open_local_store(tmp_path / FILE_NAME) as s:
        v = await s.create("/a", b"1")
        assert (await s.get("/a")) == v
        with pytest.raises(MetadataConflict):
            await s.create("/a", b"2")
        v2 = await s.put("/a", b"2", expect=v.version)
        assert v2 > v.version
        with pytest.raises(MetadataConflict):
            await s.put("/a", b"3", expect=v.version)
        with pytest.raises(MetadataConflict):
            await s.put("/a", b"3", expect=ABSENT)
        got = await s.get("/a")
        assert got is not None and got.value == b"2" and got.create_revision == v.create_revision
        # a txn is all or nothing
        with pytest.raises(MetadataConflict) as info:
            await s.txn([Check("/a", v2), Check("/b", v2)], [Put("/c", b"x")])
        assert info.value.index == 1 and await s.get("/c") is None
        await s.txn([Check("/a", v2), Check("/b", ABSENT)], [Put("/b", b"b"), Delete("/a")])
        assert await s.get("/a") is None and (await s.get("/b")) is not None
        assert await s.delete("/a") is False
        with pytest.raises(MetadataConflict):
            await s.delete("/a", expect=5)
        # re-created keys never reuse a version
        v3 = await s.create("/a", b"again")
        assert v3.version > v2


async def test_list_snapshot_and_next_id(tmp_path: Path) -> None:
    async with open_local_store(tmp_path / FILE_NAME) as s:
        await s.create("/t/a", b"1")
        await s.create("/t/b", b"2")
        await s.create("/u", b"3")
        items, rev = await s.list("/t/")
        assert sorted(items) == ["/t/a", "/t/b"] and rev >= 3
        assert [await s.next_id("/ids") for _ in range(3)] == [1, 2, 3]


async def test_survives_restart_and_drops_ephemerals(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    s = LocalMetadataStore(path)
    await s.open(6000)
    await s.create("/keep", b"k")
    epoch1 = await s.register_broker(1, b'{"host": "h"}')
    await s.next_id("/ids")
    assert (await s.get("/brokers/ids/1")) is not None
    # the file on disk is complete JSON after every change (written by rename)
    assert "/keep" in json.loads(path.read_text())["keys"]
    # simulate a crash: forget the in-process state without closing (ephemerals still on disk)
    store_mod._SHARED.pop(s.path).release()
    s2 = LocalMetadataStore(path)
    await s2.open(6000)
    try:
        assert (await s2.get("/keep")).value == b"k"  # type: ignore[union-attr]
        assert await s2.get("/brokers/ids/1") is None
        assert await s2.next_id("/ids") == 2
        epoch2 = await s2.register_broker(1, b"{}")
        assert epoch2 > epoch1
    finally:
        await s2.close()


async def test_second_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    async with open_local_store(path):
        state = store_mod._SharedState(path.resolve())
        with pytest.raises(OSError, match="in use"):
            state.acquire()


async def test_ephemerals_die_with_session(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    async with open_local_store(path) as keeper:
        other = LocalMetadataStore(path)
        await other.open(6000)
        await other.register_broker(2, b"b2")
        with pytest.raises(MetadataConflict):
            await keeper.register_broker(2, b"b2 again")
        states = other.session_states()
        assert await states.__anext__() is SessionState.CONNECTED
        await other.close()
        assert await states.__anext__() is SessionState.LOST
        assert await keeper.get("/brokers/ids/2") is None
        await keeper.register_broker(2, b"now mine")


async def test_watch_is_gap_free_from_revision(tmp_path: Path) -> None:
    async with open_local_store(tmp_path / FILE_NAME) as s:
        await s.create("/w/before", b"0")
        _, rev = await s.list("/w/")
        await s.create("/w/a", b"1")  # written after the snapshot, before the watch starts
        await s.create("/other", b"x")
        seen = []

        async def watcher() -> None:
            async for ev in s.watch("/w/", after_revision=rev):
                seen.append((ev.key, ev.value))
                if len(seen) == 3:
                    return

        async with trio.open_nursery() as n:
            n.start_soon(watcher)
            await trio.testing.wait_all_tasks_blocked()
            await s.put("/w/a", b"2")
            await s.delete("/w/a")
        assert seen == [("/w/a", b"1"), ("/w/a", b"2"), ("/w/a", None)]


async def test_watch_compacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_local_store(tmp_path / FILE_NAME) as s:
        s._live().history = __import__("collections").deque(maxlen=3)
        for i in range(5):
            await s.put("/k", str(i).encode())
        with pytest.raises(MetadataCompacted):
            async for _ in s.watch("/", after_revision=1):
                pass


async def test_campaign_blocks_then_fails_over_with_fence(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    async with open_local_store(path) as a, open_local_store(path) as b:
        lead_a = await a.campaign("controller", b"1")
        assert await a.leader("controller") == (b"1", lead_a.epoch)
        got = []

        async def contender() -> None:
            got.append(await b.campaign("controller", b"2"))

        async with trio.open_nursery() as n:
            n.start_soon(contender)
            await trio.testing.wait_all_tasks_blocked()
            assert not got  # blocked while a leads
            await a.txn([lead_a.fence], [Put("/controller_epoch_data", b"ok")])
            await a.resign(lead_a)
        lead_b = got[0]
        assert lead_b.epoch == lead_a.epoch + 1
        assert await b.leader("controller") == (b"2", lead_b.epoch)
        # the deposed leader's fenced writes fail
        with pytest.raises(MetadataConflict):
            await a.txn([lead_a.fence], [Put("/controller_epoch_data", b"stale")])
        await a.resign(lead_a)  # no-op once lost
        assert await b.leader("controller") == (b"2", lead_b.epoch)


async def test_leadership_lost_on_close(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    async with open_local_store(path) as keeper:
        s = LocalMetadataStore(path)
        await s.open(6000)
        lead = await s.campaign("c", b"x")
        await s.close()
        assert await keeper.leader("c") is None
        again = await keeper.campaign("c", b"y")
        assert again.epoch == lead.epoch + 1


@pytest.mark.parametrize("content", [b"", b"\n", b"{garbage", b"[]", b'{"format": 1}', b'{"format": 7}'])
async def test_a_damaged_metadata_file_is_a_one_line_error_naming_it(tmp_path: Path, content: bytes) -> None:
    """Not a JSONDecodeError traceback at start-up: which file, what is wrong, what to do."""
    path = tmp_path / FILE_NAME
    path.write_bytes(content)
    s = LocalMetadataStore(path)
    with pytest.raises(store_mod.MetadataFileError) as info:
        await s.open(6000)
    message = str(info.value)
    assert str(path.resolve()) in message and "\n" not in message
    assert ("is empty" if not content.strip() else "is damaged") in message
    assert "backup" in message
    assert path.read_bytes() == content  # left as it was
    # the lock was released: a fixed file opens
    path.unlink()
    async with open_local_store(path):
        pass


async def test_a_full_disk_names_the_metadata_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Restarting on a full disk after a crash: dropping the dead session's registrations
    rewrites the file; the failure names it (it was a bare '[Errno 28] No space left on device')
    and leaves no half-written temp file."""
    path = tmp_path / FILE_NAME
    s = LocalMetadataStore(path)
    await s.open(6000)
    await s.register_broker(1, b"{}")
    store_mod._SHARED.pop(s.path).release()  # a crash: the ephemeral stays in the file
    before = path.read_bytes()

    def write(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_mod.os, "write", write)
    with pytest.raises(KafkaStorageError, match=rf"writing the metadata file {path.resolve()} failed: \[Errno 28\]"):
        await LocalMetadataStore(path).open(6000)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE_NAME, FILE_NAME + ".lock"]


async def test_random_changes_list_and_persist_like_the_whole_state(tmp_path: Path) -> None:
    """Commits encode only the keys they change and ``list`` reads a sorted index of the keys
    (both once scanned and re-encoded every key, which made each commit cost the size of the
    whole store). After every step of random puts, deletes and transactions over nested keys,
    each prefix lists exactly the keys a scan finds, the file is valid JSON holding exactly the
    live keys with their versions, and a restart loads the same state."""
    import random

    rng = random.Random(7)
    path = tmp_path / FILE_NAME
    s = LocalMetadataStore(path)
    await s.open(6000)
    names = [f"/{a}/{b}" for a in ("a", "ab", "b") for b in ("x", "x/y", "xy", "z")] + ["/a", "/b"]
    prefixes = ["/", "/a", "/a/", "/ab/", "/b/x", "/b/x/", "/c/"]
    for step in range(300):
        key = rng.choice(names)
        roll = rng.random()
        if roll < 0.5:
            await s.put(key, f"v{step}".encode())
        elif roll < 0.8:
            await s.delete(key)
        else:
            other = rng.choice(names)
            await s.txn([], [Put(key, f"t{step}".encode()), Delete(other)] if other != key else [Delete(key)])
        everything, _ = await s.list("/")
        for prefix in prefixes:
            listed, _ = await s.list(prefix)
            assert listed == {k: v for k, v in everything.items() if k.startswith(prefix)}, (step, prefix)
        on_disk = json.loads(path.read_text())["keys"]
        assert {k: e["mod"] for k, e in on_disk.items()} == {k: v.version for k, v in everything.items()}, step
    before, revision = await s.list("/")
    store_mod._SHARED.pop(s.path).release()  # a crash: the next open reads the file alone
    s2 = LocalMetadataStore(path)
    await s2.open(6000)
    try:
        assert await s2.list("/") == (before, revision)
    finally:
        await s2.close()
