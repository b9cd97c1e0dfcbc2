"""Purgatory: requests that wait for a condition or a timeout (Kafka's ``DelayedOperationPurgatory``).

An acks=all produce waits until the high watermark passes its batches; a fetch waits until
``min_bytes`` are readable or ``max_wait_ms`` passes; later, replication and transaction markers
wait the same way. Kafka parks such requests in a map keyed by partition so that the I/O thread is
free, and an append "checks and completes" the operations watching that partition.

In trio the waiting request is simply a task blocked in :meth:`DelayedOperationPurgatory.
try_complete_else_watch`: the operation is registered under its keys, the task sleeps on the
operation's event under a deadline (trio's clock is the timer wheel), and whoever changes a
partition calls :meth:`check_and_complete` with its key, which re-evaluates only the operations
watching that key. Completion happens exactly once: by the condition (``on_complete``), by the
deadline (``on_expiration`` then ``on_complete``) or not at all if the waiting task is cancelled
(client gone, broker shutting down).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

import trio

K = TypeVar("K", bound=Hashable)


class DelayedOperation(ABC):
    """An operation that completes when :meth:`try_complete` finds its condition met, or expires.

    Subclasses implement :meth:`try_complete` (check the condition; if met, call
    :meth:`force_complete` and return its result), :meth:`on_complete` (build the outcome; runs
    exactly once) and :meth:`on_expiration` (note that the deadline passed, before on_complete).
    """

    def __init__(self) -> None:
        self._completed = False
        self._done = trio.Event()
        self.expired = False

    @property
    def is_completed(self) -> bool:
        return self._completed

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the condition; when met, return ``self.force_complete()``, else False."""

    def try_complete_on(self, key: Hashable) -> bool:
        """:meth:`try_complete` after a change to ``key`` alone (the purgatory's wake-ups).

        The default checks everything. An operation watching many keys overrides it to look at
        that key only: a fetch of 5,000 partitions re-read all of them on every append to any.
        """
        return self.try_complete()

    @abstractmethod
    def on_complete(self) -> None:
        """Build the operation's result (called once, by whichever path completes it)."""

    @abstractmethod
    def on_expiration(self) -> None:
        """Called once, before :meth:`on_complete`, when the deadline passed first."""

    def force_complete(self) -> bool:
        """Complete now; False if it was already completed (only the first caller wins)."""
        if self._completed:
            return False
        self._completed = True
        self.on_complete()
        self._done.set()
        return True

    def _expire(self) -> None:
        if not self._completed:
            self.expired = True
            self.on_expiration()
            self.force_complete()


class DelayedOperationPurgatory(Generic[K]):
    """Delayed operations watched by key (a ``TopicPartition`` for produce and fetch)."""

    def __init__(self, name: str) -> None:
        self.name = name
        # dicts as ordered sets: operations complete in the order they were parked
        self._watchers: dict[K, dict[DelayedOperation, None]] = {}

    async def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[K], timeout_ms: float) -> None:
        """Complete ``op`` now if its condition holds, else park it under ``keys`` until a
        :meth:`check_and_complete` on one of them completes it or ``timeout_ms`` passes. When this
        returns, ``op`` is completed (``op.expired`` says how) unless the caller was cancelled."""
        if op.try_complete():
            return
        keys = list(keys)
        for key in keys:
            self._watchers.setdefault(key, {})[op] = None
        try:
            # re-check once watched: nothing can slip in between on trio's single thread, but a
            # subclass's try_complete may have side effects that make it ready now
            if op.try_complete():
                return
            deadline = math.inf if timeout_ms < 0 else timeout_ms / 1000
            with trio.move_on_after(deadline):
                await op._done.wait()
            op._expire()
        finally:
            for key in keys:
                ops = self._watchers.get(key)
                if ops is not None:
                    ops.pop(op, None)
                    if not ops:
                        del self._watchers[key]

    def check_and_complete(self, key: K) -> int:
        """Re-evaluate every operation watching ``key``; returns how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if not op.is_completed and op.try_complete_on(key):
                completed += 1
        return completed

    def watched(self, key: K | None = None) -> int:
        """Operations parked under ``key`` (or under any key when None)."""
        if key is not None:
            return len(self._watchers.get(key, ()))
        return len({op for ops in self._watchers.values() for op in ops})

    def expire_all(self) -> int:
        """Expire every parked operation now (graceful shutdown: answer instead of hanging)."""
        ops = {op for ops in self._watchers.values() for op in ops}
        for op in ops:
            op._expire()
        return len(ops)
