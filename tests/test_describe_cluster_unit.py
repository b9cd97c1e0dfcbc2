"""DescribeCluster's endpoint-type checks and a follower's DescribeLogDirs offset lag, without
sockets (the handler and the Partition are called directly); a stuck log dir volume against a
broker with its TCP listener."""

from __future__ import annotations

import os
import threading
import types
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_harness import broker_config, broker_plugins, create, running_broker

from odradek.broker.api import BrokerNode, ClusterMetadata
from odradek.broker.partition import Partition
from odradek.broker.server import BrokerServer
from odradek.config import default_config
from odradek.errors import ErrorCode
from odradek.interfaces import LogDirDescription, TopicPartition
from odradek.plugins.storage_segment.storage import SegmentLogStorage
from odradek.plugins.transport_tcp.apis.cluster import handle_describe_cluster
from odradek.plugins.transport_tcp.client import TcpConnection, TcpConnector
from odradek.protocol import ApiKey, decode_response, encode_request, request_type
from odradek.protocol.authorized_operations import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_OPERATIONS
from odradek.testing import check_storage
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


async def _only_log_dir(core: Any, engine: object) -> Any:
    """The one entry ``core``'s DescribeLogDirs answers with ``engine`` as its storage."""
    real = core.storage
    core.storage = engine
    try:
        (entry,) = await core.describe_log_dirs(None)
    finally:
        core.storage = real
    return entry


async def test_an_engine_without_describe_log_dirs_reports_its_logs_under_the_first_dir(tmp_path: Path) -> None:
    """Such an engine still answers DescribeLogDirs (no UNKNOWN_SERVER_ERROR): all its logs under
    the first of log.dirs, with their sizes, volume sizes unknown."""
    async with running_broker(tmp_path / "data") as core:
        await create(core, "old", partitions=2)
        entry = await _only_log_dir(core, _EngineBeforeLogDirs(core.storage))
    assert entry.error == ErrorCode.NONE
    assert entry.path == str((tmp_path / "data").absolute())
    assert (entry.total_bytes, entry.usable_bytes) == (-1, -1)
    assert sorted(p.tp for p in entry.partitions) == [TopicPartition("old", 0), TopicPartition("old", 1)]


class _EngineWithPlainLogDirs(_EngineBeforeLogDirs):
    """A third-party engine written while ``describe_log_dirs`` was a plain method: one dir
    holding every log."""

    def __getattr__(self, name: str) -> Any:
        if name == "describe_log_dirs":
            inner: Any = self._inner
            return lambda: [LogDirDescription("/plain", tuple(inner.all_logs()), total_bytes=7, usable_bytes=5)]
        return super().__getattr__(name)


async def test_an_engine_with_a_plain_describe_log_dirs_is_still_answered(tmp_path: Path) -> None:
    async with running_broker(tmp_path / "data") as core:
        entry = await _only_log_dir(core, _EngineWithPlainLogDirs(core.storage))
    assert (entry.error, entry.path, entry.total_bytes, entry.usable_bytes) == (ErrorCode.NONE, "/plain", 7, 5)


async def test_the_conformance_suite_takes_an_engine_with_a_plain_describe_log_dirs(tmp_path: Path) -> None:
    """The broker still calls such an engine; its own conformance run must pass too (it failed
    with "object list can't be used in 'await' expression" once the method became async)."""
    suite = check_storage(lambda config: _EngineWithPlainLogDirs(SegmentLogStorage(config)))()
    await suite.test_log_dirs_list_every_log_once_with_its_size(tmp_path)


#: how long the fake stuck statvfs blocks at most: only a broken build gets there (the test then
#: fails instead of hanging); a working one releases it long before
STUCK_BOUND_S = 20.0


async def _ask(conn: TcpConnection, key: ApiKey, version: int, correlation_id: int, **fields: Any) -> None:
    request = request_type(key, version)(**fields)
    await conn.send_frame(encode_request(request, correlation_id=correlation_id, client_id="stuck-volume"))


async def test_a_stuck_log_dir_volume_stalls_only_describe_log_dirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """statvfs of a stuck mount (NFS) blocks for as long as the mount is stuck. It used to run on
    the event loop: one DescribeLogDirs froze every client of the broker. Now it runs in a worker
    thread of the storage's own limiter: another client's Metadata is answered while it blocks,
    and a second DescribeLogDirs waits for the limiter instead of taking a second thread."""
    real_statvfs = os.statvfs
    stuck, release, returned = threading.Event(), threading.Event(), threading.Event()
    callers: set[int] = set()

    def stuck_statvfs(path: Any) -> os.statvfs_result:
        callers.add(threading.get_ident())
        stuck.set()
        release.wait(STUCK_BOUND_S)
        returned.set()
        return real_statvfs(path)

    server = BrokerServer(broker_config(tmp_path), broker_plugins("odradek.plugins.transport_tcp.plugin"))
    async with trio.open_nursery() as nursery:
        (endpoint, *_) = await nursery.start(server.serve)
        storage = server.storage
        assert isinstance(storage, SegmentLogStorage)
        connector = TcpConnector()
        admin, second, other = [await connector.connect(endpoint.host, endpoint.port, timeout_s=5) for _ in range(3)]
        try:
            monkeypatch.setattr(os, "statvfs", stuck_statvfs)
            await _ask(admin, ApiKey.DESCRIBE_LOG_DIRS, 4, 1, topics=None)
            await trio.to_thread.run_sync(stuck.wait, STUCK_BOUND_S)
            await _ask(
                other,
                ApiKey.METADATA,
                8,
                3,
                topics=None,
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
            _, metadata = decode_response(ApiKey.METADATA, 8, await other.receive_frame())
            assert not returned.is_set(), "the other client was answered only after the stuck statvfs returned"
            assert [b.node_id for b in metadata.brokers] == [0]
            await _ask(second, ApiKey.DESCRIBE_LOG_DIRS, 4, 2, topics=None)
            with trio.fail_after(10):
                while storage._log_dir_stats.statistics().tasks_waiting < 1:
                    await trio.sleep(0.01)
            assert len(callers) == 1 and threading.get_ident() not in callers
            release.set()
            for conn, cid in ((admin, 1), (second, 2)):
                got_cid, answer = decode_response(ApiKey.DESCRIBE_LOG_DIRS, 4, await conn.receive_frame())
                (result,) = answer.results
                assert got_cid == cid and result.error_code == 0
                assert result.total_bytes >= result.usable_bytes > 0
        finally:
            release.set()
            for conn in (admin, second, other):
                await conn.aclose()
            nursery.cancel_scope.cancel()
