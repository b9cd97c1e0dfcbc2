"""The trio-native producer: ``send()`` into the accumulator, a sender task does the rest.

::

    async with AsyncProducer({"bootstrap.servers": "localhost:9092"}) as producer:
        future = await producer.send("events", b"value", key=b"k")   # enqueued (may wait for room)
        metadata = await future                                      # acknowledged
        await producer.send_and_wait("events", b"another")           # both at once

Awaiting ``send()`` returns as soon as the record is in a batch; it only blocks (up to
``max.block.ms``) while the topic's metadata is unknown or ``buffer.memory`` is full. The
returned :class:`RecordFuture` resolves to a :class:`RecordMetadata` when the batch is
acknowledged (or raises the batch's error); callbacks given to ``send(callback=...)`` run in the
client's trio thread, like the Java client's run in its I/O thread.

Partitioning (``partitioner``, a plugin name) happens at ``send()``; sticky partitioners are told
when a record would open a new batch (KIP-480), exactly as the Java client does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any, NoReturn

import trio

from ..config import ConfigError
from ..errors import ErrorCode, KafkaError, MessageTooLarge, UnsupportedCompressionType
from ..interfaces import Codec, Connector, TopicPartition
from ..manager import PluginError, Plugins
from ..plugin_origin import origin
from ..records import Compression, codec_named
from .accumulator import (
    ABORT_FOR_NEW_BATCH,
    RECORD_OVERHEAD,
    AppendResult,
    BufferExhausted,
    Callback,
    ProducerBatch,
    RecordAccumulator,
    RecordMetadata,
    record_size,
)
from .base import AsyncClient
from .sender import Sender

HeadersIn = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None

_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def to_bytes(value: bytes | bytearray | memoryview | str | None, what: str) -> bytes | None:
    """Keys, values and header values are bytes; ``str`` is encoded as UTF-8 for convenience."""
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"record {what} must be bytes, str or None, not {type(value).__name__}")


def to_headers(headers: HeadersIn) -> Sequence[tuple[str, bytes | None]]:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes | None]] = []
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise TypeError(f"a header must be a (key, value) pair, got {item!r}")
        key, value = item
        if not isinstance(key, str):  # Kafka's producer refuses null keys; str(None) would write "None"
            raise TypeError(f"a header key must be a string, got {key!r}")
        out.append((key, to_bytes(value, "header value")))
    return out


class RecordFuture:
    """A sent record's pending :class:`RecordMetadata`: ``await`` it, or add callbacks."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        return self._batch.done.is_set()

    def result(self) -> RecordMetadata:
        """The metadata of a finished send (raises its error; RuntimeError if still pending)."""
        if not self._batch.done.is_set():
            raise RuntimeError("record is not acknowledged yet: await the future")
        metadata, error = self._batch.result(self._index)
        if error is not None:
            raise error
        assert metadata is not None
        return metadata

    def add_callback(self, callback: Callback) -> None:
        """``callback(metadata, exception)`` once the record is acknowledged or failed."""
        self._batch.add_callback(self._index, callback)

    async def wait(self) -> RecordMetadata:
        await self._batch.done.wait()
        return self.result()

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        return self.wait().__await__()


class AsyncProducer(AsyncClient):
    """Kafka producer for trio (see module doc). Config keys: :mod:`odradek.client.config`."""

    role = "producer"

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        plugins: Plugins | None = None,
        connector: Connector | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, plugins=plugins, connector=connector, **kwargs)
        c = self.config
        acks = _ACKS[c["acks"]]
        idempotent = bool(c["enable.idempotence"])
        conflicts = []
        if acks != -1:
            conflicts.append("acks must be 'all'")
        if c["max.in.flight.requests.per.connection"] > 5:
            conflicts.append("max.in.flight.requests.per.connection must be <= 5")
        if c["retries"] == 0:
            conflicts.append("retries must be > 0")
        if idempotent and conflicts:
            if c.is_set("enable.idempotence"):
                raise ConfigError(f"enable.idempotence=true needs: {'; '.join(conflicts)}")
            idempotent = False  # Java: idempotence silently off when the user chose such settings
        self.idempotent = idempotent
        self.partitioner = self.plugins.partitioner(c["partitioner"])
        self.max_block_s = c["max.block.ms"] / 1000.0
        self.max_request_size = c["max.request.size"]
        compression, codecs = self._codec(c["compression.type"])
        self.accumulator = RecordAccumulator(
            batch_size=max(c["batch.size"], 1), linger_s=c["linger.ms"] / 1000.0, buffer_memory=c["buffer.memory"]
        )
        self.sender = Sender(
            self.network,
            self.accumulator,
            acks=acks,
            idempotent=idempotent,
            max_in_flight=c["max.in.flight.requests.per.connection"],
            max_request_size=c["max.request.size"],
            request_timeout_ms=c["request.timeout.ms"],
            delivery_timeout_ms=c["delivery.timeout.ms"],
            retries=c["retries"],
            compression=compression,
            compression_level=None if c["compression.level"] < 0 else c["compression.level"],
            codecs=codecs,
        )
        self.network.allow_auto_create = True
        self._sender_done = trio.Event()
        self._memory_freed = trio.Event()

    def _codec(self, name: str) -> tuple[int, Mapping[int, Codec] | None]:
        """The codec id ``compression.type`` names (0 for ``none``) and the codecs to build
        batches with. Any loaded codec plugin's name is accepted, not only Kafka's four, so a
        third-party codec registered under a new id (5-7) is selected like a built-in one."""
        if name == "none":
            return int(Compression.NONE), None
        codecs = self.plugins.codecs()
        try:
            return codec_named(name, codecs).id, codecs
        except UnsupportedCompressionType as exc:
            raise ConfigError(f"invalid value for 'compression.type': {exc}") from None

    async def _on_start(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._run_sender, nursery)

    async def _run_sender(self, nursery: trio.Nursery) -> None:
        try:
            await self.sender.run(nursery)
        finally:
            self._sender_done.set()

    # -- sending ---------------------------------------------------------------------------------
    def append_nowait(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        partition: int | None,
        timestamp: int | None,
        callback: Callback | None = None,
    ) -> AppendResult | None:
        """Partition and append without waiting; None when the topic's metadata is missing or
        ``buffer.memory`` is full (the caller then waits in :meth:`append_waiting`). Thread-safe:
        the sync facade calls it from user threads, then wakes the sender if the result says so.
        This is the per-record hot path: keep it lean."""
        num_partitions = self.network.cluster.partition_counts.get(topic, 0)
        if num_partitions == 0:
            return None
        size = RECORD_OVERHEAD + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        if headers:
            size = record_size(key, value, headers)
        if size > self.max_request_size:
            raise MessageTooLarge(f"the record is {size} bytes, larger than max.request.size={self.max_request_size}")
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        elif timestamp < 0:  # Java's IllegalArgumentException: -1 would mean "no timestamp" on the wire
            raise ValueError(f"invalid timestamp {timestamp}: a record's timestamp is None or >= 0 (epoch ms)")
        accumulator = self.accumulator
        if partition is not None:
            if not 0 <= partition < num_partitions:
                raise KafkaError(
                    f"partition {partition} of {topic!r} does not exist ({num_partitions} partitions)",
                    code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                )
            return accumulator.try_append(
                TopicPartition(topic, partition), key, value, headers, timestamp, size, callback=callback
            )
        partitioner = self.partitioner
        p = partitioner.partition(topic, key, value, num_partitions)
        if type(p) is not int or not 0 <= p < num_partitions:
            p = self._checked_partition(topic, p, num_partitions)
        result = accumulator.try_append(
            TopicPartition(topic, p), key, value, headers, timestamp, size, abort_on_new_batch=True, callback=callback
        )
        if result is ABORT_FOR_NEW_BATCH:
            # KIP-480: a record that would open a new batch lets a sticky partitioner move on
            partitioner.on_new_batch(topic, p, num_partitions)
            p = partitioner.partition(topic, key, value, num_partitions)
            if type(p) is not int or not 0 <= p < num_partitions:
                p = self._checked_partition(topic, p, num_partitions)
            result = accumulator.try_append(
                TopicPartition(topic, p), key, value, headers, timestamp, size, callback=callback
            )
        return result

    def _checked_partition(self, topic: str, p: object, num_partitions: int) -> int:
        """The slow path of the partitioner check in :meth:`append_nowait`: an ``int`` subclass
        in range is taken as its ``int``; anything else fails the send at once with an error
        naming the partitioner, its plugin and the value. A partition that does not exist would
        otherwise sit in the accumulator until ``delivery.timeout.ms`` expires it (2 minutes by
        default) without ever saying why; Kafka's producer refuses an invalid partitioner result
        in ``send()`` too."""
        if isinstance(p, int) and not isinstance(p, bool) and 0 <= p < num_partitions:
            return int(p)
        self._bad_partition(topic, p, num_partitions)

    def _bad_partition(self, topic: str, p: object, num_partitions: int) -> NoReturn:
        name = self.partitioner.name
        culprit = origin(self.plugins, "odradek_register_partitioners", name)
        got = repr(p) if isinstance(p, int) and not isinstance(p, bool) else f"{p!r} ({type(p).__name__}, not an int)"
        raise PluginError(
            f"partitioner {name!r} from {culprit} returned partition {got} for a record to topic {topic!r}, "
            f"which has {num_partitions} partition(s): a partitioner must return an int in 0..{num_partitions - 1}"
        )

    async def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        headers: HeadersIn = None,
        partition: int | None = None,
        timestamp: int | None = None,
        *,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """Enqueue a record; returns a :class:`RecordFuture` of its metadata (see module doc).

        Waits up to ``max.block.ms`` for the topic's metadata and for buffer space; raises
        ``KafkaError`` (REQUEST_TIMED_OUT) when either does not come.
        """
        if self._closed or self._nursery is None:
            self._check_open()
        if value is not None and type(value) is not bytes:
            value = to_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = to_bytes(key, "key")
        hdrs = to_headers(headers) if headers else ()
        result = self.append_nowait(topic, value, key, hdrs, partition, timestamp, callback)
        if result is None:
            result = await self.append_waiting(topic, value, key, hdrs, partition, timestamp, callback)
        batch, index, wake = result
        if wake:
            self.sender.wakeup()
        return RecordFuture(batch, index)

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        headers: HeadersIn = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordMetadata:
        """Send and wait for the acknowledgement."""
        future = await self.send(topic, value, key, headers, partition, timestamp)
        return await future

    async def append_waiting(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        partition: int | None,
        timestamp: int | None,
        callback: Callback | None = None,
    ) -> AppendResult:
        """:meth:`append_nowait`, waiting up to ``max.block.ms`` for metadata and memory."""
        deadline = trio.current_time() + self.max_block_s
        while True:
            result = self.append_nowait(topic, value, key, headers, partition, timestamp, callback)
            if result is not None:
                return result
            if self._closed:
                raise KafkaError("producer closed while send() was waiting")
            if self.network.cluster.partitions_for(topic) == 0:
                await self._wait_for_topic(topic, deadline)
                continue
            self._memory_freed = self._memory_freed if not self._memory_freed.is_set() else trio.Event()
            self.sender.wakeup()
            with trio.move_on_at(deadline) as scope:
                await self._wait_memory()
            if scope.cancelled_caught:
                raise BufferExhausted(
                    f"buffer.memory ({self.accumulator.buffer_memory} bytes) stayed full for max.block.ms",
                    code=ErrorCode.REQUEST_TIMED_OUT,
                )

    async def _wait_memory(self) -> None:
        """Wait until some batch finishes (its memory is then back)."""
        pending = self.accumulator.incomplete()
        if not pending:
            return
        async with trio.open_nursery() as n:
            # the first finished batch frees memory; the oldest is the likeliest to finish first
            oldest = min(pending, key=lambda b: b.created if b.created >= 0 else float("inf"))

            async def watch() -> None:
                await oldest.done.wait()
                n.cancel_scope.cancel()

            n.start_soon(watch)

    async def _wait_for_topic(self, topic: str, deadline: float) -> None:
        self.network.add_topics([topic])
        while self.network.cluster.partitions_for(topic) == 0:
            if not await self.network.wait_for_update(self.network.metadata_version, deadline):
                info = self.network.cluster.topics.get(topic)
                why = f" (last error {info.error.name})" if info is not None else ""
                raise KafkaError(
                    f"topic {topic!r} not present in metadata after max.block.ms={self.max_block_s * 1000:.0f}{why}",
                    code=ErrorCode.REQUEST_TIMED_OUT,
                )
            info = self.network.cluster.topics.get(topic)
            if info is not None and info.error is not ErrorCode.NONE and not info.error.retriable:
                raise KafkaError(f"topic {topic!r}: {info.error.name}", code=info.error)
            if info is None or self.network.cluster.partitions_for(topic) == 0:
                await trio.sleep(self.network.retry_backoff.seconds(0))

    async def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic`` (waiting up to max.block.ms for its metadata)."""
        self._check_open()
        await self._wait_for_topic(topic, trio.current_time() + self.max_block_s)
        return list(self.network.cluster.topics[topic].partitions)

    # -- flush and close -------------------------------------------------------------------------
    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until it is acknowledged or failed."""
        self._check_open()
        self.accumulator.begin_flush()
        self.sender.wakeup()
        try:
            with trio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                for batch in self.accumulator.incomplete():
                    await batch.done.wait()
        except trio.TooSlowError:
            assert timeout is not None
            raise KafkaError(
                f"flush: records still unacknowledged after {timeout * 1000:.0f} ms", code=ErrorCode.REQUEST_TIMED_OUT
            ) from None
        finally:
            self.accumulator.end_flush()

    async def _on_close(self, timeout: float | None) -> None:
        if self._nursery is None:
            return
        self.accumulator.closing = True
        if timeout is None or timeout > 0:
            with trio.move_on_after(timeout if timeout is not None else float("inf")):
                self.sender.stop()
                await self._sender_done.wait()
        error = KafkaError("producer closed before the record was sent", code=ErrorCode.REQUEST_TIMED_OUT)
        for batch in self.accumulator.abort_all():
            self.accumulator.release(batch)
            batch.fail(error)
        for batch in self.accumulator.incomplete():
            batch.fail(error)
        self.sender.stop()
