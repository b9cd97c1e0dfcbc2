"""FrameReader over a real socket pair: big frames arriving in pieces, frames back to back, EOF."""

from __future__ import annotations

import os
import struct
import tracemalloc

import pytest
import trio
import trio.testing

from odradek.plugins.transport_tcp.framing import MAX_SPARE_BYTES, FrameError, FrameReader, FrameTooLarge
from odradek.request_memory import RequestMemoryPool


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def test_big_frame_in_slow_pieces_then_small_frames() -> None:
    a, b = trio.socket.socketpair()
    reader = FrameReader(b, max_frame=8 << 20)
    big = os.urandom(3 << 20)
    wire = _frame(big) + _frame(b"one") + _frame(b"") + _frame(b"two")

    async def send_slowly() -> None:
        view = memoryview(wire)
        step = 100_000
        for i in range(0, len(view), step):  # the reader finds the socket empty between pieces
            await a.send(view[i : i + step])
            await trio.sleep(0.001)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_slowly)
        assert await reader.read_frame() == big
        assert await reader.read_frame() == b"one"
        assert await reader.read_frame() == b""
        assert await reader.read_frame() == b"two"
    a.close()
    assert await reader.read_frame() is None  # EOF between frames
    b.close()


async def test_eof_inside_a_big_frame_is_a_frame_error() -> None:
    a, b = trio.socket.socketpair()
    reader = FrameReader(b, max_frame=8 << 20)
    await a.send(struct.pack(">i", 1 << 20) + b"x" * 200_000)
    a.close()
    with pytest.raises(FrameError, match="inside a frame"):
        await reader.read_frame()
    b.close()


async def test_oversize_frame_is_refused_before_its_body() -> None:
    a, b = trio.socket.socketpair()
    reader = FrameReader(b, max_frame=1024)
    await a.send(struct.pack(">i", 1025))
    with pytest.raises(FrameTooLarge):
        await reader.read_frame()
    a.close()
    b.close()


async def test_frame_larger_than_the_yield_step_from_a_fast_sender() -> None:
    """A 20 MB frame written by another thread as fast as it can: read whole and intact, while
    other tasks of the loop keep running."""
    import socket
    import threading

    raw_a, raw_b = socket.socketpair()
    b = trio.socket.from_stdlib_socket(raw_b)
    reader = FrameReader(b, max_frame=32 << 20)
    body = os.urandom(20 << 20)
    sender = threading.Thread(target=raw_a.sendall, args=(_frame(body) + _frame(b"after"),))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        sender.start()
        assert await reader.read_frame() == body
        assert await reader.read_frame() == b"after"
        nursery.cancel_scope.cancel()
    sender.join()
    assert ticks > 1
    raw_a.close()
    b.close()


async def test_recycled_buffers_carry_the_next_big_frames_intact() -> None:
    """A finished big frame's buffer is reused (no zeroing) for the next big frame of any size
    it can hold in place, and every frame read into it is exactly the bytes sent."""
    a, b = trio.socket.socketpair()
    reader = FrameReader(b, max_frame=8 << 20)
    sizes = [1 << 20, (1 << 20) - 100, (1 << 20) + 50, 700_000, 300_000, 2 << 20, 1 << 20, 70_000]
    bodies = [os.urandom(n) for n in sizes]
    wire = b"".join(_frame(body) for body in bodies)
    seen: list[bytearray] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_send_all, a, wire)
        for body in bodies:
            frame = await reader.read_frame()
            assert frame == body
            seen.append(frame)
            reader.recycle(frame)
    # 1 MB -> 1 MB-100 -> 1 MB+50 (within the headroom) -> 700 kB: one buffer; 300 kB is under
    # half of it and 2 MB over it: new buffers (the first buffer grew as its frame arrived, and
    # CPython's realloc may give it up to ~1.2x its size: 700 kB stays above half of that)
    assert seen[1] is seen[0] and seen[2] is seen[0] and seen[3] is seen[0]
    assert seen[4] is not seen[0] and seen[5] is not seen[4]
    a.close()
    b.close()


async def test_a_very_big_frame_buffer_is_not_kept() -> None:
    """A connection keeps its finished big frame only up to MAX_SPARE_BYTES: a client that sent
    one 50 MB request and stays connected no longer pins 50 MB for the connection's life."""
    a, b = trio.socket.socketpair()
    reader = FrameReader(b, max_frame=4 * MAX_SPARE_BYTES)
    bodies = [os.urandom(2 * MAX_SPARE_BYTES), os.urandom(MAX_SPARE_BYTES // 2)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_send_all, a, b"".join(_frame(body) for body in bodies))
        big = await reader.read_frame()
        assert big == bodies[0]
        reader.recycle(big)
        assert reader._spare is None
        small = await reader.read_frame()
        assert small == bodies[1]
        reader.recycle(small)
        assert reader._spare is small
    a.close()
    b.close()


async def test_a_frame_still_viewed_is_not_reused() -> None:
    """A request whose bytes are still referenced through a memoryview (e.g. kept by a storage
    engine) keeps its buffer: the next frame gets another one and the kept bytes stay intact."""
    a, b = trio.socket.socketpair()
    reader = FrameReader(b, max_frame=8 << 20)
    first, second = os.urandom(1 << 20), os.urandom(1 << 20)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_send_all, a, _frame(first))
        frame = await reader.read_frame()
    kept = memoryview(frame)[1000:2000]
    reader.recycle(frame)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_send_all, a, _frame(second))
        again = await reader.read_frame()
    assert again is not frame and again == second
    assert frame == first and kept == first[1000:2000]
    kept.release()
    a.close()
    b.close()


async def test_a_frame_buffer_grows_with_the_bytes_that_arrive() -> None:
    """A peer that sends the size of a big frame and then little or nothing pins no more than
    about twice what it sent (it used to pin the whole frame, zero-filled, from the size alone:
    14 bytes per connection held 100 MB). As the frame arrives the buffer keeps within twice
    the bytes sent, and the frame read is exactly the bytes sent."""
    a, b = trio.socket.socketpair()
    reader = FrameReader(b, max_frame=128 << 20)
    size = 24 << 20
    body = os.urandom(size)
    wire = memoryview(_frame(body))
    got: list[bytearray | None] = []

    async def read() -> None:
        got.append(await reader.read_frame())

    tracemalloc.start()
    try:
        async with trio.open_nursery() as nursery:
            base = tracemalloc.get_traced_memory()[0]
            nursery.start_soon(read)
            sent = 14  # the size and 10 bytes, then the peer idles
            await _send_all(a, wire[:sent])
            await trio.testing.wait_all_tasks_blocked()
            assert tracemalloc.get_traced_memory()[0] - base < 256 * 1024
            step = 1 << 20
            while sent < len(wire):
                await _send_all(a, wire[sent : sent + step])
                sent = min(sent + step, len(wire))
                await trio.testing.wait_all_tasks_blocked()
                held = tracemalloc.get_traced_memory()[0] - base
                assert held <= 2 * sent + 256 * 1024, (sent, held)
    finally:
        tracemalloc.stop()
    assert got == [body]
    a.close()
    b.close()


async def _send_all(sock: trio.socket.SocketType, data: bytes) -> None:
    view = memoryview(data)
    while view:
        sent = await sock.send(view)
        view = view[sent:]


async def test_frames_take_request_memory_and_a_broken_frame_gives_it_back() -> None:
    """With the broker's request memory (``queued.max.request.bytes``), a frame's size is taken
    before its body is read and belongs to the caller once returned; a frame cut off by its
    peer, small or big, gives its memory back."""
    for body_size in (100, 200_000):
        memory = RequestMemoryPool(1 << 20)
        a, b = trio.socket.socketpair()
        reader = FrameReader(b, max_frame=1 << 20, memory=memory)
        await a.send(_frame(b"first"))
        assert await reader.read_frame() == b"first"
        assert memory.used == 5  # the caller's now: its request is not done
        memory.release(5)
        await a.send(struct.pack(">i", body_size) + bytes(50))
        a.close()
        with pytest.raises(FrameError):
            await reader.read_frame()
        assert memory.used == 0
        b.close()


async def test_a_frame_waiting_for_request_memory_leaves_the_stream_intact() -> None:
    """Cancelled while it waits for memory, the reader has consumed nothing: the next read
    gets the whole frame."""
    memory = RequestMemoryPool(10)
    await memory.acquire(10)
    a, b = trio.socket.socketpair()
    reader = FrameReader(b, max_frame=1 << 20, memory=memory)
    await a.send(_frame(b"body"))
    with trio.move_on_after(0.05) as scope:
        await reader.read_frame()
    assert scope.cancelled_caught and memory.waiting == 0
    assert not reader.waiting_for_memory and not reader.mid_frame
    memory.release(10)
    assert await reader.read_frame() == b"body"
    assert memory.used == 4
    a.close()
    b.close()
