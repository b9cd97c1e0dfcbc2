"""Kafka's ACL vocabulary: resource patterns, access control entries, bindings and their filters.

An ACL (Kafka's ``AclBinding``) is a :class:`ResourcePattern` -- a resource type, a name, and
whether the name is LITERAL (``*`` meaning every resource of the type) or a PREFIXED one -- with an
:class:`AccessControlEntry`: a principal (``User:alice``, ``User:*``), a host (``*`` or an IP
address), an operation and ALLOW or DENY. The codes are Kafka's wire codes (``ResourceType``,
``PatternType``, ``AclOperation``, ``AclPermissionType``), which the ACL APIs carry as int8.

Filters (:class:`AclBindingFilter`) select bindings for DescribeAcls and DeleteAcls: ANY in a field,
or a null name/principal/host, matches everything, and pattern type MATCH selects the patterns
that would apply to a resource of that name (literal, wildcard and prefixed ones). Everything
here is pure data and Kafka's matching rules; the authorizer (``acl_authorizer``) decides
requests with it, and ``validate_binding`` / ``validate_filter`` give the INVALID_REQUEST
messages the ACL APIs answer for bindings and filters that cannot be stored or matched.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..principal import KafkaPrincipal

#: the name of a LITERAL pattern that matches every resource of its type, and the host and
#: principal name that match every host and every principal of a type (``User:*``)
WILDCARD = "*"
WILDCARD_HOST = "*"
#: the only name of the CLUSTER resource
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.IntEnum):
    """Kafka's ``ResourceType`` codes; the ``title`` is Kafka's name (``Topic``, ``TransactionalId``)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def title(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))


class PatternType(enum.IntEnum):
    """Kafka's ``PatternType``: LITERAL and PREFIXED are stored; ANY and MATCH only filter."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """Kafka's ``AclOperation`` codes (also the bits of KIP-430's ``authorized_operations``)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    """Kafka's ``AclPermissionType``: ALLOW and DENY are stored; ANY only filters."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: the operations an ALLOW of the key's operation also allows: READ, WRITE, DELETE and ALTER
#: imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS (Kafka's ``AclAuthorizer``); read the
#: other way round: the ALLOW entries that grant an operation
GRANTED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    op: frozenset({op, AclOperation.ALL}) for op in AclOperation if op > AclOperation.ALL
}
GRANTED_BY[AclOperation.DESCRIBE] = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.ALL,
    }
)
GRANTED_BY[AclOperation.DESCRIBE_CONFIGS] = frozenset(
    {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.ALL}
)

#: the operations each resource type has (Kafka's ``AclEntry.supportedOperations``): what
#: KIP-430's ``authorized_operations`` may list
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


class AclError(ValueError):
    """A binding or filter the ACL APIs refuse (INVALID_REQUEST with this message)."""


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """Kafka's ``ResourcePattern``: which resources an ACL applies to."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " + (
            f"patternType={self.pattern_type.name})"
        )

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern applies to the resource ``resource_type``/``name``."""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Kafka's ``AccessControlEntry``: who may (or may not) do what from where."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    """Kafka's ``AclBinding``: one ACL."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"{self.pattern} {self.entry}"


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Kafka's ``ResourcePatternFilter``: ANY type, ANY/MATCH pattern type, None name: any."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the patterns that would apply to a resource named ``name``
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return pattern.name in (self.name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Kafka's ``AccessControlEntryFilter``: None principal/host and ANY operation/permission
    match every entry; the others must be equal (``User:*`` in a filter selects the entries
    that name ``User:*``, not every user's)."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and self.operation in (AclOperation.ANY, entry.operation)
            and self.permission_type in (AclPermissionType.ANY, entry.permission_type)
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's ``AclBindingFilter``: which ACLs a describe or delete is about."""

    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


#: the filter that matches every ACL
ANY_ACL = AclBindingFilter()


def _code(enum_type: type[enum.IntEnum], value: int, what: str) -> enum.IntEnum:
    try:
        return enum_type(value)
    except ValueError:
        raise AclError(f"unknown {what} {value}") from None


def resource_type(value: int) -> ResourceType:
    """The :class:`ResourceType` of a wire code (:class:`AclError` for a code Kafka has not)."""
    return ResourceType(_code(ResourceType, value, "resource type"))


def pattern_type(value: int) -> PatternType:
    return PatternType(_code(PatternType, value, "pattern type"))


def operation(value: int) -> AclOperation:
    return AclOperation(_code(AclOperation, value, "operation"))


def permission_type(value: int) -> AclPermissionType:
    return AclPermissionType(_code(AclPermissionType, value, "permission type"))


def validate_binding(binding: AclBinding) -> None:
    """Raise :class:`AclError` for an ACL that cannot be created (Kafka's ``AclControlManager.
    validateNewAcl`` and ``AclApis``): only LITERAL and PREFIXED patterns of a concrete resource
    type with a non-empty name (CLUSTER's is ``kafka-cluster``), a concrete operation, ALLOW or
    DENY, a ``<type>:<name>`` principal and a host."""
    p, e = binding.pattern, binding.entry
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise AclError(f"Invalid resource type {p.resource_type.name}: an ACL is on one resource type")
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"Invalid pattern type {p.pattern_type.name}: an ACL is LITERAL or PREFIXED")
    if not p.name:
        raise AclError("Resource name should not be empty")
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise AclError(f"Invalid operation {e.operation.name}")
    if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise AclError(f"Invalid permission type {e.permission_type.name}")
    try:
        KafkaPrincipal.parse(e.principal)
    except ValueError as exc:
        raise AclError(f"Invalid principal: {exc}") from None
    if not e.host:
        raise AclError("Invalid host: empty (use * for every host)")


def validate_filter(acl_filter: AclBindingFilter) -> None:
    """Raise :class:`AclError` for a filter with an UNKNOWN element (Kafka's ``AclBindingFilter.
    findIndefiniteField`` refuses them in DescribeAcls and DeleteAcls)."""
    p, e = acl_filter.pattern, acl_filter.entry
    unknown = [
        what
        for what, bad in (
            ("resource type", p.resource_type == ResourceType.UNKNOWN),
            ("pattern type", p.pattern_type == PatternType.UNKNOWN),
            ("operation", e.operation == AclOperation.UNKNOWN),
            ("permission type", e.permission_type == AclPermissionType.UNKNOWN),
        )
        if bad
    ]
    if unknown:
        raise AclError(f"The filter has an UNKNOWN {', '.join(unknown)}")


__all__ = [
    "ANY_ACL",
    "CLUSTER_NAME",
    "GRANTED_BY",
    "SUPPORTED_OPERATIONS",
    "WILDCARD",
    "WILDCARD_HOST",
    "AccessControlEntry",
    "AccessControlEntryFilter",
    "AclBinding",
    "AclBindingFilter",
    "AclError",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "ResourceType",
    "operation",
    "pattern_type",
    "permission_type",
    "resource_type",
    "validate_binding",
    "validate_filter",
]
