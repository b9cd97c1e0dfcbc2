"""odradek: Apache Kafka's design as a small trio kernel plus pluggy plugins.

The kernel defines the hook specs (:mod:`odradek.hookspecs`), the interfaces plugins implement
(:mod:`odradek.interfaces`), the record format (:mod:`odradek.records`), the config model
(:mod:`odradek.config`) and the plugin manager (:mod:`odradek.manager`). Everything that does I/O
for a role (storage, transport, metadata) is a plugin.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("odradek")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
