"""The kernel's CLI: --version, plugins, config show/reference (run as a user would)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import odradek

ROOT = Path(__file__).resolve().parents[1]


def odradek_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_version() -> None:
    r = odradek_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"odradek {odradek.__version__}"


def test_plugins_lists_builtins_with_distribution() -> None:
    r = odradek_cli("plugins", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    for name, role in [
        ("compress", "compression"),
        ("storage_segment", "storage"),
        ("transport_tcp", "transport"),
        ("meta_local", "metadata"),
        ("meta_zk", "metadata"),
        ("meta_etcd", "metadata"),
        ("default_partitioners", "partitioner"),
        ("default_assignors", "assignor"),
    ]:
        assert role in rows[name]["roles"], (name, rows.get(name))
        assert rows[name]["distribution"] == "odradek"
        assert rows[name]["version"] == odradek.__version__
    table = odradek_cli("plugins")
    assert table.returncode == 0 and "storage_segment" in table.stdout


def test_config_show_and_errors(tmp_path: Path) -> None:
    r = odradek_cli("config", "show", "--json", "--set", "num.partitions=7")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["num.partitions"] == 7
    bad = odradek_cli("config", "show", "--set", "num.partitions=seven")
    assert bad.returncode == 2 and "num.partitions" in bad.stderr
    unknown = odradek_cli("config", "show", "--set", "no.such.key=1")
    assert unknown.returncode == 2 and "no.such.key" in unknown.stderr


def test_configuration_reference_is_current() -> None:
    r = odradek_cli("config", "reference")
    assert r.returncode == 0, r.stderr
    doc = (ROOT / "docs" / "configuration.md").read_text()
    assert doc == r.stdout, "docs/configuration.md is stale: run `odradek config reference > docs/configuration.md`"
