"""Client quota configs: Kafka's quota entities in the metadata store, and the broker's cache of them.

Kafka keeps client quotas as entity configs (``{"version":1,"config":{"producer_byte_rate":"1024"}}``)
at eight kinds of path, which this module reads and names the same way:

- ``/config/users/<user>/clients/<client-id>`` and ``/config/users/<user>/clients/<default>``;
- ``/config/users/<user>``;
- ``/config/users/<default>/clients/<client-id>``, ``/config/users/<default>/clients/<default>``;
- ``/config/users/<default>``;
- ``/config/clients/<client-id>``, ``/config/clients/<default>``.

Names are sanitized as every entity config's (URL encoding, :func:`odradek.entity_configs.sanitize`);
``<default>`` is the literal path segment, so a user actually named ``<default>`` (sanitized
``%3Cdefault%3E``) is not the default entity. A connection's quota of one kind is the first of
those eight, in that order, that sets it (KIP-55's precedence): :meth:`ClientQuotaConfigs.resolve`.

The request path never reads the store: :class:`ClientQuotaConfigs` lists ``/config/`` once and
then follows a watch from that revision (re-listing when the store compacted the history), as
Kafka's ``DynamicConfigManager`` follows its change notifications. A quota altered through any
broker is in force on every broker once its watch delivers the change (milliseconds).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import NamedTuple

import trio

from ..entity_configs import desanitize, follow_changes, sanitize
from ..interfaces import MetadataStore, WatchEvent

log = logging.getLogger(__name__)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
#: Kafka's client quota keys for user and client-id entities, and whether each is integral
#: (``LONG`` in Kafka's ``QuotaConfigs``) or a double
QUOTA_KEYS: Mapping[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
#: the entity types of the KIP-546 APIs
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
#: Kafka's ``ConfigEntityName.Default``: the path segment of a default entity
DEFAULT_SEGMENT = "<default>"
CONFIG_ROOT = "/config/"


class DefaultName:
    """The ``<default>`` entity name (null in the KIP-546 APIs), distinct from any real name."""

    _instance: DefaultName | None = None

    def __new__(cls) -> DefaultName:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return DEFAULT_SEGMENT

    def __reduce__(self) -> str:
        return "DEFAULT"


DEFAULT = DefaultName()
#: an entity's name: a real user or client id, or the default
EntityName = str | DefaultName


class QuotaEntity(NamedTuple):
    """A quota entity: a user, a client id, or both; None for a part it does not have."""

    user: EntityName | None = None
    client_id: EntityName | None = None

    def key(self) -> str:
        """Its path in the metadata store."""
        if self.user is not None:
            base = f"{CONFIG_ROOT}users/{_segment(self.user)}"
            return base if self.client_id is None else f"{base}/clients/{_segment(self.client_id)}"
        if self.client_id is None:
            raise ValueError("a quota entity names a user, a client id or both")
        return f"{CONFIG_ROOT}clients/{_segment(self.client_id)}"

    def describe(self) -> str:
        """``user 'alice', client-id <default>``: for messages and the CLI."""
        parts = []
        if self.user is not None:
            parts.append(f"user {_shown(self.user)}")
        if self.client_id is not None:
            parts.append(f"client-id {_shown(self.client_id)}")
        return ", ".join(parts)


def _segment(name: EntityName) -> str:
    return DEFAULT_SEGMENT if isinstance(name, DefaultName) else sanitize(name)


def _name(segment: str) -> EntityName:
    return DEFAULT if segment == DEFAULT_SEGMENT else desanitize(segment)


def _shown(name: EntityName) -> str:
    return DEFAULT_SEGMENT if isinstance(name, DefaultName) else repr(name)


def parse_entity_key(key: str) -> QuotaEntity | None:
    """The quota entity a store key is the config of; None for any other key (topics' configs)."""
    if not key.startswith(CONFIG_ROOT):
        return None
    parts = key[len(CONFIG_ROOT) :].split("/")
    if len(parts) == 2 and parts[0] == "users" and parts[1]:
        return QuotaEntity(_name(parts[1]), None)
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and parts[1] and parts[3]:
        return QuotaEntity(_name(parts[1]), _name(parts[3]))
    if len(parts) == 2 and parts[0] == "clients" and parts[1]:
        return QuotaEntity(None, _name(parts[1]))
    return None


def quota_values(value: bytes) -> dict[str, float]:
    """The quota keys of an entity config (a user's also holds its SCRAM credentials); values
    that are not numbers (written by hand) are left out and logged."""
    try:
        doc = json.loads(value)
    except ValueError:
        return {}
    config = doc.get("config", {}) if isinstance(doc, dict) else {}
    out: dict[str, float] = {}
    for k, v in config.items() if isinstance(config, dict) else ():
        if k in QUOTA_KEYS:
            try:
                out[k] = float(v)
            except (TypeError, ValueError):
                log.warning("ignoring quota %s=%r: not a number", k, v)
    return out


class MetricTags(NamedTuple):
    """Whose rate a quota limits (Kafka's quota metric tags ``user``, ``client-id``): clients
    that share a quota entity share its rate; "" for a part the entity does not single out."""

    user: str
    client_id: str


class ResolvedQuota(NamedTuple):
    bound: float
    tags: MetricTags


def precedence(user: str, client_id: str) -> list[tuple[QuotaEntity, MetricTags]]:
    """KIP-55's eight entities for a connection, most specific first, each with the tags of the
    rate it limits (Kafka's ``DefaultQuotaCallback.quotaMetricTags``): a default entity's quota
    applies to each user or client separately, a user's quota to all its clients together."""
    both = MetricTags(user, client_id)
    user_only = MetricTags(user, "")
    client_only = MetricTags("", client_id)
    return [
        (QuotaEntity(user, client_id), both),
        (QuotaEntity(user, DEFAULT), both),
        (QuotaEntity(user, None), user_only),
        (QuotaEntity(DEFAULT, client_id), both),
        (QuotaEntity(DEFAULT, DEFAULT), both),
        (QuotaEntity(DEFAULT, None), user_only),
        (QuotaEntity(None, client_id), client_only),
        (QuotaEntity(None, DEFAULT), client_only),
    ]


#: a quota set by user entities alone, or by user + client-id entities alone (see ``_kind``)
_USERS = frozenset({USER})
_USERS_WITH_CLIENT_IDS = frozenset({f"{USER}/{CLIENT_ID}"})


def _kind(entity: QuotaEntity) -> str:
    """An entity's kind, as Kafka's ``QuotaTypes`` tells them apart: ``client-id``, ``user``,
    or both (``user/client-id``), a default name counting as a name."""
    if entity.user is None:
        return CLIENT_ID
    return USER if entity.client_id is None else f"{USER}/{CLIENT_ID}"


class ClientQuotaConfigs:
    """Every quota entity's quotas, kept current by a watch of ``/config/`` (see module doc).

    ``resolve`` answers from memory (a dict lookup once a connection's quota was resolved;
    resolutions are dropped whenever a quota changes). ``listeners`` are called after each
    change, with the quota key that changed."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.entities: dict[QuotaEntity, dict[str, float]] = {}
        #: how many entities set each quota key: a key nobody sets costs the request path nothing
        self.counts: dict[str, int] = dict.fromkeys(QUOTA_KEYS, 0)
        self.revision = 0
        self.listeners: list[Callable[[str], None]] = []
        self._resolved: dict[tuple[str, str, str], ResolvedQuota | None] = {}
        #: per quota key, which of the three kinds of entity set it (see :meth:`unlimited_tags`)
        self._kinds: dict[str, frozenset[str]] = {}
        self.loaded = trio.Event()

    def enabled(self, quota_key: str) -> bool:
        """Whether any entity sets ``quota_key``."""
        return self.counts[quota_key] > 0

    def resolve(self, quota_key: str, user: str, client_id: str) -> ResolvedQuota | None:
        """The quota of ``quota_key`` for this user and client id, and whose rate it limits;
        None when no entity of the eight sets it (the client is not limited)."""
        memo = (quota_key, user, client_id)
        try:
            return self._resolved[memo]
        except KeyError:
            pass
        found = None
        for entity, tags in precedence(user, client_id):
            values = self.entities.get(entity)
            if values is not None and quota_key in values:
                found = ResolvedQuota(values[quota_key], tags)
                break
        if len(self._resolved) >= 100_000:  # a flood of client ids: start over rather than grow
            self._resolved.clear()
        self._resolved[memo] = found
        return found

    def unlimited_tags(self, quota_key: str, user: str, client_id: str) -> MetricTags:
        """Whose rate a client that no entity limits is measured in, once some entity sets
        ``quota_key`` (Kafka's ``DefaultQuotaCallback.quotaMetricTags``, which Kafka records
        for every client then, so their rates show in the metrics): when only one kind of
        entity sets the key -- client ids, users, or users with client ids (defaults included)
        -- the tags that kind would give the client; with several kinds, its client id (the
        tags of the last two of KIP-55's levels, which Kafka falls back to)."""
        kinds = self._kinds.get(quota_key)
        if kinds is None:
            kinds = self._kinds[quota_key] = frozenset(
                _kind(entity) for entity, values in self.entities.items() if quota_key in values
            )
        if kinds == _USERS:
            return MetricTags(user, "")
        if kinds == _USERS_WITH_CLIENT_IDS:
            return MetricTags(user, client_id)
        return MetricTags("", client_id)

    def set_entity(self, entity: QuotaEntity, values: Mapping[str, float] | None) -> None:
        """Replace an entity's quotas (None or empty: it has none)."""
        old = self.entities.pop(entity, {})
        if values:
            self.entities[entity] = dict(values)
        new = self.entities.get(entity, {})
        changed = {k for k in QUOTA_KEYS if old.get(k) != new.get(k)}
        for k in changed:
            self.counts[k] += (k in new) - (k in old)
        if changed:
            self._resolved.clear()
            self._kinds.clear()
            for key in sorted(changed):
                for listener in self.listeners:
                    listener(key)

    async def load(self) -> None:
        """Read every quota entity (at start-up, and after the watch lost its history)."""
        found, revision = await self.store.list(CONFIG_ROOT)
        seen = set()
        for key, versioned in found.items():
            entity = parse_entity_key(key)
            if entity is not None:
                seen.add(entity)
                self.set_entity(entity, quota_values(versioned.value))
        for entity in [e for e in self.entities if e not in seen]:
            self.set_entity(entity, None)
        self.revision = revision
        self.loaded.set()

    async def run(self) -> None:
        """Follow the store's changes under ``/config/`` until cancelled or the session ends."""
        if not self.loaded.is_set():
            await self.load()
        await follow_changes(self.store, CONFIG_ROOT, self, self._apply, "quota config")

    def _apply(self, ev: WatchEvent) -> None:
        entity = parse_entity_key(ev.key)
        if entity is not None:
            self.set_entity(entity, None if ev.value is None else quota_values(ev.value))


__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT",
    "IP",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "ClientQuotaConfigs",
    "DefaultName",
    "EntityName",
    "MetricTags",
    "QuotaEntity",
    "ResolvedQuota",
    "parse_entity_key",
    "precedence",
    "quota_values",
]
