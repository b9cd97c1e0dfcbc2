"""A KIP-848 heartbeat is answered only once its records are in ``__consumer_offsets``, on a real
broker over the wire: while the topic refuses the group's writes (``max.message.bytes`` lowered
below a join's batch, so every append is MESSAGE_TOO_LARGE), a member that would join gets an
error and no assignment, the member already in keeps its partitions (the undone change asked it
to revoke nothing), and heartbeats that change nothing are still answered. Once writes work
again the member joins, and a restarted broker knows exactly what the members were told."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from group_client_helpers import GROUP_BROKER_SETTINGS, TIMEOUT_S, create_topic, wait_for
from sasl_helpers import WireClient

from odradek.protocol import ApiKey
from odradek.testing import BrokerProcess, start_broker, unique_topic

pytestmark = pytest.mark.integration

HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT
DESCRIBE = ApiKey.CONSUMER_GROUP_DESCRIBE


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    # a rack: the target assignments below are computed with the replicas' racks
    with start_broker(tmp_path, {**GROUP_BROKER_SETTINGS, "broker.rack": "east"}) as running:
        yield running


def set_offsets_topic_max_message_bytes(broker: BrokerProcess, value: str | None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        "__consumer_offsets",
        incremental_configs=[ConfigEntry("max.message.bytes", value or "", incremental_operation=op)],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT_S)


def heartbeat(client: WireClient, group: str, member: str, epoch: int, topic: str | None = None,
              owned: Any = None) -> Any:  # fmt: skip
    joining = epoch == 0
    return client.request(
        HEARTBEAT,
        1,
        group_id=group,
        member_id=member,
        member_epoch=epoch,
        instance_id=None,
        rack_id="east" if joining else None,
        rebalance_timeout=datetime.timedelta(milliseconds=30_000 if joining else -1),
        subscribed_topic_names=(topic,) if joining and topic is not None else None,
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=() if joining else owned,
    )


def partitions(response: Any) -> set[int]:
    assert response.assignment is not None
    return {int(p) for tp in response.assignment.topic_partitions for p in tp.partitions}


def members(client: WireClient, group: str) -> set[str]:
    described = client.request(DESCRIBE, 0, group_ids=(group,), include_authorized_operations=False)
    return {m.member_id for m in described.groups[0].members}


def find_coordinator(client: WireClient, group: str) -> None:
    """Until the group's coordinator is found and its partition loaded (describable)."""

    def ready() -> bool:
        found = client.request(ApiKey.FIND_COORDINATOR, 3, key=group, key_type=0)
        if found.error_code.value != 0:
            return False
        described = client.request(DESCRIBE, 0, group_ids=(group,), include_authorized_operations=False)
        return described.groups[0].error_code.name != "coordinator_load_in_progress"

    wait_for(ready, f"the coordinator of {group}")


def test_a_member_is_not_answered_with_state_that_was_not_written(broker: BrokerProcess) -> None:
    topic = unique_topic("durable")
    create_topic(broker, topic, 4)
    group = unique_topic("durable-g")
    host, port = broker.bootstrap.split(":")
    client = WireClient(host, int(port))
    try:
        metadata = client.request(ApiKey.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)  # fmt: skip
        assert [b.rack for b in metadata.brokers] == ["east"]  # broker.rack is registered
        find_coordinator(client, group)
        m1, m2 = str(uuid.uuid4()), str(uuid.uuid4())
        first = heartbeat(client, group, m1, 0, topic)
        assert first.error_code.value == 0 and first.member_epoch == 1 and partitions(first) == {0, 1, 2, 3}
        owned = first.assignment.topic_partitions
        set_offsets_topic_max_message_bytes(broker, "64")
        try:
            refused = heartbeat(client, group, m2, 0, topic)
            # Kafka maps MESSAGE_TOO_LARGE of a group write to UNKNOWN_SERVER_ERROR
            assert refused.error_code.name == "unknown_server_error", refused
            assert refused.assignment is None
            assert members(client, group) == {m1}
            # nothing changed for m1: it keeps its four partitions at its epoch, no write needed
            kept = heartbeat(client, group, m1, 1, owned=owned)
            assert kept.error_code.value == 0 and kept.member_epoch == 1 and partitions(kept) == {0, 1, 2, 3}
        finally:
            set_offsets_topic_max_message_bytes(broker, None)
        joined = heartbeat(client, group, m2, 0, topic)
        assert joined.error_code.value == 0 and joined.member_epoch == 2
        assert members(client, group) == {m1, m2}
        revoking = heartbeat(client, group, m1, 1, owned=owned)
        assert revoking.member_epoch == 1 and len(partitions(revoking)) == 2
    finally:
        client.close()
    broker.stop()
    broker.start()
    client = WireClient(host, int(port))
    try:
        find_coordinator(client, group)
        assert members(client, group) == {m1, m2}
        # m1 was told to keep two and is still at epoch 1, as the restarted broker knows
        again = heartbeat(client, group, m1, 1, owned=revoking.assignment.topic_partitions)
        assert again.error_code.value == 0 and again.member_epoch == 2, again
    finally:
        client.close()
    assert not broker.log_problems(), "\n".join(broker.log_problems())
