"""Registers the ZooKeeper metadata store as ``metadata = "zookeeper"`` and its config keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from odradek.config import Config, ConfigError
from odradek.hookspecs import hookimpl
from odradek.interfaces import ConfigKey, MetadataFactory

if TYPE_CHECKING:
    from .store import ZooKeeperMetadataStore


def create_store(config: Config) -> ZooKeeperMetadataStore:
    """The store, imported here rather than when the plugin loads: kazoo comes with the
    ``zk`` extra, and every broker loads this plugin, also one on the embedded metadata
    that a plain ``pip install odradek`` runs."""
    try:
        from .store import ZooKeeperMetadataStore
    except ModuleNotFoundError as exc:
        raise ConfigError(f'metadata = "zookeeper" needs kazoo: pip install "odradek[zk]" ({exc})') from exc
    return ZooKeeperMetadataStore(
        config["zookeeper.connect"],
        session_timeout_ms=config["zookeeper.session.timeout.ms"],
        connection_timeout_ms=config["zookeeper.connection.timeout.ms"],
        jute_maxbuffer=config["zookeeper.jute.maxbuffer"],
    )


@hookimpl
def odradek_config_keys() -> Sequence[ConfigKey]:
    return [
        ConfigKey(
            "zookeeper.connect",
            str,
            "127.0.0.1:2181",
            "ZooKeeper ensemble as host:port[,host:port...][/chroot]; the chroot holds this cluster's keys.",
        ),
        ConfigKey(
            "zookeeper.session.timeout.ms",
            int,
            18000,
            "ZooKeeper session timeout: a broker silent this long loses its registration and leadership. "
            "A session the ensemble refuses this long is checked for an ensemble that lost its data "
            "(restarted empty): a zxid behind the session's starts a new session (the broker then "
            "stops if its cluster id is gone).",
            minimum=1,
        ),
        ConfigKey(
            "zookeeper.connection.timeout.ms",
            int,
            18000,
            "How long opening the metadata store waits for a ZooKeeper connection.",
            minimum=1,
        ),
        ConfigKey(
            "zookeeper.jute.maxbuffer",
            int,
            1048575,
            "Largest request the ZooKeeper servers take: their jute.maxbuffer (1048575 bytes unless "
            "set). A larger one (a topic of several thousand partitions is created in one "
            "transaction) is refused before it is sent: ZooKeeper would drop the connection.",
            minimum=1024,
        ),
    ]


@hookimpl
def odradek_register_metadata() -> Sequence[MetadataFactory]:
    return [
        MetadataFactory(
            name="zookeeper",
            create=create_store,
            description="cluster metadata on a ZooKeeper ensemble (kazoo), zookeeper.connect",
        )
    ]
