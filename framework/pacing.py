"""Long loops over a request's entries that leave the event loop to other clients.

A request may name 100k partitions or ids in a megabyte; a handler that walks them in one go
(microseconds per entry) holds the trio thread -- every connection of the broker -- for a
second or more. :func:`paced` yields to the scheduler every so many entries, so other clients
are served between them. Use it where the loop is per entry of a request and the work per
entry is small; one checkpoint costs about a microsecond.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TypeVar

import trio

T = TypeVar("T")

#: entries between checkpoints: ~1-10 ms of per-entry work, a fraction of a microsecond each
PACE = 1024


async def paced(items: Iterable[T], every: int = PACE) -> AsyncIterator[T]:
    """``items``, with a trio checkpoint after every ``every`` of them."""
    n = 0
    for item in items:
        yield item
        n += 1
        if n >= every:
            n = 0
            await trio.lowlevel.checkpoint()


__all__ = ["PACE", "paced"]
