"""The admin handlers of the TCP transport (plugins/transport_tcp/apis/admin.py) over a whole
broker core: what the handler itself decides (before the core) and how it maps the answers."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import kio.schema.alter_configs.v2.request as alter_v2
import kio.schema.incremental_alter_configs.v1.request as incremental_v1
from broker_harness import create, running_broker
from kio.static.primitive import i8

from odradek.broker.api import ConfigResource, ConfigResourceType
from odradek.broker.core import BrokerCore
from odradek.errors import ErrorCode
from odradek.plugins.transport_tcp.apis.admin import handle_alter_configs, handle_incremental_alter_configs

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
