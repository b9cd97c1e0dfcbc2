"""Registers the ``directory`` remote storage (``remote.log.storage.manager``) and its config key."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from odradek.config import Config, ConfigError
from odradek.hookspecs import hookimpl
from odradek.interfaces import ConfigKey, RemoteStorageFactory

from .directory import DirectoryRemoteLogMetadata, DirectoryRemoteStorage

STORAGE_DIR_KEY = "remote.log.storage.dir"


def create(config: Config) -> tuple[DirectoryRemoteStorage, DirectoryRemoteLogMetadata]:
    """The pair for ``remote.log.storage.dir`` (created if missing); an unset or unusable
    path stops the broker with an error naming the key."""
    raw = str(config[STORAGE_DIR_KEY])
    if not raw:
        raise ConfigError(f"{STORAGE_DIR_KEY!r} must be set when remote.log.storage.system.enable is true")
    root = Path(raw).resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{STORAGE_DIR_KEY!r}: {root} cannot be created: {exc}") from exc
    return DirectoryRemoteStorage(root), DirectoryRemoteLogMetadata(root)


@hookimpl
def odradek_register_remote_storage() -> Sequence[RemoteStorageFactory]:
    return [
        RemoteStorageFactory(
            name="directory",
            create=create,
            description="segments and their metadata in remote.log.storage.dir (a file system every broker mounts)",
        )
    ]


@hookimpl
def odradek_config_keys() -> Sequence[ConfigKey]:
    return [
        ConfigKey(
            STORAGE_DIR_KEY,
            str,
            "",
            "Where the directory remote storage keeps tiered segments and their metadata: a path every broker "
            "of the cluster mounts (required with remote.log.storage.manager=directory).",
        )
    ]
