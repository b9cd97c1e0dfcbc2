"""The built-in ``directory`` remote storage (plugins/storage_tiered) passes the remote storage
role's conformance suite."""

from odradek.plugins.storage_tiered.plugin import odradek_register_remote_storage
from odradek.testing import check_remote_storage

(DIRECTORY,) = odradek_register_remote_storage()

TestDirectoryRemoteStorage = check_remote_storage(
    DIRECTORY, config_overrides={"remote.log.storage.dir": "{tmp}/tiered"}
)
