"""``odradek users set|delete|describe``: SCRAM users (kafka-configs.sh --entity-type users).

Through the admin API (KIP-554's AlterUserScramCredentials and DescribeUserScramCredentials), so
it works against any broker of a cluster, odradek's or Kafka's; the password is salted here and
never sent. The output of ``describe`` is kafka-configs.sh's::

    SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192
"""

from __future__ import annotations

import argparse
import getpass
import sys

from ..errors import KafkaError
from ..security.scram import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISMS
from .client_args import add_admin_arguments, admin_client

MECHANISMS = tuple(SCRAM_MECHANISMS)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("users", help="set, delete and describe SCRAM users (kafka-configs --entity-type users)")
    usub = p.add_subparsers(dest="users_command", metavar="SUBCOMMAND", required=True)

    set_ = usub.add_parser("set", help="create or replace a user's SCRAM credentials")
    add_admin_arguments(set_, command_config=True)
    set_.add_argument("--user", required=True)
    set_.add_argument("--password", help="the password (default: read from stdin, or asked for on a terminal)")
    set_.add_argument(
        "--mechanism", action="append", choices=MECHANISMS, help="SCRAM mechanism (repeatable; default both)"
    )
    set_.add_argument(
        "--iterations", type=int, default=MIN_ITERATIONS, help=f"{MIN_ITERATIONS}..{MAX_ITERATIONS} (default 4096)"
    )
    set_.set_defaults(func=run_set)

    delete = usub.add_parser("delete", help="delete a user's SCRAM credentials")
    add_admin_arguments(delete, command_config=True)
    delete.add_argument("--user", required=True)
    delete.add_argument(
        "--mechanism", action="append", choices=MECHANISMS, help="SCRAM mechanism (repeatable; default: all it has)"
    )
    delete.set_defaults(func=run_delete)

    describe = usub.add_parser("describe", help="users' SCRAM mechanisms and iterations")
    add_admin_arguments(describe, command_config=True)
    describe.add_argument("--user", action="append", help="user to describe (repeatable; default all)")
    describe.set_defaults(func=run_describe)


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return str(args.password)
    if sys.stdin.isatty():
        return getpass.getpass(f"Password for {args.user}: ")
    return sys.stdin.readline().rstrip("\n")


def _report(results: dict[str, KafkaError | None], done: str) -> int:
    status = 0
    for user, error in results.items():
        if error is not None:
            print(f"Error: {error}", file=sys.stderr)
            status = 1
        else:
            print(f"{done} SCRAM credentials of user '{user}'.")
    return status


def run_set(args: argparse.Namespace) -> int:
    from ..client import UserScramCredentialUpsertion

    password = _password(args)
    if not password:
        print("Error: the password must not be empty", file=sys.stderr)
        return 1
    mechanisms = args.mechanism or list(MECHANISMS)
    upsertions = [UserScramCredentialUpsertion(args.user, m, password, args.iterations) for m in mechanisms]
    with admin_client(args, "odradek-users") as admin:
        results = admin.alter_user_scram_credentials(upsertions, timeout=args.timeout)
    return _report(results, "Set")


def run_delete(args: argparse.Namespace) -> int:
    with admin_client(args, "odradek-users") as admin:
        mechanisms = args.mechanism
        if not mechanisms:
            described = admin.describe_user_scram_credentials([args.user], timeout=args.timeout)
            found = described.get(args.user)
            if isinstance(found, KafkaError) or not found:
                print(f"Error: user '{args.user}' has no SCRAM credentials", file=sys.stderr)
                return 1
            mechanisms = sorted(found)
        results = admin.alter_user_scram_credentials(
            deletions=[(args.user, m) for m in mechanisms], timeout=args.timeout
        )
    return _report(results, "Deleted")


def run_describe(args: argparse.Namespace) -> int:
    with admin_client(args, "odradek-users") as admin:
        described = admin.describe_user_scram_credentials(args.user, timeout=args.timeout)
    status = 0
    for user, infos in described.items():
        if isinstance(infos, KafkaError):
            print(f"Error: {infos}", file=sys.stderr)
            status = 1
            continue
        configs = ",".join(f"{m}=iterations={i}" for m, i in sorted(infos.items()))
        print(f"SCRAM credential configs for user-principal '{user}' are {configs}")
    return status
