"""Metadata writes made several at a time, each a round trip to the store.

A leader's ISR changes, a stopping broker's partitions and the controller's elections are one
compare-and-set per partition. Made one after another, a broker failure on a topic of 1,000
partitions waited 1,000 store round trips; Kafka batches them (one AlterPartition request per
leader, the controller's ZooKeeper writes sent together). :func:`each_in_flight` keeps a
bounded number going instead, and stops starting new ones once the store has failed one: the
rest would fail alike, and the caller's next pass proposes them again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import trio

T = TypeVar("T")


async def each_in_flight(
    items: Iterable[T],
    write: Callable[[T], Awaitable[bool]],
    limit: int,
    *,
    catch: type[Exception] = Exception,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Await ``write(item)`` for each item, at most ``limit`` at once, started in order; returns
    how many returned True. Once one has raised ``catch``, or ``stop()`` holds, no more are
    started; the first such error is raised when those in flight have ended (so a caller sees
    the store's own error, as when it wrote one at a time). Other exceptions end the nursery."""
    done = 0
    failed: list[Exception] = []
    limiter = trio.CapacityLimiter(limit)

    async def one(item: T) -> None:
        nonlocal done
        async with limiter:
            if failed or (stop is not None and stop()):
                return
            try:
                if await write(item):
                    done += 1  # not `done += await ...`: that reads it before the await
            except catch as exc:
                failed.append(exc)

    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(one, item)
    if failed:
        raise failed[0]
    return done


__all__ = ["each_in_flight"]
