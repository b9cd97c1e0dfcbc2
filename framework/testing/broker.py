"""An ``odradek serve`` subprocess for integration tests with real Kafka clients.

``odradek_broker`` is a session-scoped fixture: one broker for the whole run, on a free loopback
port (the broker binds port 0 and the fixture reads the bound port from its ``listening on`` log
line, so there is no race for the port), with its data in a temp dir. Tests share it and isolate
themselves with unique topic names (:func:`unique_topic`).

Tests that restart or kill a broker start their own with :func:`start_broker` (a context manager)
and call ``restart()`` / ``kill()`` on it; a restarted broker keeps its port and data dir, so
clients' bootstrap addresses and cached metadata stay valid. A broker that dies fails the test
with the tail of its log.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
_LISTENING = re.compile(r"listening on (\w+)://([^\s:]+|\[[^\]]+\]):(\d+)")
_METRICS = re.compile(r"metrics for Prometheus at (http://\S+/metrics)")

#: Prometheus samples by (sample name, labels), as :meth:`BrokerProcess.metrics` returns them.
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class BrokerDied(Exception):
    """The broker process exited when it should be running; the message carries its log tail."""


def parse_samples(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, by (sample name, labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float:
    """The value of sample ``name`` with exactly ``labels``; a missing one fails naming its kin."""
    key = (name, frozenset(labels.items()))
    if key not in samples:
        kin = sorted({(n, tuple(sorted(ls))) for n, ls in samples if n.startswith(name)})
        raise AssertionError(f"no sample {name}{labels}; samples of that name: {kin[:20]}")
    return samples[key]


def unique_topic(prefix: str = "t") -> str:
    """A topic name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class BrokerProcess:
    """One ``odradek serve`` process with its own data dir and log files."""

    workdir: Path
    settings: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 0  # 0 until the first start has bound one; restarts reuse it
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def bootstrap(self) -> str:
        """``host:port`` for clients' bootstrap.servers."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"broker-{self.starts}.log"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def command(self) -> list[str]:
        sets = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.data_dir),
            **self.settings,
        }
        cmd = [sys.executable, "-m", "odradek", "serve"]
        for key, value in sets.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Spawn the broker and wait until it listens and accepts connections."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("broker already running")
        self.starts += 1
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ODRADEK_")}
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command(), cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise BrokerDied(
                    f"odradek serve exited with {self.process.returncode} while starting; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            match = _LISTENING.search(self.log_path.read_text(errors="replace"))
            if match and self._accepts(int(match.group(3))):
                self.port = int(match.group(3))
                return
            if time.monotonic() > deadline:
                self.stop()
                raise BrokerDied(f"odradek serve did not start in {timeout_s:.0f} s; log:\n{self.log_tail()}")
            time.sleep(0.05)

    def _accepts(self, port: int) -> bool:
        try:
            with socket.create_connection((self.host, port), timeout=1):
                return True
        except OSError:
            return False

    def metrics_url(self) -> str:
        """Where this start of the broker serves its metrics (``metrics.prometheus.listener``
        set; port 0 is read from the log)."""
        found = _METRICS.search(self.log_path.read_text(errors="replace"))
        if found is None:
            raise AssertionError(f"the broker logged no metrics address; log:\n{self.log_tail()}")
        return found.group(1)

    def metrics(self) -> Samples:
        """Every sample the broker's metrics endpoint serves now."""
        with urllib.request.urlopen(self.metrics_url(), timeout=10) as response:
            return parse_samples(response.read().decode())

    def log_problems(self) -> list[str]:
        """ERROR/CRITICAL lines and tracebacks in every log of this broker: bugs, not client errors
        (those are WARNINGs)."""
        problems = []
        for path in sorted(self.workdir.glob("broker-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback"):
                    problems.append(f"{path.name}: {line}")
        return problems

    def check_alive(self) -> None:
        """Raise ``BrokerDied`` (with the log tail) unless the broker is still running."""
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise BrokerDied(f"broker is not running (exit code {code}); log:\n{self.log_tail()}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (a clean shutdown) and wait; SIGKILL if it does not exit in time."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown at all."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Stop cleanly and start again on the same port with the same data."""
        self.stop()
        self.start(timeout_s)


@contextlib.contextmanager
def start_broker(workdir: Path | None = None, settings: Mapping[str, Any] | None = None) -> Iterator[BrokerProcess]:
    """A broker of its own for one test (restarts, kills, special configs); stopped afterwards."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="odradek-broker-")))
        broker = BrokerProcess(workdir, {k: str(v) for k, v in (settings or {}).items()})
        try:
            broker.start()
        except BrokerDied as exc:
            pytest.fail(str(exc), pytrace=False)
        try:
            yield broker
        finally:
            broker.stop()


@pytest.fixture(scope="session")
def odradek_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker subprocess for the whole test session (share it; use unique topic names).

    With ``ODRADEK_TEST_KEEP=<dir>`` its data and logs go to ``<dir>/odradek-broker`` and stay
    there after the run (pytest's own temp dirs are rotated away by later runs).
    """
    keep = os.environ.get("ODRADEK_TEST_KEEP")
    workdir = Path(keep) / "odradek-broker" if keep else tmp_path_factory.mktemp("odradek-broker")
    with start_broker(workdir) as broker:
        yield broker


__all__ = ["BrokerDied", "BrokerProcess", "odradek_broker", "start_broker", "unique_topic"]
