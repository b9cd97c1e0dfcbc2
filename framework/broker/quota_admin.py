"""KIP-546's DescribeClientQuotas and AlterClientQuotas over the quota entity configs.

Both read and write the metadata store directly (not the broker's watched cache), so an alter is
visible to the next describe through any broker at once. Kafka's rules:

- an entity is made of components (``user``, ``client-id``), each named once, a name or null for
  ``<default>``; an unknown entity type, a repeated one or an empty entity is INVALID_REQUEST;
- an ``ip`` entity (an IP address, or null for the default) stands alone and has one key,
  ``connection_creation_rate`` (KIP-612, a whole number of connections a second, 0 refusing
  every connection); it is kept at ``/config/ips/<ip>`` (:mod:`odradek.broker.ip_quota_configs`);
- only the quota keys of :data:`~odradek.broker.quota_configs.QUOTA_KEYS` may be set; an unknown
  key is INVALID_REQUEST, and so is a value that is not a finite number above 0, or not a whole
  number for the ``LONG`` keys (the byte rates);
- each entity of an alter succeeds or fails by itself; ``validate_only`` checks and writes nothing;
- describe filters by component: EXACT (that name), DEFAULT, or SPECIFIED (any name but the
  default); ``strict`` keeps only entities with no other component.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import INT_MAX
from ..connection_quotas import normalize_address
from ..entity_configs import EntityConfigs
from ..errors import ErrorCode
from ..interfaces import MetadataStore
from .ip_quota_configs import IP_CONNECTION_RATE, IpConnectionRates, ip_entity_key, ip_rate, parse_ip_key, valid_ip
from .quota_configs import (
    CLIENT_ID,
    CONFIG_ROOT,
    DEFAULT,
    IP,
    QUOTA_KEYS,
    USER,
    ClientQuotaConfigs,
    DefaultName,
    EntityName,
    QuotaEntity,
    parse_entity_key,
    quota_values,
)

#: KIP-546 component match types
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


class QuotaRequestError(Exception):
    """A request Kafka answers with an error code (INVALID_REQUEST) and this message."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float
    remove: bool


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    """One entry of an AlterClientQuotas request: ``entity`` is ((type, name or None), ...)."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[QuotaOp, ...]


@dataclass(slots=True)
class QuotaAlterResult:
    entity: tuple[tuple[str, str | None], ...]
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


@dataclass(slots=True)
class DescribedQuota:
    """An entity with quotas: its components ((type, name or None for the default), ...)."""

    entity: list[tuple[str, str | None]]
    values: dict[str, float] = field(default_factory=dict)


def to_entity(components: Sequence[tuple[str, str | None]]) -> QuotaEntity:
    """The quota entity of KIP-546 components; raises :class:`QuotaRequestError` as Kafka does."""
    if not components:
        raise QuotaRequestError("Invalid empty client quota entity")
    names: dict[str, EntityName] = {}
    for entity_type, name in components:
        if entity_type in names:
            raise QuotaRequestError(f"Duplicate {entity_type} entity in client quota entity")
        if entity_type == IP:
            raise QuotaRequestError(IP_COMBINATION)
        if entity_type not in (USER, CLIENT_ID):
            raise QuotaRequestError(f"Unhandled client quota entity type: {entity_type}")
        names[entity_type] = DEFAULT if name is None else name
    return QuotaEntity(names.get(USER), names.get(CLIENT_ID))


IP_COMBINATION = "Invalid quota entity combination, IP entity should not be used with user/client ID entity."


def ip_alteration(alteration: QuotaAlteration) -> tuple[str | None, dict[str, str], tuple[str, ...]]:
    """An ip entity's alteration checked as Kafka checks it: (the address or None for the
    default, the values to set, the keys to delete)."""
    if len(alteration.entity) != 1:
        raise QuotaRequestError(IP_COMBINATION)
    ((_, ip),) = alteration.entity
    if ip is not None and not valid_ip(ip):
        raise QuotaRequestError(f"{ip} is not a valid IP or resolvable host.")
    sets: dict[str, str] = {}
    deletes: list[str] = []
    for op in alteration.ops:
        if op.key != IP_CONNECTION_RATE:
            raise QuotaRequestError(f"Invalid configuration key {op.key}")
        if op.key in sets or op.key in deletes:
            raise QuotaRequestError(f"Duplicate quota key {op.key} for ip {ip or '<default>'}")
        if op.remove:
            deletes.append(op.key)
            continue
        if not math.isfinite(op.value) or op.value < 0 or op.value != int(op.value) or op.value > INT_MAX:
            raise QuotaRequestError(
                f"Configuration {op.key} must be a whole number from 0 to {INT_MAX}, not {op.value}"
            )
        sets[op.key] = str(int(op.value))
    return ip, sets, tuple(deletes)


def from_entity(entity: QuotaEntity) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for entity_type, name in ((USER, entity.user), (CLIENT_ID, entity.client_id)):
        if name is not None:
            out.append((entity_type, None if isinstance(name, DefaultName) else name))
    return out


def validate_op(op: QuotaOp) -> None:
    """Kafka's quota key and value checks (see module doc)."""
    integral = QUOTA_KEYS.get(op.key)
    if integral is None:
        raise QuotaRequestError(f"Invalid configuration key {op.key}")
    if op.remove:
        return
    if not math.isfinite(op.value) or op.value <= 0:
        raise QuotaRequestError(f"Configuration {op.key} must be a positive number, not {op.value}")
    if integral and op.value != int(op.value):
        raise QuotaRequestError(f"Configuration {op.key} must be a Long value")


def format_value(key: str, value: float) -> str:
    """How a quota is written in its entity config: ``1048576`` for the byte rates, ``200.0``
    for the doubles (as Kafka's ConfigCommand writes them)."""
    return str(int(value)) if QUOTA_KEYS[key] else repr(float(value))


async def alter_client_quotas(
    store: MetadataStore,
    alterations: Sequence[QuotaAlteration],
    *,
    validate_only: bool,
    cache: ClientQuotaConfigs | None = None,
    ip_cache: IpConnectionRates | None = None,
) -> list[QuotaAlterResult]:
    """Apply each valid alteration; ``cache`` (the broker's own) takes each new entity config at
    once, so the broker that answered enforces it before its watch brings the change (the other
    brokers enforce it once theirs does; a watch event older than the write that arrives later
    is corrected by the write's own event)."""
    configs = EntityConfigs(store)
    results = []
    for alteration in alterations:
        result = QuotaAlterResult(alteration.entity)
        results.append(result)
        if any(entity_type == IP for entity_type, _ in alteration.entity):
            try:
                ip, sets, deletes = ip_alteration(alteration)
            except QuotaRequestError as exc:
                result.error, result.message = exc.code, str(exc)
                continue
            if not validate_only:
                altered = await configs.alter_key(ip_entity_key(ip), set=sets, delete=deletes)
                if ip_cache is not None:
                    ip_cache.set_rate(ip, float(altered[IP_CONNECTION_RATE]) if altered else None)
            continue
        try:
            entity = to_entity(alteration.entity)
            seen: set[str] = set()
            for op in alteration.ops:
                validate_op(op)
                if op.key in seen:
                    raise QuotaRequestError(f"Duplicate quota key {op.key} for {entity.describe()}")
                seen.add(op.key)
        except QuotaRequestError as exc:
            result.error, result.message = exc.code, str(exc)
            continue
        if validate_only:
            continue
        altered = await configs.alter_key(
            entity.key(),
            set={op.key: format_value(op.key, op.value) for op in alteration.ops if not op.remove},
            delete=tuple(op.key for op in alteration.ops if op.remove),
        )
        if cache is not None:
            cache.set_entity(entity, {k: float(v) for k, v in altered.items() if k in QUOTA_KEYS})
    return results


def _component_matches(name: EntityName | None, match_type: int, match: str | None) -> bool:
    if name is None:
        return False
    if match_type == MATCH_EXACT:
        return not isinstance(name, DefaultName) and name == match
    if match_type == MATCH_DEFAULT:
        return isinstance(name, DefaultName)
    return not isinstance(name, DefaultName)  # SPECIFIED


async def describe_client_quotas(
    store: MetadataStore, components: Sequence[tuple[str, int, str | None]], *, strict: bool
) -> list[DescribedQuota]:
    """Entities matching every component (entity type, match type, match), with their quotas."""
    filters: dict[str, tuple[int, str | None]] = {}
    for entity_type, match_type, match in components:
        if entity_type in filters:
            raise QuotaRequestError(f"Duplicate {entity_type} filter component")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaRequestError(f"Custom entity type '{entity_type}' not supported")
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise QuotaRequestError(f"Unknown match type {match_type}")
        if match_type == MATCH_EXACT and match is None:
            raise QuotaRequestError(f"Exact match of {entity_type} requires a name")
        filters[entity_type] = (match_type, match)
    if IP in filters and len(filters) > 1:
        raise QuotaRequestError(
            "Invalid entity filter component combination, IP filter component should not be used with "
            "user or clientId filter component."
        )
    found, _ = await store.list(CONFIG_ROOT)
    out = []
    if IP in filters or not filters:  # ip entities have no user or client-id component
        out += _ip_quotas(found, filters.get(IP))
        if filters:
            return out
    for key in sorted(found):
        entity = parse_entity_key(key)
        if entity is None:
            continue
        values = quota_values(found[key].value)
        if not values:
            continue  # a user with SCRAM credentials only
        names: Mapping[str, EntityName | None] = {USER: entity.user, CLIENT_ID: entity.client_id}
        if not all(_component_matches(names[t], m, n) for t, (m, n) in filters.items()):
            continue
        if strict and any(names[t] is not None for t in names if t not in filters):
            continue
        out.append(DescribedQuota(from_entity(entity), values))
    return out


def _ip_quotas(found: Mapping[str, Any], component: tuple[int, str | None] | None) -> list[DescribedQuota]:
    """The ip entities of ``found`` (the store's ``/config/``) that ``component`` matches."""
    out = []
    for key in sorted(found):
        is_ip, ip = parse_ip_key(key)
        rate = ip_rate(found[key].value) if is_ip else None
        if rate is None:
            continue
        if component is not None:
            match_type, match = component
            name: EntityName = DEFAULT if ip is None else ip
            wanted = normalize_address(match) if match is not None else None
            if not _component_matches(name, match_type, wanted):
                continue
        out.append(DescribedQuota([(IP, ip)], {IP_CONNECTION_RATE: rate}))
    return out


__all__ = [
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "MATCH_SPECIFIED",
    "DescribedQuota",
    "QuotaAlterResult",
    "QuotaAlteration",
    "QuotaOp",
    "QuotaRequestError",
    "alter_client_quotas",
    "describe_client_quotas",
    "format_value",
    "from_entity",
    "to_entity",
    "validate_op",
]
