"""The blocking facade: Producer, Consumer and Admin for code that does not run trio.

Each facade object owns a daemon thread running ``trio.run`` with the async client inside
``async with``; calls cross over with ``trio.from_thread.run``, so any number of user threads may
share one object. The thread starts on first use, so creating a client is cheap, and the object
pickles as its config (a Spark task that receives one builds its own connections in the
executor; buffered records are not part of the pickle).

The producer's hot path does not cross threads at all: ``send()`` partitions and appends in the
caller's thread (the accumulator is lock-protected) and returns a ``concurrent.futures.Future``;
only when the topic's metadata is missing or ``buffer.memory`` is full does it wait on the trio
thread (up to ``max.block.ms``). Callbacks and futures are completed in the client's thread.

Rebalance listeners given to :meth:`Consumer.subscribe` run in a worker thread, so they may call
the consumer (commit, seek) like any other thread.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import trio

from ..interfaces import TopicPartition
from .accumulator import Callback, RecordMetadata
from .admin import AsyncAdmin
from .base import AsyncClient, ClientClosedError
from .consumer import AsyncConsumer
from .decoding import ConsumerRecord
from .futures import FutureHub, RecordFuture
from .producer import AsyncProducer, HeadersIn, to_bytes, to_headers

T = TypeVar("T")


class _ClientThread:
    """One trio loop in a daemon thread hosting one async client until :meth:`stop`."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        try:
            trio.run(self._host)
        except BaseException as exc:  # reported to every later call
            self._error = exc
        finally:
            self._ready.set()

    async def _host(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with self.client:
            self._ready.set()
            await self._stop.wait()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self._error is None

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` in the client's thread and return its result (blocking)."""
        if not self.alive:
            raise self._error or ClientClosedError("client is closed")
        try:
            return trio.from_thread.run(fn, *args, trio_token=self._token)
        except trio.RunFinishedError:
            raise self._error or ClientClosedError("client is closed") from None
        except trio.Cancelled:
            # another thread closed the client while this call waited (a blocked poll()): trio
            # cancels the call when its loop ends, and a Cancelled (a BaseException) would kill
            # the calling thread
            raise ClientClosedError(f"this {self.client.role} was closed while the call was waiting") from None

    def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        if not self.alive:
            raise self._error or ClientClosedError("client is closed")
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def call_soon(self, fn: Callable[[], Any]) -> None:
        """Schedule ``fn()`` in the client's thread without waiting (a sender wake-up)."""
        assert self._token is not None
        try:
            self._token.run_sync_soon(fn)
        except trio.RunFinishedError:
            pass

    def stop_soon(self) -> None:
        """Let the thread close the client gracefully (flush, commit, leave) and end, without
        waiting: the facade's finalizer calls it from the garbage collector, which must not
        block on the network."""
        if self._stop is None or self._token is None:
            return
        try:
            self._token.run_sync_soon(self._stop.set)
        except trio.RunFinishedError:
            pass

    def stop(self, timeout: float | None = None) -> None:
        """Close the client (the ``async with`` exit) and end the thread."""
        if self._thread.is_alive() and self._stop is not None:
            try:
                self.run(self.client.close, timeout)
            finally:
                try:
                    trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
                except trio.RunFinishedError:
                    pass
        self._thread.join()
        if self._error is not None:
            raise self._error


class _SyncClient:
    """Lazy start, pickling as config, context management."""

    _async_class: type[AsyncClient] = AsyncClient

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._config = dict(config or {})
        self._kwargs = kwargs
        # validate now (unknown keys fail at construction, not at first use)
        self._async: Any = self._async_class(self._config, **kwargs)
        self._lock = threading.Lock()
        self._thread: _ClientThread | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._closed = False

    def _loop(self) -> _ClientThread:
        thread = self._thread
        if thread is not None:
            return thread
        with self._lock:
            if self._closed:
                raise ClientClosedError(f"this {self._async.role} is closed")
            if self._thread is None:
                self._thread = _ClientThread(self._async, f"odradek-{self._async.role}")
                # a client dropped without close() would keep its thread and sockets for ever:
                # when the facade is garbage collected, its thread closes the client and ends
                # (the finalizer holds the thread, never the facade, and does not wait)
                self._finalizer = weakref.finalize(self, self._thread.stop_soon)
                self._finalizer.atexit = False  # daemon threads simply end with the interpreter
            return self._thread

    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        return self._loop().run(fn, *args)

    def close(self, timeout: float | None = None) -> None:
        """Finish pending work (producer: send what is buffered; consumer: commit, leave) and stop."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if self._finalizer is not None:
            self._finalizer.detach()
        if thread is not None:
            thread.stop(timeout)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
        return (_rebuild, (type(self), self._config), {})


def _rebuild(cls: type[_SyncClient], config: Mapping[str, Any]) -> _SyncClient:
    return cls(config)


class Producer(_SyncClient):
    """Blocking facade of :class:`~odradek.client.producer.AsyncProducer` (see module doc)."""

    _async_class = AsyncProducer
    _async: AsyncProducer

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self._hub = FutureHub()
        self._async.accumulator.on_batch_finish = self._hub.finished

    def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        headers: HeadersIn = None,
        partition: int | None = None,
        timestamp: int | None = None,
        *,
        callback: Callback | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        """Enqueue a record; the future resolves to its :class:`RecordMetadata`. ``callback``
        (``callback(metadata, exception)``) runs in the client's thread when the batch finishes."""
        thread = self._thread or self._loop()
        producer = self._async
        if value is not None and type(value) is not bytes:
            value = to_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = to_bytes(key, "key")
        h = to_headers(headers) if headers else ()
        if producer._closed:
            raise ClientClosedError("this producer is closed")
        result = producer.append_nowait(topic, value, key, h, partition, timestamp, callback)
        if result is None:
            result = thread.run(producer.append_waiting, topic, value, key, h, partition, timestamp, callback)
        batch, index, wake = result
        if wake:
            sender = producer.sender
            if not sender.wake_requested:
                sender.wake_requested = True
                thread.call_soon(sender.wakeup)
        return RecordFuture(batch, index, self._hub)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and wait for the acknowledgements."""
        if self._thread is not None:
            self._run(self._async.flush, timeout)

    def partitions_for(self, topic: str) -> list[int]:
        return self._run(self._async.partitions_for, topic)


class _ThreadedListener:
    """Runs a synchronous rebalance listener in a worker thread (it may call the consumer)."""

    def __init__(self, listener: Any) -> None:
        self._listener = listener
        for name in ("on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost"):
            fn = getattr(listener, name, None)
            if fn is not None:
                setattr(self, name, self._wrap(fn))

    @staticmethod
    def _wrap(fn: Callable[[list[TopicPartition]], Any]) -> Callable[[list[TopicPartition]], Awaitable[None]]:
        async def call(partitions: list[TopicPartition]) -> None:
            result = await trio.to_thread.run_sync(fn, partitions)
            if inspect.isawaitable(result):
                await result

        return call


class Consumer(_SyncClient):
    """Blocking facade of :class:`~odradek.client.consumer.AsyncConsumer`; iterate it, or poll."""

    _async_class = AsyncConsumer
    _async: AsyncConsumer

    def subscribe(
        self, topics: Iterable[str] | str | Any = None, listener: Any = None, *, pattern: str | None = None
    ) -> None:
        wrapped = _ThreadedListener(listener) if listener is not None else None
        self._loop().run_sync(lambda: self._async.subscribe(topics, wrapped, pattern=pattern))

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        parts = list(partitions)
        self._loop().run_sync(self._async.assign, parts)

    def unsubscribe(self) -> None:
        self._run(self._async.unsubscribe)

    def assignment(self) -> set[TopicPartition]:
        return self._loop().run_sync(self._async.assignment)

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        return self._run(self._async.poll, timeout, max_records)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while True:
            for records in self.poll(1.0).values():
                yield from records

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        self._loop().run_sync(self._async.seek, partition, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None) -> None:
        parts = None if partitions is None else list(partitions)
        self._loop().run_sync(self._async.seek_to_beginning, parts)

    def seek_to_end(self, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None) -> None:
        parts = None if partitions is None else list(partitions)
        self._loop().run_sync(self._async.seek_to_end, parts)

    def position(self, partition: TopicPartition | tuple[str, int], timeout: float | None = None) -> int:
        return self._run(self._async.position, partition, timeout)

    def committed(self, partitions: Iterable[TopicPartition | tuple[str, int]], timeout: float | None = None) -> Any:
        return self._run(self._async.committed, list(partitions), timeout)

    def offsets_for_times(self, timestamps: Mapping[Any, int], timeout: float | None = None) -> Any:
        return self._run(self._async.offsets_for_times, dict(timestamps), timeout)

    def beginning_offsets(self, partitions: Iterable[Any], timeout: float | None = None) -> dict[TopicPartition, int]:
        return self._run(self._async.beginning_offsets, list(partitions), timeout)

    def end_offsets(self, partitions: Iterable[Any], timeout: float | None = None) -> dict[TopicPartition, int]:
        return self._run(self._async.end_offsets, list(partitions), timeout)

    def commit(self, offsets: Mapping[Any, Any] | None = None) -> None:
        self._run(self._async.commit, offsets)

    def commit_async(self, offsets: Mapping[Any, Any] | None = None, callback: Any = None) -> None:
        self._loop().run_sync(self._async.commit_async, offsets, callback)

    def pause(self, partitions: Iterable[Any]) -> None:
        self._loop().run_sync(self._async.pause, list(partitions))

    def resume(self, partitions: Iterable[Any]) -> None:
        self._loop().run_sync(self._async.resume, list(partitions))

    def paused(self) -> set[TopicPartition]:
        return self._loop().run_sync(self._async.paused)

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        return self._run(self._async.partitions_for, topic, timeout)

    def list_topics(self) -> dict[str, int]:
        return self._run(self._async.list_topics)


class Admin(_SyncClient):
    """Blocking facade of :class:`~odradek.client.admin.AsyncAdmin`: same methods, blocking."""

    _async_class = AsyncAdmin
    _async: AsyncAdmin

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self._async, name)
        if not inspect.iscoroutinefunction(method):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._run(lambda: method(*args, **kwargs))

        call.__name__ = name
        call.__doc__ = method.__doc__
        return call

    def __dir__(self) -> Sequence[str]:
        names = set(super().__dir__())
        names.update(
            n
            for n in dir(self._async)
            if not n.startswith("_") and inspect.iscoroutinefunction(getattr(self._async, n))
        )
        return sorted(names)
