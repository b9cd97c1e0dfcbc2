"""KIP-848 consumer groups with real clients: confluent-kafka (librdkafka 2.16) consumers with
``group.protocol=consumer`` against an ``odradek serve`` subprocess.

The librdkafka members run as subprocesses (tests/group_consumer_proc.py) printing every
assignment, revocation, message and commit with a wall-clock time; :class:`Group` checks over the
merged timeline that no partition is owned by two consumers at once, nothing produced is lost,
and a message comes back only if its offset was never committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from group_client_helpers import (
    GROUP_BROKER_SETTINGS,
    TIMEOUT_S,
    Group,
    Produced,
    check_static_restart,
    create_topic,
    wait_for,
)

from odradek.cli import main
from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration

#: fast heartbeats, and a session short enough that a killed member's partitions move in seconds
KIP848_BROKER_SETTINGS = {
    **GROUP_BROKER_SETTINGS,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.session.timeout.ms": 6000,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with start_broker(tmp_path_factory.mktemp("kip848-broker"), KIP848_BROKER_SETTINGS) as running:
        yield running
        assert not running.log_problems(), "\n".join(running.log_problems())


def consumer(broker: BrokerProcess, group: str, **extra: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **extra,
        }
    )


def describe(broker: BrokerProcess, group: str) -> object:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_join_leave_and_crash_without_double_consumption(broker: BrokerProcess, assignor: str) -> None:
    """Two members share six partitions, a third joins, one leaves, one is killed: partitions
    move only after their owner gave them up, and only what was never committed comes back."""
    topic = unique_topic("kip848")
    create_topic(broker, topic, 6)
    produced = Produced(broker, topic, 6)
    produced.batch(10)
    group = Group(broker, topic, 6, assignor)
    try:
        a, b = group.add("a", protocol="consumer"), group.add("b", protocol="consumer")
        group.settle_and_drain(produced, "two members")
        group.add("c", protocol="consumer")
        group.settle_and_drain(produced, "a third joined")
        description = describe(broker, group.group)
        assert description.type == ConsumerGroupType.CONSUMER
        assert description.partition_assignor == assignor
        assert len(description.members) == 3
        a.stop()  # leaves: a heartbeat with epoch -1
        group.settle_and_drain(produced, "after a left")
        b.kill()  # crashes: fenced after group.consumer.session.timeout.ms
        group.settle_and_drain(produced, "after b was killed")
    finally:
        group.close()
    redelivered = group.check(produced)
    assert sum(redelivered.values()) <= 6, redelivered  # only b's last uncommitted messages


def poll_into(c: Consumer, seen: list[tuple[int, int]]) -> None:
    """One poll; a record's (partition, offset) is appended to ``seen``."""
    msg = c.poll(0.2)
    if msg is not None and msg.error() is None:
        seen.append((msg.partition(), msg.offset()))


def test_offsets_are_committed_and_resumed(broker: BrokerProcess) -> None:
    """Commits carry the member epoch (OffsetCommit v9); a later member resumes after them, and
    the group is listed as a consumer group."""
    topic = unique_topic("kip848-resume")
    create_topic(broker, topic, 2)
    produced = Produced(broker, topic, 2)
    produced.batch(5)
    group_id = unique_topic("kip848-g")
    first = consumer(broker, group_id)
    first.subscribe([topic])
    try:
        before: list[tuple[int, int]] = []
        wait_for(lambda: poll_into(first, before) or len(before) >= 10, "the first member's records")
        first.commit(asynchronous=False)
    finally:
        first.close()
    produced.batch(3)
    second = consumer(broker, group_id)
    second.subscribe([topic])
    try:
        after: list[tuple[int, int]] = []
        wait_for(lambda: poll_into(second, after) or len(after) >= 6, "the records produced after the commit")
        assert sorted(after) == [(p, o) for p in range(2) for o in range(5, 8)], "committed records came back"
        second.commit(asynchronous=False)
        committed = second.committed([TopicPartition(topic, p) for p in range(2)], timeout=TIMEOUT_S)
        assert [c.offset for c in committed] == [8, 8]
    finally:
        second.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(TIMEOUT_S)
    assert {g.group_id: g.type for g in listed.valid}.get(group_id) == ConsumerGroupType.CONSUMER


def test_classic_members_in_a_consumer_group(broker: BrokerProcess) -> None:
    """A classic member joins a KIP-848 group with members (KIP-848's mixed group): it gets its
    share from the target assignment and ConsumerGroupDescribe types it classic; a classic member
    whose protocols the other classic members do not support is refused with
    INCONSISTENT_GROUP_PROTOCOL, as Kafka refuses it."""
    topic = unique_topic("kip848-mix")
    create_topic(broker, topic, 2)
    group_id = unique_topic("kip848-mix-g")
    modern = consumer(broker, group_id)
    modern.subscribe([topic])
    settings = {"bootstrap.servers": broker.bootstrap, "group.id": group_id, "session.timeout.ms": 6000}
    classic = Consumer({**settings, "partition.assignment.strategy": "range"})
    odd = Consumer({**settings, "partition.assignment.strategy": "roundrobin"})
    try:
        wait_for(lambda: modern.poll(0.1) is None and len(modern.assignment()) == 2, "the KIP-848 member's assignment")
        classic.subscribe([topic])

        def shared() -> bool:
            classic.poll(0.1)
            modern.poll(0.1)
            return len(classic.assignment()) == 1 and len(modern.assignment()) == 1

        wait_for(shared, "the partitions shared by the KIP-848 and the classic member")
        description = describe(broker, group_id)
        assert description.type == ConsumerGroupType.CONSUMER and len(description.members) == 2
        errors: list[KafkaError] = []
        odd.subscribe([topic])

        def refused() -> bool:
            try:
                msg = odd.poll(0.2)
            except KafkaException as exc:
                errors.append(exc.args[0])
            else:
                if msg is not None and msg.error() is not None:
                    errors.append(msg.error())
            classic.poll(0.01)
            modern.poll(0.01)
            return any(e.code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL for e in errors)

        wait_for(refused, "the classic member with another protocol to be refused")
    finally:
        odd.close()
        classic.close()
        modern.close()


def test_broker_restart_keeps_the_group_and_its_offsets(tmp_path: Path) -> None:
    """The group's records in __consumer_offsets survive a broker restart: the members carry on
    (at their epochs, or rejoining when fenced), and nothing committed is consumed again."""
    with start_broker(tmp_path / "restart", KIP848_BROKER_SETTINGS) as restarting:
        topic = unique_topic("kip848-restart")
        create_topic(restarting, topic, 4)
        produced = Produced(restarting, topic, 4)
        produced.batch(5)
        group = Group(restarting, topic, 4, "uniform")
        try:
            group.add("m1", protocol="consumer")
            group.add("m2", protocol="consumer")
            group.settle_and_drain(produced, "before the restart")
            restarting.restart()
            produced.producer = Producer({"bootstrap.servers": restarting.bootstrap, "linger.ms": 2})
            produced.batch(5)
            wait_for(lambda: group.consumed(produced), "records consumed after the broker restart")
            wait_for(group.settled, "the group to settle after the restart")
            assert all(m.alive for m in group.members)
            description = describe(restarting, group.group)
            assert description.type == ConsumerGroupType.CONSUMER and len(description.members) == 2
        finally:
            group.close()
        redelivered = group.check(produced)
        assert redelivered == {}, f"committed records were consumed again: {redelivered}"
        assert not restarting.log_problems(), "\n".join(restarting.log_problems())


def test_odradek_groups_shows_a_consumer_group(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    """``odradek groups list`` types the group ``consumer``; ``describe`` shows its assignor,
    epochs, and each member's epoch with its assignment and target."""
    topic = unique_topic("kip848-cli")
    create_topic(broker, topic, 3)
    group_id = unique_topic("kip848-cli-g")
    member = consumer(broker, group_id, **{"group.remote.assignor": "range"})
    member.subscribe([topic])
    try:
        wait_for(lambda: member.poll(0.1) is None and len(member.assignment()) == 3, "the member's assignment")
        boot = ["--bootstrap-server", broker.bootstrap]
        assert main(["groups", "list", *boot]) == 0
        listed = capsys.readouterr().out
        assert any(line.split()[0] == group_id and line.split()[-1] == "consumer" for line in listed.splitlines())
        assert main(["groups", "describe", group_id, *boot]) == 0
        described = capsys.readouterr().out
        assert f"GROUP {group_id}  TYPE consumer  STATE Stable  ASSIGNOR range" in described
        members = described[described.index("EPOCH  ASSIGNMENT") :].splitlines()[1:]
        assert [line.split()[1:] for line in members if line.strip()] == [
            ["1", f"{topic}:0,1,2", f"{topic}:0,1,2", "consumer"]
        ]
    finally:
        member.close()


def test_regex_subscription_picks_up_new_topics(broker: BrokerProcess) -> None:
    """librdkafka sends a ``^...`` subscription as the heartbeat's regex: the broker assigns
    every matching topic, and a matching topic created later joins the assignment."""
    prefix = unique_topic("kip848rx")
    first, later, other = f"{prefix}-a", f"{prefix}-b", unique_topic("kip848other")
    create_topic(broker, first, 2)
    create_topic(broker, other, 1)
    member = consumer(broker, unique_topic("kip848-rx-g"))
    member.subscribe([f"^{prefix}-.*"])
    try:

        def assigned() -> set[tuple[str, int]]:
            member.poll(0.1)
            return {(tp.topic, tp.partition) for tp in member.assignment()}

        wait_for(lambda: assigned() == {(first, 0), (first, 1)}, "the matching topic's partitions")
        create_topic(broker, later, 1)
        wait_for(lambda: assigned() == {(first, 0), (first, 1), (later, 0)}, "the topic created later")
    finally:
        member.close()


def test_static_member_restart_gets_its_partitions_back(broker: BrokerProcess) -> None:
    """A static member (group.instance.id) that closes leaves with epoch -2: its partitions wait
    for it, and the instance restarted under a new member id takes them back while the other
    member sees no rebalance."""
    topic = unique_topic("kip848-static")
    create_topic(broker, topic, 4)
    produced = Produced(broker, topic, 4)
    group = Group(broker, topic, 4, "uniform")
    try:
        check_static_restart(group, produced, kill=False, protocol="consumer")
    finally:
        group.close()
    group.check(produced)


@pytest.mark.parametrize("classic_strategy", ["range", "cooperative-sticky"])
def test_rolling_upgrade_from_classic_to_consumer(broker: BrokerProcess, classic_strategy: str) -> None:
    """KIP-848's upgrade path with confluent-kafka: three ``group.protocol=classic`` members
    (eager range, or cooperative-sticky, which reports what it owns and revokes incrementally)
    are replaced one at a time by ``group.protocol=consumer`` ones, consuming throughout. The
    first consumer member turns the classic group into a consumer group (online upgrade), the
    classic members carry on in it with JoinGroup/SyncGroup/Heartbeat until they are gone; no
    partition is owned twice and nothing committed is consumed again."""
    topic = unique_topic("kip848-roll")
    create_topic(broker, topic, 6)
    produced = Produced(broker, topic, 6)
    produced.batch(10)
    group = Group(broker, topic, 6, "range")
    try:
        classic = [group.add(name, strategy=classic_strategy) for name in ("a", "b", "c")]
        group.settle_and_drain(produced, "three classic members")
        for n, old in enumerate(classic):
            old.stop()
            group.add(f"{old.name}2", protocol="consumer")
            group.settle_and_drain(produced, f"{n + 1} of 3 members on the consumer protocol")
            if n == 0:
                description = describe(broker, group.group)
                assert description.type == ConsumerGroupType.CONSUMER  # upgraded online
                assert len(description.members) == 3
    finally:
        group.close()
    group.check(produced)  # owned once at a time, nothing lost, nothing committed consumed again


def test_rolling_downgrade_from_consumer_to_classic(broker: BrokerProcess) -> None:
    """And back: ``group.protocol=consumer`` members replaced one at a time by classic ones
    (cooperative-sticky, so they report what they own): the classic members join the consumer
    group, and when the last consumer-protocol member leaves the group turns classic (online
    downgrade) and rebalances as one; the same invariants hold throughout."""
    topic = unique_topic("kip848-back")
    create_topic(broker, topic, 6)
    produced = Produced(broker, topic, 6)
    produced.batch(10)
    group = Group(broker, topic, 6, "range")
    try:
        members = [group.add(name, protocol="consumer") for name in ("a", "b")]
        group.settle_and_drain(produced, "two consumer-protocol members")
        for n, old in enumerate(members):
            old.stop()
            group.add(f"{old.name}2", strategy="cooperative-sticky")
            group.settle_and_drain(produced, f"{n + 1} of 2 members on the classic protocol")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        listed = admin.list_consumer_groups().result(TIMEOUT_S)
        types = {g.group_id: g.type for g in listed.valid}
        assert types[group.group] == ConsumerGroupType.CLASSIC  # downgraded online
    finally:
        group.close()
    group.check(produced)
