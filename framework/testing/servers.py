"""Real ZooKeeper and etcd servers for integration tests, on free loopback ports in temp dirs.

``zookeeper_server`` and ``etcd_server`` are session-scoped fixtures: one server of each kind for
the whole test run, shared by every test (isolate tests with a per-test ZooKeeper chroot or etcd
key prefix: ``unique_chroot()``). Fault tests that kill or restart a server start their own with
:func:`start_zookeeper` / :func:`start_etcd` (context managers) instead of disturbing the shared one.

The servers come from Debian packages (``zookeeper`` with a Java runtime, ``etcd-server``; .ci/run
installs them). A missing binary fails the test with the package to install: integration tests
never skip silently.
"""

from __future__ import annotations

import abc
import contextlib
import os
import platform
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
#: Optional slf4j binding so the server's warnings land in its log file (not installed: silence).
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
#: Where Debian's etcd-server puts etcd, used when it is not on PATH.
ETCD_BINARY = Path("/usr/bin/etcd")
START_TIMEOUT_S = 30.0
S = TypeVar("S", bound="_ManagedServer")


class ServerExited(Exception):
    """The server process exited while starting (typically: its port was taken meanwhile)."""


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def unique_chroot(prefix: str = "test") -> str:
    """A fresh path (``/test-<hex>``) to isolate one test's keys on a shared server."""
    return f"/{prefix}-{uuid.uuid4().hex[:12]}"


@dataclass
class _ServerProcess:
    """A server subprocess with its command line, so a fault test can kill and restart it."""

    name: str
    command: list[str]
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def spawn(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child process owns it
        try:
            self.process = subprocess.Popen(
                self.command,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,  # a Ctrl-C of pytest must not hit the server first
            )
        finally:
            log.close()

    def wait_ready(self, probe: Callable[[], bool], timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll ``probe()`` until it returns True; ``ServerExited`` if the process died, a test
        failure with the server's log if it never answered."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise ServerExited(f"{self.name} exited with {self.process.returncode} on start:\n{self.log_tail()}")
            if probe():
                return
            time.sleep(0.05)
        self.kill()
        pytest.fail(f"{self.name} did not answer within {timeout_s}s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: the server dies without closing sessions (a crash)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit promptly."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()


class _ManagedServer(abc.ABC):
    """What the server handles share: start (again), crash and stop their ``_ServerProcess``."""

    server: _ServerProcess

    @abc.abstractmethod
    def is_ready(self) -> bool:
        """Whether the server answers clients yet."""

    def launch(self) -> None:
        """Spawn the process and wait until it answers; ``ServerExited`` if it dies meanwhile."""
        self.server.spawn()
        self.server.wait_ready(self.is_ready)

    def start(self) -> None:
        """Start (or restart after ``kill``/``stop``) on the same ports and data dir."""
        try:
            self.launch()
        except ServerExited as exc:
            pytest.fail(str(exc))

    def kill(self) -> None:
        self.server.kill()

    def stop(self) -> None:
        self.server.stop()


@dataclass
class ZooKeeperServer(_ManagedServer):
    """A standalone ZooKeeper (``ZooKeeperServerMain``) on 127.0.0.1:``port``."""

    port: int
    data_dir: Path
    server: _ServerProcess

    @property
    def connect_string(self) -> str:
        """``host:port`` for ``zookeeper.connect`` (append a chroot to isolate a test)."""
        return f"127.0.0.1:{self.port}"

    def is_ready(self) -> bool:
        """ZooKeeper's ``ruok`` four-letter word answers ``imok`` once it serves clients."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(8) == b"imok"
        except OSError:
            return False


@dataclass
class EtcdServer(_ManagedServer):
    """A single-member etcd on 127.0.0.1:``client_port`` (peers on ``peer_port``)."""

    client_port: int
    peer_port: int
    data_dir: Path
    server: _ServerProcess

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>`` for ``etcd.endpoints``."""
        return f"http://127.0.0.1:{self.client_port}"

    def is_ready(self) -> bool:
        """``/health`` reports true once the member has elected itself leader."""
        try:
            with urllib.request.urlopen(f"{self.endpoint}/health", timeout=1) as r:
                return b'"true"' in r.read()
        except OSError:
            return False


def _java() -> str:
    java = shutil.which("java")
    if java is None or not ZOOKEEPER_JAR.exists():
        pytest.fail(
            "ZooKeeper is not installed: install the Debian package 'zookeeper' "
            "(apt-get install zookeeper, which brings a Java runtime); "
            f"expected {ZOOKEEPER_JAR} and `java` on PATH"
        )
    return java


def _etcd() -> str:
    etcd = shutil.which("etcd") or (str(ETCD_BINARY) if ETCD_BINARY.exists() else None)
    if etcd is None:
        pytest.fail("etcd is not installed: install the Debian package 'etcd-server' (apt-get install etcd-server)")
    return etcd


#: Attempts with fresh ports when a server dies on start (another process took a port between
#: ``free_port`` and the server's bind).
START_ATTEMPTS = 3


@contextlib.contextmanager
def _running(make: Callable[[], S]) -> Iterator[S]:
    """``make()`` builds a server on fresh ports; start it (retrying on early exit), stop it at the end."""
    for attempt in range(START_ATTEMPTS):
        server = make()
        try:
            server.launch()
            break
        except ServerExited as exc:
            server.stop()
            if attempt == START_ATTEMPTS - 1:
                pytest.fail(f"{exc}\n(after {START_ATTEMPTS} attempts on fresh ports)")
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def _workdir(workdir: Path | None, prefix: str) -> Iterator[Path]:
    """``workdir`` (created), or a temporary directory removed at the end."""
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        yield workdir
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


def _zoo_cfg(data_dir: Path, port: int) -> str:
    return "\n".join(
        [
            "tickTime=200",
            f"dataDir={data_dir}",
            f"clientPort={port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat",
            "maxClientCnxns=0",
            "minSessionTimeout=400",
            "maxSessionTimeout=60000",
            "forceSync=no",
            "",
        ]
    )


@contextlib.contextmanager
def start_zookeeper(workdir: Path | None = None) -> Iterator[ZooKeeperServer]:
    """A private ZooKeeper for the ``with`` block (fault tests may kill and restart it).

    tickTime 200 ms lets tests use session timeouts down to 400 ms; forceSync=no because a test
    server needs no durability across machine crashes.
    """
    java = _java()
    with _workdir(workdir, "odradek-zk-") as wd:
        data_dir = wd / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        classpath = [str(ZOOKEEPER_JAR)] + ([str(SLF4J_SIMPLE_JAR)] if SLF4J_SIMPLE_JAR.exists() else [])

        def make() -> ZooKeeperServer:
            port = free_port()
            cfg = wd / "zoo.cfg"
            cfg.write_text(_zoo_cfg(data_dir, port))
            command = [
                java,
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-cp",
                ":".join(classpath),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(cfg),
            ]
            return ZooKeeperServer(port, data_dir, _ServerProcess("zookeeper", command, wd))

        with _running(make) as zk:
            yield zk


@contextlib.contextmanager
def start_etcd(workdir: Path | None = None, *, max_txn_ops: int | None = None) -> Iterator[EtcdServer]:
    """A private single-member etcd for the ``with`` block.

    Short heartbeat/election intervals make it elect itself within a fraction of a second and
    allow lease TTLs down to 1 s (etcd's minimum TTL is 1.5 election timeouts). ``max_txn_ops``
    sets its ``--max-txn-ops`` (etcd's default: 128; brokers need ``etcd.max.txn.ops`` to match).
    """
    etcd = _etcd()
    with _workdir(workdir, "odradek-etcd-") as wd:
        machine = platform.machine()
        env = {"ETCD_UNSUPPORTED_ARCH": machine} if machine not in {"x86_64", "AMD64"} else {}

        def make() -> EtcdServer:
            client_port = free_port()
            peer_port = free_port()
            while peer_port == client_port:
                peer_port = free_port()
            client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
            data_dir = wd / f"data-{client_port}"  # a member's data dir remembers its peer URL
            command = [
                etcd,
                "--name=odradek-test",
                f"--data-dir={data_dir}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=odradek-test={peer_url}",
                "--heartbeat-interval=50",
                "--election-timeout=300",
                "--log-level=warn",
                *([f"--max-txn-ops={max_txn_ops}"] if max_txn_ops is not None else []),
            ]
            return EtcdServer(client_port, peer_port, data_dir, _ServerProcess("etcd", command, wd, env))

        with _running(make) as server:
            yield server


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the whole test session (isolate tests with a chroot)."""
    with start_zookeeper(tmp_path_factory.mktemp("zookeeper")) as zk:
        yield zk


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One real etcd for the whole test session (isolate tests with a key prefix)."""
    with start_etcd(tmp_path_factory.mktemp("etcd")) as server:
        yield server
