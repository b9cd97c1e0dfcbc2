"""Sync-facade pieces without a broker: record futures (concurrent.futures compatible, completed
from another thread) and the consumer's heartbeat logic under trio's MockClock."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest
import trio
import trio.testing

from odradek.client.accumulator import ProducerBatch
from odradek.client.aio import AsyncConsumer
from odradek.client.coordinator import MemberState
from odradek.client.futures import FutureHub, RecordFuture
from odradek.errors import ErrorCode, KafkaError
from odradek.interfaces import TopicPartition
from odradek.manager import Plugins, build_plugin_manager

TP = TopicPartition("t", 1)


def _batch(hub: FutureHub, n: int) -> ProducerBatch:
    batch = ProducerBatch(TP, 0.0, hub.finished)
    batch.records.extend((None, b"v%d" % i, (), 1000 + i) for i in range(n))
    return batch


def test_record_futures_resolve_from_another_thread() -> None:
    hub = FutureHub()
    batch = _batch(hub, 3)
    futures = [RecordFuture(batch, i, hub) for i in range(3)]
    assert isinstance(futures[0], concurrent.futures.Future)
    assert not futures[0].done() and futures[0].running() and not futures[0].cancel()
    called: list[int] = []
    futures[1].add_done_callback(lambda f: called.append(f.result().offset))
    with pytest.raises(TimeoutError):
        futures[0].result(timeout=0.01)
    threading.Timer(0.05, batch.complete, args=(40,)).start()
    done, pending = concurrent.futures.wait(futures, timeout=5)
    assert len(done) == 3 and not pending
    assert [f.result().offset for f in futures] == [40, 41, 42]
    assert futures[2].result().timestamp == 1002 and called == [41]
    assert [f.result().offset for f in concurrent.futures.as_completed(futures)] != []
    late: list[object] = []
    futures[0].add_done_callback(late.append)  # already done: runs at once
    assert late == [futures[0]]


def test_record_future_errors_and_first_exception() -> None:
    hub = FutureHub()
    batch = _batch(hub, 2)
    futures = [RecordFuture(batch, i, hub) for i in range(2)]
    waiter = threading.Thread(target=lambda: time.sleep(0.05) or batch.fail(KafkaError("nope")))
    waiter.start()
    done, _ = concurrent.futures.wait(futures, timeout=5, return_when=concurrent.futures.FIRST_EXCEPTION)
    waiter.join()
    assert done and isinstance(futures[0].exception(), KafkaError)
    with pytest.raises(KafkaError, match="nope"):
        futures[1].result()
    with pytest.raises(RuntimeError):
        futures[0].set_result(None)


# -- heartbeats under MockClock -------------------------------------------------------------------

PLUGINS = Plugins(build_plugin_manager(entry_points_enabled=False, extra=["odradek.default_assignors"]))


def _stable_consumer(**config: object) -> AsyncConsumer:
    consumer = AsyncConsumer(
        {"bootstrap.servers": "fake:1", "group.id": "g", "heartbeat.interval.ms": 1000, **config},
        plugins=PLUGINS,
        connector=object(),  # never used: the coordinator's requests are replaced below
    )
    coordinator = consumer.coordinator
    coordinator.state = MemberState.STABLE
    coordinator.member_id, coordinator.generation = "m1", 3
    coordinator.rejoin_needed = False
    return consumer


async def test_heartbeats_every_interval_and_flag_rebalances(autojump_clock: trio.testing.MockClock) -> None:
    consumer = _stable_consumer()
    coordinator = consumer.coordinator
    beats: list[float] = []
    answers = [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.UNKNOWN_MEMBER_ID]

    async def heartbeat() -> None:
        beats.append(trio.current_time())
        code = answers[len(beats) - 1]
        if code is not ErrorCode.NONE:
            raise KafkaError("hb", code=code)

    coordinator._heartbeat = heartbeat  # type: ignore[method-assign]
    coordinator.last_poll = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(coordinator.heartbeat_loop)
        await trio.sleep(3.5)
        assert beats == [1.0, 2.0, 3.0] and coordinator.rejoin_needed
        coordinator.last_poll = trio.current_time()
        await trio.sleep(1.0)
        # a fenced generation: the member must rejoin from scratch and its partitions are lost
        assert (
            coordinator.state is MemberState.UNJOINED and coordinator.member_id == "" and coordinator.generation == -1
        )
        nursery.cancel_scope.cancel()


async def test_leaves_the_group_when_poll_stalls(autojump_clock: trio.testing.MockClock) -> None:
    consumer = _stable_consumer(**{"max.poll.interval.ms": 10_000, "session.timeout.ms": 30_000})
    coordinator = consumer.coordinator
    left: list[float] = []

    async def heartbeat() -> None:
        return None

    async def leave() -> None:
        left.append(trio.current_time())
        coordinator.state = MemberState.UNJOINED

    coordinator._heartbeat = heartbeat  # type: ignore[method-assign]
    coordinator.leave = leave  # type: ignore[method-assign]
    coordinator.last_poll = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(coordinator.heartbeat_loop)
        await trio.sleep(30)
        nursery.cancel_scope.cancel()
    assert left == [11.0]  # first heartbeat tick after max.poll.interval.ms without a poll
