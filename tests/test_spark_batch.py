"""The Spark connector's batch source and sink, on the shared local SparkSession against a real broker
subprocess: every record exactly once with Spark's Kafka schema, offset/timestamp bounds, writes with
key, partition and headers, and clear errors for bad options."""

from __future__ import annotations

from typing import Any

import pytest
from spark_helpers import BASE_TS, new_topic, produce, source

from odradek.testing.broker import BrokerProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def bootstrap(odradek_broker: BrokerProcess) -> str:
    """The session's shared broker (odradek.testing's ``odradek_broker``)."""
    return odradek_broker.bootstrap


def test_batch_read_every_record_once_with_schema_and_headers(spark_session: Any, bootstrap: str) -> None:
    topic = new_topic(bootstrap, 3)
    produce(
        bootstrap,
        topic,
        [
            {
                "value": f"v{i}".encode(),
                "key": f"k{i}".encode(),
                "headers": [("n", str(i).encode()), ("empty", None)],
                "partition": i % 3,
                "timestamp": BASE_TS + i,
            }
            for i in range(300)
        ],
    )
    df = source(spark_session, bootstrap, subscribe=topic, includeHeaders="true")
    assert df.dtypes == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    rows = df.collect()
    assert len(rows) == 300
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p in range(3) for o in range(100)}
    for r in rows:
        i = int(r.value[1:])
        assert r.key == f"k{i}".encode()
        assert r.partition == i % 3 and r.offset == i // 3
        assert r.topic == topic
        assert round(r.timestamp.timestamp() * 1000) == BASE_TS + i  # naive local time, as pyspark returns it
        assert r.timestampType == 0
        assert [(h.key, h.value) for h in r.headers] == [("n", str(i).encode()), ("empty", None)]
    assert "headers" not in source(spark_session, bootstrap, subscribe=topic).columns

    # offset bounds (-2 earliest, -1 latest), timestamps, assign, and minPartitions splitting
    bounded = source(
        spark_session,
        bootstrap,
        subscribe=topic,
        startingOffsets=f'{{"{topic}":{{"0":10,"1":-2,"2":-2}}}}',
        endingOffsets=f'{{"{topic}":{{"0":20,"1":5,"2":-1}}}}',
    )
    assert bounded.count() == 10 + 5 + 100
    since = source(spark_session, bootstrap, subscribe=topic, startingTimestamp=str(BASE_TS + 150))
    assert sorted(int(r.value[1:]) for r in since.select("value").collect()) == list(range(150, 300))
    assigned = source(spark_session, bootstrap, assign=f'{{"{topic}":[1]}}')
    assert {r.partition for r in assigned.select("partition").collect()} == {1}
    split = source(spark_session, bootstrap, subscribe=topic, minPartitions="9")
    assert split.rdd.getNumPartitions() == 9
    assert split.count() == 300


def test_batch_write_with_key_partition_headers_and_topic_option(spark_session: Any, bootstrap: str) -> None:
    from pyspark.sql import functions as F

    topic = new_topic(bootstrap, 3)
    rows = spark_session.range(60).select(
        F.col("id").cast("string").alias("key"),
        F.concat(F.lit("v"), F.col("id")).alias("value"),
        (F.col("id") % 3).cast("int").alias("partition"),
        F.array(F.struct(F.lit("id").alias("key"), F.col("id").cast("string").cast("binary").alias("value"))).alias(
            "headers"
        ),
        F.lit("ignored-because-the-option-wins").alias("topic"),
    )
    rows.write.mode("append").format("odradek").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).save()
    back = source(spark_session, bootstrap, subscribe=topic, includeHeaders="true").collect()
    assert len(back) == 60
    for r in back:
        i = int(r.key)
        assert r.value == f"v{i}".encode()
        assert r.partition == i % 3
        assert [(h.key, h.value) for h in r.headers] == [("id", str(i).encode())]
    assert sorted(int(r.key) for r in back) == list(range(60))
    # a null header key is refused, as Kafka's producer refuses it (it was written as "None")
    null_key = spark_session.range(1).selectExpr(
        "CAST(id AS STRING) AS value", "array(named_struct('key', CAST(NULL AS STRING), 'value', X'01')) AS headers"
    )
    with pytest.raises(Exception, match="null header key"):
        null_key.write.mode("append").format("odradek").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", topic
        ).save()


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "127.0.0.1:1"}, "'assign', 'subscribe' or 'subscribePattern'"),
        ({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "startingOffsets": "latest"}, "startingOffsets"),
        ({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "kafka.no.such.key": "1"}, "kafka.no.such.key"),
    ],
)
def test_bad_read_options_fail_with_the_option_named(spark_session: Any, options: dict[str, str], needle: str) -> None:
    reader = spark_session.read.format("odradek")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as info:
        reader.load().collect()
    assert needle in str(info.value)


def test_bad_stream_and_sink_options_fail_clearly(spark_session: Any) -> None:
    stream = (
        spark_session.readStream.format("odradek")
        .option("kafka.bootstrap.servers", "127.0.0.1:1")
        .option("subscribe", "t")
        .option("endingOffsets", "latest")
    )
    with pytest.raises(Exception, match="endingOffsets") as info:  # the reader is built when the query starts
        stream.load().writeStream.format("noop").start().awaitTermination(60)
    # the option's message leads, not pyspark's runner failing on the reader it never got
    assert "UnboundLocalError" not in str(info.value)
    no_value = spark_session.range(3).write.mode("append").format("odradek")
    with pytest.raises(Exception, match="Required column 'value'"):
        no_value.option("kafka.bootstrap.servers", "127.0.0.1:1").option("topic", "t").save()
    no_topic = spark_session.range(3).selectExpr("CAST(id AS STRING) AS value").write.mode("append").format("odradek")
    with pytest.raises(Exception, match="'topic' option"):
        no_topic.option("kafka.bootstrap.servers", "127.0.0.1:1").save()
