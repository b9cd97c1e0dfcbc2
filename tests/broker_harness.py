"""A whole broker (BrokerServer: segment storage, meta_local, the core, the group coordinator)
without sockets, for the broker core's unit tests.

The only test double is the transport: :data:`FAKE_TRANSPORT` registers a listener that "binds"
the configured endpoint (port 0 becomes 9092) and serves nothing, so tests call the core facade
(``server.core``) directly while BrokerServer runs exactly as ``odradek serve`` runs it.
"""

from __future__ import annotations

import types
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

from odradek import records
from odradek.broker.api import FetchPartition, IsolationLevel, PartitionProduceResult
from odradek.broker.core import BrokerCore
from odradek.broker.server import BrokerServer
from odradek.config import Config, default_config
from odradek.hookspecs import hookimpl
from odradek.interfaces import Check, Delete, Endpoint, MetadataStore, Put, TopicPartition, TransportFactory
from odradek.manager import Plugins, build_plugin_manager
from odradek.sessions import MetadataUnavailable

T = TypeVar("T")


class FakeListener:
    """Reports the endpoint as bound and waits to be cancelled; the test is the only client."""

    def __init__(self, config: Config, broker: Any, endpoint: Endpoint) -> None:
        self.broker = broker
        self.endpoint = endpoint

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        ep = self.endpoint
        task_status.started([Endpoint(ep.name, ep.host, ep.port or 9092, ep.security_protocol)])
        await trio.sleep_forever()


def _no_client(_config: Any) -> Any:
    raise RuntimeError("the fake transport has no client side")


FAKE_TRANSPORT = types.SimpleNamespace(
    __name__="fake_transport",
    odradek_register_transports=hookimpl(
        lambda: [TransportFactory("fake", ["PLAINTEXT"], FakeListener, _no_client, "unit tests: no sockets")]
    ),
)


def broker_plugins(transport: object = FAKE_TRANSPORT, *extra: object) -> Plugins:
    """The plugins of a unit-test broker: the fake transport unless ``transport`` is given,
    and the ``extra`` plugins (modules or module paths)."""
    return Plugins(
        build_plugin_manager(
            entry_points_enabled=False,
            extra=[
                "odradek.plugins.compress.plugin",
                "odradek.plugins.storage_segment.plugin",
                "odradek.plugins.meta_local.plugin",
                transport,
                *extra,
            ],
        )
    )


def plugins_with(*extra: object) -> Plugins:
    """Every built-in plugin a broker and odradek's client need, entry points off, plus ``extra``
    (in-process third-party plugins under test)."""
    builtins = [
        "odradek.plugins.compress.plugin",
        "odradek.plugins.storage_segment.plugin",
        "odradek.plugins.meta_local.plugin",
        "odradek.plugins.transport_tcp.plugin",
        "odradek.default_partitioners",
        "odradek.default_assignors",
    ]
    return Plugins(build_plugin_manager(entry_points_enabled=False, extra=[*builtins, *extra]))


def broker_config(data_dir: Path, **overrides: Any) -> Config:
    return default_config(log_dirs=str(data_dir), listeners="PLAINTEXT://127.0.0.1:0", **overrides)


@asynccontextmanager
async def running_broker(data_dir: Path, **overrides: Any) -> AsyncIterator[BrokerCore]:
    """Start a BrokerServer on ``data_dir``; yields its core; shuts down gracefully on exit."""
    async with serving(BrokerServer(broker_config(data_dir, **overrides), broker_plugins())) as core:
        yield core


@asynccontextmanager
async def serving(server: BrokerServer) -> AsyncIterator[BrokerCore]:
    """Run ``server`` for the block; yields its core."""
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        assert server.core is not None
        try:
            yield server.core
        finally:
            nursery.cancel_scope.cancel()


def batch(
    values: Sequence[bytes],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamp: int | None = None,
    **kw: Any,
) -> bytearray:
    """One client-style batch (base offset 0) as the bytearray the core takes."""
    keys = keys or [None] * len(values)
    return bytearray(records.build_batch([(k, v, [], timestamp) for k, v in zip(keys, values, strict=True)], **kw))


async def create(core: BrokerCore, name: str, partitions: int = 1, **configs: str) -> None:
    from odradek.broker.api import CreatableTopic
    from odradek.errors import ErrorCode

    result = await core.create_topics([CreatableTopic(name, partitions, 1, configs=configs)], 5000, False)
    assert result[name].error == ErrorCode.NONE, result[name]


async def produce(
    core: BrokerCore,
    tp: TopicPartition,
    data: bytearray,
    *,
    acks: int = 1,
    timeout_ms: int = 5000,
    api_version: int = 7,
) -> PartitionProduceResult:
    return (await core.produce(acks, timeout_ms, {tp: data}, api_version=api_version))[tp]


async def fetch_records(
    core: BrokerCore,
    tp: TopicPartition,
    offset: int = 0,
    *,
    max_bytes: int = 1 << 20,
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> list[records.Record]:
    """Records at or after ``offset`` readable now (no waiting)."""
    result = (await core.fetch(-1, 0, 0, max_bytes, isolation, [FetchPartition(tp, offset, max_bytes)]))[tp]
    if result.records is None:
        return []
    try:
        data = result.records.to_bytes()
    finally:
        result.records.release()
    return [r for b in records.iter_batches(data) for r in b.records if r.offset >= offset]


def replication_factor_too_large(topic: str, setting: str) -> list[str]:
    """The one ERROR Kafka logs when an internal topic's replication factor (3 here) exceeds the
    single live broker, naming the setting that asks for it."""
    return [
        f"cannot create {topic}: replication factor 3 is larger than the 1 available brokers "
        f"(configured via '{setting}'). This can be ignored while the cluster "
        "starts up and not all brokers are up yet"
    ]


def error_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


class SlowStore:
    """A metadata session whose partition-state writes (``put`` and ``txn``) each take ``delay``
    seconds and fail with MetadataUnavailable from the ``fail_at``-th on; it counts how many
    are in flight at once (for the writers that keep several going)."""

    def __init__(self, store: MetadataStore, delay: float, fail_at: int | None = None) -> None:
        self._store = store
        self.delay = delay
        self.fail_at = fail_at
        self.puts = self.in_flight = self.most_in_flight = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def put(self, key: str, value: bytes, **kw: Any) -> int:
        if "/partitions/" not in key:
            return await self._store.put(key, value, **kw)
        return await self._slowly(self._store.put(key, value, **kw))

    async def txn(self, checks: Sequence[Check], ops: Sequence[Put | Delete]) -> None:
        if not any("/partitions/" in op.key for op in ops):
            return await self._store.txn(checks, ops)
        return await self._slowly(self._store.txn(checks, ops))

    async def _slowly(self, write: Coroutine[Any, Any, T]) -> T:
        self.puts += 1
        try:
            if self.fail_at is not None and self.puts >= self.fail_at:
                raise MetadataUnavailable("the store went away")
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                await trio.sleep(self.delay)
                return await write
            finally:
                self.in_flight -= 1
        finally:
            write.close()  # never awaited when it failed first
