"""Transactions through a whole broker (BrokerServer without sockets): produce verification,
the last stable offset, aborted-transaction lists in read_committed fetches, fetches woken by
markers, transactional offsets, and state reloaded after a restart."""

from __future__ import annotations

import struct
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_harness import batch, create, error_lines, replication_factor_too_large, running_broker

from odradek import records
from odradek.broker.api import ConfigResource, ConfigResourceType, FetchPartition, IsolationLevel
from odradek.broker.core import BrokerCore
from odradek.broker.group import OffsetAndMetadata
from odradek.broker.txn import TransactionState
from odradek.broker.txn.schema import txn_key
from odradek.errors import ErrorCode
from odradek.interfaces import Endpoint, TopicPartition
from odradek.plugins.transport_tcp.apis import Dispatcher, load_handlers
from odradek.protocol import ApiKey, decode_response, encode_request, parse_request_header, request_type

TP = TopicPartition("t", 0)
RC = IsolationLevel.READ_COMMITTED


async def _topic(core: BrokerCore, name: str = "t") -> None:
    await create(core, name)
    while core.replica_manager.get_partition(TopicPartition(name, 0)) is None or not (
        core.replica_manager.get_partition(TopicPartition(name, 0)).is_leader  # type: ignore[union-attr]
    ):
        await trio.sleep(0.01)


async def fetch_values(core: BrokerCore, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> list[bytes]:
    """Values of the data records readable now (control batches skipped)."""
    result = (await core.fetch(-1, 0, 0, 1 << 20, isolation, [FetchPartition(TP, 0, 1 << 20)]))[TP]
    if result.records is None:
        return []
    try:
        data = result.records.to_bytes()
    finally:
        result.records.release()
    return [r.value or b"" for b in records.iter_batches(data) if not b.is_control for r in b.records]


async def _txn_produce(core: BrokerCore, tid: str | None, pid: int, epoch: int, seq: int, *values: bytes) -> ErrorCode:
    data = batch(list(values), producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    return (await core.produce(-1, 5000, {TP: data}, transactional_id=tid))[TP].error


async def test_commit_abort_lso_and_aborted_list(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await _topic(core)
        coord = core.transaction_coordinator
        r = await core.init_producer_id("tx", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        # not added to the transaction yet: refused, so it cannot stall the LSO
        assert await _txn_produce(core, "tx", pid, epoch, 0, b"x") == ErrorCode.INVALID_TXN_STATE
        assert (await coord.add_partitions("tx", pid, epoch, [TP]))[TP] == ErrorCode.NONE
        assert await _txn_produce(core, "tx", pid, epoch, 0, b"a", b"b") == ErrorCode.NONE
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None and partition.high_watermark == 2 and partition.last_stable_offset == 0
        assert await fetch_values(core, RC) == []
        assert await fetch_values(core) == [b"a", b"b"]

        # a parked read_committed long-poll is answered when the COMMIT marker moves the LSO
        async def end() -> None:
            await trio.sleep(0.05)
            assert await coord.end_transaction("tx", pid, epoch, True) == ErrorCode.NONE

        async with trio.open_nursery() as nursery:
            nursery.start_soon(end)
            started = trio.current_time()
            woken = (await core.fetch(-1, 10_000, 1, 1 << 20, RC, [FetchPartition(TP, 0, 1 << 20)]))[TP]
            assert trio.current_time() - started < 5
        assert woken.last_stable_offset == 3 and woken.records is not None
        woken.records.release()
        assert await fetch_values(core, RC) == [b"a", b"b"]
        # an aborted transaction: listed for read_committed fetches over its range
        assert (await coord.add_partitions("tx", pid, epoch, [TP]))[TP] == ErrorCode.NONE
        assert await _txn_produce(core, "tx", pid, epoch, 2, b"c") == ErrorCode.NONE
        assert await coord.end_transaction("tx", pid, epoch, False) == ErrorCode.NONE
        result = (await core.fetch(-1, 0, 0, 1 << 20, RC, [FetchPartition(TP, 0, 1 << 20)]))[TP]
        assert result.last_stable_offset == result.high_watermark == 5
        assert [(a.producer_id, a.first_offset) for a in result.aborted_transactions or ()] == [(pid, 3)]
        assert result.records is not None
        result.records.release()
        # after the abort the old epoch's batches are fenced by a re-initialised producer
        again = await core.init_producer_id("tx", 60000)
        assert again.producer_epoch == epoch + 1
        assert await _txn_produce(core, "tx", pid, epoch, 3, b"late") == ErrorCode.INVALID_PRODUCER_EPOCH


async def test_transactional_produce_while_the_coordinator_loads_is_retriable(tmp_path: Path) -> None:
    """A transactional batch arriving after a restart (or on a fresh cluster), before the
    coordinator has loaded (or can even locate) the id's __transaction_state partition, is
    answered NOT_ENOUGH_REPLICAS,
    as Kafka does, so the producer retries it instead of aborting with INVALID_TXN_STATE."""
    async with running_broker(tmp_path) as core:
        await _topic(core)
        coord = core.transaction_coordinator
        r = await core.init_producer_id("tx", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        assert (await coord.add_partitions("tx", pid, epoch, [TP]))[TP] == ErrorCode.NONE
        p = coord.partition_for("tx")
        coord.owned.discard(p)
        coord.loading.add(p)  # the state of a coordinator in the middle of _load
        assert await _txn_produce(core, "tx", pid, epoch, 0, b"a") == ErrorCode.NOT_ENOUGH_REPLICAS
        coord.loading.discard(p)
        coord.leaderless.add(p)  # before the broker registered: no leader known
        assert await _txn_produce(core, "tx", pid, epoch, 0, b"a") == ErrorCode.NOT_ENOUGH_REPLICAS
        coord.leaderless.discard(p)  # on a fresh cluster: not looked at the new log's leaders yet
        assert await _txn_produce(core, "tx", pid, epoch, 0, b"a") == ErrorCode.NOT_ENOUGH_REPLICAS
        coord.owned.add(p)
        assert await _txn_produce(core, "tx", pid, epoch, 0, b"a") == ErrorCode.NONE
        assert await coord.end_transaction("tx", pid, epoch, True) == ErrorCode.NONE
        assert await fetch_values(core, RC) == [b"a"]


async def test_transactional_offsets_visible_after_commit_only(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await _topic(core)
        groups, coord, pending = core.group_coordinator, core.transaction_coordinator, core.txn_offsets
        assert (await groups.find_coordinator("g")).error == ErrorCode.NONE
        while groups.validate_group("g") is not None:
            await trio.sleep(0.01)
        r = await core.init_producer_id("tx", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        for commit, offset in ((False, 7), (True, 5)):
            assert await coord.add_offsets("tx", pid, epoch, "g") == ErrorCode.NONE
            assert (await coord.add_partitions("tx", pid, epoch, [TP]))[TP] == ErrorCode.NONE
            errors = await pending.commit("g", pid, epoch, "", None, -1, {TP: OffsetAndMetadata(offset)})
            assert errors == {TP: ErrorCode.NONE}
            assert groups.fetch_offsets("g", [TP])[1][TP].offset == -1  # pending: not visible yet
            assert await coord.end_transaction("tx", pid, epoch, commit) == ErrorCode.NONE
        assert groups.fetch_offsets("g", [TP])[1][TP].offset == 5


async def test_open_transaction_survives_restart(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await _topic(core)
        r = await core.init_producer_id("tx", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        await core.transaction_coordinator.add_partitions("tx", pid, epoch, [TP])
        assert await _txn_produce(core, "tx", pid, epoch, 0, b"a") == ErrorCode.NONE
    async with running_broker(tmp_path) as core:
        coord = core.transaction_coordinator
        while coord.partition_for("tx") not in coord.owned:
            await trio.sleep(0.01)
        assert coord.transactions["tx"].state is TransactionState.ONGOING
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None and partition.last_stable_offset == 0  # still open after restart
        assert await coord.end_transaction("tx", pid, epoch, True) == ErrorCode.NONE
        assert partition.last_stable_offset == partition.high_watermark == 2


async def _coordinators_ready(core: BrokerCore, group_id: str, *transactional_ids: str) -> None:
    groups, coord = core.group_coordinator, core.transaction_coordinator
    assert (await groups.find_coordinator(group_id)).error == ErrorCode.NONE
    while groups.validate_group(group_id) is not None or any(
        coord.partition_for(t) not in coord.owned for t in transactional_ids
    ):
        await trio.sleep(0.01)


async def test_transactional_offsets_survive_a_restart_before_the_transaction_ends(tmp_path: Path) -> None:
    """TxnOffsetCommit writes the offsets into __consumer_offsets as the producer's transactional
    records (as Kafka does), so a broker restart between TxnOffsetCommit and EndTxn loses nothing:
    after it, a commit applies them and an abort drops them, and a further restart reads the
    same outcome back from the markers. They used to live in memory: a restart lost them, and a
    consume-transform-produce application re-processed input whose output was committed."""
    async with running_broker(tmp_path) as core:
        await _topic(core)
        await _coordinators_ready(core, "g")  # __transaction_state comes with the first producer id
        coord, pending = core.transaction_coordinator, core.txn_offsets
        producers = {}
        for tid, offset in (("tx", 5), ("tx2", 9)):
            r = await core.init_producer_id(tid, 60000)
            producers[tid] = (r.producer_id, r.producer_epoch)
            assert await coord.add_offsets(tid, r.producer_id, r.producer_epoch, "g") == ErrorCode.NONE
            errors = await pending.commit(
                "g", r.producer_id, r.producer_epoch, "", None, -1, {TP: OffsetAndMetadata(offset)}
            )
            assert errors == {TP: ErrorCode.NONE}
        assert core.group_coordinator.fetch_offsets("g", [TP])[1][TP].offset == -1  # both pending
    async with running_broker(tmp_path) as core:
        await _coordinators_ready(core, "g", "tx", "tx2")
        groups, coord = core.group_coordinator, core.transaction_coordinator
        assert groups.fetch_offsets("g", [TP])[1][TP].offset == -1  # still pending, not lost
        assert core.txn_offsets.has_pending("g", TP)
        assert await coord.end_transaction("tx", *producers["tx"], True) == ErrorCode.NONE
        assert groups.fetch_offsets("g", [TP])[1][TP].offset == 5
        assert await coord.end_transaction("tx2", *producers["tx2"], False) == ErrorCode.NONE
        assert groups.fetch_offsets("g", [TP])[1][TP].offset == 5
        assert not core.txn_offsets.has_pending("g", TP)
    async with running_broker(tmp_path) as core:
        await _coordinators_ready(core, "g")
        assert core.group_coordinator.fetch_offsets("g", [TP])[1][TP].offset == 5


async def test_compaction_removing_an_abort_marker_drops_its_aborted_entry(tmp_path: Path) -> None:
    """Found with confluent-kafka against a compacted topic: once compaction removed an aborted
    transaction's records and then its ABORT marker (past delete.retention.ms), the aborted index
    still named the transaction, so a read_committed reader from the start skipped every later
    transactional batch of that producer, waiting for a marker that was gone: the committed
    value of the key was lost to it. The entry goes with its marker, as in Kafka's .txnindex."""
    compacted = {"cleanup.policy": "compact", "segment.bytes": "600", "min.cleanable.dirty.ratio": "0.01",
                 "delete.retention.ms": "0"}  # fmt: skip
    async with running_broker(tmp_path) as core:
        await create(core, "t", **compacted)
        while (p := core.replica_manager.get_partition(TP)) is None or not p.is_leader:
            await trio.sleep(0.01)
        coord = core.transaction_coordinator
        r = await core.init_producer_id("tx", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        for seq, (value, commit) in enumerate(((b"A", True), (b"B", False), (b"C", True))):
            assert (await coord.add_partitions("tx", pid, epoch, [TP]))[TP] == ErrorCode.NONE
            data = batch([value], keys=[b"k"], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                         is_transactional=True)  # fmt: skip
            assert (await core.produce(-1, 5000, {TP: data}, transactional_id="tx"))[TP].error == ErrorCode.NONE
            assert await coord.end_transaction("tx", pid, epoch, commit) == ErrorCode.NONE
        for i in range(12):  # keyed filler rolls the transactions out of the active segment
            filler = batch([b"x" * 60], keys=[b"filler-%d" % i])
            assert (await core.produce(-1, 5000, {TP: filler}))[TP].error == ErrorCode.NONE

        async def read_committed() -> tuple[list[tuple[int, int]], list[tuple[bytes | None, bytes | None]]]:
            """Fetch to the end as a read_committed client does (Kafka's consumer, per response: a
            listed transaction's producer is skipped from its first offset to its ABORT marker)."""
            all_aborted: list[tuple[int, int]] = []
            kept: list[tuple[bytes | None, bytes | None]] = []
            offset = 0
            while True:
                result = (await core.fetch(-1, 0, 0, 1 << 20, RC, [FetchPartition(TP, offset, 1 << 20)]))[TP]
                if result.records is None:
                    return all_aborted, kept
                try:
                    data = result.records.to_bytes()
                finally:
                    result.records.release()
                aborted = [(a.producer_id, a.first_offset) for a in result.aborted_transactions or ()]
                all_aborted += [a for a in aborted if a not in all_aborted]
                pending, aborting = sorted(aborted, key=lambda a: a[1]), set()
                for b in records.iter_batches(data):
                    while pending and pending[0][1] <= b.header.last_offset:
                        aborting.add(pending.pop(0)[0])
                    if b.is_control:
                        if records.parse_control_record(b.records[0]).type is records.ControlRecordType.ABORT:
                            aborting.discard(b.header.producer_id)
                    elif not (b.header.is_transactional and b.header.producer_id in aborting):
                        kept += [(rec.key, rec.value) for rec in b.records]
                    offset = b.header.next_offset

        aborted, kept = await read_committed()
        assert aborted == [(pid, 2)] and [v for k, v in kept if k == b"k"] == [b"A", b"C"]
        rounds = 0
        while await core.storage.run_cleaner():  # the abort's records go, then (past its horizon) its marker
            rounds += 1
            assert rounds < 10
        markers = [b.header.base_offset for b in _batches(core) if b.is_control]
        assert 3 not in markers  # the ABORT marker (offset 3) is gone
        aborted, kept = await read_committed()
        assert aborted == [] and [v for k, v in kept if k == b"k"] == [b"C"]


def _batches(core: BrokerCore) -> list[records.RecordBatch]:
    log = core.storage.get_log(TP)
    assert log is not None
    fetched = log.read(log.log_start_offset, 1 << 20)
    try:
        return list(records.iter_batches(fetched.to_bytes()))
    finally:
        fetched.release()


async def test_max_timestamp_is_only_an_offset_the_asker_may_read(tmp_path: Path) -> None:
    """ListOffsets MAX_TIMESTAMP under read_committed: the record with the largest timestamp sits
    past the LSO (behind an open transaction), so there is no answer (-1), as Kafka filters every
    timestamp lookup by the last fetchable offset; read_uncommitted gets it."""
    from odradek.broker.api import MAX_TIMESTAMP, ListOffsetsPartition

    async with running_broker(tmp_path) as core:
        await _topic(core)
        coord = core.transaction_coordinator
        assert (await core.produce(-1, 5000, {TP: batch([b"plain"], timestamp=1000)}))[TP].error == ErrorCode.NONE
        r = await core.init_producer_id("tx", 60000)
        assert (await coord.add_partitions("tx", r.producer_id, r.producer_epoch, [TP]))[TP] == ErrorCode.NONE
        open_txn = batch([b"open"], timestamp=2000, producer_id=r.producer_id, producer_epoch=r.producer_epoch,
                         base_sequence=0, is_transactional=True)  # fmt: skip
        assert (await core.produce(-1, 5000, {TP: open_txn}, transactional_id="tx"))[TP].error == ErrorCode.NONE
        assert (await core.produce(-1, 5000, {TP: batch([b"late"], timestamp=3000)}))[TP].error == ErrorCode.NONE

        async def max_ts(level: IsolationLevel) -> tuple[int, int]:
            found = (await core.list_offsets(-1, level, [ListOffsetsPartition(TP, MAX_TIMESTAMP)]))[TP]
            assert found.error == ErrorCode.NONE
            return found.offset, found.timestamp

        assert await max_ts(RC) == (-1, -1)  # offset 2 is past the LSO (1)
        assert await max_ts(IsolationLevel.READ_UNCOMMITTED) == (2, 3000)
        assert await coord.end_transaction("tx", r.producer_id, r.producer_epoch, True) == ErrorCode.NONE
        # committed: the same answer for both (the COMMIT marker, stamped now, holds the largest
        # timestamp; Kafka's segment max timestamp counts control batches too)
        assert await max_ts(RC) == await max_ts(IsolationLevel.READ_UNCOMMITTED) != (-1, -1)


# -- the group APIs' transaction-aware versions, over the wire codec -------------------------------


async def _call(core: BrokerCore, api_key: int, version: int, **fields: Any) -> Any:
    """Encode a request as a client would, run it through the broker's handlers, decode the answer."""
    cls = request_type(api_key, version)
    frame = bytearray(encode_request(cls(**fields), correlation_id=3, client_id="wire"))
    dispatcher = Dispatcher(core, core.config, Endpoint("PLAINTEXT", "127.0.0.1", 0), load_handlers())
    outcome = await dispatcher.process(parse_request_header(frame), frame, "127.0.0.1:1")
    wire = outcome.to_bytes()[4:] if hasattr(outcome, "to_bytes") else outcome
    _cid, response = decode_response(api_key, version, wire)
    return response


def _nested(api_key: int, version: int, class_name: str, /, **fields: Any) -> Any:
    return getattr(sys.modules[request_type(api_key, version).__module__], class_name)(**fields)


async def _fetched(core: BrokerCore, version: int, require_stable: bool) -> list[tuple[int, int]]:
    """(committed offset, error) of t-0 and t-1 for group g, by OffsetFetch ``version`` (7 or 8)."""
    if version >= 8:
        topic = _nested(ApiKey.OFFSET_FETCH, 8, "OffsetFetchRequestTopics", name="t", partition_indexes=(0, 1))
        group = _nested(ApiKey.OFFSET_FETCH, 8, "OffsetFetchRequestGroup", group_id="g", topics=(topic,))
        response = await _call(core, ApiKey.OFFSET_FETCH, 8, groups=(group,), require_stable=require_stable)
        [answer] = response.groups
    else:
        topic = _nested(ApiKey.OFFSET_FETCH, version, "OffsetFetchRequestTopic", name="t", partition_indexes=(0, 1))
        answer = await _call(core, ApiKey.OFFSET_FETCH, version, group_id="g", topics=(topic,),
                             require_stable=require_stable)  # fmt: skip
    assert int(answer.error_code) == 0  # UNSTABLE_OFFSET_COMMIT is per partition, as in Kafka
    return [(p.committed_offset, int(p.error_code)) for t in answer.topics for p in t.partitions]


async def test_offset_fetch_require_stable_with_pending_transactional_offsets(tmp_path: Path) -> None:
    """OffsetFetch v7+ require_stable (KIP-447): while a transaction holds offsets of the group
    (TxnOffsetCommit done, no marker yet) those partitions answer UNSTABLE_OFFSET_COMMIT with
    offset -1 (the others their committed offset); without require_stable the last committed
    offset; once the transaction commits, its offsets, stable."""
    async with running_broker(tmp_path) as core:
        await _topic(core)
        await _coordinators_ready(core, "g")
        coord = core.transaction_coordinator
        assert (await core.group_coordinator.commit_offsets("g", "", None, -1, {TP: OffsetAndMetadata(2)})) == {
            TP: ErrorCode.NONE
        }
        r = await core.init_producer_id("tx", 60000)
        pid, epoch = r.producer_id, r.producer_epoch
        assert await coord.add_offsets("tx", pid, epoch, "g") == ErrorCode.NONE
        assert await core.txn_offsets.commit("g", pid, epoch, "", None, -1, {TP: OffsetAndMetadata(5)}) == {
            TP: ErrorCode.NONE
        }
        unstable = ErrorCode.UNSTABLE_OFFSET_COMMIT
        for version in (7, 8):
            assert await _fetched(core, version, require_stable=True) == [(-1, unstable), (-1, 0)]
            assert await _fetched(core, version, require_stable=False) == [(2, 0), (-1, 0)]
        assert await coord.end_transaction("tx", pid, epoch, True) == ErrorCode.NONE
        for version in (7, 8):
            assert await _fetched(core, version, require_stable=True) == [(5, 0), (-1, 0)]
        # a transaction holding offsets of a group that has none committed yet is unstable too
        r = await core.init_producer_id("tx", 60000)
        assert await coord.add_offsets("tx", r.producer_id, r.producer_epoch, "fresh") == ErrorCode.NONE
        await _coordinators_ready(core, "fresh")
        assert await core.txn_offsets.commit(
            "fresh", r.producer_id, r.producer_epoch, "", None, -1, {TP: OffsetAndMetadata(1)}
        ) == {TP: ErrorCode.NONE}
        topic = _nested(ApiKey.OFFSET_FETCH, 7, "OffsetFetchRequestTopic", name="t", partition_indexes=(0,))
        fresh = await _call(core, ApiKey.OFFSET_FETCH, 7, group_id="fresh", topics=(topic,), require_stable=True)
        assert [int(p.error_code) for p in fresh.topics[0].partitions] == [unstable]
        assert await coord.end_transaction("tx", r.producer_id, r.producer_epoch, False) == ErrorCode.NONE
        fresh = await _call(core, ApiKey.OFFSET_FETCH, 7, group_id="fresh", topics=(topic,), require_stable=True)
        assert [(p.committed_offset, int(p.error_code)) for p in fresh.topics[0].partitions] == [(-1, 0)]


async def test_find_coordinator_v4_batches_keys_of_both_types(tmp_path: Path) -> None:
    """FindCoordinator v4 (KIP-699): every key of the batch answered on its own, for groups
    (key type 0) and transactional ids (1), each as v3 answers it alone; an unknown key type
    fails each key with INVALID_REQUEST."""
    async with running_broker(tmp_path) as core:
        assert (await core.transaction_coordinator.find_coordinator("tx")).error == ErrorCode.NONE  # creates the log
        await _coordinators_ready(core, "g1", "tx")
        for key_type, keys in ((0, ("g1", "g2", "")), (1, ("tx", "other-tx"))):
            batched = await _call(core, ApiKey.FIND_COORDINATOR, 4, key_type=key_type, coordinator_keys=keys)
            got = [(c.key, int(c.error_code), c.node_id, c.host, c.port) for c in batched.coordinators]
            alone = []
            for key in keys:
                v3 = await _call(core, ApiKey.FIND_COORDINATOR, 3, key=key, key_type=key_type)
                alone.append((key, int(v3.error_code), v3.node_id, v3.host, v3.port))
            assert got == alone
            assert {(error, node_id, host, port) for _, error, node_id, host, port in got} == {
                (0, core.node_id, "127.0.0.1", 9092)
            }
        bad = await _call(core, ApiKey.FIND_COORDINATOR, 4, key_type=7, coordinator_keys=("a", "b"))
        assert [(c.key, int(c.error_code), c.node_id) for c in bad.coordinators] == [
            ("a", ErrorCode.INVALID_REQUEST, -1),
            ("b", ErrorCode.INVALID_REQUEST, -1),
        ]


async def test_init_producer_id_versions_on_the_wire(tmp_path: Path) -> None:
    """v2 (flexible) as v0-1; v3+ re-initialises from the producer id and epoch the producer
    holds (KIP-360); a fenced producer gets PRODUCER_FENCED from v4 and INVALID_PRODUCER_EPOCH
    before (KIP-588)."""
    async with running_broker(tmp_path) as core:
        await _topic(core)
        key = ApiKey.INIT_PRODUCER_ID
        first = await _call(core, key, 2, transactional_id="tx", transaction_timeout=timedelta(seconds=60))
        assert (first.error_code, first.producer_epoch) == (ErrorCode.NONE, 0)
        pid = int(first.producer_id)
        r = await _call(
            core, key, 4, transactional_id="tx", transaction_timeout=timedelta(seconds=60), producer_id=pid,
            producer_epoch=0,
        )  # fmt: skip
        assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.NONE, pid, 1)
        await core.init_producer_id("tx", 60000)  # another instance: epoch 2 fences epoch 1
        for version, error in ((3, ErrorCode.INVALID_PRODUCER_EPOCH), (4, ErrorCode.PRODUCER_FENCED)):
            r = await _call(
                core, key, version, transactional_id="tx", transaction_timeout=timedelta(seconds=60),
                producer_id=pid, producer_epoch=1,
            )  # fmt: skip
            assert r.error_code == error, version
        idem = await _call(core, key, 4, transactional_id=None, transaction_timeout=timedelta(0))
        bumped = await _call(
            core, key, 3, transactional_id=None, transaction_timeout=timedelta(0), producer_id=idem.producer_id,
            producer_epoch=idem.producer_epoch,
        )  # fmt: skip
        assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, idem.producer_id, 1)


async def test_the_transaction_state_topic_takes_its_own_replication_settings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``__transaction_state`` is created with ``transaction.state.log.replication.factor``
    replicas and ``min.insync.replicas`` = ``transaction.state.log.min.isr``, as in Kafka, not
    with ``default.replication.factor`` (a cluster that only set ``offsets.topic.replication.factor``
    kept its transactions on one broker). Above the live brokers it is not created: the
    coordinator answers COORDINATOR_NOT_AVAILABLE and one ERROR names the key."""
    async with running_broker(tmp_path / "one", transaction_state_log_min_isr=2, default_replication_factor=3) as core:
        assert (await core.transaction_coordinator.find_coordinator("tx")).error == ErrorCode.NONE
        res = await core.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "__transaction_state", ["min.insync.replicas"])]
        )
        assert [(e.name, e.value) for e in res[0].configs] == [("min.insync.replicas", "2")]
        assert core.metadata_cache.topics["__transaction_state"].assignment[0] == (0,)
    caplog.clear()
    async with running_broker(tmp_path / "three", transaction_state_log_replication_factor=3) as core:
        for _ in range(3):
            found = await core.transaction_coordinator.find_coordinator("tx")
            assert found.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert error_lines(caplog) == replication_factor_too_large(
        "__transaction_state", "transaction.state.log.replication.factor"
    )


async def test_clients_cannot_produce_to_internal_topics(tmp_path: Path) -> None:
    """Kafka refuses a client's append to an internal topic (INVALID_TOPIC_EXCEPTION): a
    record written there took effect at the coordinator's next load. The request's other
    partitions are appended as usual."""
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        assert (await core.init_producer_id("x", 60000)).error == ErrorCode.NONE
        assert (await core.group_coordinator.find_coordinator("g")).error == ErrorCode.NONE
        txn_tp = TopicPartition("__transaction_state", core.transaction_coordinator.partition_for("x"))
        offsets_tp = TopicPartition("__consumer_offsets", 0)
        user_tp = TopicPartition("t", 0)
        results = await core.produce(
            -1, 5000, {txn_tp: batch([b"v"], keys=[b"k"]), user_tp: batch([b"ok"]), offsets_tp: batch([b"v"])}
        )
        assert [(tp, r.error) for tp, r in results.items()] == [
            (txn_tp, ErrorCode.INVALID_TOPIC_EXCEPTION),
            (user_tp, ErrorCode.NONE),
            (offsets_tp, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ]


async def test_an_unreadable_transaction_log_record_is_skipped_at_load(tmp_path: Path) -> None:
    """A __transaction_state record the coordinator cannot read (here a status byte outside
    Kafka's range, as a damaged or foreign log may hold) is skipped with a warning when the
    partition loads: it stopped the broker at every start, and the coordinator never served."""
    status_9 = struct.pack(">hqhib", 0, 1, 0, 60000, 9) + struct.pack(">i", -1) + struct.pack(">qq", 0, 0)
    async with running_broker(tmp_path) as core:
        assert (await core.init_producer_id("x", 60000)).error == ErrorCode.NONE
        tp = TopicPartition("__transaction_state", core.transaction_coordinator.partition_for("x"))
        written = await core.produce(-1, 5000, {tp: batch([status_9], keys=[txn_key("y")])}, as_coordinator=True)
        assert written[tp].error == ErrorCode.NONE
    async with running_broker(tmp_path) as core:
        with trio.fail_after(10):
            while (res := await core.init_producer_id("x", 60000)).error != ErrorCode.NONE:
                await trio.sleep(0.05)
        assert res.producer_epoch >= 1


async def test_a_fenced_producers_transactional_offset_commit_is_refused(tmp_path: Path) -> None:
    """Kafka checks the producer epoch of a coordinator's append on a producer's behalf (a
    TxnOffsetCommit's records) as of a client's: a fenced instance's offsets are refused. They
    were written, and became the group's committed offsets when the new instance committed.
    The handler's own check runs only where the transaction coordinator is local, so this
    calls the offset store as a handler with a remote coordinator does."""
    tp = TopicPartition("t", 0)
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        groups, coordinator, pending = core.group_coordinator, core.transaction_coordinator, core.txn_offsets
        assert (await groups.find_coordinator("g")).error == ErrorCode.NONE
        with trio.fail_after(5):
            while groups.validate_group("g") is not None:
                await trio.sleep(0.01)
        old = await core.init_producer_id("tx", 60000)
        pid, zombie_epoch = old.producer_id, old.producer_epoch
        assert await coordinator.add_offsets("tx", pid, zombie_epoch, "g") == ErrorCode.NONE
        commit = await pending.commit("g", pid, zombie_epoch, "", None, -1, {tp: OffsetAndMetadata(5)})
        assert commit == {tp: ErrorCode.NONE}
        new = await core.init_producer_id("tx", 60000)  # fences the old instance, aborting its transaction
        assert new.error == ErrorCode.NONE and new.producer_epoch > zombie_epoch
        epoch = new.producer_epoch
        assert await coordinator.add_offsets("tx", pid, epoch, "g") == ErrorCode.NONE
        assert await pending.commit("g", pid, epoch, "", None, -1, {tp: OffsetAndMetadata(7)}) == {tp: ErrorCode.NONE}
        zombie = await pending.commit("g", pid, zombie_epoch, "", None, -1, {tp: OffsetAndMetadata(100)})
        assert zombie == {tp: ErrorCode.INVALID_PRODUCER_EPOCH}
        assert await coordinator.end_transaction("tx", pid, epoch, True) == ErrorCode.NONE
        assert groups.fetch_offsets("g", [tp])[1][tp].offset == 7
