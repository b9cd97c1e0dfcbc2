"""``odradek topics create|list|describe|delete|alter|offsets``: kafka-topics.sh with
sub-commands, and kafka-get-offsets.sh as ``offsets``.

Flags are Kafka's (``--bootstrap-server``, ``--topic``, ``--partitions``,
``--replication-factor``, ``--config k=v``, ``--if-not-exists`` ...); ``describe`` prints
kafka-topics' layout and ``offsets`` kafka-get-offsets' ``topic:partition:offset`` lines, so
scripts that parse them keep working.
"""

from __future__ import annotations

import argparse
import base64
import sys
import uuid
from collections.abc import Sequence

from ..errors import ErrorCode, KafkaError, OdradekError
from .client_args import add_admin_arguments, admin_client


class TopicsCommandError(OdradekError):
    """A topics command cannot do what was asked (the message says why)."""


def kafka_uuid(value: uuid.UUID | str) -> str:
    """A topic id as Kafka's tools print it (``Uuid.toString``: URL-safe base64 of its 16 bytes,
    unpadded, e.g. ``3VBw7oBHTTi8b5bu7z-sSg``), so scripts that read kafka-topics' output match."""
    raw = value.bytes if isinstance(value, uuid.UUID) else uuid.UUID(str(value)).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics (kafka-topics)")
    tsub = p.add_subparsers(dest="topics_command", metavar="SUBCOMMAND", required=True)

    create = tsub.add_parser("create", help="create a topic")
    add_admin_arguments(create, command_config=True)
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=-1, help="partition count (default: broker's num.partitions)")
    create.add_argument(
        "--replication-factor", type=int, default=-1, help="replicas (default: broker's default.replication.factor)"
    )
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="topic config (repeatable)")
    create.add_argument("--if-not-exists", action="store_true", help="succeed when the topic exists already")
    create.set_defaults(func=run_create)

    lst = tsub.add_parser("list", help="list topic names")
    add_admin_arguments(lst, command_config=True)
    lst.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    lst.set_defaults(func=run_list)

    desc = tsub.add_parser("describe", help="partitions, leaders, replicas, ISR and configs")
    add_admin_arguments(desc, command_config=True)
    desc.add_argument("--topic", action="append", default=[], help="topic to describe (repeatable; default all)")
    desc.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    desc.set_defaults(func=run_describe)

    delete = tsub.add_parser("delete", help="delete topics")
    add_admin_arguments(delete, command_config=True)
    delete.add_argument("--topic", action="append", required=True, help="topic to delete (repeatable)")
    delete.add_argument("--if-exists", action="store_true", help="succeed when the topic does not exist")
    delete.set_defaults(func=run_delete)

    alter = tsub.add_parser("alter", help="add partitions or change topic configs")
    add_admin_arguments(alter, command_config=True)
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, help="new (larger) partition count")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="set a topic config")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY", help="reset a config to default")
    alter.set_defaults(func=run_alter)

    offsets = tsub.add_parser("offsets", help="offsets of a topic's partitions at a time (kafka-get-offsets)")
    add_admin_arguments(offsets, command_config=True)
    offsets.add_argument("--topic", required=True)
    offsets.add_argument("--partitions", metavar="P,P", help="only these partitions (comma separated; default all)")
    offsets.add_argument(
        "--time",
        default="latest",
        help="latest (-1), earliest (-2), max-timestamp (-3), earliest-local (-4: the first offset kept locally), "
        "latest-tiered (-5: the highest offset in remote storage) or a timestamp in ms (default latest)",
    )
    offsets.set_defaults(func=run_offsets)


def parse_key_values(items: Sequence[str], flag: str) -> dict[str, str]:
    """``key=value`` strings (``--config``) as a dict; raises on items without ``=``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TopicsCommandError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def _fail(message: str) -> int:
    print(f"Error: {message}", file=sys.stderr)
    return 1


def run_create(args: argparse.Namespace) -> int:
    from ..client import NewTopic

    configs = parse_key_values(args.config, "--config")
    with admin_client(args, "odradek-topics") as admin:
        result = admin.create_topics(
            [NewTopic(args.topic, args.partitions, args.replication_factor, configs)], timeout=args.timeout
        )
    error = result.get(args.topic)
    if error is not None:
        if args.if_not_exists and error.code is ErrorCode.TOPIC_ALREADY_EXISTS:
            return 0
        return _fail(str(error))
    print(f"Created topic {args.topic}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with admin_client(args, "odradek-topics") as admin:
        topics = admin.list_topics(include_internal=not args.exclude_internal, timeout=args.timeout)
    for name in sorted(topics):
        print(name)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    from ..client import ConfigResourceType

    status = 0
    with admin_client(args, "odradek-topics") as admin:
        names = args.topic or sorted(
            admin.list_topics(include_internal=not args.exclude_internal, timeout=args.timeout)
        )
        described = admin.describe_topics(names, timeout=args.timeout)
        configs = admin.describe_configs([(ConfigResourceType.TOPIC, n) for n in names], timeout=args.timeout)
    for name in names:
        desc = described.get(name)
        if isinstance(desc, KafkaError) or desc is None:
            status = _fail(
                f"topic '{name}' does not exist"
                if desc is None or desc.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else str(desc)
            )
            continue
        entries = configs.get((int(ConfigResourceType.TOPIC), name))
        changed = (
            ",".join(f"{e.name}={e.value}" for e in sorted(entries.values(), key=lambda e: e.name) if not e.is_default)
            if isinstance(entries, dict)
            else ""
        )
        rf = len(desc.partitions[0].replicas) if desc.partitions else 0
        topic_id = f"\tTopicId: {kafka_uuid(desc.topic_id)}" if desc.topic_id is not None else ""
        count = len(desc.partitions)
        print(f"Topic: {name}{topic_id}\tPartitionCount: {count}\tReplicationFactor: {rf}\tConfigs: {changed}")
        for p in desc.partitions:
            replicas = ",".join(map(str, p.replicas))
            isr = ",".join(map(str, p.isr))
            print(f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}\t"
                  f"Replicas: {replicas}\tIsr: {isr}")  # fmt: skip
    return status


def run_delete(args: argparse.Namespace) -> int:
    with admin_client(args, "odradek-topics") as admin:
        results = admin.delete_topics(args.topic, timeout=args.timeout)
    status = 0
    for name in args.topic:
        error = results.get(name)
        if error is None:
            continue
        if args.if_exists and error.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            continue
        status = _fail(str(error))
    return status


def run_alter(args: argparse.Namespace) -> int:
    from ..client import AlterConfigOp, ConfigResourceType

    sets = parse_key_values(args.config, "--config")
    if args.partitions is None and not sets and not args.delete_config:
        raise TopicsCommandError("alter needs --partitions, --config or --delete-config")
    with admin_client(args, "odradek-topics") as admin:
        if args.partitions is not None:
            error = admin.create_partitions({args.topic: args.partitions}, timeout=args.timeout).get(args.topic)
            if error is not None:
                return _fail(str(error))
        if sets or args.delete_config:
            ops: list[tuple[str, int, str | None]] = [(k, AlterConfigOp.SET, v) for k, v in sets.items()]
            ops += [(k, AlterConfigOp.DELETE, None) for k in args.delete_config]
            result = admin.incremental_alter_configs(
                {(ConfigResourceType.TOPIC, args.topic): ops}, timeout=args.timeout
            )
            for error in result.values():
                if error is not None:
                    return _fail(str(error))
    return 0


def offset_spec(value: str) -> str | int:
    """``--time``: one of Kafka's names, its number (-1 ... -5) or a timestamp (ms, >= 0)."""
    from ..client.admin import OFFSET_SPECS

    if value in OFFSET_SPECS:
        return value
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is not None and number >= 0:
        return number
    by_number = {v: k for k, v in OFFSET_SPECS.items()}
    if number is not None and number in by_number:
        return by_number[number]
    raise TopicsCommandError(
        f"--time must be {', '.join(OFFSET_SPECS)}, -1 to -{len(OFFSET_SPECS)} or a timestamp in ms, not {value!r}"
    )


def run_offsets(args: argparse.Namespace) -> int:
    """kafka-get-offsets: ``topic:partition:offset`` per partition (no offset when none is found,
    as for a timestamp after every record)."""
    spec = offset_spec(args.time)
    try:
        wanted = [int(p) for p in args.partitions.split(",")] if args.partitions else None
    except ValueError:
        raise TopicsCommandError(f"--partitions expects numbers separated by commas, got {args.partitions!r}") from None
    with admin_client(args, "odradek-topics") as admin:
        desc = admin.describe_topics([args.topic], timeout=args.timeout).get(args.topic)
        if desc is None or isinstance(desc, KafkaError):
            missing = desc is None or desc.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return _fail(f"topic '{args.topic}' does not exist" if missing else str(desc))
        existing = sorted(p.partition for p in desc.partitions)
        absent = sorted(set(wanted or ()) - set(existing))
        if absent:
            return _fail(f"topic '{args.topic}' has no partition {', '.join(map(str, absent))}")
        found = admin.list_offsets({(args.topic, p): spec for p in wanted or existing}, timeout=args.timeout)
    for tp in sorted(found, key=lambda tp: tp.partition):
        offset = found[tp].offset
        print(f"{tp.topic}:{tp.partition}:{offset if offset >= 0 else ''}")
    return 0
