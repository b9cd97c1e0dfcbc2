"""meta_etcd against a real etcd: the MetadataStore conformance suite, plugin wiring, faults."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from odradek.interfaces import MetadataStore
from odradek.plugins.meta_etcd.store import EtcdMetadataStore
from odradek.testing import EtcdServer, unique_chroot
from odradek.testing.metadata import MetadataStoreConformance


class TestEtcdConformance(MetadataStoreConformance):
    @pytest.fixture
    def metadata_store_factory(self, etcd_server: EtcdServer) -> Callable[[], MetadataStore]:
        namespace = unique_chroot("conformance")
        return lambda: EtcdMetadataStore([etcd_server.endpoint], namespace=namespace)
