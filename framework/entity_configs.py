"""Kafka's entity configs in the metadata store: ``/config/<entity type>/<sanitized name>``.

Kafka keeps per-user (and per-client-id) properties in ZooKeeper as
``{"version":1,"config":{<name>: <value>}}`` under ``/config/users/<user>``: SCRAM credentials
(``SCRAM-SHA-256`` -> ``salt=...,stored_key=...,server_key=...,iterations=4096``) and client
quotas (``producer_byte_rate`` ...). This module is that layout over any
:class:`~odradek.interfaces.MetadataStore`, so every broker of a cluster sees the same values:
:meth:`EntityConfigs.get` reads one entity, :meth:`EntityConfigs.alter` changes some of its
properties with a compare-and-set (retried when another broker wrote in between) and deletes
the key once it holds nothing. Names are sanitized as Kafka's ``Sanitizer`` does (URL encoding),
so any user name is one key.

Values are read on demand, not cached: a SCRAM login reads its user's key once, which any store
answers in well under a millisecond locally (and in one round trip for ZooKeeper or etcd), and a
credential changed on one broker is in force on every broker for the next login.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Protocol
from urllib.parse import quote, unquote

from .interfaces import ABSENT, MetadataCompacted, MetadataConflict, MetadataStore, WatchEvent

log = logging.getLogger(__name__)

USERS = "users"
CLIENTS = "clients"
_ROOT = "/config/"
_MAX_ATTEMPTS = 20


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL encoding, with ``*`` as ``%2A`` (no ``/`` survives)."""
    return quote(name, safe="").replace("*", "%2A")


def desanitize(name: str) -> str:
    return unquote(name)


def entity_key(entity_type: str, name: str) -> str:
    return f"{_ROOT}{entity_type}/{sanitize(name)}"


def _decode(value: bytes) -> dict[str, str]:
    doc = json.loads(value)
    config = doc.get("config", {}) if isinstance(doc, dict) else {}
    return {str(k): str(v) for k, v in config.items()}


def _encode(config: Mapping[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(config)}, separators=(",", ":"), sort_keys=True).encode()


class EntityConfigs:
    """Read and alter entity configs (users, client ids) in a metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def get(self, entity_type: str, name: str) -> dict[str, str]:
        """The entity's properties; empty when it has none."""
        got = await self.store.get(entity_key(entity_type, name))
        return {} if got is None else _decode(got.value)

    async def list(self, entity_type: str) -> dict[str, dict[str, str]]:
        """Every entity of the type that has properties, by (unsanitized) name."""
        prefix = f"{_ROOT}{entity_type}/"
        found, _ = await self.store.list(prefix)
        out: dict[str, dict[str, str]] = {}
        for key, versioned in found.items():
            rest = key[len(prefix) :]
            if rest and "/" not in rest:
                out[desanitize(rest)] = _decode(versioned.value)
        return out

    async def alter(
        self, entity_type: str, name: str, *, set: Mapping[str, str] | None = None, delete: tuple[str, ...] = ()
    ) -> dict[str, str]:
        """Set and delete properties of one entity atomically; returns its new properties."""
        return await self.alter_key(entity_key(entity_type, name), set=set, delete=delete)

    async def alter_key(
        self, key: str, *, set: Mapping[str, str] | None = None, delete: tuple[str, ...] = ()
    ) -> dict[str, str]:
        """:meth:`alter` of the entity config at ``key`` (a nested quota entity such as
        ``/config/users/<user>/clients/<client-id>``, or a ``<default>`` one)."""
        for _ in range(_MAX_ATTEMPTS):
            got = await self.store.get(key)
            config = {} if got is None else _decode(got.value)
            for prop in delete:
                config.pop(prop, None)
            config.update(set or {})
            try:
                if not config:
                    if got is not None:
                        await self.store.delete(key, expect=got.version)
                elif got is None:
                    await self.store.put(key, _encode(config), expect=ABSENT)
                else:
                    await self.store.put(key, _encode(config), expect=got.version)
            except MetadataConflict:
                continue  # another broker changed it in between: read again
            return config
        raise MetadataConflict(key)  # it kept changing while being altered


class ConfigCache(Protocol):
    """A cache of configs under a prefix that :func:`follow_changes` keeps current."""

    revision: int

    async def load(self) -> None: ...


async def follow_changes(
    store: MetadataStore, prefix: str, cache: ConfigCache, apply: Callable[[WatchEvent], None], what: str
) -> None:
    """Follow the store's changes under ``prefix`` from ``cache.revision``, calling ``apply`` for
    each, until cancelled or the session ends (as Kafka's ``DynamicConfigManager`` follows its
    change notifications); a watch that fell behind the store's history reloads ``cache``."""
    while True:
        try:
            async for ev in store.watch(prefix, after_revision=cache.revision):
                cache.revision = max(cache.revision, ev.revision)
                apply(ev)
            return  # the session ended: the broker is stopping
        except MetadataCompacted:
            log.warning("the %s watch fell behind; re-reading it", what)
            await cache.load()


__all__ = [
    "CLIENTS",
    "USERS",
    "ConfigCache",
    "EntityConfigs",
    "desanitize",
    "entity_key",
    "follow_changes",
    "sanitize",
]
