"""Tiered storage across a leadership change: two brokers on ZooKeeper or etcd share the directory
remote storage; the leader is killed (SIGKILL) while it copies, the new leader continues from
the remote metadata without a gap or a segment published twice, the restarted broker follows
from the new leader's local log (OFFSET_MOVED_TO_TIERED_STORAGE) instead of copying remote
data, and after leading again it still serves every record from offset 0.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from test_replication_cluster import consume_all, metadata_settings, partition_state, wait_for

from odradek.testing.broker import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def two_tiered_brokers(tmp_path: Path, metadata: dict[str, str]) -> Iterator[dict[int, BrokerProcess]]:
    settings = {
        **metadata,
        "zookeeper.session.timeout.ms": 2000,
        "etcd.lease.ttl.ms": 2000,
        "replica.lag.time.max.ms": 3000,
        "replica.fetch.wait.max.ms": 200,
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.dir": str(tmp_path / "remote"),
        "remote.log.manager.task.interval.ms": 100,
        "log.retention.check.interval.ms": 100,
    }
    with contextlib.ExitStack() as stack:
        yield {i: stack.enter_context(start_broker(tmp_path / f"b{i}", {**settings, "broker.id": i})) for i in (1, 2)}


def finished_segments(tmp_path: Path, topic: str) -> list[dict[str, Any]]:
    records = [json.loads(p.read_bytes()) for p in (tmp_path / "remote" / f"{topic}-0" / "metadata").glob("*.json")]
    return sorted((r for r in records if r["state"] == "COPY_SEGMENT_FINISHED"), key=lambda r: r["start_offset"])


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    """Produce with acks=all in small batches (the segments are small); the acknowledged values."""
    acked: list[bytes] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "batch.size": 2048,
         "linger.ms": 5, "message.timeout.ms": 20000, "topic.metadata.refresh.interval.ms": 1000}
    )  # fmt: skip
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
        producer.poll(0)
    assert producer.flush(30) == 0
    return acked


def local_start(broker: BrokerProcess, topic: str) -> int:
    names = sorted(p.name for p in (broker.data_dir / f"{topic}-0").glob("*.log"))
    return int(names[0].split(".")[0]) if names else -1


@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_a_new_leader_continues_tiering_and_a_returning_broker_follows(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    with two_tiered_brokers(tmp_path, metadata_settings(kind, request, "tiered")) as brokers:
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_for("two live brokers", lambda: len(admin.list_topics(timeout=2).brokers) == 2)
        topic = unique_topic("tiered")
        config = {
            "remote.storage.enable": "true",
            "segment.bytes": "8192",
            "local.retention.bytes": "0",
            "min.insync.replicas": "1",
        }
        admin.create_topics([NewTopic(topic, 1, 2, config=config)])[topic].result(15)
        leader, _ = wait_for("a full ISR", lambda: (s := partition_state(admin, topic)) and len(s[1]) == 2 and s)
        first = [b"first-%04d-" % i + b"x" * 40 for i in range(300)]
        assert produce(bootstrap, topic, first) == first
        wait_for("a tiered first segment on the leader", lambda: local_start(brokers[leader], topic) > 0)
        brokers[leader].kill()  # its copying task dies wherever it was

        other = 3 - leader
        survivor = brokers[other].bootstrap
        admin2 = AdminClient({"bootstrap.servers": survivor})
        wait_for("the other broker leading", lambda: (s := partition_state(admin2, topic)) and s[0] == other)
        second = [b"second-%04d-" % i + b"x" * 40 for i in range(300)]
        assert produce(survivor, topic, second) == second
        wait_for("the new leader tiering", lambda: local_start(brokers[other], topic) > 300)
        segments = finished_segments(tmp_path, topic)
        assert segments[0]["start_offset"] == 0
        for before, after in itertools.pairwise(segments):
            assert after["start_offset"] <= before["end_offset"] + 1, "a gap in remote storage"
            assert after["start_offset"] > before["start_offset"], "a segment published twice"
        assert consume_all(survivor, topic, 600) == first + second

        brokers[leader].start()  # its log ends before the new leader's local log start
        wait_for(
            "the returning broker back in the ISR",
            lambda: (s := partition_state(admin2, topic)) and len(s[1]) == 2,
            timeout_s=25,
        )
        assert "remote storage only: restarting the log" in brokers[leader].log_path.read_text()
        brokers[other].kill()
        wait_for("the returning broker leading", lambda: (s := partition_state(admin, topic)) and s[0] == leader)
        assert consume_all(brokers[leader].bootstrap, topic, 600) == first + second
        problems = [line for b in brokers.values() for line in b.log_problems()]
        assert problems == [], problems
