"""The data source Spark instantiates for ``format("odradek")``: options in, readers and writers out.

Spark creates it from the user's options (case-insensitive strings) in a planning Python process;
every method validates the options it needs, so a bad option fails with a ``ValueError`` naming
the option: a batch read or write when it is defined, a stream when its query starts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from . import FORMAT
from .access import check_client_config
from .options import parse_bool, parse_sink_options, parse_source_options
from .reader import OdradekBatchReader, OdradekStreamReader
from .schema import source_schema
from .writer import OdradekStreamWriter, OdradekWriter, sink_layout


def _check_schema(schema: StructType, include_headers: bool) -> None:
    expected = source_schema(include_headers)
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in expected.fields]:
        raise ValueError(
            f"The odradek source has a fixed schema and cannot take a user-specified one: expected "
            f"{expected.simpleString()}, got {schema.simpleString()} (toggle headers with 'includeHeaders')"
        )


class OdradekDataSource(DataSource):
    """Kafka topics through odradek's client, with Spark's Kafka connector's schema and options."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _include_headers(self) -> bool:
        return parse_bool({k.lower(): v for k, v in self.options.items()}, "includeHeaders", False)

    def schema(self) -> StructType:
        return source_schema(self._include_headers())

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_source_options(self.options, streaming=False)
        check_client_config(options.client_config, sink=False)
        _check_schema(schema, options.include_headers)
        return OdradekBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            options = parse_source_options(self.options, streaming=True)
            check_client_config(options.client_config, sink=False)
            _check_schema(schema, options.include_headers)
        except ValueError as exc:
            return RefusedStreamReader(exc)
        return OdradekStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> OdradekWriter:
        if overwrite:
            raise ValueError("The odradek sink only appends records: use mode('append'), not 'overwrite'")
        options = parse_sink_options(self.options)
        check_client_config(options.client_config, sink=True)
        return OdradekWriter(options, sink_layout(schema, options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> OdradekStreamWriter:
        options = parse_sink_options(self.options)
        check_client_config(options.client_config, sink=True)
        return OdradekStreamWriter(options, sink_layout(schema, options))


class RefusedStreamReader(DataSourceStreamReader):
    """A stream reader for options that are refused: every call raises their ``ValueError``.

    pyspark 4.3's streaming source runner calls ``reader.stop()`` in a ``finally`` around
    ``streamReader()``, so an error raised there is reported as ``UnboundLocalError: cannot
    access local variable 'reader'``, with the real message far down the trace. Raising from the
    reader's first call instead puts the option's message at the top of the query's error.
    """

    def __init__(self, error: ValueError) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def latestOffset(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[Any]:
        raise self.error

    def commit(self, end: dict[str, Any]) -> None:
        raise self.error

    def stop(self) -> None:
        pass
