"""One etcd watch as a trio async iterator of ``WatchResponse`` messages, over its own gRPC stream.

etcd3's own ``add_watch_callback`` multiplexes every watch over one stream with one callback
thread, so one slow consumer stalls them all, and after a stream error it re-opens the stream in a
tight loop while the server is down. Instead each :class:`WatchStream` opens its own bidirectional
``Watch`` call on the client's channel (HTTP/2 multiplexes them on one connection) and pumps the
responses from a daemon thread into a zero-buffer memory channel: the thread blocks until the
consumer takes a response, so a slow consumer slows only its own stream (and etcd's per-watcher
buffering absorbs the rest) -- backpressure instead of an unbounded queue.

Stream errors and server-side cancellation end the iteration with :class:`WatchStreamBroken`;
compaction of the requested start revision raises ``MetadataCompacted``, as does a start revision
beyond etcd's current one (the store went back: restarted empty or replaced), which etcd would
otherwise accept and answer with silence. The caller re-creates
the stream from its last revision + 1 (store.py), which keeps the event sequence gap-free.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import grpc
import trio
from etcd3 import etcdrpc

from odradek.interfaces import MetadataCompacted


class WatchStreamBroken(Exception):
    """The watch stream failed or was cancelled by the server: re-create it from last revision + 1."""


class WatchStream:
    """A single etcd ``Watch`` call, consumed with ``async for response in stream.responses()``."""

    def __init__(
        self,
        stub: Any,
        key: bytes,
        range_end: bytes | None,
        start_revision: int,
        call_options: dict[str, Any],
    ) -> None:
        create = etcdrpc.WatchCreateRequest(key=key, start_revision=start_revision)
        if range_end is not None:
            create.range_end = range_end
        self._request = etcdrpc.WatchRequest(create_request=create)
        self._start_revision = start_revision
        self._stub = stub
        self._call_options = call_options
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._call: Any = None
        self._cancelled = False
        self._token = trio.lowlevel.current_trio_token()

    def _requests(self) -> Iterator[Any]:
        """The request side: the create request, then stay open until cancelled."""
        yield self._request
        self._stop.wait()

    def _pump(self, send: trio.MemorySendChannel[Any]) -> None:
        """Thread body: forward every response (or the stream's error) into trio."""
        try:
            with self._lock:
                if self._cancelled:
                    return
                self._call = self._stub.Watch(self._requests(), **self._call_options)
            try:
                for response in self._call:
                    trio.from_thread.run(send.send, response, trio_token=self._token)
            except grpc.RpcError as exc:
                if not self._cancelled:
                    trio.from_thread.run(send.send, exc, trio_token=self._token)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.RunFinishedError, trio.Cancelled):
            pass  # the consumer went away
        finally:
            self.cancel()
            try:
                trio.from_thread.run_sync(send.close, trio_token=self._token)
            except trio.RunFinishedError:
                pass

    def cancel(self) -> None:
        """End the call (any thread, idempotent)."""
        with self._lock:
            self._cancelled = True
            call = self._call
        self._stop.set()
        if call is not None:
            call.cancel()

    async def responses(self) -> AsyncGenerator[Any, None]:
        """Responses carrying events, in order; raises at the stream's end (see module doc)."""
        send, receive = trio.open_memory_channel[Any](0)
        threading.Thread(target=self._pump, args=(send,), name="odradek-etcd-watch", daemon=True).start()
        try:
            async with receive:
                async for item in receive:
                    if isinstance(item, grpc.RpcError):
                        raise WatchStreamBroken(f"etcd watch stream failed: {item.code()} {item.details()}")
                    if item.created and 0 < item.header.revision < self._start_revision - 1:
                        # etcd would wait, silently, until its revisions catch up with ours
                        raise MetadataCompacted(
                            f"etcd is at revision {item.header.revision}, below the watch's start "
                            f"{self._start_revision}: the store was restarted empty or replaced"
                        )
                    if item.compact_revision:
                        raise MetadataCompacted(
                            f"etcd compacted history up to revision {item.compact_revision}: re-list and re-watch"
                        )
                    if item.canceled:
                        raise WatchStreamBroken(f"etcd cancelled the watch: {item.cancel_reason or 'no reason given'}")
                    if item.events:
                        yield item
            raise WatchStreamBroken("etcd watch stream ended")
        finally:
            self.cancel()
