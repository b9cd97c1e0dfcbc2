"""The Spark test fixture's Java check: a machine without Java fails the test with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.testing.spark import find_java, require_java


def test_missing_java_fails_with_a_clear_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk-here"))
    assert find_java() is None
    with pytest.raises(pytest.fail.Exception, match=r"No Java runtime found.*openjdk-17-jre-headless"):
        require_java()


def test_broken_java_fails_with_a_clear_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\nexit 3\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(pytest.fail.Exception, match="does not run"):
        require_java()
