# mypy: disable-error-code="empty-body"
"""Every hook odradek's kernel calls, grouped by role.

Every hook returns a list in the datasette style (the ``register_*`` hooks return named
factories, codecs or classes; ``odradek_config_keys`` returns config keys): the kernel merges the
lists from every plugin, refuses duplicates with an error naming both plugins, and picks the one
the config selects (``storage = "segment"``). So every hook is *collected*:
:class:`odradek.manager.Plugins` calls every implementation itself (to know which plugin offered
what) and checks its items; none is ``firstresult``, and hook wrappers and ``tryfirst``/``trylast``
are refused at registration since they would mean nothing. Hooks are synchronous and cheap: they
describe what a plugin offers, they never do I/O. The objects they return have ``async`` methods
for I/O, which the kernel runs inside its own nurseries.

Names are prefixed ``odradek_``; the plugin manager rejects a ``@hookimpl`` function whose name is
no hook, and a hook-named function without ``@hookimpl``, at registration, so a misspelt hook is
an error, not silently ignored.
docs/plugins.md documents every hook with its exact signature (a test checks that).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from .interfaces import (
        Assignor,
        Codec,
        ConfigKey,
        MetadataFactory,
        Partitioner,
        RemoteStorageFactory,
        ServerAssignor,
        StorageFactory,
        TransportFactory,
    )
    from .replica_selector import ReplicaSelector
    from .security.authorizer import AuthorizerFactory
    from .security.mechanism import SaslMechanism

PROJECT = "odradek"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# ============================================================================================
# Kernel: configuration
# ============================================================================================


@hookspec
def odradek_config_keys() -> Sequence[ConfigKey]:
    """Config keys a plugin adds to the broker config model.

    Called by: :func:`odradek.config.load_config` (through the plugin manager), once per load,
    before the config file is validated, so plugin keys are typed and checked like built-ins.
    Result: collected; a key defined twice is an error naming both plugins.
    """


# ============================================================================================
# Storage role
# ============================================================================================


@hookspec
def odradek_register_storage() -> Sequence[StorageFactory]:
    """Storage engines this plugin offers (a ``StorageFactory`` builds a ``LogStorage``).

    Called by: the broker at start-up, to resolve the ``storage`` config key (default
    ``"segment"``). The chosen factory's ``create(config)`` is called once per broker.
    Result: collected and merged by name.
    """


@hookspec
def odradek_register_remote_storage() -> Sequence[RemoteStorageFactory]:
    """Remote storages for tiered storage (KIP-405) this plugin offers: a ``RemoteStorageFactory``
    builds a ``(RemoteStorageManager, RemoteLogMetadataManager)`` pair.

    Called by: the broker at start-up when ``remote.log.storage.system.enable`` is true, to
    resolve ``remote.log.storage.manager`` (default ``"directory"``, the built-in
    ``storage_tiered`` plugin). The chosen factory's ``create(config)`` is called once per broker.
    Result: collected and merged by name.
    """


# ============================================================================================
# Transport role
# ============================================================================================


@hookspec
def odradek_register_transports() -> Sequence[TransportFactory]:
    """Transports this plugin offers: a server side (``listener``) and a client side
    (``connector``) for the security protocols it names (``PLAINTEXT``, ``SSL``).

    Called by: the broker at start-up, once per entry in ``listeners``, to find the transport
    for that listener's security protocol (overridable with the ``transport`` key); and by
    odradek's client when it opens connections.
    Result: collected and merged by name.
    """


@hookspec
def odradek_register_sasl_mechanisms() -> Sequence[SaslMechanism]:
    """SASL mechanisms this plugin offers (``odradek.security.mechanism.SaslMechanism``: a name,
    a ``server(context)`` factory, an optional start-up ``check`` and ``client`` side).

    Called by: the broker at start-up, once per SASL listener, to resolve
    ``sasl.enabled.mechanisms`` (an enabled name no plugin offers stops the broker); and by
    odradek's client for ``sasl.mechanism``. The built-in ``sasl`` plugin offers PLAIN,
    SCRAM-SHA-256 and SCRAM-SHA-512.
    Result: collected and merged by name.
    """


@hookspec
def odradek_register_authorizers() -> Sequence[AuthorizerFactory]:
    """Authorizers this plugin offers (``odradek.security.authorizer.AuthorizerFactory``: a name
    and ``create(config, store)`` building an ``Authorizer``, Kafka's interface: batch
    ``authorize``, ``create_acls``, ``delete_acls``, ``acls``, start/run/close).

    Called by: the broker at start-up, to resolve ``authorizer.class.name`` (empty: none, every
    request allowed; Kafka's ``AclAuthorizer`` and ``StandardAuthorizer`` class names select the
    built-in ``acl``; a name no plugin offers stops the broker). The built-in ``sasl`` plugin
    (odradek's security plugin) offers ``acl``.
    Result: collected and merged by name.
    """


# ============================================================================================
# Metadata role
# ============================================================================================


@hookspec
def odradek_register_metadata() -> Sequence[MetadataFactory]:
    """Metadata stores this plugin offers (``local``, ``zookeeper``, ``etcd``).

    Called by: the broker at start-up, to resolve the ``metadata`` config key (default
    ``"local"``). The chosen factory's ``create(config)`` is called once per broker.
    Result: collected and merged by name.
    """


# ============================================================================================
# Compression role
# ============================================================================================


@hookspec
def odradek_register_codecs() -> Sequence[Codec]:
    """Compression codecs, each with Kafka's codec id (1 gzip, 2 snappy, 3 lz4, 4 zstd).

    Called by: :func:`odradek.manager.build_plugin_manager` users through
    ``Plugins.codecs()``, when the records layer needs to (de)compress a batch: the broker only
    on paths that must read records (compaction, validation of compacted topics), clients on
    every produce and consume.
    Result: collected and merged by id; two codecs with one id is an error naming both plugins.
    """


# ============================================================================================
# Partitioner role (client side)
# ============================================================================================


@hookspec
def odradek_register_partitioners() -> Sequence[type[Partitioner]]:
    """Partitioner classes (instantiated with no arguments, one per producer) for the producer's
    ``partitioner`` setting ("murmur2", "sticky", ...).

    Called by: odradek's producer when it is created, to resolve its ``partitioner`` config.
    Result: collected and merged by name.
    """


# ============================================================================================
# Assignor role (client side, consumer groups)
# ============================================================================================


@hookspec
def odradek_register_assignors() -> Sequence[type[Assignor]]:
    """Assignor classes (instantiated with no arguments, one per consumer) for
    ``partition.assignment.strategy`` ("range", ...).

    Called by: odradek's consumer when it joins a group, to list the protocols it supports in
    JoinGroup and, as group leader, to compute the assignment.
    Result: collected and merged by name.
    """


# ============================================================================================
# Server assignor role (broker side, KIP-848 consumer groups)
# ============================================================================================


@hookspec
def odradek_register_server_assignors() -> Sequence[type[ServerAssignor]]:
    """Server-side assignor classes (instantiated with no arguments, once per group coordinator)
    for KIP-848 consumer groups: ``group.consumer.assignors`` names the ones a broker offers
    ("uniform", "range"), and a consumer picks one of them with ``group.remote.assignor``.

    Called by: the broker when it starts its group coordinator, to resolve
    ``group.consumer.assignors`` (an unknown name fails the start, naming what is loaded).
    Result: collected and merged by name.
    """


# ============================================================================================
# Replica selector role (broker side, KIP-392 fetch from the closest replica)
# ============================================================================================


@hookspec
def odradek_register_replica_selectors() -> Sequence[type[ReplicaSelector]]:
    """Replica selector classes (``odradek.replica_selector.ReplicaSelector``: a ``name`` and
    ``select(tp, client_metadata, partition_view)``, Kafka's ``ReplicaSelector``), made with no
    arguments, one per broker.

    Called by: the broker at start-up, to resolve ``replica.selector.class`` (empty: none, every
    consumer reads from the leader; Kafka's ``RackAwareReplicaSelector`` and ``LeaderSelector``
    class names select the built-in ``rack-aware`` and ``leader``, which the built-in
    ``default_assignors`` plugin registers; an unknown name fails the start).
    Result: collected and merged by name.
    """
