"""The memory engine passes odradek's storage conformance suite: one line is all it takes."""

from odradek_memory_storage.plugin import odradek_register_storage

from odradek.testing import check_storage

TestMemoryStorageConformance = check_storage(odradek_register_storage()[0])
