"""WriteTxnMarkers (API key 27): the codec (v0 is odradek's own schema, v1 kio's flexible one),
and the partition leader's side through the request handler on a whole broker (no sockets):
markers appended and replicated, Kafka's per-partition errors, and the pending TxnOffsetCommit
offsets of a ``__consumer_offsets`` partition settled by its marker."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from broker_harness import batch, create, running_broker

from odradek.broker.api import FetchPartition, IsolationLevel
from odradek.broker.core import BrokerCore
from odradek.broker.group import InMemoryOffsetsLog, OffsetAndMetadata
from odradek.broker.group.metadata_manager import GroupMetadataManager
from odradek.broker.group.schema import offset_key, offset_value
from odradek.broker.internal_topic import LogEntry
from odradek.client.requests import make_request
from odradek.config import default_config
from odradek.errors import ErrorCode
from odradek.interfaces import Endpoint, TopicPartition
from odradek.plugins.transport_tcp.apis import Dispatcher, load_handlers
from odradek.protocol import (
    ApiKey,
    advertised_versions,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
    request_type,
    response_type,
)

TP = TopicPartition("t", 0)


def _marker_request(version: int, *, commit: bool = True, epoch: int = 0, coordinator_epoch: int = 3,
                    producer_id: int = 7, partitions: tuple[tuple[str, int], ...] = (("t", 0),)) -> Any:  # fmt: skip
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    return make_request(
        ApiKey.WRITE_TXN_MARKERS,
        version,
        markers=[
            {
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "transaction_result": commit,
                "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": t, "partition_indexes": tuple(ps)} for t, ps in by_topic.items()],
            }
        ],
    )


# -- codec (sans-IO) ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers_round_trip(version: int) -> None:
    request = _marker_request(version, commit=False, epoch=2, partitions=(("t", 0), ("t", 1), ("u", 4)))
    frame = encode_request(request, correlation_id=11, client_id="broker-1")
    header = parse_request_header(bytearray(frame))
    assert (header.api_key, header.api_version, header.correlation_id) == (27, version, 11)
    decoded = decode_request(27, version, frame, header.body_offset)
    assert decoded == request
    (marker,) = decoded.markers
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch) == (
        7, 2, False, 3,
    )  # fmt: skip
    assert [(t.name, list(t.partition_indexes)) for t in marker.topics] == [("t", [0, 1]), ("u", [4])]
    body = bytes(frame[header.body_offset :])
    if version == 0:  # classic encodings: int32 counts, int16 string lengths, no tagged fields
        expected = (
            struct.pack(">iqhbi", 1, 7, 2, 0, 2)
            + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 1)
            + struct.pack(">h", 1) + b"u" + struct.pack(">ii", 1, 4)
            + struct.pack(">i", 3)
        )  # fmt: skip
        assert body == expected
    else:  # flexible: compact arrays and strings (length + 1), a tagged-field byte per struct
        expected = (
            b"\x02" + struct.pack(">qhb", 7, 2, 0) + b"\x03"
            + b"\x02t" + b"\x03" + struct.pack(">ii", 0, 1) + b"\x00"
            + b"\x02u" + b"\x02" + struct.pack(">i", 4) + b"\x00"
            + struct.pack(">i", 3) + b"\x00" + b"\x00"
        )  # fmt: skip
        assert body == expected
    cls = response_type(27, version)
    module = __import__(cls.__module__, fromlist=["x"])
    response = cls(
        markers=(
            module.WritableTxnMarkerResult(
                producer_id=7,
                topics=(
                    module.WritableTxnMarkerTopicResult(
                        name="t",
                        partitions=(
                            module.WritableTxnMarkerPartitionResult(partition_index=0, error_code=_kio(6)),
                            module.WritableTxnMarkerPartitionResult(partition_index=1, error_code=_kio(52)),
                        ),
                    ),
                ),
            ),
        )
    )
    cid, back = decode_response(27, version, encode_response(27, version, 11, response))
    assert cid == 11 and back == response
    assert request_type(27, version).__flexible__ is (version == 1)


def _kio(code: int) -> Any:
    from odradek.protocol import kio_error

    return kio_error(code)


def test_write_txn_markers_is_advertised_at_v0_and_v1() -> None:
    assert tuple(advertised_versions(load_handlers())[ApiKey.WRITE_TXN_MARKERS]) == (0, 1)


# -- the leader's side, through the handler -----------------------------------------------------


async def _write(core: BrokerCore, version: int, **kw: Any) -> dict[TopicPartition, ErrorCode]:
    dispatcher = Dispatcher(core, core.config, Endpoint("PLAINTEXT", "127.0.0.1", 0), load_handlers())
    frame = bytearray(encode_request(_marker_request(version, **kw), correlation_id=5, client_id="broker-2"))
    outcome = await dispatcher.process(parse_request_header(frame), frame, "127.0.0.1:1")
    wire = outcome.to_bytes()[4:] if hasattr(outcome, "to_bytes") else outcome
    _cid, response = decode_response(27, version, wire)
    return {
        TopicPartition(t.name, int(p.partition_index)): ErrorCode(int(p.error_code))
        for m in response.markers
        for t in m.topics
        for p in t.partitions
    }


async def _lso(core: BrokerCore) -> tuple[int, int, list[tuple[int, int]]]:
    result = (await core.fetch(-1, 0, 0, 1 << 20, IsolationLevel.READ_COMMITTED, [FetchPartition(TP, 0, 1 << 20)]))[TP]
    if result.records is not None:
        result.records.release()
    aborted = [(a.producer_id, a.first_offset) for a in result.aborted_transactions or ()]
    return result.last_stable_offset, result.high_watermark, aborted


async def test_write_txn_markers_appends_as_leader_with_kafkas_errors(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        while (p := core.replica_manager.get_partition(TP)) is None or not p.is_leader:
            await trio.sleep(0.01)
        # an open transaction of producer 7 (written as a coordinator would let it be: the
        # transactional id's coordinator is another broker here, so the produce path accepts it)
        data = batch([b"a", b"b"], producer_id=7, producer_epoch=1, base_sequence=0, is_transactional=True)
        core.replica_manager.verify_transaction = lambda *_: ErrorCode.NONE
        assert (await core.produce(-1, 5000, {TP: data}, transactional_id="x"))[TP].error == ErrorCode.NONE
        assert await _lso(core) == (0, 2, [])
        # a stale producer epoch and an unhosted partition: Kafka's errors, nothing written
        errors = await _write(core, 0, commit=False, epoch=0, partitions=(("t", 0), ("nope", 0)))
        assert errors == {
            TP: ErrorCode.INVALID_PRODUCER_EPOCH,
            TopicPartition("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert await _lso(core) == (0, 2, [])
        # v1 ABORT at the current epoch: the transaction ends, the LSO moves, the index names it
        assert await _write(core, 1, commit=False, epoch=1, coordinator_epoch=4) == {TP: ErrorCode.NONE}
        assert await _lso(core) == (3, 3, [(7, 0)])
        # a zombie coordinator (an older coordinator epoch than the last marker's) is fenced
        assert await _write(core, 1, commit=True, epoch=1, coordinator_epoch=3) == {
            TP: ErrorCode.TRANSACTION_COORDINATOR_FENCED
        }


async def test_marker_in_the_offsets_partition_settles_pending_offsets(tmp_path: Path) -> None:
    """The broker leading a group's __consumer_offsets partition is its group coordinator: a
    WriteTxnMarkers there (from whichever broker coordinates the transaction) applies the
    producer's TxnOffsetCommit offsets on COMMIT and drops them on ABORT, as Kafka's handler
    does; other groups' pending offsets are left alone."""
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        groups = core.group_coordinator
        assert (await groups.find_coordinator("g")).error == ErrorCode.NONE
        while groups.validate_group("g") is not None:
            await trio.sleep(0.01)
        offsets_tp = ("__consumer_offsets", groups.partition_for("g"))
        other = next(g for g in (f"h{i}" for i in range(1000)) if groups.partition_for(g) != offsets_tp[1])
        assert (await groups.find_coordinator(other)).error == ErrorCode.NONE
        while groups.validate_group(other) is not None:
            await trio.sleep(0.01)
        for pid, offset in ((20, 5), (21, 9)):
            errors = await core.txn_offsets.commit("g", pid, 0, "", None, -1, {TP: OffsetAndMetadata(offset)})
            assert errors == {TP: ErrorCode.NONE}
        errors = await core.txn_offsets.commit(other, 20, 0, "", None, -1, {TP: OffsetAndMetadata(1)})
        assert errors == {TP: ErrorCode.NONE}
        assert groups.fetch_offsets("g", [TP])[1][TP].offset == -1
        assert await _write(core, 0, commit=False, producer_id=21, partitions=(offsets_tp,)) == {
            TopicPartition(*offsets_tp): ErrorCode.NONE
        }
        assert groups.fetch_offsets("g", [TP])[1][TP].offset == -1  # aborted: dropped
        assert await _write(core, 1, commit=True, producer_id=20, partitions=(offsets_tp,)) == {
            TopicPartition(*offsets_tp): ErrorCode.NONE
        }
        assert groups.fetch_offsets("g", [TP])[1][TP].offset == 5
        assert not core.txn_offsets.has_pending("g", TP)
        assert core.txn_offsets.has_pending(other, TP)  # its partition had no marker yet
        # the marker is in the log: the control batch is there for a reload to read
        log_data = core.replica_manager.get_partition(TopicPartition(*offsets_tp))
        assert log_data is not None and log_data.high_watermark == log_data.log.log_end_offset


class _PausingOffsetsLog(InMemoryOffsetsLog):
    """Stops after the last record of a load until ``gate`` is set (a marker lands meanwhile)."""

    def __init__(self) -> None:
        super().__init__(num_partitions=4)
        self.gate = trio.Event()

    async def read_entries(self, partition: int) -> AsyncIterator[LogEntry]:
        async for entry in super().read_entries(partition):
            yield entry
        await self.gate.wait()


async def test_a_marker_landing_while_the_offsets_partition_loads_settles_its_offsets() -> None:
    """A new group coordinator loads its __consumer_offsets partition while the transaction
    coordinator's retried marker is appended there: the load has read past the marker's place,
    so the settlement is applied at the end of the load instead of leaving the offsets pending."""
    log = _PausingOffsetsLog()
    await log.ensure_topic()
    manager = GroupMetadataManager(log, default_config(), lambda: 0)
    p = manager.partition_for("g")
    await log.append(p, [(offset_key("g", TP), offset_value(OffsetAndMetadata(5)))], 0, producer_id=30,
                     producer_epoch=0, transactional=True)  # fmt: skip
    async with trio.open_nursery() as nursery:
        nursery.start_soon(manager.load_partition, p, lambda _group: None)
        await trio.testing.wait_all_tasks_blocked()
        assert p in manager.loading
        manager.complete_txn(30, True, [p])  # the marker's append on this broker, mid-load
        log.gate.set()
    assert manager.get_offsets("g", [TP])[TP].offset == 5
    assert not manager.has_pending_txn("g", TP)


async def test_require_stable_looks_only_at_the_groups_own_open_transactions() -> None:
    """OffsetFetch with ``require_stable`` asks, for each partition, whether an open transaction
    holds offsets of it: only the producers holding offsets of that group are asked, not every
    open transaction of every group (each OffsetFetch cost partitions x open transactions: 16 ms
    for 100 partitions beside 2,000 transactional producers, 0.13 ms now)."""
    manager = GroupMetadataManager(InMemoryOffsetsLog(num_partitions=4), default_config(), lambda: 0)
    await manager.log.ensure_topic()
    manager.owned.update(range(4))
    for pid in range(200):
        await manager.store_txn_offsets(f"app-{pid}", pid, 0, {TopicPartition("t", 0): OffsetAndMetadata(1)})
    await manager.store_txn_offsets("reader", 500, 0, {TopicPartition("t", 0): OffsetAndMetadata(7)})
    lookups = 0

    class CountingGroups(dict[str, dict[TopicPartition, OffsetAndMetadata]]):
        def get(self, key: str, default: Any = None) -> Any:
            nonlocal lookups
            lookups += 1
            return super().get(key, default)

        def __getitem__(self, key: str) -> dict[TopicPartition, OffsetAndMetadata]:
            nonlocal lookups
            lookups += 1
            return super().__getitem__(key)

    for pid, by_group in list(manager.pending_txn.items()):
        manager.pending_txn[pid] = CountingGroups(by_group)
    tps = [TopicPartition("t", p) for p in range(50)]
    offsets = manager.get_offsets("reader", tps, require_stable=True)
    assert offsets[tps[0]].error == ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert all(offsets[tp].error == ErrorCode.NONE for tp in tps[1:])
    assert lookups <= len(tps)  # 10,050 before: every producer's groups for every partition
    manager.complete_txn(500, True)
    assert manager.get_offsets("reader", tps, require_stable=True)[tps[0]].offset == 7
    assert not manager.has_pending_txn("reader", tps[0]) and manager.has_pending_txn("app-3", tps[0])


class _GatedOffsetsLog(InMemoryOffsetsLog):
    """An offsets log whose transactional appends are in the log at once and then wait on
    ``gate`` (an acks=all append waiting for the followers), answering ``error``."""

    def __init__(self) -> None:
        super().__init__(num_partitions=4)
        self.gate = trio.Event()
        self.appended = trio.Event()
        self.error = ErrorCode.NONE

    async def append(self, partition: int, records: Any, timestamp_ms: int, **kw: Any) -> ErrorCode:
        await super().append(partition, records, timestamp_ms, **kw)
        if kw.get("transactional"):
            self.appended.set()
            await self.gate.wait()
        return self.error


@pytest.mark.parametrize("commit", [False, True])
async def test_a_marker_landing_during_a_txn_offset_append_settles_its_offsets(commit: bool) -> None:
    """The transaction's marker lands in the offsets partition while a TxnOffsetCommit of it is
    still being appended (acks=all): the offsets are held from before the append (Kafka's
    prepareTxnOffsetCommit), so the marker settles them: applied on COMMIT, dropped on ABORT.
    Held only after the append, an aborted transaction's offsets stayed pending (UNSTABLE for
    require-stable fetches) and the producer's next committed transaction applied them."""
    log = _GatedOffsetsLog()
    await log.ensure_topic()
    manager = GroupMetadataManager(log, default_config(), lambda: 0)
    manager.owned.update(range(4))
    p = manager.partition_for("g")
    result: dict[TopicPartition, ErrorCode] = {}

    async def commit_offsets() -> None:
        result.update(await manager.store_txn_offsets("g", 42, 0, {TP: OffsetAndMetadata(100)}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(commit_offsets)
        await log.appended.wait()
        assert manager.has_pending_txn("g", TP)  # unstable while its transaction is open
        manager.complete_txn(42, commit, [p])  # the marker, appended meanwhile
        log.gate.set()
    assert result == {TP: ErrorCode.NONE}
    assert not manager.has_pending_txn("g", TP)
    manager.complete_txn(42, True, [p])  # the producer's next transaction, without TP
    assert manager.get_offsets("g", [TP])[TP].offset == (100 if commit else -1)


async def test_a_failed_txn_offset_append_lets_go_of_its_offsets() -> None:
    """A transactional offset append that fails is held no more; an earlier commit of the
    same transaction for that partition is held again."""
    log = _GatedOffsetsLog()
    await log.ensure_topic()
    log.gate.set()
    manager = GroupMetadataManager(log, default_config(), lambda: 0)
    manager.owned.update(range(4))
    other = TopicPartition("t", 1)
    assert await manager.store_txn_offsets("g", 42, 0, {TP: OffsetAndMetadata(5)}) == {TP: ErrorCode.NONE}
    log.error = ErrorCode.NOT_ENOUGH_REPLICAS
    failed = await manager.store_txn_offsets("g", 42, 0, {TP: OffsetAndMetadata(9), other: OffsetAndMetadata(3)})
    assert set(failed.values()) != {ErrorCode.NONE}
    assert manager.has_pending_txn("g", TP) and not manager.has_pending_txn("g", other)
    manager.complete_txn(42, True)
    offsets = manager.get_offsets("g", [TP, other])
    assert (offsets[TP].offset, offsets[other].offset) == (5, -1)
