"""``odradek serve`` as a user runs it: logs where it listens and where its data is, shuts down
cleanly on SIGINT (Ctrl-C) and SIGTERM, refuses a taken port with a clear error."""

from __future__ import annotations

import json
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from odradek.cli import main
from odradek.testing import BrokerProcess, start_broker

pytestmark = pytest.mark.integration


def test_serve_logs_endpoints_and_data_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    signum = signal.SIGINT
    broker = BrokerProcess(tmp_path, {"log.dirs": "./data"})  # relative: under the working dir
    broker.start()
    try:
        log = broker.log_path.read_text()
        assert f"listening on PLAINTEXT://127.0.0.1:{broker.port} (broker 0)" in log
        assert f"data in {tmp_path / 'data'}" in log
        assert (tmp_path / "data").is_dir()
        assert broker.process is not None
        broker.process.send_signal(signum)
        assert broker.process.wait(20) == 0
    finally:
        broker.kill()
    log = broker.log_path.read_text()
    assert f"{signal.Signals(signum).name} received: shutting down" in log
    assert "broker 0 stopped" in log
    assert "Traceback" not in log


def test_json_logs_are_one_object_a_line(tmp_path: Path) -> None:
    """``log.format = json``: every line the broker writes is one JSON object with the time (ISO
    8601, UTC), level, logger and message; a WARNING keeps its level."""
    broker = BrokerProcess(tmp_path, {"log.format": "json"})
    broker.start()
    try:
        with socket.create_connection(("127.0.0.1", broker.port)) as sock:
            sock.sendall(struct.pack(">i", -5))  # a negative frame size: one WARNING, the connection closed
            sock.recv(1)
    finally:
        assert broker.stop() == 0
    lines = [json.loads(line) for line in broker.log_path.read_text().splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message"} <= set(entry) for entry in lines)
    assert all(entry["time"].endswith("+00:00") for entry in lines)
    listening = [e for e in lines if e["message"].startswith(f"listening on PLAINTEXT://127.0.0.1:{broker.port}")]
    assert listening and listening[0]["level"] == "INFO" and listening[0]["logger"] == "odradek.serve"
    refused = [e for e in lines if "negative frame size" in e["message"]]
    assert refused and refused[0]["level"] == "WARNING"
    assert any(e["message"] == "broker 0 stopped" for e in lines)


def test_serve_refuses_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        last = _failed_start_line(tmp_path, f"PLAINTEXT://127.0.0.1:{port}")
    assert f"broker failed to start: listener PLAINTEXT://127.0.0.1:{port}: " in last and "in use" in last


def test_serve_names_a_listener_whose_host_is_not_local(tmp_path: Path) -> None:
    last = _failed_start_line(
        tmp_path,
        "PLAINTEXT://127.0.0.1:0,OTHER://192.0.2.1:0",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
    )
    assert "broker failed to start: listener OTHER://192.0.2.1:0: " in last, last


def _failed_start_line(cwd: Path, listeners: str, *sets: str) -> str:
    """The last line of ``odradek serve`` with ``listeners`` (and more ``--set``s), which must fail
    to start (rc 1) with no traceback."""
    more = [arg for s in sets for arg in ("--set", s)]
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "serve", "--set", f"listeners={listeners}", *more],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_serve_refuses_a_listener_without_a_security_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka's rule: a listener name must be in listener.security.protocol.map."""
    assert main(["serve", "--set", "listeners=CLIENTS://127.0.0.1:0"]) == 2
    assert "no security protocol defined for listener CLIENTS" in capsys.readouterr().err


def test_serve_refuses_sasl_settings_that_cannot_work(tmp_path: Path) -> None:
    """Checked before the broker opens anything: one error line, exit 2, no traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "serve", "--set", "listeners=SASL_PLAINTEXT://127.0.0.1:0",
         "--set", "sasl.enabled.mechanisms=GSSAPI", "--set", f"log.dirs={tmp_path / 'data'}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "odradek: error: invalid value for 'sasl.enabled.mechanisms': no plugin offers SASL mechanism GSSAPI "
        "(available: OAUTHBEARER, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
    )
    assert not (tmp_path / "data").exists()


def test_serve_rejects_an_unknown_config_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--set", "no.such.key=1"]) == 2
    assert "no.such.key" in capsys.readouterr().err


_LOAD_FACTOR_ERROR = "odradek: error: invalid value for 'log.cleaner.io.buffer.load.factor'"


@pytest.mark.parametrize(
    ("setting", "code", "message"),
    [
        # a value only its plugin checks, when the storage is built: a config error
        ("log.cleaner.io.buffer.load.factor=2", 2, _LOAD_FACTOR_ERROR),
        ("storage=nosuch", 2, "odradek: error: no storage plugin named 'nosuch'"),
        (
            "authorizer.class.name=com.example.Nope",
            2,
            "odradek: error: authorizer.class.name = 'com.example.Nope': no authorizer plugin offers it "
            "(available: acl",
        ),
        # the configured metadata service is not there: the start fails, saying why
        ("metadata=zookeeper", 1, "broker failed to start: no ZooKeeper answered at 127.0.0.1:1 within 1000 ms"),
    ],
)
def test_serve_reports_start_failures_in_one_line(tmp_path: Path, setting: str, code: int, message: str) -> None:
    """Failures found only while the broker assembles itself are reported like the others:
    one line, exit code 2 for bad settings and 1 for a failed start, no traceback."""
    zk = ["--set", "zookeeper.connect=127.0.0.1:1", "--set", "zookeeper.connection.timeout.ms=1000"]
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "serve", "--set", "log.dirs=./data", "--set",
         "listeners=PLAINTEXT://127.0.0.1:0", *zk, "--set", setting],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == code
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_sigterm_stops_cleanly_and_a_restart_keeps_port_and_data() -> None:
    with start_broker() as broker:
        port = broker.port
        assert broker.stop() == 0  # SIGTERM: a clean shutdown, exit code 0
        assert "SIGTERM received: shutting down" in broker.log_path.read_text()
        broker.start()
        assert broker.port == port and broker.starts == 2
        assert "loaded" in broker.log_path.read_text()


def test_the_open_file_soft_limit_is_raised_to_the_hard_limit() -> None:
    """With the common soft default of 1,024 the segment engine's descriptor budget would be 256
    files for every partition's segments: the broker raises its soft limit to the hard one."""
    import resource

    from odradek.cli.serve import raise_open_file_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.fail(f"the hard open-file limit of this machine ({hard}) is too low to test raising the soft one")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        before, after = raise_open_file_limit()
        assert before == 256
        assert after == hard or (hard == resource.RLIM_INFINITY and after > 256)
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (after, hard)
        assert raise_open_file_limit() == (after, after)  # already there: nothing to do
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize(("value", "message"), [("", "at least one log directory"), ("d,d", "duplicate log directory")])
def test_serve_refuses_bad_log_dirs_as_a_config_error(
    value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """rc 2 like every config error (it was an IndexError from meta_local, or "in use by
    another process" for a directory given twice)."""
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--set", f"log.dirs={value}"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "in use" not in err


def test_serve_with_a_damaged_metadata_file_exits_with_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "odradek-metadata.json").write_text("{not json")
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "serve", "--set", "listeners=PLAINTEXT://127.0.0.1:0",
         "--set", f"log.dirs={data}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    [line] = [ln for ln in result.stderr.splitlines() if "failed to start" in ln]
    assert str(data / "odradek-metadata.json") in line and "backup" in line


def test_serve_refuses_empty_listeners_as_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``listeners=`` started a broker that served nobody and never exited."""
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--set", "listeners="]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "odradek: error: invalid value for 'listeners': at least one listener must be defined"
