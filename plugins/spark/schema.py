"""The source's fixed schema (Spark's Kafka connector's) and the conversion of records to Arrow.

``read()`` yields ``pyarrow.RecordBatch`` objects because Spark then skips its per-row conversion
(bench/bench_spark.py measures Arrow against yielding tuples). Spark checks each yielded batch against
the declared schema exactly: ``bigint`` is int64, ``int`` is int32 and ``timestamp`` is
``timestamp[us, tz=UTC]``, every field nullable.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SOURCE_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

HEADER_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]

_KEY, _VALUE, _OFFSET = attrgetter("key"), attrgetter("value"), attrgetter("offset")
_TIMESTAMP, _TIMESTAMP_TYPE, _HEADERS = attrgetter("timestamp"), attrgetter("timestamp_type"), attrgetter("headers")

#: Rows per yielded Arrow batch: big enough to amortise the per-batch cost, small enough to stream.
ROWS_PER_BATCH = 8192


def source_ddl(include_headers: bool) -> str:
    """The schema as Spark DDL, the form ``DataSource.schema()`` returns."""
    return f"{SOURCE_DDL}, {HEADERS_DDL}" if include_headers else SOURCE_DDL


def source_schema(include_headers: bool) -> StructType:
    """The schema as a Spark ``StructType`` (built in Python: parsing DDL needs the JVM)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects for :func:`source_ddl` (pyspark's ``to_arrow_schema`` of it)."""
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


class RecordLike(Protocol):
    """What a fetched record offers (odradek's ``ConsumerRecord``)."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]


class ArrowBatchBuilder:
    """Accumulates the records of one partition column-wise and cuts ``RecordBatch`` objects.

    Columns are plain Python lists filled in one tight loop per fetched batch; pyarrow converts each
    list to a column in C. The constant columns (topic, partition) are built once per batch.
    """

    __slots__ = (
        "_headers",
        "_keys",
        "_offsets",
        "_stamps",
        "_ts_types",
        "_values",
        "include_headers",
        "partition",
        "schema",
        "topic",
    )

    def __init__(self, topic: str, partition: int, *, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._offsets: list[int] = []
        self._stamps: list[int] = []
        self._ts_types: list[int] = []
        self._headers: list[Sequence[tuple[str, bytes | None]]] = []

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, records: Sequence[RecordLike]) -> None:
        """Append records (already limited to the task's offset range), one C-level pass per column."""
        self._keys.extend(map(_KEY, records))
        self._values.extend(map(_VALUE, records))
        self._offsets.extend(map(_OFFSET, records))
        self._stamps.extend(map(_TIMESTAMP, records))
        self._ts_types.extend(map(_TIMESTAMP_TYPE, records))
        if self.include_headers:
            self._headers.extend(map(_HEADERS, records))

    def build(self) -> pa.RecordBatch:
        """The accumulated rows as one batch of the exact source schema; the builder starts empty again."""
        n = len(self._offsets)
        columns: list[Any] = [
            pa.array(self._keys, pa.binary()),
            pa.array(self._values, pa.binary()),
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self._offsets, pa.int64()),
            pc.multiply(pa.array(self._stamps, pa.int64()), 1000).cast(TIMESTAMP_TYPE),  # ms -> us
            pa.array(self._ts_types, pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array(self._headers, HEADER_TYPE))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)
