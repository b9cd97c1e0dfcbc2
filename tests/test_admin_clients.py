"""Real clients' admin APIs against an ``odradek serve`` subprocess: aiokafka's
AIOKafkaAdminClient across its surface, and the ACL APIs, which a broker without an authorizer
answers SECURITY_DISABLED (kafka-python, confluent-kafka)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidPartitionsError

from odradek.testing import BrokerProcess, unique_topic

pytestmark = pytest.mark.integration

TIMEOUT_S = 20

#: Kafka's error codes the assertions name
TOPIC_ALREADY_EXISTS = 36
SECURITY_DISABLED = 54


#: the overrides the aiokafka test creates its topic with
TOPIC_CONFIGS = {"cleanup.policy": "compact,delete", "retention.ms": "3600000"}


def _configs(responses: list[Any]) -> dict[str, tuple[str, int]]:
    """(value, config_source) of every entry of aiokafka's DescribeConfigs responses."""
    return {
        entry[0]: (entry[1], entry[3])
        for response in responses
        for resource in response.resources
        for entry in resource[4]
    }


def test_aiokafka_admin_client(odradek_broker: BrokerProcess) -> None:
    """AIOKafkaAdminClient's calls, each answered as Kafka answers them: topics with configs,
    an explicit replica assignment and validate-only; partitions; topic and broker configs;
    the cluster; a group's coordinator, listing, description and offsets; DeleteRecords."""
    topic, assigned, checked = unique_topic("aioadm"), unique_topic("aioadm-r"), unique_topic("aioadm-v")
    group_id = unique_topic("aioadm-g")

    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=odradek_broker.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
        await admin.start()
        try:
            await admin.create_topics(
                [
                    NewTopic(topic, 2, 1, topic_configs=TOPIC_CONFIGS),
                    NewTopic(assigned, -1, -1, replica_assignments={0: [0], 1: [0]}),
                ]
            )
            again = await admin.create_topics([NewTopic(topic, 2, 1)])  # errors come back, not raised
            assert [(name, code) for name, code, _ in again.topic_errors] == [(topic, TOPIC_ALREADY_EXISTS)]
            await admin.create_topics([NewTopic(checked, 1, 1)], validate_only=True)
            assert {topic, assigned} <= set(await admin.list_topics())
            assert checked not in await admin.list_topics()
            [described] = await admin.describe_topics([assigned])
            assert [p["replicas"] for p in described["partitions"]] == [[0], [0]]

            await admin.create_partitions({topic: NewPartitions(3)})
            with pytest.raises(InvalidPartitionsError):
                await admin.create_partitions({topic: NewPartitions(2)})
            wanted = {"retention.ms": None, "cleanup.policy": None}
            configs = _configs(await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, wanted)]))
            assert configs == {"retention.ms": ("3600000", 1), "cleanup.policy": ("compact,delete", 1)}
            broker = ConfigResource(ConfigResourceType.BROKER, "0", {"num.partitions": None})
            assert _configs(await admin.describe_configs([broker]))["num.partitions"][0] == "1"
            # the legacy AlterConfigs replaces the overrides: cleanup.policy goes back to its default
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "7200000"})])
            configs = _configs(await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, wanted)]))
            assert configs == {"retention.ms": ("7200000", 1), "cleanup.policy": ("delete", 5)}

            cluster = await admin.describe_cluster()
            assert [(b["node_id"], b["port"]) for b in cluster["brokers"]] == [(0, odradek_broker.port)]
            assert cluster["controller_id"] == 0
            assert await admin.find_coordinator(group_id) == 0

            producer = AIOKafkaProducer(bootstrap_servers=odradek_broker.bootstrap)
            await producer.start()
            try:
                for i in range(6):
                    await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % i, partition=0)
            finally:
                await producer.stop()
            # assigned, not subscribed: the commit makes a group without members (no rebalance wait)
            consumer = AIOKafkaConsumer(
                bootstrap_servers=odradek_broker.bootstrap, group_id=group_id, enable_auto_commit=False
            )
            await consumer.start()
            try:
                consumer.assign([AioTopicPartition(topic, 0)])
                await consumer.commit({AioTopicPartition(topic, 0): 4})
            finally:
                await consumer.stop()
            assert (group_id, "") in await admin.list_consumer_groups()
            # one group per call: aiokafka 0.14 reads DescribeGroups v3 with the v2 layout
            # (docs/protocol.md, "Clients' own bugs")
            [response] = await admin.describe_consumer_groups([group_id])
            [group] = response.groups
            assert (group[0], group[1], group[2], group[5]) == (0, group_id, "Empty", [])
            partitions = [AioTopicPartition(topic, 0), AioTopicPartition(topic, 1)]
            offsets = await admin.list_consumer_group_offsets(group_id, partitions=partitions)
            assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 4, 1: -1}

            deleted = await admin.delete_records({AioTopicPartition(topic, 0): RecordsToDelete(2)})
            assert deleted == {AioTopicPartition(topic, 0): 2}
            await admin.delete_topics([assigned])
            assert assigned not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(main())


def test_acl_apis_answer_security_disabled_without_an_authorizer(odradek_broker: BrokerProcess) -> None:
    """Kafka without an authorizer serves DescribeAcls/CreateAcls/DeleteAcls and answers
    SECURITY_DISABLED; before, odradek did not advertise them, and clients reported a broker too
    old for ACLs (librdkafka: "requires broker version >= 0.11.0.0")."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KafkaResourceType
    from kafka.errors import SecurityDisabledError

    topic = unique_topic("acl")
    any_acl = ACLFilter(
        principal=None,
        host="*",
        operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(KafkaResourceType.ANY, None, ACLResourcePatternType.ANY),
    )
    pattern = ResourcePattern(KafkaResourceType.TOPIC, topic)
    grant = ACL("User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
    kafka_python = KafkaAdminClient(bootstrap_servers=odradek_broker.bootstrap)
    try:
        with pytest.raises(SecurityDisabledError, match="No Authorizer is configured on the broker"):
            kafka_python.describe_acls(any_acl)
        assert kafka_python.create_acls([grant]) == {"succeeded": [], "failed": [SecurityDisabledError]}
        [(_, matched, error)] = kafka_python.delete_acls([any_acl])
        assert (matched, error) == ([], SecurityDisabledError)
    finally:
        kafka_python.close()

    admin = AdminClient({"bootstrap.servers": odradek_broker.bootstrap})
    literal = (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL)
    binding = AclBinding(*literal, "User:bob", "*", AclOperation.READ, AclPermissionType.ALLOW)
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    for futures in (admin.create_acls([binding]), admin.delete_acls([everything])):
        [future] = futures.values()
        with pytest.raises(KafkaException) as caught:
            future.result(TIMEOUT_S)
        assert caught.value.args[0].code() == SECURITY_DISABLED
    # librdkafka drops DescribeAcls' top-level error (with Kafka too): an empty list, no error
    assert admin.describe_acls(everything).result(TIMEOUT_S) == []
