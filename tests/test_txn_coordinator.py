"""Unit tests of the transaction coordinator's state machine, markers, fencing, reload and
timeouts, over an in-memory ``__transaction_state`` and a recording marker writer (MockClock)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from odradek.broker.group.hashing import partition_for
from odradek.broker.internal_topic import PartitionLeader, Record
from odradek.broker.txn import InMemoryTransactionLog, TransactionCoordinator, TransactionState
from odradek.broker.txn.coordinator import MAX_EPOCH, MAX_FENCE_EPOCH, OWNERSHIP_REFRESH_S
from odradek.broker.txn.schema import parse_txn_key, parse_txn_value, txn_key, txn_value
from odradek.broker.txn.state import TransactionMetadata
from odradek.config import default_config
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.records import ControlRecordType

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


class Ids:
    def __init__(self) -> None:
        self.next = 1000

    async def generate_producer_id(self) -> int:
        self.next += 1
        return self.next


class Markers:
    """Records every marker; ``fail`` partitions answer NOT_LEADER_OR_FOLLOWER; ``gate`` blocks."""

    def __init__(self) -> None:
        self.written: list[tuple[int, int, ControlRecordType, TopicPartition]] = []
        self.fail: set[TopicPartition] = set()
        self.gate: trio.Event | None = None

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        result: ControlRecordType,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        if self.gate is not None:
            await self.gate.wait()
        out = {}
        for tp in partitions:
            if tp in self.fail:
                out[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                self.written.append((producer_id, producer_epoch, result, tp))
                out[tp] = ErrorCode.NONE
        return out


class Offsets:
    def offsets_partition(self, group_id: str) -> int | None:
        return None  # no group coordinator: the configured partition count places the group


def _now_ms() -> int:
    return int(trio.current_time() * 1000)


@asynccontextmanager
async def coordinator(
    log: InMemoryTransactionLog | None = None, markers: Markers | None = None, offsets: Offsets | None = None
) -> AsyncIterator[TransactionCoordinator]:
    log = log or InMemoryTransactionLog(num_partitions=5)
    await log.ensure_topic()
    coord = TransactionCoordinator(
        log, Ids(), markers or Markers(), default_config(), now_ms=_now_ms, txn_offsets=offsets or Offsets()
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(coord.run)
        yield coord
        nursery.cancel_scope.cancel()


async def test_init_producer_id_bumps_epoch_and_survives_reload() -> None:
    log = InMemoryTransactionLog(num_partitions=5)
    async with coordinator(log) as coord:
        first = await coord.init_producer_id("a", 60000)
        second = await coord.init_producer_id("a", 60000)
        assert (first.error, second.error) == (ErrorCode.NONE, ErrorCode.NONE)
        assert second.producer_id == first.producer_id and second.producer_epoch == first.producer_epoch + 1 == 1
        stale = await coord.init_producer_id("a", 60000, first.producer_id, first.producer_epoch)
        assert stale.error == ErrorCode.PRODUCER_FENCED
        too_long = await coord.init_producer_id("a", coord.max_timeout_ms + 1)
        assert too_long.error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await coord.init_producer_id("b", 60000)).producer_id != first.producer_id
    async with coordinator(log) as coord:  # a restarted broker reloads the log
        again = await coord.init_producer_id("a", 60000)
        assert (again.producer_id, again.producer_epoch) == (first.producer_id, 2)


async def test_commit_writes_markers_and_completes() -> None:
    markers, offsets = Markers(), Offsets()
    async with coordinator(markers=markers, offsets=offsets) as coord:
        r = await coord.init_producer_id("a", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        assert coord.verify_transaction("a", pid, epoch, TP0) == ErrorCode.INVALID_TXN_STATE  # no transaction yet
        assert await coord.add_partitions("a", pid, epoch, [TP0, TP1]) == {TP0: ErrorCode.NONE, TP1: ErrorCode.NONE}
        assert coord.check_txn_offset_commit("a", pid, epoch, "group") == ErrorCode.INVALID_TXN_STATE
        assert await coord.add_offsets("a", pid, epoch, "group") == ErrorCode.NONE
        assert coord.check_txn_offset_commit("a", pid, epoch, "group") is None
        assert coord.check_txn_offset_commit("a", pid, epoch + 1, "group") == ErrorCode.PRODUCER_FENCED
        assert coord.check_txn_offset_commit("a", pid + 1, epoch, "group") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        md = coord.transactions["a"]
        assert md.state is TransactionState.ONGOING and TP0 in md.partitions
        assert coord.verify_transaction("a", pid, epoch, TP0) == ErrorCode.NONE
        assert coord.verify_transaction("a", pid, epoch, TopicPartition("t", 7)) == ErrorCode.INVALID_TXN_STATE
        assert coord.verify_transaction("a", pid + 1, epoch, TP0) == ErrorCode.INVALID_TXN_STATE
        assert await coord.end_transaction("a", pid + 1, epoch, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert await coord.end_transaction("a", pid, epoch, True) == ErrorCode.NONE
        # markers into every partition of the transaction: the data partitions and the group's
        # __consumer_offsets partition, where the marker settles the TxnOffsetCommit records
        offsets_tp = TopicPartition("__consumer_offsets", partition_for("group", 50))
        assert sorted(markers.written) == sorted(
            [(pid, epoch, ControlRecordType.COMMIT, tp) for tp in (TP0, TP1, offsets_tp)]
        )
        md = coord.transactions["a"]
        assert md.state is TransactionState.COMPLETE_COMMIT and not md.partitions
        assert coord.verify_transaction("a", pid, epoch, TP0) == ErrorCode.INVALID_TXN_STATE
        # a retried EndTxn is answered again; the opposite outcome is refused
        assert await coord.end_transaction("a", pid, epoch, True) == ErrorCode.NONE
        assert await coord.end_transaction("a", pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
        # the next transaction aborts
        assert await coord.add_partitions("a", pid, epoch, [TP1]) == {TP1: ErrorCode.NONE}
        assert await coord.end_transaction("a", pid, epoch, False) == ErrorCode.NONE
        assert markers.written[-1] == (pid, epoch, ControlRecordType.ABORT, TP1)
        assert coord.transactions["a"].state is TransactionState.COMPLETE_ABORT
        assert await coord.end_transaction("a", pid, epoch, False) == ErrorCode.NONE
        assert await coord.end_transaction("a", pid, epoch, True) == ErrorCode.INVALID_TXN_STATE


async def test_end_txn_without_a_transaction_is_invalid() -> None:
    async with coordinator() as coord:
        r = await coord.init_producer_id("a", 60000)
        assert await coord.end_transaction("a", r.producer_id, r.producer_epoch, True) == ErrorCode.INVALID_TXN_STATE
        assert await coord.end_transaction("unknown", 1, 0, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


async def test_requests_for_unknown_ids_leave_no_per_id_state() -> None:
    """Any client may name any transactional id: ids the coordinator does not know are answered
    without a lock (or anything else) staying behind for them, while two requests for one id
    still take turns on its lock."""
    markers = Markers()
    async with coordinator(markers=markers) as coord:
        for i in range(200):
            tid = f"unknown-{i}"
            assert await coord.end_transaction(tid, 1, 0, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
            assert await coord.add_partitions(tid, 1, 0, [TP0]) == {TP0: ErrorCode.INVALID_PRODUCER_ID_MAPPING}
            assert await coord.add_offsets(tid, 1, 0, "g") == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert len(coord._locks) == 0 and not coord.transactions
        r = await coord.init_producer_id("a", 60000)
        await coord.add_partitions("a", r.producer_id, r.producer_epoch, [TP0])
        assert len(coord._locks) == 0
        results: list[ErrorCode] = []

        async def end() -> None:
            results.append(await coord.end_transaction("a", r.producer_id, r.producer_epoch, True))

        # another request for "a" holds its lock: EndTxn waits for it
        async with trio.open_nursery() as nursery, coord._locks.hold("a"):
            nursery.start_soon(end)
            await trio.testing.wait_all_tasks_blocked()
            assert len(coord._locks) == 1 and not results
        assert results == [ErrorCode.NONE]
        assert coord.transactions["a"].state is TransactionState.COMPLETE_COMMIT
        assert len(coord._locks) == 0


async def test_concurrent_transactions_while_markers_are_pending() -> None:
    markers = Markers()
    async with coordinator(markers=markers) as coord:
        r = await coord.init_producer_id("a", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        await coord.add_partitions("a", pid, epoch, [TP0])
        markers.gate = trio.Event()
        results: list[ErrorCode] = []

        async def end() -> None:
            results.append(await coord.end_transaction("a", pid, epoch, True))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(end)
            await trio.testing.wait_all_tasks_blocked()
            assert coord.transactions["a"].state is TransactionState.PREPARE_COMMIT
            assert await coord.add_partitions("a", pid, epoch, [TP1]) == {TP1: ErrorCode.CONCURRENT_TRANSACTIONS}
            assert (await coord.init_producer_id("a", 60000)).error == ErrorCode.CONCURRENT_TRANSACTIONS
            assert await coord.end_transaction("a", pid, epoch, True) == ErrorCode.CONCURRENT_TRANSACTIONS
            assert await coord.end_transaction("a", pid, epoch, False) == ErrorCode.INVALID_TXN_STATE
            markers.gate.set()
        assert results == [ErrorCode.NONE]
        assert coord.transactions["a"].state is TransactionState.COMPLETE_COMMIT
        assert markers.written == [(pid, epoch, ControlRecordType.COMMIT, TP0)]


async def test_reinit_aborts_the_open_transaction_and_fences_the_old_producer() -> None:
    markers = Markers()
    async with coordinator(markers=markers) as coord:
        old = await coord.init_producer_id("a", 60000)
        await coord.add_partitions("a", old.producer_id, old.producer_epoch, [TP0])
        new = await coord.init_producer_id("a", 60000)
        assert new.error == ErrorCode.NONE
        # as in Kafka: the abort is written with the epoch bumped once (fencing), the new
        # instance gets it bumped again
        assert new.producer_id == old.producer_id and new.producer_epoch == old.producer_epoch + 2
        # the abort marker carries an epoch newer than the old producer's: the partition fences it
        assert markers.written == [(old.producer_id, old.producer_epoch + 1, ControlRecordType.ABORT, TP0)]
        assert coord.transactions["a"].state is TransactionState.EMPTY
        fenced = await coord.add_partitions("a", old.producer_id, old.producer_epoch, [TP0])
        assert fenced == {TP0: ErrorCode.PRODUCER_FENCED}
        assert await coord.end_transaction("a", old.producer_id, old.producer_epoch, True) == ErrorCode.PRODUCER_FENCED
        verified = coord.verify_transaction("a", old.producer_id, old.producer_epoch, TP0)
        assert verified == ErrorCode.INVALID_PRODUCER_EPOCH


@pytest.mark.trio
async def test_timed_out_transaction_is_aborted_and_fenced(autojump_clock: trio.testing.MockClock) -> None:
    markers = Markers()
    async with coordinator(markers=markers) as coord:
        r = await coord.init_producer_id("a", 3000)
        pid, epoch = r.producer_id, r.producer_epoch
        await coord.add_partitions("a", pid, epoch, [TP0])
        await trio.sleep(2.5)
        await coord.abort_timed_out_transactions()
        assert coord.transactions["a"].state is TransactionState.ONGOING  # not yet expired
        await trio.sleep(coord.abort_interval_ms / 1000 + 1)  # the abort loop runs
        md = coord.transactions["a"]
        assert md.state is TransactionState.COMPLETE_ABORT and md.producer_epoch == epoch + 1
        assert markers.written == [(pid, epoch + 1, ControlRecordType.ABORT, TP0)]
        assert await coord.end_transaction("a", pid, epoch, True) == ErrorCode.PRODUCER_FENCED


@pytest.mark.trio
async def test_timed_out_transactions_are_all_aborted_in_one_sweep_while_markers_fail(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Three timed-out transactions whose markers cannot be written (their partition has no
    leader) must not keep a fourth one open: the sweep waited up to end_txn_wait_s for each
    one's markers, so the k-th was aborted ~10*(k-1) s late and its producer could still
    commit it meanwhile."""
    markers = Markers()
    markers.fail = {TP1}
    async with coordinator(markers=markers) as coord:
        producers = {}
        for i in range(4):
            r = await coord.init_producer_id(f"app-{i}", 1000)
            producers[f"app-{i}"] = (r.producer_id, r.producer_epoch)
            partition = TP1 if i < 3 else TP0
            assert await coord.add_partitions(f"app-{i}", r.producer_id, r.producer_epoch, [partition]) == {
                partition: ErrorCode.NONE
            }
        await trio.sleep(coord.abort_interval_ms / 1000 + 0.5)  # one sweep, and a little more
        states = {tid: coord.transactions[tid].state for tid in producers}
        assert states == {
            "app-0": TransactionState.PREPARE_ABORT,
            "app-1": TransactionState.PREPARE_ABORT,
            "app-2": TransactionState.PREPARE_ABORT,
            "app-3": TransactionState.COMPLETE_ABORT,
        }
        pid, epoch = producers["app-3"]
        assert await coord.end_transaction("app-3", pid, epoch, True) == ErrorCode.PRODUCER_FENCED
        markers.fail = set()
        await trio.sleep(coord.abort_interval_ms / 1000)  # the stuck ones complete once writable
        assert all(coord.transactions[tid].state is TransactionState.COMPLETE_ABORT for tid in producers)


@pytest.mark.trio
async def test_markers_are_retried_until_written(autojump_clock: trio.testing.MockClock) -> None:
    markers = Markers()
    async with coordinator(markers=markers) as coord:
        r = await coord.init_producer_id("a", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        await coord.add_partitions("a", pid, epoch, [TP0, TP1])
        markers.fail = {TP1}
        assert await coord.end_transaction("a", pid, epoch, True) == ErrorCode.NONE  # decided: PrepareCommit
        assert coord.transactions["a"].state is TransactionState.PREPARE_COMMIT
        markers.fail = set()
        await trio.sleep(coord.abort_interval_ms / 1000 + 1)
        assert coord.transactions["a"].state is TransactionState.COMPLETE_COMMIT
        assert [(tp, kind) for _, _, kind, tp in markers.written].count((TP1, ControlRecordType.COMMIT)) == 1


@pytest.mark.trio
async def test_prepared_transaction_is_completed_after_reload(autojump_clock: trio.testing.MockClock) -> None:
    log, markers = InMemoryTransactionLog(num_partitions=5), Markers()
    async with coordinator(log, markers) as coord:
        r = await coord.init_producer_id("a", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        await coord.add_partitions("a", pid, epoch, [TP0])
        markers.fail = {TP0}
        await coord.end_transaction("a", pid, epoch, False)
        assert coord.transactions["a"].state is TransactionState.PREPARE_ABORT
    markers.fail = set()
    async with coordinator(log, markers) as coord:  # restart: PrepareAbort found in the log
        await trio.testing.wait_all_tasks_blocked()
        assert coord.transactions["a"].state is TransactionState.COMPLETE_ABORT
        assert markers.written == [(pid, epoch, ControlRecordType.ABORT, TP0)]


async def test_state_write_failure_leaves_the_state_unchanged() -> None:
    log = InMemoryTransactionLog(num_partitions=5)
    async with coordinator(log) as coord:
        r = await coord.init_producer_id("a", 60000)
        log.fail_next = [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        errors = await coord.add_partitions("a", r.producer_id, r.producer_epoch, [TP0])
        assert errors == {TP0: ErrorCode.NOT_COORDINATOR}
        assert coord.transactions["a"].state is TransactionState.EMPTY


async def test_not_coordinator_for_partitions_led_elsewhere() -> None:
    async with coordinator() as coord:
        coord.owned.discard(coord.partition_for("a"))
        assert await coord.add_partitions("a", 1, 0, [TP0]) == {TP0: ErrorCode.NOT_COORDINATOR}
        assert await coord.end_transaction("a", 1, 0, True) == ErrorCode.NOT_COORDINATOR


@pytest.mark.trio
async def test_idle_transactional_ids_expire(autojump_clock: trio.testing.MockClock) -> None:
    log = InMemoryTransactionLog(num_partitions=5)
    async with coordinator(log) as coord:
        coord.id_expiration_ms = 60_000
        idle = await coord.init_producer_id("idle", 60000)
        busy = await coord.init_producer_id("busy", 600_000)
        await coord.add_partitions("busy", busy.producer_id, busy.producer_epoch, [TP0])
        await trio.sleep(30)
        assert await coord.expire_transactional_ids() == 0
        await trio.sleep(31)
        assert await coord.expire_transactional_ids() == 1  # an open transaction keeps its id
        assert set(coord.transactions) == {"busy"}
        assert log.records()[-1] == (txn_key("idle"), None)  # a tombstone
        assert (await coord.init_producer_id("idle", 60000)).producer_id != idle.producer_id
    async with coordinator(log) as coord:  # the tombstone survives a reload
        assert "idle" in coord.transactions and coord.transactions["idle"].producer_epoch == 0


def test_handlers_advertise_the_transaction_apis() -> None:
    from odradek.plugins.transport_tcp.apis import load_handlers
    from odradek.protocol import ApiKey, advertised_versions

    advertised = advertised_versions(load_handlers())
    for key in (ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT):
        assert advertised[key] == (0, 2)


def test_log_schema_round_trip() -> None:
    md = TransactionMetadata("tid", 42, 3, 60000, TransactionState.ONGOING, {TP0, TP1}, 1000, 2000)
    assert parse_txn_key(txn_key("tid")) == "tid"
    assert parse_txn_value("tid", txn_value(md)) == md
    empty = TransactionMetadata("tid", 42, 4, 60000, TransactionState.EMPTY, set(), -1, 3000)
    value = txn_value(empty)
    assert value[17:21] == b"\xff\xff\xff\xff"  # Empty writes a null partition array, as Kafka does
    assert parse_txn_value("tid", value) == empty


class GatedLog(InMemoryTransactionLog):
    """A log whose reads wait for ``gate`` (a coordinator stays in the middle of loading) and
    whose partitions have no leader while ``leaderless`` (a broker not registered yet)."""

    def __init__(self, num_partitions: int = 5) -> None:
        super().__init__(num_partitions)
        self.gate: trio.Event | None = None
        self.leaderless = False

    async def read(self, partition: int) -> AsyncIterator[Record]:
        if self.gate is not None:
            await self.gate.wait()
        async for record in super().read(partition):
            yield record

    async def leaders(self, listener_name: str | None = None) -> dict[int, PartitionLeader]:
        return {} if self.leaderless else await super().leaders(listener_name)


async def test_requests_while_the_log_loads_are_answered_coordinator_load_in_progress(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """After a restart, until the id's __transaction_state partition is loaded, every request
    about it gets a retriable answer: the produce path's verification too (it answered
    INVALID_TXN_STATE, making the producer abort a healthy transaction)."""
    log = GatedLog(num_partitions=1)
    async with coordinator(log) as coord:
        r = await coord.init_producer_id("a", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        await coord.add_partitions("a", pid, epoch, [TP0])
        await coord.add_offsets("a", pid, epoch, "group")
    p = coord.partition_for("a")
    log.gate = trio.Event()
    coord = TransactionCoordinator(log, Ids(), Markers(), default_config(), now_ms=_now_ms, txn_offsets=Offsets())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(coord.run)
        await trio.testing.wait_all_tasks_blocked()
        assert p in coord.loading and p not in coord.owned
        loading = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert coord.verify_transaction("a", pid, epoch, TP0) == loading
        assert await coord.add_partitions("a", pid, epoch, [TP1]) == {TP1: loading}
        assert await coord.add_offsets("a", pid, epoch, "group") == loading
        assert coord.check_txn_offset_commit("a", pid, epoch, "group") == loading
        assert await coord.end_transaction("a", pid, epoch, True) == loading
        assert (await coord.init_producer_id("a", 60000, pid, epoch)).error == loading
        log.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert coord.verify_transaction("a", pid, epoch, TP0) == ErrorCode.NONE
        assert await coord.end_transaction("a", pid, epoch, True) == ErrorCode.NONE
        nursery.cancel_scope.cancel()


async def test_verification_before_the_log_has_a_leader_is_retriable() -> None:
    """The first moments after a restart: the log exists but this broker has not registered, so
    no partition has a live leader; nobody can tell yet whether a batch is in a transaction."""
    log = GatedLog()
    async with coordinator(log) as coord:
        r = await coord.init_producer_id("a", 60000)
        await coord.add_partitions("a", r.producer_id, r.producer_epoch, [TP0])
    log.leaderless = True
    async with coordinator(log) as coord:
        assert not coord.owned and coord.leaderless == set(range(5))
        verified = coord.verify_transaction("a", r.producer_id, r.producer_epoch, TP0)
        assert verified == ErrorCode.COORDINATOR_NOT_AVAILABLE
        offsets = coord.check_txn_offset_commit("a", r.producer_id, r.producer_epoch, "group")
        assert offsets == ErrorCode.COORDINATOR_NOT_AVAILABLE
        log.leaderless = False
        await coord.refresh_ownership()
        await coord.wait_for_loads()
        assert coord.verify_transaction("a", r.producer_id, r.producer_epoch, TP0) == ErrorCode.NONE


async def test_verification_before_this_broker_saw_the_new_log_is_retriable(
    mock_clock: trio.testing.MockClock,
) -> None:
    """A fresh cluster: another broker creates __transaction_state with the id's first
    InitProducerId, and the producer's first batch reaches the leader of its partition before
    that leader's coordinator has looked at the new topic (it does every OWNERSHIP_REFRESH_S).
    This broker cannot tell whether the partition is in the transaction, so the answer must be
    retriable: it was INVALID_TXN_STATE, making the producer abort its first transaction."""
    log = InMemoryTransactionLog(num_partitions=5)  # created by the first InitProducerId; led by node 0
    leader, other = (
        TransactionCoordinator(
            log, Ids(), Markers(), default_config(), node_id=node, now_ms=_now_ms, txn_offsets=Offsets()
        )
        for node in (0, 1)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(leader.run)
        await nursery.start(other.run)
        r = await leader.init_producer_id("a", 60000)
        assert await leader.add_partitions("a", r.producer_id, r.producer_epoch, [TP0]) == {TP0: ErrorCode.NONE}
        assert not (other.owned or other.remote or other.loading or other.leaderless)  # not looked yet
        verified = other.verify_transaction("a", r.producer_id, r.producer_epoch, TP0)
        assert verified == ErrorCode.COORDINATOR_NOT_AVAILABLE
        mock_clock.jump(OWNERSHIP_REFRESH_S)
        await trio.testing.wait_all_tasks_blocked()
        assert other.remote == set(range(5))  # led elsewhere: accepted, as before
        assert other.verify_transaction("a", r.producer_id, r.producer_epoch, TP0) == ErrorCode.NONE
        nursery.cancel_scope.cancel()


# -- KIP-360 / KIP-588: InitProducerId with the producer id and epoch the producer holds ---------


async def test_kip360_reinit_from_the_current_epoch_bumps_it() -> None:
    async with coordinator() as coord:
        r = await coord.init_producer_id("a", 60000)
        bumped = await coord.init_producer_id("a", 60000, r.producer_id, r.producer_epoch)
        assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.NONE, r.producer_id, 1)
        # the answer was lost and the producer asks again from the epoch it still holds: the
        # same answer, not a second bump (Kafka's prepareIncrementProducerEpoch)
        retried = await coord.init_producer_id("a", 60000, r.producer_id, r.producer_epoch)
        assert (retried.error, retried.producer_id, retried.producer_epoch) == (ErrorCode.NONE, r.producer_id, 1)
        # a retry with another timeout takes it, still at the current epoch
        longer = await coord.init_producer_id("a", 90000, r.producer_id, r.producer_epoch)
        assert (longer.error, longer.producer_epoch) == (ErrorCode.NONE, 1)
        assert coord.transactions["a"].timeout_ms == 90000
        # from the current epoch it bumps again
        again = await coord.init_producer_id("a", 60000, r.producer_id, 1)
        assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.NONE, r.producer_id, 2)
        # once the producer used its epoch, the one before is no retry: it is refused
        await coord.add_partitions("a", r.producer_id, 2, [TP0])
        await coord.end_transaction("a", r.producer_id, 2, True)
        assert (await coord.init_producer_id("a", 60000, r.producer_id, 0)).error == ErrorCode.PRODUCER_FENCED


async def test_kip360_reinit_aborts_the_ongoing_transaction_with_the_epoch_bumped() -> None:
    markers = Markers()
    async with coordinator(markers=markers) as coord:
        r = await coord.init_producer_id("a", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        assert await coord.add_partitions("a", pid, epoch, [TP0]) == {TP0: ErrorCode.NONE}
        bumped = await coord.init_producer_id("a", 60000, pid, epoch)
        assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.NONE, pid, epoch + 2)
        assert markers.written == [(pid, epoch + 1, ControlRecordType.ABORT, TP0)]
        assert coord.transactions["a"].state is TransactionState.EMPTY
        # the producer goes on at its new epoch
        assert await coord.add_partitions("a", pid, epoch + 2, [TP0]) == {TP0: ErrorCode.NONE}
        assert await coord.end_transaction("a", pid, epoch + 2, True) == ErrorCode.NONE


async def test_kip360_reinit_from_a_fenced_or_foreign_producer_is_refused() -> None:
    markers = Markers()
    async with coordinator(markers=markers) as coord:
        old = await coord.init_producer_id("a", 60000)
        new = await coord.init_producer_id("a", 60000)  # another instance: fences the old one
        assert new.producer_epoch == old.producer_epoch + 1
        await coord.add_partitions("a", new.producer_id, new.producer_epoch, [TP0])
        fenced = await coord.init_producer_id("a", 60000, old.producer_id, old.producer_epoch)
        assert fenced.error == ErrorCode.PRODUCER_FENCED
        # a zombie cannot abort the live instance's transaction either
        assert coord.transactions["a"].state is TransactionState.ONGOING and not markers.written
        other = await coord.init_producer_id("a", 60000, new.producer_id + 1, new.producer_epoch)
        assert other.error == ErrorCode.PRODUCER_FENCED
        ahead = await coord.init_producer_id("a", 60000, new.producer_id, new.producer_epoch + 1)
        assert ahead.error == ErrorCode.PRODUCER_FENCED


async def test_kip360_unknown_transactional_id_gets_a_fresh_producer_id() -> None:
    async with coordinator() as coord:
        # e.g. the id expired while the producer was idle: Kafka hands out a new producer id
        r = await coord.init_producer_id("a", 60000, 7, 3)
        assert r.error == ErrorCode.NONE and r.producer_id != 7 and r.producer_epoch == 0


async def test_kip360_exhausted_epoch_rotates_the_producer_id() -> None:
    async with coordinator() as coord:
        r = await coord.init_producer_id("a", 60000)
        md = coord.transactions["a"]
        coord.transactions["a"] = md.transition(TransactionState.EMPTY, 0, producer_epoch=MAX_EPOCH)
        rotated = await coord.init_producer_id("a", 60000, r.producer_id, MAX_EPOCH)
        assert rotated.error == ErrorCode.NONE
        assert rotated.producer_id != r.producer_id and rotated.producer_epoch == 0
        # a retry from the exhausted id (its answer lost) is still recognised
        again = await coord.init_producer_id("a", 60000, r.producer_id, MAX_EPOCH)
        assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.NONE, rotated.producer_id, 0)


async def _transaction_at_the_last_epoch(coord: TransactionCoordinator, timeout_ms: int) -> int:
    """Open a transaction of "a" on TP0 at MAX_EPOCH (as if InitProducerId had bumped it there);
    returns its producer id."""
    r = await coord.init_producer_id("a", timeout_ms)
    coord.transactions["a"] = coord.transactions["a"].transition(TransactionState.EMPTY, 0, producer_epoch=MAX_EPOCH)
    assert await coord.add_partitions("a", r.producer_id, MAX_EPOCH, [TP0]) == {TP0: ErrorCode.NONE}
    return r.producer_id


@pytest.mark.trio
async def test_a_producer_at_the_last_epoch_is_fenced_to_short_max_value(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A transaction of a producer at MAX_EPOCH (32766) was aborted without an epoch bump: its
    markers did not fence it, and it could go on writing at that epoch. Kafka's
    prepareFenceProducerEpoch bumps it to 32767 (Short.MaxValue)."""
    markers = Markers()
    async with coordinator(markers=markers) as coord:
        pid = await _transaction_at_the_last_epoch(coord, 3000)
        await trio.sleep(coord.abort_interval_ms / 1000 + 1)  # timed out: aborted by the sweep
        md = coord.transactions["a"]
        assert (md.state, md.producer_epoch) == (TransactionState.COMPLETE_ABORT, MAX_FENCE_EPOCH)
        assert markers.written == [(pid, MAX_FENCE_EPOCH, ControlRecordType.ABORT, TP0)]
        assert await coord.add_partitions("a", pid, MAX_EPOCH, [TP0]) == {TP0: ErrorCode.PRODUCER_FENCED}
        # the producer recovers (KIP-588) with a new producer id: no epoch is left for this one
        recovered = await coord.init_producer_id("a", 3000, pid, MAX_EPOCH)
        assert recovered.error == ErrorCode.NONE
        assert recovered.producer_id != pid and recovered.producer_epoch == 0


async def test_reinit_of_a_producer_at_the_last_epoch_fences_its_transaction_to_short_max_value() -> None:
    markers = Markers()
    async with coordinator(markers=markers) as coord:
        pid = await _transaction_at_the_last_epoch(coord, 60000)
        new = await coord.init_producer_id("a", 60000)  # another instance
        assert new.error == ErrorCode.NONE and new.producer_id != pid and new.producer_epoch == 0
        assert markers.written == [(pid, MAX_FENCE_EPOCH, ControlRecordType.ABORT, TP0)]


@pytest.mark.trio
async def test_kip588_producer_whose_transaction_timed_out_may_reinit(autojump_clock: trio.testing.MockClock) -> None:
    """The coordinator aborted the transaction on timeout, bumping the epoch: the producer's own
    requests are fenced, but InitProducerId from the epoch one behind recovers it."""
    markers = Markers()
    async with coordinator(markers=markers) as coord:
        r = await coord.init_producer_id("a", 3000)
        pid, epoch = r.producer_id, r.producer_epoch
        await coord.add_partitions("a", pid, epoch, [TP0])
        await trio.sleep(coord.abort_interval_ms / 1000 + 1)
        assert coord.transactions["a"].producer_epoch == epoch + 1
        assert await coord.end_transaction("a", pid, epoch, False) == ErrorCode.PRODUCER_FENCED
        recovered = await coord.init_producer_id("a", 3000, pid, epoch)
        assert (recovered.error, recovered.producer_id, recovered.producer_epoch) == (ErrorCode.NONE, pid, epoch + 2)
        assert await coord.add_partitions("a", pid, epoch + 2, [TP0]) == {TP0: ErrorCode.NONE}
        # a new instance fences it for good: the old epoch is no longer accepted
        await coord.end_transaction("a", pid, epoch + 2, True)
        await coord.init_producer_id("a", 3000)
        assert (await coord.init_producer_id("a", 3000, pid, epoch + 2)).error == ErrorCode.PRODUCER_FENCED
