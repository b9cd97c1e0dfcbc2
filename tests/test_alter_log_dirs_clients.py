"""Moving a replica between a broker's log dirs (KIP-113) with real clients against a real
broker: kafka-python's ``alter_replica_log_dirs`` while a confluent-kafka producer keeps
producing, then a consumer reads every record once, in order, at the offsets the producer was
given; and ``odradek log-dirs move --wait`` / ``describe`` moving it back."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.errors import NoError
from kafka.structs import TopicPartitionReplica

from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration


def _placement(bootstrap: str, topic: str) -> dict[str, bool]:
    """log dir -> whether it holds the future replica of ``topic``-0 (absent: no replica there)."""
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        (answer,) = kp.describe_log_dirs({topic: [0]})
    finally:
        kp.close()
    return {d["log_dir"]: p["is_future_key"] for d in answer["log_dirs"] for t in d["topics"] for p in t["partitions"]}


def _produce_until(bootstrap: str, topic: str, stop: threading.Event, acked: list[tuple[int, bytes]]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, "batch.size": 16384}
    )

    def delivered(err: object, msg: object) -> None:
        # a failed delivery goes in as offset -1: the offsets check below then fails
        acked.append((-1 if err is not None else msg.offset(), msg.value()))  # type: ignore[attr-defined]

    n = 0
    while not stop.is_set():
        producer.produce(topic, b"record-%07d" % n + b"p" * 200, partition=0, on_delivery=delivered)
        producer.poll(0)
        n += 1
        if n % 200 == 0:
            time.sleep(0.01)
    assert producer.flush(30) == 0


def _consume_all(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                assert msg.error() is None, msg.error()
                got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def _wait_for(what: str, done: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def two_dir_broker(tmp_path_factory: pytest.TempPathFactory) -> BrokerProcess:
    work = tmp_path_factory.mktemp("logdirs")
    dirs = f"{work / 'dir-a'},{work / 'dir-b'}"
    with start_broker(work / "broker", {"log.dirs": dirs, "log.segment.bytes": 262144}) as broker:
        yield broker  # type: ignore[misc]


def test_a_replica_moves_under_load_with_kafka_python(two_dir_broker: BrokerProcess) -> None:
    bootstrap = two_dir_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = unique_topic("move")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    broker_id = admin.describe_cluster().result(15).nodes[0].id
    stop, acked = threading.Event(), []
    producing = threading.Thread(target=_produce_until, args=(bootstrap, topic, stop, acked))
    producing.start()
    try:
        _wait_for("records", lambda: len(acked) > 3000)
        (here,) = _placement(bootstrap, topic)
        (target,) = {str(Path(here).parent / n) for n in ("dir-a", "dir-b")} - {here}
        kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        try:
            replica = TopicPartitionReplica(topic, 0, broker_id)
            assert kp.alter_replica_log_dirs({replica: target}) == {replica: NoError}
            missing = TopicPartitionReplica(topic, 0, broker_id)
            answer = kp.alter_replica_log_dirs({missing: "/not/a/log/dir"})
            assert answer[missing].errno == 57  # LOG_DIR_NOT_FOUND
        finally:
            kp.close()
        _wait_for("the move", lambda: _placement(bootstrap, topic) == {target: False})
        moved_at = len(acked)
        _wait_for("records after the move", lambda: len(acked) > moved_at + 500)
    finally:
        stop.set()
        producing.join(60)
    acked.sort()
    assert [o for o, _ in acked] == list(range(len(acked)))  # idempotent: each once, no gap
    assert _consume_all(bootstrap, topic, len(acked)) == acked
    two_dir_broker.check_alive()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "log-dirs", *args], capture_output=True, text=True, timeout=120
    )


def test_the_cli_moves_a_replica_and_describes_the_dirs(two_dir_broker: BrokerProcess) -> None:
    bootstrap = two_dir_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = unique_topic("cli-move")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(100):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    broker_id = str(admin.describe_cluster().result(15).nodes[0].id)
    (here,) = _placement(bootstrap, topic)
    (target,) = {str(Path(here).parent / n) for n in ("dir-a", "dir-b")} - {here}
    boot = ["--bootstrap-server", bootstrap, "--broker", broker_id]
    moved = _cli("move", *boot, "--topic", topic, "--partition", "0", "--dir", target, "--wait")
    assert moved.returncode == 0, moved.stderr
    assert f"Move of {topic}-0 on broker {broker_id} is completed." in moved.stdout
    assert _placement(bootstrap, topic) == {target: False}
    described = _cli("describe", *boot)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    at = lines.index(next(line for line in lines if line.startswith(f"broker {broker_id} {target}:")))
    assert any(line.startswith(f"  {topic}-0: size ") and " offset_lag 0" in line for line in lines[at + 1 :])
    refused = _cli("move", *boot, "--topic", topic, "--partition", "0", "--dir", "/nowhere")
    assert refused.returncode == 1 and "LOG_DIR_NOT_FOUND" in refused.stderr
    assert [v for _, v in _consume_all(bootstrap, topic, 100)] == [b"%d" % i for i in range(100)]
