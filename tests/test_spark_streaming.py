"""The Spark connector's streaming source and sink on the shared local SparkSession against a real
broker subprocess: exactly-once input across a stop and a restart from the checkpoint while records
keep arriving, admission control, availableNow, new partitions, data loss, and the streaming sink."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import new_topic, produce, produce_range, rows_in, source, stream, wait_for

from odradek.client import Admin
from odradek.testing.broker import BrokerProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def bootstrap(odradek_broker: BrokerProcess) -> str:
    """The session's shared broker (odradek.testing's ``odradek_broker``)."""
    return odradek_broker.bootstrap


def test_stream_exactly_once_across_stop_and_restart(spark_session: Any, bootstrap: str, tmp_path: Path) -> None:
    topic = new_topic(bootstrap, 4)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start() -> Any:
        df = stream(spark_session, bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="30000")
        return (
            df.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    producer = threading.Thread(target=produce_range, args=(bootstrap, topic, 0, 100_000))
    query = start()
    producer.start()
    try:
        wait_for(lambda: rows_in(query) > 0, 120, "the first micro-batch with records")
    finally:
        query.stop()  # mid-way: the producer is still sending
    first_run = rows_in(query)
    producer.join()
    query = start()  # same checkpoint: continues where the first run stopped
    try:
        query.processAllAvailable()
        produce_range(bootstrap, topic, 100_000, 110_000)
        query.processAllAvailable()
    finally:
        query.stop()
    assert 0 < first_run < 110_000
    values = [int(r.value) for r in spark_session.read.parquet(out).select("value").collect()]
    assert len(values) == 110_000
    assert set(values) == set(range(110_000))
    offsets_log = sorted(
        (p for p in (Path(checkpoint) / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    )
    last = json.loads(offsets_log[-1].read_text().splitlines()[-1])
    assert sum(last[topic].values()) == 110_000  # {"topic": {"0": next_offset, ...}}


def test_max_offsets_per_trigger_and_available_now(spark_session: Any, bootstrap: str, tmp_path: Path) -> None:
    topic = new_topic(bootstrap, 2)
    produce(bootstrap, topic, [{"value": b"x", "partition": i % 2} for i in range(250)])
    query = (
        stream(spark_session, bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="100")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "an availableNow query must stop by itself at the end of the data"
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [100, 100, 50]
    assert spark_session.read.parquet(str(tmp_path / "out")).count() == 250


def test_new_partitions_and_data_loss(spark_session: Any, bootstrap: str, tmp_path: Path) -> None:
    topic = new_topic(bootstrap, 1)
    produce_range(bootstrap, topic, 0, 50)
    checkpoint = str(tmp_path / "checkpoint")

    def run(fail: str) -> Any:
        query = (
            stream(spark_session, bootstrap, subscribe=topic, startingOffsets="earliest", failOnDataLoss=fail)
            .selectExpr("CAST(value AS STRING) AS value", "partition")
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        return query

    assert run("true").awaitTermination(180)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_partitions({topic: 2})  # picked up from its earliest offset by the next run
        produce(bootstrap, topic, [{"value": str(i).encode(), "partition": i % 2} for i in range(50, 100)])
        # retention-like loss: partition 0 now starts past records the query has not read yet
        low = admin.delete_records({(topic, 0): -1})
    assert low[(topic, 0)] == 75
    failing = run("true")
    with pytest.raises(Exception, match="failOnDataLoss"):
        failing.awaitTermination(180)
    assert run("false").awaitTermination(180)
    values = sorted(int(r.value) for r in spark_session.read.parquet(str(tmp_path / "out")).collect())
    assert values == list(range(50)) + list(range(51, 100, 2))  # partition 0's 50..98 were deleted


def test_stream_write_from_rate_source(spark_session: Any, bootstrap: str, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    topic = new_topic(bootstrap, 3)
    rate = spark_session.readStream.format("rate").option("rowsPerSecond", "200").load()
    query = (
        rate.select(
            F.col("value").cast("string").alias("key"),
            F.concat(F.lit("v"), F.col("value")).alias("value"),
            (F.col("value") % 3).cast("int").alias("partition"),
            F.array(
                F.struct(F.lit("src").alias("key"), F.col("value").cast("string").cast("binary").alias("value"))
            ).alias("headers"),
        )
        .writeStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: rows_in(query) >= 300, 120, "300 rows written by the streaming sink")
    finally:
        query.stop()
    written = rows_in(query)
    back = source(spark_session, bootstrap, subscribe=topic, includeHeaders="true").collect()
    # The sink is at-least-once, like Spark's Kafka sink: stop() can interrupt an epoch whose tasks
    # already produced, so the topic may hold rows past the committed progress, but every committed
    # row is there.
    keys = {int(r.key) for r in back}
    assert set(range(written)) <= keys
    for r in back:
        assert r.value == b"v" + r.key
        assert r.partition == int(r.key) % 3
        assert [(h.key, h.value) for h in r.headers] == [("src", r.key)]
