"""Static checks run as part of the test suite: ruff over the tree, mypy strict on the kernel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The kernel: strict typing is part of its contract with plugin authors.
STRICT_KERNEL = [
    "framework/__init__.py",
    "framework/errors.py",
    "framework/interfaces.py",
    "framework/hookspecs.py",
    "framework/manager.py",
    "framework/config.py",
    "framework/records.py",
]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_clean() -> None:
    r = _run(sys.executable, "-m", "ruff", "check", "--no-cache", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict_kernel() -> None:
    r = _run(sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent", *STRICT_KERNEL)
    assert r.returncode == 0, r.stdout + r.stderr
