"""The broker under test as a subprocess (``odradek serve``), and a /proc probe of its CPU and memory.

Bench figures are meaningless without the broker's own cost next to them: CPU seconds per GB moved
and peak RSS. Both come straight from /proc (no psutil): ``utime + stime`` of every thread from
``/proc/<pid>/stat`` and the high-water mark ``VmHWM`` from ``/proc/<pid>/status``, which writing
``5`` to ``/proc/<pid>/clear_refs`` resets so each scenario gets its own peak. A 20 Hz sampler of
``VmRSS`` backs the peak up where ``clear_refs`` is not permitted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 60.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of all threads of ``pid`` so far."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    # after the ")" closing the command name: state is field 3, utime 14 and stime 15 (1-based)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _status_kib(pid: int, key: bytes) -> int:
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


@dataclass
class Usage:
    """What the broker spent during one measured interval."""

    cpu_s: float
    peak_rss_mb: float
    rss_end_mb: float


class Probe:
    """Measures one process's CPU seconds and peak RSS between ``start()`` and ``stop()``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._cpu0 = 0.0
        self._peak_kib = 0
        self._hwm_reset = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")  # reset VmHWM to the current RSS
            self._hwm_reset = True
        except OSError:
            self._hwm_reset = False
        self._peak_kib = _status_kib(self.pid, b"VmRSS:")
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self._thread.start()
        self._cpu0 = cpu_seconds(self.pid)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self._peak_kib = max(self._peak_kib, _status_kib(self.pid, b"VmRSS:"))
            except OSError:
                return

    def stop(self) -> Usage:
        cpu = cpu_seconds(self.pid) - self._cpu0
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        rss = _status_kib(self.pid, b"VmRSS:")
        peak = max(self._peak_kib, rss)
        if self._hwm_reset:
            peak = max(peak, _status_kib(self.pid, b"VmHWM:"))
        return Usage(cpu, peak / 1024, rss / 1024)


class Broker:
    """``odradek serve`` on a free loopback port with a fresh data dir, as a context manager.

    It is odradek's own test fixture process (:class:`odradek.testing.broker.BrokerProcess`: the
    broker binds port 0 and reports it, so there is no port race); ``settings`` are ``--set``
    overrides. The broker's log is copied to ``log_copy`` when it stops.
    """

    def __init__(self, workdir: Path, log_copy: Path, settings: dict[str, str] | None = None) -> None:
        from odradek.testing.broker import BrokerProcess

        self.proc = BrokerProcess(workdir, dict(settings or {}))
        self.log_copy = log_copy

    @property
    def pid(self) -> int:
        assert self.proc.process is not None
        return self.proc.process.pid

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap

    def command(self) -> list[str]:
        return self.proc.command()

    def __enter__(self) -> Broker:
        self.proc.start(START_TIMEOUT_S)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.proc.stop()
        with contextlib.suppress(OSError):
            shutil.copyfile(self.proc.log_path, self.log_copy)


def temp_data_dir(parent: Path | None = None) -> Path:
    """A fresh directory for the broker's log (``parent`` picks the disk; default: the temp dir)."""
    return Path(tempfile.mkdtemp(prefix="odradek-bench-", dir=parent))
