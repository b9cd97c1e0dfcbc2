"""``odradek quotas alter|describe``: client quotas (kafka-configs.sh --entity-type users/clients).

Through KIP-546's AlterClientQuotas and DescribeClientQuotas, so it works against any broker of a
cluster, odradek's or Kafka's. An entity is a user, a client id or both; ``--user-defaults`` and
``--client-defaults`` name the ``<default>`` entities. ``--ip ADDRESS`` and ``--ip-defaults`` name
an ip entity, whose one quota is ``connection_creation_rate`` (KIP-612)::

    odradek quotas alter --bootstrap-server HOST:PORT --user alice --add producer_byte_rate=1048576
    odradek quotas alter --bootstrap-server HOST:PORT --client-defaults --add consumer_byte_rate=2097152
    odradek quotas alter --bootstrap-server HOST:PORT --user alice --delete producer_byte_rate
    odradek quotas describe --bootstrap-server HOST:PORT [--user alice] [--client-id app]
    odradek quotas alter --bootstrap-server HOST:PORT --ip 10.0.0.7 --add connection_creation_rate=10

``describe`` prints kafka-configs.sh's lines::

    Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from .client_args import add_admin_arguments, admin_client
from .topics import parse_key_values

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("quotas", help="alter and describe client quotas (kafka-configs --entity-type users/clients)")
    qsub = p.add_subparsers(dest="quotas_command", metavar="SUBCOMMAND", required=True)

    alter = qsub.add_parser("alter", help="set or delete quotas of a user, a client id, or both")
    add_admin_arguments(alter, command_config=True)
    _add_entity_arguments(alter)
    alter.add_argument(
        "--add",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="quota to set: producer_byte_rate, consumer_byte_rate, request_percentage, "
        "controller_mutation_rate; for an ip, connection_creation_rate (repeatable)",
    )
    alter.add_argument(
        "--delete", action="append", default=[], metavar="KEY[,KEY]", help="quota to remove (repeatable)"
    )
    alter.add_argument("--validate-only", action="store_true", help="check the change, write nothing")
    alter.set_defaults(func=run_alter)

    describe = qsub.add_parser("describe", help="quotas of the entities matching (every entity by default)")
    add_admin_arguments(describe, command_config=True)
    _add_entity_arguments(describe)
    describe.set_defaults(func=run_describe)


def _add_entity_arguments(parser: argparse.ArgumentParser) -> None:
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", help="user principal name (a SASL user; ANONYMOUS on PLAINTEXT)")
    user.add_argument("--user-defaults", action="store_true", help="the default user entity (<default>)")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client-id", help="client id")
    client.add_argument("--client-defaults", action="store_true", help="the default client-id entity (<default>)")
    ip = parser.add_mutually_exclusive_group()
    ip.add_argument("--ip", help="a client IP address (its connection_creation_rate)")
    ip.add_argument("--ip-defaults", action="store_true", help="the default ip entity (<default>)")


def _entity(args: argparse.Namespace) -> tuple[tuple[str, str | None], ...]:
    out: list[tuple[str, str | None]] = []
    if args.user is not None or args.user_defaults:
        out.append((USER, args.user))
    if args.client_id is not None or args.client_defaults:
        out.append((CLIENT_ID, args.client_id))
    if args.ip is not None or args.ip_defaults:
        out.append((IP, args.ip))
    return tuple(out)


def _split(items: Sequence[str]) -> list[str]:
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def _fail(message: str) -> int:
    print(f"Error: {message}", file=sys.stderr)
    return 1


def run_alter(args: argparse.Namespace) -> int:
    from ..client import ClientQuotaAlteration

    entity = _entity(args)
    if not entity:
        return _fail(
            "name an entity: --user/--user-defaults and/or --client-id/--client-defaults, or --ip/--ip-defaults"
        )
    ops: dict[str, float | None] = {}
    try:
        for key, text in parse_key_values(_split(args.add), "--add").items():
            value = float(text)
            if not math.isfinite(value):
                raise ValueError(text)
            ops[key] = value
    except ValueError as exc:
        return _fail(f"--add expects KEY=NUMBER: {exc}")
    except Exception as exc:  # TopicsCommandError: an item without '='
        return _fail(str(exc))
    for key in _split(args.delete):
        if key in ops:
            return _fail(f"{key} is both added and deleted")
        ops[key] = None
    if not ops:
        return _fail("nothing to change: give --add and/or --delete")
    with admin_client(args, "odradek-quotas") as admin:
        results = admin.alter_client_quotas(
            [ClientQuotaAlteration(entity, ops)], validate_only=args.validate_only, timeout=args.timeout
        )
    status = 0
    for got, error in results.items():
        if error is not None:
            print(f"Error: {error}", file=sys.stderr)
            status = 1
        else:
            verb = "Validated" if args.validate_only else "Completed"
            print(f"{verb} updating config for {describe_entity(got)}.")
    return status


def run_describe(args: argparse.Namespace) -> int:
    from ..client import ClientQuotaFilterComponent

    components = []
    for entity_type, name in _entity(args):
        if name is None:
            components.append(ClientQuotaFilterComponent.of_default_entity(entity_type))
        else:
            components.append(ClientQuotaFilterComponent.of_entity(entity_type, name))
    with admin_client(args, "odradek-quotas") as admin:
        described = admin.describe_client_quotas(components, strict=bool(components), timeout=args.timeout)
    for entity, values in sorted(described.items(), key=lambda item: repr(item[0])):
        configs = ",".join(f"{k}={float(v)}" for k, v in sorted(values.items()))
        print(f"Quota configs for {describe_entity(entity)} are {configs}")
    return 0


def describe_entity(entity: Sequence[tuple[str, str | None]]) -> str:
    """kafka-configs.sh's wording: ``user-principal 'alice', client-id 'app'``, ``the default
    user-principal``."""
    words = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip"}
    parts = []
    for entity_type, name in entity:
        word = words.get(entity_type, entity_type)
        parts.append(f"the default {word}" if name is None else f"{word} '{name}'")
    return ", ".join(parts)
