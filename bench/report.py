"""Bench results: per-scenario summaries (median and min..max over runs), the issue's goals, Markdown/JSON.

A single figure from a two-core shared VM misleads, so every rate is the median of ``--repeat``
runs with the range next to it, and every throughput is also given as a fraction of the machine
baseline measured in the same run (``tcp_to_file`` for produce, ``sendfile_to_tcp`` for consume).
MB are 10^6 bytes of record *values* (payload), so batch and protocol overhead count against us.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from baselines import Baseline
from scenarios import Run, Scenario


@dataclass
class Spread:
    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))


@dataclass
class Summary:
    """One scenario over its runs."""

    name: str
    kind: str
    settings: dict[str, Any]
    runs: int
    records: int
    records_per_s: Spread
    mb_per_s: Spread
    limit: str = ""
    fraction_of_limit: float | None = None
    #: the limit measured next to each run with the same bytes (then the fraction is per run)
    paired_limit_mb_s: Spread | None = None
    broker_cpu_s_per_gb: float | None = None
    broker_peak_rss_mb: float | None = None
    broker_cores: float | None = None  # broker CPU seconds per wall second
    client_cores: float | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def summarize(sc: Scenario, runs: list[Run], baselines: dict[str, Baseline]) -> Summary:
    settings = {
        "record_size": sc.record_size,
        "partitions": sc.partitions,
        "acks": sc.acks,
        "compression": sc.compression,
    }
    s = Summary(
        sc.name,
        sc.kind,
        settings,
        len(runs),
        runs[0].records,
        Spread.of([r.records_per_s for r in runs]),
        Spread.of([r.mb_per_s for r in runs]),
        limit=sc.limit,
    )
    paired = [r.paired_limit_mb_s for r in runs]
    if all(paired):
        # the limit was measured next to each run, moving the same bytes: the median of the
        # per-run ratios (the bench's drift cancels within a pair, not across the whole bench)
        s.paired_limit_mb_s = Spread.of([p for p in paired if p])
        s.fraction_of_limit = statistics.median(r.mb_per_s / r.paired_limit_mb_s for r in runs if r.paired_limit_mb_s)
    elif sc.limit in baselines and sc.kind != "e2e":
        s.fraction_of_limit = s.mb_per_s.median / baselines[sc.limit].mb_per_s
    with_broker = [r for r in runs if r.broker is not None]
    if with_broker:
        s.broker_cpu_s_per_gb = statistics.median(r.broker.cpu_s / (r.bytes / 1e9) for r in with_broker if r.broker)
        s.broker_peak_rss_mb = max(r.broker.peak_rss_mb for r in with_broker if r.broker)
        s.broker_cores = statistics.median(r.broker.cpu_s / r.seconds for r in with_broker if r.broker)
    s.extra["runs"] = [
        {
            "records": r.records,
            "seconds": r.seconds,
            "broker_cpu_s": r.broker.cpu_s if r.broker else None,
            "broker_peak_rss_mb": r.broker.peak_rss_mb if r.broker else None,
            "client_cpu_s": r.client_cpu_s,
            "latency_ms": r.latency_ms,
            "paired_limit_mb_s": r.paired_limit_mb_s,
        }
        for r in runs
    ]
    s.client_cores = statistics.median(r.client_cpu_s / r.client_wall_s for r in runs if r.client_wall_s > 0)
    if runs[0].latency_ms:
        s.latency_ms = {k: statistics.median(r.latency_ms[k] for r in runs) for k in runs[0].latency_ms}
    for key in runs[0].extra:
        s.extra[key] = statistics.median(r.extra[key] for r in runs)
    return s


#: how the goals table names the C load generator of the ``*-rdk`` scenarios
RDKPERF = "bench/rdkperf.c"


@dataclass
class Goal:
    goal: str
    target: str
    measured: str
    met: bool | None  # None: not measured in this run


def evaluate_goals(
    summaries: dict[str, Summary],
    baselines: dict[str, Baseline],
    doc_ceilings: dict[str, dict[str, float]] | None = None,
) -> list[Goal]:
    """The issue's goals against this run's medians (``None`` where the scenario did not run)."""
    goals: list[Goal] = []

    def get(name: str) -> Summary | None:
        s = summaries.get(name)
        return s if s is not None and s.error is None else None

    ceilings = doc_ceilings or {}
    #: client -> (its short name, its ceiling's key in ``doc_ceilings``)
    alone = {"kcat": ("kcat", "kcat -P 100 B records"), RDKPERF: ("rdkperf", "rdkperf produce 100 B records")}
    for name, client in (
        ("produce-100b", "kcat"),
        ("produce-100b-rdk", RDKPERF),
        ("produce-100b-wire", "wire generator"),
    ):
        p = get(name)
        if p is None and name != "produce-100b":
            continue
        short, key = alone.get(client, (client, ""))
        client_max = ceilings.get(key, {}).get("median")
        note = f" ({short} alone into a no-op broker: {client_max:,.0f})" if client_max else ""
        goals.append(
            Goal(
                f"produce 100 B, acks=1, 1 partition ({client})",
                ">= 1,000,000 records/s",
                f"{p.records_per_s.median:,.0f} records/s{note}" if p else "not run",
                p.records_per_s.median >= 1_000_000 if p else None,
            )
        )
    limit = baselines.get("tcp_to_file")
    for name, client in (("produce-1k", "kcat"), ("produce-1k-rdk", RDKPERF), ("produce-1k-wire", "wire generator")):
        k = get(name)
        if k is None and name != "produce-1k":
            continue
        measured, met = "not run", None
        if k and k.paired_limit_mb_s and k.fraction_of_limit is not None:
            pl = k.paired_limit_mb_s
            measured = (
                f"{k.mb_per_s.median:,.0f} MB/s = {100 * k.fraction_of_limit:.0f}% (median of per-run ratios) of "
                f"loopback-to-file moving the same bytes next to each run: "
                f"{pl.median:,.0f} ({pl.min:,.0f}..{pl.max:,.0f})"
            )
            met = k.fraction_of_limit >= 0.5
        elif k and limit:
            measured = (
                f"{k.mb_per_s.median:,.0f} MB/s = {100 * k.mb_per_s.median / limit.mb_per_s:.0f}% of "
                f"{limit.mb_per_s:,.0f}"
            )
            met = k.mb_per_s.median >= 0.5 * limit.mb_per_s
        goals.append(Goal(f"produce 1 KiB ({client})", ">= 50% of loopback-to-file", measured, met))
    for name, client in (
        ("consume-100b", "kcat"),
        ("consume-100b-rdk", RDKPERF),
        ("consume-100b-wire", "wire generator"),
    ):
        c = get(name)
        if c is None and name != "consume-100b":
            continue
        goals.append(
            Goal(
                f"consume 100 B ({client})",
                ">= 2,000,000 records/s",
                f"{c.records_per_s.median:,.0f} records/s, broker {c.broker_cpu_s_per_gb or 0:.2f} CPU s/GB"
                if c
                else "not run",
                c.records_per_s.median >= 2_000_000 if c else None,
            )
        )
    for name, label in (("e2e", "librdkafka defaults, linger 0"), ("e2e-inflight1", "producer max.in.flight=1")):
        e = get(name)
        if e is None and name != "e2e":
            continue
        goals.append(
            Goal(
                f"end-to-end at 10,000 records/s, acks=1 ({label})",
                "p50 <= 1 ms, p99 <= 5 ms",
                (
                    f"{e.records_per_s.median:,.0f} records/s, p50 {e.latency_ms['p50']:.2f} ms, "
                    f"p99 {e.latency_ms['p99']:.2f} ms"
                )
                if e and e.latency_ms
                else "not run",
                (e.latency_ms["p50"] <= 1 and e.latency_ms["p99"] <= 5) if e and e.latency_ms else None,
            )
        )
    for name, client, single_name in (
        ("partitions-1000", "kcat", "produce-100b"),
        ("partitions-1000-rdk", RDKPERF, "produce-100b-rdk"),
    ):
        m = get(name)
        if m is None and name != "partitions-1000":
            continue
        p = get(single_name)
        measured, met = "not run", None
        if m and "fraction_of_single_partition" in m.extra:
            fraction = m.extra["fraction_of_single_partition"]
            single = m.extra["single_partition_records_per_s"]
            measured = (
                f"{m.records_per_s.median:,.0f} records/s = {100 * fraction:.0f}% (median of per-run ratios) of one "
                f"{client} into one partition producing the same records next to each run: {single:,.0f} records/s"
            )
            if p:
                measured += f"; {100 * m.records_per_s.median / p.records_per_s.median:.0f}% of {single_name}"
            met = fraction >= 0.7
        elif m and p:
            ratio = m.records_per_s.median / p.records_per_s.median
            measured = f"{m.records_per_s.median:,.0f} records/s = {100 * ratio:.0f}% of {single_name}"
            met = ratio >= 0.7
        goals.append(Goal(f"1,000 partitions, 10 producers ({client})", ">= 70% of single-partition", measured, met))
    rss = [s.broker_peak_rss_mb for s in summaries.values() if s.broker_peak_rss_mb is not None]
    goals.append(
        Goal(
            "broker peak RSS over all scenarios",
            "<= 150 MB",
            f"{max(rss):,.0f} MB" if rss else "not measured",
            max(rss) <= 150 if rss else None,
        )
    )
    return goals


def _rate(s: Spread, unit: str = "") -> str:
    def f(v: float) -> str:
        if v >= 1e6:
            return f"{v / 1e6:.2f}M"
        if v >= 1e4:
            return f"{v / 1e3:.0f}k"
        return f"{v:,.0f}"

    return f"{f(s.median)}{unit} ({f(s.min)}..{f(s.max)})"


def _mb(s: Spread) -> str:
    return f"{s.median:,.0f} ({s.min:,.0f}..{s.max:,.0f})"


def markdown(doc: dict[str, Any], summaries: list[Summary], baselines: dict[str, Baseline], goals: list[Goal]) -> str:
    env = doc["environment"]
    lines = [
        f"# odradek bench {doc['started']}",
        "",
        f"Machine: {env['cpu']}, {env['cores']} cores, {env['memory_gb']:.0f} GB RAM, kernel {env['kernel']}; "
        f"Python {env['python']}; kcat {env['kcat']}; "
        f"load average at start {env['loadavg']}, at end {env.get('loadavg_end', '?')}. "
        f"Loopback only, broker and load generator share the cores. "
        f"{doc['settings']['repeat']} runs per figure: median (min..max). "
        f"{'Quick mode. ' if doc['settings']['quick'] else ''}"
        f"{'Profiled run (py-spy attached): figures are lower than normal. ' if doc['settings']['profile'] else ''}",
        "",
        "## Baselines (the limits, same run, same disk as the broker's data dir)",
        "",
        "| baseline | MB/s median (min..max) | what |",
        "|---|---:|---|",
    ]
    for b in baselines.values():
        lines.append(f"| {b.name} | {b.mb_per_s:,.0f} ({b.min:,.0f}..{b.max:,.0f}) | {b.description} |")
    if doc.get("client_ceilings"):
        lines += [
            "",
            "Load generator ceiling: each producer into librdkafka's mock cluster (a broker that costs nothing), "
            "same records:",
            "",
            "| generator | records/s median (min..max) |",
            "|---|---:|",
        ]
        for name, c in doc["client_ceilings"].items():
            lines.append(f"| {name} | {_rate(Spread(c['median'], c['min'], c['max']))} |")
    lines += [
        "",
        "## Scenarios",
        "",
        "| scenario | records | records/s | MB/s | % of limit | broker CPU s/GB | broker peak RSS MB "
        "| client cores | latency p50 / p99 / max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        if s.error:
            lines.append(f"| {s.name} | failed: {s.error.splitlines()[0][:120]} | | | | | | | |")
            continue
        frac = f"{100 * s.fraction_of_limit:.0f}% {s.limit}" if s.fraction_of_limit is not None else ""
        if s.paired_limit_mb_s is not None and frac:
            frac += f" ({s.paired_limit_mb_s.median:,.0f} next to it)"
        cpu = f"{s.broker_cpu_s_per_gb:.1f}" if s.broker_cpu_s_per_gb is not None else ""
        if s.kind == "e2e" and s.broker_cores is not None:
            cpu = f"({s.broker_cores:.2f} cores)"  # per GB means nothing at 1 MB/s
        rss = f"{s.broker_peak_rss_mb:.0f}" if s.broker_peak_rss_mb is not None else ""
        lat = (
            f"{s.latency_ms['p50']:.2f} / {s.latency_ms['p99']:.2f} / {s.latency_ms['max']:.1f}" if s.latency_ms else ""
        )
        lines.append(
            f"| {s.name} | {s.records:,} | {_rate(s.records_per_s)} | {_mb(s.mb_per_s)} | {frac} | {cpu} | {rss} "
            f"| {s.client_cores:.2f} | {lat} |"
        )
    lines += ["", "## Goals (issue 8)", "", "| goal | target | measured | met |", "|---|---|---|---|"]
    for g in goals:
        met = "n/a" if g.met is None else ("yes" if g.met else "**no**")
        lines.append(f"| {g.goal} | {g.target} | {g.measured} | {met} |")
    if doc.get("storage"):
        lines += ["", "## Storage micro-benchmarks (bench/bench_storage.py)", "", "```", doc["storage"].rstrip(), "```"]
    lines += [
        "",
        "Notes: MB = 10^6 bytes of record values. `client cores` is the load generator's CPU seconds per "
        "wall second (near 1.0 for a single-threaded generator means it, not the broker, may be the limit). "
        "Broker CPU s/GB is the broker process's user+system CPU per 10^9 value bytes moved "
        "(for the e2e rows: CPU seconds per second, in cores). For produce scenarios the % of limit is the "
        "median over runs of the run's MB/s divided by its limit measured moving the same bytes right next "
        'to it ("next to it": the median of those limits); the Baselines table above is measured once at '
        "the start.",
        "",
    ]
    return "\n".join(lines)


def to_json(doc: dict[str, Any], summaries: list[Summary], baselines: dict[str, Baseline], goals: list[Goal]) -> dict:
    return {
        **doc,
        "baselines": {k: asdict(v) for k, v in baselines.items()},
        "scenarios": [asdict(s) for s in summaries],
        "goals": [asdict(g) for g in goals],
    }
