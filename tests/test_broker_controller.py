"""The controller's offline-partition election, end to end through the metadata store: a second
broker (a second meta_local session in this process) leads a partition; when it goes away, this
broker's controller elects it leader with a bumped epoch and the core follows the new state."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio
from broker_harness import batch, create, produce, running_broker

from odradek.broker import controller as controller_module
from odradek.broker.alter_partition import AlterPartitionManager
from odradek.broker.api import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    CreatableTopic,
)
from odradek.broker.controller_view import WATCHED_PREFIX
from odradek.broker.core import BrokerCore
from odradek.broker.election import elect_leader
from odradek.broker.log_dir_failures import encode_offline_replicas, offline_replicas_key
from odradek.broker.metadata_cache import SHUTTING_DOWN_PREFIX, PartitionState, partition_state_key, registration_json
from odradek.broker.partition import Partition
from odradek.errors import ErrorCode
from odradek.interfaces import Delete, Put, TopicPartition
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore

TP = TopicPartition("t", 0)


async def _led_by_broker_7(core: BrokerCore, tmp_path: Path) -> tuple[LocalMetadataStore, Partition | None]:
    """Broker 7 registered by a second store session, leading t-0 (replicas 7, 0): (its
    session, this broker's follower partition)."""
    other = LocalMetadataStore(tmp_path / FILE_NAME)
    await other.open(6000)
    await other.register_broker(7, registration_json([("PLAINTEXT", "127.0.0.1", 9999, "PLAINTEXT")], None))
    with trio.fail_after(5):
        while 7 not in core.metadata_cache.live_broker_ids():
            await trio.sleep(0.01)
    res = await core.create_topics([CreatableTopic("t", assignments={0: [7, 0]})], 1000, False)
    assert res["t"].error == ErrorCode.NONE
    return other, core.replica_manager.get_partition(TP)


async def test_offline_partition_gets_a_new_leader(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        other, partition = await _led_by_broker_7(core, tmp_path)
        assert partition is not None and not partition.is_leader and partition.leader_id == 7
        assert (await produce(core, TP, batch([b"x"]))).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        md = await core.metadata(["t"], False)
        assert [b.node_id for b in md.brokers] == [0, 7] and md.topics[0].partitions[0].leader == 7

        await other.close()  # broker 7 is gone: its registration vanishes with its session
        with trio.fail_after(5):
            while not partition.is_leader:
                await trio.sleep(0.01)
        assert partition.leader_epoch == 1 and partition.isr == {0}
        assert [(e.epoch, e.start_offset) for e in partition.log.epoch_entries()] == [(1, 0)]
        assert (await produce(core, TP, batch([b"x"]))).error == ErrorCode.NONE
        p = (await core.metadata(["t"], False)).topics[0].partitions[0]
        assert (p.leader, p.leader_epoch, p.isr, p.offline_replicas) == (0, 1, (0,), (7,))


async def test_an_offline_replica_of_a_live_broker_loses_the_leadership_and_the_isr(tmp_path: Path) -> None:
    """Broker 7 stays registered but publishes its replica of t-0 as offline (its log dir
    failed): the controller elects this broker (epoch + 1) and takes 7 out of the ISR, and a
    leader does not add 7 back while the replica is offline, however caught up it looked."""
    async with running_broker(tmp_path) as core:
        other, partition = await _led_by_broker_7(core, tmp_path)
        assert partition is not None and not partition.is_leader

        isr_manager = AlterPartitionManager(core.config, core.store, core.metadata_cache, core.replica_manager)
        assert await isr_manager._eligible(7, TP)
        await other.create(offline_replicas_key(7), encode_offline_replicas(["/data"], [TP]), ephemeral=True)
        with trio.fail_after(5):
            while not partition.is_leader:
                await trio.sleep(0.01)
        assert partition.leader_epoch == 1 and partition.isr == {0}
        assert 7 in core.metadata_cache.live_broker_ids()
        assert not await isr_manager._eligible(7, TP)
        assert await isr_manager._eligible(7, TopicPartition("t", 1))  # only the offline replica
        await other.close()


async def test_a_partition_with_no_eligible_leader_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """This broker publishes its own replica of t-0 (replication factor 1) as offline, as after
    its log dir failed: no replica is left to lead it. The controller decides again on every
    change under ``/brokers/`` (each topic created, each ISR update), and used to warn about t-0
    in each of those passes; it warns once, and again only after t-0 had a leader in between."""
    caplog.set_level(logging.WARNING, logger="odradek.broker.controller")
    async with running_broker(tmp_path) as core:
        await create(core, "t")
        controller = core.controller
        assert controller is not None

        def warnings() -> list[str]:
            return [r.getMessage() for r in caplog.records if "t-0 has no eligible leader" in r.getMessage()]

        key = offline_replicas_key(core.config.broker_id)
        await core.store.create(key, encode_offline_replicas(["/data"], [TP]), ephemeral=True)
        for i in range(3):
            await create(core, f"other{i}")
            await controller.elect_offline_leaders()
        assert len(warnings()) == 1, warnings()

        await core.store.delete(key)  # the replica counts again: t-0 has its leader back
        await controller.elect_offline_leaders()
        await core.store.create(key, encode_offline_replicas(["/data"], [TP]), ephemeral=True)
        await controller.elect_offline_leaders()
        await controller.elect_offline_leaders()
        assert len(warnings()) == 2, warnings()


async def test_the_controller_follows_changes_without_listing_the_store_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A term lists ``/brokers/`` once and then keeps that view current from its watch: a
    listing per change made the controller's work grow with the square of the topic count (on
    ZooKeeper a listing walks every znode), and 200 topics took minutes to create there. The view
    is current: broker 7's partition created later still gets a new leader when 7 goes."""
    async with running_broker(tmp_path) as core:
        await create(core, "first")
        listed: list[str] = []
        real_list = core.store.list

        async def counting_list(prefix: str) -> Any:
            listed.append(prefix)
            return await real_list(prefix)

        monkeypatch.setattr(core.store, "list", counting_list)
        for i in range(10):
            await create(core, f"more{i}")
        other, partition = await _led_by_broker_7(core, tmp_path)
        assert partition is not None and partition.leader_id == 7
        await other.close()
        with trio.fail_after(5):
            while not partition.is_leader:
                await trio.sleep(0.01)
        assert WATCHED_PREFIX not in listed, listed


@pytest.mark.parametrize(("resource_type", "name"), [(ConfigResourceType.TOPIC, "t"), (ConfigResourceType.BROKER, "")])
async def test_enabling_unclean_election_elects_a_leader_of_a_leaderless_partition(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, resource_type: ConfigResourceType, name: str
) -> None:
    """Broker 7 led t-0 with only itself in the ISR, then went: this broker's replica is out of
    sync, so t-0 is left without a leader. Setting unclean.leader.election.enable on the topic,
    or as the cluster-wide dynamic broker default (resource name ""), elects this broker right
    away, as Kafka's controller does when either changes. The controller decides again only the
    topics a change under ``/brokers/`` touched (every topic on a broker change), so nothing
    elected t-0 until some broker came or went; and the broker-level key was static."""
    caplog.set_level(logging.WARNING, logger="odradek.broker.controller")
    async with running_broker(tmp_path) as core:
        other, partition = await _led_by_broker_7(core, tmp_path)
        assert partition is not None
        key = partition_state_key("t", 0)
        state = await other.get(key)
        assert state is not None
        await other.put(key, PartitionState(7, 0, (7,), state.version).to_json(), expect=state.version)
        with trio.fail_after(5):
            while core.metadata_cache.topics["t"].states[0].isr != (7,):
                await trio.sleep(0.01)
        await other.close()
        with trio.fail_after(5):
            while not any("t-0 has no eligible leader" in r.getMessage() for r in caplog.records):
                await trio.sleep(0.01)

        unclean = AlterableConfig("unclean.leader.election.enable", AlterConfigOp.SET, "true")
        resource = AlterConfigsResource(resource_type, name, [unclean])
        assert (await core.incremental_alter_configs([resource], False))[0].error == ErrorCode.NONE
        with trio.fail_after(5):
            while not partition.is_leader:
                await trio.sleep(0.01)
        assert (partition.leader_epoch, partition.isr) == (1, {0})
        # the topic describes the value in force and where it comes from
        (described,) = await core.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "t", [unclean.name])])
        (entry,) = described.configs
        source = (
            ConfigSource.DYNAMIC_TOPIC_CONFIG
            if resource_type == ConfigResourceType.TOPIC
            else ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        )
        assert (entry.value, entry.source) == ("true", source)


async def test_a_start_takes_every_topic_from_one_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker's start reads the whole metadata once and takes each topic from that listing:
    re-reading every topic's keys made a start with a thousand topics wait for several
    thousand more reads (seconds on ZooKeeper). The topics, their states and configs are all
    there after the start."""
    async with running_broker(tmp_path) as core:
        for i in range(12):
            await create(core, f"t{i}", partitions=2, **({"retention.ms": "12345"} if i == 3 else {}))
    listed: list[str] = []
    real_list = LocalMetadataStore.list

    async def counting_list(self: LocalMetadataStore, prefix: str) -> Any:
        listed.append(prefix)
        return await real_list(self, prefix)

    monkeypatch.setattr(LocalMetadataStore, "list", counting_list)
    async with running_broker(tmp_path) as core:
        assert [p for p in listed if p.startswith("/brokers/topics/")] == [], listed
        assert sorted(core.metadata_cache.topics) == sorted(f"t{i}" for i in range(12))
        for i in range(12):
            topic = core.metadata_cache.topics[f"t{i}"]
            assert sorted(topic.states) == [0, 1] and all(s.leader == 0 for s in topic.states.values())
        assert core.metadata_cache.topics["t3"].overrides == {"retention.ms": "12345"}
        assert (await produce(core, TopicPartition("t5", 1), batch([b"x"]))).error == ErrorCode.NONE


class _CountingScans(dict):  # type: ignore[type-arg]
    """A dict that counts the full scans of it (iteration, keys, values, items)."""

    scans = 0

    def __iter__(self) -> Any:
        _CountingScans.scans += 1
        return super().__iter__()

    def keys(self) -> Any:
        _CountingScans.scans += 1
        return super().keys()

    def items(self) -> Any:
        _CountingScans.scans += 1
        return super().items()

    def values(self) -> Any:
        _CountingScans.scans += 1
        return super().values()


async def test_a_topic_re_read_finds_its_partitions_without_scanning_every_partition(tmp_path: Path) -> None:
    """Re-reading one topic looks up that topic's hosted partitions in an index: it scanned
    every partition of the broker, so each topic change cost the broker's whole partition count
    (thousands of topics made each change that much slower). The index follows creation,
    deletion and a re-read that drops partitions."""
    async with running_broker(tmp_path) as core:
        for i in range(8):
            await create(core, f"t{i}", partitions=3)
        rm = core.replica_manager
        rm.partitions = _CountingScans(rm.partitions)
        _CountingScans.scans = 0
        await core.metadata_cache.refresh_topic("t5")
        await core.metadata_cache.refresh_topic("gone")  # unknown: nothing hosted
        assert _CountingScans.scans == 0
        assert rm.hosted_partitions("t5") == [0, 1, 2] and rm.hosted_partitions("gone") == []
        result = await core.delete_topics(["t5"], 5000)
        assert result["t5"].error == ErrorCode.NONE
        with trio.fail_after(5):
            while rm.hosted_partitions("t5"):
                await trio.sleep(0.01)
        assert all(tp.topic != "t5" for tp in dict(rm.partitions))
        assert rm.hosted_partitions("t4") == [0, 1, 2]


async def test_a_partition_state_change_is_decided_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change of one partition's state (a leader's ISR update, the controller's own election)
    makes the next pass decide that partition, not its whole topic: a burst of 1,000 of the
    controller's own writes on one topic (a broker's failure) cost a pass over the topic each,
    on the broker's event loop, and on etcd the broker's watches fell seconds behind."""
    async with running_broker(tmp_path) as core:
        await create(core, "big", 50)
        asked: list[dict[str, Any]] = []
        real_view = controller_module.topics_view

        def recording_view(items: Any, names: Any, parsed: Any) -> Any:
            asked.append({name: None if p is None else set(p) for name, p in names.items()})
            return real_view(items, names, parsed)

        monkeypatch.setattr(controller_module, "topics_view", recording_view)
        manager = AlterPartitionManager(core.config, core.store, core.metadata_cache, core.replica_manager)
        assert await manager.alter_isr(TopicPartition("big", 7), (0,))  # a new version, the same ISR
        with trio.fail_after(5):
            while not any("big" in names and names["big"] is not None for names in asked):
                await trio.sleep(0.01)
        assert {"big": {7}} in asked, asked


async def test_a_broker_in_controlled_shutdown_is_not_elected(tmp_path: Path) -> None:
    """Kafka's controller elects among live brokers that are not shutting down, and leaves them
    out of the new ISR: a broker in controlled shutdown is about to go, and leading it would
    move the partition twice. Broker 7 leads t-0 on replicas [7, 8, 0]; broker 8 has started
    its controlled shutdown (still registered, still in the ISR) when 7 dies: this broker (0)
    is elected, not 8, which comes first in assignment order."""
    async with running_broker(tmp_path) as core:
        sessions = []
        for broker in (7, 8):
            session = LocalMetadataStore(tmp_path / FILE_NAME)
            await session.open(6000)
            await session.register_broker(
                broker, registration_json([("PLAINTEXT", "127.0.0.1", 9000 + broker, "PLAINTEXT")], None)
            )
            sessions.append(session)
        with trio.fail_after(5):
            while not {7, 8} <= set(core.metadata_cache.live_broker_ids()):
                await trio.sleep(0.01)
        res = await core.create_topics([CreatableTopic("t", assignments={0: [7, 8, 0]})], 1000, False)
        assert res["t"].error == ErrorCode.NONE
        partition = core.replica_manager.get_partition(TP)
        assert partition is not None and partition.leader_id == 7
        await sessions[1].create(f"{SHUTTING_DOWN_PREFIX}8", b"", ephemeral=True)
        await sessions[0].close()  # broker 7 dies
        with trio.fail_after(5):
            while not partition.is_leader:
                await trio.sleep(0.01)
        state = core.metadata_cache.topics["t"].states[0]
        assert (state.leader, state.leader_epoch, state.isr) == (0, 1, (0,))
        await sessions[1].close()


async def test_a_stopping_broker_hands_its_leadership_to_one_that_is_not_stopping(tmp_path: Path) -> None:
    """A broker's controlled shutdown moves each leadership to the first other live in-sync
    replica that is not itself shutting down (two brokers of a rolling restart stopping at
    once passed partitions to each other), and its new ISR leaves the stopping brokers out, as
    Kafka's controlled shutdown election does."""
    async with running_broker(tmp_path) as core:
        session = LocalMetadataStore(tmp_path / FILE_NAME)
        await session.open(6000)
        for broker in (7, 8):
            await session.register_broker(
                broker, registration_json([("PLAINTEXT", "127.0.0.1", 9000 + broker, "PLAINTEXT")], None)
            )
        with trio.fail_after(5):
            while not {7, 8} <= set(core.metadata_cache.live_broker_ids()):
                await trio.sleep(0.01)
        res = await core.create_topics([CreatableTopic("t", assignments={0: [0, 7, 8]})], 1000, False)
        assert res["t"].error == ErrorCode.NONE
        await session.create(f"{SHUTTING_DOWN_PREFIX}7", b"", ephemeral=True)
        stopping = AlterPartitionManager(core.config, core.store, core.metadata_cache, core.replica_manager)
        assert await stopping.controlled_shutdown() == 1
        stored = await core.store.get(partition_state_key("t", 0))
        assert stored is not None
        state = PartitionState.decode(stored)
        assert (state.leader, state.isr) == (8, (8,))  # Kafka leaves stopping brokers out of it
        await session.close()


async def test_a_controller_term_that_ends_on_an_error_is_followed_by_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A term that fails on something other than the store (here a decision pass that raised)
    campaigns again and wins at once. On the embedded store the campaign waited for the key
    its own session still held, and the broker had no controller for the rest of its life:
    no election for a partition whose leader died, no ElectLeaders, no imbalance checks."""
    async with running_broker(tmp_path) as core:
        controller = core.controller
        assert controller is not None
        real = controller.elect_offline_leaders
        failed: list[bool] = []

        async def failing_once(*args: Any, **kwargs: Any) -> int:
            if not failed:
                failed.append(True)
                raise ValueError("a decision pass failed")
            return await real(*args, **kwargs)

        monkeypatch.setattr(controller, "elect_offline_leaders", failing_once)
        other, partition = await _led_by_broker_7(core, tmp_path)  # its changes run a pass
        assert failed and partition is not None
        await other.close()  # broker 7 dies: only a controller elects this broker
        with trio.fail_after(5):
            while not partition.is_leader:
                await trio.sleep(0.01)
        assert controller.leadership is not None


# -- brokers that come back (Kafka's processBrokerChange: a changed broker epoch is a bounce) ----

REGISTRATION_7 = registration_json([("PLAINTEXT", "127.0.0.1", 9999, "PLAINTEXT")], None)


async def _restart_7_at_once(session: LocalMetadataStore) -> None:
    """Broker 7 restarts between two of the controller's passes: its registration deleted and
    created again in one commit (what a pass may see of a fast restart), a new broker epoch."""
    key = "/brokers/ids/7"
    await session.txn([], [Delete(key), Put(key, REGISTRATION_7, ephemeral=True)])


async def _state_becomes(core: BrokerCore, want: tuple[int, int, tuple[int, ...]]) -> PartitionState:
    with trio.fail_after(5):
        while True:
            stored = await core.store.get(partition_state_key("t", 0))
            assert stored is not None
            state = PartitionState.decode(stored)
            if (state.leader, state.leader_epoch, state.isr) == want:
                return state
            await trio.sleep(0.01)


async def _led_by_7_alone(core: BrokerCore, tmp_path: Path) -> LocalMetadataStore:
    """:func:`_led_by_broker_7` with 7 the only in-sync replica (this broker fell behind)."""
    other, _ = await _led_by_broker_7(core, tmp_path)
    key = partition_state_key("t", 0)
    stored = await core.store.get(key)
    assert stored is not None
    await core.store.put(key, PartitionState(7, 0, (7,), 0).to_json(), expect=stored.version)
    return other


async def test_a_leader_that_restarted_between_two_passes_loses_its_leadership(tmp_path: Path) -> None:
    """Broker 7 leads t-0 (replicas [7, 0], both in sync) and restarts faster than the
    controller's next pass. Its partitions still named it leader at the same epoch, so the new
    process took them on as if nothing happened. Kafka's controller compares broker epochs and
    treats a changed one as a failure and a start: another in-sync replica is elected (epoch + 1)
    and the restarted broker leaves the ISR until it catches up again."""
    async with running_broker(tmp_path) as core:
        other, partition = await _led_by_broker_7(core, tmp_path)
        assert partition is not None and partition.leader_id == 7
        await _state_becomes(core, (7, 0, (7, 0)))
        await _restart_7_at_once(other)
        await _state_becomes(core, (0, 1, (0,)))
        with trio.fail_after(5):
            while not partition.is_leader:
                await trio.sleep(0.01)
        await other.close()


async def test_a_restarted_sole_in_sync_leader_is_elected_again_at_a_new_epoch(tmp_path: Path) -> None:
    """With nobody else in sync, the restarted leader is the one to lead again, as in Kafka, but
    at a new leader epoch (its followers truncate by epoch against its new life), and before any
    unclean election of an out-of-sync replica."""
    async with running_broker(tmp_path) as core:
        other = await _led_by_7_alone(core, tmp_path)
        await _restart_7_at_once(other)
        await _state_becomes(core, (7, 1, (7,)))
        # a pass later (a change elsewhere) does not elect it again
        await create(core, "u")
        controller = core.controller
        assert controller is not None
        await controller.elect_offline_leaders()
        await _state_becomes(core, (7, 1, (7,)))
        await other.close()


async def test_a_follower_that_restarted_leaves_the_isr(tmp_path: Path) -> None:
    """This broker leads t-0 (replicas [0, 7]); follower 7 restarts between two passes: it
    leaves the ISR at the same leader epoch (its log may have lost an unflushed tail), and comes
    back by catching up, as after any failure."""
    async with running_broker(tmp_path) as core:
        other = LocalMetadataStore(tmp_path / FILE_NAME)
        await other.open(6000)
        await other.register_broker(7, REGISTRATION_7)
        with trio.fail_after(5):
            while 7 not in core.metadata_cache.live_broker_ids():
                await trio.sleep(0.01)
        res = await core.create_topics([CreatableTopic("t", assignments={0: [0, 7]})], 1000, False)
        assert res["t"].error == ErrorCode.NONE
        await _state_becomes(core, (0, 0, (0, 7)))
        await _restart_7_at_once(other)
        await _state_becomes(core, (0, 0, (0,)))
        await other.close()


async def test_a_leader_back_from_the_dead_is_elected_at_a_new_epoch(tmp_path: Path) -> None:
    """Broker 7, t-0's only in-sync replica, dies: the partition has no leader. When 7 registers
    again, Kafka's controller elects it (epoch + 1) for its offline partitions; its state had
    kept naming 7 at the old epoch, so nothing was written and the new process led at it."""
    async with running_broker(tmp_path) as core:
        other = await _led_by_7_alone(core, tmp_path)
        controller = core.controller
        assert controller is not None
        await other.close()
        with trio.fail_after(5):
            while 7 in core.metadata_cache.live_broker_ids():
                await trio.sleep(0.01)
        await controller.elect_offline_leaders()  # the pass that finds t-0 leaderless
        again = LocalMetadataStore(tmp_path / FILE_NAME)
        await again.open(6000)
        await again.register_broker(7, REGISTRATION_7)
        await _state_becomes(core, (7, 1, (7,)))
        await again.close()


def test_an_election_passes_over_returned_brokers_while_another_is_in_sync() -> None:
    state = PartitionState(7, 3, (7, 8, 0), 5)
    assert elect_leader((7, 8, 0), state, {7, 8, 0}, False, returned={7}) == PartitionState(8, 4, (8, 0), 5)
    assert elect_leader((7, 8, 0), state, {7, 8, 0}, False, returned={7, 8}) == PartitionState(0, 4, (0,), 5)
    # nobody else in sync: the returned ones, before an unclean election of 0
    alone = PartitionState(7, 3, (7, 8), 5)
    assert elect_leader((7, 8, 0), alone, {7, 8, 0}, True, returned={7, 8}) == PartitionState(7, 4, (7, 8), 5)
    assert elect_leader((7, 8, 0), alone, {0}, True, returned={7, 8}) == PartitionState(0, 4, (0,), 5)
