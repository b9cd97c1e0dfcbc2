"""kcat (librdkafka 1.x era CLI) against an ``odradek serve`` subprocess: -L, -P, -C."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from odradek.testing import BrokerProcess, unique_topic

pytestmark = pytest.mark.integration

KCAT = shutil.which("kcat") or "/usr/bin/kcat"


def kcat(*args: str, stdin: bytes | None = None) -> bytes:
    assert shutil.which(KCAT), "kcat is not installed (Debian package: kcat)"
    result = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout


def test_kcat_produce_consume_and_metadata(odradek_broker: BrokerProcess) -> None:
    topic = unique_topic("kcat")
    lines = [f"key{i}:value {i}" for i in range(40)]
    kcat("-b", odradek_broker.bootstrap, "-P", "-t", topic, "-K", ":", "-z", "snappy", stdin="\n".join(lines).encode())
    out = kcat("-b", odradek_broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o %k=%s\n")
    assert out.decode().splitlines() == [f"{i} key{i}=value {i}" for i in range(40)]
    metadata = json.loads(kcat("-b", odradek_broker.bootstrap, "-L", "-J", "-t", topic))
    assert [b["id"] for b in metadata["brokers"]] == [0]
    assert metadata["brokers"][0]["name"] == odradek_broker.bootstrap
    (entry,) = metadata["topics"]
    assert entry["topic"] == topic and [p["partition"] for p in entry["partitions"]] == [0]
    assert entry["partitions"][0]["leader"] == 0
