"""Partition reassignment (KIP-455) in one process: a real broker 0 on meta_local and a second
broker, 7, simulated by a metadata session of its own (its follower fetches made by hand), as in
test_replication_unit.py; then kafka-python against one broker process."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_harness import batch, produce, running_broker
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError, UnknownTopicOrPartitionError
from test_replication_unit import TP, _broker_7, _follower_fetch, _led_with_broker_7, _state_in_store
from test_transport_tcp import ScriptedBroker, serving

from odradek.broker.api import (
    BrokerNode,
    CreatableTopic,
    CreatePartitionsTopic,
    OngoingReassignment,
    ReassignmentResult,
)
from odradek.broker.core import BrokerCore
from odradek.broker.metadata_cache import PartitionState, partition_state_key
from odradek.broker.partition_reassignments import list_partition_reassignments, require_controller
from odradek.cli import main
from odradek.client import Admin
from odradek.client.aio import AsyncAdmin, PartitionReassignment
from odradek.config import default_config
from odradek.errors import ErrorCode, KafkaError
from odradek.interfaces import Check, Delete, MetadataStore, Put, TopicPartition
from odradek.metrics import BrokerCollector
from odradek.plugins.transport_tcp.client import TcpConnector
from odradek.protocol import ApiKey, decode_response, encode_request, request_type
from odradek.testing.broker import BrokerProcess, unique_topic

DONE = ReassignmentResult(ErrorCode.NONE)


async def _assignment_doc(core: BrokerCore) -> dict[str, object]:
    v = await core.store.get("/brokers/topics/t")
    assert v is not None
    doc: dict[str, object] = json.loads(v.value)
    return doc


async def _until_done(core: BrokerCore) -> None:
    """Wait until the controller completed the reassignments (and this broker's cache has it)."""
    with trio.fail_after(10):
        while await core.list_partition_reassignments(None):
            await trio.sleep(0.02)


def _gauge(core: BrokerCore, name: str) -> int:
    """A ``kafka_server_replicamanager_<name>`` gauge of ``core``."""
    return next(v for n, v, _ in BrokerCollector(core).snapshot().replica_manager if n == name)


async def _replicas_in_metadata(core: BrokerCore) -> tuple[int, ...]:
    answer = await core.metadata(["t"], False)
    return answer.topics[0].partitions[0].replicas


async def test_a_new_replica_catches_up_and_joins_the_assignment(tmp_path: Path) -> None:
    """[0] -> [0, 7]: broker 7 is an adding replica (Metadata shows the full replica set) until
    its fetches catch up and the leader takes it into the ISR; then the controller writes the
    target assignment. Nothing is removed, so the leader epoch stays."""
    async with running_broker(tmp_path, **{"replica.lag.time.max.ms": 30000}) as core, _broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [0]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        assert (await produce(core, TP, batch([b"a", b"b", b"c"]), acks=1)).error == ErrorCode.NONE
        epoch = (await _state_in_store(core)).leader_epoch

        assert await core.alter_partition_reassignments({TP: [0, 7]}) == {TP: DONE}
        ongoing = OngoingReassignment((0, 7), (7,), ())
        assert await core.list_partition_reassignments(None) == {TP: ongoing}
        assert await core.list_partition_reassignments({"t": [0, 1], "nope": [0]}) == {TP: ongoing}
        assert await core.list_partition_reassignments({"t": [1]}) == {}
        assert await _replicas_in_metadata(core) == (0, 7)
        # the leader's gauges: one partition reassigning, under-replicated against its target
        assert _gauge(core, "reassigningpartitions") == 1
        assert _gauge(core, "underreplicatedpartitions") == 1
        doc = await _assignment_doc(core)
        assert doc["adding_replicas"] == {"0": [7]} and "removing_replicas" not in doc
        # growing the topic waits for the reassignment, as Kafka's controller refuses it
        grown = await core.create_partitions([CreatePartitionsTopic("t", 2)], 1000, False)
        assert grown["t"].error == ErrorCode.REASSIGNMENT_IN_PROGRESS

        # the leader accepts broker 7's fetches now: it catches up and joins the ISR
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None and 7 in partition.remote_replicas
        assert await _follower_fetch(core, 0, epoch) == ErrorCode.NONE
        assert await _follower_fetch(core, 3, epoch) == ErrorCode.NONE
        await _until_done(core)
        final = await _assignment_doc(core)
        assert final == {"version": doc["version"], "topic_id": doc["topic_id"], "partitions": {"0": [0, 7]}}
        state = await _state_in_store(core)
        assert (state.leader, state.leader_epoch, state.isr) == (0, epoch, (0, 7))
        assert await _replicas_in_metadata(core) == (0, 7)
        assert _gauge(core, "reassigningpartitions") == 0
        assert _gauge(core, "underreplicatedpartitions") == 0


async def test_moving_the_leader_away_elects_a_target_replica_and_deletes_the_log(tmp_path: Path) -> None:
    """[0, 7] -> [7] with both in sync: complete at once. The leader being removed hands over
    to broker 7 (leader epoch + 1, ISR [7]), and broker 0 stops hosting the partition and
    deletes its log (Kafka's StopReplica with deletePartition)."""
    async with _led_with_broker_7(tmp_path) as (core, _other, p):
        assert (await produce(core, TP, batch([b"a", b"b"]), acks=1)).error == ErrorCode.NONE
        epoch = p.leader_epoch
        assert await _follower_fetch(core, 2, epoch) == ErrorCode.NONE
        assert any(d.is_dir() for d in tmp_path.rglob("t-0")), "no log directory named t-0"
        assert await core.alter_partition_reassignments({TP: [7]}) == {TP: DONE}
        await _until_done(core)
        state = await _state_in_store(core)
        assert (state.leader, state.leader_epoch, state.isr) == (7, epoch + 1, (7,))
        assert (await _assignment_doc(core))["partitions"] == {"0": [7]}
        with trio.fail_after(5):
            while core.replica_manager.get_partition(TP) is not None:
                await trio.sleep(0.02)
        assert core.replica_manager.storage.get_log(TP) is None
        assert not any(d.is_dir() for d in tmp_path.rglob("t-0")), "the log directory is still there"


async def test_cancelling_a_pending_reassignment_reverts_it(tmp_path: Path) -> None:
    """[0] -> [0, 7] with broker 7 never fetching stays pending; a null target cancels it: the
    original replicas come back (the adding one leaves, the leader epoch goes up); a second
    cancel has nothing to cancel."""
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [0]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        epoch = (await _state_in_store(core)).leader_epoch
        assert await core.alter_partition_reassignments({TP: [0, 7]}) == {TP: DONE}
        await trio.sleep(0.2)  # a pass or two: nothing completes it
        assert await core.list_partition_reassignments(None) == {TP: OngoingReassignment((0, 7), (7,), ())}

        assert await core.alter_partition_reassignments({TP: None}) == {TP: DONE}
        assert await core.list_partition_reassignments(None) == {}
        assert (await _assignment_doc(core))["partitions"] == {"0": [0]}
        assert "adding_replicas" not in await _assignment_doc(core)
        state = await _state_in_store(core)
        assert (state.leader, state.leader_epoch, state.isr) == (0, epoch + 1, (0,))
        again = await core.alter_partition_reassignments({TP: None})
        assert again[TP].error is ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        with trio.fail_after(5):
            while (p := core.replica_manager.get_partition(TP)) is None or p.replicas != (0,):
                await trio.sleep(0.02)
        assert await _replicas_in_metadata(core) == (0,)


async def test_a_new_target_replaces_a_running_reassignment(tmp_path: Path) -> None:
    """[0] -> [7] pending (7 never fetches); then [0, 7]: the original replicas stay [0], and
    the running reassignment's removal of 0 is dropped."""
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        await core.create_topics([CreatableTopic("t", assignments={0: [0]})], 1000, False)
        assert await core.alter_partition_reassignments({TP: [7]}) == {TP: DONE}
        assert await core.list_partition_reassignments(None) == {TP: OngoingReassignment((7, 0), (7,), (0,))}
        # Kafka compares sizes: a target of one replica, an ISR of one, not under-replicated
        assert (_gauge(core, "reassigningpartitions"), _gauge(core, "underreplicatedpartitions")) == (1, 0)
        assert await core.alter_partition_reassignments({TP: [0, 7]}) == {TP: DONE}
        assert await core.list_partition_reassignments(None) == {TP: OngoingReassignment((0, 7), (7,), ())}
        # back to the original replicas by target: no reassignment left
        assert await core.alter_partition_reassignments({TP: [0]}) == {TP: DONE}
        assert await core.list_partition_reassignments(None) == {}


async def test_a_single_broker_answers_as_kafka(tmp_path: Path) -> None:
    """meta_local, one broker: a reassignment to itself is a no-op, anything else an error."""
    async with running_broker(tmp_path) as core:
        await core.create_topics([CreatableTopic("t", 2, 1)], 1000, False)
        t1 = TopicPartition("t", 1)
        answers = await core.alter_partition_reassignments(
            {TP: [0], t1: [5], TopicPartition("t", 2): [0], TopicPartition("nope", 0): [0]}
        )
        assert answers[TP] == DONE
        assert answers[t1].error is ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert "not alive" in (answers[t1].error_message or "")
        assert answers[TopicPartition("t", 2)].error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert answers[TopicPartition("nope", 0)].error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for bad in ([], [0, 0], [-1]):
            assert (await core.alter_partition_reassignments({TP: bad}))[TP].error is (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT
            )
        assert (await core.alter_partition_reassignments({TP: None}))[TP].error is ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        rf = await core.alter_partition_reassignments({TP: [0]}, allow_replication_factor_change=False)
        assert rf == {TP: DONE}
        assert await core.list_partition_reassignments(None) == {}


def test_a_broker_that_is_not_the_controller_refuses_both_requests() -> None:
    with pytest.raises(KafkaError) as refused:
        require_controller(None)
    assert refused.value.code is ErrorCode.NOT_CONTROLLER
    with pytest.raises(KafkaError):
        list_partition_reassignments(None, None, None)  # type: ignore[arg-type]


def test_kafka_python_on_a_single_broker(odradek_broker: BrokerProcess) -> None:
    """kafka-python's admin client (sends both to the controller): a reassignment to the only
    broker is accepted, to an unknown one refused, a cancel without one answered; nothing is
    listed."""
    topic = unique_topic("reassign")
    client = KafkaAdminClient(bootstrap_servers=odradek_broker.bootstrap)
    try:
        client.create_topics([NewTopic(topic, 1, 1)])
        tp = KTopicPartition(topic, 0)
        broker_id = int(odradek_broker.settings.get("broker.id", "0"))
        assert client.alter_partition_reassignments({tp: [broker_id]}) == {tp: None}
        refused = client.alter_partition_reassignments({tp: [broker_id + 100]})
        assert refused == {tp: InvalidReplicationAssignmentError}
        assert client.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
        unknown = KTopicPartition(topic + "-nope", 0)
        assert client.alter_partition_reassignments({unknown: [broker_id]}) == {unknown: UnknownTopicOrPartitionError}
        assert client.list_partition_reassignments() == {}
        assert client.list_partition_reassignments([tp]) == {}
    finally:
        client.close()
    assert not odradek_broker.log_problems(), odradek_broker.log_problems()


def test_the_cli_and_odradeks_admin_client_on_a_single_broker(
    odradek_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """``odradek partitions reassign|reassignments`` (through odradek's own admin client): a
    move to the only broker completes at once, an unknown broker and a cancel without a
    reassignment fail with Kafka's error names."""
    topic = unique_topic("reassign-cli")
    boot = ["--bootstrap-server", odradek_broker.bootstrap]
    assert main(["topics", "create", *boot, "--topic", topic, "--partitions", "2", "--replication-factor", "1"]) == 0
    broker_id = odradek_broker.settings.get("broker.id", "0")
    reassign = ["partitions", "reassign", *boot, "--topic", topic, "--partition", "0"]
    assert main([*reassign, "--partition", "1", "--replicas", broker_id, "--wait"]) == 0
    out = capsys.readouterr().out
    assert f"Reassignment of partition {topic}-1 started to {broker_id}." in out
    assert f"Reassignment of partition {topic}-0 is completed." in out
    assert main([*reassign, "--replicas", "100"]) == 1
    assert "INVALID_REPLICA_ASSIGNMENT" in capsys.readouterr().err
    assert main([*reassign, "--cancel"]) == 1
    assert "NO_REASSIGNMENT_IN_PROGRESS" in capsys.readouterr().err
    assert main(["partitions", "reassignments", *boot]) == 0
    assert capsys.readouterr().out == "No partition reassignments found.\n"
    assert main(["partitions", "reassignments", *boot, "--topic", topic]) == 0
    assert capsys.readouterr().out == "No partition reassignments found.\n"
    for usage_error in (["--replicas", "1", "--cancel"], ["--replicas", "a,b"], []):
        with pytest.raises(SystemExit):
            main([*reassign, *usage_error])
    with Admin({"bootstrap.servers": odradek_broker.bootstrap}) as admin:
        answers = admin.alter_partition_reassignments({TopicPartition(topic, 0): [int(broker_id)]})
        assert answers == {TopicPartition(topic, 0): None}
        assert admin.list_partition_reassignments() == {}


class _RacingStore:
    """The controller's metadata session, where the leader takes broker 7 out of partition 1's
    ISR just before the first transaction that writes several keys (a completion of both
    partitions), which then loses its compare-and-set."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self.raced = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def txn(self, checks: Sequence[Check], ops: Sequence[Put | Delete]) -> None:
        if not self.raced and len(ops) > 1:
            self.raced = True
            key = partition_state_key("t", 1)
            current = await self._store.get(key)
            assert current is not None
            state = PartitionState.decode(current)
            shrunk = PartitionState(state.leader, state.leader_epoch, (0,), state.version)
            await self._store.put(key, shrunk.to_json(), expect=current.version)
        await self._store.txn(checks, ops)


async def test_a_completion_that_lost_its_write_is_decided_again_for_every_partition(tmp_path: Path) -> None:
    """Both partitions of t complete in one pass (0: [0, 7] -> [0]; 1: [0, 7] -> [7]), written in
    one transaction that loses to an ISR shrink of partition 1, which then cannot complete. The
    pass that change brings would decide partition 1 only; the topic whose completion was lost
    is decided whole again, so partition 0 completes (it stayed reassigning until some other
    change touched it)."""
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        created = await core.create_topics([CreatableTopic("t", assignments={0: [0, 7], 1: [0, 7]})], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        controller = core.controller
        assert controller is not None
        racing = _RacingStore(controller.store)
        controller.store = racing  # type: ignore[assignment]
        t1 = TopicPartition("t", 1)
        assert await core.alter_partition_reassignments({TP: [0], t1: [7]}) == {TP: DONE, t1: DONE}
        with trio.fail_after(10):
            while TP in await core.list_partition_reassignments(None):
                await trio.sleep(0.02)
        assert racing.raced
        assert (await _assignment_doc(core))["partitions"] == {"0": [0], "1": [7, 0]}
        assert await core.list_partition_reassignments(None) == {t1: OngoingReassignment((7, 0), (), (0,))}


class _SmallTxnStore:
    """The controller's metadata session with etcd's limit on a transaction's writes and checks
    (``max_txn_ops``), refusing any transaction past it as etcd does."""

    def __init__(self, store: MetadataStore, max_txn_ops: int) -> None:
        self._store = store
        self.max_txn_ops = max_txn_ops
        self.largest = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def txn(self, checks: Sequence[Check], ops: Sequence[Put | Delete]) -> None:
        self.largest = max(self.largest, len(checks), len(ops))
        assert max(len(checks), len(ops)) <= self.max_txn_ops, (checks, ops)
        await self._store.txn(checks, ops)


async def test_reassignments_of_many_partitions_fit_the_stores_transactions(tmp_path: Path) -> None:
    """A store that takes few operations per transaction (etcd's --max-txn-ops): a request for
    three partitions of a topic is written a partition at a time, and so are their completions,
    instead of one transaction the store refuses (which ended the controller's term for good)."""
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        created = await core.create_topics(
            [CreatableTopic("t", assignments={p: [0, 7] for p in range(3)})], 1000, False
        )
        assert created["t"].error == ErrorCode.NONE
        controller = core.controller
        assert controller is not None
        small = _SmallTxnStore(controller.store, 3)
        controller.store = small  # type: ignore[assignment]
        tps = [TopicPartition("t", p) for p in range(3)]
        assert await core.alter_partition_reassignments({tp: [0] for tp in tps}) == {tp: DONE for tp in tps}
        await _until_done(core)
        assert (await _assignment_doc(core))["partitions"] == {"0": [0], "1": [0], "2": [0]}
        assert small.largest == 3


class _MovingController(ScriptedBroker):
    """A broker that answers both reassignment requests NOT_CONTROLLER (the request's error)
    the first ``refusals`` times, as a broker does right after the controllership moved."""

    def __init__(self, refusals: int) -> None:
        super().__init__(default_config())
        self.refusals = refusals
        self.asked = 0
        self.port = 0  #: where Metadata says broker 1 (the controller) listens

    async def metadata(self, topics, allow_auto_create, *, listener_name=None):  # type: ignore[no-untyped-def]
        answer = await super().metadata(topics, allow_auto_create, listener_name=listener_name)
        return dataclasses.replace(answer, brokers=(BrokerNode(1, "127.0.0.1", self.port),))

    def _refuse(self) -> None:
        self.asked += 1
        if self.refusals > 0:
            self.refusals -= 1
            raise KafkaError("this broker is not the controller", code=ErrorCode.NOT_CONTROLLER)

    async def alter_partition_reassignments(self, reassignments, *, allow_replication_factor_change=True):  # type: ignore[no-untyped-def]
        self._refuse()
        return await super().alter_partition_reassignments(reassignments)

    async def list_partition_reassignments(self, partitions):  # type: ignore[no-untyped-def]
        self._refuse()
        return {TP: OngoingReassignment((1, 2), (2,), ())}


async def test_not_controller_is_the_requests_error_and_odradeks_client_asks_again() -> None:
    """On the wire, NOT_CONTROLLER is the request's error with no partitions (Kafka's answer in
    ZooKeeper mode); odradek's admin client re-reads the metadata and asks again, as Kafka's
    admin client retries a NotControllerException."""
    broker = _MovingController(refusals=1)
    async with serving(broker) as (_, bound):
        broker.port = bound.port
        conn = await TcpConnector().connect(bound.host, bound.port, timeout_s=5)
        try:
            request = request_type(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0)
            await conn.send_frame(encode_request(request(topics=()), correlation_id=1, client_id="t"))
            _, answer = decode_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, await conn.receive_frame())
        finally:
            await conn.aclose()
        assert (int(answer.error_code), answer.responses) == (ErrorCode.NOT_CONTROLLER, ())

        broker.refusals = 1
        async with AsyncAdmin({"bootstrap.servers": f"{bound.host}:{bound.port}"}) as admin:
            assert await admin.alter_partition_reassignments({TP: [1, 2]}) == {TP: None}
            broker.refusals = 1
            listed = await admin.list_partition_reassignments()
        assert listed == {TP: PartitionReassignment([1, 2], [2], [])}
        assert broker.asked == 5
