"""The segment engine (storage_segment) against the storage conformance suite."""

from __future__ import annotations

from odradek.plugins.storage_segment.plugin import odradek_register_storage
from odradek.testing.storage import check_storage

TestSegmentStorageConformance = check_storage(odradek_register_storage()[0])
