"""One client connection: read requests ahead, process them concurrently where safe, answer in order.

Three kinds of task share a connection's nursery:

- the *reader* reads frames while fewer than ``queued.max.requests`` are in flight (a semaphore:
  when it is exhausted the socket is not read, so a client that pipelines faster than it reads
  responses is slowed by TCP itself), parses the header and starts one handler task per request;
- *handler* tasks run the dispatcher; ``ordered`` APIs wait for the previous ordered request of
  the connection, the others only for the ordered requests before them (see ``Handler``);
- the *writer* takes requests in arrival order, waits for each one's outcome and writes it
  (a frame, or a Fetch envelope whose record slices go out with ``os.sendfile``), then frees its
  in-flight slot. acks=0 Produce has no outcome to write.

Anything a client can get wrong -- framing, an oversized frame, an unknown API, bytes that do not
decode -- closes this connection only, after the responses to earlier requests have been written,
and is logged. ``stop_reading`` starts a graceful close: no new requests, in-flight ones finish.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from odradek.errors import KafkaError, OdradekError
from odradek.protocol import FetchEnvelope, RequestHeader, api_name, parse_request_header

from .apis import Dispatcher, Outcome
from .framing import FrameError, FrameReader, FrameTooLarge, send_all, send_frame, sendfile

log = logging.getLogger("odradek.transport.tcp")

#: Errors that mean "the peer went away or broke the stream": close quietly.
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError, OSError)


@dataclass(eq=False, slots=True)
class _Pending:
    """A request in flight, in the writer's queue."""

    header: RequestHeader
    done: trio.Event = field(default_factory=trio.Event)
    outcome: Outcome = None
    failed: bool = False


class KafkaConnection:
    """Serves Kafka requests on one accepted socket until the peer leaves or the broker stops."""

    def __init__(
        self,
        sock: trio.socket.SocketType,
        dispatcher: Dispatcher,
        *,
        peer: str,
        max_request_bytes: int,
        max_in_flight: int,
        idle_timeout_s: float,
    ) -> None:
        self.sock = sock
        self.dispatcher = dispatcher
        self.peer = peer
        self.reader = FrameReader(sock, max_request_bytes)
        self.idle_timeout_s = idle_timeout_s
        self._slots = trio.Semaphore(max_in_flight)
        self._send, self._receive = trio.open_memory_channel[_Pending](max_in_flight)
        self._read_scope = trio.CancelScope()
        self._last_ordered_done: trio.Event | None = None
        self._queued: list[_Pending] = []  # outcomes not written yet (released on close)
        self.closed = trio.Event()

    def stop_reading(self) -> None:
        """Graceful close: read no further request; earlier ones are answered, then it closes."""
        self._read_scope.cancel()

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop, nursery)
                await self._read_loop(nursery)
        except* _GONE as group:
            log.debug("connection %s closed: %r", self.peer, group.exceptions[0])
        except* Exception:
            # a bug in the transport itself: never let it reach the listener's nursery
            log.exception("connection %s failed", self.peer)
        finally:
            for pending in self._queued:
                _release(pending.outcome)
            self._queued.clear()
            self.sock.close()
            self.closed.set()

    # -- reading ------------------------------------------------------------------------------
    async def _read_loop(self, nursery: trio.Nursery) -> None:
        async with self._send:
            with self._read_scope:
                try:
                    while True:
                        await self._slots.acquire()
                        frame = await self._next_frame()
                        if frame is None:
                            return
                        if not self._start_request(nursery, frame):
                            return
                except _GONE as exc:
                    # the peer reset the connection: answers to earlier requests cannot arrive
                    log.debug("connection %s: read failed: %r", self.peer, exc)
                    nursery.cancel_scope.cancel()

    async def _next_frame(self) -> bytearray | None:
        """The next request frame; None when the connection should stop reading."""
        while True:
            with trio.move_on_after(self.idle_timeout_s) as idle:
                try:
                    return await self.reader.read_frame()
                except FrameTooLarge as exc:
                    log.warning("closing connection %s: %s (socket.request.max.bytes)", self.peer, exc)
                    return None
                except FrameError as exc:
                    log.warning("closing connection %s: %s", self.peer, exc)
                    return None
            if idle.cancelled_caught:
                in_flight = self._in_flight()
                if self.reader.mid_frame or self.reader.buffered or in_flight == 0:
                    log.info(
                        "closing connection %s: idle for %.0f s (connections.max.idle.ms)",
                        self.peer,
                        self.idle_timeout_s,
                    )
                    return None
                # a long-poll or slow request is still being served: not idle

    def _in_flight(self) -> int:
        return len(self._queued)

    def _start_request(self, nursery: trio.Nursery, frame: bytearray) -> bool:
        """Queue a request for the writer and start its handler; False to stop reading."""
        try:
            header = parse_request_header(frame)
            handler = self.dispatcher.handler_for(header)
            self.dispatcher.check(header)
        except (KafkaError, OdradekError) as exc:
            log.warning("closing connection %s: bad request header: %s", self.peer, exc)
            self._slots.release()
            return False
        pending = _Pending(header)
        self._queued.append(pending)
        self._send.send_nowait(pending)  # never blocks: the semaphore bounds the queue
        ordered = handler is None or handler.ordered
        after = self._last_ordered_done
        mine = trio.Event() if ordered else None
        if mine is not None:
            self._last_ordered_done = mine
        nursery.start_soon(self._handle, pending, frame, after, mine)
        return True

    # -- processing ---------------------------------------------------------------------------
    async def _handle(
        self, pending: _Pending, frame: bytearray, after: trio.Event | None, mine: trio.Event | None
    ) -> None:
        header = pending.header
        try:
            if after is not None:
                await after.wait()
            pending.outcome = await self.dispatcher.process(header, frame, self.peer)
        except (KafkaError, OdradekError) as exc:
            log.warning(
                "closing connection %s: %s v%d (correlation id %d) from %r: %s",
                self.peer,
                api_name(header.api_key),
                header.api_version,
                header.correlation_id,
                header.client_id,
                exc,
            )
            pending.failed = True
        except Exception:
            log.exception(
                "closing connection %s: %s v%d failed unexpectedly",
                self.peer,
                api_name(header.api_key),
                header.api_version,
            )
            pending.failed = True
        finally:
            if mine is not None:
                mine.set()
            pending.done.set()

    # -- writing ------------------------------------------------------------------------------
    async def _write_loop(self, nursery: trio.Nursery) -> None:
        async with self._receive:
            async for pending in self._receive:
                await pending.done.wait()
                if pending.failed:
                    nursery.cancel_scope.cancel()
                    return
                outcome = pending.outcome
                try:
                    with trio.move_on_after(self.idle_timeout_s) as cs:
                        await self._write(outcome)
                    if cs.cancelled_caught:
                        log.info("closing connection %s: response not read for %.0f s", self.peer, self.idle_timeout_s)
                        nursery.cancel_scope.cancel()
                        return
                except FrameError as exc:
                    log.error("closing connection %s: %s", self.peer, exc)
                    nursery.cancel_scope.cancel()
                    return
                except _GONE as exc:
                    log.debug("connection %s: write failed: %r", self.peer, exc)
                    nursery.cancel_scope.cancel()
                    return
                finally:
                    _release(outcome)
                    pending.outcome = None
                    self._queued.remove(pending)
                self._slots.release()
        # the reader stopped and every queued response is written: close
        nursery.cancel_scope.cancel()

    async def _write(self, outcome: Outcome) -> None:
        if outcome is None:
            return
        if isinstance(outcome, FetchEnvelope):
            await write_envelope(self.sock, outcome)
        else:
            await send_frame(self.sock, outcome)


async def write_envelope(sock: trio.socket.SocketType, envelope: FetchEnvelope) -> None:
    """Write a Fetch envelope: memory parts as they are, record slices by sendfile when possible."""
    for part in envelope.parts:
        if isinstance(part, bytes):
            await send_all(sock, part)
            continue
        file_range = getattr(part, "file_range", None)
        rng = file_range() if file_range is not None else None
        if rng is None or rng.length != part.size:
            await send_all(sock, part.to_bytes())
        else:
            await sendfile(sock, rng.fd, rng.position, rng.length)


def _release(outcome: Outcome) -> None:
    if isinstance(outcome, FetchEnvelope):
        outcome.release()


__all__ = ["KafkaConnection", "write_envelope"]
