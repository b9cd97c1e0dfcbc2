"""Registers the etcd metadata store as ``metadata = "etcd"`` and its config keys."""

from __future__ import annotations

from collections.abc import Sequence

from odradek.config import Config
from odradek.hookspecs import hookimpl
from odradek.interfaces import ConfigKey, MetadataFactory

from .store import EtcdMetadataStore


def create_store(config: Config) -> EtcdMetadataStore:
    return EtcdMetadataStore(
        config["etcd.endpoints"],
        lease_ttl_ms=config["etcd.lease.ttl.ms"],
        namespace=config["etcd.namespace"],
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
