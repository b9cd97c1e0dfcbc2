"""How many bytes of requests a broker holds at once (Kafka's ``queued.max.request.bytes``).

A request frame is read into memory whole and decoded into objects (about 7-12 times its bytes
for requests made of many small entries: a partition list, a topic list). Per connection,
``queued.max.requests`` and the read-ahead bound limit that; the number of connections is
``max.connections``. ``queued.max.request.bytes`` bounds all of them together, as Kafka's
request ``MemoryPool`` does (KIP-72):

- every request frame takes its size from the pool once its size prefix is read and before its
  body is read, and gives it back as soon as its bytes are not needed, as Kafka's request
  channel does: once decoded, or for a Produce (whose records are read from the frame) once
  appended, before any wait for acks. A request parked in a purgatory or a rebalance holds
  none, so it cannot keep out the requests it waits for (the follower Fetch that moves an
  acks=all Produce's high watermark);
- while the frames held reach the limit, connections stop reading requests until memory comes
  back (their clients are slowed by TCP, nothing is refused), in the order they asked;
- like Kafka's broker pool (not "strict"), a frame is admitted while *any* memory is free, so
  one request as big as ``socket.request.max.bytes`` is always served and the pool holds at
  most the limit plus one frame.

One :class:`RequestMemoryPool` belongs to the broker core (``BrokerCore.request_memory``) and is
shared by every listener, whatever its transport. Kafka's default, -1, leaves it unbounded, and
so does odradek's: the unbounded pool costs a request one attribute test.

A request held up by the pool can wait on requests that are themselves waiting for others (a
JoinGroup parked until the rest of its group joins, whose JoinGroups are not read yet). Kafka
has the same trap; the limit should leave room for the requests that park (they are small).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from .config import Config

log = logging.getLogger("odradek.transport")

#: At most one INFO line this often while connections wait for request memory.
WAIT_LOG_INTERVAL_S = 60.0


@dataclass(eq=False, slots=True)
class _Waiter:
    size: int
    granted: bool = False
    event: trio.Event = field(default_factory=trio.Event)


class RequestMemoryPool:
    """Bytes of request frames the broker holds, bounded by ``limit`` (None: unbounded)."""

    def __init__(self, limit: int | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        if limit is not None and limit <= 0:
            limit = None
        #: the bound (``queued.max.request.bytes``), None when unbounded
        self.limit = limit
        #: bytes of frames taken and not given back
        self.used = 0
        self._waiters: deque[_Waiter] = deque()
        self._clock = clock
        self._logged_at: float | None = None

    @classmethod
    def from_config(cls, config: Config) -> RequestMemoryPool:
        """The pool ``queued.max.request.bytes`` asks for (0 or negative: unbounded)."""
        return cls(int(config["queued.max.request.bytes"]))

    @property
    def waiting(self) -> int:
        """Requests waiting for memory."""
        return len(self._waiters)

    @property
    def available(self) -> int | None:
        """Bytes left before the limit (negative once one frame overshot it); None if unbounded."""
        return None if self.limit is None else self.limit - self.used

    async def acquire(self, size: int) -> None:
        """Take ``size`` bytes, waiting while the pool is at its limit (first come, first served).

        Not a checkpoint when memory is free: it runs once per request, and the reader around
        it yields anyway. Cancelled while waiting, it takes nothing (memory handed to it just
        before the cancel goes back to the pool)."""
        if self.limit is None:
            return
        if self.used < self.limit and not self._waiters:
            self.used += size
            return
        waiter = _Waiter(size)
        self._waiters.append(waiter)
        self._log_wait()
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self.release(size)
            else:
                self._waiters.remove(waiter)
            raise

    def release(self, size: int) -> None:
        """Give back ``size`` bytes taken with :meth:`acquire`; wakes the waiters that now fit."""
        if self.limit is None:
            return
        self.used -= size
        if self._waiters:
            self._grant()

    def _grant(self) -> None:
        # hand the memory over here, in order, so a request arriving meanwhile cannot take it
        while self._waiters and self.used < self.limit:  # type: ignore[operator]
            waiter = self._waiters.popleft()
            self.used += waiter.size
            waiter.granted = True
            waiter.event.set()
        if not self._waiters and self._logged_at is not None:
            log.debug("request memory available again: %d of %d bytes held", self.used, self.limit)

    def _log_wait(self) -> None:
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < WAIT_LOG_INTERVAL_S:
            return
        self._logged_at = now
        log.info(
            "request memory full: %d bytes of requests held (queued.max.request.bytes=%d); "
            "%d connection(s) wait to read their next request",
            self.used,
            self.limit,
            len(self._waiters),
        )


__all__ = ["WAIT_LOG_INTERVAL_S", "RequestMemoryPool"]
