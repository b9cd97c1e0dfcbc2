"""``odradek acls list|add|remove``: ACLs, with kafka-acls.sh's options.

Through the ACL APIs (KIP-140), so it works against any broker of a cluster with an authorizer,
odradek's or Kafka's::

    odradek acls add --bootstrap-server HOST:PORT --allow-principal User:alice \\
        --operation Read --operation Describe --topic orders --group billing
    odradek acls add --bootstrap-server HOST:PORT --allow-principal User:alice --operation Write \\
        --topic sales- --resource-pattern-type prefixed
    odradek acls add --bootstrap-server HOST:PORT --allow-principal User:alice --consumer --topic orders --group billing
    odradek acls list --bootstrap-server HOST:PORT [--topic orders] [--principal User:alice]
    odradek acls remove --bootstrap-server HOST:PORT --topic orders [--deny-principal User:bob ...]

Resources are ``--topic``, ``--group``, ``--transactional-id`` (each repeatable) and
``--cluster``. ``add`` creates every combination of its principals, hosts (``--allow-host`` /
``--deny-host``, default ``*``), operations and resources; ``--producer`` (with
``--idempotent``) and ``--consumer`` stand for the operations a producer or consumer needs, as in
kafka-acls.sh. ``remove`` without principals or
operations removes every ACL of the resources named. ``list`` without a resource lists every
ACL; ``--resource-pattern-type`` is ``literal`` by default, ``prefixed``, or for list and remove
also ``any`` and ``match`` (the ACLs that apply to the name). Lines are kafka-acls.sh's::

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
        (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

(each entry's line starts with a space and a tab, as kafka-acls.sh prints it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from ..errors import KafkaError
from ..security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from .client_args import add_admin_arguments, admin_client

#: what --operation accepts: Kafka's names in any case, with or without underscores
OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation if op > AclOperation.ANY}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("acls", help="list, add and remove ACLs (kafka-acls.sh)")
    asub = p.add_subparsers(dest="acls_command", metavar="SUBCOMMAND", required=True)
    for name, func, what in (
        ("list", run_list, "ACLs of the resources named (every ACL by default)"),
        ("add", run_add, "allow or deny principals operations on resources"),
        ("remove", run_remove, "remove ACLs of the resources named"),
    ):
        parser = asub.add_parser(name, help=what)
        add_admin_arguments(parser, command_config=True)
        _add_resource_arguments(parser, filters=name != "add")
        if name == "list":
            parser.add_argument("--principal", help="only the ACLs of this principal (User:alice)")
        else:
            _add_entry_arguments(parser)
        if name == "add":
            _add_convenience_arguments(parser)
        parser.set_defaults(func=func)


def _add_resource_arguments(parser: argparse.ArgumentParser, *, filters: bool) -> None:
    parser.add_argument("--topic", action="append", default=[], help="topic (repeatable; * for every topic)")
    parser.add_argument("--group", action="append", default=[], help="consumer group (repeatable; * for every group)")
    parser.add_argument("--transactional-id", action="append", default=[], help="transactional id (repeatable)")
    parser.add_argument("--cluster", action="store_true", help="the cluster")
    choices = ["literal", "prefixed", "any", "match"] if filters else ["literal", "prefixed"]
    parser.add_argument(
        "--resource-pattern-type", choices=choices, default="literal", help="how resource names match (literal)"
    )


def _add_entry_arguments(parser: argparse.ArgumentParser) -> None:
    for kind in ("allow", "deny"):
        parser.add_argument(
            f"--{kind}-principal", action="append", default=[], help=f"principal to {kind} (User:alice; repeatable)"
        )
        parser.add_argument(
            f"--{kind}-host", action="append", default=[], help=f"host the {kind} principals connect from (* default)"
        )
    parser.add_argument(
        "--operation",
        action="append",
        default=[],
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
        "IdempotentWrite, All (repeatable)",
    )


def _add_convenience_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--producer",
        action="store_true",
        help="what a producer needs: WRITE, DESCRIBE, CREATE on the topics; WRITE, DESCRIBE on the transactional ids",
    )
    parser.add_argument(
        "--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster as well"
    )
    parser.add_argument(
        "--consumer",
        action="store_true",
        help="what a consumer needs: READ, DESCRIBE on the topics; READ on the groups",
    )


#: kafka-acls.sh's --producer and --consumer: the operations each resource type gets
PRODUCER_OPERATIONS = {
    ResourceType.TOPIC: (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.WRITE, AclOperation.DESCRIBE),
}
CONSUMER_OPERATIONS = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.DESCRIBE),
    ResourceType.GROUP: (AclOperation.READ,),
}


def _convenience(args: argparse.Namespace) -> list[tuple[ResourceType, str, AclOperation]]:
    """The (resource, operation) pairs ``--producer``/``--consumer`` stand for (kafka-acls.sh's)."""
    if (args.producer or args.consumer) and not args.topic:
        raise AclsCommandError("--producer and --consumer need --topic")
    if args.consumer and not args.group:
        raise AclsCommandError("--consumer needs --group")
    if args.idempotent and not args.producer:
        raise AclsCommandError("--idempotent goes with --producer")
    if (args.producer or args.consumer) and (args.operation or args.cluster):
        raise AclsCommandError("--producer/--consumer choose the operations: no --operation or --cluster with them")
    out: list[tuple[ResourceType, str, AclOperation]] = []
    for wanted, table in ((args.producer, PRODUCER_OPERATIONS), (args.consumer, CONSUMER_OPERATIONS)):
        if wanted:
            out += [(t, n, op) for t, n in _resources(args) for op in table.get(t, ())]
    if args.idempotent:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.IDEMPOTENT_WRITE))
    return list(dict.fromkeys(out))


class AclsCommandError(ValueError):
    """Options that name no ACL."""


def _fail(message: str) -> int:
    print(f"Error: {message}", file=sys.stderr)
    return 1


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _operations(args: argparse.Namespace) -> list[AclOperation]:
    out = []
    for text in args.operation:
        op = OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
        if op is None:
            raise AclsCommandError(f"unknown operation {text!r}: one of {', '.join(sorted(OPERATIONS))}")
        out.append(op)
    return out


def _entries(args: argparse.Namespace, operations: list[AclOperation]) -> list[AccessControlEntry]:
    out = []
    for kind, permission in (("allow", AclPermissionType.ALLOW), ("deny", AclPermissionType.DENY)):
        principals = getattr(args, f"{kind}_principal")
        hosts = getattr(args, f"{kind}_host") or [WILDCARD_HOST]
        out += [AccessControlEntry(p, h, op, permission) for p in principals for h in hosts for op in operations]
    return out


def _pattern_type(args: argparse.Namespace) -> PatternType:
    return PatternType[args.resource_pattern_type.upper()]


def _print_grouped(bindings: Iterable[AclBinding], heading: str) -> None:
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    for pattern in sorted(by_pattern, key=lambda p: (p.resource_type, p.name, p.pattern_type)):
        print(f"{heading} `{pattern}`:")
        for entry in sorted(by_pattern[pattern], key=lambda e: (e.principal, e.host, e.operation, e.permission_type)):
            print(f" \t{entry}")
        print()


def run_add(args: argparse.Namespace) -> int:
    try:
        resources, operations, convenience = _resources(args), _operations(args), _convenience(args)
    except AclsCommandError as exc:
        return _fail(str(exc))
    if not resources:
        return _fail("name a resource: --topic, --group, --transactional-id or --cluster")
    pattern_type = _pattern_type(args)
    if convenience:
        bindings = [
            AclBinding(ResourcePattern(t, n, PatternType.LITERAL if t == ResourceType.CLUSTER else pattern_type), e)
            for t, n, op in convenience
            for e in _entries(args, [op])
        ]
    else:
        bindings = [
            AclBinding(ResourcePattern(t, n, pattern_type), e) for t, n in resources for e in _entries(args, operations)
        ]
    if not bindings:
        return _fail(
            "name principals (--allow-principal/--deny-principal) and operations (--operation, --producer, --consumer)"
        )
    _print_grouped(bindings, "Adding ACLs for resource")
    with admin_client(args, "odradek-acls") as admin:
        results: dict[AclBinding, KafkaError | None] = admin.create_acls(bindings, timeout=args.timeout)
    failed = [(b, e) for b, e in results.items() if e is not None]
    for binding, error in failed:
        print(f"Error while adding ACL {binding}: {error}", file=sys.stderr)
    return 1 if failed else 0


def _filters(args: argparse.Namespace, entry_filters: list[AccessControlEntryFilter]) -> list[AclBindingFilter]:
    pattern_type = _pattern_type(args)
    patterns = [ResourcePatternFilter(t, n, pattern_type) for t, n in _resources(args)]
    if not patterns:
        patterns = [ResourcePatternFilter()]
    return [AclBindingFilter(p, e) for p in patterns for e in entry_filters]


def run_list(args: argparse.Namespace) -> int:
    filters = _filters(args, [AccessControlEntryFilter(principal=args.principal)])
    found: list[AclBinding] = []
    with admin_client(args, "odradek-acls") as admin:
        for acl_filter in filters:
            try:
                found += admin.describe_acls(acl_filter, timeout=args.timeout)
            except KafkaError as exc:
                return _fail(str(exc))
    _print_grouped(dict.fromkeys(found), "Current ACLs for resource")
    return 0


def run_remove(args: argparse.Namespace) -> int:
    try:
        operations = _operations(args) or [AclOperation.ANY]
    except AclsCommandError as exc:
        return _fail(str(exc))
    if not _resources(args):
        return _fail("name a resource: --topic, --group, --transactional-id or --cluster")
    principals = [
        (principal, getattr(args, f"{kind}_host") or [None], permission)
        for kind, permission in (("allow", AclPermissionType.ALLOW), ("deny", AclPermissionType.DENY))
        for principal in getattr(args, f"{kind}_principal")
    ]
    entry_filters = [
        AccessControlEntryFilter(principal, host, op, permission)
        for principal, hosts, permission in principals
        for host in hosts
        for op in operations
    ] or [AccessControlEntryFilter(operation=op) for op in operations]
    status = 0
    with admin_client(args, "odradek-acls") as admin:
        results = admin.delete_acls(_filters(args, entry_filters), timeout=args.timeout)
    removed: list[AclBinding] = []
    for outcome in results.values():
        if isinstance(outcome, KafkaError):
            print(f"Error: {outcome}", file=sys.stderr)
            status = 1
        else:
            removed += outcome
    _print_grouped(dict.fromkeys(removed), "Removed ACLs for resource")
    return status


__all__ = ["register"]
