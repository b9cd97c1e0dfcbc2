"""Bounded use of file descriptors and memory maps across every partition of a broker.

A broker with thousands of partitions has tens of thousands of segment files. Kafka keeps them
all open; we keep only the recently used ones: each ``.log`` file and each index map is a handle
in a least-recently-used cache, opened on first use and closed when the cache is over its budget.
A handle that a fetch has pinned (its ``FileRange`` may still be sendfile'd) is never closed
under the reader; it is closed when released. Deleting or renaming a file does not disturb a
pinned descriptor: the reader keeps reading the old inode, which is why segment files can be
unlinked at once instead of after Kafka's ``file.delete.delay.ms``.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Protocol


class Evictable(Protocol):
    def evict(self) -> bool:
        """Release the resource if nothing pins it; False keeps it in the cache."""
        ...


class HandleCache:
    """An LRU of open resources with a soft capacity (pinned ones may push past it).

    A resource that refuses eviction (a fetch pinned it) leaves the LRU for a side table until
    its last pin is released, and then comes back as the oldest entry. Every eviction pass so
    pops each entry at most once: with pinned entries left in place, a fetch of 5,000 partitions
    (each pinning a file) past a 4,096-file budget re-walked every pinned entry on every file it
    opened, O(n^2), and copying the key list on each pass made every touch over the budget O(n).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("handle cache capacity must be >= 1")
        self.capacity = capacity
        self._lru: OrderedDict[int, Evictable] = OrderedDict()
        #: open resources that refused eviction (pinned), out of the LRU until released
        self._pinned: dict[int, Evictable] = {}
        #: the last item touched (touching it again changes nothing)
        self.newest: Evictable | None = None

    def __len__(self) -> int:
        return len(self._lru) + len(self._pinned)

    def touch(self, item: Evictable) -> None:
        """``item`` was just used (and is open): mark it newest, evict the oldest if over budget."""
        if item is self.newest:
            return
        self.newest = item
        key = id(item)
        if key in self._lru:
            self._lru.move_to_end(key)
            return
        self._pinned.pop(key, None)
        self._lru[key] = item
        if len(self._lru) + len(self._pinned) > self.capacity:
            self._shrink()

    def released(self, item: Evictable) -> None:
        """``item``'s last pin went: it may be evicted again, first in line."""
        key = id(item)
        if self._pinned.pop(key, None) is not None:
            self._lru[key] = item
            self._lru.move_to_end(key, last=False)
            if len(self._lru) + len(self._pinned) > self.capacity:
                self._shrink()

    def discard(self, item: Evictable) -> None:
        self._lru.pop(id(item), None)
        self._pinned.pop(id(item), None)
        if item is self.newest:
            self.newest = None

    def _shrink(self) -> None:
        lru = self._lru
        while len(lru) > 1 and len(lru) + len(self._pinned) > self.capacity:  # never the newest
            key, item = lru.popitem(last=False)
            if not item.evict():
                self._pinned[key] = item


class LogFile:
    """A segment's ``.log`` file: an fd opened on demand, closed by the cache when idle."""

    __slots__ = ("_cache", "_close_pending", "_fd", "_pins", "_retired", "path")

    def __init__(self, path: Path, cache: HandleCache) -> None:
        self.path = path
        self._cache = cache
        self._fd = -1
        self._pins = 0
        self._close_pending = False  # close once the last pin goes
        self._retired = False  # deleted or replaced: never reopen

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    def fd(self) -> int:
        """An open descriptor (read-write), reopening the file if the cache closed it."""
        if self._fd < 0:
            if self._retired:
                raise FileNotFoundError(f"{self.path} was deleted")
            self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        self._close_pending = False
        cache = self._cache
        if cache.newest is not self:  # the common case (the active segment again) skips the call
            cache.touch(self)
        return self._fd

    def pin(self) -> int:
        """The descriptor, guaranteed open until the matching :meth:`unpin`."""
        fd = self.fd()
        self._pins += 1
        return fd

    def unpin(self) -> None:
        self._pins -= 1
        if self._pins == 0:
            if self._close_pending:
                self._close_now()
            else:
                self._cache.released(self)

    def evict(self) -> bool:
        if self._pins:
            return False
        self._close_now()
        return True

    def _close_now(self) -> None:
        self._close_pending = False
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def close(self) -> None:
        """Close now, or when the last pin is released; the object stays reusable unless
        :meth:`retire` was called."""
        self._cache.discard(self)
        if self._pins == 0:
            self._close_now()
        else:
            self._close_pending = True

    def retire(self) -> None:
        """The file is gone from the log (deleted or replaced): close when no reader pins it."""
        self._retired = True
        self.close()
