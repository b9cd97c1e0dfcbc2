"""DescribeGroups and the admin clients' group descriptions against both kinds of group, as
Kafka 4.x answers them: a classic group is described with its members; a KIP-848 consumer group,
also one with classic members (a mixed group), is no classic group, so DescribeGroups v6
(KIP-1043) answers GROUP_ID_NOT_FOUND "Group X is not a classic group." and v0-v5 answer "Dead"
without error or members, while ConsumerGroupDescribe describes it. confluent-kafka's
``describe_consumer_groups`` (ConsumerGroupDescribe, falling back to DescribeGroups) describes
all three; kafka-python's ``describe_groups`` (DescribeGroups only) describes the classic one
and reports the error for the others; ``odradek groups describe`` shows every member."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, ConsumerGroupType
from confluent_kafka.admin import AdminClient
from group_client_helpers import GROUP_BROKER_SETTINGS, TIMEOUT_S, create_topic, wait_for
from kafka import KafkaAdminClient
from sasl_helpers import WireClient

from odradek.cli import main
from odradek.errors import ErrorCode
from odradek.protocol import ApiKey
from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Groups:
    """Three live groups on one topic of two partitions: ``classic`` (one classic member),
    ``consumer`` (one KIP-848 member) and ``mixed`` (one of each)."""

    topic: str
    classic: str
    consumer: str
    mixed: str


def _consumer(broker: BrokerProcess, group: str, protocol: str) -> Consumer:
    settings = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if protocol == "classic":
        settings |= {"session.timeout.ms": 6000, "partition.assignment.strategy": "range"}
    return Consumer(settings)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    settings = {**GROUP_BROKER_SETTINGS, "group.consumer.heartbeat.interval.ms": 500}
    with start_broker(tmp_path_factory.mktemp("describe-kinds"), settings) as running:
        yield running
        assert not running.log_problems(), "\n".join(running.log_problems())


@pytest.fixture(scope="module")
def groups(broker: BrokerProcess) -> Iterator[Groups]:
    topic = unique_topic("describe-kinds")
    create_topic(broker, topic, 2)
    names = Groups(topic, unique_topic("dk-classic"), unique_topic("dk-consumer"), unique_topic("dk-mixed"))
    members = {
        "classic": [_consumer(broker, names.classic, "classic")],
        "consumer": [_consumer(broker, names.consumer, "consumer")],
        # the KIP-848 member first, so the group is a consumer group the classic member joins
        "mixed": [_consumer(broker, names.mixed, "consumer"), _consumer(broker, names.mixed, "classic")],
    }
    everyone = [c for cs in members.values() for c in cs]
    for c in everyone:
        c.subscribe([topic])
    try:

        def assigned() -> bool:
            for c in everyone:
                c.poll(0.05)
            return all(sum(len(c.assignment()) for c in cs) == 2 for cs in members.values()) and all(
                len(c.assignment()) == 1 for c in members["mixed"]
            )

        wait_for(assigned, "every group's partitions assigned")
        # the classic group settles at its first rebalance; keep the members alive meanwhile
        yield names
    finally:
        for c in everyone:
            c.close()


def _describe_raw(broker: BrokerProcess, version: int, *group_ids: str) -> list[tuple[int, str | None, str, int]]:
    host, port = broker.bootstrap.split(":")
    client = WireClient(host, int(port))
    try:
        extra = {"include_authorized_operations": False} if version >= 3 else {}
        response = client.request(ApiKey.DESCRIBE_GROUPS, version, groups=group_ids, **extra)
    finally:
        client.close()
    return [
        (int(g.error_code), getattr(g, "error_message", None), g.group_state, len(g.members)) for g in response.groups
    ]


def test_describe_groups_v6_and_v5_on_each_kind(broker: BrokerProcess, groups: Groups) -> None:
    """v6: the consumer and mixed groups and an unknown id are GROUP_ID_NOT_FOUND with Kafka's
    messages; v5 and v0: "Dead" without error or members; the classic group is Stable with its
    member at every version."""
    absent = unique_topic("dk-absent")
    asked = (groups.classic, groups.consumer, groups.mixed, absent)
    not_found = ErrorCode.GROUP_ID_NOT_FOUND.value
    assert _describe_raw(broker, 6, *asked) == [
        (0, None, "Stable", 1),
        (not_found, f"Group {groups.consumer} is not a classic group.", "Dead", 0),
        (not_found, f"Group {groups.mixed} is not a classic group.", "Dead", 0),
        (not_found, f"Group {absent} not found.", "Dead", 0),
    ]
    for version in (5, 0):
        assert _describe_raw(broker, version, *asked) == [
            (0, None, "Stable", 1),
            (0, None, "Dead", 0),
            (0, None, "Dead", 0),
            (0, None, "Dead", 0),
        ]


def test_confluent_kafka_describes_every_kind(broker: BrokerProcess, groups: Groups) -> None:
    """librdkafka asks ConsumerGroupDescribe and falls back to DescribeGroups for a classic group."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    asked = [groups.classic, groups.consumer, groups.mixed]
    described = {g: f.result(TIMEOUT_S) for g, f in admin.describe_consumer_groups(asked).items()}
    classic, consumer, mixed = (described[g] for g in asked)
    assert (classic.type, classic.state.name, classic.partition_assignor) == (
        ConsumerGroupType.CLASSIC,
        "STABLE",
        "range",
    )
    assert (consumer.type, consumer.state.name, len(consumer.members)) == (ConsumerGroupType.CONSUMER, "STABLE", 1)
    assert (mixed.type, len(mixed.members)) == (ConsumerGroupType.CONSUMER, 2)
    for description in (classic, consumer, mixed):
        owned = sorted(tp.partition for m in description.members for tp in m.assignment.topic_partitions)
        assert owned == [0, 1], description


def test_kafka_python_describes_the_classic_group_and_reports_the_others(broker: BrokerProcess, groups: Groups) -> None:
    """kafka-python 3 asks DescribeGroups v6 only: the classic group with its decoded member
    assignment, the others with Kafka's GROUP_ID_NOT_FOUND message."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(TIMEOUT_S * 1000))
    try:
        described = admin.describe_groups([groups.classic, groups.consumer, groups.mixed])
    finally:
        admin.close()
    classic = described[groups.classic]
    assert (classic["error"], classic["group_state"], classic["protocol_type"]) == (None, "Stable", "consumer")
    [member] = classic["members"]
    assigned = member["member_assignment"]["assigned_partitions"]
    assert [(t["topic"], sorted(t["partitions"])) for t in assigned] == [(groups.topic, [0, 1])]
    for group_id in (groups.consumer, groups.mixed):
        error = described[group_id]["error"]
        assert error is not None and "GroupIdNotFound" in error and "is not a classic group" in error, error
        assert described[group_id]["members"] == []


def test_odradek_groups_describe_shows_a_mixed_group(
    broker: BrokerProcess, groups: Groups, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI describes a mixed group as a consumer group with both members, their epochs and
    the protocol each speaks."""
    assert main(["groups", "describe", groups.mixed, "--bootstrap-server", broker.bootstrap]) == 0
    out = capsys.readouterr().out
    assert f"GROUP {groups.mixed}  TYPE consumer  STATE Stable" in out and "MEMBERS 2" in out
    table = out[out.index("EPOCH  ASSIGNMENT") :].splitlines()[1:]
    rows = [line.split() for line in table if line.strip()]
    assert len(rows) == 2
    assert sorted(row[-2] for row in rows) == [f"{groups.topic}:0", f"{groups.topic}:1"]
    assert sorted(row[-1] for row in rows) == ["classic", "consumer"]
