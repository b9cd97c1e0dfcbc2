"""``odradek log-dirs describe|move``: a broker's log dirs, and moving a replica between them
(KIP-113), the jobs of kafka-log-dirs.sh and of the ``log_dirs`` of kafka-reassign-partitions'
JSON -- a command of its own here, since ``odradek partitions reassign`` takes flags, not JSON.

``describe --broker 1`` prints one line per log dir and one per replica in it (size, offset lag,
``future`` for the copy a move is making). ``move --broker 1 --topic t --partition 0 --dir
/data/b`` asks broker 1 to move its replica of ``t-0`` into ``/data/b`` (one of its
``log.dirs``); ``--wait`` returns once the copy has taken the replica's place.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..interfaces import TopicPartition
from .client_args import add_admin_arguments, admin_client

#: how often ``move --wait`` asks whether the copy is done
WAIT_POLL_S = 0.5


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("log-dirs", help="describe a broker's log dirs, move replicas between them (kafka-log-dirs)")
    lsub = p.add_subparsers(dest="log_dirs_command", metavar="SUBCOMMAND", required=True)

    describe = lsub.add_parser("describe", help="the log dirs of brokers and the replicas in them")
    add_admin_arguments(describe, command_config=True)
    describe.add_argument("--broker", type=int, action="append", required=True, help="broker id (repeatable)")
    describe.set_defaults(func=run_describe)

    move = lsub.add_parser("move", help="move a broker's replica of partitions to another of its log dirs")
    add_admin_arguments(move, command_config=True)
    move.add_argument("--broker", type=int, required=True, help="the broker holding the replica")
    move.add_argument("--topic", required=True)
    move.add_argument("--partition", type=int, action="append", required=True, help="partition (repeatable)")
    move.add_argument("--dir", required=True, help="the destination: one of the broker's log.dirs (absolute)")
    move.add_argument("--wait", action="store_true", help="return once the replicas are in the new dir")
    move.set_defaults(func=run_move)


def run_describe(args: argparse.Namespace) -> int:
    from ..client import KafkaError

    status = 0
    with admin_client(args, "odradek-log-dirs") as admin:
        answers = admin.describe_log_dirs(args.broker, timeout=args.timeout)
    for broker in dict.fromkeys(args.broker):
        dirs = answers[broker]
        if isinstance(dirs, KafkaError):
            print(f"Error: broker {broker}: {dirs}", file=sys.stderr)
            status = 1
            continue
        for d in dirs:
            state = (
                f"error {d.error.code.name}" if d.error is not None else f"{d.usable_bytes}/{d.total_bytes} bytes free"
            )
            print(f"broker {broker} {d.path}: {state}")
            for r in sorted(d.replicas, key=lambda r: (r.topic_partition.topic, r.topic_partition.partition)):
                future = " future" if r.is_future else ""
                tp = r.topic_partition
                print(f"  {tp.topic}-{tp.partition}: size {r.size} offset_lag {r.offset_lag}{future}")
    return status


def _in_place(admin: Any, args: argparse.Namespace, partitions: list[TopicPartition]) -> bool:
    """Whether every partition's replica is in ``--dir`` with no copy left."""
    from ..client import KafkaError

    dirs = admin.describe_log_dirs([args.broker], timeout=args.timeout)[args.broker]
    if isinstance(dirs, KafkaError):
        raise dirs
    placed = {(r.topic_partition, d.path, r.is_future) for d in dirs for r in d.replicas}
    return all((tp, args.dir, False) in placed for tp in partitions) and not any(
        future and tp in partitions for tp, _path, future in placed
    )


def run_move(args: argparse.Namespace) -> int:
    from ..client import TopicPartitionReplica

    partitions = [TopicPartition(args.topic, p) for p in dict.fromkeys(args.partition)]
    status = 0
    with admin_client(args, "odradek-log-dirs") as admin:
        moves = {TopicPartitionReplica(tp.topic, tp.partition, args.broker): args.dir for tp in partitions}
        results = admin.alter_replica_log_dirs(moves, timeout=args.timeout)
        started = []
        for replica in moves:
            error = results.get(replica)
            if error is not None:
                print(f"Error: {error}", file=sys.stderr)
                status = 1
            else:
                started.append(TopicPartition(replica.topic, replica.partition))
                print(f"Move of {replica.topic}-{replica.partition} on broker {args.broker} to {args.dir} started.")
        if args.wait and started:
            deadline = time.monotonic() + args.timeout
            while not _in_place(admin, args, started):
                if time.monotonic() > deadline:
                    print(f"Error: still moving after {args.timeout:g} s", file=sys.stderr)
                    return 1
                time.sleep(WAIT_POLL_S)
            for tp in started:
                print(f"Move of {tp.topic}-{tp.partition} on broker {args.broker} is completed.")
    return status
