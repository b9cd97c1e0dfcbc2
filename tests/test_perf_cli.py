"""``odradek perf produce|consume|e2e --json`` against the broker subprocess: the summary's fields.

Tiny record counts and no assertions on speed (benchmarks live in bench/): these tests check that
each mode runs end to end against odradek and reports what docs/performance.md says it reports.
"""

from __future__ import annotations

import json
import socket
from array import array
from typing import Any

import pytest

from odradek.cli import main
from odradek.perf import latency_summary
from odradek.testing.broker import BrokerProcess, unique_topic

pytestmark = pytest.mark.integration

LATENCY_KEYS = {"avg", "p50", "p95", "p99", "p99.9", "max", "samples"}


def _perf(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main(["perf", *argv, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    summary: dict[str, Any] = json.loads(out)  # --json prints the summary and nothing else
    return summary


def _check_common(summary: dict[str, Any], mode: str, client: str, records: int, record_size: int) -> None:
    assert summary["mode"] == mode
    assert summary["client"] == client
    assert summary["records"] == records
    assert summary["bytes"] == records * record_size
    assert summary["seconds"] > 0
    assert summary["records_per_s"] == pytest.approx(records / summary["seconds"])
    assert summary["mb_per_s"] == pytest.approx(records * record_size / summary["seconds"] / 1e6)
    assert summary["errors"] == 0


CLIENTS = pytest.mark.parametrize("client", ["librdkafka", "odradek"])


@CLIENTS
def test_produce_then_consume_report_their_summaries(
    odradek_broker: BrokerProcess, capsys: pytest.CaptureFixture[str], client: str
) -> None:
    topic = unique_topic("perf")
    common = ["--bootstrap-server", odradek_broker.bootstrap, "--topic", topic, "--partitions", "2", "--client", client]
    produced = _perf(
        capsys,
        "produce",
        *common,
        "--num-records", "500", "--record-size", "64", "--acks", "all",
        "--compression", "lz4", "--linger-ms", "1", "--latency-every", "5",
    )  # fmt: skip
    _check_common(produced, "produce", client, 500, 64)
    assert set(produced["latency_ms"]) == LATENCY_KEYS
    assert produced["latency_ms"]["samples"] == 100  # every 5th of 500 records is timed
    lat = produced["latency_ms"]
    assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
    assert produced["settings"]["acks"] == "all"
    assert produced["settings"]["compression.type"] == "lz4"

    consumed = _perf(capsys, "consume", *common, "--num-records", "500", "--timeout-s", "30")
    _check_common(consumed, "consume", client, 500, 64)
    assert consumed["latency_ms"] == {}


@CLIENTS
def test_e2e_reports_end_to_end_latency(
    odradek_broker: BrokerProcess, capsys: pytest.CaptureFixture[str], client: str
) -> None:
    topic = unique_topic("perf-e2e")
    # a producer property passes through to the client (each client spells its in-flight cap its own way)
    in_flight = "max.in.flight" if client == "librdkafka" else "max.in.flight.requests.per.connection"
    summary = _perf(
        capsys,
        "e2e",
        "--bootstrap-server", odradek_broker.bootstrap, "--topic", topic, "--client", client,
        "--num-records", "200", "--record-size", "32", "--throughput", "2000",
        "--producer-property", f"{in_flight}=1",
    )  # fmt: skip
    _check_common(summary, "e2e", client, 200, 32)
    assert set(summary["latency_ms"]) == LATENCY_KEYS
    assert summary["latency_ms"]["samples"] == 200  # every record is stamped and timed
    assert summary["latency_ms"]["p50"] > 0
    assert summary["settings"] == {"throughput": 2000.0, "acks": "1", "linger.ms": 0, in_flight: "1"}


def test_latency_summary_percentiles() -> None:
    samples = array("d", [float(i) for i in range(1000, 0, -1)])  # 1..1000 ms, unordered
    got = latency_summary(samples)
    assert got == {
        "avg": 500.5,
        "p50": 501.0,
        "p95": 951.0,
        "p99": 991.0,
        "p99.9": 1000.0,
        "max": 1000.0,
        "samples": 1000.0,
    }


def test_no_broker_at_bootstrap_is_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A bootstrap address nothing listens on: a one-line error and exit code 2, no traceback."""
    with socket.socket() as s:  # a port just freed: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["perf", "produce", "--bootstrap-server", f"127.0.0.1:{port}", "--topic", "t", "--num-records", "1"])
    assert code == 2
    assert f"odradek: error: cannot reach a broker at 127.0.0.1:{port}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["produce", "--record-size", "-1"], "argument --record-size: must be above 0, not -1"),
        (["produce", "--num-records", "0"], "argument --num-records: must be above 0, not 0"),
        (["consume", "--timeout-s", "x"], "argument --timeout-s: invalid float value: 'x'"),
    ],
)
def test_bad_numbers_are_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A ValueError traceback before; now argparse's usage error and exit code 2."""
    base = ["perf", argv[0], "--topic", "t", "--num-records", "1"]
    with pytest.raises(SystemExit) as info:
        main([*base, *argv[1:]])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"usage: odradek perf {argv[0]}" in err and message in err


def test_consume_timeout_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["perf", "consume", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--timeout-s TIMEOUT_S fail when NUM_RECORDS have not been read after this many seconds" in help_text


def test_consume_of_an_unknown_topic_fails_at_once(
    odradek_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """It created the topic and waited --timeout-s (120 s) for records that could not come."""
    topic = unique_topic("nosuch")
    code = main(["perf", "consume", "--bootstrap-server", odradek_broker.bootstrap, "--topic", topic,
                 "--num-records", "10"])  # fmt: skip
    assert code == 2
    assert f"odradek: error: topic '{topic}' does not exist" in capsys.readouterr().err
    assert main(["topics", "list", "--bootstrap-server", odradek_broker.bootstrap]) == 0
    assert topic not in capsys.readouterr().out.split()
