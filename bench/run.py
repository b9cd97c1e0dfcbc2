"""odradek's bench: start a broker, measure the machine's limits and the named scenarios, write a table.

Usage::

    .venv/bin/python bench/run.py [SCENARIO ...] [--quick] [--repeat N] [--profile] [--list]

SCENARIO is a scenario name, a group (produce, consume, rdk, wire, latency, partitions, storage) or a glob
(``'produce-1k*'``); none means all. The broker is ``odradek serve`` on a free loopback port with a
fresh data dir (``--data-dir`` picks the disk), or an already running Kafka-compatible broker with
``--bootstrap HOST:PORT [--broker-pid PID]`` (to compare against Apache Kafka, say). Results go to
``bench/results/<timestamp>.md`` and ``.json``; ``--profile`` also writes py-spy collapsed stacks of
the broker per scenario run under ``bench/results/<timestamp>-profile/`` (figures from a profiled run
are not comparable: py-spy pauses the broker to sample it).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import baselines as B  # noqa: E402
import report  # noqa: E402
import scenarios as S  # noqa: E402
from broker_process import Broker, temp_data_dir  # noqa: E402

REPO = BENCH.parent
GROUPS = ("produce", "consume", "rdk", "wire", "latency", "partitions", "storage")


def select(names: list[str]) -> list[S.Scenario]:
    """Scenarios matching any of ``names`` (names, groups or globs), in run order."""
    every = S.all_scenarios()
    if not names:
        return every
    chosen = [sc for sc in every if any(fnmatch.fnmatch(sc.name, n) or n in sc.groups or n == sc.kind for n in names)]
    unknown = [n for n in names if not any(fnmatch.fnmatch(sc.name, n) or n in sc.groups for sc in every)]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; try --list")
    return chosen


def environment() -> dict[str, Any]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    kcat = subprocess.run([S.loadgen.KCAT, "-V"], capture_output=True, text=True).stdout
    kcat_version = next((ln.strip() for ln in kcat.splitlines() if ln.startswith("Version")), "missing")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_kib / 1024 / 1024,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "kcat": kcat_version.removeprefix("Version ").split(" (")[0]
        + (" / librdkafka " + kcat_version.split("librdkafka ")[1].split()[0] if "librdkafka " in kcat_version else ""),
        "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "commit": commit.stdout.strip(),
    }


def run_storage(quick: bool) -> str:
    """bench/bench_storage.py's own table, when that benchmark exists (it belongs to the storage issue)."""
    script = BENCH / "bench_storage.py"
    if not script.exists():
        return "bench/bench_storage.py not present in this checkout."
    help_text = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True).stdout
    cmd = [sys.executable, str(script)]
    if quick and "--quick" in help_text:
        cmd.append("--quick")
    env = {**os.environ, "COLUMNS": "160"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    return done.stdout + (f"\n(exit {done.returncode})\n{done.stderr[-2000:]}" if done.returncode else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO")
    parser.add_argument("--quick", action="store_true", help="about a fifth of the records per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per scenario and baseline (default 3)")
    parser.add_argument("--list", action="store_true", help="list scenarios and exit")
    parser.add_argument("--profile", action="store_true", help="py-spy the broker during each run")
    parser.add_argument("--no-baselines", action="store_true", help="skip the machine baselines")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument("--data-dir", type=Path, default=None, help="parent dir for the broker's data (its disk)")
    parser.add_argument("--bootstrap", help="bench this running broker instead of starting odradek serve")
    parser.add_argument("--broker-pid", type=int, help="pid of the --bootstrap broker, for its CPU and RSS")
    parser.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE", help="odradek serve --set")
    args = parser.parse_args(argv)

    chosen = select(args.scenarios)
    if args.list:
        for sc in chosen:
            groups = ",".join(sc.groups)
            print(f"{sc.name:24} {sc.kind:10} {groups:12} records {sc.records:,} (quick {sc.quick_records:,})")
        return 0

    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    data_dir = temp_data_dir(args.data_dir)
    work_dir = Path(tempfile.mkdtemp(prefix="odradek-bench-work-", dir=args.data_dir))
    profile_dir = args.out / f"{stamp}-profile" if args.profile else None
    if profile_dir:
        profile_dir.mkdir()
    doc: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "environment": environment(),
        "settings": {
            "repeat": args.repeat,
            "quick": args.quick,
            "profile": args.profile,
            "broker_set": args.broker_set,
        },
    }
    summaries: list[report.Summary] = []
    baselines: dict[str, B.Baseline] = {}
    broker_log = args.out / f"{stamp}-broker.log"
    try:
        if not args.no_baselines:
            total = (256 if args.quick else 1024) * B.MIB
            print(f"baselines: {total // B.MIB} MiB x {args.repeat} ...", flush=True)
            baselines = B.measure_all(total, data_dir, args.repeat)
            for b in baselines.values():
                print(f"  {b.name:16} {b.mb_per_s:8,.0f} MB/s ({b.min:,.0f}..{b.max:,.0f})", flush=True)
        generators = {CEILING_GENERATORS[sc.kind] for sc in chosen if sc.kind in CEILING_GENERATORS}
        if not args.no_baselines and generators:
            doc["client_ceilings"] = client_ceilings(work_dir, args.quick, args.repeat, generators)
        paired = None if args.no_baselines else data_dir
        if args.bootstrap:
            ctx = S.Context(args.bootstrap, args.broker_pid, work_dir, args.quick, profile_dir)
            summaries = run_all(ctx, chosen, args.repeat, baselines, doc, paired)
        else:
            settings = dict(S.split_setting(item) for item in args.broker_set)
            with Broker(data_dir / "broker", broker_log, settings) as broker:
                print(f"broker: {' '.join(broker.command())} (pid {broker.pid})", flush=True)
                ctx = S.Context(
                    broker.bootstrap, broker.pid, work_dir, args.quick, profile_dir, data_dir=broker.proc.data_dir
                )
                summaries = run_all(ctx, chosen, args.repeat, baselines, doc, paired)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
        shutil.rmtree(data_dir, ignore_errors=True)

    doc["environment"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    by_name = {s.name: s for s in summaries}
    goals = report.evaluate_goals(by_name, baselines, doc.get("client_ceilings"))
    md = report.markdown(doc, summaries, baselines, goals)
    (args.out / f"{stamp}.md").write_text(md)
    (args.out / f"{stamp}.json").write_text(json.dumps(report.to_json(doc, summaries, baselines, goals), indent=2))
    if profile_dir:
        import profiles

        (profile_dir / "summary.md").write_text(profiles.summarize_dir(profile_dir))
    print()
    print(md)
    print(f"written: {args.out / stamp}.md and .json" + (f", profiles in {profile_dir}" if profile_dir else ""))
    return 1 if any(s.error for s in summaries) else 0


#: scenario kind -> the producer whose own ceiling the bench measures when such a scenario runs
CEILING_GENERATORS = {"produce": "kcat", "many": "kcat", "produce_rdk": "rdkperf", "many_rdk": "rdkperf"}


def client_ceilings(
    work_dir: Path, quick: bool, repeat: int, generators: set[str] | None = None
) -> dict[str, dict[str, float]]:
    """kcat (and/or rdkperf) producing into librdkafka's mock cluster: each load generator's own
    records/s on this machine, which caps what it can show of any broker.

    kcat's rate is over its process lifetime, as its scenario runs are; rdkperf's is its own clock
    (first produce call to the last acknowledgement), as its scenario runs are, and it names
    partition 0 as they do."""
    out: dict[str, dict[str, float]] = {}
    with S.loadgen.MockCluster() as mock:
        for generator in sorted(generators or {"kcat"}):
            for size in (100, 1024):
                count = S._sizes(size)[1 if quick else 0]
                rates = []
                for i in range(repeat):
                    topic = f"ceiling-{generator}-{size}-{i}"
                    if generator == "kcat":
                        infile = S.loadgen.make_input(work_dir / f"input-{size}x{count}.txt", size, count)
                        run = S.loadgen.run_processes([S.loadgen.kcat_produce(mock.bootstrap, topic, infile)], 600)
                        rates.append(count / run.wall_s)
                    else:
                        cmd = S.loadgen.rdkperf_produce(mock.bootstrap, topic, count, size, partitions=1)
                        run = S.loadgen.run_processes([cmd], 600, stdout_path=work_dir / "ceiling-stdout.json")
                        if any(run.returncodes):
                            raise RuntimeError(f"rdkperf into the mock cluster failed: {run.stderr[-1500:]}")
                        summary = S.loadgen.parse_rdkperf_json(run.stdout)
                        rates.append(summary["records"] / summary["seconds"])
                spread = report.Spread.of(rates)
                label = f"kcat -P {size} B records" if generator == "kcat" else f"rdkperf produce {size} B records"
                out[label] = {"median": spread.median, "min": spread.min, "max": spread.max}
                print(f"  {label} ceiling: {spread.median:12,.0f} rec/s ({spread.min:,.0f}..{spread.max:,.0f})")
    return out


#: scenario kinds whose limit is also measured next to every run (see :func:`paired_limit`)
PAIRED_KINDS = ("produce", "produce_rdk", "produce_wire")


def paired_limit(sc: S.Scenario, total: int, directory: Path) -> float:
    """The scenario's limit (MB/s) moving ``total`` bytes, the same as a run, right next to it.

    The page cache of a shared VM drifts: the same ``tcp_to_file`` baseline gave 0.8 and 2.7 GB/s
    within an hour, and slows once a run's writes pass the kernel's dirty-page background
    threshold (~2.4 GB on this 24 GB machine), which a 3 GB scenario does and a 1 GiB baseline
    at the start of the bench does not. A limit measured once at the start and set against a
    run an hour later says more about the machine's drift than about the broker."""
    return total / B.BASELINES[sc.limit](total, directory) / 1e6


def run_all(
    ctx: S.Context,
    chosen: list[S.Scenario],
    repeat: int,
    baselines: dict[str, B.Baseline],
    doc: dict[str, Any],
    paired_dir: Path | None = None,
) -> list[report.Summary]:
    """Every run of every scenario; with ``paired_dir``, produce runs get their limit measured
    next to them on that disk (after the run on even runs, before the next on odd ones)."""
    summaries: list[report.Summary] = []
    for sc in chosen:
        if sc.kind == "storage":
            print("storage: bench/bench_storage.py ...", flush=True)
            doc["storage"] = run_storage(ctx.quick)
            continue
        runs: list[S.Run] = []
        try:
            pair_dir = paired_dir if sc.kind in PAIRED_KINDS and sc.limit in B.BASELINES else None
            for i in range(repeat):
                # odd runs: the limit first (runs of a scenario move the same bytes); even: after
                limit = paired_limit(sc, runs[-1].bytes, pair_dir) if pair_dir and i % 2 == 1 else None
                run = S.RUNNERS[sc.kind](ctx, sc, i)
                if pair_dir:
                    run.paired_limit_mb_s = limit if limit is not None else paired_limit(sc, run.bytes, pair_dir)
                runs.append(run)
                cpu = f", broker {run.broker.cpu_s:.2f} CPU s, {run.broker.peak_rss_mb:.0f} MB" if run.broker else ""
                if run.paired_limit_mb_s:
                    cpu += f", {sc.limit} next to it {run.paired_limit_mb_s:,.0f} MB/s"
                print(
                    f"{sc.name:24} run {i + 1}/{repeat}: {run.records_per_s:12,.0f} rec/s {run.mb_per_s:8,.1f} MB/s"
                    f" in {run.seconds:.2f} s{cpu}, client {run.client_cpu_s:.2f} CPU s",
                    flush=True,
                )
            summaries.append(report.summarize(sc, runs, baselines))
        except Exception as exc:
            traceback.print_exc()
            summary = report.summarize(sc, runs, baselines) if runs else _failed(sc)
            summary.error = f"{type(exc).__name__}: {exc}"
            summaries.append(summary)
    S.delete_filled(ctx)
    return summaries


def _failed(sc: S.Scenario) -> report.Summary:
    zero = report.Spread(0, 0, 0)
    return report.Summary(sc.name, sc.kind, {}, 0, 0, zero, zero)


if __name__ == "__main__":
    raise SystemExit(main())
