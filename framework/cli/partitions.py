"""``odradek partitions reassign|reassignments``: move partitions between brokers (KIP-455), the
job of kafka-reassign-partitions.sh, one partition per flag set.

``reassign --topic t --partition 0 --replicas 2,3`` asks the controller to move the partition
to brokers 2 and 3 (the first one its preferred leader); ``--cancel`` instead stops a running
reassignment and puts the original replicas back; ``--wait`` returns only once no
reassignment of the partition is left. ``reassignments`` lists the ones in progress, one line
per partition in the layout of kafka-reassign-partitions' ``--list``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..interfaces import TopicPartition
from .client_args import add_admin_arguments
from .topics import parse_key_values

#: how often ``reassign --wait`` asks whether the reassignment is still running
WAIT_POLL_S = 0.5


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("partitions", help="reassign partitions between brokers (kafka-reassign-partitions)")
    psub = p.add_subparsers(dest="partitions_command", metavar="SUBCOMMAND", required=True)

    reassign = psub.add_parser("reassign", help="move a partition to other brokers, or cancel its move")
    add_admin_arguments(reassign, command_config=True)
    reassign.add_argument("--topic", required=True)
    reassign.add_argument("--partition", type=int, action="append", required=True, help="partition (repeatable)")
    what = reassign.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--replicas",
        type=parse_replicas,
        metavar="ID,ID,...",
        help="the target brokers; the first is the preferred leader",
    )
    what.add_argument("--cancel", action="store_true", help="cancel the running reassignment (original replicas)")
    reassign.add_argument("--wait", action="store_true", help="return once the reassignment has completed")
    reassign.set_defaults(func=run_reassign)

    listing = psub.add_parser("reassignments", help="list the reassignments in progress")
    add_admin_arguments(listing, command_config=True)
    listing.add_argument("--topic", action="append", default=[], help="only this topic (repeatable)")
    listing.set_defaults(func=run_reassignments)


def parse_replicas(text: str) -> list[int]:
    """``2,3`` as broker ids (argparse reports anything else as a usage error)."""
    try:
        replicas = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects broker ids separated by commas, got {text!r}") from None
    if not replicas:
        raise argparse.ArgumentTypeError("names no broker")
    return replicas


def _admin(args: argparse.Namespace) -> Any:
    from ..client import Admin

    config = {"bootstrap.servers": args.bootstrap_server, "client.id": "odradek-partitions"}
    config.update(parse_key_values(args.command_config, "--command-config"))
    return Admin(config)


def run_reassign(args: argparse.Namespace) -> int:
    target: list[int] | None = None if args.cancel else args.replicas
    partitions = [TopicPartition(args.topic, p) for p in dict.fromkeys(args.partition)]
    status = 0
    with _admin(args) as admin:
        results = admin.alter_partition_reassignments({tp: target for tp in partitions}, timeout=args.timeout)
        started = []
        for tp in partitions:
            error = results.get(tp)
            if error is not None:
                print(f"Error: {error}", file=sys.stderr)
                status = 1
            else:
                started.append(tp)
                what = "cancelled" if target is None else f"started to {','.join(map(str, target))}"
                print(f"Reassignment of partition {tp.topic}-{tp.partition} {what}.")
        if args.wait and target is not None and started:
            deadline = time.monotonic() + args.timeout
            while admin.list_partition_reassignments(started, timeout=args.timeout):
                if time.monotonic() > deadline:
                    print(f"Error: still reassigning after {args.timeout:g} s", file=sys.stderr)
                    return 1
                time.sleep(WAIT_POLL_S)
            for tp in started:
                print(f"Reassignment of partition {tp.topic}-{tp.partition} is completed.")
    return status


def run_reassignments(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        ongoing = admin.list_partition_reassignments(timeout=args.timeout)
    if args.topic:  # filtered here: the request names partitions, which would take a Metadata call
        ongoing = {tp: r for tp, r in ongoing.items() if tp.topic in args.topic}
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp, r in sorted(ongoing.items(), key=lambda item: (item[0].topic, item[0].partition)):
        replicas = ",".join(map(str, r.replicas))
        adding = ",".join(map(str, r.adding_replicas))
        removing = ",".join(map(str, r.removing_replicas))
        print(f"{tp.topic}-{tp.partition}: replicas: {replicas}. adding: {adding}. removing: {removing}.")
    return 0
