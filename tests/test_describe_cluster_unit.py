"""DescribeCluster's endpoint-type checks and a follower's DescribeLogDirs offset lag, without
sockets (the handler and the Partition are called directly)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
from broker_harness import create, running_broker

from odradek.broker.api import BrokerNode, ClusterMetadata
from odradek.broker.partition import Partition
from odradek.config import default_config
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.plugins.storage_segment.storage import SegmentLogStorage
from odradek.plugins.transport_tcp.apis.cluster import handle_describe_cluster
from odradek.protocol import ApiKey, request_type
from odradek.protocol.authorized_operations import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_OPERATIONS
from odradek.testing.storage_support import append

pytestmark = pytest.mark.trio


class _Broker:
    async def describe_cluster(self, *, listener_name: str | None = None) -> ClusterMetadata:
        return ClusterMetadata("cid", 2, (BrokerNode(1, "h1", 9092), BrokerNode(2, "h2", 9093, "r2")), ())


def _ctx(version: int) -> Any:
    header = types.SimpleNamespace(api_version=version)
    return types.SimpleNamespace(
        api_version=version, header=header, broker=_Broker(), listener=types.SimpleNamespace(name="PLAINTEXT")
    )


def _request(version: int, **fields: Any) -> Any:
    return request_type(ApiKey.DESCRIBE_CLUSTER, version)(**fields)


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_brokers_controller_and_operations(version: int) -> None:
    extra: dict[str, Any] = {"include_fenced_brokers": True} if version >= 2 else {}
    asked = await handle_describe_cluster(
        _ctx(version), _request(version, include_cluster_authorized_operations=True, **extra)
    )
    assert int(asked.error_code) == 0 and asked.cluster_id == "cid" and asked.controller_id == 2
    assert [(b.broker_id, b.host, b.port, b.rack) for b in asked.brokers] == [
        (1, "h1", 9092, None),
        (2, "h2", 9093, "r2"),
    ]
    assert asked.cluster_authorized_operations == CLUSTER_OPERATIONS == 8096
    if version >= 2:
        assert not any(b.is_fenced for b in asked.brokers)
    plain = await handle_describe_cluster(
        _ctx(version), _request(version, include_cluster_authorized_operations=False, **extra)
    )
    assert plain.cluster_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED


@pytest.mark.parametrize(
    ("endpoint_type", "code"),
    [
        (2, ErrorCode.MISMATCHED_ENDPOINT_TYPE),
        (0, ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
        (7, ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
    ],
)
async def test_a_broker_answers_only_the_broker_endpoint_type(endpoint_type: int, code: ErrorCode) -> None:
    r = await handle_describe_cluster(
        _ctx(1), _request(1, include_cluster_authorized_operations=False, endpoint_type=endpoint_type)
    )
    assert int(r.error_code) == code and r.error_message
    assert r.brokers == () and r.controller_id == -1 and r.endpoint_type == 1


async def test_a_follower_lags_by_the_leader_high_watermark(tmp_path: Path) -> None:
    config = default_config(log_dirs=[str(tmp_path)])
    storage = SegmentLogStorage(config)
    await storage.open()
    try:
        tp = TopicPartition("lag", 0)
        log = storage.get_or_create_log(tp, config.topic_config())
        partition = Partition(tp, log, 1, config.topic_config())
        partition.make_follower(2, 0, [2, 1], [2, 1])
        assert partition.offset_lag == 0  # no fetch response yet
        append(log, 3)
        partition.update_follower_high_watermark(10)
        assert partition.offset_lag == 7
        partition.update_follower_high_watermark(2)
        assert partition.offset_lag == 0
        partition.update_follower_high_watermark(10)
        partition.make_leader(1, [1, 2], [1, 2])
        assert partition.offset_lag == 0  # a leader is never behind
    finally:
        await storage.close()


class _EngineBeforeLogDirs:
    """A third-party engine written before ``describe_log_dirs``: everything else forwarded."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "describe_log_dirs":
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_an_engine_without_describe_log_dirs_reports_its_logs_under_the_first_dir(tmp_path: Path) -> None:
    """Such an engine still answers DescribeLogDirs (no UNKNOWN_SERVER_ERROR): all its logs under
    the first of log.dirs, with their sizes, volume sizes unknown."""
    async with running_broker(tmp_path / "data") as core:
        await create(core, "old", partitions=2)
        real = core.storage
        core.storage = _EngineBeforeLogDirs(real)  # type: ignore[assignment]
        try:
            (entry,) = await core.describe_log_dirs(None)
        finally:
            core.storage = real
    assert entry.error == ErrorCode.NONE
    assert entry.path == str((tmp_path / "data").absolute())
    assert (entry.total_bytes, entry.usable_bytes) == (-1, -1)
    assert sorted(p.tp for p in entry.partitions) == [TopicPartition("old", 0), TopicPartition("old", 1)]
