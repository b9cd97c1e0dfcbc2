"""Batch and streaming sinks: rows of a DataFrame become records produced through odradek's client.

Columns, as in Spark's Kafka sink: ``value`` (string or binary, required), ``key`` (string or binary),
``topic`` (string; the ``topic`` option wins over the column), ``partition`` (int; null lets the
client's partitioner choose) and ``headers`` (``array<struct<key:string,value:binary>>``). Other
columns are ignored.

Guarantee: at least once. ``write()`` returns only after the producer has flushed and every record
of the task is acknowledged; a failure fails the task and Spark retries it, re-sending its records.
The idempotent producer (on by default) removes duplicates caused by its own retries inside a task,
not those of a retried task or a re-run micro-batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from . import access
from .options import SinkOptions


@dataclass(frozen=True, slots=True)
class SinkLayout:
    """Where each sink column sits in the DataFrame (actual column names; None when absent)."""

    value: str
    key: str | None = None
    topic: str | None = None
    partition: str | None = None
    headers: str | None = None


def _is_headers_type(dtype: DataType) -> bool:
    if not isinstance(dtype, ArrayType) or not isinstance(dtype.elementType, StructType):
        return False
    fields = dtype.elementType.fields
    return (
        len(fields) == 2 and isinstance(fields[0].dataType, StringType) and isinstance(fields[1].dataType, BinaryType)
    )


def sink_layout(schema: StructType, options: SinkOptions) -> SinkLayout:
    """Validate the DataFrame's columns for the sink (names case-insensitive, as Spark resolves them)."""
    by_name = {f.name.lower(): f for f in schema.fields}

    def column(name: str, allowed: tuple[type[DataType], ...], what: str) -> str | None:
        f = by_name.get(name)
        if f is None:
            return None
        if not isinstance(f.dataType, allowed):
            raise ValueError(f"The '{name}' column must be {what}, got {f.dataType.simpleString()}")
        return f.name

    value = column("value", (StringType, BinaryType), "a string or binary")
    if value is None:
        raise ValueError(f"Required column 'value' not found in the DataFrame (columns: {schema.fieldNames()})")
    topic = column("topic", (StringType,), "a string")
    if topic is None and options.topic is None:
        raise ValueError("No topic to write to: set the 'topic' option or add a string 'topic' column")
    headers = by_name.get("headers")
    if headers is not None and not _is_headers_type(headers.dataType):
        raise ValueError(
            "The 'headers' column must be array<struct<key:string,value:binary>>, "
            f"got {headers.dataType.simpleString()}"
        )
    return SinkLayout(
        value=value,
        key=column("key", (StringType, BinaryType), "a string or binary"),
        topic=topic,
        partition=column("partition", (IntegerType,), "an int"),
        headers=headers.name if headers is not None else None,
    )


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What one task reports: how many records it produced (all acknowledged)."""

    records: int


def _as_bytes(column: pa.Array | pa.ChunkedArray) -> list[bytes | None]:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.binary())  # same bytes, UTF-8
    return column.to_pylist()


def produce_batches(options: SinkOptions, layout: SinkLayout, batches: Iterator[pa.RecordBatch]) -> int:
    """Send every row through the cached producer, flush, and return the count; raises when any record
    failed (so Spark retries the task: at-least-once)."""
    producer = access.producer(options)
    sent = 0
    failures: list[BaseException] = []

    def on_delivery(_metadata: object, error: BaseException | None) -> None:
        # runs in the client's thread; flush() returns only after every record has a result
        if error is not None:
            failures.append(error)

    try:
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            values = _as_bytes(batch.column(layout.value))
            keys = _as_bytes(batch.column(layout.key)) if layout.key else [None] * n
            if options.topic is not None:
                topics: list[str | None] = [options.topic] * n
            else:
                assert layout.topic is not None  # sink_layout guarantees a topic source
                topics = batch.column(layout.topic).to_pylist()
            partitions = batch.column(layout.partition).to_pylist() if layout.partition else [None] * n
            headers = batch.column(layout.headers).to_pylist() if layout.headers else [None] * n
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise ValueError("A row has a null 'topic'; set the 'topic' option or fill the column")
                row_headers = headers[i]
                producer.send(
                    topic,
                    values[i],
                    key=keys[i],
                    headers=_row_headers(row_headers) if row_headers else None,
                    partition=partitions[i],
                    callback=on_delivery,
                )
            sent += n
        producer.flush()
        if failures:
            raise RuntimeError(
                f"{len(failures)} of {sent} records were not acknowledged by the broker; first error: {failures[0]!r}"
            ) from failures[0]
    except BaseException:
        access.discard_producer(options)
        raise
    return sent


class OdradekWriter(DataSourceArrowWriter):
    """``df.write.format("odradek")``: each task produces its rows and flushes before reporting."""

    def __init__(self, options: SinkOptions, layout: SinkLayout) -> None:
        self.options = options
        self.layout = layout

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return SinkCommitMessage(records=produce_batches(self.options, self.layout, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to finish: records are visible to consumers once acknowledged (no transactions)."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records already acknowledged stay written: the sink is at-least-once, like Spark's Kafka sink."""


class OdradekStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("odradek")``: per micro-batch, the same as :class:`OdradekWriter`."""

    def __init__(self, options: SinkOptions, layout: SinkLayout) -> None:
        self.options = options
        self.layout = layout

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return SinkCommitMessage(records=produce_batches(self.options, self.layout, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to finish: every task flushed before reporting success."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Acknowledged records stay; a re-run of the batch sends them again (at-least-once)."""


def _row_headers(row_headers: list[dict[str, object] | None]) -> list[tuple[object, object]]:
    """A row's ``headers`` array as (key, value) pairs; a null element or a null key is refused
    with a clear error, as Kafka's producer refuses a null header key."""
    out: list[tuple[object, object]] = []
    for h in row_headers:
        if h is None or h.get("key") is None:
            raise ValueError(f"A row's 'headers' holds a null header or a null header key: {row_headers!r}")
        out.append((h["key"], h["value"]))
    return out
