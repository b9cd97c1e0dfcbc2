"""meta_local (the embedded store) against the MetadataStore conformance suite."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.interfaces import MetadataStore
from odradek.plugins.meta_local.store import FILE_NAME, LocalMetadataStore
from odradek.testing.metadata import MetadataStoreConformance


class TestLocalMetadataStoreConformance(MetadataStoreConformance):
    @pytest.fixture
    def metadata_store_factory(self, tmp_path: Path) -> Callable[[], MetadataStore]:
        return lambda: LocalMetadataStore(tmp_path / FILE_NAME)
