"""Partition reassignment (KIP-455) on three odradek brokers, driven by kafka-python's admin
client (AlterPartitionReassignments, ListPartitionReassignments) with confluent-kafka producing
and consuming, on the session ZooKeeper and etcd.

One test per store, each in two acts. First, a partition on [controller, b] moves to [b, c]
while a producer keeps producing with acks=all: the old leader (the controller's broker, first
in the assignment) is removed, broker c catches up, the reassignment completes, Metadata shows
[b, c], the controller's broker deletes its log, and every acknowledged record is read back.
Second, broker c paused (SIGSTOP, still registered for a moment) is added to two partitions:
both reassignments stay pending; the controller is killed and the new one lists them (they live
in the metadata store); one is cancelled and goes back to its original replicas; once c runs
again the other completes under the new controller, and c never hosts the cancelled one. The
``odradek partitions reassignments`` command lists the pending ones as the controller does.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient
from test_replication_cluster import all_brokers_seen, consume_all, metadata_settings, three_brokers, wait_for

from odradek.cli import main
from odradek.testing.broker import BrokerProcess, sample, unique_topic


def _replicas(admin: AdminClient, topic: str) -> tuple[list[int], int, list[int]] | None:
    """(replicas, leader, isr) of partition 0 in Metadata, or None."""
    try:
        t = admin.list_topics(topic, timeout=2).topics.get(topic)
    except Exception:
        return None
    if t is None or t.error is not None or 0 not in t.partitions or t.partitions[0].error is not None:
        return None
    p = t.partitions[0]
    return list(p.replicas), p.leader, sorted(p.isrs)


def _hosts(broker: BrokerProcess, topic: str) -> bool:
    """Whether ``broker`` has a log directory of ``topic``'s partition 0."""
    return any(d.is_dir() for d in broker.data_dir.rglob(f"{topic}-0"))


class _SteadyProducer:
    """Produces with acks=all from a thread until stopped; keeps what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked: set[bytes] = set()
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 30000,
                "linger.ms": 5,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.add(msg.value())
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self._producer.produce(self._topic, b"m%d" % i, on_delivery=self._on_delivery)
            i += 1
            self._producer.poll(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self._producer.flush(40) == 0


def _controller(admin: AdminClient) -> int:
    return int(wait_for("a controller", lambda: (c := admin.list_topics(timeout=2).controller_id) >= 0 and c + 1) - 1)


def run_reassignment(tmp_path: Path, metadata: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    with three_brokers(tmp_path, metadata) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_for("three live brokers", lambda: all_brokers_seen(brokers))
        first = _controller(admin)
        b, c = (i for i in sorted(brokers) if i != first)
        moved = unique_topic("move")
        admin.create_topics(
            [NewTopic(moved, num_partitions=1, replica_assignment=[[first, b]], config={"min.insync.replicas": "2"})]
        )[moved].result(15)
        wait_for("a full ISR", lambda: (s := _replicas(admin, moved)) and s[2] == sorted([first, b]))
        client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
        try:
            # -- act 1: the move, producing all along ----------------------------------------
            producer = _SteadyProducer(bootstrap, moved)
            wait_for("records acknowledged", lambda: len(producer.acked) > 200)
            tp = KTopicPartition(moved, 0)
            assert client.alter_partition_reassignments({tp: [b, c]}) == {tp: None}
            wait_for("the reassignment to complete", lambda: client.list_partition_reassignments() == {}, 30)
            wait_for("more records acknowledged after it", lambda: len(producer.acked) > 2000, 30)
            producer.stop()
            replicas, leader, isr = wait_for(
                "Metadata naming [b, c]", lambda: (s := _replicas(admin, moved)) and s[2] == sorted([b, c]) and s
            )
            assert replicas == [b, c] and leader in (b, c), (replicas, leader, isr)
            wait_for("the removed broker to delete its log", lambda: not _hosts(brokers[first], moved))
            assert _hosts(brokers[b], moved) and _hosts(brokers[c], moved)
            got = consume_all(",".join(brokers[i].bootstrap for i in (b, c)), moved, len(producer.acked))
            assert producer.acked <= set(got), f"lost {len(producer.acked - set(got))} acknowledged records"
            assert len(got) == len(set(got)), "duplicates with an idempotent producer"
            ends = {
                i: sample(brokers[i].metrics(), "kafka_log_log_logendoffset", topic=moved, partition="0")
                for i in (b, c)
            }
            assert ends[b] == ends[c] >= len(producer.acked), ends

            # -- act 2: pending reassignments survive the controller, one cancelled ------------
            kept, cancelled = unique_topic("kept"), unique_topic("cancelled")
            for name in (kept, cancelled):
                admin.create_topics([NewTopic(name, num_partitions=1, replica_assignment=[[first, b]])])[name].result(
                    15
                )
                wait_for("a full ISR", lambda: (s := _replicas(admin, name)) and len(s[2]) == 2)  # noqa: B023
            process = brokers[c].process
            assert process is not None
            process.send_signal(signal.SIGSTOP)  # registered until its session expires
            try:
                kept_tp, cancelled_tp = KTopicPartition(kept, 0), KTopicPartition(cancelled, 0)
                started = client.alter_partition_reassignments({kept_tp: [first, b, c], cancelled_tp: [first, b, c]})
                assert started == {kept_tp: None, cancelled_tp: None}
                pending = {
                    kept_tp: {"replicas": [first, b, c], "adding_replicas": [c], "removing_replicas": []},
                    cancelled_tp: {"replicas": [first, b, c], "adding_replicas": [c], "removing_replicas": []},
                }
                assert client.list_partition_reassignments() == pending
                running = ",".join(brokers[i].bootstrap for i in (first, b))
                assert main(["partitions", "reassignments", "--bootstrap-server", running, "--topic", kept]) == 0
                listed = capsys.readouterr().out
                assert f"{kept}-0: replicas: {first},{b},{c}. adding: {c}. removing: ." in listed, listed
                brokers[first].kill()  # the controller
                survivor = AdminClient({"bootstrap.servers": brokers[b].bootstrap})
                wait_for("broker b to be the controller", lambda: survivor.list_topics(timeout=2).controller_id == b)
                # the paused broker's session expires too: a client that picked it for its
                # metadata would wait out its request timeout
                wait_for("broker b alone registered", lambda: list(survivor.list_topics(timeout=2).brokers) == [b])
                new_client = KafkaAdminClient(bootstrap_servers=brokers[b].bootstrap, request_timeout_ms=15000)
                try:
                    assert new_client.list_partition_reassignments() == pending
                    assert new_client.alter_partition_reassignments({cancelled_tp: None}) == {cancelled_tp: None}
                    assert new_client.list_partition_reassignments() == {kept_tp: pending[kept_tp]}
                    assert wait_for("the original replicas back", lambda: _replicas(survivor, cancelled))[0] == [
                        first,
                        b,
                    ]
                finally:
                    new_client.close()
            finally:
                process.send_signal(signal.SIGCONT)
            brokers[first].start()
            wait_for("three live brokers again", lambda: all_brokers_seen(brokers), 40)
            wait_for(
                "the kept reassignment to complete under the new controller",
                lambda: (s := _replicas(admin, kept)) and s[0] == [first, b, c] and len(s[2]) == 3,
                40,
            )
            wait_for("no reassignment left", lambda: client.list_partition_reassignments() == {})
            after = _replicas(admin, cancelled)
            assert after is not None and after[0] == [first, b], after
            assert not _hosts(brokers[c], cancelled)
        finally:
            client.close()
        for broker in brokers.values():
            assert not broker.log_problems(), broker.log_problems()


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_reassignment(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    run_reassignment(tmp_path, metadata_settings(kind, request, "reassign"), capsys)
