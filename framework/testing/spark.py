"""A session-scoped local SparkSession with odradek's data source registered, for integration tests.

Starting Spark costs 8-16 s and ~430 MB (plus a Python worker per task slot), so the whole test
suite shares ONE session: ``local[2]``, two shuffle partitions, no UI, UTC session time zone, and
``PYSPARK_PYTHON`` pointing at the interpreter running the tests (the venv's), so executors import
the same odradek (and the installed pyspark, not Spark's zip: :func:`worker_python`). pyspark is
imported only when a test asks for the fixture. A machine without Java fails the test with a
message saying so, instead of pyspark's opaque gateway error.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
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


_WORKER_SCRIPT = """#!/bin/sh
# Spark's Python workers, with Spark's pyspark.zip taken off PYTHONPATH: the same pyspark is
# installed next to this interpreter, with cached bytecode (written by odradek.testing.spark)
set -f
path=
IFS=:
for entry in $PYTHONPATH; do
  case $entry in
    */pyspark.zip) ;;
    *) path=${{path:+$path:}}$entry ;;
  esac
done
unset IFS
if [ -n "$path" ]; then PYTHONPATH=$path; export PYTHONPATH; else unset PYTHONPATH; fi
exec {python} "$@"
"""


def worker_python() -> str:
    """The ``PYSPARK_PYTHON`` for tests: the interpreter running them, importing pyspark from its
    own site-packages rather than from the ``pyspark.zip`` Spark puts first on the workers' path.

    Python never caches bytecode for a zip, so every worker Spark starts compiled pyspark anew:
    ~1 CPU-second, where the installed copy takes ~0.3. A streaming query's source runs in such
    a fresh worker that must connect back to the JVM within 10 s (hard-coded in Spark's
    ``PythonWorkerFactory``), which a loaded 2-core CI machine missed: the query failed with
    "Python worker failed to connect back". Spark and the installed pyspark are one package
    here (pip's pyspark), so the versions match."""
    if "'" in sys.executable:
        return sys.executable
    directory = Path(tempfile.mkdtemp(prefix="odradek-spark-python-"))
    atexit.register(shutil.rmtree, directory, True)
    script = directory / "python"
    script.write_text(_WORKER_SCRIPT.format(python=f"'{sys.executable}'"))
    script.chmod(0o755)
    return str(script)


def build_local_session(app_name: str = "odradek-tests", *, cores: int = 2) -> SparkSession:
    """A local SparkSession tuned for small, fast jobs, with format ``odradek`` registered."""
    os.environ["PYSPARK_PYTHON"] = worker_python()
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
