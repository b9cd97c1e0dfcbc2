"""A change of one partition's state (leader, leader epoch, ISR) reaches the broker as that one
partition: its watch event is applied alone, and this broker's own ISR writes and its replica
fetchers' errors re-read that partition's key, not its topic's. A re-read of the topic per change
made a broker failure cost O(P^2) in a topic's partition count (bench/bench_failover.py: 200
partitions took ~2 minutes to rejoin the ISRs on ZooKeeper)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_harness import create, running_broker

from odradek.broker.alter_partition import ISR_WRITES_IN_FLIGHT, AlterPartitionManager
from odradek.broker.core import BrokerCore
from odradek.broker.metadata_cache import PartitionState, partition_state_key, topic_key
from odradek.interfaces import Put, TopicPartition
from odradek.sessions import MetadataUnavailable

PARTITIONS = 40


@contextmanager
def counting_reads(core: BrokerCore) -> Iterator[dict[str, list[str]]]:
    """Record the store's ``list`` prefixes and ``get`` keys while the block runs."""
    store = core.metadata_cache.store
    seen: dict[str, list[str]] = {"list": [], "get": []}
    real_list, real_get = store.list, store.get

    async def list_(prefix: str) -> Any:
        seen["list"].append(prefix)
        return await real_list(prefix)

    async def get(key: str) -> Any:
        seen["get"].append(key)
        return await real_get(key)

    store.list, store.get = list_, get  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        store.list, store.get = real_list, real_get  # type: ignore[method-assign]


async def wait_for_epoch(core: BrokerCore, tp: TopicPartition, epoch: int) -> None:
    with trio.fail_after(5):
        while core.metadata_cache.topics[tp.topic].states[tp.partition].leader_epoch != epoch:
            await trio.sleep(0.005)


async def test_a_leader_change_of_one_partition_is_taken_from_its_watch_event(tmp_path: Path) -> None:
    """Another broker's (the controller's) writes of ten partitions' states: each is applied
    from its event, with no read of the topic, and shows at once in Metadata (whose answer for
    the topic is cached) and in the local partition's leader epoch."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", PARTITIONS)
        cache = core.metadata_cache
        broker = core.config.broker_id
        md = await core.metadata(["t"], False)  # caches the topic's answer
        assert all(p.leader_epoch == 0 for p in md.topics[0].partitions)
        changed = [TopicPartition("t", p) for p in range(0, PARTITIONS, 4)]
        with counting_reads(core) as reads:
            for tp in changed:
                key = partition_state_key(tp.topic, tp.partition)
                await cache.store.txn([], [Put(key, PartitionState(broker, 3, (broker,), 0).to_json())])
                await wait_for_epoch(core, tp, 3)
        assert not [prefix for prefix in reads["list"] if prefix.startswith(topic_key("t"))], reads
        md = await core.metadata(["t"], False)
        epochs = {p.partition: p.leader_epoch for p in md.topics[0].partitions}
        assert epochs == {p: 3 if p % 4 == 0 else 0 for p in range(PARTITIONS)}
        for tp in changed:
            partition = core.replica_manager.get_partition(tp)
            assert partition is not None and partition.is_leader and partition.leader_epoch == 3


async def test_an_isr_write_reads_nothing_and_the_cache_shows_it_at_once(tmp_path: Path) -> None:
    """This broker's own ISR change (alter_isr) is one compare-and-set on the partition epoch it
    holds, with no read before or after, and the cache (so Metadata) shows the new state when
    the call returns. A fetcher's refresh after an error reads the partition's key once."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", PARTITIONS)
        cache = core.metadata_cache
        broker = core.config.broker_id
        isr_manager = AlterPartitionManager(core.config, cache.store, cache, core.replica_manager)
        tp = TopicPartition("t", 5)
        changes = cache.topics["t"].state_changes
        with counting_reads(core) as reads:
            assert await isr_manager.alter_isr(tp, (broker,))  # same members: a new partition epoch
            assert reads == {"list": [], "get": []}
            await cache.refresh_partition(TopicPartition("t", 6))
        assert reads["list"] == ["/brokers/topics/t/partitions/6/"]
        assert cache.topics["t"].state_changes > changes  # Metadata's cached answer is stale
        stored = await cache.store.get(partition_state_key("t", 5))
        assert stored is not None and cache.topics["t"].states[5] == PartitionState.decode(stored)
        partition = core.replica_manager.get_partition(tp)
        assert partition is not None and partition.partition_epoch == stored.version


async def test_the_cache_keeps_a_later_state_than_its_own_write(tmp_path: Path) -> None:
    """The cache takes in this broker's own write only over the state it replaced: a cache that
    took in a later state meanwhile (the watch delivered the write and what followed it before
    the writer resumed) keeps it."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", 1)
        cache = core.metadata_cache
        broker = core.config.broker_id
        tp = TopicPartition("t", 0)
        before = cache.topics["t"].states[0]
        later = PartitionState(broker, 5, (broker,), before.version + 2)
        cache.topics["t"].states[0] = later
        cache.take_own_write(tp, PartitionState(broker, 0, (broker,), before.version + 1), before.version)
        assert cache.topics["t"].states[0] is later
        cache.topics["t"].states[0] = before
        written = PartitionState(broker, 0, (broker,), before.version + 1)
        cache.take_own_write(tp, written, before.version)
        assert cache.topics["t"].states[0] is written


async def test_a_state_read_before_is_not_taken_back_by_an_older_event(tmp_path: Path) -> None:
    """A partition read at a revision keeps what it read when an event at or below that
    revision comes after it (the watch delivers it late): the state never goes back."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", 2)
        cache = core.metadata_cache
        broker = core.config.broker_id
        key = partition_state_key("t", 1)
        tp = TopicPartition("t", 1)
        async with cache._lock:  # hold the watch back while the state moves twice
            for epoch in (1, 2):
                await cache.store.txn([], [Put(key, PartitionState(broker, epoch, (broker,), 0).to_json())])
        await cache.refresh_partition(tp)
        assert cache.topics["t"].states[1].leader_epoch == 2
        old = PartitionState(broker, 1, (broker,), 0).to_json()
        async with cache._lock:
            assert await cache._apply_state(tp, old, 1, revision=1)  # below the read: left
        assert cache.topics["t"].states[1].leader_epoch == 2
        await trio.sleep(0.1)  # the held-back events, if delivered now, change nothing either
        assert cache.topics["t"].states[1].leader_epoch == 2


async def test_a_state_event_of_an_unknown_partition_re_reads_the_topic(tmp_path: Path) -> None:
    """A state for a partition the cached topic does not have (the topic grew, or is new) is
    not applied alone: the topic is read whole, assignment included."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", 1)
        cache = core.metadata_cache
        broker = core.config.broker_id
        tp = TopicPartition("t", 1)
        async with cache._lock:
            assert not await cache._apply_state(tp, PartitionState(broker, 0, (broker,), 0).to_json(), 0, 10**9)
        assert 1 not in cache.topics["t"].states
        with counting_reads(core) as reads:
            key = partition_state_key("t", 1)
            await cache.store.txn([], [Put(key, PartitionState(broker, 0, (broker,), 0).to_json())])
            with trio.fail_after(5):
                while topic_key("t") + "/" not in reads["list"]:
                    await trio.sleep(0.005)


async def test_an_isr_pass_asks_the_store_about_each_broker_once(tmp_path: Path) -> None:
    """KIP-841's checks (registered, not shutting down, replica not offline) are read once per
    broker in a pass, not once per partition: a broker back from a restart is a candidate for
    every partition it follows."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", 1)
        cache = core.metadata_cache
        isr_manager = AlterPartitionManager(core.config, cache.store, cache, core.replica_manager)
        memo: dict[int, Any] = {}
        with counting_reads(core) as reads:
            for p in range(PARTITIONS):
                assert not await isr_manager._eligible(7, TopicPartition("t", p), memo)  # 7 is not registered
        assert len(reads["get"]) == 3


async def test_an_isr_pass_writes_many_partitions_at_once_and_stops_when_the_store_is_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker back from a restart is a candidate for every partition it follows: each leader
    writes those ISR changes ISR_WRITES_IN_FLIGHT at a time, not one after another. When the
    store is away, the pass ends with MetadataUnavailable (the next pass proposes them again)."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", PARTITIONS)
        cache = core.metadata_cache
        isr_manager = AlterPartitionManager(core.config, cache.store, cache, core.replica_manager)
        in_flight, most, done = 0, 0, []

        async def slow_update(tp: TopicPartition, live: Any, joinable: Any) -> bool:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            await trio.sleep(0.01)
            in_flight -= 1
            done.append(tp)
            return True

        monkeypatch.setattr(isr_manager, "_expansions", lambda p, live, now: {7})
        monkeypatch.setattr(isr_manager, "_update_isr", slow_update)
        assert await isr_manager.maybe_update_isrs() == PARTITIONS
        assert most == ISR_WRITES_IN_FLIGHT and len(done) == PARTITIONS

        async def store_away(tp: TopicPartition, live: Any, joinable: Any) -> bool:
            raise MetadataUnavailable("ZooKeeper did not confirm the write")

        monkeypatch.setattr(isr_manager, "_update_isr", store_away)
        with pytest.raises(MetadataUnavailable):
            await isr_manager.maybe_update_isrs()


async def test_partition_re_reads_run_side_by_side_and_a_late_one_is_dropped(tmp_path: Path) -> None:
    """A partition's re-read (after this broker's own ISR write) reads the store outside the
    cache's lock: the ISR writes a leader has in flight re-read side by side, where one store
    round trip after another under the lock paced a broker's return to 1,000 ISRs. A read that
    comes back older than what the cache took in meanwhile (a watch event of a later write)
    is dropped: the state never goes back."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", PARTITIONS)
        cache = core.metadata_cache
        store = cache.store
        real_list = store.list
        reading = {"now": 0, "most": 0}
        release = trio.Event()

        async def slow_list(prefix: str) -> Any:
            result = await real_list(prefix)  # read first, answer late
            reading["now"] += 1
            reading["most"] = max(reading["most"], reading["now"])
            try:
                await release.wait()
                return result
            finally:
                reading["now"] -= 1

        store.list = slow_list  # type: ignore[method-assign]
        try:
            async with trio.open_nursery() as nursery:
                for p in range(8):
                    nursery.start_soon(cache.refresh_partition, TopicPartition("t", p))
                with trio.fail_after(5):
                    while reading["now"] < 8:
                        await trio.sleep(0.005)
                # meanwhile another broker (the controller) moves t-0 on; its event is taken in
                key = partition_state_key("t", 0)
                broker = core.config.broker_id
                await store.txn([], [Put(key, PartitionState(broker, 3, (broker,), 0).to_json())])
                await wait_for_epoch(core, TopicPartition("t", 0), 3)
                release.set()
        finally:
            store.list = real_list  # type: ignore[method-assign]
        assert reading["most"] == 8
        assert cache.topics["t"].states[0].leader_epoch == 3  # the late read did not take it back
