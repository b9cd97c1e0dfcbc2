"""``odradek serve`` as a user runs it: logs where it listens and where its data is, shuts down
cleanly on SIGINT (Ctrl-C) and SIGTERM, refuses a taken port with a clear error."""

from __future__ import annotations

import signal
import socket
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


def test_serve_refuses_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "odradek", "serve", "--set", f"listeners=PLAINTEXT://127.0.0.1:{port}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert "broker failed to start" in result.stderr and "in use" in result.stderr


def test_serve_rejects_an_unknown_config_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--set", "no.such.key=1"]) == 2
    assert "no.such.key" in capsys.readouterr().err


def test_sigterm_stops_cleanly_and_a_restart_keeps_port_and_data() -> None:
    with start_broker() as broker:
        port = broker.port
        assert broker.stop() == 0  # SIGTERM: a clean shutdown, exit code 0
        assert "SIGTERM received: shutting down" in broker.log_path.read_text()
        broker.start()
        assert broker.port == port and broker.starts == 2
        assert "loaded" in broker.log_path.read_text()
