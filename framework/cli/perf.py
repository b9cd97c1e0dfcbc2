"""``odradek perf produce|consume|e2e``: Kafka's perf-test tools for odradek (or any Kafka broker)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import perf
from . import parse_sets


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("perf", help="measure produce/consume throughput and latency against a broker")
    psub = p.add_subparsers(dest="perf_command", metavar="MODE", required=True)
    for mode, help_ in (
        ("produce", "producer throughput and send-to-ack latency"),
        ("consume", "consumer throughput from the beginning of a topic"),
        ("e2e", "end-to-end latency (produce -> consume) at a fixed rate"),
    ):
        m = psub.add_parser(mode, help=help_)
        m.add_argument("--bootstrap-server", default="127.0.0.1:9092")
        m.add_argument("--topic", required=True)
        m.add_argument("--num-records", type=_positive(int), required=True)
        m.add_argument("--record-size", type=_positive(int), default=100, help="bytes per record value")
        m.add_argument("--partitions", type=_positive(int), default=1, help="partitions when the topic is created")
        m.add_argument(
            "--client",
            choices=("librdkafka", "odradek"),
            default="librdkafka",
            help="librdkafka (confluent-kafka; the load generator) or odradek's own client (to measure it)",
        )
        m.add_argument("--json", action="store_true", help="print the summary as JSON, no progress display")
        if mode in ("produce", "e2e"):
            m.add_argument(
                "--throughput",
                type=float,
                default=0 if mode == "produce" else 10_000,
                help="records/s cap (0: unlimited)",
            )
            m.add_argument("--acks", choices=("0", "1", "all", "-1"), default="1")
        if mode == "produce":
            m.add_argument("--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"), default="none")
            m.add_argument("--batch-size", type=int, default=1_000_000)
            m.add_argument("--linger-ms", type=float, default=5)
            m.add_argument("--latency-every", type=int, default=10, help="time every N-th record")
        if mode == "consume":
            m.add_argument(
                "--timeout-s",
                type=_positive(float),
                default=120,
                help="fail when NUM_RECORDS have not been read after this many seconds (default 120)",
            )
        if mode in ("produce", "e2e"):
            m.add_argument(
                "--producer-property",
                action="append",
                default=[],
                metavar="KEY=VALUE",
                help="extra producer config (client property names), repeatable",
            )
        if mode in ("consume", "e2e"):
            m.add_argument(
                "--consumer-property",
                action="append",
                default=[],
                metavar="KEY=VALUE",
                help="extra consumer config (client property names), repeatable",
            )
        m.set_defaults(func=run)


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type: ``kind`` (int or float) above zero, else a usage error (rc 2)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
        return value

    return parse


def _properties(items: list[str]) -> dict[str, str]:
    return dict(parse_sets(items))


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    producer_extra = _properties(getattr(args, "producer_property", []))
    consumer_extra = _properties(getattr(args, "consumer_property", []))
    # consume reads what is there: creating the topic would only wait --timeout-s for nothing
    perf.ensure_topic(
        args.bootstrap_server,
        args.topic,
        args.partitions,
        create=args.perf_command != "consume",
        properties={**consumer_extra, **producer_extra},
    )
    own = args.client == "odradek"
    with _progress(console, args) as report:
        if args.perf_command == "produce":
            result = (perf.produce_odradek if own else perf.produce_confluent)(
                args.bootstrap_server,
                args.topic,
                args.num_records,
                args.record_size,
                throughput=args.throughput,
                acks=args.acks,
                compression=args.compression,
                batch_size=args.batch_size,
                linger_ms=args.linger_ms,
                latency_every=args.latency_every,
                extra=producer_extra,
                progress=report,
            )
        elif args.perf_command == "consume":
            result = (perf.consume_odradek if own else perf.consume_confluent)(
                args.bootstrap_server,
                args.topic,
                args.num_records,
                timeout_s=args.timeout_s,
                extra=consumer_extra,
                progress=report,
            )
        else:
            result = (perf.e2e_odradek if own else perf.e2e_confluent)(
                args.bootstrap_server,
                args.topic,
                args.num_records,
                args.record_size,
                throughput=args.throughput,
                acks=args.acks,
                producer_extra=producer_extra,
                consumer_extra=consumer_extra,
                progress=report,
            )
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        _print_summary(Console(), result)
    return 1 if result.errors else 0


class _progress:
    """A rich live progress bar (or nothing with --json) fed by the runner's progress callback."""

    def __init__(self, console: Console, args: argparse.Namespace) -> None:
        self.enabled = not args.json and console.is_terminal
        self.total = args.num_records
        self.progress = Progress(
            TextColumn(f"[bold]{args.perf_command}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )

    def __enter__(self) -> Callable[[int, int], None] | None:
        if not self.enabled:
            return None
        self.progress.start()
        self.task = self.progress.add_task("run", total=self.total, rate="")
        import time

        start = time.perf_counter()

        def report(done: int, size: int) -> None:
            secs = max(time.perf_counter() - start, 1e-9)
            self.progress.update(
                self.task, completed=done, rate=f"{done / secs:,.0f} rec/s {size / secs / 1e6:,.1f} MB/s"
            )

        return report

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self.progress.stop()


def _print_summary(console: Console, r: perf.PerfResult) -> None:
    table = Table(title=f"odradek perf {r.mode} ({r.client})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("records", f"{r.records:,}")
    table.add_row("seconds", f"{r.seconds:.2f}")
    table.add_row("records/s", f"{r.records_per_s:,.0f}")
    table.add_row("MB/s", f"{r.mb_per_s:,.2f}")
    for name, value in r.latency_ms.items():
        if name != "samples":
            table.add_row(f"latency {name} (ms)", f"{value:.3f}")
    if r.errors:
        table.add_row("delivery errors", str(r.errors))
    console.print(table)
