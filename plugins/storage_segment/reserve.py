"""Reserving an active segment's disk blocks ahead of its data: ``fallocate(2)`` with
``FALLOC_FL_KEEP_SIZE``.

Why: a ``write`` that extends a file makes the filesystem account for a block of every new
page inside that call (ext4's delayed-allocation reservation, for one). Blocks reserved ahead,
one call per step of ``storage.segment.reserve.bytes``, spare each append that work: on the
machine of docs/performance.md a 16 KiB append's ``pwrite`` costs about an eighth less. RocksDB
reserves its files ahead the same way (``fallocate_with_keep_size``); XFS does it on its own.

``KEEP_SIZE`` leaves the file's size alone, so readers, recovery and a segment's ``size`` see
only the data. The reservation is cut when the segment rolls or its log closes, as Kafka trims a
preallocated segment; a crash leaves at most one step past the data, which recovery cuts.

Python's ``os`` has no ``fallocate`` (``os.posix_fallocate`` grows the file, and where the
filesystem cannot reserve, glibc writes zeros instead), so libc's is called through ctypes.
Where there is none (not Linux), :data:`SUPPORTED` is False and segments never reserve.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable

FALLOC_FL_KEEP_SIZE = 0x01

#: errors that say the file's filesystem (or the platform) cannot reserve at all: a segment
#: that gets one stops trying. Any other error (ENOSPC, EDQUOT, EIO) only skips one step; the
#: append then writes without a reservation and meets the condition itself if it persists.
UNSUPPORTED_ERRNOS = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENODEV, errno.EPERM})


def _load_fallocate() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_fallocate = _load_fallocate()

#: whether this platform can reserve blocks without changing a file's size
SUPPORTED = _fallocate is not None


def reserve_blocks(fd: int, offset: int, length: int) -> None:
    """Reserve the blocks of ``[offset, offset + length)`` of ``fd``'s file without changing
    its size (blocks already there stay as they are). Raises OSError with the call's errno."""
    if _fallocate is None:
        raise OSError(errno.ENOSYS, "fallocate is not available on this platform")
    while _fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length) != 0:
        err = ctypes.get_errno()
        if err != errno.EINTR:
            raise OSError(err, os.strerror(err))
