"""Loading ``__transaction_state`` partitions: each newly led partition loads in its own task
(Kafka's ``loadTransactionsForTxnTopicPartition``), all of them answer COORDINATOR_LOAD_IN_PROGRESS
until their load ends, FindCoordinator never waits for the loads of other partitions, and a
failed load is logged and retried instead of ending the coordinator (MockClock)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from broker_harness import create, running_broker
from test_txn_coordinator import Ids, Markers

from odradek.broker.api import (
    FetchPartitionResult,
    IsolationLevel,
    ListOffsetsPartition,
    ListOffsetsPartitionResult,
)
from odradek.broker.core import BrokerCore
from odradek.broker.group.hashing import partition_for
from odradek.broker.internal_topic import PartitionLeader, Record
from odradek.broker.txn import InMemoryTransactionLog, TransactionCoordinator, TransactionState
from odradek.broker.txn.coordinator import LOAD_WAIT_S, OWNERSHIP_REFRESH_S
from odradek.config import default_config
from odradek.errors import ErrorCode, KafkaError
from odradek.interfaces import TopicPartition

PARTITIONS = 5
TP = TopicPartition("t", 0)


class SlowLog(InMemoryTransactionLog):
    """A log whose ``gated`` partitions are read only once ``gate`` is set (a big partition
    still loading), whose ``failing`` partitions fail to read (as a read error of the broker's
    log does), and whose partitions' leaders can be moved (``leaders_of``)."""

    def __init__(self) -> None:
        super().__init__(PARTITIONS)
        self.gate = trio.Event()
        self.gated: set[int] = set()
        self.failing: dict[int, int] = {}  # partition -> how many reads still fail
        self.leaders_of: dict[int, PartitionLeader] = {}

    async def read(self, partition: int) -> AsyncIterator[Record]:
        if partition in self.gated:
            await self.gate.wait()
        if self.failing.get(partition, 0) > 0:
            self.failing[partition] -= 1
            raise KafkaError("reading failed", code=ErrorCode.KAFKA_STORAGE_ERROR)
        async for record in super().read(partition):
            yield record

    async def leaders(self, listener_name: str | None = None) -> dict[int, PartitionLeader]:
        return {**await super().leaders(listener_name), **self.leaders_of} if self.entries is not None else {}


def ids_by_partition() -> dict[int, str]:
    """One transactional id per partition."""
    ids: dict[int, str] = {}
    i = 0
    while len(ids) < PARTITIONS:
        ids.setdefault(partition_for(f"tx{i}", PARTITIONS), f"tx{i}")
        i += 1
    return ids


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


def new_coordinator(log: SlowLog) -> TransactionCoordinator:
    return TransactionCoordinator(log, Ids(), Markers(), default_config(), node_id=0, now_ms=_now_ms)


async def elected(log: SlowLog, coord: TransactionCoordinator) -> None:
    """The log appears (a leadership change makes this broker lead every partition) and the
    ownership loop notices it."""
    await log.ensure_topic()
    await trio.sleep(OWNERSHIP_REFRESH_S + 0.01)


@pytest.mark.trio
async def test_every_elected_partition_loads_at_once_and_find_coordinator_does_not_wait_for_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Partition 0 is big: its load must hold neither the other partitions' loads (their ids got
    NOT_COORDINATOR while queued behind it) nor FindCoordinator of their ids (it waited for the
    ownership lock until every queued load was over)."""
    ids = ids_by_partition()
    log = SlowLog()
    coord = new_coordinator(log)
    async with trio.open_nursery() as nursery:
        await nursery.start(coord.run)
        log.gated = {0}
        await elected(log, coord)
        assert coord.loading == {0} and coord.owned == set(range(1, PARTITIONS))
        assert coord.validate(ids[0]) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        for p in range(1, PARTITIONS):
            assert coord.validate(ids[p]) is None
        # another leadership change: partitions 0 and 3 are lost and regained; 3 must not wait for 0
        coord._unload(0)
        coord._unload(3)
        with trio.fail_after(LOAD_WAIT_S / 2):
            found = await coord.find_coordinator(ids[3])
        assert found.error == ErrorCode.NONE and 3 in coord.owned and 0 in coord.loading
        with trio.fail_after(LOAD_WAIT_S / 2):
            init = await coord.init_producer_id(ids[3], 60000)
        assert init.error == ErrorCode.NONE
        # the loading partition's own FindCoordinator is held only briefly, then answered
        started = trio.current_time()
        assert (await coord.find_coordinator(ids[0])).error == ErrorCode.NONE
        assert trio.current_time() - started == pytest.approx(LOAD_WAIT_S)
        started = trio.current_time()
        assert (await coord.init_producer_id(ids[0], 60000)).error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert trio.current_time() - started == pytest.approx(LOAD_WAIT_S)
        assert coord.check_txn_offset_commit(ids[0], 1, 0, "g") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        log.gate.set()
        await coord.wait_for_loads()
        assert coord.owned == set(range(PARTITIONS)) and not coord.loading
        assert (await coord.init_producer_id(ids[0], 60000)).error == ErrorCode.NONE
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_failed_load_is_logged_and_retried_without_ending_the_coordinator(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    ids = ids_by_partition()
    log = SlowLog()
    async with trio.open_nursery() as nursery:
        coord = new_coordinator(log)
        await nursery.start(coord.run)
        r = await coord.init_producer_id(ids[2], 60000)
        assert r.error == ErrorCode.NONE
        coord._unload(2)  # as after losing and regaining the leadership
        log.failing = {2: 3}
        with caplog.at_level(logging.WARNING, logger="odradek.broker.txn.coordinator"):
            await trio.sleep(OWNERSHIP_REFRESH_S * 3 + 0.01)
            assert 2 not in coord.owned and 2 not in coord.loading  # not owned with its ids missing
            assert coord.validate(ids[2]) == ErrorCode.NOT_COORDINATOR
            await trio.sleep(OWNERSHIP_REFRESH_S + 0.01)  # the fourth read succeeds
        assert 2 in coord.owned
        again = await coord.init_producer_id(ids[2], 60000)
        assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.NONE, r.producer_id, 1)
        tracebacks = [rec for rec in caplog.records if rec.exc_info is not None]
        assert len(tracebacks) == 1, "one traceback, not one per retry"
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_load_whose_leadership_ended_is_not_installed(autojump_clock: trio.testing.MockClock) -> None:
    """The partition moves to another broker while it loads: its ids must not be owned here
    when the (stale) read ends."""
    ids = ids_by_partition()
    log = SlowLog()
    async with trio.open_nursery() as nursery:
        coord = new_coordinator(log)
        await nursery.start(coord.run)
        assert (await coord.init_producer_id(ids[1], 60000)).error == ErrorCode.NONE
        log.gated = {1}
        coord._unload(1)
        await trio.sleep(OWNERSHIP_REFRESH_S + 0.01)
        assert 1 in coord.loading
        log.leaders_of = {1: PartitionLeader(1, "other", 9092, leader_epoch=1)}
        await trio.sleep(OWNERSHIP_REFRESH_S + 0.01)
        assert 1 not in coord.loading
        log.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert 1 not in coord.owned and ids[1] not in coord.transactions
        assert coord.validate(ids[1]) == ErrorCode.NOT_COORDINATOR
        nursery.cancel_scope.cancel()


# -- a failed read of __transaction_state through a real broker ------------------------------------


async def _broker_with_a_transaction(core: BrokerCore) -> tuple[TransactionCoordinator, int, int, int]:
    """An open transaction of "tx" on t-0; returns the coordinator, its producer id and epoch, and
    the id's __transaction_state partition."""
    coord = core.transaction_coordinator
    assert coord is not None
    r = await coord.init_producer_id("tx", 60000)
    assert r.error == ErrorCode.NONE
    await create(core, "t")
    with trio.fail_after(5):
        while (await coord.add_partitions("tx", r.producer_id, r.producer_epoch, [TP]))[TP] != ErrorCode.NONE:
            await trio.sleep(0.01)
    return coord, r.producer_id, r.producer_epoch, coord.partition_for("tx")


async def test_a_failed_fetch_of_the_log_fails_the_read(tmp_path: Path) -> None:
    """A fetch error in the middle of __transaction_state was taken for its end."""
    async with running_broker(tmp_path) as core:
        coord, _, _, p = await _broker_with_a_transaction(core)
        topic = coord.log.topic  # type: ignore[attr-defined]
        assert [e async for e in topic.read_entries(p)]  # InitProducerId, AddPartitionsToTxn
        fetch = core.fetch

        async def failing(*args: Any, **kwargs: Any) -> dict[TopicPartition, FetchPartitionResult]:
            parts = args[5]
            return {x.tp: FetchPartitionResult(ErrorCode.KAFKA_STORAGE_ERROR) for x in parts}

        core.fetch = failing  # type: ignore[method-assign]
        with pytest.raises(KafkaError) as raised:
            async for _ in topic.read_entries(p):
                pass
        assert raised.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        core.fetch = fetch  # type: ignore[method-assign]


async def test_a_failed_read_leaves_the_partition_unowned_until_a_reload_succeeds(tmp_path: Path) -> None:
    """ListOffsets failing during a reload (the partition not led locally yet) made the partition
    owned with its ids missing, and it was never reloaded: the producer's next InitProducerId
    got a fresh epoch without its open transaction being aborted."""
    async with running_broker(tmp_path) as core:
        coord, pid, epoch, p = await _broker_with_a_transaction(core)
        list_offsets = core.list_offsets

        async def failing(
            replica_id: int, level: IsolationLevel, parts: list[ListOffsetsPartition]
        ) -> dict[TopicPartition, ListOffsetsPartitionResult]:
            return {x.tp: ListOffsetsPartitionResult(ErrorCode.NOT_LEADER_OR_FOLLOWER) for x in parts}

        core.list_offsets = failing  # type: ignore[method-assign]
        coord._unload(p)  # as after a leadership change
        await coord.refresh_ownership()
        await coord.wait_for_loads()
        assert p not in coord.owned and "tx" not in coord.transactions
        assert (await coord.find_coordinator("tx")).error == ErrorCode.NONE  # clients look again
        assert coord.validate("tx") == ErrorCode.NOT_COORDINATOR
        core.list_offsets = list_offsets  # type: ignore[method-assign]
        with trio.fail_after(5):  # the ownership loop loads it again
            while p not in coord.owned:
                await trio.sleep(0.01)
        assert coord.transactions["tx"].state is TransactionState.ONGOING
        r = await coord.init_producer_id("tx", 60000)
        assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.NONE, pid, epoch + 2)  # aborted, fenced
        assert await coord.end_transaction("tx", pid, epoch, True) == ErrorCode.PRODUCER_FENCED
