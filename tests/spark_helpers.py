"""Shared helpers of the Spark connector's integration tests (test_spark_batch.py, test_spark_streaming.py)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from odradek.client import Admin, NewTopic, Producer

BASE_TS = 1_700_000_000_000


def new_topic(bootstrap: str, partitions: int) -> str:
    name = f"spark-{uuid.uuid4().hex[:10]}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        errors = admin.create_topics([NewTopic(name, partitions, 1)])
    assert errors[name] is None, errors
    return name


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 2}) as producer:
        futures = [producer.send(topic, **r) for r in records]
        producer.flush()
    for f in futures:
        f.result(timeout=30)


def source(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def stream(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.readStream.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def produce_range(bootstrap: str, topic: str, start: int, stop: int) -> None:
    """Values ``start..stop-1`` as decimal strings, keyed by themselves (so spread over partitions)."""
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        futures = []
        for i in range(start, stop):
            s = str(i).encode()
            futures.append(producer.send(topic, s, key=s))
        producer.flush()
    failed = [f.exception() for f in futures if f.exception() is not None]
    assert not failed, f"{len(failed)} records were not delivered: {failed[0]!r}"


def wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def rows_in(query: Any) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)
