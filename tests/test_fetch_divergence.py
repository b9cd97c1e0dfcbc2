"""Diverging epochs in Fetch v12+ (KIP-320 as KIP-595 moved it into the fetch) and broker-epoch
fencing of follower fetches (KIP-903), in one process: the leader's check through the broker
core and the wire, and odradek's replica fetcher truncating on a fake leader's answers."""

from __future__ import annotations

import dataclasses
import types
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import test_replication_unit as unit
import trio
from broker_harness import batch, produce, running_broker
from test_fetch_flexible import LOCAL, _answered, _broker, _fetch, _request

from odradek import records
from odradek.broker.api import CreatableTopic, FetchPartition, FetchPartitionResult, IsolationLevel
from odradek.broker.core import BrokerCore
from odradek.broker.metadata_cache import PartitionState, registration_json
from odradek.broker.partition import Partition
from odradek.errors import ErrorCode
from odradek.metrics import BrokerCollector
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore

MAX = 1 << 20


async def _fetch_as(
    core: BrokerCore, replica_id: int, parts: Sequence[FetchPartition], replica_epoch: int = -1
) -> dict[Any, FetchPartitionResult]:
    results = await core.fetch(
        replica_id, 0, 1, MAX, IsolationLevel.READ_UNCOMMITTED, parts, replica_epoch=replica_epoch
    )
    for r in results.values():
        if r.records is not None:
            r.records.release()
    return results


def _counter(core: BrokerCore, family: str, **labels: str) -> float:
    """A counter's value as the broker's Prometheus collector exports it (0 when not there)."""
    for metric in BrokerCollector(core).collect():
        if metric.name == family:
            return sum(s.value for s in metric.samples if s.name == family + "_total" and s.labels == labels)
    return 0.0


async def _new_epoch(core: BrokerCore, p: Partition) -> int:
    """Broker 0 leads t-0 again at the next leader epoch (as after 0 -> 7 -> 0)."""
    epoch = p.leader_epoch + 1
    current = await core.store.get(unit.STATE_KEY)
    assert current is not None
    await core.store.put(unit.STATE_KEY, PartitionState(0, epoch, (0, 7), 0).to_json(), expect=current.version)
    with trio.fail_after(5):
        while p.leader_epoch != epoch:
            await trio.sleep(0.01)
    return epoch


async def test_the_leader_answers_a_diverging_epoch_without_records(tmp_path: Path) -> None:
    """Kafka's ``Partition.readFromLocalLog``: the largest epoch <= the last fetched one and its
    end offset, when that epoch is older or ends before the fetch offset; a follower's fetch
    answered so is not its LEO (the HW stays), and a consumer gets the same answer."""
    async with unit._led_with_broker_7(tmp_path) as (core, _other, p):
        first = p.leader_epoch
        assert (await produce(core, unit.TP, batch([b"a", b"b"]), acks=1)).error == ErrorCode.NONE
        second = await _new_epoch(core, p)
        assert (await produce(core, unit.TP, batch([b"c"]), acks=1)).error == ErrorCode.NONE
        assert (p.log_end_offset, p.high_watermark) == (3, 0)

        def at(offset: int, last: int) -> FetchPartition:
            return FetchPartition(unit.TP, offset, MAX, second, last_fetched_epoch=last)

        diverged = "kafka_server_brokertopicmetrics_divergingepochfetches"
        assert _counter(core, diverged, topic=unit.TP.topic) == 0
        # a follower whose old leader wrote offsets 2..4 under the first epoch (never replicated)
        r = (await _fetch_as(core, 7, [at(5, first)]))[unit.TP]
        assert _counter(core, diverged, topic=unit.TP.topic) == 1
        assert (r.error, r.diverging_epoch, r.records, r.high_watermark) == (ErrorCode.NONE, (first, 2), None, 0)
        assert p.high_watermark == 0, "a diverging follower fetch counted as the follower's LEO"
        # past the end of the latest epoch too
        assert (await _fetch_as(core, 7, [at(4, second)]))[unit.TP].diverging_epoch == (second, 3)
        # the logs agree: records, no divergence, and the fetch is the follower's LEO
        r = (await _fetch_as(core, 7, [at(2, first)]))[unit.TP]
        assert (r.error, r.diverging_epoch) == (ErrorCode.NONE, None)
        assert p.high_watermark == 2
        # consumers are checked alike (Kafka checks every fetch with a last fetched epoch)
        r = (await _fetch_as(core, -1, [at(3, first)]))[unit.TP]
        assert (r.error, r.diverging_epoch) == (ErrorCode.NONE, (first, 2))
        # every diverging answer counted (two followers', the consumer's), the agreeing one not
        assert _counter(core, diverged, topic=unit.TP.topic) == 3
        assert _counter(core, diverged + "_alltopics") == 3
        # an epoch newer than any this log knows: nothing to compare with
        assert (await _fetch_as(core, -1, [at(3, second + 5)]))[unit.TP].error == ErrorCode.OFFSET_OUT_OF_RANGE
        # -1 (v11 and older, librdkafka): not checked; the leader epoch still is
        assert (await _fetch_as(core, -1, [at(2, -1)]))[unit.TP].diverging_epoch is None
        stale = FetchPartition(unit.TP, 5, MAX, first, last_fetched_epoch=first)
        assert (await _fetch_as(core, 7, [stale]))[unit.TP].error == ErrorCode.FENCED_LEADER_EPOCH


async def test_a_v12_answer_carries_the_diverging_epoch_on_the_wire(tmp_path: Path) -> None:
    """Through the Fetch handler at every flexible version: the tagged ``diverging_epoch``, no
    records; the other partition of the request is read as usual."""
    async with _broker(tmp_path) as (core, dispatcher):
        tp0 = type(unit.TP)(LOCAL, 0)
        assert (await produce(core, tp0, batch([b"a", b"b"]), acks=1)).error == ErrorCode.NONE
        epoch = core.replica_manager.get_partition(tp0).leader_epoch  # type: ignore[union-attr]
        local = core.metadata_cache.topics[LOCAL].topic_id
        for version in range(12, 17):
            named: dict[str, Any] = {"topic": LOCAL} if version == 12 else {"topic_id": uuid.UUID(hex=local)}
            request = _request(version, offsets=(5, 0), last_fetched_epoch=epoch, **named)
            answered = _answered(await _fetch(dispatcher, request))
            p0 = next(p for (_k, i), p in answered.items() if i == 0)
            assert p0.error_code == 0 and (p0.diverging_epoch.epoch, p0.diverging_epoch.end_offset) == (epoch, 2)
            assert not p0.records


async def test_a_follower_fetch_with_an_older_broker_epoch_is_refused(tmp_path: Path) -> None:
    """KIP-903 (Kafka's ``Replica.updateFetchStateOrThrow``): a follower's v15 ``replica_epoch``
    older than the broker epoch the leader knows for it comes from that broker's process before
    a restart: NOT_LEADER_OR_FOLLOWER, and its offset is not the follower's LEO. The current
    epoch, a newer one (not seen yet) and -1 (unknown) are served."""
    async with unit._led_with_broker_7(tmp_path) as (core, other, p):
        assert (await produce(core, unit.TP, batch([b"a", b"b"]), acks=1)).error == ErrorCode.NONE
        old = core.metadata_cache.brokers[7].epoch
        # broker 7 restarts: its old session ends, a new one registers (a new create revision)
        await other.close()
        restarted = LocalMetadataStore(tmp_path / FILE_NAME)
        await restarted.open(6000)
        try:
            await restarted.register_broker(7, registration_json([("PLAINTEXT", "127.0.0.1", 9, "PLAINTEXT")], None))
            with trio.fail_after(5):
                while (reg := core.metadata_cache.brokers.get(7)) is None or reg.epoch == old:
                    await trio.sleep(0.01)
            new = reg.epoch
            assert new > old
            fetch = [FetchPartition(unit.TP, 2, MAX, p.leader_epoch)]
            before = p.remote_replicas[7].log_end_offset
            fenced = "odradek_replicamanager_stale_broker_epoch_fetches"
            assert _counter(core, fenced) == 0
            r = (await _fetch_as(core, 7, fetch, replica_epoch=old))[unit.TP]
            assert (r.error, r.records) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, None)
            assert _counter(core, fenced) == 1
            assert p.remote_replicas[7].log_end_offset == before != 2, "the old process's fetch was its LEO"
            for epoch in (new, new + 1, -1):
                assert (await _fetch_as(core, 7, fetch, replica_epoch=epoch))[unit.TP].error == ErrorCode.NONE
            assert p.remote_replicas[7].log_end_offset == 2
            # consumers' replica epoch is never checked
            consumer = [FetchPartition(unit.TP, 0, MAX, p.leader_epoch)]
            assert (await _fetch_as(core, -1, consumer, replica_epoch=old))[unit.TP].error == ErrorCode.NONE
            assert _counter(core, fenced) == 1, "a served fetch counted as fenced"
        finally:
            await restarted.close()


class _FakeLeader(unit._FakeConnection):
    """A leader offering Fetch v16 whose log has ``epochs`` (epoch -> start offset) up to
    ``leo``: it answers each fetch as Kafka's leader does, a diverging epoch or its batches."""

    def __init__(self, epochs: dict[int, int], leo: int, data: dict[int, bytes]) -> None:
        super().__init__([])
        self.epochs, self.leo, self.data = epochs, leo, data

    def version(self, api_key: int, *, min_version: int | None = None, max_version: int | None = None) -> int:
        assert int(api_key) == 1, "a v12+ leader is not asked OffsetForLeaderEpoch"
        return min(16, max_version if max_version is not None else 16)

    def _end_for(self, epoch: int) -> tuple[int, int]:
        known = sorted(self.epochs)
        if epoch == known[-1]:
            return epoch, self.leo
        higher = [e for e in known if e > epoch]
        floor = [e for e in known if e <= epoch]
        return (floor[-1] if floor else epoch), self.epochs[higher[0]]

    async def request(self, request: Any, *, timeout_s: float) -> Any:
        self.requests.append(request)
        asked = request.topics[0].partitions[0]
        part = types.SimpleNamespace(
            partition_index=0,
            error_code=0,
            high_watermark=self.leo,
            log_start_offset=0,
            records=b"",
            diverging_epoch=types.SimpleNamespace(epoch=-1, end_offset=-1),
        )
        epoch, end = self._end_for(asked.last_fetched_epoch)
        if epoch < asked.last_fetched_epoch or end < asked.fetch_offset:
            part.diverging_epoch = types.SimpleNamespace(epoch=epoch, end_offset=end)
        else:
            part.records = self.data.get(asked.fetch_offset, b"")
        asked_topic = request.topics[0]
        topic = types.SimpleNamespace(
            topic=getattr(asked_topic, "topic", ""), topic_id=getattr(asked_topic, "topic_id", None), partitions=[part]
        )
        return types.SimpleNamespace(error_code=0, session_id=0, responses=[topic])


async def test_a_follower_truncates_on_diverging_epochs_then_fetches(tmp_path: Path) -> None:
    """Kafka's AbstractFetcherThread with truncation on fetch: no OffsetForLeaderEpoch; each
    fetch names the log's latest epoch, and a diverging answer truncates to the end of the
    largest common epoch (another round when the leader names an epoch this log lacks).

    Follower: epoch 0 at 0..4, epoch 2 at 5..9. Leader: epoch 0 at 0..2, epoch 1 at 3..7,
    epoch 3 from 8 (as after an unclean election). Fetch at 10 naming epoch 2: the leader's
    epoch 1 ends at 8, ours (epoch 0) at 5: truncate to 5. Fetch at 5 naming epoch 0: it ends at
    3 there: truncate to 3. Fetch at 3: the leader's epoch-1 records."""
    async with _broker_7_following(tmp_path) as (core, p):
        ours = [unit._epoch_batch([b"r"], offset, 0) for offset in range(5)] + [unit._epoch_batch([b"v"] * 5, 5, 2)]
        for data in ours:
            p.append_records_as_follower(data, records.validate_batches(data, exact_counts=False))
        assert p.log_end_offset == 10
        fetcher = unit._fetcher_from_7(core, p)
        leader = _FakeLeader({0: 0, 1: 3, 3: 8}, 9, {3: unit._epoch_batch([b"l"] * 5, 3, 1)})
        for _ in range(4):
            await fetcher._truncate(leader)
            await fetcher._fetch(leader)
        sent = [
            (r.__version__, r.topics[0].partitions[0].fetch_offset, r.topics[0].partitions[0].last_fetched_epoch)
            for r in leader.requests
        ]
        assert sent == [(15, 10, 2), (15, 5, 0), (15, 3, 0), (15, 8, 1)]
        # v13+ by the topic's id; v15 with this broker's epoch (KIP-903)
        topic_id = core.metadata_cache.topics["t"].topic_id
        assert {r.topics[0].topic_id.hex for r in leader.requests} == {topic_id}
        states = {(r.replica_state.replica_id, r.replica_state.replica_epoch) for r in leader.requests}
        assert states == {(0, core.metadata_cache.brokers[0].epoch)}
        assert p.log_end_offset == 8
        assert [(e.epoch, e.start_offset) for e in p.log.epoch_entries()] == [(0, 0), (1, 3)]
        assert _batches(p) == [(0, 0, 0), (1, 1, 0), (2, 2, 0), (3, 7, 1)]


def _batches(p: Partition) -> list[tuple[int, int, int]]:
    """(base offset, last offset, leader epoch) of each batch in ``p``'s log."""
    info = p.log.read(0, MAX, min_one_batch=True)
    try:
        data = info.to_bytes()
    finally:
        info.release()
    return [
        (h.base_offset, h.base_offset + h.last_offset_delta, h.partition_leader_epoch)
        for _, h in records.iter_headers(data)
    ]


@asynccontextmanager
async def _broker_7_following(tmp_path: Path) -> AsyncIterator[tuple[BrokerCore, Partition]]:
    """Broker 0 following broker 7 on t-0."""
    async with running_broker(tmp_path) as core, unit._broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [7, 0]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        p = core.replica_manager.get_partition(unit.TP)
        assert p is not None and not p.is_leader
        yield core, p


async def test_a_topic_without_an_id_is_fetched_by_name(tmp_path: Path) -> None:
    """A topic the metadata cache has no id for (made before ids) cannot go in a v13+ request:
    that round goes by name at v12, still naming the last fetched epoch."""
    async with _broker_7_following(tmp_path) as (core, p):
        data = unit._epoch_batch([b"r"], 0, 0)
        p.append_records_as_follower(data, records.validate_batches(data, exact_counts=False))
        cache = core.metadata_cache
        cache.topics["t"] = dataclasses.replace(cache.topics["t"], topic_id="")
        fetcher = unit._fetcher_from_7(core, p)
        leader = _FakeLeader({0: 0}, 3, {1: unit._epoch_batch([b"l", b"m"], 1, 0)})
        await fetcher._truncate(leader)
        await fetcher._fetch(leader)
        (request,) = leader.requests
        asked = request.topics[0]
        assert (request.__version__, asked.topic, asked.partitions[0].last_fetched_epoch) == (12, "t", 0)
        assert p.log_end_offset == 3
