"""DescribeConfigs and IncrementalAlterConfigs for topics (live) and the broker (read-only).

Topic configs are overrides stored at ``/config/topics/<topic>`` over the broker's defaults.
Altering writes the new overrides with a compare-and-set on that key and refreshes the metadata
cache, which applies them to every partition log of the topic at once
(``PartitionLog.update_config``): a new ``retention.ms`` or ``cleanup.policy`` is in force for
the next retention or cleaner pass, a new ``max.message.bytes`` for the next produce.

Broker configs come from the config file, environment and command line when the process starts;
they are described (with their source) but cannot be altered at run time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..config import (
    KAFKA_INT_KEYS,
    KAFKA_SHORT_KEYS,
    TIERING_OFF_WITHOUT_DELETE,
    TOPIC_ONLY_KEYS,
    Config,
    TopicConfig,
    broker_synonyms,
    render,
)
from ..errors import ErrorCode, InvalidConfig, KafkaError, UnknownTopicOrPartition
from ..interfaces import ABSENT, Check, MetadataConflict, MetadataStore, Put
from .api import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigType,
    DescribeConfigsResult,
)
from .dynamic_config import CLUSTER_DEFAULT, DEFAULT_ENTITY, PER_BROKER, DynamicBrokerConfig, dynamic_base
from .metadata_cache import MetadataCache, config_key, encode

#: Kafka's topic configs of LIST type, the ones APPEND and SUBTRACT apply to
_LIST_CONFIGS = frozenset(
    {"cleanup.policy", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
)

#: Kafka's answer (INVALID_REQUEST, ConfigAdminManager.preprocess) for every copy of a resource named
#: twice in one IncrementalAlterConfigs or AlterConfigs request: none of them is applied, so the
#: answers cannot contradict what was done (and a legacy replace is not applied twice)
DUPLICATE_RESOURCE = "Each resource must appear at most once."


def repeated_resources(keys: Iterable[tuple[int, str]]) -> set[tuple[int, str]]:
    """The (resource type, resource name) pairs that appear more than once."""
    seen: set[tuple[int, str]] = set()
    repeated: set[tuple[int, str]] = set()
    for key in keys:
        (repeated if key in seen else seen).add(key)
    return repeated


def config_type(name: str, value: Any, broker_name: str | None = None) -> ConfigType:
    """Kafka's type of a config for DescribeConfigs v3+. An integer's INT, SHORT or LONG comes
    from the lists that also bound its values (:data:`odradek.config.KAFKA_INT_KEYS`); a topic
    key has its broker key's type (``segment.bytes`` that of ``log.segment.bytes``), given as
    ``broker_name``."""
    if isinstance(value, bool):
        return ConfigType.BOOLEAN
    if isinstance(value, int):
        kafka_name = broker_name or name
        if kafka_name in KAFKA_SHORT_KEYS:
            return ConfigType.SHORT
        return ConfigType.INT if kafka_name in KAFKA_INT_KEYS else ConfigType.LONG
    if isinstance(value, float):
        return ConfigType.DOUBLE
    if isinstance(value, list | tuple):
        return ConfigType.LIST
    return ConfigType.STRING


#: where a dynamic broker value comes from, as DescribeConfigs names it
_DYNAMIC_SOURCES = {
    PER_BROKER: ConfigSource.DYNAMIC_BROKER_CONFIG,
    CLUSTER_DEFAULT: ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
}


class ConfigManager:
    """Describes and alters configs; topic changes go through the store and the cache."""

    def __init__(
        self,
        config: Config,
        store: MetadataStore | None = None,
        cache: MetadataCache | None = None,
        dynamic: DynamicBrokerConfig | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.cache = cache
        #: the broker keys alterable at run time (None: every broker key is static)
        self.dynamic = dynamic
        # topic-level name -> the broker key that provides its default
        self._broker_key_for = {k.topic_key: k for k in (config.key(n) for n in config) if k.topic_key}
        # the documentation of a topic key without a broker default is its own
        self._topic_only_doc = {k.name: k.doc for k in TOPIC_ONLY_KEYS}

    # -- describe --------------------------------------------------------------------------------
    def topic_entries(
        self,
        config: TopicConfig,
        overrides: Mapping[str, Any],
        *,
        include_synonyms: bool,
        include_documentation: bool,
        names: Sequence[str] | None = None,
    ) -> list[ConfigEntry]:
        out = []
        for name in sorted(config):
            if names is not None and name not in names:
                continue
            value = config[name]
            broker_key = self._broker_key_for.get(name)
            # a broker key set dynamically (unclean.leader.election.enable) is the default under
            # a topic's override, as Kafka's DynamicLogConfig: its layers, most specific first
            layers = self._dynamic_layers(broker_key.name) if broker_key is not None else []
            if name in overrides:
                source = ConfigSource.DYNAMIC_TOPIC_CONFIG
            elif layers:
                value, source = layers[0][1], layers[0][2]
            elif broker_key is not None and self.config.source(broker_key.name) != "default":
                source = ConfigSource.STATIC_BROKER_CONFIG
            else:
                source = ConfigSource.DEFAULT_CONFIG
            synonyms: list[tuple[str, str | None, ConfigSource]] = []
            if include_synonyms:
                if name in overrides:
                    synonyms.append((name, render(value), ConfigSource.DYNAMIC_TOPIC_CONFIG))
                synonyms += [(key, render(v), where) for key, v, where in layers]
                if broker_key is not None:
                    synonyms += self._broker_synonyms(broker_key.name)
            doc = None
            if include_documentation:
                doc = broker_key.doc if broker_key is not None else self._topic_only_doc.get(name)
            out.append(
                ConfigEntry(
                    name,
                    render(value),
                    read_only=False,
                    is_default=source is ConfigSource.DEFAULT_CONFIG,
                    source=source,
                    synonyms=tuple(synonyms),
                    config_type=config_type(name, value, broker_key.name if broker_key is not None else None),
                    documentation=doc,
                )
            )
        return out

    def _dynamic_layers(self, name: str) -> list[tuple[str, Any, ConfigSource]]:
        """The dynamic layers that set the broker key ``name`` (this broker's, then the cluster
        default): (key, value, source); empty for a key that is not dynamic."""
        if self.dynamic is None or dynamic_base(name) != name:
            return []
        return [(name, v, _DYNAMIC_SOURCES[where]) for where, v in self.dynamic.synonyms(name)]

    def _broker_source(self, key: str) -> ConfigSource:
        return (
            ConfigSource.DEFAULT_CONFIG if self.config.source(key) == "default" else ConfigSource.STATIC_BROKER_CONFIG
        )

    def _broker_synonyms(self, name: str) -> list[tuple[str, str | None, ConfigSource]]:
        """Kafka's synonyms of a broker key: each of its synonyms that is set
        (STATIC_BROKER_CONFIG), in precedence order (``log.retention.ms``,
        ``log.retention.minutes``, ``log.retention.hours``), then the default (DEFAULT_CONFIG).
        As in Kafka, the default is listed under the coarsest synonym, the one key of a unit
        chain that has a default there (``log.retention.hours=168``): a client that keys
        synonyms by name (confluent-kafka) must not see a set ``log.retention.ms`` replaced by
        a DEFAULT entry of the same name."""
        synonyms = broker_synonyms(name)
        out: list[tuple[str, str | None, ConfigSource]] = [
            (syn, render(self.config[syn]), ConfigSource.STATIC_BROKER_CONFIG)
            for syn in synonyms
            if self.config.is_set(syn)
        ]
        coarsest = synonyms[-1]
        out.append((coarsest, render(self.config.key(coarsest).default), ConfigSource.DEFAULT_CONFIG))
        return out

    def _dynamic_entry(
        self, name: str, include_synonyms: bool, include_documentation: bool, *, default_only: bool = False
    ) -> ConfigEntry | None:
        """A dynamic key as it is in force (its dynamic layers first among its synonyms), or, for
        the cluster-default resource (``default_only``), as the default entity sets it."""
        assert self.dynamic is not None
        layers = self.dynamic.synonyms(name)
        if default_only:
            layers = [(where, v) for where, v in layers if where == CLUSTER_DEFAULT]
            if not layers:
                return None
        sources = _DYNAMIC_SOURCES
        value = layers[0][1] if layers else self.config[name]
        source = sources[layers[0][0]] if layers else self._broker_source(name)
        synonyms: list[tuple[str, str | None, ConfigSource]] = []
        base = dynamic_base(name) or name
        if include_synonyms:
            synonyms = [(name, render(v), sources[where]) for where, v in layers]
            if default_only:
                pass
            elif base == name:
                synonyms += self._broker_synonyms(name)
            elif self.config.is_set(name):  # a listener key also set in the config file
                synonyms.append((name, render(self.config[name]), ConfigSource.STATIC_BROKER_CONFIG))
        return ConfigEntry(
            name,
            render(value),
            read_only=False,
            is_default=source is ConfigSource.DEFAULT_CONFIG,
            source=source,
            synonyms=tuple(synonyms),
            config_type=config_type(base, value),
            documentation=self.config.key(base).doc if include_documentation else None,
        )

    def broker_entries(
        self,
        *,
        include_synonyms: bool,
        include_documentation: bool,
        names: Sequence[str] | None = None,
        default_only: bool = False,
    ) -> list[ConfigEntry]:
        """This broker's configs; ``default_only``: the cluster-default resource (the empty
        broker name), which holds only the dynamic defaults set (Kafka describes it so)."""
        out = []
        listed = set(self.config)
        if self.dynamic is not None:  # a listener key set only dynamically is described too
            listed.update(self.dynamic.listener_keys())
        for name in sorted(listed):
            if names is not None and name not in names:
                continue
            if self.dynamic is not None and dynamic_base(name) is not None:
                entry = self._dynamic_entry(name, include_synonyms, include_documentation, default_only=default_only)
                if entry is not None:
                    out.append(entry)
                continue
            if default_only:
                continue
            value = self.config[name]
            source = self._broker_source(name)
            # a password or private key (``ConfigKey.extra["sensitive"]``) is described, never
            # shown: Kafka's PASSWORD type, value null and is_sensitive
            sensitive = bool(self.config.key(name).extra.get("sensitive"))
            out.append(
                ConfigEntry(
                    name,
                    None if sensitive else render(value),
                    read_only=True,
                    is_default=source is ConfigSource.DEFAULT_CONFIG,
                    source=source,
                    is_sensitive=sensitive,
                    synonyms=tuple(self._broker_synonyms(name)) if include_synonyms and not sensitive else (),
                    config_type=ConfigType.PASSWORD if sensitive else config_type(name, value),
                    documentation=self.config.key(name).doc if include_documentation else None,
                )
            )
        return out

    def describe(
        self, resources: Sequence[ConfigResource], *, include_synonyms: bool, include_documentation: bool
    ) -> list[DescribeConfigsResult]:
        results = []
        for r in resources:
            # Kafka's ConfigHelper: a null or an empty key list asks for every config (kafka-python
            # and the CLI send an empty list for "all")
            names = list(r.config_names) if r.config_names else None
            try:
                if r.resource_type == ConfigResourceType.TOPIC:
                    entries = self._describe_topic(r.name, names, include_synonyms, include_documentation)
                elif r.resource_type == ConfigResourceType.BROKER:
                    self._check_broker_name(r.name)
                    entries = self.broker_entries(
                        include_synonyms=include_synonyms,
                        include_documentation=include_documentation,
                        names=names,
                        default_only=not r.name and self.dynamic is not None,
                    )
                elif r.resource_type == ConfigResourceType.BROKER_LOGGER:
                    if not r.name:
                        raise KafkaError("Broker id must not be empty", code=ErrorCode.INVALID_REQUEST)
                    self._check_logger_broker(r.name, "broker id")
                    entries = logger_entries(names)
                else:
                    raise _unsupported_type(r.resource_type)
            except KafkaError as exc:
                results.append(DescribeConfigsResult(exc.code, str(exc), r.resource_type, r.name))
                continue
            results.append(DescribeConfigsResult(ErrorCode.NONE, None, r.resource_type, r.name, tuple(entries)))
        return results

    def _describe_topic(
        self, name: str, names: list[str] | None, include_synonyms: bool, include_documentation: bool
    ) -> list[ConfigEntry]:
        assert self.cache is not None
        _validate_topic_name(name)
        topic = self.cache.topics.get(name)
        config = self.cache.topic_config(name)
        if topic is None or config is None:
            raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        return self.topic_entries(
            config,
            config.overrides,  # the overrides in force: one dropped at load reports its default
            include_synonyms=include_synonyms,
            include_documentation=include_documentation,
            names=names,
        )

    def _check_broker_name(self, name: str) -> None:
        if name not in ("", str(self.config.broker_id)):
            raise KafkaError(
                f"broker {name!r} is not this broker ({self.config.broker_id})", code=ErrorCode.INVALID_REQUEST
            )

    def _check_logger_broker(self, name: str, what: str) -> None:
        """A BROKER_LOGGER resource names this broker by its id: the loggers are this process's
        (Kafka's ConfigHelper and RuntimeLoggerManager, INVALID_REQUEST otherwise)."""
        try:
            broker_id = int(name)
        except ValueError:
            raise KafkaError(
                f"{what[0].upper()}{what[1:]} must be an integer, but it is: {name}", code=ErrorCode.INVALID_REQUEST
            ) from None
        if broker_id != self.config.broker_id:
            raise KafkaError(
                f"Unexpected {what}, expected {self.config.broker_id} but received {name}",
                code=ErrorCode.INVALID_REQUEST,
            )

    # -- alter -----------------------------------------------------------------------------------
    async def incremental_alter(
        self, resources: Sequence[AlterConfigsResource], validate_only: bool, *, replace: bool = False
    ) -> list[AlterConfigsResult]:
        """IncrementalAlterConfigs; with ``replace``, the legacy AlterConfigs: the SET configs
        become the resource's whole set of overrides (any other reverts to its default)."""
        results = []
        repeated = repeated_resources((int(r.resource_type), r.name) for r in resources)
        for r in resources:
            if (int(r.resource_type), r.name) in repeated:
                refused = AlterConfigsResult(ErrorCode.INVALID_REQUEST, DUPLICATE_RESOURCE, r.resource_type, r.name)
                results.append(refused)
                continue
            try:
                _check_alterations(r)
                if r.resource_type == ConfigResourceType.TOPIC:
                    await self._alter_topic(r, validate_only, replace=replace)
                elif r.resource_type == ConfigResourceType.BROKER:
                    self._check_broker_name(r.name)
                    if self.dynamic is None:
                        raise InvalidConfig(
                            "broker configs are static here: set them in the config file or with --set and restart"
                        )
                    entity = r.name or DEFAULT_ENTITY
                    await self.dynamic.alter(entity, r.configs, validate_only, replace=replace)
                elif r.resource_type == ConfigResourceType.BROKER_LOGGER and not replace:
                    self._check_logger_broker(r.name, "node id")
                    alter_loggers(r.configs, validate_only)
                else:
                    raise _unsupported_type(r.resource_type)
            except KafkaError as exc:
                results.append(AlterConfigsResult(exc.code, str(exc), r.resource_type, r.name))
                continue
            results.append(AlterConfigsResult(ErrorCode.NONE, None, r.resource_type, r.name))
        return results

    async def _alter_topic(self, r: AlterConfigsResource, validate_only: bool, *, replace: bool = False) -> None:
        assert self.cache is not None and self.store is not None
        _validate_topic_name(r.name)
        topic = self.cache.topics.get(r.name)
        if topic is None:
            raise UnknownTopicOrPartition(f"topic {r.name!r} does not exist")
        current = self.cache.topic_config(r.name) or self.config.topic_config(topic.overrides)
        overrides = {} if replace else dict(topic.overrides)
        known = set(TopicConfig.known_keys(self.config))
        for c in r.configs:
            if c.name not in known:
                raise InvalidConfig(f"unknown topic config {c.name!r}")
            if c.op == AlterConfigOp.SET:
                assert c.value is not None  # _check_alterations
                overrides[c.name] = c.value
            elif c.op == AlterConfigOp.DELETE:
                overrides.pop(c.name, None)
            elif c.op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                if c.name not in _LIST_CONFIGS:
                    raise InvalidConfig(f"{c.name!r} is not a list config: APPEND/SUBTRACT do not apply")
                items = [i.strip() for i in (c.value or "").split(",") if i.strip()]
                base = overrides.get(c.name)
                present = [i for i in (base.split(",") if base is not None else current[c.name]) if i]
                if c.op == AlterConfigOp.APPEND:
                    present += [i for i in items if i not in present]
                else:
                    present = [i for i in present if i not in items]
                overrides[c.name] = ",".join(present)
            else:
                raise KafkaError(f"unknown config operation {c.op!r}", code=ErrorCode.INVALID_REQUEST)
        new = TopicConfig.build(self.config, overrides)  # raises InvalidConfig naming the key
        if current.remote_storage_enable and not new.remote_storage_enable and not new["remote.log.delete.on.disable"]:
            raise InvalidConfig(TIERING_OFF_WITHOUT_DELETE)  # KIP-950: remote data is deleted or tiering stays
        if validate_only:
            return
        expect = topic.config_version if topic.config_version is not None else ABSENT
        try:
            await self.store.txn(
                [Check(config_key(r.name), expect)],
                [Put(config_key(r.name), encode({"version": 1, "config": overrides}))],
            )
        except MetadataConflict:
            await self.cache.refresh_topic(r.name)
            raise KafkaError(
                f"configs of {r.name!r} changed concurrently; retry", code=ErrorCode.REQUEST_TIMED_OUT
            ) from None
        await self.cache.refresh_topic(r.name)


# -- broker loggers (KIP-412) ----------------------------------------------------------------------
#: Kafka's name of the root logger, which is Python's root logger here (``log.level`` sets it)
ROOT_LOGGER = "root"
#: the package whose loggers (``odradek.broker.admin`` ...) are the broker's, as Kafka's are
#: ``kafka.*``; it is always there to be set, for all of them at once
LOGGER_PACKAGE = "odradek"
#: Kafka's log levels (LogLevelConfig.VALID_LOG_LEVELS) as Python levels: TRACE is finer than
#: DEBUG (Python has none; no odradek message is below DEBUG), FATAL is CRITICAL
_LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING}
_LEVELS |= {"ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
_VALID_LEVELS = ", ".join(sorted(_LEVELS))
_logger_log = logging.getLogger(__name__)


def _kafka_level(level: int) -> str:
    """The Kafka level a Python level logs at (the first of Kafka's levels it lets through)."""
    for name, value in sorted(_LEVELS.items(), key=lambda item: -item[1]):
        if level >= value:
            return name
    return "TRACE"


def _loggers() -> dict[str, logging.Logger]:
    """The broker's loggers by Kafka name: the root, the package's logger, and every logger of
    the package this process has (a module's logger exists once the module is imported)."""
    out = {ROOT_LOGGER: logging.getLogger(), LOGGER_PACKAGE: logging.getLogger(LOGGER_PACKAGE)}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith(LOGGER_PACKAGE + ".") and isinstance(logger, logging.Logger):
            out[name] = logger
    return out


def logger_entries(names: Sequence[str] | None) -> list[ConfigEntry]:
    """DescribeConfigs of BROKER_LOGGER: each logger with the level it logs at (its own, or the
    nearest ancestor's, as Kafka's Log4jController resolves it), DYNAMIC_BROKER_LOGGER_CONFIG."""
    return [
        ConfigEntry(
            name,
            _kafka_level(logger.getEffectiveLevel()),
            read_only=False,
            is_default=False,
            source=ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG,
        )
        for name, logger in sorted(_loggers().items())
        if names is None or name in names
    ]


def alter_loggers(ops: Sequence[AlterableConfig], validate_only: bool) -> None:
    """IncrementalAlterConfigs of BROKER_LOGGER (Kafka's RuntimeLoggerManager): SET gives a logger
    a level, DELETE takes it back (it logs at its parent's again), for this process's run only,
    not persisted; every operation is checked before any applies."""
    loggers = _loggers()
    for op in ops:
        if op.op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
            raise KafkaError(
                f"{op.op.name} operation is not allowed for the BROKER_LOGGER resource", code=ErrorCode.INVALID_REQUEST
            )
        if op.name not in loggers:
            raise InvalidConfig(f"Logger {op.name} does not exist!")
        if op.op == AlterConfigOp.SET and op.value not in _LEVELS:
            raise InvalidConfig(
                f"Cannot set the log level of {op.name} to {op.value} as it is not a supported log level. "
                f"Valid log levels are {_VALID_LEVELS}"
            )
        if op.op == AlterConfigOp.DELETE and op.name == ROOT_LOGGER:
            raise KafkaError(
                f"Removing the log level of the {ROOT_LOGGER} logger is not allowed", code=ErrorCode.INVALID_REQUEST
            )
    if validate_only:
        return
    for op in ops:
        if op.op == AlterConfigOp.SET:
            assert op.value is not None
            loggers[op.name].setLevel(_LEVELS[op.value])
            _logger_log.warning("Updated the log level of %s to %s", op.name, op.value)
        else:
            loggers[op.name].setLevel(logging.NOTSET)
            _logger_log.warning("Unset the log level of %s", op.name)


def _check_alterations(r: AlterConfigsResource) -> None:
    """Kafka's checks of a resource's alterations before its type or name is looked at
    (ConfigAdminManager.preprocess), both INVALID_REQUEST: a config named twice, and a null value
    for anything but DELETE (every legacy AlterConfigs value is a SET)."""
    names = [c.name for c in r.configs]
    if len(set(names)) != len(names):
        raise KafkaError("Error due to duplicate config keys", code=ErrorCode.INVALID_REQUEST)
    nulls = [c.name for c in r.configs if c.value is None and c.op != AlterConfigOp.DELETE]
    if nulls:
        raise KafkaError("Null value not supported for : " + ", ".join(nulls), code=ErrorCode.INVALID_REQUEST)


def _validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate`` before the topic is looked up: a name no topic can have
    ("", ".", "..", illegal characters) is INVALID_TOPIC_EXCEPTION, not UNKNOWN_TOPIC_OR_PARTITION."""
    from .admin import validate_topic_name  # admin imports this module

    validate_topic_name(name)


def _unsupported_type(resource_type: int) -> KafkaError:
    """Kafka's ``InvalidRequestException("Unsupported resource type: BROKER_LOGGER")``."""
    try:
        name = ConfigResourceType(resource_type).name
    except ValueError:
        name = "UNKNOWN"
    return KafkaError(f"Unsupported resource type: {name}", code=ErrorCode.INVALID_REQUEST)
