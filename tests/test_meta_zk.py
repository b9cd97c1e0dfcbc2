"""meta_zk against a real ZooKeeper: the MetadataStore conformance suite, plugin wiring, faults."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from odradek.interfaces import MetadataStore
from odradek.plugins.meta_zk.store import ZooKeeperMetadataStore
from odradek.testing import ZooKeeperServer, unique_chroot
from odradek.testing.metadata import MetadataStoreConformance


class TestZooKeeperConformance(MetadataStoreConformance):
    watch_coalesces = True

    @pytest.fixture
    def metadata_store_factory(self, zookeeper_server: ZooKeeperServer) -> Callable[[], MetadataStore]:
        connect = zookeeper_server.connect_string + unique_chroot("conformance")
        return lambda: ZooKeeperMetadataStore(connect)
