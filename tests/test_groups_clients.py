"""Consumer groups with real clients against an ``odradek serve`` subprocess.

librdkafka consumers run as subprocesses (tests/group_consumer_proc.py) printing every assignment,
revocation, message and commit with a wall-clock time, so the test can check, over the merged
timeline: no partition is ever owned by two consumers at once, every partition has an owner once
the group settles, nothing produced is lost, and a message is redelivered only if its offset was
never committed before (at-least-once, redelivery bounded by what was uncommitted).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from group_client_helpers import (
    GROUP_BROKER_SETTINGS,
    TIMEOUT_S,
    AioKafkaMember,
    Group,
    KafkaPythonMember,
    Produced,
    check_static_restart,
    create_topic,
    wait_for,
)

from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("groups-broker"), GROUP_BROKER_SETTINGS) as broker:
        yield broker
        assert not broker.log_problems(), "\n".join(broker.log_problems())


def committed_offsets(broker: BrokerProcess, group: str, topic: str, partitions: int) -> list[int]:
    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        found = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT_S)
    finally:
        probe.close()
    return [c.offset for c in found]


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_consumers_leave_join_and_crash(group_broker: BrokerProcess, strategy: str) -> None:
    topic = unique_topic("grp6")
    create_topic(group_broker, topic, 6)
    produced = Produced(group_broker, topic, 6)
    produced.batch(10)
    group = Group(group_broker, topic, 6, strategy)
    try:
        a, b, _c = group.add("a"), group.add("b"), group.add("c")
        group.settle_and_drain(produced, "three members")
        a.stop()  # leaves: LeaveGroup
        group.settle_and_drain(produced, "after a left")
        group.add("d")
        group.settle_and_drain(produced, "after d joined")
        b.kill()  # crashes: its partitions move after the session timeout
        group.settle_and_drain(produced, "after b was killed")
    finally:
        group.close()
    redelivered = group.check(produced)
    # only b's last in-flight messages (processed, not yet committed) may come back
    assert sum(redelivered.values()) <= 6, redelivered


def test_static_member_restart_gets_its_partitions_back_without_rebalance(group_broker: BrokerProcess) -> None:
    topic = unique_topic("static")
    create_topic(group_broker, topic, 4)
    produced = Produced(group_broker, topic, 4)
    group = Group(group_broker, topic, 4, "range")
    try:
        check_static_restart(group, produced, kill=True, session_ms="20000")
    finally:
        group.close()
    group.check(produced)


def test_broker_restart_keeps_offsets_and_group(tmp_path: Path) -> None:
    with start_broker(tmp_path / "restart", GROUP_BROKER_SETTINGS) as broker:
        topic = unique_topic("restart")
        create_topic(broker, topic, 2)
        produced = Produced(broker, topic, 2)
        produced.batch(5)
        group = Group(broker, topic, 2, "range")
        try:
            member = group.add("m", session_ms="10000")
            group.settle_and_drain(produced, "before the restart")
            broker.restart()
            produced.producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})
            produced.batch(5)
            wait_for(lambda: group.consumed(produced), "records consumed after the broker restart")
            assert member.alive
        finally:
            group.close()
        redelivered = group.check(produced)
        assert redelivered == {}, f"committed records were consumed again: {redelivered}"
        # a new consumer of the group starts where the group committed
        assert committed_offsets(broker, group.group, topic, 2) == produced.counts
        assert not broker.log_problems(), "\n".join(broker.log_problems())


def test_kafka_python_group(group_broker: BrokerProcess) -> None:
    topic = unique_topic("kpg")
    create_topic(group_broker, topic, 4)
    produced = Produced(group_broker, topic, 4)
    produced.batch(10)
    group = Group(group_broker, topic, 4, "range")
    try:
        for name in ("kp-1", "kp-2"):
            group.add_member(KafkaPythonMember(name, group_broker, group.group, topic, "range"))
        group.settle_and_drain(produced, "two kafka-python members")
    finally:
        group.close()
    group.check(produced)
    assert committed_offsets(group_broker, group.group, topic, 4) == produced.counts


def test_kafka_python_admin_fetches_offsets_of_several_groups_in_one_request(group_broker: BrokerProcess) -> None:
    """kafka-python's admin list_group_offsets against a broker advertising FindCoordinator v4
    and OffsetFetch v8 looks up every group's coordinator in one request (KIP-699) and asks for
    all their offsets in one request per coordinator (KIP-709): each group gets its own answer,
    an unknown group none."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.protocol.api_key import ApiKey as KafkaApiKey

    topic = unique_topic("kpadm")
    create_topic(group_broker, topic, 2)
    groups = {unique_topic("kpadm-a"): [(0, 5), (1, 7)], unique_topic("kpadm-b"): [(1, 2)]}
    for group_id, offsets in groups.items():
        committer = Consumer({"bootstrap.servers": group_broker.bootstrap, "group.id": group_id})
        try:
            committer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets], asynchronous=False)
        finally:
            committer.close()
    admin = KafkaAdminClient(bootstrap_servers=group_broker.bootstrap)
    try:
        versions = admin.api_versions()
        assert versions[KafkaApiKey.FindCoordinator][1] >= 4 and versions[KafkaApiKey.OffsetFetch][1] >= 8
        unknown = unique_topic("kpadm-none")
        listed = admin.list_group_offsets({**dict.fromkeys(groups), unknown: None})
    finally:
        admin.close()
    assert {g: sorted((tp.partition, om.offset) for tp, om in found.items()) for g, found in listed.items()} == {
        **{g: sorted(o) for g, o in groups.items()},
        unknown: [],
    }
    assert all(isinstance(tp, KafkaTopicPartition) and tp.topic == topic for found in listed.values() for tp in found)


def test_list_groups_reports_and_filters_the_classic_type(group_broker: BrokerProcess) -> None:
    """ListGroups v5 (KIP-848, Kafka 3.8+): each group is typed ``classic`` and a types filter
    keeps only the types it names, case-insensitively. With v4 the filter never reached the
    broker: confluent-kafka listed classic groups for ``types={CONSUMER}`` (typed UNKNOWN), and
    kafka-python refused ``types_filter`` as unsupported by the broker."""
    from confluent_kafka import ConsumerGroupType
    from kafka import KafkaAdminClient

    topic = unique_topic("gtype")
    create_topic(group_broker, topic, 1)
    group_id = unique_topic("gtype-g")
    committer = Consumer({"bootstrap.servers": group_broker.bootstrap, "group.id": group_id})
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        committer.close()
    admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})

    def confluent_listed(types: set[Any]) -> dict[str, Any]:
        result = admin.list_consumer_groups(types=types).result(TIMEOUT_S)
        assert not result.errors
        return {g.group_id: g.type for g in result.valid}

    assert confluent_listed({ConsumerGroupType.CLASSIC})[group_id] == ConsumerGroupType.CLASSIC
    assert group_id not in confluent_listed({ConsumerGroupType.CONSUMER})
    kafka_python = KafkaAdminClient(bootstrap_servers=group_broker.bootstrap)
    try:
        classic = kafka_python.list_groups(types_filter=["Classic"])
        consumer = kafka_python.list_groups(types_filter=["consumer"])
    finally:
        kafka_python.close()
    assert [g["group_type"] for g in classic if g["group_id"] == group_id] == ["classic"]
    assert group_id not in {g["group_id"] for g in consumer}


def test_aiokafka_group(group_broker: BrokerProcess) -> None:
    topic = unique_topic("aiog")
    create_topic(group_broker, topic, 4)
    produced = Produced(group_broker, topic, 4)
    produced.batch(10)
    group = Group(group_broker, topic, 4, "range")
    try:
        for name in ("aio-1", "aio-2"):
            group.add_member(AioKafkaMember(name, group_broker, group.group, topic))
        group.settle_and_drain(produced, "two aiokafka members")
    finally:
        group.close()
    group.check(produced)
    assert committed_offsets(group_broker, group.group, topic, 4) == produced.counts


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_librdkafka_and_kafka_python_share_a_group(group_broker: BrokerProcess, assignor: str) -> None:
    topic = unique_topic("mixed")
    create_topic(group_broker, topic, 5)
    produced = Produced(group_broker, topic, 5)
    produced.batch(6)
    group = Group(group_broker, topic, 5, assignor)
    try:
        group.add("rdkafka")
        group.add_member(KafkaPythonMember("kafka-python", group_broker, group.group, topic, assignor))
        group.settle_and_drain(produced, f"a mixed {assignor} group")
        assert all(m.owned for m in group.live()), "each client got partitions"
    finally:
        group.close()
    group.check(produced)


def test_kcat_balanced_consumer(group_broker: BrokerProcess) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (Debian package: kcat)"
    topic = unique_topic("kcatg")
    create_topic(group_broker, topic, 3)
    produced = Produced(group_broker, topic, 3)
    produced.batch(7)
    group = unique_topic("kcat-grp")
    result = subprocess.run(
        [kcat, "-b", group_broker.bootstrap, "-G", group, "-X", "auto.offset.reset=earliest",
         "-X", "session.timeout.ms=6000", "-c", "21", "-e", "-f", "%p %o\n", topic],
        capture_output=True, timeout=TIMEOUT_S, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    got = sorted(tuple(map(int, line.split())) for line in result.stdout.splitlines())
    assert got == [(p, o) for p in range(3) for o in range(7)]
    assert committed_offsets(group_broker, group, topic, 3) == produced.counts


class Cli:
    """``odradek groups ...`` run in-process (the same ``main`` the console script runs)."""

    def __init__(self, capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
        self.capsys = capsys
        self.bootstrap = bootstrap

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        from odradek.cli import main

        self.capsys.readouterr()
        code = main(["groups", *args, "--bootstrap-server", self.bootstrap])
        out, err = self.capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)


def test_groups_cli(group_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    topic = unique_topic("cli")
    create_topic(group_broker, topic, 2)
    produced = Produced(group_broker, topic, 2)
    produced.batch(8)
    group = Group(group_broker, topic, 2, "range")
    odradek_cli = Cli(capsys, group_broker.bootstrap)
    try:
        member = group.add("cli-member")
        group.settle_and_drain(produced, "one member")
        listed = odradek_cli("list")
        assert listed.returncode == 0, listed.stderr
        assert any(line.split()[:2] == [group.group, "Stable"] for line in listed.stdout.splitlines())
        described = odradek_cli("describe", group.group)
        assert described.returncode == 0, described.stderr
        assert f"GROUP {group.group}  STATE Stable  PROTOCOL range  MEMBERS 1" in described.stdout
        rows = [line.split() for line in described.stdout.splitlines() if line.startswith(group.group + " ")]
        assert [(r[1], r[2], r[3], r[4], r[5]) for r in rows] == [(topic, str(p), "18", "18", "0") for p in range(2)]
        assert all(r[8] == "proc-dyn" for r in rows)  # the owner's client id
        busy = odradek_cli("reset-offsets", group.group, "--topic", topic, "--to-earliest", "--execute")
        assert busy.returncode == 1 and "inactive" in busy.stderr
        member.stop()
        dry = odradek_cli("reset-offsets", group.group, "--topic", f"{topic}:1", "--shift-by", "-5")
        assert dry.returncode == 0, dry.stderr
        assert [line.split()[1:] for line in dry.stdout.splitlines()[1:2]] == [[topic, "1", "18", "13"]]
        assert "dry run" in dry.stdout
        assert committed_offsets(group_broker, group.group, topic, 2) == [18, 18]
        done = odradek_cli("reset-offsets", group.group, "--all-topics", "--to-earliest", "--execute")
        assert done.returncode == 0, done.stderr
        assert committed_offsets(group_broker, group.group, topic, 2) == [0, 0]
        latest = odradek_cli("reset-offsets", group.group, "--topic", topic, "--to-datetime", "2100-01-01T00:00:00",
                             "--execute")  # fmt: skip
        assert latest.returncode == 0, latest.stderr
        assert committed_offsets(group_broker, group.group, topic, 2) == [18, 18]
        empty = odradek_cli("describe", group.group)
        assert "STATE Empty" in empty.stdout
        deleted = odradek_cli("delete", group.group)
        assert deleted.returncode == 0 and "succeeded" in deleted.stdout, deleted.stdout + deleted.stderr
        gone = odradek_cli("describe", group.group)
        assert gone.returncode == 1 and "does not exist" in gone.stdout
    finally:
        group.close()


def test_delete_offsets_and_a_deleted_topics_offsets(
    group_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """OffsetDelete from kafka-python's admin and from ``odradek groups delete-offsets``; and a
    deleted topic's committed offsets go with it, so the same name created again is read from
    auto.offset.reset, not from the old position (Kafka's coordinator does the same)."""
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KafkaPythonTopicPartition

    kept, dropped = unique_topic("offdel-kept"), unique_topic("offdel-dropped")
    create_topic(group_broker, kept, 2)
    create_topic(group_broker, dropped, 1)
    group = unique_topic("offdel-group")
    committer = Consumer({"bootstrap.servers": group_broker.bootstrap, "group.id": group})
    try:
        offsets = [TopicPartition(kept, 0, 3), TopicPartition(kept, 1, 4), TopicPartition(dropped, 0, 5)]
        committer.commit(offsets=offsets, asynchronous=False)
    finally:
        committer.close()
    assert committed_offsets(group_broker, group, kept, 2) == [3, 4]
    admin = KafkaAdminClient(bootstrap_servers=group_broker.bootstrap)
    try:
        result = admin.delete_group_offsets(group, [KafkaPythonTopicPartition(kept, 1)])
        assert [(tp.topic, tp.partition) for tp, error in result.items() if error.errno == 0] == [(kept, 1)]
    finally:
        admin.close()
    assert committed_offsets(group_broker, group, kept, 2) == [3, -1001]
    odradek_cli = Cli(capsys, group_broker.bootstrap)
    removed = odradek_cli("delete-offsets", group, "--topic", kept)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert [line.split()[:3] for line in removed.stdout.splitlines()[1:]] == [
        [kept, "0", "Successful"],
        [kept, "1", "Successful"],
    ]
    assert committed_offsets(group_broker, group, kept, 2) == [-1001, -1001]
    # the topic goes: its offsets go from the group too, and a new topic of that name starts empty
    topics_admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})  # kept alive until the result
    topics_admin.delete_topics([dropped])[dropped].result(TIMEOUT_S)
    wait_for(lambda: committed_offsets(group_broker, group, dropped, 1) == [-1001], "the deleted topic's offsets to go")
    described = odradek_cli("describe", group)
    assert dropped not in described.stdout
    create_topic(group_broker, dropped, 1)
    assert committed_offsets(group_broker, group, dropped, 1) == [-1001]
    missing = odradek_cli("delete-offsets", "no-such-group-" + group, "--topic", kept)
    assert missing.returncode == 1 and "GROUP_ID_NOT_FOUND" in missing.stderr


def test_groups_hash_over_the_offsets_topics_own_partition_count(tmp_path: Path) -> None:
    """Offsets committed while ``__consumer_offsets`` was created with 3 partitions are found by
    a broker configured for 10: as in Kafka, the existing topic's partition count decides which
    partition holds a group, not ``offsets.topic.num.partitions`` (the group would otherwise
    hash to another partition, or to one that does not exist, and never find its coordinator)."""
    from odradek.broker.group.hashing import partition_for

    group = next(g for g in (f"count-group-{i}" for i in range(100)) if partition_for(g, 3) != partition_for(g, 10))
    workdir = tmp_path / "broker"
    with start_broker(workdir, {**GROUP_BROKER_SETTINGS, "offsets.topic.num.partitions": 3}) as broker:
        topic = unique_topic("count")
        create_topic(broker, topic, 1)
        committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        try:
            committer.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
        finally:
            committer.close()
    with start_broker(workdir, GROUP_BROKER_SETTINGS) as broker:  # offsets.topic.num.partitions=10
        assert committed_offsets(broker, group, topic, 1) == [7]
        assert not broker.log_problems(), broker.log_problems()
