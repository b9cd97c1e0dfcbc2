"""A session-scoped local SparkSession with odradek's data source registered, for integration tests.

Starting Spark costs 8-16 s and ~430 MB (plus a Python worker per task slot), so the whole test
suite shares ONE session: ``local[2]``, two shuffle partitions, no UI, UTC session time zone, and
``PYSPARK_PYTHON`` pointing at the interpreter running the tests (the venv's), so executors import
the same odradek. pyspark is imported only when a test asks for the fixture. A machine without
Java fails the test with a message saying so, instead of pyspark's opaque gateway error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JAVA_HINT = (
    "Spark needs a Java runtime (17 or 21): install one (e.g. `apt-get install openjdk-17-jre-headless`) "
    "or set JAVA_HOME to it"
)


def find_java() -> str | None:
    """The ``java`` Spark will launch: ``$JAVA_HOME/bin/java`` if set, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if candidate.is_file() else None
    return shutil.which("java")


def require_java() -> str:
    """Fail the calling test with a clear message when no working Java runtime is available."""
    java = find_java()
    if java is None:
        pytest.fail(f"No Java runtime found (JAVA_HOME={os.environ.get('JAVA_HOME')!r}). {JAVA_HINT}", pytrace=False)
    try:
        subprocess.run([java, "-version"], check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.fail(f"Java at {java} does not run ({exc}). {JAVA_HINT}", pytrace=False)
    return java


def build_local_session(app_name: str = "odradek-tests", *, cores: int = 2) -> SparkSession:
    """A local SparkSession tuned for small, fast jobs, with format ``odradek`` registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from odradek.plugins.spark import register

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.default.parallelism", str(cores))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


@pytest.fixture(scope="session")
def spark_session() -> Iterator[SparkSession]:
    """The suite's one SparkSession (local[2]) with the ``odradek`` data source registered."""
    require_java()
    spark = build_local_session()
    try:
        yield spark
    finally:
        for query in spark.streams.active:
            query.stop()
        spark.stop()
