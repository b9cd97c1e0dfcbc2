"""Registers the etcd metadata store as ``metadata = "etcd"`` and its config keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from odradek.config import Config, ConfigError
from odradek.hookspecs import hookimpl
from odradek.interfaces import ConfigKey, MetadataFactory

if TYPE_CHECKING:
    from .store import EtcdMetadataStore


def create_store(config: Config) -> EtcdMetadataStore:
    """The store, imported here rather than when the plugin loads: etcd3 and grpcio come with the
    ``etcd`` extra, and every broker loads this plugin, also one on the embedded metadata
    that a plain ``pip install odradek`` runs."""
    try:
        from .store import EtcdMetadataStore
    except ModuleNotFoundError as exc:
        raise ConfigError(f'metadata = "etcd" needs etcd3 and grpcio: pip install "odradek[etcd]" ({exc})') from exc
    return EtcdMetadataStore(
        config["etcd.endpoints"],
        lease_ttl_ms=config["etcd.lease.ttl.ms"],
        namespace=config["etcd.namespace"],
        max_txn_ops=config["etcd.max.txn.ops"],
    )


@hookimpl
def odradek_config_keys() -> Sequence[ConfigKey]:
    return [
        ConfigKey(
            "etcd.endpoints",
            list,
            ["http://127.0.0.1:2379"],
            "etcd client URLs (http://host:port, comma separated); the first that answers is used.",
        ),
        ConfigKey(
            "etcd.lease.ttl.ms",
            int,
            18000,
            "TTL of the session lease (refreshed every TTL/3): a broker silent this long loses its "
            "registration and leadership. etcd rounds it up to whole seconds.",
            minimum=1000,
        ),
        ConfigKey(
            "etcd.namespace",
            str,
            "",
            "Prefix of every key this cluster writes (like a ZooKeeper chroot), e.g. /odradek/prod.",
        ),
        ConfigKey(
            "etcd.max.txn.ops",
            int,
            128,
            "Most writes (and most comparisons) the etcd servers take in one transaction: their "
            "--max-txn-ops, 128 unless set. Creating a topic writes its assignment and every "
            "partition's state in one transaction, so a topic may have at most this many minus 2 "
            "partitions; raise both together for larger topics.",
            minimum=4,
        ),
    ]


@hookimpl
def odradek_register_metadata() -> Sequence[MetadataFactory]:
    return [
        MetadataFactory(
            name="etcd",
            create=create_store,
            description="cluster metadata on etcd v3 (leases, transactions, watches), etcd.endpoints",
        )
    ]
