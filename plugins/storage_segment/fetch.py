"""The result of a read: a pinned byte range of one segment file (Kafka's ``FetchDataInfo``).

A fetch response is served with ``os.sendfile`` straight from the page cache, so the read does not
copy anything: it returns (fd, position, length) and pins the segment's descriptor until the
transport calls :meth:`SegmentFetchData.release`, so neither the idle-file cache nor retention nor
the cleaner can close it under the sendfile.
"""

from __future__ import annotations

import os

from odradek.interfaces import FileRange

from .handles import LogFile


class SegmentFetchData:
    """Whole batches ``[position, position + size)`` of one ``.log`` file."""

    __slots__ = ("_fd", "_file", "fetch_offset", "first_batch_offset", "next_offset", "position", "size")

    def __init__(
        self,
        fetch_offset: int,
        first_batch_offset: int,
        size: int,
        file: LogFile | None,
        position: int,
        next_offset: int = -1,
    ):
        self.fetch_offset = fetch_offset
        self.position = position
        self.next_offset = next_offset if size > 0 else -1
        self._file: LogFile | None = None
        self._fd = -1
        if file is not None and size > 0:
            self._fd = file.pin()
            self._file = file
            self.first_batch_offset = first_batch_offset
            self.size = size
        else:
            self.first_batch_offset = -1
            self.size = 0

    def __repr__(self) -> str:
        return (
            f"SegmentFetchData(fetch_offset={self.fetch_offset}, first_batch_offset={self.first_batch_offset}, "
            f"size={self.size})"
        )

    def file_range(self) -> FileRange | None:
        if self._file is None:
            return None
        return FileRange(self._fd, self.position, self.size)

    def to_bytes(self) -> bytes:
        if self.size == 0:
            return b""
        if self._file is None:
            raise ValueError("the fetched range was already released")
        parts: list[bytes] = []
        done = 0
        while done < self.size:
            chunk = os.pread(self._fd, self.size - done, self.position + done)
            if not chunk:
                break  # the log was truncated under a reader: send what is still there
            parts.append(chunk)
            done += len(chunk)
        return b"".join(parts)

    def release(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.unpin()

    def __del__(self) -> None:
        # a transport that forgot release() must not leak a pinned descriptor forever
        if self._file is not None:
            self.release()
