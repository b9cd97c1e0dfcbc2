"""Remote storage calls in worker threads that a cancel abandons instead of waiting for.

A remote storage (an object store, a network mount) can *hang* rather than fail: a call that
never returns. A worker thread cannot be killed, so the broker must never wait on one it no
longer needs: a consumer's read past ``remote.fetch.max.wait.ms``, a copy whose partition is no
longer led here, anything at shutdown. :class:`RemoteCalls` runs each call with trio's
``abandon_on_cancel``: a cancel returns to the caller at once and the thread is left to finish
(or not) by itself. It keeps the capacity limiter's token until it does, so hung threads still
count against their pool (as a hung thread occupies one of Kafka's executor threads) and cannot
pile up beyond it. Each abandoned call is logged and counted (:attr:`RemoteCalls.abandoned`),
and the ones still running are :attr:`RemoteCalls.hung`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import trio

T = TypeVar("T")

log = logging.getLogger(__name__)


class RemoteCalls:
    """Runs remote storage calls in worker threads; counts the ones abandoned (see the module)."""

    def __init__(self) -> None:
        #: calls abandoned by a cancel while their thread ran (a total)
        self.abandoned = 0
        #: abandoned calls whose thread has not returned yet
        self.hung = 0
        self._lock = threading.Lock()

    async def run(self, limiter: trio.CapacityLimiter, what: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread under ``limiter``; a cancel (a timeout, a leadership
        change, shutdown) raises ``trio.Cancelled`` here at once, whatever the thread does.
        ``what`` names the call in the log ("copy_log_segment_data of tiered-0")."""
        state = {"started": False, "done": False, "abandoned": False}

        def work() -> T:
            with self._lock:
                state["started"] = True
            try:
                return fn(*args)
            finally:
                with self._lock:
                    state["done"] = True
                    if state["abandoned"]:
                        self.hung -= 1
                if state["abandoned"]:
                    log.info("remote storage call %s returned after it was abandoned", what)

        try:
            return await trio.to_thread.run_sync(work, limiter=limiter, abandon_on_cancel=True)
        except trio.Cancelled:
            with self._lock:
                running = state["started"] and not state["done"]
                if running:
                    state["abandoned"] = True
                    self.abandoned += 1
                    self.hung += 1
            if running:
                log.warning("remote storage call %s abandoned (its worker thread is still running)", what)
            raise


__all__ = ["RemoteCalls"]
