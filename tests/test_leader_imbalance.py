"""The controller's auto leader rebalance (Kafka's ``auto.leader.rebalance.enable``,
``leader.imbalance.check.interval.seconds``, ``leader.imbalance.per.broker.percentage``): the
rules of one check, its schedule under trio's autojump clock, and the checks of a real broker
(meta_local) with a second broker simulated by a second meta_local session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from broker_harness import SlowStore, broker_config, broker_plugins, serving

from odradek.broker.api import CreatableTopic, ElectionType
from odradek.broker.controller import (
    FIRST_IMBALANCE_CHECK_S,
    STATE_WRITES_IN_FLIGHT,
    Controller,
)
from odradek.broker.election import leader_imbalance_moves
from odradek.broker.metadata_cache import PartitionState, partition_state_key, registration_json
from odradek.broker.server import BrokerServer
from odradek.config import ConfigError, default_config
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore
from odradek.sessions import MetadataUnavailable


def _topic(states: dict[int, PartitionState | None], replicas: tuple[int, ...] = (1, 2, 3)) -> Any:
    """(assignment, states) of one topic whose partitions all have ``replicas``."""
    return ({p: replicas for p in states}, {p: s for p, s in states.items() if s is not None})


def test_a_check_moves_back_only_past_the_percentage() -> None:
    led_by_1 = PartitionState(1, 3, (1, 2, 3), 7)
    led_by_2 = PartitionState(2, 4, (2, 3, 1), 8)
    live = {1, 2, 3}
    # broker 1 prefers 10 partitions; 1 led elsewhere is 10%: not over 10%, nothing moves
    one = {"t": _topic({p: led_by_2 if p == 0 else led_by_1 for p in range(10)})}
    assert leader_imbalance_moves(one, live, {}, 10) == []
    assert leader_imbalance_moves(one, live, {}, 9) == [(TopicPartition("t", 0), PartitionState(1, 5, (2, 3, 1), 8))]
    # 2 of 10 is 20%: both move back, epoch + 1, ISR unchanged
    two = {"t": _topic({p: led_by_2 if p < 2 else led_by_1 for p in range(10)})}
    assert [tp.partition for tp, _ in leader_imbalance_moves(two, live, {}, 10)] == [0, 1]
    # a percentage of 100 never moves anything; 0 moves any partition led elsewhere
    assert leader_imbalance_moves({"t": _topic({0: led_by_2})}, live, {}, 100) == []
    assert len(leader_imbalance_moves({"t": _topic({0: led_by_2})}, live, {}, 0)) == 1


def test_a_check_moves_only_to_a_live_in_sync_replica() -> None:
    behind = PartitionState(2, 4, (2, 3), 8)  # broker 1 is out of the ISR
    led_by_2 = PartitionState(2, 4, (2, 3, 1), 8)
    topics = {"t": _topic({0: behind, 1: led_by_2, 2: led_by_2})}
    # all three count towards broker 1's imbalance; only those it can lead move
    assert [tp.partition for tp, _ in leader_imbalance_moves(topics, {1, 2, 3}, {}, 10)] == [1, 2]
    assert leader_imbalance_moves(topics, {2, 3}, {}, 10) == []  # broker 1 is down
    # its replica of t-1 is in a failed log dir: as if it were down, for that partition only
    offline = {TopicPartition("t", 1): {1}}
    assert [tp.partition for tp, _ in leader_imbalance_moves(topics, {1, 2, 3}, offline, 10)] == [2]


def test_a_check_groups_by_preferred_replica() -> None:
    """Each broker's imbalance is its own: partitions preferring broker 2 led by broker 2 do
    not dilute broker 1's, and a partition with no state yet counts in its group only."""
    topics = {
        "a": _topic({0: PartitionState(3, 1, (3, 1), 1), 1: None}, replicas=(1, 3)),
        "b": _topic({p: PartitionState(2, 1, (2, 1), 1) for p in range(8)}, replicas=(2, 1)),
    }
    # broker 1: 1 of 2 led elsewhere (50%); broker 2: 0 of 8
    assert [tp for tp, _ in leader_imbalance_moves(topics, {1, 2, 3}, {}, 49)] == [TopicPartition("a", 0)]
    assert leader_imbalance_moves(topics, {1, 2, 3}, {}, 50) == []


def test_the_imbalance_keys_are_checked() -> None:
    config = default_config()
    assert config["leader.imbalance.check.interval.seconds"] == 300
    assert config["leader.imbalance.per.broker.percentage"] == 10
    with pytest.raises(ConfigError, match="leader.imbalance.check.interval.seconds"):
        default_config(**{"leader.imbalance.check.interval.seconds": 0})
    with pytest.raises(ConfigError, match="leader.imbalance.per.broker.percentage"):
        default_config(**{"leader.imbalance.per.broker.percentage": -1})


async def test_checks_come_5_s_into_a_term_then_every_interval(autojump_clock: trio.testing.MockClock) -> None:
    """Kafka's schedule: the first check 5 s after the controller takes office, then one per
    interval; the keys are read again at each check, so a change applies from the next one."""
    config = {"auto.leader.rebalance.enable": True, "leader.imbalance.check.interval.seconds": 300}
    controller = Controller(config, None, None)  # type: ignore[arg-type]
    checks: list[float] = []

    async def balance_leaders(items: Any = None) -> int:
        checks.append(trio.current_time())
        return 0

    controller.balance_leaders = balance_leaders  # type: ignore[method-assign]
    view = type("View", (), {"items": {}})()
    start = trio.current_time()
    with trio.move_on_after(950):
        await controller._check_imbalance_forever(view)  # type: ignore[arg-type]
    assert [round(t - start) for t in checks] == [FIRST_IMBALANCE_CHECK_S, 305, 605, 905]

    # an interval under 5 s also brings the first check forward; a disabled rebalance skips
    # checks without ending the task
    checks.clear()
    config["leader.imbalance.check.interval.seconds"] = 2

    async def enable_later() -> None:
        config["auto.leader.rebalance.enable"] = False
        await trio.sleep(5)
        config["auto.leader.rebalance.enable"] = True

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(enable_later)
        with trio.move_on_after(9):
            await controller._check_imbalance_forever(view)  # type: ignore[arg-type]
    assert [round(t - start) for t in checks] == [6, 8]

    # a check that finds the store away is logged, and the next one comes as planned
    checks.clear()

    async def unreachable(items: Any = None) -> int:
        checks.append(trio.current_time())
        raise MetadataUnavailable("the store went away")

    controller.balance_leaders = unreachable  # type: ignore[method-assign]
    start = trio.current_time()
    with trio.move_on_after(5):
        await controller._check_imbalance_forever(view)  # type: ignore[arg-type]
    assert [round(t - start) for t in checks] == [2, 4]


async def _until(check: Callable[[], bool], what: str) -> None:
    with trio.fail_after(10):
        while not check():
            await trio.sleep(0.02)
    assert check(), what


@asynccontextmanager
async def _broker_0_and_7(
    tmp_path: Path, partitions: int = 2, **overrides: Any
) -> AsyncIterator[tuple[BrokerServer, LocalMetadataStore]]:
    """A real broker 0 (the controller) with topic t of ``partitions`` on replicas [0, 7], and
    a broker 7 simulated by a metadata session of its own."""
    server = BrokerServer(broker_config(tmp_path, **overrides), broker_plugins())
    async with serving(server) as core:
        other = LocalMetadataStore(tmp_path / FILE_NAME)
        await other.open(6000)
        try:
            await other.register_broker(7, registration_json([("PLAINTEXT", "127.0.0.1", 9, "PLAINTEXT")], None))
            await _until(lambda: 7 in core.metadata_cache.live_broker_ids(), "broker 7 registered")
            assignments = {p: [0, 7] for p in range(partitions)}
            created = await core.create_topics([CreatableTopic("t", assignments=assignments)], 1000, False)
            assert created["t"].error == ErrorCode.NONE
            last = TopicPartition("t", partitions - 1)
            await _until(lambda: core.metadata_cache.leader_of(last) == 0, "t led by broker 0")
            yield server, other
        finally:
            await other.close()


async def _take_over(server: BrokerServer, other: LocalMetadataStore, tp: TopicPartition) -> int:
    """Broker 7 leads ``tp`` (as after a failover), ISR [7, 0]; returns the new leader epoch."""
    assert server.core is not None
    cache = server.core.metadata_cache
    key = partition_state_key(tp.topic, tp.partition)
    v = await other.get(key)
    assert v is not None
    epoch = PartitionState.decode(v).leader_epoch + 1
    await other.put(key, PartitionState(7, epoch, (7, 0), 0).to_json())
    await _until(lambda: cache.leader_of(tp) == 7, f"{tp} led by broker 7")
    return epoch


async def test_a_broker_moves_leaders_back_only_past_the_imbalance(tmp_path: Path) -> None:
    """Broker 0 prefers t-0 and t-1; broker 7 takes t-0 over. 1 of 2 is 50%, not over the 50%
    set: t-0 stays with broker 7 through further checks (the controller's election passes,
    which run on that very change, no longer move it back either). Broker 7 then takes t-1
    too: 100%, and the next check gives both back."""
    settings = {"leader.imbalance.check.interval.seconds": 1, "leader.imbalance.per.broker.percentage": 50}
    async with _broker_0_and_7(tmp_path, **settings) as (server, other):
        core, controller = server.core, server.controller
        assert core is not None and controller is not None
        t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
        await _take_over(server, other, t0)
        seen = controller.imbalance_checks
        await _until(lambda: controller.imbalance_checks >= seen + 2, "two more checks")
        assert core.metadata_cache.leader_of(t0) == 7

        epoch = await _take_over(server, other, t1)
        await _until(lambda: core.metadata_cache.leader_of(t1) == 0, "t-1 back with broker 0")
        await _until(lambda: core.metadata_cache.leader_of(t0) == 0, "t-0 back with broker 0")
        state = core.metadata_cache.topics["t"].states[1]
        assert (state.leader, state.leader_epoch, state.isr) == (0, epoch + 1, (7, 0))
        partition = core.replica_manager.get_partition(t1)
        assert partition is not None and partition.is_leader


async def test_no_checks_with_auto_leader_rebalance_disabled(tmp_path: Path) -> None:
    settings = {"auto.leader.rebalance.enable": False, "leader.imbalance.check.interval.seconds": 1}
    async with _broker_0_and_7(tmp_path, **settings) as (server, other):
        assert server.core is not None and server.controller is not None
        t0 = TopicPartition("t", 0)
        await _take_over(server, other, t0)
        await trio.sleep(2.5)  # past the first check's time, and one interval more
        assert server.core.metadata_cache.leader_of(t0) == 7
        assert server.controller.imbalance_checks == 0


async def test_the_controller_writes_elections_several_at_once(tmp_path: Path) -> None:
    """ElectLeaders and leader-imbalance moves (as the offline-partition elections) write up to
    STATE_WRITES_IN_FLIGHT partition states at once: one at a time, a failover of 1,000
    partitions on ZooKeeper waited a round trip per partition. A store that fails a write
    fails the check with its own error, and nothing more is started."""
    partitions = 3 * STATE_WRITES_IN_FLIGHT
    settings = {"auto.leader.rebalance.enable": False}  # the broker's own controller stays out
    async with _broker_0_and_7(tmp_path, partitions, **settings) as (server, other):
        core, controller = server.core, server.controller
        assert core is not None and controller is not None
        everything = [TopicPartition("t", p) for p in range(partitions)]

        def twin(store: SlowStore) -> Controller:
            """A second controller object in the broker's term (its fence), on ``store``."""
            assert core is not None and controller is not None
            c = Controller(core.config, store, core.metadata_cache)  # type: ignore[arg-type]
            c.leadership = controller.leadership
            return c

        for tp in everything:
            await _take_over(server, other, tp)
        slow = SlowStore(core.store, 0.05)
        elected, answers = await twin(slow).elect_requested(ElectionType.PREFERRED, everything)
        assert (elected, answers) == ({tp: 0 for tp in everything}, {})
        assert slow.most_in_flight == STATE_WRITES_IN_FLIGHT

        for tp in everything:
            await _take_over(server, other, tp)
        failing = SlowStore(core.store, 0.01, fail_at=5)
        with pytest.raises(MetadataUnavailable, match="the store went away"):
            await twin(failing).balance_leaders()
        assert failing.puts < partitions  # the writes after the failure were not started
        slow = SlowStore(core.store, 0.05)
        assert await twin(slow).balance_leaders() == partitions - 4
        assert slow.most_in_flight == STATE_WRITES_IN_FLIGHT
        await _until(lambda: all(core.metadata_cache.leader_of(tp) == 0 for tp in everything), "all back")


async def test_no_moves_while_a_partition_is_being_reassigned(tmp_path: Path) -> None:
    """As Kafka's controller, the leader-imbalance check moves nothing while a reassignment is
    in progress (the target's first replica would lead before the move completes); once it is
    cancelled, the next check moves the leader back."""
    settings = {"auto.leader.rebalance.enable": False}  # the checks below are the only ones
    async with _broker_0_and_7(tmp_path, **settings) as (server, other):
        core, controller = server.core, server.controller
        assert core is not None and controller is not None
        t0 = TopicPartition("t", 0)
        await _take_over(server, other, t0)
        created = await core.create_topics([CreatableTopic("u", assignments={0: [0]})], 1000, False)
        assert created["u"].error == ErrorCode.NONE
        u0 = TopicPartition("u", 0)
        assert (await core.alter_partition_reassignments({u0: [0, 7]}))[u0].error is ErrorCode.NONE
        assert await controller.balance_leaders() == 0  # broker 7 never catches up on u-0
        assert (await core.alter_partition_reassignments({u0: None}))[u0].error is ErrorCode.NONE
        assert await controller.balance_leaders() == 1
        await _until(lambda: core.metadata_cache.leader_of(t0) == 0, "t-0 back with broker 0")
