"""The admin handlers of the TCP transport (plugins/transport_tcp/apis/admin.py) over a whole
broker core: what the handler itself decides (before the core) and how it maps the answers."""

from __future__ import annotations

import datetime
import types
from pathlib import Path
from typing import Any

import kio.schema.alter_configs.v2.request as alter_v2
import kio.schema.create_topics.v7.request as create_v7
import kio.schema.describe_configs.v4.request as describe_v4
import kio.schema.incremental_alter_configs.v1.request as incremental_v1
from broker_harness import create, running_broker
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32

from odradek.broker.api import ConfigResource, ConfigResourceType
from odradek.broker.core import BrokerCore
from odradek.errors import ErrorCode
from odradek.plugins.transport_tcp.apis.admin import (
    handle_alter_configs,
    handle_create_topics,
    handle_delete_topics,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from odradek.protocol import ApiKey
from odradek.protocol.codec import request_type

TOPIC = int(ConfigResourceType.TOPIC)


def _ctx(core: BrokerCore, api_version: int) -> Any:
    """The part of a RequestContext the admin handlers read."""
    return types.SimpleNamespace(api_version=api_version, broker=core)


async def _retention_ms(core: BrokerCore, topic: str) -> str | None:
    [result] = await core.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, ("retention.ms",))])
    return result.configs[0].value


def _incremental(name: str, operation: int, value: str | None) -> Any:
    config = incremental_v1.AlterableConfig(name=name, config_operation=i8(operation), value=value)
    return incremental_v1.AlterConfigsResource(resource_type=i8(TOPIC), resource_name="t", configs=(config,))


async def test_a_resource_named_twice_in_an_alter_is_refused_every_copy_and_none_applied(tmp_path: Path) -> None:
    """Kafka (ConfigAdminManager.preprocess) answers INVALID_REQUEST "Each resource must appear at
    most once." for each copy of a repeated resource and applies none, even when one copy is
    refused for its own reasons (an unknown operation) and the other would be valid."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", **{"retention.ms": "1000"})
        for copies in [
            (_incremental("retention.ms", 0, "2000"), _incremental("retention.ms", 0, "3000")),
            (_incremental("retention.ms", 9, "2000"), _incremental("retention.ms", 0, "3000")),
        ]:
            request = incremental_v1.IncrementalAlterConfigsRequest(resources=copies, validate_only=False)
            response = await handle_incremental_alter_configs(_ctx(core, 1), request)
            assert [(r.error_code, r.error_message) for r in response.responses] == [
                (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            ] * 2
            assert await _retention_ms(core, "t") == "1000"

        def legacy(value: str) -> Any:
            config = alter_v2.AlterableConfig(name="retention.ms", value=value)
            return alter_v2.AlterConfigsResource(resource_type=i8(TOPIC), resource_name="t", configs=(config,))

        request = alter_v2.AlterConfigsRequest(resources=(legacy("2000"), legacy("3000")), validate_only=False)
        response = await handle_alter_configs(_ctx(core, 2), request)
        assert [r.error_code for r in response.responses] == [ErrorCode.INVALID_REQUEST] * 2
        assert await _retention_ms(core, "t") == "1000"


def _assigned(name: str, *partitions: int, num_partitions: int = -1) -> Any:
    assignments = tuple(
        create_v7.CreatableReplicaAssignment(partition_index=i32(p), broker_ids=(BrokerId(0),)) for p in partitions
    )
    return create_v7.CreatableTopic(
        name=TopicName(name),
        num_partitions=i32(num_partitions),
        replication_factor=i16(-1),
        assignments=assignments,
        configs=(),
    )


async def test_a_partition_assigned_twice_in_create_topics_is_refused(tmp_path: Path) -> None:
    """Kafka's controller answers INVALID_REPLICA_ASSIGNMENT "Found multiple manual partition
    assignments for partition N"; a mapping kept the last and created the topic short of one."""
    async with running_broker(tmp_path) as core:
        topics = (
            _assigned("twice", 0, 1, 1),
            _assigned("fine", 0, 1),
            _assigned("counted", 0, 0, num_partitions=2),  # Kafka's earlier check: INVALID_REQUEST
        )
        request = create_v7.CreateTopicsRequest(
            topics=topics, timeout=datetime.timedelta(seconds=5), validate_only=False
        )
        response = await handle_create_topics(_ctx(core, 7), request)
        assert [(t.name, t.error_code, t.error_message) for t in response.topics][:2] == [
            (
                "twice",
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "Found multiple manual partition assignments for partition 1",
            ),
            ("fine", ErrorCode.NONE, None),
        ]
        assert response.topics[2].error_code == ErrorCode.INVALID_REQUEST
        assert sorted(core.metadata_cache.topics) == ["fine"]
        # Kafka's checks before it keep their own answers: the name, then whether it exists
        request = create_v7.CreateTopicsRequest(
            topics=(_assigned("fine", 0, 1, 1), _assigned("bad name!", 0, 0), _assigned("__cluster_metadata", 0, 0)),
            timeout=datetime.timedelta(seconds=5),
            validate_only=False,
        )
        response = await handle_create_topics(_ctx(core, 7), request)
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("fine", ErrorCode.TOPIC_ALREADY_EXISTS),
            ("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION),
            ("__cluster_metadata", ErrorCode.INVALID_REQUEST),
        ]


async def test_deletion_disabled_is_invalid_request_below_delete_topics_v3(tmp_path: Path) -> None:
    """TOPIC_DELETION_DISABLED (73) came with DeleteTopics v3; Kafka answers older versions
    INVALID_REQUEST, a code their clients know."""
    async with running_broker(tmp_path, delete_topic_enable=False) as core:
        await create(core, "t")
        for version, expected in [
            (1, ErrorCode.INVALID_REQUEST),
            (2, ErrorCode.INVALID_REQUEST),
            (3, ErrorCode.TOPIC_DELETION_DISABLED),
            (5, ErrorCode.TOPIC_DELETION_DISABLED),
        ]:
            request = request_type(ApiKey.DELETE_TOPICS, version)(
                topic_names=("t",), timeout=datetime.timedelta(seconds=5)
            )
            response = await handle_delete_topics(_ctx(core, version), request)
            assert [r.error_code for r in response.responses] == [expected], version
        assert "t" in core.metadata_cache.topics


async def test_broker_loggers_over_the_wire(tmp_path: Path) -> None:
    """What kafka-configs --entity-type broker-loggers sends: DescribeConfigs v4 of resource type
    8, then an IncrementalAlterConfigs SET of one logger's level."""
    import logging

    logger = logging.getLogger("odradek.broker.admin")
    saved = logger.level
    try:
        async with running_broker(tmp_path) as core:
            loggers = describe_v4.DescribeConfigsResource(
                resource_type=i8(8), resource_name="0", configuration_keys=None
            )
            request = describe_v4.DescribeConfigsRequest(
                resources=(loggers,),
                include_synonyms=True,
                include_documentation=True,
            )
            [result] = (await handle_describe_configs(_ctx(core, 4), request)).results
            entries = {e.name: e for e in result.configs}
            assert result.error_code == ErrorCode.NONE and entries["odradek.broker.admin"].config_source == 6
            config = incremental_v1.AlterableConfig(name="odradek.broker.admin", config_operation=i8(0), value="TRACE")
            alter = incremental_v1.AlterConfigsResource(resource_type=i8(8), resource_name="0", configs=(config,))
            request = incremental_v1.IncrementalAlterConfigsRequest(resources=(alter,), validate_only=False)
            [altered] = (await handle_incremental_alter_configs(_ctx(core, 1), request)).responses
            assert altered.error_code == ErrorCode.NONE and logger.level == 5
    finally:
        logger.setLevel(saved)
