"""Dynamic broker configs: the broker keys that can change without a restart (Kafka's
``DynamicBrokerConfig``), kept in the metadata store where Kafka keeps them.

odradek's broker configs are static (the config file, the environment, ``--set``), except the
keys in :data:`DYNAMIC_KEYS`, which IncrementalAlterConfigs (and the legacy AlterConfigs) may
set for one broker or for all:

- ``/config/brokers/<broker id>``: that broker's overrides (Kafka's DYNAMIC_BROKER_CONFIG);
- ``/config/brokers/<default>``: the cluster-wide defaults (DYNAMIC_DEFAULT_BROKER_CONFIG),

each ``{"version":1,"config":{...}}`` as Kafka writes them in ZooKeeper. A key's value is the
broker's override, else the cluster default, else the static config: :meth:`DynamicBrokerConfig.value`.
Every broker lists ``/config/brokers/`` at start and then follows a watch, so a change through
any broker is in force on every broker it concerns within milliseconds; ``listeners`` are called
after each change (the replication quotas take their new rates from them).

The dynamic keys today are the replication throttle rates (KIP-73), the broker's connection
creation rate (KIP-612), its ``max.connections``, ``max.connections.per.ip`` and
``max.connections.per.ip.overrides`` (Kafka's ``DynamicConnectionQuota``), tiered storage's copy
and fetch rates (KIP-956), ``unclean.leader.election.enable`` (read by the controller at each
election, under a topic's own override, as Kafka's ``DynamicLogConfig`` has it; turning it on
makes the controller decide every partition again), and per listener (KIP-402)
``listener.name.<listener>.max.connections`` and ``.max.connection.creation.rate``
(:data:`LISTENER_DYNAMIC_KEYS`; a listener's value, wherever set, overrides the broker-wide one:
:meth:`DynamicBrokerConfig.listener_value`). A key joins the list only when every place that
reads it reads it live.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import trio

from ..config import Config, ConfigError, listener_key, parse_connection_overrides, parse_value, render
from ..connection_quotas import resolve_overrides
from ..entity_configs import EntityConfigs, follow_changes
from ..errors import InvalidConfig, InvalidRequest, KafkaError
from ..interfaces import MetadataConflict, MetadataStore, WatchEvent
from ..sessions import MetadataStoreError
from .api import AlterableConfig, AlterConfigOp

log = logging.getLogger(__name__)

#: the broker keys that may be altered at run time
DYNAMIC_KEYS: tuple[str, ...] = (
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    "max.connection.creation.rate",
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "remote.log.manager.copy.max.bytes.per.second",
    "remote.log.manager.fetch.max.bytes.per.second",
    "unclean.leader.election.enable",
)
#: the keys a listener may override at run time (Kafka's ``ListenerReconfigurableConfigs``), as
#: ``listener.name.<listener>.<key>``
LISTENER_DYNAMIC_KEYS: tuple[str, ...] = ("max.connections", "max.connection.creation.rate")
_LISTENER_KEY = re.compile(r"listener\.name\.([a-z0-9_-]+)\.(.+)")
BROKERS_ROOT = "/config/brokers/"
DEFAULT_ENTITY = "<default>"

#: where a key's value came from (the DescribeConfigs source)
STATIC = "static"
PER_BROKER = "broker"
CLUSTER_DEFAULT = "default"


def dynamic_base(name: str) -> str | None:
    """The key ``name`` sets at run time: itself for one of :data:`DYNAMIC_KEYS`, the overridden
    key for a ``listener.name.<listener>.<key>`` of :data:`LISTENER_DYNAMIC_KEYS`; None when
    ``name`` is not dynamic."""
    if name in DYNAMIC_KEYS:
        return name
    match = _LISTENER_KEY.fullmatch(name)
    if match is not None and match.group(2) in LISTENER_DYNAMIC_KEYS:
        return match.group(2)
    return None


def parse_dynamic(config: Config, name: str, value: object) -> Any:
    """``value`` of the dynamic key ``name`` typed, with the checks the static config makes of it
    beyond its type (the ``host:count`` list of ``max.connections.per.ip.overrides``)."""
    parsed = parse_value(config.key(name), value)
    if name == "max.connections.per.ip.overrides":
        parse_connection_overrides(str(parsed))
    return parsed


def broker_config_key(entity: str) -> str:
    """The store key of a broker's dynamic configs (``entity`` a broker id or ``<default>``)."""
    return f"{BROKERS_ROOT}{entity}"


class DynamicBrokerConfig:
    """This broker's dynamic configs and the cluster defaults, kept current by a watch of
    ``/config/brokers/`` (see module doc)."""

    def __init__(self, config: Config, store: MetadataStore) -> None:
        self.config = config
        self.store = store
        self.entity = str(config.broker_id)
        self.per_broker: dict[str, Any] = {}
        self.defaults: dict[str, Any] = {}
        self.listeners: list[Callable[[], None]] = []
        self.revision = 0
        self.loaded = trio.Event()

    # -- reading ---------------------------------------------------------------------------------
    def value(self, name: str) -> Any:
        """The value in force: this broker's override, the cluster default, or the static config."""
        if name in self.per_broker:
            return self.per_broker[name]
        if name in self.defaults:
            return self.defaults[name]
        return self.config[name]

    def listener_value(self, listener: str, name: str) -> Any:
        """``listener``'s own value of ``name`` in force (``listener.name.<listener>.<name>``:
        this broker's override, the cluster default, or the static config); None when none sets
        it, so that the broker-wide value holds (Kafka's prefix override)."""
        key = listener_key(listener, name)
        if key in self.per_broker:
            return self.per_broker[key]
        if key in self.defaults:
            return self.defaults[key]
        return self.config[key] if self.config.is_set(key) else None

    def listener_keys(self) -> list[str]:
        """The ``listener.name.*`` keys some dynamic layer sets (DescribeConfigs lists them)."""
        return sorted(k for k in {*self.per_broker, *self.defaults} if k not in DYNAMIC_KEYS)

    def source(self, name: str) -> str:
        """Where :meth:`value` comes from: :data:`PER_BROKER`, :data:`CLUSTER_DEFAULT` or :data:`STATIC`."""
        if name in self.per_broker:
            return PER_BROKER
        if name in self.defaults:
            return CLUSTER_DEFAULT
        return STATIC

    def synonyms(self, name: str) -> list[tuple[str, Any]]:
        """The dynamic layers that set ``name``, most specific first: (source, value)."""
        out = []
        if name in self.per_broker:
            out.append((PER_BROKER, self.per_broker[name]))
        if name in self.defaults:
            out.append((CLUSTER_DEFAULT, self.defaults[name]))
        return out

    def _parse(self, raw: bytes | None, where: str) -> dict[str, Any]:
        """The dynamic keys of a stored entity; a value that does not parse is left out (logged):
        the static value stays in force rather than the broker failing on another's write."""
        if raw is None:
            return {}
        try:
            doc = json.loads(raw)
            stored = doc.get("config", {}) if isinstance(doc, dict) else {}
        except ValueError as exc:
            log.warning("dynamic broker config %s is not JSON (%s); ignored", where, exc)
            return {}
        out: dict[str, Any] = {}
        for name, value in stored.items():
            base = dynamic_base(name)
            if base is None:
                continue  # a key Kafka may set dynamically that odradek reads only at start
            try:
                out[name] = parse_dynamic(self.config, base, value)
            except (ConfigError, ValueError, TypeError) as exc:
                log.warning("dynamic broker config %s: %s=%r is not valid (%s); ignored", where, name, value, exc)
        return out

    def _set(self, entity: str, raw: bytes | None) -> None:
        if entity == DEFAULT_ENTITY:
            new = self._parse(raw, "for the cluster default")
            changed = new != self.defaults
            self.defaults = new
        elif entity == self.entity:
            new = self._parse(raw, f"of broker {entity}")
            changed = new != self.per_broker
            self.per_broker = new
        else:
            return
        if changed:
            for listener in self.listeners:
                listener()

    async def load(self) -> None:
        """Read this broker's and the default entity (at start, and after the watch lost its place)."""
        found, revision = await self.store.list(BROKERS_ROOT)
        for entity in (DEFAULT_ENTITY, self.entity):
            versioned = found.get(broker_config_key(entity))
            self._set(entity, None if versioned is None else versioned.value)
        self.revision = revision
        self.loaded.set()

    async def run(self) -> None:
        """Follow ``/config/brokers/`` until cancelled or the session ends."""
        if not self.loaded.is_set():
            await self.load()
        await follow_changes(self.store, BROKERS_ROOT, self, self._apply, "dynamic broker config")

    def _apply(self, ev: WatchEvent) -> None:
        self._set(ev.key[len(BROKERS_ROOT) :], ev.value)

    # -- altering --------------------------------------------------------------------------------
    def _checked(self, ops: Sequence[AlterableConfig]) -> tuple[dict[str, str], tuple[str, ...]]:
        """The SETs (rendered) and DELETEs of ``ops``, each key dynamic and each value valid."""
        known = set(self.config)  # (Config's ``in`` raises for an unknown key)
        static = sorted({op.name for op in ops if dynamic_base(op.name) is None and op.name in known})
        if static:
            listener_keys = ", ".join(f"listener.name.<listener>.{k}" for k in LISTENER_DYNAMIC_KEYS)
            raise InvalidConfig(
                f"Cannot update these configs dynamically: {', '.join(static)} (odradek's dynamic broker "
                f"configs are {', '.join(DYNAMIC_KEYS)}, {listener_keys}; set the others in the config file "
                "and restart)"
            )
        unknown = sorted({op.name for op in ops if dynamic_base(op.name) is None})
        if unknown:
            raise InvalidConfig(f"Unknown broker configs: {', '.join(unknown)}")
        sets: dict[str, str] = {}
        deletes: list[str] = []
        for op in ops:
            if op.op == AlterConfigOp.SET:
                if op.value is None:
                    raise InvalidConfig(f"null value not supported for broker config {op.name!r}")
                base = dynamic_base(op.name)
                assert base is not None
                try:
                    value = parse_dynamic(self.config, base, op.value)
                except (ConfigError, ValueError, TypeError) as exc:
                    raise InvalidConfig(str(exc)) from None
                sets[op.name] = render(value)
            elif op.op == AlterConfigOp.DELETE:
                deletes.append(op.name)
            else:
                raise InvalidRequest(f"{op.op.name} is only for list configs, and {op.name} is not one")
        return sets, tuple(deletes)

    async def _check_connection_limits(self, entity: str, sets: dict[str, str], deletes: Sequence[str]) -> None:
        """Kafka's checks of the per-address limits as this broker would have them after the
        change: a default of 0 needs overrides, and every host the overrides name resolves (in a
        worker thread: a lookup may take seconds)."""
        names = ("max.connections.per.ip", "max.connections.per.ip.overrides")
        if not any(n in sets or n in deletes for n in names):
            return
        layers = [dict(self.defaults), dict(self.per_broker)]
        changed = layers[0] if entity == DEFAULT_ENTITY else layers[1]
        for name in deletes:
            changed.pop(name, None)
        changed.update({k: parse_dynamic(self.config, k, v) for k, v in sets.items()})

        def in_force(name: str) -> Any:
            return next((layer[name] for layer in reversed(layers) if name in layer), self.config[name])

        overrides = parse_connection_overrides(str(in_force("max.connections.per.ip.overrides")))
        if int(in_force("max.connections.per.ip")) == 0 and not overrides:
            raise InvalidConfig(
                "max.connections.per.ip may be 0 only with max.connections.per.ip.overrides set "
                "(it would refuse everyone)"
            )
        try:
            await trio.to_thread.run_sync(resolve_overrides, overrides)
        except ConfigError as exc:
            raise InvalidConfig(str(exc)) from None

    async def _stored(self, key: str) -> dict[str, Any]:
        got = await self.store.get(key)
        if got is None:
            return {}
        try:
            doc = json.loads(got.value)
        except ValueError:
            return {}
        config = doc.get("config", {}) if isinstance(doc, dict) else {}
        return dict(config) if isinstance(config, dict) else {}

    async def alter(
        self, entity: str, ops: Sequence[AlterableConfig], validate_only: bool, *, replace: bool = False
    ) -> None:
        """Apply ``ops`` to a broker's (``entity`` its id) or the cluster default's (``<default>``)
        dynamic configs; with ``replace`` (the legacy AlterConfigs), the SETs become the entity's
        whole set. Takes effect here at once, everywhere else through the watch."""
        sets, deletes = self._checked(ops)
        key = broker_config_key(entity)
        if replace:  # the SETs are the whole set: every other stored key goes
            deletes = tuple(k for k in await self._stored(key) if k not in sets)
        await self._check_connection_limits(entity, sets, deletes)
        if validate_only:
            return
        try:
            stored = await EntityConfigs(self.store).alter_key(key, set=sets, delete=deletes)
        except (MetadataConflict, MetadataStoreError) as exc:
            raise KafkaError(f"the dynamic broker config could not be written: {exc}") from exc
        log.info(
            "dynamic broker config %s now %s",
            "cluster default" if entity == DEFAULT_ENTITY else f"of broker {entity}",
            ", ".join(f"{k}={v}" for k, v in sorted(stored.items())) or "empty",
        )
        self._set(entity, json.dumps({"version": 1, "config": stored}).encode() if stored else None)


__all__ = [
    "BROKERS_ROOT",
    "CLUSTER_DEFAULT",
    "DEFAULT_ENTITY",
    "DYNAMIC_KEYS",
    "LISTENER_DYNAMIC_KEYS",
    "PER_BROKER",
    "STATIC",
    "DynamicBrokerConfig",
    "broker_config_key",
    "dynamic_base",
]
