"""ACLs in the metadata store, in Kafka's ZooKeeper layout, and a watch-fed copy of them.

Kafka's ``AclAuthorizer`` keeps one znode per resource pattern holding every entry on it::

    /kafka-acl/<ResourceType>/<name>                        LITERAL patterns (and the * wildcard)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>      PREFIXED patterns
    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                          "operation":"Read","host":"*"}]}

odradek writes the same keys through any :class:`~odradek.interfaces.MetadataStore` (local,
ZooKeeper, etcd), with two departures: names are sanitized as entity configs' are (URL encoding:
a group name may contain ``/``, which would be a path), and there are no
``/kafka-acl-changes`` notification znodes -- every store's watch already tells every broker
which resource changed, which is all Kafka's notifications carry.

Writes are read-modify-write with a compare-and-set on the resource's key, retried when another
broker wrote in between; a resource left without entries is deleted. :class:`AclStore` lists
both roots once and then follows each with a watch, re-listing when the store compacted the
history, and hands every change to ``on_change`` (the authorizer's cache).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

import trio

from ..entity_configs import desanitize, sanitize
from ..interfaces import ABSENT, MetadataCompacted, MetadataConflict, MetadataStore
from .acl import AccessControlEntry, AclOperation, AclPermissionType, PatternType, ResourcePattern, ResourceType

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl/"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed/"
_ROOTS = {PatternType.LITERAL: LITERAL_ROOT, PatternType.PREFIXED: PREFIXED_ROOT}
_MAX_ATTEMPTS = 20


Entries = frozenset[AccessControlEntry]
#: called with a pattern and its entries after the store changed it (empty: it has none)
OnChange = Callable[[ResourcePattern, Entries], None]


def _title(name: str) -> str:
    """Kafka's spelling in the znodes: ``IDEMPOTENT_WRITE`` -> ``IdempotentWrite``."""
    return "".join(part.capitalize() for part in name.split("_"))


_TYPES = {t.title: t for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY)}
_OPERATIONS = {_title(op.name): op for op in AclOperation if op > AclOperation.ANY}
_PERMISSIONS = {"Allow": AclPermissionType.ALLOW, "Deny": AclPermissionType.DENY}


def acl_key(pattern: ResourcePattern) -> str:
    """The store key of a pattern's entries."""
    return f"{_ROOTS[pattern.pattern_type]}{pattern.resource_type.title}/{sanitize(pattern.name)}"


def parse_acl_key(key: str) -> ResourcePattern | None:
    """The pattern a store key holds the entries of; None for any other key."""
    for pattern_type, root in _ROOTS.items():
        if key.startswith(root):
            kind, sep, name = key[len(root) :].partition("/")
            if sep and name and "/" not in name and kind in _TYPES:
                return ResourcePattern(_TYPES[kind], desanitize(name), pattern_type)
    return None


def encode_entries(entries: Iterable[AccessControlEntry]) -> bytes:
    acls = [
        {
            "principal": e.principal,
            "permissionType": _title(e.permission_type.name),
            "operation": _title(e.operation.name),
            "host": e.host,
        }
        for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission_type))
    ]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_entries(value: bytes) -> Entries:
    """The entries of a resource's value; entries that do not parse (written by hand) are
    left out and logged, never allowed."""
    try:
        doc = json.loads(value)
    except ValueError:
        log.warning("ignoring an ACL value that is not JSON: %r", value[:200])
        return frozenset()
    out = set()
    for acl in doc.get("acls", []) if isinstance(doc, dict) else []:
        try:
            out.add(
                AccessControlEntry(
                    str(acl["principal"]),
                    str(acl["host"]),
                    _OPERATIONS[acl["operation"]],
                    _PERMISSIONS[acl["permissionType"]],
                )
            )
        except (KeyError, TypeError):
            log.warning("ignoring an ACL entry that does not parse: %r", acl)
    return frozenset(out)


class AclStore:
    """Kafka's ACL znodes over a metadata store (see the module doc)."""

    def __init__(self, store: MetadataStore, on_change: OnChange) -> None:
        self.store = store
        self.on_change = on_change
        self._revisions: dict[str, int] = {}
        self._known: dict[str, set[ResourcePattern]] = {root: set() for root in _ROOTS.values()}

    async def load(self) -> None:
        """Read every ACL (at start-up)."""
        for root in _ROOTS.values():
            await self._load(root)

    async def _load(self, root: str) -> None:
        found, revision = await self.store.list(root)
        seen: set[ResourcePattern] = set()
        for key, versioned in found.items():
            pattern = parse_acl_key(key)
            if pattern is not None:
                seen.add(pattern)
                self.on_change(pattern, decode_entries(versioned.value))
        for gone in self._known[root] - seen:
            self.on_change(gone, frozenset())
        self._known[root] = seen
        self._revisions[root] = revision

    async def run(self) -> None:
        """Follow both roots until cancelled or the session ends."""
        async with trio.open_nursery() as nursery:
            for root in _ROOTS.values():
                nursery.start_soon(self._follow, root)

    async def _follow(self, root: str) -> None:
        if root not in self._revisions:
            await self._load(root)
        while True:
            try:
                async for ev in self.store.watch(root, after_revision=self._revisions[root]):
                    self._revisions[root] = max(self._revisions[root], ev.revision)
                    pattern = parse_acl_key(ev.key)
                    if pattern is None:
                        continue
                    entries = frozenset() if ev.value is None else decode_entries(ev.value)
                    (self._known[root].add if entries else self._known[root].discard)(pattern)
                    self.on_change(pattern, entries)
                return  # the session ended: the broker is stopping
            except MetadataCompacted:
                log.warning("the ACL watch of %s fell behind; re-reading every ACL there", root)
                await self._load(root)

    async def update(self, pattern: ResourcePattern, change: Callable[[Entries], Entries]) -> tuple[Entries, Entries]:
        """Replace the pattern's entries with ``change(current)`` atomically (compare-and-set,
        retried); returns (before, after). A pattern left without entries is deleted."""
        key = acl_key(pattern)
        for _ in range(_MAX_ATTEMPTS):
            got = await self.store.get(key)
            before = frozenset() if got is None else decode_entries(got.value)
            after = change(before)
            if after == before:
                return before, after
            try:
                if not after:
                    await self.store.delete(key, expect=_version(got))
                else:
                    await self.store.put(key, encode_entries(after), expect=_version(got))
            except MetadataConflict:
                continue  # another broker changed it in between: read again
            return before, after
        raise MetadataConflict(key)

    async def stored(self) -> dict[ResourcePattern, Entries]:
        """Every pattern's entries as the store has them now (deletes match against these, not
        against a cache a watch may not have brought up to date yet)."""
        out: dict[ResourcePattern, Entries] = {}
        for root in _ROOTS.values():
            found, _ = await self.store.list(root)
            for key, versioned in found.items():
                pattern = parse_acl_key(key)
                if pattern is not None:
                    out[pattern] = decode_entries(versioned.value)
        return out


def _version(got: Any) -> Any:
    return ABSENT if got is None else got.version


__all__ = [
    "LITERAL_ROOT",
    "PREFIXED_ROOT",
    "AclStore",
    "acl_key",
    "decode_entries",
    "encode_entries",
    "parse_acl_key",
]
