"""``odradek consume``: kafka-console-consumer -- print records, one per line.

Without ``--group`` the partitions are assigned directly (no group, no commits, no rebalance
wait); with ``--group`` the consumer subscribes and commits as a member. Where to start:
``--from-beginning``, ``--offset earliest|latest|N``, ``--timestamp MS`` (the first record at or
after it). Output follows Kafka's ``DefaultMessageFormatter``: ``--property print.key=true``,
``print.timestamp``, ``print.partition``, ``print.offset``, ``print.headers``, ``print.value``,
``key.separator``, ``line.separator``, ``headers.separator``, ``headers.key.separator``,
``null.literal``. ``--max-messages`` and ``--timeout-ms`` end the run; the total goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..errors import KafkaError, OdradekError
from .topics import parse_key_values


class ConsumeCommandError(OdradekError):
    """Flags that do not fit together."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("consume", help="print records of a topic (kafka-console-consumer)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="broker(s), comma separated")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", help="consume as a member of this group (commits offsets)")
    p.add_argument("--partition", type=int, action="append", help="only this partition (repeatable)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", help="earliest, latest, or an offset (without --group)")
    start.add_argument("--timestamp", type=int, metavar="MS", help="start at the first record at or after this time")
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    p.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default=None)
    p.add_argument(
        "--property", action="append", default=[], metavar="KEY=VALUE", help="formatter property (repeatable)"
    )
    p.add_argument(
        "--consumer-property", action="append", default=[], metavar="KEY=VALUE", help="consumer config (repeatable)"
    )
    p.set_defaults(func=run)


def _bool(props: dict[str, str], key: str, default: bool) -> bool:
    return props.get(key, "true" if default else "false").strip().lower() == "true"


def _unescape(text: str) -> str:
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text


@dataclass
class Formatter:
    """Kafka's ``DefaultMessageFormatter``."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> Formatter:
        known = {
            "print.timestamp",
            "print.partition",
            "print.offset",
            "print.headers",
            "print.key",
            "print.value",
            "key.separator",
            "line.separator",
            "headers.separator",
            "headers.key.separator",
            "null.literal",
        }
        unknown = sorted(set(props) - known)
        if unknown:
            raise ConsumeCommandError(f"unknown --property {unknown[0]!r} (known: {', '.join(sorted(known))})")
        return cls(
            print_timestamp=_bool(props, "print.timestamp", False),
            print_partition=_bool(props, "print.partition", False),
            print_offset=_bool(props, "print.offset", False),
            print_headers=_bool(props, "print.headers", False),
            print_key=_bool(props, "print.key", False),
            print_value=_bool(props, "print.value", True),
            key_separator=_unescape(props.get("key.separator", "\t")).encode(),
            line_separator=_unescape(props.get("line.separator", "\n")).encode(),
            headers_separator=_unescape(props.get("headers.separator", ",")).encode(),
            headers_key_separator=_unescape(props.get("headers.key.separator", ":")).encode(),
            null_literal=props.get("null.literal", "null").encode(),
        )

    def format(self, record: Any) -> bytes:
        fields: list[bytes] = []
        if self.print_timestamp:
            if record.timestamp < 0:
                fields.append(b"NO_TIMESTAMP")
            else:
                kind = b"LogAppendTime" if record.timestamp_type == 1 else b"CreateTime"
                fields.append(kind + b":" + str(record.timestamp).encode())
        if self.print_partition:
            fields.append(b"Partition:" + str(record.partition).encode())
        if self.print_offset:
            fields.append(b"Offset:" + str(record.offset).encode())
        if self.print_headers:
            if record.headers:
                fields.append(
                    self.headers_separator.join(
                        k.encode() + self.headers_key_separator + (v if v is not None else self.null_literal)
                        for k, v in record.headers
                    )
                )
            else:
                fields.append(b"NO_HEADERS")
        if self.print_key:
            fields.append(record.key if record.key is not None else self.null_literal)
        if self.print_value:
            fields.append(record.value if record.value is not None else self.null_literal)
        return self.key_separator.join(fields) + self.line_separator


def _start_consumer(args: argparse.Namespace, consumer: Any) -> None:
    """Subscribe or assign, then position per the start flags."""
    from ..client import TopicPartition

    if args.group and args.partition:
        raise ConsumeCommandError("--partition cannot be combined with --group (the group assigns partitions)")
    if args.group:
        if args.offset is not None:
            raise ConsumeCommandError("--offset needs direct assignment: drop --group")
        consumer.subscribe([args.topic])
        return
    existing = consumer.partitions_for(args.topic)
    missing = sorted(set(args.partition or ()) - set(existing))
    if missing:
        raise ConsumeCommandError(
            f"topic {args.topic!r} has {len(existing)} partition{'s' if len(existing) != 1 else ''} "
            f"(0-{len(existing) - 1}): no partition {', '.join(map(str, missing))}"
        )
    partitions = args.partition if args.partition else existing
    tps = [TopicPartition(args.topic, p) for p in partitions]
    consumer.assign(tps)
    if args.timestamp is not None:
        found = consumer.offsets_for_times(dict.fromkeys(tps, args.timestamp))
        ends = consumer.end_offsets(tps)
        for tp in tps:
            hit = found.get(tp)
            consumer.seek(tp, hit.offset if hit is not None else ends[tp])
    elif args.from_beginning or args.offset == "earliest":
        consumer.seek_to_beginning(tps)
    elif args.offset is None or args.offset == "latest":
        consumer.seek_to_end(tps)
    else:
        try:
            offset = int(args.offset)
        except ValueError:
            raise ConsumeCommandError(f"--offset must be earliest, latest or a number, not {args.offset!r}") from None
        for tp in tps:
            consumer.seek(tp, offset)


def consume_to(consumer: Any, out: BinaryIO, formatter: Formatter, *, max_messages: int | None,
               timeout_ms: int | None) -> int:  # fmt: skip
    """Print records until ``max_messages`` or ``timeout_ms`` without records; returns the count."""
    count = 0
    last = time.monotonic()
    while max_messages is None or count < max_messages:
        wait = 1.0 if timeout_ms is None else min(1.0, max(timeout_ms / 1000.0 - (time.monotonic() - last), 0.0))
        batch = consumer.poll(wait, max_records=None if max_messages is None else max_messages - count)
        if not batch:
            if timeout_ms is not None and not consumer.assignment():
                last = time.monotonic()  # a group member waits for its assignment first
            elif timeout_ms is not None and (time.monotonic() - last) * 1000 >= timeout_ms:
                break
            continue
        last = time.monotonic()
        records = sorted((r for rs in batch.values() for r in rs), key=lambda r: (r.timestamp, r.partition, r.offset))
        for record in records:
            out.write(formatter.format(record))
            count += 1
            if max_messages is not None and count >= max_messages:
                break
        out.flush()
    return count


def run(args: argparse.Namespace) -> int:
    from ..client import Consumer

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "odradek-console-consumer",
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.auto.commit": bool(args.group),
    }
    if args.group:
        config["group.id"] = args.group
    if args.isolation_level:
        config["isolation.level"] = args.isolation_level
    config.update(parse_key_values(args.consumer_property, "--consumer-property"))
    formatter = Formatter.from_properties(parse_key_values(args.property, "--property"))
    count = 0
    try:
        with Consumer(config) as consumer:
            _start_consumer(args, consumer)
            count = consume_to(
                consumer, sys.stdout.buffer, formatter, max_messages=args.max_messages, timeout_ms=args.timeout_ms
            )
            if args.group:
                consumer.commit()
    except KafkaError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except KeyboardInterrupt:
        pass
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
