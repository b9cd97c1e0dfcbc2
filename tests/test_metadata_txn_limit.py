"""Topics and the metadata store's limit on one transaction (etcd's ``--max-txn-ops``, 128 by
default). A topic's creation writes its assignment and every partition's state in one
transaction; on etcd a topic of 127 or more partitions used to fail with an unexpected server
error (a traceback in the broker's log). It is now refused up front with a reason, or, on a
broker whose setting is above its servers', answered with etcd's own reason; a deletion too
large for one transaction goes in steps."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from broker_harness import FAKE_TRANSPORT, create, running_broker, serving

from odradek.broker.api import CreatableTopic, CreatePartitionsTopic
from odradek.broker.core import BrokerCore
from odradek.broker.metadata_cache import config_key, topic_key
from odradek.broker.server import BrokerServer
from odradek.config import load_config
from odradek.errors import ErrorCode
from odradek.interfaces import ABSENT, Check, Delete, Put
from odradek.manager import Plugins, build_plugin_manager
from odradek.plugins.meta_zk.store import ZooKeeperMetadataStore
from odradek.sessions import MetadataTxnTooLarge
from odradek.testing import EtcdServer, ZooKeeperServer, unique_chroot


@asynccontextmanager
async def etcd_broker(data: Path, server: EtcdServer, **more: Any) -> AsyncIterator[BrokerCore]:
    """An in-process broker on ``server`` (its own namespace), ``more`` settings added."""
    settings = {"metadata": "etcd", "etcd.endpoints": server.endpoint, "etcd.namespace": unique_chroot("txnlimit")}
    async with store_broker(data, "meta_etcd", {**settings, **more}) as core:
        yield core


@asynccontextmanager
async def store_broker(data: Path, store_module: str, settings: dict[str, Any]) -> AsyncIterator[BrokerCore]:
    modules = ["compress", "storage_segment", store_module]
    plugins = Plugins(
        build_plugin_manager(
            entry_points_enabled=False, extra=[*(f"odradek.plugins.{m}.plugin" for m in modules), FAKE_TRANSPORT]
        )
    )
    overrides = {"log.dirs": str(data), "listeners": "PLAINTEXT://127.0.0.1:0", **settings}
    async with serving(BrokerServer(load_config(env={}, plugins=plugins, overrides=overrides), plugins)) as core:
        yield core


async def test_a_topic_too_large_for_one_etcd_transaction_is_refused_with_the_reason(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    """Against an etcd at its default limit: 126 partitions fit (128 writes with the assignment
    and the config); 127 are refused as INVALID_PARTITIONS naming the setting, validate_only
    too, and nothing is written; growing a topic past the limit in one step is refused alike."""
    async with etcd_broker(tmp_path, etcd_server) as core:
        ok = await core.create_topics([CreatableTopic("fits", 126, 1)], 5000, False)
        assert ok["fits"].error == ErrorCode.NONE
        for validate_only in (True, False):
            big = await core.create_topics([CreatableTopic("big", 127, 1)], 5000, validate_only)
            assert big["big"].error == ErrorCode.INVALID_PARTITIONS
            reason = big["big"].error_message or ""
            assert "--max-txn-ops" in reason and "etcd.max.txn.ops" in reason
        assert await core.metadata_cache.store.get(topic_key("big")) is None
        await create(core, "small", 2)
        grown = await core.create_partitions([CreatePartitionsTopic("small", 200)], 5000, False)
        assert grown["small"].error == ErrorCode.INVALID_PARTITIONS
        assert core.metadata_cache.topics["small"].num_partitions == 2
        grown = await core.create_partitions([CreatePartitionsTopic("small", 120)], 5000, False)
        assert grown["small"].error == ErrorCode.NONE


async def test_a_broker_set_above_its_etcd_servers_limit_gets_their_reason(
    tmp_path: Path, etcd_server: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    """etcd.max.txn.ops above the servers' --max-txn-ops: etcd refuses the transaction, and the
    topic's answer (UNKNOWN_SERVER_ERROR, the request's other topics unharmed) says why and
    which setting to match, instead of the whole request failing with a traceback logged."""
    async with etcd_broker(tmp_path, etcd_server, **{"etcd.max.txn.ops": 1000}) as core:
        answers = await core.create_topics(
            [CreatableTopic("past", 300, 1), CreatableTopic("within", 3, 1)], 5000, False
        )
        assert answers["within"].error == ErrorCode.NONE
        past = answers["past"]
        assert past.error == ErrorCode.UNKNOWN_SERVER_ERROR
        reason = past.error_message or ""
        assert "too many operations" in reason and "etcd.max.txn.ops is 1000" in reason
        assert await core.metadata_cache.store.get(topic_key("past")) is None
    assert not [r for r in caplog.records if r.exc_info]


async def test_a_topic_too_large_for_one_transaction_is_deleted_in_steps(tmp_path: Path) -> None:
    """A topic created before the store's limit was lowered (here: the embedded store, told a
    limit of 10 after the creation): its deletion takes the assignment and config first, in one
    transaction, then its partitions' keys ten at a time, each while no topic of the name exists;
    every key goes, and every transaction stays within the limit."""
    async with running_broker(tmp_path) as core:
        await create(core, "t", 35, **{"retention.ms": "1000"})
        store = core.metadata_cache.store
        sizes: list[tuple[int, int]] = []
        real_txn = store.txn

        async def txn(checks: list[Check], ops: list[Put | Delete]) -> None:
            sizes.append((len(checks), len(ops)))
            await real_txn(checks, ops)

        store.max_txn_ops = 10  # type: ignore[attr-defined]
        store.txn = txn  # type: ignore[method-assign]
        try:
            result = await core.delete_topics(["t"], 5000)
        finally:
            store.txn = real_txn  # type: ignore[method-assign]
            del store.max_txn_ops  # type: ignore[attr-defined]
        assert result["t"].error == ErrorCode.NONE
        assert sizes[0] == (1, 2)  # the assignment and the config
        assert all(ops <= 10 for _, ops in sizes) and sum(ops for _, ops in sizes[1:]) == 35
        left, _ = await store.list(topic_key("t") + "/")
        assert left == {} and await store.get(topic_key("t")) is None and await store.get(config_key("t")) is None
        assert not core.metadata_cache.contains_topic("t")


async def test_a_zookeeper_transaction_past_jute_maxbuffer_is_refused_before_it_is_sent(
    zookeeper_server: ZooKeeperServer,
) -> None:
    """ZooKeeper closes the connection on a request past its jute.maxbuffer (every watch of the
    session is reset, and a client retrying the write dropped it again and again): the store
    measures the multi it built and refuses it first, with the size and the setting. Nothing is
    written, parents included, and the session carries on."""
    store = ZooKeeperMetadataStore(zookeeper_server.connect_string + unique_chroot("jute"))
    await store.open(6000)
    try:
        session = store.client_id
        value = b'{"controller_epoch":0,"isr":[0],"leader":0,"leader_epoch":0,"version":1}'
        with pytest.raises(MetadataTxnTooLarge, match=r"1,048,575 \(zookeeper.jute.maxbuffer"):
            await store.txn(
                [Check("/t", ABSENT)], [Put("/t", b"x")] + [Put(f"/t/p/{i}/state", value) for i in range(7000)]
            )
        assert (await store.list("/"))[0] == {}
        assert store._live().connected and store.client_id == session
        await store.txn([], [Put("/t", b"x")])
        assert (await store.get("/t")) is not None
    finally:
        await store.close()


async def test_a_topic_past_zookeepers_request_size_is_refused_with_the_reason(
    tmp_path: Path, zookeeper_server: ZooKeeperServer
) -> None:
    """A broker whose zookeeper.jute.maxbuffer is small (as the servers' would be): a topic whose
    creation would be a larger request gets INVALID_PARTITIONS naming the setting, and a small
    one is created."""
    settings = {
        "metadata": "zookeeper",
        "zookeeper.connect": zookeeper_server.connect_string + unique_chroot("jutebroker"),
        "zookeeper.jute.maxbuffer": 16384,
    }
    async with store_broker(tmp_path, "meta_zk", settings) as core:
        big = await core.create_topics([CreatableTopic("big", 200, 1)], 5000, False)
        assert big["big"].error == ErrorCode.INVALID_PARTITIONS
        assert "zookeeper.jute.maxbuffer" in (big["big"].error_message or "")
        assert await core.metadata_cache.store.get(topic_key("big")) is None
        small = await core.create_topics([CreatableTopic("small", 10, 1)], 5000, False)
        assert small["small"].error == ErrorCode.NONE
