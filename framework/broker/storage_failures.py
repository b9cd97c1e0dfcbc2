"""Rate-limited logging of storage failures (disk full, I/O errors).

A full disk is a known, lasting condition: every append, checkpoint and snapshot fails with the
same ``ENOSPC`` until an operator frees space. Logging each failure (with a traceback) buries the
one line that matters, so :class:`StorageFailureLog` logs, per key (a log dir, a checkpoint):
one ERROR when failures start (naming the key, the operation and the OS error), at most one
ERROR per ``interval_s`` while they go on (with how many failed meanwhile), and one INFO when the
operation works again. Kafka's ``LogDirFailureChannel`` takes a failed dir offline instead; a
broker on a full disk here keeps serving reads and recovers by itself once space is freed.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

#: how often a lasting failure is logged again
FAILURE_LOG_INTERVAL_S = 60.0


def os_error_of(exc: BaseException) -> OSError | None:
    """The ``OSError`` behind ``exc`` (itself, or in its cause/context chain), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def describe_os_error(exc: BaseException) -> str:
    """``errno 28 ENOSPC`` for an OSError behind ``exc``, else ``""``."""
    os_error = os_error_of(exc)
    if os_error is None or os_error.errno is None:
        return ""
    return f"errno {os_error.errno} {errno.errorcode.get(os_error.errno, '?')}"


def one_line(exc: BaseException) -> str:
    """``exc``'s message with its OS error named (``...: [Errno 28] ... (errno 28 ENOSPC)``)."""
    text = str(exc) or type(exc).__name__
    code = describe_os_error(exc)
    return f"{text} ({code})" if code else text


@dataclass
class _Failing:
    since: float
    last_logged: float
    suppressed: int = 0


class StorageFailureLog:
    """Storage failures of one kind (``what``: "appends", "checkpoints") logged per key."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        interval_s: float = FAILURE_LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.what = what
        self.interval_s = interval_s
        self.clock = clock
        self._failing: dict[str, _Failing] = {}

    @property
    def active(self) -> bool:
        """Whether any key is failing (cheap: the hot path asks before naming its key)."""
        return bool(self._failing)

    @property
    def failing(self) -> frozenset[str]:
        """The keys failing now."""
        return frozenset(self._failing)

    def is_failing(self, key: str) -> bool:
        return key in self._failing

    def failed(self, key: str, exc: BaseException, count: int = 1) -> None:
        """``count`` failures under ``key``, the last with ``exc`` (more than one when they were
        held back and are logged together, as append failures wait for a log-dir check)."""
        now = self.clock()
        state = self._failing.get(key)
        if state is None:
            self._failing[key] = _Failing(now, now, count - 1)
            self.logger.error("%s in %s failing: %s", self.what, key, one_line(exc))
            return
        if now - state.last_logged < self.interval_s:
            state.suppressed += count
            return
        self.logger.error(
            "%s in %s still failing after %.0f s (%d more failures): %s",
            self.what, key, now - state.since, state.suppressed + count, one_line(exc),
        )  # fmt: skip
        state.last_logged = now
        state.suppressed = 0

    def succeeded(self, key: str) -> None:
        state = self._failing.pop(key, None)
        if state is not None:
            self.logger.info("%s in %s work again (failed for %.0f s)", self.what, key, self.clock() - state.since)

    def forget(self, key: str) -> None:
        """Stop counting ``key`` as failing without saying it works again: its work stopped
        here for another reason (the partition moved away, or is no longer led or tiered)."""
        self._failing.pop(key, None)


__all__ = ["FAILURE_LOG_INTERVAL_S", "StorageFailureLog", "describe_os_error", "one_line", "os_error_of"]
