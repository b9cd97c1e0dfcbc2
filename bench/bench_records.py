"""Micro-benchmark of odradek's record layer (framework/records.py).

Measures what the broker does on every produce -- header-only validation (61-byte header parse +
one CRC-32C per batch) in MB/s over 16 KiB and 1 MiB batches -- and what clients do on every
produce and consume: per-record encode (``build_batch``) and decode (``decode_batch``) in
records/s, uncompressed and through each codec. Every figure is measured over several runs and
reported as median with min..max and the relative standard deviation, since single numbers on a
shared machine mislead.

Run: ``.venv/bin/python bench/bench_records.py [--runs 7] [--min-time 0.2] [--json]``
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from crc32c import crc32c
from rich.console import Console
from rich.table import Table

from odradek import records as R
from odradek.interfaces import Codec
from odradek.manager import Plugins, build_plugin_manager

KIB = 1024
MIB = 1024 * KIB


@dataclass
class Result:
    name: str
    unit: str
    median: float
    min: float
    max: float
    rsd_percent: float  # relative standard deviation over the runs
    runs: int


def _rate(fn: Callable[[], object], work: float, min_time: float) -> float:
    """Units of ``work`` per second for one run: call ``fn`` until ``min_time`` has passed."""
    fn()  # warm caches (codec contexts, varint tables) outside the timing
    calls = 0
    start = time.perf_counter()
    elapsed = 0.0
    while elapsed < min_time:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
    return work * calls / elapsed


def measure(name: str, unit: str, fn: Callable[[], object], work: float, runs: int, min_time: float) -> Result:
    rates = [_rate(fn, work, min_time) for _ in range(runs)]
    med = statistics.median(rates)
    rsd = 100 * statistics.stdev(rates) / statistics.mean(rates) if runs > 1 else 0.0
    return Result(name, unit, med, min(rates), max(rates), rsd, runs)


def _records(count: int, value_size: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes | None]], int]]:
    """Realistic-ish records: 10-byte keys, semi-compressible values, a header on every tenth."""
    base = 1_700_000_000_000
    out = []
    for i in range(count):
        value = (b"%08d " % i + b"payload-" * (value_size // 8 + 1))[:value_size]
        headers: list[tuple[str, bytes | None]] = [("trace-id", b"%016x" % i)] if i % 10 == 0 else []
        out.append((b"key-%06d" % i, value, headers, base + i))
    return out


def _batch_of_size(target: int) -> bytes:
    """An uncompressed batch of about ``target`` bytes (200-byte values)."""
    per_record = 200 + 20
    return R.build_batch(_records(max(1, (target - R.HEADER_SIZE) // per_record), 200))


def run(runs: int, min_time: float, codecs: dict[int, Codec]) -> list[Result]:
    results: list[Result] = []

    # --- broker path: header-only validation ------------------------------------------------
    for label, batch_size, total in (("16 KiB", 16 * KIB, 4 * MIB), ("1 MiB", MIB, 8 * MIB)):
        batch = _batch_of_size(batch_size)
        payload = batch * max(1, total // len(batch))
        mb = len(payload) / 1e6
        results.append(
            measure(
                f"validate_batches, {label} batches",
                "MB/s",
                lambda p=payload: R.validate_batches(p),
                mb,
                runs,
                min_time,
            )
        )
        results.append(
            measure(
                f"crc32c alone (ceiling), {label} batches",
                "MB/s",
                lambda p=payload, b=len(batch): [crc32c(memoryview(p)[i + 21 : i + b]) for i in range(0, len(p), b)],
                mb,
                runs,
                min_time,
            )
        )
        count = len(payload) // len(batch)
        results.append(
            measure(
                f"iter_headers (parse only), {label} batches",
                "headers/s",
                lambda p=payload: sum(1 for _ in R.iter_headers(p)),
                count,
                runs,
                min_time,
            )
        )

    # --- client path: per-record encode and decode -------------------------------------------
    records = _records(1000, 100)
    for comp in R.Compression:
        built = R.build_batch(records, compression=comp, codecs=codecs)
        results.append(
            measure(
                f"build_batch 1000 x 100 B, {comp.name.lower()}",
                "records/s",
                lambda c=comp: R.build_batch(records, compression=c, codecs=codecs),
                len(records),
                runs,
                min_time,
            )
        )
        results.append(
            measure(
                f"decode_batch 1000 x 100 B, {comp.name.lower()}",
                "records/s",
                lambda b=built: R.decode_batch(b, codecs=codecs),
                len(records),
                runs,
                min_time,
            )
        )
    return results


def _fmt(value: float, unit: str) -> str:
    if unit == "MB/s":
        return f"{value:,.0f}"
    if value >= 1e6:
        return f"{value / 1e6:,.2f} M"
    if value >= 1e3:
        return f"{value / 1e3:,.0f} k"
    return f"{value:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7, help="runs per measurement (default 7)")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per run (default 0.2)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)

    plugins = Plugins(build_plugin_manager(entry_points_enabled=False, extra=["odradek.plugins.compress.plugin"]))
    results = run(args.runs, args.min_time, plugins.codecs())
    env = {"python": sys.version.split()[0], "machine": platform.machine(), "processor": platform.processor()}
    if args.json:
        print(json.dumps({"benchmark": "records", **env, "results": [asdict(r) for r in results]}, indent=2))
        return 0
    table = Table(title=f"odradek records (Python {env['python']}, {args.runs} runs x {args.min_time}s each)")
    table.add_column("measurement", no_wrap=True)
    table.add_column("median", justify="right")
    table.add_column("min .. max", justify="right")
    table.add_column("rsd", justify="right")
    table.add_column("unit")
    for r in results:
        table.add_row(
            r.name,
            _fmt(r.median, r.unit),
            f"{_fmt(r.min, r.unit)} .. {_fmt(r.max, r.unit)}",
            f"{r.rsd_percent:.1f}%",
            r.unit,
        )
    Console(width=max(Console().width, 110)).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
