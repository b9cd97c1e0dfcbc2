"""Static checks run as part of the test suite: ruff over the tree, mypy strict on framework/, mypy on plugins/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Strict typing is part of the kernel's contract with plugin authors: all of framework/ is checked
#: strictly; the plugins are checked too, without --strict.
STRICT = ["framework/"]
#: Left out of the strict run until their owners finish them (mypy still reads them, silently);
#: empty this list once ``mypy --strict --follow-imports=silent framework/`` is clean everywhere.
STRICT_PENDING: list[str] = []
CHECKED = ["plugins/"]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_clean() -> None:
    r = _run(sys.executable, "-m", "ruff", "check", "--no-cache", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict_framework() -> None:
    excludes = [arg for pattern in STRICT_PENDING for arg in ("--exclude", pattern)]
    r = _run(
        sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent", *excludes, *STRICT
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_plugins() -> None:
    r = _run(sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", *CHECKED)
    assert r.returncode == 0, r.stdout + r.stderr
