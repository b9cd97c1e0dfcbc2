"""Registers the embedded metadata store as ``metadata = "local"`` (the default)."""

from __future__ import annotations

from collections.abc import Sequence

from odradek.config import Config
from odradek.hookspecs import hookimpl
from odradek.interfaces import MetadataFactory

from .store import FILE_NAME, LocalMetadataStore


def create_store(config: Config) -> LocalMetadataStore:
    """The store file lives in the first log dir, beside the partition logs it describes."""
    return LocalMetadataStore(config.log_dirs[0] / FILE_NAME)


@hookimpl
def odradek_register_metadata() -> Sequence[MetadataFactory]:
    return [
        MetadataFactory(
            name="local",
            create=create_store,
            description="embedded single-node metadata in <log.dirs[0]>/" + FILE_NAME + " (no server needed)",
            log_dir=lambda config: config.log_dirs[0],
        )
    ]
