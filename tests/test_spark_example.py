"""The page-visits example (examples/page_visits/) on the shared SparkSession against a real broker:
its job function's counts per subnet and minute, and its one-command runner with small numbers."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from spark_helpers import new_topic, produce, source

from odradek.testing.broker import BrokerProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def bootstrap(odradek_broker: BrokerProcess) -> str:
    """The session's shared broker (odradek.testing's ``odradek_broker``)."""
    return odradek_broker.bootstrap


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "page_visits"
MINUTE = 1_700_000_040_000  # 2023-11-14T22:14:00Z, a minute boundary


def load(name: str) -> ModuleType:
    sys.path.insert(0, str(EXAMPLE))  # run.py imports job.py as a sibling module
    try:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXAMPLE))


def test_job_counts_visits_per_subnet_per_minute(spark_session: Any, bootstrap: str, tmp_path: Path) -> None:
    job = load("job")
    source_topic, sink_topic = new_topic(bootstrap, 2), new_topic(bootstrap, 1)
    visits = [(MINUTE + (i % 3) * 30_000, f"192.168.{i % 4}.{i % 200}") for i in range(600)]
    visits.append((MINUTE, "not-an-ip"))  # malformed: dropped
    produce(bootstrap, source_topic, [{"value": f"{ts},www.example.com,{ip}", "key": ip} for ts, ip in visits])
    query = job.start_job(
        spark_session,
        bootstrap=bootstrap,
        source_topic=source_topic,
        sink_topic=sink_topic,
        parquet_dir=str(tmp_path / "parquet"),
        checkpoint_dir=str(tmp_path / "checkpoint"),
        trigger_seconds=0.5,
        watermark="1 hour",
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    expected = Counter(
        ("2023-11-14T22:14Z" if ts < MINUTE + 60_000 else "2023-11-14T22:15Z", ip.rsplit(".", 1)[0] + ".0/24")
        for ts, ip in visits[:-1]
    )
    finals = job.final_counts(spark_session, str(tmp_path / "parquet")).collect()
    # pyspark returns naive local-time datetimes: back to UTC through the epoch
    utc = {r: dt.datetime.fromtimestamp(r.minute.timestamp(), dt.UTC).strftime("%Y-%m-%dT%H:%MZ") for r in finals}
    got = {(utc[r], r.subnet): r.visits for r in finals}
    assert got == dict(expected)
    latest: dict[str, dict[str, Any]] = {}
    for r in source(spark_session, bootstrap, subscribe=sink_topic).orderBy("offset").collect():
        latest[r.key.decode()] = json.loads(r.value)
    assert {k: v["visits"] for k, v in latest.items()} == {f"{m}|{s}": n for (m, s), n in expected.items()}


def test_runner_counts_every_produced_visit(spark_session: Any, bootstrap: str, tmp_path: Path) -> None:
    run = load("run")
    summary = run.run(
        bootstrap,
        tmp_path,
        seconds=3,
        rate=300,
        subnets=4,
        source_topic=new_topic(bootstrap, 2),
        sink_topic=new_topic(bootstrap, 1),
        spark=spark_session,
    )
    assert summary["produced"] >= 800
    assert summary["counted"] == summary["produced"]
    assert summary["changelog"] >= summary["cells"] >= 4
