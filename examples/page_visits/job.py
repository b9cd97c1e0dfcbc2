"""The page-visits streaming job: visits per IP subnet per minute, from odradek back to odradek and Parquet.

Input records are the seeds' page-visit events: key = the visitor's IP, value =
``"<epoch ms>,<url>,<ip>"`` (e.g. ``1700000000000,www.example.com,192.168.2.17``). The job parses
them, groups by one-minute event-time windows and /24 subnet, and writes every micro-batch's
updated counts (output mode ``update``) to

- an odradek topic, keyed by ``<minute>|<subnet>`` with a JSON value -- a changelog: the latest
  record per key is the current count (a compacted topic keeps exactly that);
- Parquet files, one row per update with the micro-batch id, so the final count of a window is the
  row with the highest batch id (:func:`final_counts`).

The watermark (``watermark`` argument) bounds the aggregation state: visits arriving later than that
behind the newest event time are dropped, as in any Spark event-time aggregation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


def parse_visits(raw: DataFrame) -> DataFrame:
    """``value`` bytes -> (event_time, url, ip, subnet); malformed values are dropped."""
    from pyspark.sql import functions as F

    parts = F.split(F.col("value").cast("string"), ",")
    visits = raw.select(
        F.timestamp_millis(parts.getItem(0).cast("bigint")).alias("event_time"),
        parts.getItem(1).alias("url"),
        parts.getItem(2).alias("ip"),
    )
    subnet = F.regexp_extract("ip", r"^(\d+\.\d+\.\d+)\.\d+$", 1)
    return visits.withColumn("subnet", F.concat(subnet, F.lit(".0/24"))).where(
        F.col("event_time").isNotNull() & (subnet != "")
    )


def visits_per_subnet(visits: DataFrame, watermark: str) -> DataFrame:
    """Counts per (one-minute window, subnet), with the window's start as ``minute``."""
    from pyspark.sql import functions as F

    return (
        visits.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", "1 minute"), "subnet")
        .agg(F.count("*").alias("visits"))
        .select(F.col("window.start").alias("minute"), "subnet", "visits")
    )


def start_job(
    spark: SparkSession,
    *,
    bootstrap: str,
    source_topic: str,
    sink_topic: str,
    parquet_dir: str,
    checkpoint_dir: str,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
    trigger_seconds: float = 1.0,
    watermark: str = "2 minutes",
) -> StreamingQuery:
    """Start the streaming job; the caller owns the returned query (``processAllAvailable``, ``stop``)."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source_topic)
        .option("startingOffsets", starting_offsets)
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    counts = visits_per_subnet(parse_visits(reader.load()), watermark)

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        batch = batch.withColumn("batch_id", F.lit(batch_id)).cache()
        try:
            if batch.isEmpty():
                return
            minute = F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'")
            (
                batch.select(
                    F.concat_ws("|", minute, "subnet").alias("key"),
                    F.to_json(F.struct(minute.alias("minute"), "subnet", "visits")).alias("value"),
                )
                .write.mode("append")
                .format("odradek")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", sink_topic)
                .save()
            )
            batch.write.mode("append").parquet(parquet_dir)
        finally:
            batch.unpersist()

    return (
        counts.writeStream.outputMode("update")
        .foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint_dir)
        .trigger(processingTime=f"{trigger_seconds} seconds")
        .queryName(f"page_visits_{source_topic}")
        .start()
    )


def final_counts(spark: SparkSession, parquet_dir: str) -> DataFrame:
    """The last update of every (minute, subnet) in the Parquet output: the final visit counts."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    updates = spark.read.parquet(parquet_dir)
    latest = Window.partitionBy("minute", "subnet").orderBy(F.col("batch_id").desc())
    return (
        updates.withColumn("rank", F.row_number().over(latest))
        .where("rank = 1")
        .select("minute", "subnet", "visits")
        .orderBy("minute", "subnet")
    )
