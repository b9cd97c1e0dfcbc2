"""Fencing on three odradek brokers on the session ZooKeeper and etcd, driven by confluent-kafka
(kafka-python for reassignments), with requests asked of one broker at a time where it matters.

A leader paused past its metadata session. A SIGSTOPped process is what a long GC pause, a
swapped-out host or a broker cut off from its metadata store looks like to the others: it holds
its sockets, answers nothing, and resumes believing what it believed. The leader of an RF=3,
min.insync.replicas=2 partition is paused while an idempotent acks=all producer keeps producing;
its session expires and the controller elects another in-sync replica (a new leader epoch).
While it is paused, a Produce with acks=all is written into a connection it accepted earlier; it
reads that request the moment it runs again, still believing it leads. It must not acknowledge
it: its followers fetch from the new leader, so its high watermark cannot move past what they
had. It learns it was replaced (its session is gone, the partition state names a newer leader
epoch), answers that request NOT_LEADER_OR_FOLLOWER, truncates what it appended and rejoins the
ISR as a follower; a Produce or Fetch sent to it afterwards is NOT_LEADER_OR_FOLLOWER, a Fetch
naming the old epoch to the new leader FENCED_LEADER_EPOCH. The producer moves to the new
leader by itself, and a consumer reads every acknowledged record exactly once and in order, and
never the refused one.

The controller killed (SIGKILL) in the middle of its work: electing the new leaders of a dead
broker's 48 partitions, and moving four partitions off its own broker. The next controller
finishes: no partition is left leaderless while a live in-sync replica exists, each gets one new
leader epoch, every reassignment completes, and no acknowledged record is lost.
"""

from __future__ import annotations

import datetime
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from client_helpers import read_response
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient
from test_replication_cluster import (
    SESSION_MS,
    all_brokers_seen,
    consume_all,
    metadata_settings,
    three_brokers,
    wait_for,
)

from odradek import records
from odradek.errors import ErrorCode
from odradek.protocol import ApiKey, decode_response, encode_request, request_type
from odradek.testing.broker import BrokerProcess, sample, unique_topic

PRODUCE_VERSION = 9
PARTITIONS = 48


def produce_frame(topic: str, value: bytes, correlation_id: int) -> bytes:
    """A size-prefixed Produce (acks=all) of one record to partition 0 of ``topic``."""
    cls = request_type(ApiKey.PRODUCE, PRODUCE_VERSION)
    m = __import__(cls.__module__, fromlist=["x"])
    batch = bytes(records.build_batch([(None, value, [], None)]))
    request = cls(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=5000),
        topic_data=(m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=0, records=batch),)),),
    )
    frame = encode_request(request, correlation_id=correlation_id, client_id="fencing-test")
    return struct.pack(">i", len(frame)) + bytes(frame)


def produce_error(sock: socket.socket, correlation_id: int) -> ErrorCode:
    """The error code of the one partition a :func:`produce_frame` request named."""
    cid, response = decode_response(ApiKey.PRODUCE, PRODUCE_VERSION, read_response(sock))
    assert cid == correlation_id
    (topic,) = response.responses
    (partition,) = topic.partition_responses
    return ErrorCode(partition.error_code)


def fetch_error(broker: BrokerProcess, topic: str, leader_epoch: int) -> ErrorCode:
    """The error of a consumer's Fetch (v12) of ``topic``-0 at offset 0 that names
    ``leader_epoch`` as the leader epoch it knows, sent to ``broker``."""
    cls = request_type(ApiKey.FETCH, 12)
    m = __import__(cls.__module__, fromlist=["x"])
    partition = m.FetchPartition(
        partition=0, current_leader_epoch=leader_epoch, fetch_offset=0, partition_max_bytes=1024
    )
    request = cls(
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        topics=(m.FetchTopic(topic=topic, partitions=(partition,)),),
        forgotten_topics_data=(),
    )
    frame = encode_request(request, correlation_id=9, client_id="fencing-test")
    with connect(broker) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + bytes(frame))
        _, response = decode_response(ApiKey.FETCH, 12, read_response(sock))
    ((answer,),) = [t.partitions for t in response.responses]
    return ErrorCode(answer.error_code)


def connect(broker: BrokerProcess, timeout_s: float = 30) -> socket.socket:
    host, port = broker.bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout_s)


def metadata_response(broker: BrokerProcess, topics: list[str]) -> Any:
    """``broker``'s own Metadata (v12) answer for ``topics``, or None when it does not answer.
    Asked of that broker alone: a librdkafka admin client may send its request to any broker
    it knows, a paused or killed one included."""
    cls = request_type(ApiKey.METADATA, 12)
    m = __import__(cls.__module__, fromlist=["x"])
    request = cls(
        topics=tuple(m.MetadataRequestTopic(topic_id=None, name=t) for t in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    frame = encode_request(request, correlation_id=5, client_id="fencing-test")
    try:
        with connect(broker, 2) as sock:
            sock.sendall(struct.pack(">i", len(frame)) + bytes(frame))
            return decode_response(ApiKey.METADATA, 12, read_response(sock))[1]
    except OSError:
        return None


def metadata_on(broker: BrokerProcess, topic: str) -> tuple[int, dict[int, tuple[int, int, list[int]]]] | None:
    """:func:`metadata_response` for ``topic``: (controller id, {partition: (leader, leader
    epoch, ISR)}), or None."""
    response = metadata_response(broker, [topic])
    if response is None:
        return None
    (t,) = response.topics
    if t.error_code != 0:
        return response.controller_id, {}
    return response.controller_id, {
        p.partition_index: (p.leader_id, p.leader_epoch, sorted(p.isr_nodes)) for p in t.partitions
    }


def replicas_on(broker: BrokerProcess, topics: list[str]) -> dict[str, tuple[list[int], list[int]]]:
    """(replicas, ISR) of each topic's partition 0 that ``broker``'s Metadata names."""
    response = metadata_response(broker, topics)
    if response is None:
        return {}
    return {
        t.name: (list(p.replica_nodes), sorted(p.isr_nodes))
        for t in response.topics
        if t.error_code == 0
        for p in t.partitions
        if p.partition_index == 0
    }


def state_on(broker: BrokerProcess, topic: str) -> tuple[int, int, list[int]] | None:
    """(leader, leader epoch, ISR) of partition 0 in ``broker``'s Metadata, or None (no answer,
    no leader)."""
    answer = metadata_on(broker, topic)
    state = answer and answer[1].get(0)
    return state if state and state[0] >= 0 else None


@contextmanager
def producing(bootstrap: str, topic: str) -> Iterator[list[int]]:
    """An idempotent acks=all producer sending 0, 1, 2, ... to partition 0 until the block ends;
    yields the acknowledged numbers, in the order they were acknowledged."""
    acked: list[int] = []
    failed: list[str] = []
    stop = threading.Event()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(int(msg.value()))
        else:
            failed.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            # a paused broker holds its connections open and answers nothing: without these
            # librdkafka waits out socket.timeout.ms (60 s) on the requests it sent there
            "request.timeout.ms": 3000,
            "socket.timeout.ms": 3000,
            "message.timeout.ms": 60000,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )

    def run() -> None:
        n = 0
        while not stop.is_set():
            producer.produce(topic, b"%08d" % n, partition=0, on_delivery=on_delivery)
            n += 1
            producer.poll(0.01)
        producer.flush(60)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield acked
    finally:
        stop.set()
        thread.join(90)
    assert not thread.is_alive(), "the producer did not flush"
    assert not failed, failed[:5]


def fixed_leaders(kind: str, request: pytest.FixtureRequest, prefix: str) -> dict[str, str]:
    """Settings for three brokers on the session ZooKeeper or etcd without the controller's
    leader rebalancing, so that only the faults a test makes move leadership."""
    return {**metadata_settings(kind, request, prefix), "auto.leader.rebalance.enable": "false"}


@contextmanager
def paused(broker: BrokerProcess) -> Iterator[None]:
    """``broker``'s process stopped (SIGSTOP) for the block, then continued."""
    process = broker.process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        process.send_signal(signal.SIGCONT)


@pytest.mark.parametrize("controls", [True, False], ids=["controller", "not-controller"])
@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_a_leader_paused_past_its_session_is_fenced_and_rejoins_as_a_follower(
    tmp_path: Path, kind: str, controls: bool, request: pytest.FixtureRequest
) -> None:
    """The paused leader is the controller too (its writes, when it runs again, must be fenced
    by the newer controller epoch as well), or another broker."""
    with three_brokers(tmp_path, fixed_leaders(kind, request, "paused")) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        controller = admin.list_topics(timeout=5).controller_id
        leader = controller if controls else min(i for i in brokers if i != controller)
        topic = unique_topic("paused")
        assignment = [[leader, *(i for i in sorted(brokers) if i != leader)]]
        config = {"min.insync.replicas": "2"}
        admin.create_topics([NewTopic(topic, 1, replica_assignment=assignment, config=config)])[topic].result(15)
        wait_for("a full ISR", lambda: state_on(brokers[leader], topic) == (leader, 0, sorted(brokers)))
        old = brokers[leader]
        other = next(b for i, b in brokers.items() if i != leader)
        stale = connect(old)  # accepted while it runs; written to while it is paused
        try:
            with producing(bootstrap, topic) as acked:
                wait_for("records acknowledged by the first leader", lambda: len(acked) >= 200)
                with paused(old):
                    new_leader, epoch, isr = wait_for(
                        "another leader elected",
                        lambda: (s := state_on(other, topic)) and s[0] != leader and s,
                        timeout_s=SESSION_MS * 5 / 1000,
                    )
                    assert epoch > 0
                    assert leader not in isr
                    stale.sendall(produce_frame(topic, b"ghost", 11))
                    before = len(acked)
                    wait_for("records acknowledged by the new leader", lambda: len(acked) >= before + 200)
                # the request it read on waking up, as the leader it believed itself to be
                error = produce_error(stale, 11)
                assert error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH), error
                wait_for(
                    "the former leader back in the ISR",
                    lambda: (s := state_on(other, topic)) and s == (new_leader, epoch, sorted(brokers)),
                    timeout_s=30,
                )
                assert state_on(old, topic) == (new_leader, epoch, sorted(brokers))  # it knows it follows
                # a client that still names the epoch the old leader led is fenced by the new one,
                # and the old leader, a follower now, sends it on to the leader
                assert fetch_error(brokers[new_leader], topic, epoch - 1) == ErrorCode.FENCED_LEADER_EPOCH
                assert fetch_error(old, topic, epoch) == ErrorCode.NOT_LEADER_OR_FOLLOWER
                before = len(acked)
                wait_for("more records acknowledged", lambda: len(acked) >= before + 100)
            stale.sendall(produce_frame(topic, b"ghost2", 12))
            assert produce_error(stale, 12) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        finally:
            stale.close()

        values = consume_all(bootstrap, topic, acked[-1] + 1)
        assert b"ghost" not in values and b"ghost2" not in values
        got = [int(v) for v in values]
        assert got == sorted(set(got)), "records out of order or twice"
        assert set(acked) <= set(got), f"lost {len(set(acked) - set(got))} acknowledged records"
        assert got == list(range(len(got)))  # nothing missing in between either

        wait_for(
            "the former leader's log equal to the leader's",
            lambda: (
                sample(old.metrics(), "kafka_log_log_logendoffset", topic=topic, partition="0")
                == sample(brokers[new_leader].metrics(), "kafka_log_log_logendoffset", topic=topic, partition="0")
            ),
        )
        for b in brokers.values():
            assert not b.log_problems(), b.log_problems()


#: a topic's partition, as the tests here key the records they produced and read
Place = tuple[str, int]


def produce_to_each(bootstrap: str, places: list[Place], count: int, padding: int = 0) -> dict[Place, list[bytes]]:
    """``count`` records (of ``padding`` more bytes each) to each partition with acks=all
    (idempotent); the acknowledged values of each, in the order acknowledged."""
    acked: dict[Place, list[bytes]] = {place: [] for place in places}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked[msg.topic(), msg.partition()].append(msg.value())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for i in range(count):
        for topic, p in places:
            value = b"%s-%d-%d" % (topic.encode(), p, i) + b"." * padding
            producer.produce(topic, value, partition=p, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert all(len(v) == count for v in acked.values())
    return acked


def read_each(bootstrap: str, acked: dict[Place, list[bytes]]) -> dict[Place, list[bytes]]:
    """Every partition ``acked`` names read from offset 0 until it gave as many records as
    acknowledged there (or 20 s passed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fencing-test", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for topic, p in acked])
    got: dict[Place, list[bytes]] = {place: [] for place in acked}
    deadline = time.monotonic() + 20
    try:
        while not all(len(got[place]) >= len(v) for place, v in acked.items()):
            if time.monotonic() > deadline:
                pytest.fail(f"read {sum(map(len, got.values()))} of {sum(map(len, acked.values()))} records")
            for msg in consumer.consume(500, 0.2):
                if msg.error() is None:
                    got[msg.topic(), msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_a_controller_killed_while_it_elects_leaves_no_partition_leaderless(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """A broker leading many partitions is killed; the controller starts electing their new
    leaders and is killed (SIGKILL) as soon as the first election shows, with its pass
    over the others most likely unfinished. The third broker becomes controller, elects itself
    for every partition (the only live in-sync replica), each exactly once (one new leader
    epoch), and serves every record acknowledged with acks=all before the crashes. Once the two
    are back, they catch up and every ISR is full again."""
    with three_brokers(tmp_path, fixed_leaders(kind, request, "ctlkill")) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        controller = admin.list_topics(timeout=5).controller_id
        leader, survivor = (i for i in brokers if i != controller)
        topic = unique_topic("ctlkill")
        assignment = [[leader, survivor, controller]] * PARTITIONS
        new = NewTopic(topic, num_partitions=PARTITIONS, replica_assignment=assignment)
        admin.create_topics([new])[topic].result(15)
        full = sorted(brokers)
        wait_for(
            "every ISR full",
            lambda: (
                (a := metadata_on(brokers[survivor], topic))
                and len(a[1]) == PARTITIONS
                and all(s == (leader, 0, full) for s in a[1].values())
            ),
        )
        acked = produce_to_each(bootstrap, [(topic, p) for p in range(PARTITIONS)], 20)

        brokers[leader].kill()
        wait_for(
            "the controller's first election",
            lambda: (a := metadata_on(brokers[survivor], topic)) and any(s[0] != leader for s in a[1].values()),
        )
        brokers[controller].kill()

        def finished() -> bool:
            answer = metadata_on(brokers[survivor], topic)
            return (
                answer is not None
                and answer[0] == survivor
                and all(s == (survivor, 1, [survivor]) for s in answer[1].values())
            )

        wait_for("the survivor controller and leading everything, each at epoch 1", finished, SESSION_MS * 5 / 1000)
        got = read_each(brokers[survivor].bootstrap, acked)
        assert got == acked, "acknowledged records lost, reordered or doubled"

        brokers[leader].start()
        brokers[controller].start()
        wait_for(
            "every ISR full again",
            lambda: (
                (a := metadata_on(brokers[survivor], topic))
                and all(s[0] == survivor and s[2] == full for s in a[1].values())
            ),
            timeout_s=30,
        )
        assert read_each(bootstrap, acked) == acked
        for b in brokers.values():
            assert not b.log_problems(), b.log_problems()


def all_on(broker: BrokerProcess, topics: list[str], replicas: list[int]) -> bool:
    """Whether ``broker``'s Metadata gives each topic's partition 0 ``replicas``, all in sync."""
    found = replicas_on(broker, topics)
    return sorted(found) == sorted(topics) and all(r == (replicas, sorted(replicas)) for r in found.values())


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_a_controller_killed_while_its_replicas_are_moved_away_is_succeeded_by_one_that_completes(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """Four topics on [controller, a] move to [a, b] (AlterPartitionReassignments): b starts
    copying from the controller's broker, their leader, and that broker is killed (SIGKILL)
    while b copies. The next controller elects a, b goes on copying from it, and every
    reassignment completes as the dead controller started it ([a, b], ISR [a, b], none listed);
    every acknowledged record is on both. The former controller, restarted, deletes the logs
    of the partitions it no longer hosts."""
    with three_brokers(tmp_path, fixed_leaders(kind, request, "ctlmove")) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        controller = admin.list_topics(timeout=5).controller_id
        a, b = (i for i in sorted(brokers) if i != controller)
        topics = [unique_topic("ctlmove") for _ in range(4)]
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=1, replica_assignment=[[controller, a]]) for t in topics]
        )
        for future in futures.values():
            future.result(15)
        wait_for(
            "full ISRs",
            lambda: (
                all(r == ([controller, a], sorted([controller, a])) for r in replicas_on(brokers[a], topics).values())
                and len(replicas_on(brokers[a], topics)) == 4
            ),
        )
        acked = produce_to_each(bootstrap, [(t, 0) for t in topics], 500, padding=2000)  # 1 MB each

        client = KafkaAdminClient(bootstrap_servers=brokers[a].bootstrap, request_timeout_ms=15000)
        try:
            moves = {KTopicPartition(t, 0): [a, b] for t in topics}
            assert client.alter_partition_reassignments(moves) == dict.fromkeys(moves)
        finally:
            client.close()
        brokers[controller].kill()
        wait_for(
            "every reassignment completed under the next controller",
            lambda: all_on(brokers[a], topics, [a, b]),
            timeout_s=SESSION_MS * 10 / 1000,
        )
        client = KafkaAdminClient(bootstrap_servers=brokers[a].bootstrap, request_timeout_ms=15000)
        try:  # it finds the new controller
            assert client.list_partition_reassignments() == {}
        finally:
            client.close()
        answer = metadata_on(brokers[a], topics[0])
        assert answer is not None and answer[0] in (a, b)
        for i in (a, b):
            assert read_each(brokers[i].bootstrap, acked) == acked

        brokers[controller].start()
        wait_for(
            "the former controller's logs of the moved partitions deleted",
            lambda: not any(any(brokers[controller].data_dir.rglob(f"{t}-0")) for t in topics),
        )
        for broker in brokers.values():
            assert not broker.log_problems(), broker.log_problems()
