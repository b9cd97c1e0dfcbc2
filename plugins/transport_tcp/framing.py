"""Kafka framing over a trio socket: size-prefixed frames in, bytes and file ranges out.

Reading uses ``recv_into`` with a small read-ahead buffer for the many small requests, and reads
a large frame straight into its own buffer (one copy from the kernel, no reassembly). The size
limit is checked as soon as the 4 size bytes arrive, before any of the body is read. A large
frame's buffer grows with the bytes that actually arrive (see ``FrameReader._read_into``): the
size prefix alone pins no memory.

Writing is plain ``send`` loops plus :func:`sendfile`: trio has no sendfile helper, so it calls
``os.sendfile`` on the non-blocking socket and waits with ``trio.lowlevel.wait_writable`` when
the kernel's send buffer is full.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from odradek.request_memory import RequestMemoryPool

if TYPE_CHECKING:
    from .transport_layer import TransportLayer

_SIZE = struct.Struct(">i")
#: Bytes a big frame's reader takes from a socket that always has data before letting others run.
_YIELD_BYTES = 8 << 20
#: The least a big frame's buffer starts with; it doubles as the bytes arrive.
_FIRST_BIG_BUFFER = 64 * 1024
#: The largest finished frame buffer a connection keeps for its next big frame (see
#: ``FrameReader.recycle``): a 1 MB Produce stream reuses its buffer, while one 50 MB request
#: does not pin 50 MB for as long as its connection stays open.
MAX_SPARE_BYTES = 4 << 20
#: CPython's ``PyByteArray_Resize`` (stable C API): sets a bytearray's length without writing the
#: new bytes, which the socket is about to overwrite; growing through Python (``+= bytes(n)``)
#: writes zeros first and made a fresh 16-100 MB frame 1.6-2.3x slower to receive.
_bytearray_resize = ctypes.pythonapi.PyByteArray_Resize
_bytearray_resize.argtypes = (ctypes.py_object, ctypes.c_ssize_t)
_bytearray_resize.restype = ctypes.c_int


class FrameError(Exception):
    """The peer broke the framing: a negative or oversized length, or EOF inside a frame."""


class PeerClosed(FrameError):
    """The peer closed its side of the connection (EOF) inside a frame."""


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class FrameReader:
    """Reads whole frames (without their size prefix) from a trio socket, through its transport
    layer (``layer``: PLAINTEXT's when not given, TLS's for an SSL connection)."""

    def __init__(
        self,
        sock: trio.socket.SocketType,
        max_frame: int,
        buffer_size: int = 64 * 1024,
        *,
        memory: RequestMemoryPool | None = None,
        layer: TransportLayer | None = None,
    ) -> None:
        if layer is None:
            from .transport_layer import PlaintextTransportLayer  # it builds on this module's writers

            layer = PlaintextTransportLayer(sock)
        self.sock = sock
        #: non-blocking read into a buffer (``BlockingIOError`` when nothing is there), and the wait
        self._read = layer.read_into
        self._wait_readable = layer.wait_readable
        self.max_frame = max_frame
        #: the broker's request memory (``queued.max.request.bytes``): each frame takes its size
        #: before its body is read; the caller gives it back when the request is done
        self.memory = memory if memory is not None and memory.limit is not None else None
        #: True while the next frame waits for request memory (the connection is not idle)
        self.waiting_for_memory = False
        self._buf = bytearray(buffer_size)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        #: a finished big frame's buffer, handed out again for the next big frame (see recycle)
        self._spare: bytearray | None = None
        #: True while part of a frame has been consumed (a cancel then leaves the stream unusable)
        self.mid_frame = False

    @property
    def buffered(self) -> int:
        return self._end - self._start

    async def _fill(self, need: int) -> bool:
        """Buffer at least ``need`` bytes; False on EOF before that."""
        while self._end - self._start < need:
            if self._end == len(self._buf) or len(self._buf) - self._start < need:
                # compact: move what is left to the front
                n = self._end - self._start
                self._buf[:n] = self._buf[self._start : self._end]
                self._start, self._end = 0, n
            try:
                # straight from the non-blocking socket: trio's recv_into takes two scheduler
                # passes even when the bytes are there (pipelined requests usually are)
                got = self._read(self._view[self._end :])
            except BlockingIOError:
                await self._wait_readable()
                continue
            if got == 0:
                return False
            self._end += got
        return True

    async def read_frame(self) -> bytearray | None:
        """The next frame; None on EOF between frames. Raises ``FrameError`` on broken framing.

        With a request memory pool, a frame's size is taken from it before its body is read (the
        wait leaves the stream as it was, so a cancel there is clean) and belongs to the caller
        once the frame is returned; a read that fails after that gives it back."""
        if not await self._fill(4):
            if self.buffered:
                raise PeerClosed("connection closed inside a frame size")
            return None
        (size,) = _SIZE.unpack_from(self._buf, self._start)
        if size < 0:
            self.mid_frame = True
            raise FrameError(f"negative frame size {size}")
        if size > self.max_frame:
            self.mid_frame = True
            raise FrameTooLarge(size, self.max_frame)
        memory = self.memory
        if memory is not None:
            self.waiting_for_memory = True
            try:
                await memory.acquire(size)
            finally:
                self.waiting_for_memory = False
        self.mid_frame = True
        self._start += 4
        try:
            if size <= len(self._buf):
                if not await self._fill(size):
                    raise PeerClosed("connection closed inside a frame")
                frame = bytearray(self._view[self._start : self._start + size])
                self._start += size
            else:
                have = self.buffered
                frame = self._big_buffer(size, have)
                frame[:have] = self._view[self._start : self._end]
                self._start = self._end = 0
                frame = await self._read_into(frame, have, size)
        except BaseException:
            if memory is not None:
                memory.release(size)
            raise
        self.mid_frame = False
        return frame

    def recycle(self, frame: bytearray) -> None:
        """Take back a big frame whose request is done, to read the next big frame into.

        A fresh buffer costs an allocation, a realloc per doubling as its frame arrives and fresh
        pages (a zeroed ``bytearray(size)`` was 6% of the broker's CPU at 1 MB Produce requests);
        the spare is already grown and paged in. Buffers over ``MAX_SPARE_BYTES`` are not kept.
        The buffer is kept only if nothing still
        looks into it: a bytearray with a live memoryview cannot be resized, so the trial shrink
        raises ``BufferError`` and the buffer is left to its holder. Anything that must keep
        request bytes beyond its call (a storage engine that holds batches in memory) copies them.
        """
        if len(frame) <= len(self._buf) or frame.__alloc__() > MAX_SPARE_BYTES:
            return
        try:
            del frame[len(frame) - 1 :]
        except BufferError:
            return
        spare = self._spare
        if spare is None or frame.__alloc__() > spare.__alloc__():
            self._spare = frame

    def _big_buffer(self, size: int, have: int) -> bytearray:
        """The buffer to read a frame of ``size`` bytes into, ``have`` of which are buffered
        already; its content will be overwritten. The spare, at ``size`` bytes, when its
        allocation can hold ``size`` without a realloc (CPython resizes in place between half
        the allocation and all of it): that memory is the connection's already. Else a new
        buffer of twice what has arrived (at least ``_FIRST_BIG_BUFFER``), which ``_read_into``
        grows as more arrives: a peer that sends a 100 MB size and then nothing gets 64 KiB."""
        spare = self._spare
        if spare is not None:
            alloc = spare.__alloc__()
            if alloc // 2 <= size < alloc:
                self._spare = None
                _bytearray_resize(spare, size)  # in place: size is within its allocation
                return spare
        frame = bytearray()
        _grow(frame, min(size, max(2 * have, _FIRST_BIG_BUFFER)), size)
        return frame

    async def _read_into(self, frame: bytearray, have: int, size: int) -> bytearray:
        """Fill ``frame`` from byte ``have`` on to ``size`` bytes; returns it.

        While the frame is longer than its buffer, the buffer doubles (up to ``size``, the new
        bytes unwritten until the socket fills them) each time it is full, so the memory a
        frame holds is at most about twice what its peer has sent: a size prefix pins nothing
        on its own (Kafka allocates the whole request from its size, bounded by
        ``queued.max.request.bytes``). The bytes still go straight from the kernel into the
        frame; the cost is a realloc per doubling (glibc moves large blocks with ``mremap``),
        only for a frame that does not fit the recycled spare.

        Reads with ``os.readv`` while the kernel has data and waits for readability only when it
        has none: trio's ``recv_into`` takes a scheduler pass per call even when data is there,
        and a 1 MB produce request arrives in many socket-buffer-sized pieces (a fifth of a
        broker's CPU at 1 KiB records went there). Every ``_YIELD_BYTES`` it lets other tasks
        run, so a fast sender of a big frame (up to ``socket.request.max.bytes``) cannot hold
        the event loop for the whole frame."""
        read = self._read
        since_yield = 0
        while have < size:
            if have == len(frame):
                # no memoryview of the frame is alive here (each read's view is a temporary),
                # so the bytearray may resize
                _grow(frame, min(size, 2 * have), size)
            try:
                got = read(memoryview(frame)[have:])
            except BlockingIOError:
                await self._wait_readable()
                since_yield = 0
                continue
            if got == 0:
                raise PeerClosed("connection closed inside a frame")
            have += got
            since_yield += got
            if since_yield >= _YIELD_BYTES:
                await trio.lowlevel.checkpoint()
                since_yield = 0
        return frame


def _grow(frame: bytearray, length: int, size: int) -> None:
    """Extend ``frame`` to ``length`` bytes of a ``size``-byte frame, the new bytes unwritten
    (the caller fills them from the socket before anyone sees the frame; a recycled spare holds
    an earlier frame's bytes the same way). At ``size`` its allocation gets a sixteenth more, so
    that recycled as the spare it holds the next, slightly bigger, frame in place (see
    ``FrameReader._big_buffer``)."""
    extra = size >> 4 if length == size else 0
    _bytearray_resize(frame, length + extra)
    if extra:
        del frame[length:]


OnBlock = Callable[[], None] | None


async def send_all(
    sock: trio.socket.SocketType, data: bytes | bytearray | memoryview, on_block: OnBlock = None
) -> None:
    """Write every byte of ``data``: straight to the non-blocking socket, waiting (and calling
    ``on_block``) only when the kernel's send buffer is full.

    Why not trio's ``send``: it takes two scheduler passes per call even when the socket takes
    the bytes at once, and a broker answering 10,000 small requests a second writes 20,000 times.
    The writer's other awaits (the next response, its outcome) still yield to the loop.
    """
    view = memoryview(data)
    fd = sock.fileno()
    while view:
        try:
            sent = os.write(fd, view)
        except BlockingIOError:
            if on_block is not None:
                on_block()
            await trio.lowlevel.wait_writable(sock)
            continue
        view = view[sent:]


async def send_frame(sock: trio.socket.SocketType, frame: bytes | bytearray, on_block: OnBlock = None) -> None:
    """Write a frame with its size prefix (small frames in one write) to a PLAINTEXT socket."""
    from .transport_layer import PlaintextTransportLayer, write_frame  # it builds on this module's writers

    await write_frame(PlaintextTransportLayer(sock), frame, on_block)


async def sendfile(sock: trio.socket.SocketType, fd: int, offset: int, count: int, on_block: OnBlock = None) -> None:
    """Send ``count`` bytes of file ``fd`` from ``offset`` to the socket with ``os.sendfile``,
    waiting (and calling ``on_block``) only when the socket's send buffer is full.

    Raises ``FrameError`` if the file ends early (truncated under us): the frame size is already
    on the wire, so the connection cannot be saved and must be closed.
    """
    out = sock.fileno()
    while count > 0:
        try:
            sent = os.sendfile(out, fd, offset, count)
        except BlockingIOError:
            if on_block is not None:
                on_block()
            await trio.lowlevel.wait_writable(sock)
            continue
        if sent == 0:
            raise FrameError(f"file ended {count} bytes early during sendfile")
        offset += sent
        count -= sent


__all__ = ["FrameError", "FrameReader", "FrameTooLarge", "OnBlock", "PeerClosed", "send_all", "send_frame", "sendfile"]
