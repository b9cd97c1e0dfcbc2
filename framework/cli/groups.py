"""``odradek groups``: list, describe, reset offsets of and delete consumer groups.

Kafka's ``kafka-consumer-groups.sh`` for odradek (and any Kafka cluster), built on odradek's admin
client (:class:`odradek.client.aio.AsyncAdmin`)::

    odradek groups list --bootstrap-server HOST:PORT [--state Stable]
    odradek groups describe GROUP [GROUP ...] --bootstrap-server HOST:PORT
    odradek groups reset-offsets GROUP --topic T[:P,P] | --all-topics
        (--to-earliest | --to-latest | --to-offset N | --to-datetime ISO | --shift-by N | --to-current)
        [--execute | --dry-run]
    odradek groups delete GROUP [GROUP ...] --bootstrap-server HOST:PORT
    odradek groups delete-offsets GROUP --topic T[:P,P] [--topic ...] --bootstrap-server HOST:PORT

``describe`` prints the group's state and, per partition, the committed offset, the log end offset,
the lag and the member owning it (``-`` for the log end and lag of a partition whose topic no
longer exists); a KIP-848 consumer group (``list`` shows its TYPE ``consumer``) also shows its
group and assignment epochs, its server-side assignor, and each member's epoch, current and
target assignment and protocol (``classic`` for a classic member of a mixed group).
``reset-offsets`` only changes the offsets of an inactive group (Empty or Dead)
and, as in Kafka, only prints the plan unless ``--execute`` is given. ``delete-offsets``
(Kafka's ``--delete-offsets``) removes committed offsets and keeps the group.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import trio

from ..errors import KafkaError, OdradekError
from ..interfaces import TopicPartition
from . import SubcommandParser
from .client_args import add_admin_arguments


class GroupsCommandError(OdradekError):
    """A groups command cannot do what was asked (the message says why)."""


def _group_arguments(parser: argparse.ArgumentParser, *, many: bool) -> None:
    """GROUP as a positional (odradek's spelling) or ``--group GROUP`` (Kafka's
    ``kafka-consumer-groups``; repeatable where several groups are taken)."""
    if many:
        parser.add_argument("groups", nargs="*", metavar="GROUP", help="group ids (or --group)")
        parser.add_argument(
            "--group", dest="group_options", action="append", default=[], metavar="GROUP",
            help="a group id, as kafka-consumer-groups takes it (repeatable)",
        )  # fmt: skip
    else:
        parser.add_argument("group", nargs="?", metavar="GROUP", help="the group id (or --group)")
        parser.add_argument(
            "--group", dest="group_option", metavar="GROUP", help="the group id, as kafka-consumer-groups takes it"
        )


class _GroupsParser(SubcommandParser):
    """Merges ``--group`` into GROUP after parsing, with errors in this subcommand's usage."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if hasattr(parsed, "group_options"):
            parsed.groups = [*parsed.groups, *parsed.group_options]
            del parsed.group_options
            if not parsed.groups:
                self.error("a group is required: GROUP or --group GROUP")
        elif hasattr(parsed, "group_option"):
            if parsed.group is not None and parsed.group_option is not None and parsed.group != parsed.group_option:
                self.error(f"two groups given ({parsed.group!r} and --group {parsed.group_option!r}): one only")
            parsed.group = parsed.group if parsed.group is not None else parsed.group_option
            del parsed.group_option
            if parsed.group is None:
                self.error("a group is required: GROUP or --group GROUP")
        return parsed, extras


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups")
    gsub = p.add_subparsers(dest="groups_command", metavar="SUBCOMMAND", required=True, parser_class=_GroupsParser)

    lst = gsub.add_parser("list", help="list the consumer groups of the cluster")
    add_admin_arguments(lst)
    lst.add_argument("--state", action="append", default=[], help="only groups in this state (repeatable)")
    lst.set_defaults(func=run_list)

    desc = gsub.add_parser("describe", help="state, members, committed offsets and lag of groups")
    add_admin_arguments(desc)
    _group_arguments(desc, many=True)
    desc.set_defaults(func=run_describe)

    reset = gsub.add_parser("reset-offsets", help="change the committed offsets of an inactive group")
    add_admin_arguments(reset)
    _group_arguments(reset, many=False)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]", help="topic, optionally partitions")
    scope.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    how = reset.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="the log start offset")
    how.add_argument("--to-latest", action="store_true", help="the log end offset")
    how.add_argument("--to-current", action="store_true", help="the committed offset (e.g. to fill gaps)")
    how.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    how.add_argument("--to-datetime", metavar="ISO", help="first offset at or after YYYY-MM-DDTHH:MM:SS[.sss][zone]")
    how.add_argument("--shift-by", type=int, metavar="N", help="committed offset plus N (may be negative)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    reset.set_defaults(func=run_reset_offsets)

    delete = gsub.add_parser("delete", help="delete inactive groups and their committed offsets")
    add_admin_arguments(delete)
    _group_arguments(delete, many=True)
    delete.set_defaults(func=run_delete)

    delete_offsets = gsub.add_parser(
        "delete-offsets", help="remove a group's committed offsets of topics its members do not consume"
    )
    add_admin_arguments(delete_offsets)
    _group_arguments(delete_offsets, many=False)
    delete_offsets.add_argument(
        "--topic", action="append", required=True, metavar="TOPIC[:P,P...]", help="topic, optionally partitions"
    )
    delete_offsets.set_defaults(func=run_delete_offsets)


# -- pure helpers (tested without a broker) -----------------------------------------------------


def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """``topic`` or ``topic:0,2,5`` (Kafka's tool syntax)."""
    topic, sep, rest = spec.partition(":")
    if not topic:
        raise GroupsCommandError(f"invalid --topic {spec!r}")
    if not sep:
        return topic, None
    try:
        return topic, sorted({int(p) for p in rest.split(",") if p.strip()})
    except ValueError:
        raise GroupsCommandError(f"invalid partitions in --topic {spec!r}") from None


def parse_datetime_ms(text: str) -> int:
    """Kafka's ``--to-datetime`` format; without a zone the local time zone applies."""
    try:
        parsed = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise GroupsCommandError(f"invalid --to-datetime {text!r}: use YYYY-MM-DDTHH:MM:SS.sss[zone]") from None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()  # local time, as Kafka's tool
    return int(parsed.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class ResetPlan:
    tp: TopicPartition
    current: int | None
    new: int


def plan_reset(
    partitions: Iterable[TopicPartition],
    committed: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    strategy: str,
    value: int | None = None,
    by_time: Mapping[TopicPartition, int] | None = None,
) -> list[ResetPlan]:
    """New offsets per partition, clamped to [earliest, latest] as Kafka's tool does.

    ``strategy`` is one of earliest, latest, current, offset, datetime, shift; ``by_time`` holds
    ListOffsets-by-timestamp results (-1: no record that late, which means the log end).
    """
    plans = []
    for tp in sorted(partitions):
        low, high = earliest[tp], latest[tp]
        current = committed.get(tp)
        if strategy == "earliest":
            target = low
        elif strategy == "latest":
            target = high
        elif strategy == "current":
            target = current if current is not None else high
        elif strategy == "offset":
            assert value is not None
            target = value
        elif strategy == "shift":
            assert value is not None
            target = (current if current is not None else high) + value
        elif strategy == "datetime":
            assert by_time is not None
            found = by_time.get(tp, -1)
            target = found if found >= 0 else high
        else:
            raise GroupsCommandError(f"unknown reset strategy {strategy!r}")
        plans.append(ResetPlan(tp, current, min(max(target, low), high)))
    return plans


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces, like Kafka's tools print them."""
    cells = [list(headers)] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


# -- commands -------------------------------------------------------------------------------------


def _admin(args: argparse.Namespace) -> Any:
    from ..client.aio import AsyncAdmin

    return AsyncAdmin({"bootstrap.servers": args.bootstrap_server, "client.id": "odradek-groups"})


def _run(fn: Any, args: argparse.Namespace, out: TextIO | None = None) -> int:
    try:
        return int(trio.run(fn, args, out or sys.stdout))
    except GroupsCommandError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except KafkaError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def run_list(args: argparse.Namespace) -> int:
    return _run(_list, args)


async def _list(args: argparse.Namespace, out: TextIO) -> int:
    async with _admin(args) as admin:
        groups = await admin.list_groups(timeout=args.timeout)
    wanted = {s.lower() for s in args.state}
    rows = [
        (g.group_id, g.state, g.protocol_type, g.group_type) for g in groups if not wanted or g.state.lower() in wanted
    ]
    print(format_table(("GROUP", "STATE", "PROTOCOL-TYPE", "TYPE"), rows), file=out)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    return _run(_describe, args)


async def _describe(args: argparse.Namespace, out: TextIO) -> int:
    status = 0
    async with _admin(args) as admin:
        described = await admin.describe_groups(args.groups, timeout=args.timeout)
        for group_id in args.groups:
            desc = described.get(group_id)
            if isinstance(desc, KafkaError) or desc is None:
                print(f"Error: group {group_id!r}: {desc}", file=sys.stderr)
                status = 1
                continue
            if desc.state == "Dead":
                print(f"Consumer group '{group_id}' does not exist.", file=out)
                status = 1
                continue
            committed = await admin.list_consumer_group_offsets(group_id, timeout=args.timeout)
            owners: dict[TopicPartition, Any] = {}
            for m in desc.members:
                for tp in m.assignment:
                    owners[TopicPartition(*tp)] = m
            partitions = sorted(set(committed) | set(owners))
            # offsets may outlive their topic (deleted while this broker did not coordinate the
            # group, or on another Kafka): no log end to ask for, so "-" rather than a timeout
            live = await _existing(admin, partitions, args.timeout)
            ends = await admin.list_offsets(dict.fromkeys(live, "latest"), timeout=args.timeout) if live else {}
            if desc.group_type == "consumer":  # KIP-848: epochs and the server-side assignor
                print(
                    f"GROUP {group_id}  TYPE consumer  STATE {desc.state}  ASSIGNOR {desc.protocol or '-'}  "
                    f"EPOCH {desc.group_epoch}  ASSIGNMENT-EPOCH {desc.assignment_epoch}  "
                    f"MEMBERS {len(desc.members)}  COORDINATOR {desc.coordinator}",
                    file=out,
                )
            else:
                print(
                    f"GROUP {group_id}  STATE {desc.state}  PROTOCOL {desc.protocol or '-'}  "
                    f"MEMBERS {len(desc.members)}  COORDINATOR {desc.coordinator}",
                    file=out,
                )
            rows = []
            for tp in partitions:
                current = committed[tp].offset if tp in committed else None
                end = ends[tp].offset if tp in ends else None
                lag = end - current if current is not None and end is not None else None
                owner = owners.get(tp)
                rows.append(
                    (group_id, tp.topic, tp.partition, current, end, lag,
                     owner.member_id if owner else None, owner.host if owner else None,
                     owner.client_id if owner else None)
                )  # fmt: skip
            headers = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                       "CONSUMER-ID", "HOST", "CLIENT-ID")  # fmt: skip
            print(format_table(headers, rows), file=out)
            idle = [m for m in desc.members if not m.assignment]
            for m in idle:
                print(f"{group_id}  (no partitions)  {m.member_id}  {m.host}  {m.client_id}", file=out)
            if desc.group_type == "consumer":
                # PROTOCOL: classic for a classic member of a mixed group (KIP-848's migration)
                print(format_table(("CONSUMER-ID", "EPOCH", "ASSIGNMENT", "TARGET-ASSIGNMENT", "PROTOCOL"), [
                    (m.member_id, m.member_epoch, _partitions_text(m.assignment),
                     _partitions_text(m.target_assignment), m.member_type or "-")
                    for m in desc.members
                ]), file=out)  # fmt: skip
            print(file=out)
    return status


def _partitions_text(partitions: Iterable[TopicPartition]) -> str:
    """``topic:0,1 other:3`` (``-`` for none)."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return " ".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items())) or "-"


def run_reset_offsets(args: argparse.Namespace) -> int:
    return _run(_reset_offsets, args)


def _strategy(args: argparse.Namespace) -> tuple[str, int | None]:
    if args.to_earliest:
        return "earliest", None
    if args.to_latest:
        return "latest", None
    if args.to_current:
        return "current", None
    if args.to_offset is not None:
        return "offset", args.to_offset
    if args.shift_by is not None:
        return "shift", args.shift_by
    return "datetime", parse_datetime_ms(args.to_datetime)


async def _reset_offsets(args: argparse.Namespace, out: TextIO) -> int:
    strategy, value = _strategy(args)
    async with _admin(args) as admin:
        desc = (await admin.describe_groups([args.group], timeout=args.timeout))[args.group]
        if isinstance(desc, KafkaError):
            raise desc
        if desc.state not in ("Empty", "Dead"):
            raise GroupsCommandError(
                f"assignments can only be reset if the group '{args.group}' is inactive, "
                f"but the current state is {desc.state}."
            )
        committed_all = await admin.list_consumer_group_offsets(args.group, timeout=args.timeout)
        partitions: list[TopicPartition] = []
        if args.all_topics:
            partitions = await _existing(admin, sorted(committed_all), args.timeout)
            gone = sorted(set(committed_all) - set(partitions))
            if gone:
                names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in gone)
                print(f"skipping offsets of partitions that no longer exist: {names}", file=sys.stderr)
        else:
            specs = [parse_topic_spec(s) for s in args.topic]
            counts = await admin.list_topics(include_internal=True, timeout=args.timeout)
            for topic, wanted in specs:
                if topic not in counts:
                    raise GroupsCommandError(f"topic {topic!r} does not exist")
                for p in wanted if wanted is not None else range(counts[topic]):
                    if not 0 <= p < counts[topic]:
                        raise GroupsCommandError(f"partition {topic}-{p} does not exist")
                    partitions.append(TopicPartition(topic, p))
        if not partitions:
            raise GroupsCommandError(f"nothing to reset: no partitions selected for group '{args.group}'")
        earliest = await admin.list_offsets(dict.fromkeys(partitions, "earliest"), timeout=args.timeout)
        latest = await admin.list_offsets(dict.fromkeys(partitions, "latest"), timeout=args.timeout)
        by_time = None
        if strategy == "datetime":
            assert value is not None
            found = await admin.list_offsets(dict.fromkeys(partitions, value), timeout=args.timeout)
            by_time = {tp: r.offset for tp, r in found.items()}
        plans = plan_reset(
            partitions,
            {tp: v.offset for tp, v in committed_all.items()},
            {tp: r.offset for tp, r in earliest.items()},
            {tp: r.offset for tp, r in latest.items()},
            strategy=strategy,
            value=value,
            by_time=by_time,
        )
        if args.execute:
            await admin.alter_consumer_group_offsets(args.group, {p.tp: p.new for p in plans}, timeout=args.timeout)
    rows = [(args.group, p.tp.topic, p.tp.partition, p.current, p.new) for p in plans]
    print(format_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"), rows), file=out)
    if not args.execute:
        print("(dry run: nothing was committed; add --execute to commit these offsets)", file=out)
    return 0


def run_delete(args: argparse.Namespace) -> int:
    return _run(_delete, args)


async def _delete(args: argparse.Namespace, out: TextIO) -> int:
    async with _admin(args) as admin:
        results = await admin.delete_groups(args.groups, timeout=args.timeout)
    status = 0
    for group_id in args.groups:
        error = results.get(group_id)
        if error is None:
            print(f"Deletion of group '{group_id}' succeeded.", file=out)
        else:
            print(f"Deletion of group '{group_id}' failed: {error}", file=out)
            status = 1
    return status


async def _existing(admin: Any, partitions: Sequence[TopicPartition], timeout: float | None) -> list[TopicPartition]:
    """The partitions among ``partitions`` that exist now."""
    if not partitions:
        return []
    counts = await admin.list_topics(include_internal=True, timeout=timeout)
    return [tp for tp in partitions if 0 <= tp.partition < counts.get(tp.topic, 0)]


def run_delete_offsets(args: argparse.Namespace) -> int:
    return _run(_delete_offsets, args)


async def _delete_offsets(args: argparse.Namespace, out: TextIO) -> int:
    """Kafka's ``--delete-offsets``: a topic without partitions means every partition it has (or,
    for a topic that no longer exists, every one the group has an offset for)."""
    specs = [parse_topic_spec(spec) for spec in args.topic]
    async with _admin(args) as admin:
        counts = await admin.list_topics(include_internal=True, timeout=args.timeout)
        committed: Mapping[TopicPartition, Any] | None = None
        partitions: list[TopicPartition] = []
        for topic, wanted in specs:
            if wanted is None and topic not in counts:
                if committed is None:
                    committed = await admin.list_consumer_group_offsets(args.group, timeout=args.timeout)
                wanted = sorted(tp.partition for tp in committed if tp.topic == topic) or [0]
            for p in wanted if wanted is not None else range(counts[topic]):
                partitions.append(TopicPartition(topic, p))
        results = await admin.delete_consumer_group_offsets(args.group, partitions, timeout=args.timeout)
    rows = [(tp.topic, tp.partition, "Successful" if err is None else f"Error: {err}") for tp, err in results.items()]
    print(format_table(("TOPIC", "PARTITION", "STATUS"), rows), file=out)
    return 0 if all(err is None for err in results.values()) else 1
