"""The built-in ``acl`` authorizer: Kafka's ``AclAuthorizer`` / ``StandardAuthorizer`` rules over
ACLs kept in the metadata store (``acl_store``) and cached in memory.

A request is decided from the cache alone: the ACLs of the resource's literal name, of the ``*``
wildcard of its type, and of every PREFIXED pattern that is a prefix of its name. Then, as Kafka:

1. a principal listed in ``super.users`` may do anything;
2. a resource no ACL applies to is allowed only with ``allow.everyone.if.no.acl.found``;
3. a DENY entry for the principal (or ``User:*``), the host (or ``*``) and the operation (or
   ALL) denies, whatever ALLOWs there are;
4. else an ALLOW entry for the principal and host and the operation, ALL, or an operation that
   implies it (READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies
   DESCRIBE_CONFIGS) allows; nothing else does.

Decisions are memoized per (principal, host, operation, resource) and forgotten whenever an ACL
changes, so a Produce costs one dict lookup per topic. Every broker follows the store with a
watch, so an ACL created through one broker is enforced by all of them once their watch
delivers it (milliseconds); the broker that created it applies it at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..interfaces import MetadataStore
from ..protocol import api_name
from .acl import (
    GRANTED_BY,
    WILDCARD,
    WILDCARD_HOST,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    validate_binding,
)
from .acl_store import AclStore, Entries
from .authorizer import (
    ALLOWED,
    AUTHORIZER_LOG,
    DENIED,
    AclCreateResult,
    AclDeleteResult,
    Action,
    AuthorizationResult,
    RequestContext,
)

#: Kafka's wildcard principal: an entry for it applies to every principal
WILDCARD_PRINCIPAL = "User:*"
_MEMO_MAX = 100_000


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:broker``)."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


class AclAuthorizer:
    """The built-in authorizer (implements :class:`~odradek.security.authorizer.Authorizer`)."""

    def __init__(
        self, store: MetadataStore, *, super_users: frozenset[str] = frozenset(), allow_if_no_acls: bool = False
    ) -> None:
        self.super_users = super_users
        self.allow_if_no_acls = allow_if_no_acls
        #: every pattern's entries (patterns without entries are absent)
        self.entries: dict[ResourcePattern, Entries] = {}
        #: per resource type, how many PREFIXED patterns have each name length: a lookup tries
        #: only the prefixes of a resource's name that some pattern could be
        self._prefix_lengths: dict[ResourceType, Counter[int]] = {}
        self._memo: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        self.store = AclStore(store, self.set_entries)

    @classmethod
    def from_config(cls, config: Any, store: MetadataStore) -> AclAuthorizer:
        return cls(
            store,
            super_users=parse_super_users(str(config["super.users"])),
            allow_if_no_acls=bool(config["allow.everyone.if.no.acl.found"]),
        )

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self.store.load()

    async def run(self) -> None:
        await self.store.run()

    async def close(self) -> None:
        return None

    # -- the cache -----------------------------------------------------------------------------
    def set_entries(self, pattern: ResourcePattern, entries: Entries) -> None:
        """Replace a pattern's entries (empty: it has none); called by the store's watch."""
        old = self.entries.get(pattern)
        if old == (entries or None):
            return
        if pattern.pattern_type == PatternType.PREFIXED and (old is None) != (not entries):
            lengths = self._prefix_lengths.setdefault(pattern.resource_type, Counter())
            lengths[len(pattern.name)] += 1 if entries else -1
            if lengths[len(pattern.name)] <= 0:
                del lengths[len(pattern.name)]
        if entries:
            self.entries[pattern] = entries
        else:
            self.entries.pop(pattern, None)
        self._memo.clear()

    def _matching(self, resource_type: ResourceType, name: str) -> list[Entries]:
        acls = self.entries
        found = []
        for literal in (name, WILDCARD):
            got = acls.get(ResourcePattern(resource_type, literal, PatternType.LITERAL))
            if got:
                found.append(got)
        for length in self._prefix_lengths.get(resource_type, ()):
            if length <= len(name):
                got = acls.get(ResourcePattern(resource_type, name[:length], PatternType.PREFIXED))
                if got:
                    found.append(got)
        return found

    # -- decisions -----------------------------------------------------------------------------
    def allowed(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the resource (memoized)."""
        memo = (principal, host, operation, resource_type, name)
        try:
            return self._memo[memo]
        except KeyError:
            pass
        decision = self._decide(principal, host, operation, resource_type, name)
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        self._memo[memo] = decision
        return decision

    def _decide(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        matching = self._matching(resource_type, name)
        if not matching:
            return self.allow_if_no_acls
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD_HOST)
        denied_by = (operation, AclOperation.ALL)
        granted_by = GRANTED_BY.get(operation, frozenset())
        allow = False
        for entries in matching:
            for e in entries:
                if e.principal not in principals or e.host not in hosts:
                    continue
                if e.permission_type == AclPermissionType.DENY:
                    if e.operation in denied_by:
                        return False
                elif e.operation in granted_by:
                    allow = True
        return allow

    def authorize(self, context: RequestContext, actions: Sequence[Action]) -> list[AuthorizationResult]:
        principal = str(context.principal)
        out = []
        for action in actions:
            resource = action.resource
            ok = self.allowed(principal, context.host, action.operation, resource.resource_type, resource.name)
            if ok:
                if action.log_if_allowed:
                    _log_decision(context, action, "Allowed", debug=True)
                out.append(ALLOWED)
            else:
                if action.log_if_denied:
                    _log_decision(context, action, "Denied")
                out.append(DENIED)
        return out

    def authorize_by_resource_type(
        self, context: RequestContext, operation: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult:
        """Kafka's ``authorizeByResourceType``: ALLOWED when some resource of the type has an
        ALLOW for the principal and host that no DENY of theirs covers (a DENY on the same
        literal name, a DENY prefix of it, or the DENY wildcard)."""
        principal = str(context.principal)
        if principal in self.super_users:
            return ALLOWED
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (context.host, WILDCARD_HOST)
        granted_by = GRANTED_BY.get(operation, frozenset())
        allows: list[ResourcePattern] = []
        denies: list[ResourcePattern] = []
        any_acl = False
        for pattern, entries in self.entries.items():
            if pattern.resource_type != resource_type:
                continue
            any_acl = True
            for e in entries:
                if e.principal not in principals or e.host not in hosts:
                    continue
                if e.permission_type == AclPermissionType.DENY and e.operation in (operation, AclOperation.ALL):
                    denies.append(pattern)
                elif e.permission_type == AclPermissionType.ALLOW and e.operation in granted_by:
                    allows.append(pattern)
        if not any_acl:
            return ALLOWED if self.allow_if_no_acls else DENIED
        if any(d.pattern_type == PatternType.LITERAL and d.name == WILDCARD for d in denies):
            return DENIED
        for a in allows:
            covered = any(
                a.name.startswith(d.name) if d.pattern_type == PatternType.PREFIXED else d.name == a.name
                for d in denies
                if a.pattern_type == PatternType.LITERAL or d.pattern_type == PatternType.PREFIXED
            )
            if not covered:
                return ALLOWED
        return DENIED

    # -- administration ------------------------------------------------------------------------
    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The cached ACLs ``acl_filter`` matches."""
        return [
            AclBinding(pattern, entry)
            for pattern, entries in self.entries.items()
            if acl_filter.pattern.matches(pattern)
            for entry in entries
            if acl_filter.entry.matches(entry)
        ]

    async def create_acls(self, context: RequestContext, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        """Validate each binding, then add the valid ones to their patterns (one compare-and-set
        per pattern); an ACL that exists already is created again without error, as in Kafka."""
        results: list[AclCreateResult | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, binding in enumerate(bindings):
            try:
                validate_binding(binding)
            except ValueError as exc:
                results[i] = AclCreateResult(exc)
                continue
            by_pattern.setdefault(binding.pattern, []).append(i)
        for pattern, indexes in by_pattern.items():
            new = frozenset(bindings[i].entry for i in indexes)

            def add(current: Entries, new: Entries = new) -> Entries:
                return current | new

            try:
                _, after = await self.store.update(pattern, add)
            except Exception as exc:
                for i in indexes:
                    results[i] = AclCreateResult(exc)
                continue
            self.set_entries(pattern, after)
            for i in indexes:
                results[i] = AclCreateResult()
        return [r if r is not None else AclCreateResult() for r in results]

    async def delete_acls(self, context: RequestContext, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        """Delete what each filter matches in the store (not in the cache, which may lag):
        one compare-and-set per pattern touched."""
        stored = await self.store.stored()
        results = []
        for acl_filter in filters:
            deleted: list[AclBinding] = []
            try:
                for pattern in [p for p in stored if acl_filter.pattern.matches(p)]:

                    def keep(current: Entries, entry_filter: AccessControlEntryFilter = acl_filter.entry) -> Entries:
                        return frozenset(e for e in current if not entry_filter.matches(e))

                    before, after = await self.store.update(pattern, keep)
                    stored[pattern] = after
                    self.set_entries(pattern, after)
                    deleted.extend(AclBinding(pattern, e) for e in sorted(before - after, key=_entry_order))
            except Exception as exc:
                results.append(AclDeleteResult(tuple(deleted), exc))
                continue
            results.append(AclDeleteResult(tuple(deleted)))
        return results


def _entry_order(e: AccessControlEntry) -> tuple[str, str, int, int]:
    return (e.principal, e.host, int(e.operation), int(e.permission_type))


def _log_decision(context: RequestContext, action: Action, outcome: str, *, debug: bool = False) -> None:
    """Kafka's ``kafka.authorizer.logger`` line for one decision."""
    resource = action.resource
    (AUTHORIZER_LOG.debug if debug else AUTHORIZER_LOG.info)(
        "Principal = %s is %s operation = %s from host = %s on resource = %s:%s:%s for request = %s "
        "with resourceRefCount = 1 (client id %r, listener %s)",
        context.principal,
        outcome,
        action.operation.name,
        context.host,
        resource.resource_type.title,
        resource.pattern_type.name,
        resource.name,
        api_name(context.api_key) if context.api_key >= 0 else "-",
        context.client_id,
        context.listener_name,
    )


__all__ = ["WILDCARD_PRINCIPAL", "AclAuthorizer", "parse_super_users"]
