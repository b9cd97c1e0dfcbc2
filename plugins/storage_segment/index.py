"""Kafka's sparse segment indexes: ``.index`` (OffsetIndex) and ``.timeindex`` (TimeIndex).

Both are arrays of fixed-size big-endian entries, memory-mapped on first use. The active
segment's indexes are preallocated to ``segment.index.bytes`` (a sparse file, so unused space
costs nothing) and trimmed to their entries when the segment rolls or the log closes, so a
reopened index knows its entry count from its length. Entries:

- OffsetIndex, 8 bytes: offset relative to the segment's base (int32), file position (int32).
  An entry is written for the batch that starts a new ``index.interval.bytes`` stretch, keyed by
  the batch's *last* offset (as Kafka does), so "the largest entry <= target" is a batch that
  starts at or before the batch holding ``target``.
- TimeIndex, 12 bytes: the largest timestamp so far (int64), and the relative offset of the
  batch that carried it (int32); timestamps only grow.

Space for new entries is allocated with ``posix_fallocate`` before the log write that needs it,
so a full disk surfaces as an error on append, never as SIGBUS on a store into the map.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
from abc import ABC, abstractmethod
from array import array
from pathlib import Path
from typing import ClassVar

from .handles import HandleCache

_ALLOC_STEP = 64 * 1024
INT32_MAX = 0x7FFFFFFF
_FIELDS = 2  # both kinds of entry have two fields
_STORE_BATCH = 256  # pending entries stored per struct call


@functools.lru_cache(maxsize=64)
def _entries_struct(entry_format: str, count: int) -> struct.Struct:
    """``count`` consecutive entries of ``entry_format`` (big-endian), to store them at once."""
    return struct.Struct(">" + entry_format.lstrip(">") * count)


class _Index(ABC):
    """An index file of fixed-size entries; subclasses say what an entry holds."""

    ENTRY: ClassVar[struct.Struct]

    def __init__(self, path: Path, base_offset: int, max_index_size: int, cache: HandleCache, *, writable: bool):
        self.path = path
        self.base_offset = base_offset
        self._cache = cache
        self.writable = writable
        size = self.ENTRY.size
        self.max_entries = max(max_index_size // size, 1)
        self._mm: mmap.mmap | None = None
        self._entries: int | None = None  # unknown until the file is first looked at
        self._allocated = 0
        #: the fields of the last entries counted in ``_entries`` but not yet stored in the map:
        #: appends only count and keep them (a ``pack_into`` per entry was ~5% of a 16 KiB
        #: append); :meth:`_map` stores them before anything reads the index, and the segment
        #: stores them before an fsync and every few hundred appends, which bounds them
        self._pending = array("q")

    # -- mapping ---------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        if self._entries is None:
            self._map()
        return self._entries or 0

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _map(self) -> mmap.mmap | None:
        """The map (None when the file is empty and read-only), mapping it if the cache closed it,
        with every entry appended so far stored in it: every read of entries comes through here."""
        mm = self._mm if self._mm is not None else self._open_map()
        if mm is not None:
            if self._pending:
                self._store_pending(mm)
            self._cache.touch(self)
        return mm

    def _store_pending(self, mm: mmap.mmap) -> None:
        """Write the pending entries (the last ones counted) into the map."""
        pending = self._pending
        assert self._entries is not None
        count = len(pending) // _FIELDS
        esize = self.ENTRY.size
        start = (self._entries - count) * esize
        for i in range(0, count, _STORE_BATCH):
            k = min(_STORE_BATCH, count - i)
            fields = pending[i * _FIELDS : (i + k) * _FIELDS]
            _entries_struct(self.ENTRY.format, k).pack_into(mm, start + i * esize, *fields)
        del pending[:]

    def _open_map(self) -> mmap.mmap | None:
        esize = self.ENTRY.size
        flags = os.O_RDWR | os.O_CREAT if self.writable else os.O_RDONLY
        fd = os.open(self.path, flags | os.O_CLOEXEC, 0o644)
        try:
            length = os.fstat(fd).st_size
            if self._entries is None:
                self._entries = min(length // esize, self.max_entries)
            if self.writable:
                self._allocated = max(self._allocated, min(length, self.max_entries * esize))
                full = self.max_entries * esize
                if length != full:
                    os.ftruncate(fd, max(full, self._entries * esize))
                    length = max(full, self._entries * esize)
            if length == 0:
                return None
            access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
            self._mm = mmap.mmap(fd, length, access=access)
            if hasattr(mmap, "MADV_RANDOM"):
                # lookups are binary searches and appends touch one page at a time: without this,
                # the first fault of a fresh (sparse, preallocated-size) index reads ahead and zeroes
                # a large window -- ~2-7 ms of kernel CPU per new index on Linux 6.x, seconds when
                # a 1,000-partition topic gets its first batches
                self._mm.madvise(mmap.MADV_RANDOM)
        finally:
            os.close(fd)
        return self._mm

    def evict(self) -> bool:
        if self._mm is not None:
            if self._pending:
                self._store_pending(self._mm)
            self._mm.close()
            self._mm = None
        return True

    def _unmap(self) -> None:
        self._cache.discard(self)
        self.evict()

    # -- entries ---------------------------------------------------------------------------
    def _entry(self, i: int) -> tuple[int, int]:
        mm = self._map()
        assert mm is not None
        return self.ENTRY.unpack_from(mm, i * self.ENTRY.size)

    def _search(self, key_index: int, target: int, *, strict: bool = False, after: int = -1, span: int = 0) -> int:
        """Index of the last entry whose field ``key_index`` is <= ``target`` (< when strict), or -1.

        ``after``: an entry the caller knows is at or before the answer (the search starts
        there); ``span``: a guess of how far past it the answer lies, checked with one probe
        before the binary search narrows to it, so a wrong guess costs a wider search, never a
        wrong answer. Sequential fetches pass both and search ~8 entries instead of thousands."""
        lo, hi = 0, self.entries - 1
        found = -1
        if hi < 0:
            return -1
        mm = self._map()
        assert mm is not None
        unpack, size = self.ENTRY.unpack_from, self.ENTRY.size
        if 0 <= after <= hi:
            lo = found = after
            if span > 0 and after + span < hi:
                key = unpack(mm, (after + span) * size)[key_index]
                if key < target or (key == target and not strict):
                    lo = found = after + span
                else:
                    hi = after + span - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            key = unpack(mm, mid * size)[key_index]
            if key < target or (key == target and not strict):
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    @property
    def allocated_entries(self) -> int:
        """Entries whose disk blocks are allocated (writable indexes only)."""
        return self._allocated // self.ENTRY.size if self.writable else 0

    def reserve(self, count: int) -> None:
        """Make sure ``count`` more entries have disk blocks (raises OSError, e.g. ENOSPC).
        Callers that append many entries (recovery) call it per entry, so it also keeps the
        pending entries few."""
        if len(self._pending) >= _STORE_BATCH * _FIELDS:
            self._map()
        esize = self.ENTRY.size
        need = min(self.entries + count, self.max_entries) * esize
        if need <= self._allocated:
            return
        target = min(-(-need // _ALLOC_STEP) * _ALLOC_STEP, self.max_entries * esize)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.posix_fallocate(fd, self._allocated, target - self._allocated)
        finally:
            os.close(fd)
        self._allocated = target

    def _truncate_entries(self, count: int) -> None:
        if self._pending:
            self._map()
        self._entries = max(0, min(count, self.entries))
        self._forget_cached()

    @abstractmethod
    def _forget_cached(self) -> None:
        """Entries were removed: drop anything cached about the last one."""

    def reset(self) -> None:
        """Forget every entry (the index is about to be rebuilt from the log)."""
        self._entries = 0
        del self._pending[:]
        self._forget_cached()

    # -- lifecycle -------------------------------------------------------------------------
    def trim(self) -> None:
        """Shrink the file to its entries and stop writing (the segment rolled)."""
        self.store_pending()
        entries = self.entries
        self._unmap()
        if self.writable:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)  # a rebuilt index may be new
            try:
                os.ftruncate(fd, entries * self.ENTRY.size)
            finally:
                os.close(fd)
            self._allocated = 0
        self.writable = False

    def store_pending(self) -> None:
        """Store the pending entries in the file (before an fsync, a trim, or to bound them)."""
        if self._pending:
            self._map()

    def make_writable(self) -> None:
        """This segment became the active one again (the log was truncated back into it)."""
        if not self.writable:
            if self._entries is None:
                try:
                    length = self.path.stat().st_size
                except FileNotFoundError:
                    length = 0
                self._entries = min(length // self.ENTRY.size, self.max_entries)
            self._unmap()
            self.writable = True

    def close(self) -> None:
        """Unmap; a writable index is trimmed so that reopening finds exactly its entries."""
        if self.writable:
            self.trim()
            self.writable = True
        else:
            self._unmap()

    def delete(self) -> None:
        self._unmap()
        self.path.unlink(missing_ok=True)

    def sanity_error(self, log_size: int) -> str | None:
        """Why the file cannot be trusted (cheap checks only), or None."""
        try:
            length = self.path.stat().st_size
        except FileNotFoundError:
            return "missing"
        esize = self.ENTRY.size
        if length % esize:
            return f"length {length} is not a multiple of {esize}"
        if length // esize > self.max_entries:
            return f"{length // esize} entries, more than the {self.max_entries} allowed"
        if length == 0:
            return None
        first = self._entry(0)
        last = self._entry(length // esize - 1)
        return self._check_entries(first, last, log_size)

    @abstractmethod
    def _check_entries(self, first: tuple[int, int], last: tuple[int, int], log_size: int) -> str | None:
        """Why the first and last entries show the file is corrupt, or None."""


_OFFSET_ENTRY = struct.Struct(">ii")


class OffsetIndex(_Index):
    """Relative offset -> file position of a batch start."""

    ENTRY = _OFFSET_ENTRY

    def _forget_cached(self) -> None:
        """Nothing about offset entries is cached."""

    def append(self, offset: int, position: int) -> None:
        """Add an entry unless the index is full (a sparse index may skip entries). It runs for
        most appended batches: the entry is only counted and kept (see ``_pending``)."""
        n = self._entries if self._entries is not None else self.entries
        if n < self.max_entries:
            pending = self._pending
            pending.append(offset - self.base_offset)
            pending.append(position)
            self._entries = n + 1

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= ``offset``, else (base, 0)."""
        i = self._search(0, offset - self.base_offset)
        if i < 0:
            return self.base_offset, 0
        rel, pos = self._entry(i)
        return self.base_offset + rel, pos

    def slot_at_or_before(self, position: int, *, after: int = -1, span: int = 0) -> tuple[int, int]:
        """(slot, position) of the last entry starting at or before ``position``, else (-1, 0);
        ``after`` and ``span`` narrow the search as in :meth:`_search` (``after`` must start at
        or before ``position``)."""
        i = self._search(1, position, after=after, span=span)
        if i < 0:
            return -1, 0
        return i, self._entry(i)[1]

    def last_entry(self) -> tuple[int, int]:
        n = self.entries
        if n == 0:
            return self.base_offset, 0
        rel, pos = self._entry(n - 1)
        return self.base_offset + rel, pos

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches at or after ``position``."""
        self._truncate_entries(self._search(1, position, strict=True) + 1)

    def _check_entries(self, first: tuple[int, int], last: tuple[int, int], log_size: int) -> str | None:
        if first[0] < 0 or last[0] < first[0]:
            return f"relative offsets run from {first[0]} to {last[0]}"
        if first[1] < 0 or last[1] < first[1] or last[1] >= max(log_size, 1):
            return f"positions run from {first[1]} to {last[1]} in a log of {log_size} bytes"
        return None


class TimeIndex(_Index):
    """Largest timestamp so far -> relative offset of the batch that carried it."""

    ENTRY = struct.Struct(">qi")
    #: the timestamp of the last entry, -1 when there is none; None when not read yet
    _last_timestamp: int | None = None

    def _forget_cached(self) -> None:
        self._last_timestamp = None

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry, or None when empty."""
        n = self.entries
        if n == 0:
            return None
        ts, rel = self._entry(n - 1)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry when ``timestamp`` is larger than the last one (and there is room);
        batches without a timestamp (-1) are never indexed, so a negative entry is corrupt.
        Like OffsetIndex.append, the entry is only counted and kept (see ``_pending``)."""
        last = self._last_timestamp
        if last is None:
            count = self.entries
            last = self._entry(count - 1)[0] if count else -1
            self._last_timestamp = last
        if timestamp > last:
            n = self._entries if self._entries is not None else self.entries
            if n < self.max_entries:
                pending = self._pending
                pending.append(timestamp)
                pending.append(offset - self.base_offset)
                self._entries = n + 1
                self._last_timestamp = timestamp

    def lookup(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry with a timestamp < ``timestamp``, else None:
        every record up to that offset is older than ``timestamp``."""
        i = self._search(0, timestamp, strict=True)
        if i < 0:
            return None
        ts, rel = self._entry(i)
        return ts, self.base_offset + rel

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries pointing at ``offset`` or later."""
        n = self.entries
        keep = n
        while keep and self._entry(keep - 1)[1] + self.base_offset >= offset:
            keep -= 1
        self._truncate_entries(keep)

    def _check_entries(self, first: tuple[int, int], last: tuple[int, int], log_size: int) -> str | None:
        if first[1] < 0 or last[1] < first[1]:
            return f"relative offsets run from {first[1]} to {last[1]}"
        if last[0] < first[0]:
            return f"timestamps run backwards from {first[0]} to {last[0]}"
        return None
