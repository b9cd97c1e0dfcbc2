"""Unit tests of the Spark connector's option parsing: Spark Kafka connector names, rules and errors."""

from __future__ import annotations

import pytest

from odradek.plugins.spark.options import (
    EarliestBound,
    GlobalTimestamp,
    LatestBound,
    SpecificOffsets,
    SpecificTimestamps,
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def src(streaming: bool = True, **extra: str):
    return parse_source_options({**BASE, **extra}, streaming=streaming)


def test_defaults_follow_spark() -> None:
    stream = src(streaming=True)
    assert stream.starting == LatestBound()
    assert stream.fail_on_data_loss is True
    assert stream.include_headers is False
    assert stream.max_trigger_delay_ms == 15 * 60_000
    batch = src(streaming=False)
    assert batch.starting == EarliestBound()
    assert batch.ending == LatestBound()
    assert batch.client_config == {"bootstrap.servers": "127.0.0.1:9092"}


def test_options_are_case_insensitive_and_kafka_keys_pass_through() -> None:
    opts = parse_source_options(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "h:1",
            "Subscribe": "a, b,a",
            "kafka.fetch.max.bytes": "1000",
            "MAXOFFSETSPERTRIGGER": "50",
            "includeheaders": "TRUE",
        },
        streaming=True,
    )
    assert opts.subscription.topics == ("a", "b")
    assert opts.client_config == {"bootstrap.servers": "h:1", "fetch.max.bytes": "1000"}
    assert opts.max_offsets_per_trigger == 50
    assert opts.include_headers is True


def test_assign_and_pattern() -> None:
    opts = parse_source_options({"kafka.bootstrap.servers": "h:1", "assign": '{"b":[1,0],"a":[2]}'}, streaming=False)
    assert opts.subscription.kind == "assign"
    assert opts.subscription.assigned == (("a", 2), ("b", 0), ("b", 1))
    pat = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "pv-.*"}, streaming=True)
    assert pat.subscription.pattern == "pv-.*"


def test_offset_and_timestamp_bounds_with_precedence() -> None:
    opts = src(startingOffsets='{"t":{"0":23,"1":-2}}')
    assert opts.starting == SpecificOffsets({("t", 0): 23, ("t", 1): -2})
    # startingTimestamp > startingOffsetsByTimestamp > startingOffsets, as in Spark
    opts = src(startingOffsets="earliest", startingOffsetsByTimestamp='{"t":{"0":5}}', startingTimestamp="1000")
    assert opts.starting == GlobalTimestamp(1000)
    opts = src(startingOffsets="earliest", startingOffsetsByTimestamp='{"t":{"0":5}}')
    assert opts.starting == SpecificTimestamps({("t", 0): 5})
    batch = src(streaming=False, endingTimestamp="2000")
    assert batch.ending == GlobalTimestamp(2000)


@pytest.mark.parametrize(
    ("options", "streaming", "names"),
    [
        ({"subscribe": "t"}, True, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": " "}, True, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1"}, True, "'assign', 'subscribe' or 'subscribePattern'"),
        ({**BASE, "assign": '{"t":[0]}'}, True, "got assign, subscribe"),
        ({**BASE, "subscribe": " , "}, True, "subscribe"),
        ({"kafka.bootstrap.servers": "h:1", "assign": "[1]"}, True, "assign"),
        ({"kafka.bootstrap.servers": "h:1", "assign": '{"t":["x"]}'}, True, "assign"),
        ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "(unclosed"}, True, "subscribePattern"),
        ({**BASE, "startingOffsets": "{not json"}, True, "startingOffsets"),
        ({**BASE, "startingOffsets": '{"t":{"0":-3}}'}, True, "startingOffsets"),
        ({**BASE, "startingOffsets": "latest"}, False, "startingOffsets"),
        ({**BASE, "startingOffsets": '{"t":{"0":-1}}'}, False, "startingOffsets"),
        ({**BASE, "endingOffsets": "earliest"}, False, "endingOffsets"),
        ({**BASE, "endingOffsets": '{"t":{"0":-2}}'}, False, "endingOffsets"),
        ({**BASE, "endingOffsets": "latest"}, True, "endingOffsets"),
        ({**BASE, "endingTimestamp": "5"}, True, "endingTimestamp"),
        ({**BASE, "maxOffsetsPerTrigger": "10"}, False, "maxOffsetsPerTrigger"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
        ({**BASE, "maxOffsetsPerTrigger": "ten"}, True, "maxOffsetsPerTrigger"),
        ({**BASE, "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, True, "minOffsetsPerTrigger"),
        ({**BASE, "maxTriggerDelay": "5s"}, True, "maxTriggerDelay"),
        ({**BASE, "minOffsetsPerTrigger": "1", "maxTriggerDelay": "5 parsecs"}, True, "maxTriggerDelay"),
        ({**BASE, "minPartitions": "-1"}, True, "minPartitions"),
        ({**BASE, "failOnDataLoss": "maybe"}, True, "failOnDataLoss"),
        ({**BASE, "includeHeaders": "yes"}, True, "includeHeaders"),
        ({**BASE, "startingTimestamp": "yesterday"}, True, "startingTimestamp"),
        ({**BASE, "startingOffsetsByTimestamp": '{"t":{"0":-5}}'}, True, "startingOffsetsByTimestamp"),
        ({**BASE, "startingOffsetsByTimestampStrategy": "closest"}, True, "startingOffsetsByTimestampStrategy"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, True, "kafka.auto.offset.reset"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, True, "kafka.enable.auto.commit"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], streaming: bool, names: str) -> None:
    with pytest.raises(ValueError, match="Option|options") as info:
        parse_source_options(options, streaming=streaming)
    assert names in str(info.value)


def test_durations() -> None:
    assert parse_duration_ms("15m", "x") == 900_000
    assert parse_duration_ms("30s", "x") == 30_000
    assert parse_duration_ms("250", "x") == 250
    assert parse_duration_ms("1h", "x") == 3_600_000


def test_sink_options() -> None:
    opts = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "out", "kafka.linger.ms": "2"})
    assert opts.topic == "out"
    assert opts.client_config == {"bootstrap.servers": "h:1", "linger.ms": "2"}
    assert parse_sink_options({"kafka.bootstrap.servers": "h:1"}).topic is None
    with pytest.raises(ValueError, match=r"kafka\.bootstrap\.servers"):
        parse_sink_options({"topic": "t"})
    with pytest.raises(ValueError, match=r"kafka\.value\.serializer"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.value.serializer": "x"})
    with pytest.raises(ValueError, match="'topic'"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": " "})
