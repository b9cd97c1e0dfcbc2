"""Parsing and validating the connector's options, the same names and rules as Spark's Kafka connector.

Spark hands a data source its options as strings in a case-insensitive map. Everything here turns
them into small frozen, picklable values once, on the driver, so that a bad option fails the query
at definition time with a ``ValueError`` naming the option, and so that executors receive plain data
(never a client or a socket) inside each input partition.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: A Kafka topic-partition as the connector passes it around: ``(topic, partition)``.
TopicPartition = tuple[str, int]

EARLIEST = -2  # Spark's (and Kafka's ListOffsets) sentinel for "earliest" in per-partition JSON
LATEST = -1  # ... and for "latest"

#: Client properties that would break the connector's contract, as Spark's Kafka connector rejects them.
_UNSUPPORTED_SOURCE_KAFKA_KEYS = {
    "auto.offset.reset": "Set the source option 'startingOffsets' instead.",
    "key.deserializer": "Keys are always read as bytes; cast them in the DataFrame.",
    "value.deserializer": "Values are always read as bytes; cast them in the DataFrame.",
    "enable.auto.commit": "The source never commits offsets to the broker; Spark's checkpoint holds them.",
    "interceptor.classes": "Consumer interceptors are not supported.",
}
_UNSUPPORTED_SINK_KAFKA_KEYS = {
    "key.serializer": "Keys are written as bytes or UTF-8 strings; cast them in the DataFrame.",
    "value.serializer": "Values are written as bytes or UTF-8 strings; cast them in the DataFrame.",
}
_STREAM_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
_BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
_DURATION_UNITS_MS = {
    "us": 0.001,
    "ms": 1.0,
    "s": 1000.0,
    "m": 60_000.0,
    "min": 60_000.0,
    "h": 3_600_000.0,
    "d": 86_400_000.0,
}


# -- offset bounds: where a query starts or (batch) ends --------------------------------------------
@dataclass(frozen=True, slots=True)
class EarliestBound:
    """Every partition from its log start offset."""


@dataclass(frozen=True, slots=True)
class LatestBound:
    """Every partition from its high watermark (only new records)."""


@dataclass(frozen=True, slots=True)
class SpecificOffsets:
    """Per-partition offsets from JSON; -2 means earliest and -1 latest for that partition."""

    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class GlobalTimestamp:
    """The first offset whose timestamp is >= ``timestamp`` (ms), in every partition."""

    timestamp: int


@dataclass(frozen=True, slots=True)
class SpecificTimestamps:
    """Per-partition timestamps (ms) from JSON."""

    timestamps: Mapping[TopicPartition, int]


OffsetBound = EarliestBound | LatestBound | SpecificOffsets | GlobalTimestamp | SpecificTimestamps


# -- which partitions a query reads -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Subscription:
    """Exactly one of ``assign`` (fixed partitions), ``subscribe`` (topics) or ``subscribePattern``."""

    kind: str  # "assign" | "subscribe" | "subscribePattern"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def describe(self) -> str:
        if self.kind == "assign":
            return f"assign {_tps_text(self.assigned)}"
        if self.kind == "subscribe":
            return f"subscribe {','.join(self.topics)}"
        return f"subscribePattern {self.pattern}"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The validated options of a read (batch or streaming); picklable, shipped to executors."""

    client_config: Mapping[str, str]
    subscription: Subscription
    starting: OffsetBound
    ending: OffsetBound
    starting_timestamp_strategy: str = "error"  # or "latest"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10

    @property
    def bootstrap_servers(self) -> str:
        return self.client_config["bootstrap.servers"]


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The validated options of a write (batch or streaming)."""

    client_config: Mapping[str, str] = field(default_factory=dict)
    topic: str | None = None

    @property
    def bootstrap_servers(self) -> str:
        return self.client_config["bootstrap.servers"]


# -- parsing --------------------------------------------------------------------------------------
def _lower(options: Mapping[str, str]) -> dict[str, str]:
    """Spark's option map is case-insensitive (keys arrive lower-cased); accept any mapping in tests."""
    return {str(k).lower(): str(v) for k, v in dict(options).items() if v is not None}


def _get(opts: Mapping[str, str], name: str) -> str | None:
    return opts.get(name.lower())


def _tps_text(tps: Any) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


def parse_bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(opts, name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"Option '{name}' must be 'true' or 'false', got {raw!r}")
    return value == "true"


def parse_positive_int(opts: Mapping[str, str], name: str, *, allow_zero: bool = False) -> int | None:
    raw = _get(opts, name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"Option '{name}' must be an integer, got {raw!r}") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"Option '{name}' must be a positive integer, got {raw!r}")
    return value


def parse_duration_ms(text: str, name: str) -> int:
    """Spark's time strings: ``15m``, ``30s``, ``500ms``, ``1h``, ``2d``; a bare number is milliseconds."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if match is None or match.group(2) not in ("", *_DURATION_UNITS_MS):
        raise ValueError(f"Option '{name}' must be a duration such as '15m', '30s' or '500ms', got {text!r}")
    number, unit = int(match.group(1)), match.group(2) or "ms"
    return int(number * _DURATION_UNITS_MS[unit])


def _parse_json_object(raw: str, name: str, example: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"Option '{name}' is not valid JSON ({exc.msg}); expected e.g. {example}, got {raw!r}"
        ) from None
    if not isinstance(value, dict) or not value:
        raise ValueError(f"Option '{name}' must be a non-empty JSON object like {example}, got {raw!r}")
    return value


def parse_partition_longs(raw: str, name: str) -> dict[TopicPartition, int]:
    """``{"t":{"0":23,"1":-2}}`` -> ``{("t", 0): 23, ("t", 1): -2}``; used for offsets and timestamps."""
    example = '{"topicA":{"0":23,"1":-2}}'
    out: dict[TopicPartition, int] = {}
    for topic, parts in _parse_json_object(raw, name, example).items():
        if not isinstance(parts, dict):
            raise ValueError(f"Option '{name}': topic {topic!r} must map partitions to numbers, like {example}")
        for part, value in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise ValueError(f"Option '{name}': partition {part!r} of topic {topic!r} is not an integer") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"Option '{name}': value for {topic}-{partition} must be an integer, got {value!r}")
            out[(str(topic), partition)] = value
    return out


def parse_assign(raw: str) -> tuple[TopicPartition, ...]:
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    tps: list[TopicPartition] = []
    for topic, parts in _parse_json_object(raw, "assign", example).items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise ValueError(
                f"Option 'assign': topic {topic!r} must map to a list of partition numbers, like {example}"
            )
        if any(p < 0 for p in parts):
            raise ValueError(f"Option 'assign': partition numbers of topic {topic!r} must be >= 0")
        tps.extend((str(topic), p) for p in parts)
    if not tps:
        raise ValueError(f"Option 'assign' names no partitions; expected e.g. {example}")
    return tuple(sorted(set(tps)))


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in ("assign", "subscribe", "subscribePattern") if _get(opts, name) is not None]
    if len(given) != 1:
        which = "none was given" if not given else f"got {', '.join(given)}"
        raise ValueError(
            f"Exactly one of the options 'assign', 'subscribe' or 'subscribePattern' must be specified ({which})"
        )
    kind = given[0]
    raw = _get(opts, kind) or ""
    if kind == "assign":
        return Subscription("assign", assigned=parse_assign(raw))
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise ValueError(f"Option 'subscribe' must be a comma-separated list of topics, got {raw!r}")
        return Subscription("subscribe", topics=topics)
    if not raw.strip():
        raise ValueError("Option 'subscribePattern' must be a non-empty regular expression")
    try:
        re.compile(raw)
    except re.error as exc:
        raise ValueError(f"Option 'subscribePattern' is not a valid regular expression ({exc}): {raw!r}") from None
    return Subscription("subscribePattern", pattern=raw)


def _parse_offsets_option(opts: Mapping[str, str], name: str, default: OffsetBound) -> OffsetBound:
    raw = _get(opts, name)
    if raw is None:
        return default
    text = raw.strip()
    if text.lower() == "earliest":
        return EarliestBound()
    if text.lower() == "latest":
        return LatestBound()
    offsets = parse_partition_longs(text, name)
    for tp, value in offsets.items():
        if value < EARLIEST:
            raise ValueError(f"Option '{name}': offset {value} for {tp[0]}-{tp[1]} is invalid (use >= 0, -2 or -1)")
    return SpecificOffsets(offsets)


def _parse_timestamp(raw: str, name: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"Option '{name}' must be a timestamp in milliseconds since the epoch, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"Option '{name}' must be a non-negative timestamp in milliseconds, got {raw!r}")
    return value


def _parse_bound(opts: Mapping[str, str], *, prefix: str, default: OffsetBound) -> OffsetBound:
    """Precedence as in Spark: ``<prefix>Timestamp`` > ``<prefix>OffsetsByTimestamp`` > ``<prefix>Offsets``."""
    global_ts = _get(opts, f"{prefix}Timestamp")
    if global_ts is not None:
        return GlobalTimestamp(_parse_timestamp(global_ts, f"{prefix}Timestamp"))
    by_ts = _get(opts, f"{prefix}OffsetsByTimestamp")
    if by_ts is not None:
        stamps = parse_partition_longs(by_ts, f"{prefix}OffsetsByTimestamp")
        for tp, value in stamps.items():
            if value < 0:
                raise ValueError(f"Option '{prefix}OffsetsByTimestamp': timestamp for {tp[0]}-{tp[1]} is negative")
        return SpecificTimestamps(stamps)
    return _parse_offsets_option(opts, f"{prefix}Offsets", default)


def parse_client_config(opts: Mapping[str, str], *, unsupported: Mapping[str, str]) -> dict[str, str]:
    """``kafka.*`` options with the prefix removed, for odradek's client; bootstrap servers required."""
    config = {key[len("kafka.") :]: value for key, value in opts.items() if key.startswith("kafka.")}
    servers = config.get("bootstrap.servers", "").strip()
    if not servers:
        raise ValueError("Option 'kafka.bootstrap.servers' must be specified (a comma-separated list of host:port)")
    config["bootstrap.servers"] = servers
    for key, why in unsupported.items():
        if key in config:
            raise ValueError(f"Option 'kafka.{key}' is not supported: {why}")
    return config


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate a read's options; ``streaming`` selects the defaults and rules of readStream vs read."""
    opts = _lower(options)
    client_config = parse_client_config(opts, unsupported=_UNSUPPORTED_SOURCE_KAFKA_KEYS)
    subscription = parse_subscription(opts)
    starting = _parse_bound(opts, prefix="starting", default=LatestBound() if streaming else EarliestBound())
    if streaming:
        for name in _BATCH_ONLY:
            if _get(opts, name) is not None:
                raise ValueError(f"Option '{name}' is not valid in streaming queries (batch reads only)")
        ending: OffsetBound = LatestBound()
    else:
        for name in _STREAM_ONLY:
            if _get(opts, name) is not None:
                raise ValueError(f"Option '{name}' is only valid in streaming queries")
        ending = _parse_bound(opts, prefix="ending", default=LatestBound())
        if isinstance(starting, LatestBound):
            raise ValueError("Option 'startingOffsets' cannot be 'latest' for batch reads (use 'earliest' or JSON)")
        if isinstance(starting, SpecificOffsets) and LATEST in starting.offsets.values():
            raise ValueError("Option 'startingOffsets': -1 (latest) is not allowed for batch reads")
        if isinstance(ending, EarliestBound):
            raise ValueError("Option 'endingOffsets' cannot be 'earliest' for batch reads (use 'latest' or JSON)")
        if isinstance(ending, SpecificOffsets) and EARLIEST in ending.offsets.values():
            raise ValueError("Option 'endingOffsets': -2 (earliest) is not allowed for batch reads")
    strategy = (_get(opts, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ValueError(f"Option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got {strategy!r}")
    max_per_trigger = parse_positive_int(opts, "maxOffsetsPerTrigger")
    min_per_trigger = parse_positive_int(opts, "minOffsetsPerTrigger")
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise ValueError(
            f"Option 'minOffsetsPerTrigger' ({min_per_trigger}) must not exceed "
            f"'maxOffsetsPerTrigger' ({max_per_trigger})"
        )
    delay_raw = _get(opts, "maxTriggerDelay")
    if delay_raw is not None and min_per_trigger is None:
        raise ValueError("Option 'maxTriggerDelay' only applies together with 'minOffsetsPerTrigger'")
    delay_ms = parse_duration_ms(delay_raw, "maxTriggerDelay") if delay_raw is not None else 15 * 60_000
    return SourceOptions(
        client_config=client_config,
        subscription=subscription,
        starting=starting,
        ending=ending,
        starting_timestamp_strategy=strategy,
        fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
        include_headers=parse_bool(opts, "includeHeaders", False),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=delay_ms,
        min_partitions=parse_positive_int(opts, "minPartitions"),
        max_records_per_partition=parse_positive_int(opts, "maxRecordsPerPartition"),
        poll_timeout_ms=parse_positive_int(opts, "kafkaConsumer.pollTimeoutMs") or 120_000,
        fetch_offset_num_retries=_default(parse_positive_int(opts, "fetchOffset.numRetries", allow_zero=True), 3),
        fetch_offset_retry_interval_ms=_default(
            parse_positive_int(opts, "fetchOffset.retryIntervalMs", allow_zero=True), 10
        ),
    )


def _default(value: int | None, default: int) -> int:
    return default if value is None else value


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate a write's options (the column checks happen against the DataFrame's schema)."""
    opts = _lower(options)
    client_config = parse_client_config(opts, unsupported=_UNSUPPORTED_SINK_KAFKA_KEYS)
    topic = _get(opts, "topic")
    if topic is not None and not topic.strip():
        raise ValueError("Option 'topic' must not be empty")
    return SinkOptions(client_config=client_config, topic=topic.strip() if topic is not None else None)
