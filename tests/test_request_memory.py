"""The broker's request memory pool (Kafka's ``queued.max.request.bytes``): the counting here;
the listener side runs in the transport conformance suite (every transport must honour it), and
a broker process that enforces it at the end."""

from __future__ import annotations

import logging
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from broker_harness import batch, create, running_broker
from client_helpers import fetch_v11_frame, read_response

from odradek.config import ConfigError, default_config
from odradek.interfaces import TopicPartition
from odradek.request_memory import WAIT_LOG_INTERVAL_S, RequestMemoryPool
from odradek.testing.broker import start_broker, unique_topic
from odradek.testing.transport import api_versions_frame


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


# -- config ---------------------------------------------------------------------------------------


def test_the_default_is_kafkas_unbounded_pool() -> None:
    config = default_config()
    assert config["queued.max.request.bytes"] == -1
    pool = RequestMemoryPool.from_config(config)
    assert pool.limit is None and pool.available is None


@pytest.mark.parametrize("value", [0, -1, -5])
def test_zero_or_negative_is_unbounded(value: int) -> None:
    assert RequestMemoryPool.from_config(default_config(queued_max_request_bytes=value)).limit is None


def test_a_bound_comes_from_the_config() -> None:
    pool = RequestMemoryPool.from_config(default_config(queued_max_request_bytes=50_000_000))
    assert pool.limit == 50_000_000 and pool.available == 50_000_000


def test_a_bad_value_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="queued.max.request.bytes"):
        default_config(queued_max_request_bytes="lots")


# -- counting -------------------------------------------------------------------------------------


async def test_an_unbounded_pool_never_waits_and_counts_nothing() -> None:
    pool = RequestMemoryPool()
    for _ in range(3):
        await pool.acquire(1 << 30)
    assert pool.used == 0 and pool.waiting == 0
    pool.release(1 << 30)
    assert pool.used == 0


async def test_any_free_memory_admits_a_frame_so_one_big_request_is_served(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Kafka's broker pool is not strict: a frame bigger than what is left (or than the whole
    limit) goes in while anything is left, so the pool holds at most the limit plus one frame."""
    pool = RequestMemoryPool(100)
    await pool.acquire(99)
    await pool.acquire(1000)  # 1 byte was free
    assert pool.used == 1099 and pool.available == -999
    got = []

    async def third() -> None:
        await pool.acquire(10)
        got.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(third)
        await trio.sleep(5)
        assert got == [] and pool.waiting == 1
        pool.release(1000)  # 99 held: room again
        await trio.sleep(1)
        assert got == [5.0]
    assert pool.used == 109
    pool.release(99)
    pool.release(10)
    assert pool.used == 0 and pool.available == 100


async def test_waiters_are_served_in_order_and_memory_is_handed_over(autojump_clock: trio.testing.MockClock) -> None:
    """Memory given back goes to the waiters in the order they asked, before anyone new: a
    stream of small requests cannot starve a big one. (Each grant here fills the pool, so the
    order they run in is the order they were granted: trio runs woken tasks in any order.)"""
    pool = RequestMemoryPool(100)
    await pool.acquire(100)
    order: list[str] = []

    async def wait_for(name: str, size: int) -> None:
        await pool.acquire(size)
        order.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for, "big", 500)
        await trio.sleep(1)
        nursery.start_soon(wait_for, "small", 100)
        await trio.sleep(1)
        assert pool.waiting == 2
        pool.release(100)
        # the big one was first: it takes the pool (non-strict) and the small one waits on
        assert pool.used == 500 and pool.waiting == 1
        # a newcomer queues behind the waiting one
        nursery.start_soon(wait_for, "late", 100)
        await trio.sleep(1)
        assert order == ["big"] and pool.waiting == 2
        pool.release(500)
        assert pool.used == 100 and pool.waiting == 1  # handed to "small" before it runs
        await trio.sleep(1)
        assert order == ["big", "small"]
        pool.release(100)
    assert order == ["big", "small", "late"]
    assert pool.used == 100


async def test_a_cancelled_waiter_takes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    pool = RequestMemoryPool(10)
    await pool.acquire(10)
    with trio.move_on_after(3):
        await pool.acquire(5)
    assert pool.waiting == 0 and pool.used == 10
    pool.release(10)
    assert pool.used == 0


async def test_memory_handed_to_a_waiter_cancelled_before_it_ran_goes_back() -> None:
    """A waiter can be cancelled and then handed memory before it runs again (one scheduler
    pass): it owns those bytes then and must give them back, or the pool would shrink for good."""
    pool = RequestMemoryPool(10)
    await pool.acquire(10)
    scope = trio.CancelScope()

    async def waiter() -> None:
        with scope:
            await pool.acquire(7)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()  # the waiter is woken with Cancelled, and has not run yet...
        pool.release(10)  # ...when the memory is handed to it
        assert pool.used == 7
    assert scope.cancelled_caught
    assert pool.used == 0 and pool.waiting == 0


async def test_a_wait_is_logged_at_most_once_a_minute(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    pool = RequestMemoryPool(10, clock=trio.current_time)
    await pool.acquire(10)
    caplog.set_level(logging.INFO, logger="odradek.transport")
    for _ in range(3):
        with trio.move_on_after(1):
            await pool.acquire(1)
    lines = [r for r in caplog.records if "request memory full" in r.getMessage()]
    assert len(lines) == 1
    assert "queued.max.request.bytes=10" in lines[0].getMessage()
    await trio.sleep(WAIT_LOG_INTERVAL_S)
    with trio.move_on_after(1):
        await pool.acquire(1)
    assert len([r for r in caplog.records if "request memory full" in r.getMessage()]) == 2


# -- a broker process -----------------------------------------------------------------------------

_SIZE = struct.Struct(">i")


def _answered(sock: socket.socket, timeout_s: float) -> bool:
    sock.settimeout(timeout_s)
    try:
        head = sock.recv(4, socket.MSG_WAITALL)
    except TimeoutError:
        return False
    (size,) = _SIZE.unpack(head)
    body = sock.recv(size, socket.MSG_WAITALL)
    return len(body) == size


@pytest.mark.integration
def test_a_broker_holds_requests_within_queued_max_request_bytes(tmp_path: Path) -> None:
    """A client that sends the start of a big request holds that request's memory: with the
    pool that small, another connection's request is not read until the big one is done."""
    with start_broker(tmp_path, {"queued.max.request.bytes": 200_000}) as broker:
        with (
            socket.create_connection(("127.0.0.1", broker.port), timeout=10) as big,
            socket.create_connection(("127.0.0.1", broker.port), timeout=10) as small,
        ):
            # half of a 1 MB frame: its size prefix is read and its memory taken
            frame = api_versions_frame(3, 1)
            padded = frame + bytes(1_000_000 - len(frame))
            big.sendall(_SIZE.pack(len(padded)) + padded[:500_000])
            time.sleep(0.3)
            small_frame = api_versions_frame(3, 2)
            small.sendall(_SIZE.pack(len(small_frame)) + small_frame)
            assert not _answered(small, 1.0), "a request was read while the request memory was held"
            # the rest of the big frame: it is read and handled (its trailing bytes close that
            # connection), its memory goes back, and the small request is read and answered
            big.sendall(padded[500_000:])
            assert _answered(small, 10.0)
        log = broker.log_path.read_text()
        assert "request memory full" in log and "queued.max.request.bytes=200000" in log


@pytest.mark.integration
def test_a_parked_request_holds_no_request_memory(tmp_path: Path) -> None:
    """A long-poll Fetch gives its frame's memory back once decoded, as Kafka's request channel
    does: parked for thirty seconds, it must not keep another connection's request out of a pool
    it alone fills (a parked acks=all Produce that did would keep out the follower's Fetch that
    moves its high watermark). The other request is answered while the Fetch still waits."""
    topic = unique_topic("parked")
    with start_broker(tmp_path, {"queued.max.request.bytes": 50}) as broker:
        subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", topic], input=b"one", check=True, timeout=60)
        with (
            socket.create_connection(("127.0.0.1", broker.port), timeout=10) as polling,
            socket.create_connection(("127.0.0.1", broker.port), timeout=10) as other,
        ):
            fetch = fetch_v11_frame(1, [(topic, 0, 1)], max_wait_ms=30_000)  # at the end: it waits
            assert len(fetch) > 50
            polling.sendall(fetch)
            time.sleep(0.3)
            started = time.monotonic()
            frame = api_versions_frame(3, 2)
            other.sendall(_SIZE.pack(len(frame)) + frame)
            assert _answered(other, 20.0)
            assert time.monotonic() - started < 20, "the parked Fetch held the request memory"
            # the long poll is still parked: nothing was answered on its connection
            polling.settimeout(0.2)
            with pytest.raises(TimeoutError):
                read_response(polling)


async def test_a_produce_gives_its_frame_back_before_waiting_for_acks(tmp_path: Path) -> None:
    """acks=all waits in the produce purgatory after the append; by then the records are in
    the log and the request's frame is not read again, so its memory is given back first."""
    async with running_broker(tmp_path) as core:
        await create(core, "acked")
        order: list[str] = []
        purgatory = core.replica_manager.produce_purgatory
        watch = purgatory.try_complete_else_watch

        async def noting(*args: Any, **kwargs: Any) -> None:
            order.append("wait")
            await watch(*args, **kwargs)

        purgatory.try_complete_else_watch = noting  # type: ignore[method-assign]
        tp = TopicPartition("acked", 0)
        results = await core.produce(-1, 5000, {tp: batch([b"x"])}, on_appended=lambda: order.append("released"))
        assert results[tp].error == 0
        assert order == ["released", "wait"]
        # refused before any append (bad acks): given back all the same
        order.clear()
        await core.produce(7, 5000, {tp: batch([b"x"])}, on_appended=lambda: order.append("released"))
        assert order == ["released"]
