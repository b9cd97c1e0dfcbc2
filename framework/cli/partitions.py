"""``odradek partitions reassign|reassignments``: move partitions between brokers (KIP-455), the
job of kafka-reassign-partitions.sh, one partition per flag set.

``reassign --topic t --partition 0 --replicas 2,3`` asks the controller to move the partition
to brokers 2 and 3 (the first one its preferred leader); ``--cancel`` instead stops a running
reassignment and puts the original replicas back; ``--wait`` returns only once no
reassignment of the partition is left. ``reassignments`` lists the ones in progress, one line
per partition in the layout of kafka-reassign-partitions' ``--list``.

``--throttle BYTES`` bounds the copy as kafka-reassign-partitions' does (KIP-73): every broker of
the old and new replica sets gets ``leader.`` and ``follower.replication.throttled.rate`` =
BYTES, and the topic names the old replicas in ``leader.replication.throttled.replicas`` and the
new ones in ``follower.replication.throttled.replicas``. With ``--wait`` the throttle is removed
once the move completes; otherwise ``unthrottle`` removes it (Kafka's ``--verify`` does).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..interfaces import TopicPartition
from .client_args import add_admin_arguments, admin_client

#: how often ``reassign --wait`` asks whether the reassignment is still running
WAIT_POLL_S = 0.5
#: config resource types and IncrementalAlterConfigs operations (Kafka's codes)
_TOPIC, _BROKER = 2, 4
_SET, _DELETE, _APPEND = 0, 1, 2
LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"


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
    reassign.add_argument(
        "--throttle",
        type=int,
        metavar="BYTES",
        help="bound the copy to BYTES a second per broker (removed after --wait, else by unthrottle)",
    )
    reassign.set_defaults(func=run_reassign)

    unthrottle = psub.add_parser("unthrottle", help="remove the replication throttle reassign --throttle set")
    add_admin_arguments(unthrottle, command_config=True)
    unthrottle.add_argument("--topic", action="append", required=True, help="the throttled topic (repeatable)")
    unthrottle.set_defaults(func=run_unthrottle)

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


def run_reassign(args: argparse.Namespace) -> int:
    target: list[int] | None = None if args.cancel else args.replicas
    partitions = [TopicPartition(args.topic, p) for p in dict.fromkeys(args.partition)]
    if args.throttle is not None and (target is None or args.throttle < 0):
        print("Error: --throttle takes a number of bytes >= 0, with --replicas", file=sys.stderr)
        return 1
    status = 0
    with admin_client(args, "odradek-partitions") as admin:
        if args.throttle is not None:
            assert target is not None
            problem = _throttle(admin, args, partitions, target)
            if problem:
                print(f"Error: {problem}", file=sys.stderr)
                return 1
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
            if args.throttle is not None:
                problem = _unthrottle(admin, args, [args.topic])
                if problem:
                    print(f"Error: {problem}", file=sys.stderr)
                    return 1
                print("Throttle was removed.")
        elif args.throttle is not None and started:
            print(
                f"Warning: the replication throttle stays until 'odradek partitions unthrottle --topic {args.topic}' "
                "is run once the reassignment has completed."
            )
    return status


def _throttle_entries(
    partitions: list[TopicPartition], current: dict[int, tuple[int, ...]], target: list[int]
) -> tuple[list[str], list[str]]:
    """kafka-reassign-partitions' throttled replicas: the leader side on the current replicas
    (any may lead while the copy runs), the follower side on the replicas being added."""
    leader, follower = [], []
    for tp in partitions:
        now = current.get(tp.partition, ())
        leader += [f"{tp.partition}:{b}" for b in now]
        follower += [f"{tp.partition}:{b}" for b in target if b not in now]
    return leader, follower


def _throttle(admin: Any, args: argparse.Namespace, partitions: list[TopicPartition], target: list[int]) -> str | None:
    """Set the throttle for a reassignment (see module doc); a problem to report, or None."""
    from ..client import KafkaError

    described = admin.describe_topics([args.topic], timeout=args.timeout)[args.topic]
    if isinstance(described, KafkaError):
        return str(described)
    current = {p.partition: tuple(p.replicas) for p in described.partitions}
    leader, follower = _throttle_entries(partitions, current, target)
    brokers = sorted({b for tp in partitions for b in current.get(tp.partition, ())} | set(target))
    rate = str(args.throttle)
    changes: dict[tuple[int, str], list[tuple[str, int, str | None]]] = {
        (_BROKER, str(b)): [(LEADER_RATE, _SET, rate), (FOLLOWER_RATE, _SET, rate)] for b in brokers
    }
    changes[(_TOPIC, args.topic)] = [
        (LEADER_REPLICAS, _APPEND, ",".join(leader)),
        (FOLLOWER_REPLICAS, _APPEND, ",".join(follower)),
    ]
    for (_, name), error in admin.incremental_alter_configs(changes, timeout=args.timeout).items():
        if error is not None:
            return f"setting the throttle on {name}: {error}"
    print(f"The inter-broker throttle limit was set to {args.throttle} B/s on brokers {','.join(map(str, brokers))}.")
    return None


def _unthrottle(admin: Any, args: argparse.Namespace, topics: list[str]) -> str | None:
    """Remove the throttle: the topics' throttled replicas and every broker's throttle rates."""
    brokers = [b.node_id for b in admin.describe_cluster(timeout=args.timeout).brokers]
    changes: dict[tuple[int, str], list[tuple[str, int, str | None]]] = {
        (_BROKER, str(b)): [(LEADER_RATE, _DELETE, None), (FOLLOWER_RATE, _DELETE, None)] for b in brokers
    }
    for topic in topics:
        changes[(_TOPIC, topic)] = [(LEADER_REPLICAS, _DELETE, None), (FOLLOWER_REPLICAS, _DELETE, None)]
    for (_, name), error in admin.incremental_alter_configs(changes, timeout=args.timeout).items():
        if error is not None:
            return f"removing the throttle from {name}: {error}"
    return None


def run_unthrottle(args: argparse.Namespace) -> int:
    with admin_client(args, "odradek-partitions") as admin:
        problem = _unthrottle(admin, args, list(dict.fromkeys(args.topic)))
    if problem:
        print(f"Error: {problem}", file=sys.stderr)
        return 1
    print("Throttle was removed.")
    return 0


def run_reassignments(args: argparse.Namespace) -> int:
    with admin_client(args, "odradek-partitions") as admin:
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
