"""Replication quotas (KIP-73) and the dynamic broker configs that set their rates.

- which partitions a ``*.replication.throttled.replicas`` value throttles on a broker, and the
  quota's rate on a fake clock;
- dynamic broker configs: IncrementalAlterConfigs and AlterConfigs on a broker and on the
  cluster default, their precedence, DescribeConfigs' sources and synonyms, the refusals (a
  static key, an unknown key, a bad value, APPEND), and a change written by another broker
  arriving through the watch;
- the leader holding back a throttled follower that is out of the ISR once the rate is over the
  quota, and never one in the ISR;
- the follower leaving a throttled partition out of its fetch while it is behind and over the
  quota, and fetching it again once caught up;
- ``odradek partitions reassign --throttle``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_harness import batch, produce, running_broker
from test_replication_followers import _controller_takes_7_out, _response
from test_replication_unit import TP, _broker_7, _epoch_batch, _FakeConnection, _fetcher_from_7

from odradek.broker.api import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    CreatableTopic,
    FetchPartition,
    IsolationLevel,
)
from odradek.broker.core import BrokerCore
from odradek.broker.dynamic_config import broker_config_key
from odradek.broker.replication_quota import LEADER, ReplicationQuotaManager, throttled_partitions
from odradek.config import LONG_MAX
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- which replicas, and the rate ---------------------------------------------------------------------


def test_throttled_partitions_are_the_pairs_naming_this_broker() -> None:
    assert throttled_partitions(["0:1", "1:2", "2:1", " 3 : 1 "], 1) == frozenset({0, 2, 3})
    assert throttled_partitions(["0:1"], 2) == frozenset()
    assert throttled_partitions(["0:1", "*"], 5) is None  # every partition
    assert throttled_partitions([], 1) == frozenset()


def test_the_quota_throttles_only_named_replicas_out_of_sync_over_the_rate() -> None:
    clock = _Clock()
    configs: dict[str, list[str]] = {"t": ["0:1"], "u": ["*"]}
    quota = ReplicationQuotaManager(
        LEADER, 1, lambda topic, key: configs.get(topic, []), samples=2, window_s=1.0, clock=clock
    )
    t0, t1, u5 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 5)
    assert not quota.enabled and not quota.should_throttle(t0, in_sync=False)
    quota.update_quota(1000)
    assert quota.enabled and quota.is_throttled(t0) and not quota.is_throttled(t1) and quota.is_throttled(u5)
    assert not quota.should_throttle(t0, in_sync=False)  # nothing recorded yet
    quota.record(5000)  # 5000 bytes over at least one window: 5000 B/s
    assert quota.is_quota_exceeded()
    assert quota.should_throttle(t0, in_sync=False)
    assert not quota.should_throttle(t0, in_sync=True)  # an in-sync replica is never held back
    assert not quota.should_throttle(t1, in_sync=False)  # not named
    assert quota.held_back == 1
    configs["t"] = []  # the topic's throttle removed: read again at once
    assert not quota.should_throttle(t0, in_sync=False)
    clock.now += 10  # the samples have expired
    assert not quota.is_quota_exceeded()
    quota.update_quota(LONG_MAX)
    assert not quota.enabled


# -- dynamic broker configs -----------------------------------------------------------------------------


def _alter(name: str, *ops: tuple[str, AlterConfigOp, str | None]) -> AlterConfigsResource:
    return AlterConfigsResource(
        ConfigResourceType.BROKER, name, [AlterableConfig(key, op, value) for key, op, value in ops]
    )


async def _describe(core: BrokerCore, name: str, key: str) -> Any:
    [result] = core.configs.describe(
        [ConfigResource(ConfigResourceType.BROKER, name, (key,))], include_synonyms=True, include_documentation=False
    )
    assert result.error == ErrorCode.NONE, result.error_message
    return {e.name: e for e in result.configs}.get(key)


async def test_dynamic_rates_per_broker_and_default(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        entry = await _describe(core, "0", LEADER_RATE)
        assert entry.source == ConfigSource.DEFAULT_CONFIG and entry.value == str(LONG_MAX) and not entry.read_only
        assert not core.leader_replication_quota.enabled
        # the cluster default (the empty broker name)
        [done] = await core.incremental_alter_configs([_alter("", (LEADER_RATE, AlterConfigOp.SET, "5000"))], False)
        assert done.error == ErrorCode.NONE, done.error_message
        assert core.leader_replication_quota.bound == 5000 and not core.follower_replication_quota.enabled
        entry = await _describe(core, "0", LEADER_RATE)
        assert (entry.value, entry.source) == ("5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        # this broker's override wins over the default
        ops = _alter("0", (LEADER_RATE, AlterConfigOp.SET, "700"), (FOLLOWER_RATE, AlterConfigOp.SET, "800"))
        [done] = await core.incremental_alter_configs([ops], False)
        assert done.error == ErrorCode.NONE, done.error_message
        assert (core.leader_replication_quota.bound, core.follower_replication_quota.bound) == (700, 800)
        entry = await _describe(core, "0", LEADER_RATE)
        assert (entry.value, entry.source) == ("700", ConfigSource.DYNAMIC_BROKER_CONFIG)
        assert [(s[1], s[2]) for s in entry.synonyms][:2] == [
            ("700", ConfigSource.DYNAMIC_BROKER_CONFIG),
            ("5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ]
        # the default resource describes only what the default entity sets
        [result] = core.configs.describe(
            [ConfigResource(ConfigResourceType.BROKER, "", ())], include_synonyms=False, include_documentation=False
        )
        assert [(e.name, e.value) for e in result.configs] == [(LEADER_RATE, "5000")]
        # stored where Kafka keeps them
        stored = await core.store.get(broker_config_key("0"))
        assert stored is not None
        assert json.loads(stored.value) == {"version": 1, "config": {LEADER_RATE: "700", FOLLOWER_RATE: "800"}}
        # DELETE falls back to the default; the legacy AlterConfigs replaces the whole set
        [done] = await core.incremental_alter_configs([_alter("0", (LEADER_RATE, AlterConfigOp.DELETE, None))], False)
        assert core.leader_replication_quota.bound == 5000
        [done] = await core.alter_configs([_alter("0", (LEADER_RATE, AlterConfigOp.SET, "900"))], False)
        assert done.error == ErrorCode.NONE, done.error_message
        assert (core.leader_replication_quota.bound, core.follower_replication_quota.enabled) == (900, False)
        # validate_only writes nothing
        ops = _alter("0", (LEADER_RATE, AlterConfigOp.SET, "1"))
        assert (await core.incremental_alter_configs([ops], True))[0].error == ErrorCode.NONE
        assert core.leader_replication_quota.bound == 900


@pytest.mark.parametrize(
    ("op", "error", "message"),
    [
        (
            ("num.partitions", AlterConfigOp.SET, "3"),
            ErrorCode.INVALID_CONFIG,
            "Cannot update these configs dynamically",
        ),
        (("no.such.key", AlterConfigOp.SET, "3"), ErrorCode.INVALID_CONFIG, "Unknown broker configs: no.such.key"),
        ((LEADER_RATE, AlterConfigOp.SET, "fast"), ErrorCode.INVALID_CONFIG, "expected an integer"),
        ((LEADER_RATE, AlterConfigOp.SET, "-1"), ErrorCode.INVALID_CONFIG, "below the minimum 0"),
        ((LEADER_RATE, AlterConfigOp.APPEND, "1"), ErrorCode.INVALID_REQUEST, "only for list configs"),
    ],
)
async def test_dynamic_config_refusals(
    tmp_path: Path, op: tuple[str, AlterConfigOp, str], error: ErrorCode, message: str
) -> None:
    async with running_broker(tmp_path) as core:
        [done] = await core.incremental_alter_configs([_alter("0", op)], False)
        assert done.error == error and message in (done.error_message or ""), done
        assert await core.store.get(broker_config_key("0")) is None
        [other] = await core.incremental_alter_configs([_alter("3", (LEADER_RATE, AlterConfigOp.SET, "1"))], False)
        assert other.error == ErrorCode.INVALID_REQUEST  # another broker's resource goes to that broker


async def test_a_change_written_elsewhere_arrives_through_the_watch(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path) as other:
        doc = json.dumps({"version": 1, "config": {FOLLOWER_RATE: "1234", "num.io.threads": "9"}}).encode()
        await other.put(broker_config_key("<default>"), doc)
        with trio.fail_after(5):
            while core.follower_replication_quota.bound != 1234:
                await trio.sleep(0.01)
        await other.put(broker_config_key("0"), b'{"version":1,"config":{"follower.replication.throttled.rate":"x"}}')
        await other.put(broker_config_key("7"), b'{"version":1,"config":{"follower.replication.throttled.rate":"1"}}')
        await trio.sleep(0.2)
        assert core.follower_replication_quota.bound == 1234  # a bad value and broker 7's: not this broker's


# -- the leader side ---------------------------------------------------------------------------------------


async def _fetch_as_7(core: BrokerCore, offset: int, epoch: int) -> tuple[ErrorCode, int]:
    results = await core.fetch(
        7, 0, 1, 1 << 20, IsolationLevel.READ_UNCOMMITTED, [FetchPartition(TP, offset, 1 << 20, epoch)]
    )
    r = results[TP]
    size = r.records.size if r.records is not None else 0
    if r.records is not None:
        r.records.release()
    return r.error, size


async def test_the_leader_holds_back_a_throttled_follower_out_of_the_isr(tmp_path: Path) -> None:
    async with (
        running_broker(tmp_path, **{"replica.lag.time.max.ms": 30000}) as core,
        _broker_7(core, tmp_path),
    ):
        configs = {"leader.replication.throttled.replicas": "0:0"}
        created = await core.create_topics([CreatableTopic("t", assignments={0: [0, 7]}, configs=configs)], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        for i in range(5):
            assert (await produce(core, TP, batch([b"record-%d" % i]))).error == ErrorCode.NONE
        ops = _alter("0", (LEADER_RATE, AlterConfigOp.SET, "1"))
        assert (await core.incremental_alter_configs([ops], False))[0].error == ErrorCode.NONE
        # in the ISR: never held back, however far over the rate
        assert (await _fetch_as_7(core, 0, 0))[1] > 0
        assert (await _fetch_as_7(core, 0, 0))[1] > 0
        assert core.leader_replication_quota.is_quota_exceeded()
        assert core.leader_replication_quota.held_back == 0
        await _controller_takes_7_out(core, 0)
        # out of the ISR and over the rate: answered without records
        assert await _fetch_as_7(core, 0, 0) == (ErrorCode.NONE, 0)
        assert core.leader_replication_quota.held_back == 1
        # the rate raised: served again
        ops = _alter("0", (LEADER_RATE, AlterConfigOp.SET, str(1 << 30)))
        assert (await core.incremental_alter_configs([ops], False))[0].error == ErrorCode.NONE
        assert (await _fetch_as_7(core, 0, 0))[1] > 0
        assert core.leader_replication_quota.throttled_bytes > 0


# -- the follower side ---------------------------------------------------------------------------------------


async def test_the_follower_leaves_out_a_throttled_partition_while_behind(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core, _broker_7(core, tmp_path):
        configs = {"follower.replication.throttled.replicas": "*"}
        created = await core.create_topics([CreatableTopic("t", assignments={0: [7, 0]}, configs=configs)], 1000, False)
        assert created["t"].error == ErrorCode.NONE
        p = core.replica_manager.get_partition(TP)
        assert p is not None
        ops = _alter("", (FOLLOWER_RATE, AlterConfigOp.SET, "1"))
        assert (await core.incremental_alter_configs([ops], False))[0].error == ErrorCode.NONE
        fetcher = _fetcher_from_7(core, p)
        fetcher.manager.quota = core.follower_replication_quota
        fetcher.partitions[TP].truncating = False
        first, second = _epoch_batch([b"a", b"b"], 0, 0), _epoch_batch([b"c", b"d"], 2, 0)
        conn = _FakeConnection([_response((0, 0, first, 10, 0)), _response((0, 0, second, 4, 0))])
        assert await fetcher._fetch(conn)  # not over the rate yet: fetched (2 of the leader's 10)
        assert p.log_end_offset == 2 and core.follower_replication_quota.throttled_bytes == len(first)
        assert not fetcher.partitions[TP].in_sync
        assert not await fetcher._fetch(conn)  # behind and over the rate: nothing to fetch
        assert len(conn.requests) == 1 and core.follower_replication_quota.held_back == 1
        fetcher.partitions[TP].in_sync = True  # as if caught up: fetched however far over the rate
        assert await fetcher._fetch(conn)
        assert p.log_end_offset == 4 and fetcher.partitions[TP].in_sync
