"""The plugin module named by the ``odradek`` entry point: registers ``storage = "memory"``."""

from __future__ import annotations

from collections.abc import Sequence

from odradek.hookspecs import hookimpl
from odradek.interfaces import StorageFactory

from .engine import MemoryLogStorage


@hookimpl
def odradek_register_storage() -> Sequence[StorageFactory]:
    return [
        StorageFactory(
            name="memory",
            create=MemoryLogStorage,
            description="Partition logs held in the broker's memory (example third-party plugin)",
        )
    ]
