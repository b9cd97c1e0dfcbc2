"""odradek's PySpark connector: a Python Data Source (Spark 4) registered as format ``odradek``.

It reads (``spark.read`` / ``spark.readStream``) and writes (``df.write`` / ``df.writeStream``) Kafka
topics through odradek's own client, with the schema and options of Spark's Kafka connector, so a
pipeline ports by changing ``format("kafka")`` to ``format("odradek")``. It needs no JVM jars and
works against odradek and any other broker speaking the Kafka protocol. See docs/spark.md.

Register it once per SparkSession::

    from odradek.plugins.spark import register
    register(spark)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "odradek"

__all__ = ["FORMAT", "OdradekDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``odradek`` format on ``spark`` (needed once per session, driver side)."""
    from .source import OdradekDataSource

    spark.dataSource.register(OdradekDataSource)


def __getattr__(name: str) -> Any:
    # Importing the data source pulls in pyspark and pyarrow; do it only when asked.
    if name == "OdradekDataSource":
        from .source import OdradekDataSource

        return OdradekDataSource
    raise AttributeError(name)
