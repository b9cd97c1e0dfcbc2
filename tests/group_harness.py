"""Shared harness for the group coordinator's unit tests: a coordinator on an in-memory
``__consumer_offsets``, run in a nursery on trio's (mock) clock, and helpers to drive it as clients do."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio

from odradek.broker.group import (
    UNKNOWN_MEMBER_ID,
    GroupCoordinator,
    InMemoryOffsetsLog,
    JoinGroupResult,
)
from odradek.broker.group.consumer_coordinator import PartitionRacks, TopicLookup
from odradek.config import default_config
from odradek.consumer_protocol import Assignment, Subscription, encode_assignment, encode_subscription
from odradek.errors import ErrorCode
from odradek.interfaces import TopicPartition

GROUP = "g"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
WALL_BASE_MS = 1_700_000_000_000


def clock_ms() -> int:
    return WALL_BASE_MS + int(trio.current_time() * 1000)


def make_config(**overrides: Any) -> Any:
    settings = {
        "group_initial_rebalance_delay_ms": 0,
        "group_min_session_timeout_ms": 1000,
        "offsets_topic_num_partitions": 4,
    }
    settings.update(overrides)
    return default_config(**settings)


@asynccontextmanager
async def running(
    log: InMemoryOffsetsLog | None = None,
    *,
    topics: TopicLookup | None = None,
    all_topics: Callable[[], Iterable[str]] = tuple,
    partition_racks: PartitionRacks = lambda name: {},
    **config: Any,
) -> AsyncIterator[tuple[GroupCoordinator, trio.Nursery]]:
    """A running coordinator; ``topics`` resolves KIP-848 groups' subscribed topic names and
    ``all_topics`` lists what their regexes may match."""
    offsets_log = log if log is not None else InMemoryOffsetsLog(num_partitions=4)
    coordinator = GroupCoordinator(
        offsets_log, make_config(**config), now_ms=clock_ms, topics=topics, all_topics=all_topics,
        partition_racks=partition_racks,
    )  # fmt: skip
    async with trio.open_nursery() as nursery:
        await nursery.start(coordinator.run)
        await coordinator.wait_for_loads()  # a restarted coordinator's partitions load in the background
        found = await coordinator.find_coordinator(GROUP)
        assert found.error == ErrorCode.NONE
        yield coordinator, nursery
        nursery.cancel_scope.cancel()


class Pending:
    """A request running in the background; ``await pending.result()`` when it answered."""

    def __init__(self) -> None:
        self.value: Any = None
        self.done = trio.Event()

    async def result(self) -> Any:
        await self.done.wait()
        return self.value


def spawn(nursery: trio.Nursery, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Pending:
    pending = Pending()

    async def run() -> None:
        pending.value = await fn(*args, **kwargs)
        pending.done.set()

    nursery.start_soon(run)
    return pending


def protocols(*names: str, topics: tuple[str, ...] = ("t",)) -> list[tuple[str, bytes]]:
    data = encode_subscription(Subscription(list(topics)))
    return [(name, data) for name in names]


def join(
    coordinator: GroupCoordinator,
    member_id: str = UNKNOWN_MEMBER_ID,
    *,
    instance: str | None = None,
    protos: list[tuple[str, bytes]] | None = None,
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    require_known: bool = False,
    protocol_type: str = "consumer",
    group: str = GROUP,
) -> Awaitable[JoinGroupResult]:
    return coordinator.join_group(
        group, member_id, instance, require_known, "client", "/127.0.0.1",
        rebalance_ms, session_ms, protocol_type, protos if protos is not None else protocols("range"),
    )  # fmt: skip


def assignment_bytes(*partitions: int) -> bytes:
    return encode_assignment(Assignment([TopicPartition("t", p) for p in partitions]))


async def join_and_sync_alone(coordinator: GroupCoordinator, **kwargs: Any) -> JoinGroupResult:
    joined = await join(coordinator, **kwargs)
    assert joined.error == ErrorCode.NONE
    synced = await coordinator.sync_group(
        GROUP, joined.generation_id, joined.member_id, kwargs.get("instance"), "consumer", joined.protocol_name,
        {joined.member_id: assignment_bytes(0, 1)},
    )  # fmt: skip
    assert synced.error == ErrorCode.NONE
    return joined
