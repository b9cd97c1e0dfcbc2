"""``odradek produce``: kafka-console-producer -- one record per input line.

Lines come from stdin or ``--file``. Kafka's line-reader properties work the same way:
``--property parse.key=true --property key.separator=:`` splits ``key:value``;
``--property parse.headers=true`` reads ``h1:v1,h2:v2<TAB>`` in front of each line
(``headers.delimiter``, ``headers.separator``, ``headers.key.separator``); ``--header k=v`` adds a
header to every record. ``--compression-codec``, ``--request-required-acks`` and
``--producer-property k=v`` configure the producer; ``--sync`` waits for each record.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..errors import KafkaError, OdradekError
from .topics import parse_key_values


class ProduceCommandError(OdradekError):
    """The input or the flags cannot be turned into records (the message says which line)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("produce", help="send lines from stdin or a file as records (kafka-console-producer)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="broker(s), comma separated")
    p.add_argument("--topic", required=True)
    p.add_argument("--file", metavar="PATH", help="read lines from this file instead of stdin")
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument(
        "--property", action="append", default=[], metavar="KEY=VALUE", help="line reader property (repeatable)"
    )
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE", help="header for every record")
    p.add_argument(
        "--compression-codec",
        "--compression",
        dest="compression",
        metavar="CODEC",
        help="batch compression: none, gzip, snappy, lz4, zstd or another loaded codec plugin's name",
    )
    p.add_argument("--request-required-acks", dest="acks", choices=("0", "1", "-1", "all"), help="acks")
    p.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="producer config (repeatable)",
    )
    p.add_argument("--sync", action="store_true", help="wait for each record's acknowledgement")
    p.set_defaults(func=run)


@dataclass
class LineReader:
    """Kafka's ``LineMessageReader`` properties: how a line becomes (key, value, headers)."""

    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    ignore_error: bool = False
    null_marker: str | None = None
    static_headers: list[tuple[str, bytes | None]] = field(default_factory=list)

    @classmethod
    def from_properties(cls, props: dict[str, str], headers: dict[str, str]) -> LineReader:
        known = {
            "parse.key",
            "key.separator",
            "parse.headers",
            "headers.delimiter",
            "headers.separator",
            "headers.key.separator",
            "ignore.error",
            "null.marker",
        }
        unknown = sorted(set(props) - known)
        if unknown:
            raise ProduceCommandError(f"unknown --property {unknown[0]!r} (known: {', '.join(sorted(known))})")
        return cls(
            parse_key=props.get("parse.key", "false").lower() == "true",
            key_separator=props.get("key.separator", "\t"),
            parse_headers=props.get("parse.headers", "false").lower() == "true",
            headers_delimiter=props.get("headers.delimiter", "\t"),
            headers_separator=props.get("headers.separator", ","),
            headers_key_separator=props.get("headers.key.separator", ":"),
            ignore_error=props.get("ignore.error", "false").lower() == "true",
            null_marker=props.get("null.marker"),
            static_headers=[(k, v.encode()) for k, v in headers.items()],
        )

    def _null(self, text: str) -> bytes | None:
        return None if self.null_marker is not None and text == self.null_marker else text.encode()

    def parse(self, line: str, number: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """(key, value, headers) of one input line (without its newline)."""
        headers = list(self.static_headers)
        rest = line
        if self.parse_headers:
            head, sep, rest = rest.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise ProduceCommandError(f"line {number}: no headers delimiter {self.headers_delimiter!r}")
                rest = head
            else:
                for item in head.split(self.headers_separator) if head else ():
                    hk, hsep, hv = item.partition(self.headers_key_separator)
                    headers.append((hk, self._null(hv) if hsep else None))
        key: bytes | None = None
        if self.parse_key:
            k, sep, value = rest.partition(self.key_separator)
            if not sep:
                if not self.ignore_error:
                    raise ProduceCommandError(f"line {number}: no key separator {self.key_separator!r} in {line!r}")
                return None, self._null(rest), headers
            key = self._null(k)
            rest = value
        return key, self._null(rest), headers


def _lines(stream: TextIO) -> Iterator[str]:
    for line in stream:
        yield line[:-1] if line.endswith("\n") else line


def produce_lines(producer: Any, topic: str, lines: Iterable[str], reader: LineReader, *,
                  partition: int | None = None, sync: bool = False) -> int:  # fmt: skip
    """Send every line; returns how many records were sent (errors raise)."""
    futures = []
    count = 0
    for number, line in enumerate(lines, 1):
        key, value, headers = reader.parse(line, number)
        future = producer.send(topic, value, key=key, headers=headers or None, partition=partition)
        count += 1
        if sync:
            future.result()
        else:
            futures.append(future)
            if len(futures) >= 10_000:  # surface errors early without holding every future
                for f in futures:
                    if f.done():
                        f.result()
                futures = [f for f in futures if not f.done()]
    producer.flush()
    for f in futures:
        f.result()
    return count


def run(args: argparse.Namespace) -> int:
    from ..client import Producer

    config: dict[str, Any] = {"bootstrap.servers": args.bootstrap_server, "client.id": "odradek-console-producer"}
    if args.compression:
        config["compression.type"] = args.compression
    if args.acks:
        config["acks"] = args.acks
    config.update(parse_key_values(args.producer_property, "--producer-property"))
    reader = LineReader.from_properties(
        parse_key_values(args.property, "--property"), parse_key_values(args.header, "--header")
    )
    try:
        stream: TextIO = open(args.file, encoding="utf-8") if args.file else sys.stdin  # noqa: SIM115
    except OSError as exc:
        print(f"Error: cannot read --file {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    try:
        with Producer(config) as producer:
            produce_lines(producer, args.topic, _lines(stream), reader, partition=args.partition, sync=args.sync)
    except KafkaError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.file:
            stream.close()
    return 0
