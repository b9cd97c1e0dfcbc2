"""Keyed deadlines for the group coordinator: session expiry, rebalance and sync timeouts.

Kafka parks these as delayed operations in purgatories (heartbeat, rebalance); here every delayed
operation is a key with a deadline and a synchronous callback. Scheduling a key again replaces its
deadline (a heartbeat pushes the session expiry out), cancelling drops it, and one task fires due
callbacks in deadline order. Deadlines are on trio's clock, so tests run them under
``MockClock(autojump_threshold=0)`` without sleeping. Thousands of heartbeats a second cost one
heap push each; stale heap entries are skipped when they surface.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Hashable

import trio

log = logging.getLogger(__name__)


class Timers:
    """Deadline-ordered callbacks keyed by any hashable (e.g. ``("heartbeat", group, member)``)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._entries: dict[Hashable, tuple[float, int, Callable[[], None]]] = {}
        self._seq = itertools.count()
        self._wakeup = trio.Event()

    def schedule(self, key: Hashable, delay_s: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` ``delay_s`` seconds from now unless rescheduled or cancelled first."""
        deadline = trio.current_time() + max(delay_s, 0.0)
        seq = next(self._seq)
        self._entries[key] = (deadline, seq, callback)
        heapq.heappush(self._heap, (deadline, seq, key))
        if self._heap[0][1] == seq:  # new earliest deadline: let the runner re-arm
            self._wakeup.set()

    def cancel(self, key: Hashable) -> None:
        self._entries.pop(key, None)

    def deadline(self, key: Hashable) -> float | None:
        entry = self._entries.get(key)
        return entry[0] if entry is not None else None

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def _pop_due(self, now: float) -> list[Callable[[], None]]:
        due = []
        while self._heap and self._heap[0][0] <= now:
            _, seq, key = heapq.heappop(self._heap)
            entry = self._entries.get(key)
            if entry is not None and entry[1] == seq:
                del self._entries[key]
                due.append(entry[2])
        return due

    def _next_deadline(self) -> float:
        while self._heap:
            _, seq, key = self._heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry[1] == seq:
                return self._heap[0][0]
            heapq.heappop(self._heap)
        return float("inf")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fire callbacks as their deadlines pass, until cancelled."""
        task_status.started()
        while True:
            for callback in self._pop_due(trio.current_time()):
                try:
                    callback()
                except Exception:  # one broken expiry must not stop every other group's timers
                    log.exception("group coordinator timer callback failed")
            self._wakeup = trio.Event()
            with trio.move_on_at(self._next_deadline()):
                await self._wakeup.wait()
