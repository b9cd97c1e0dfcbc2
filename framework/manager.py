"""Building the plugin manager and resolving plugins by role and name.

The manager is built by :func:`build_plugin_manager`, never at import time, so tests and embedders
build as many independent ones as they like. Load order (written down because it matters):

1. hook specs (:mod:`odradek.hookspecs`);
2. entry points of group ``odradek`` -- built-ins are registered there too, from the ``odradek``
   distribution. With ``ODRADEK_DISABLE_PLUGIN_AUTOLOAD=1`` only the ``odradek`` distribution's own
   entry points load; third-party ones must then be named explicitly;
3. plugins named explicitly (the ``plugins`` config key or the ``extra`` argument): an entry-point
   name, a module path, or a module object; then the ``plugins.disabled`` names are unregistered.

Roles are then resolved by name (``storage = "segment"``): :class:`Plugins` merges what every
plugin registered, refuses duplicates with an error naming both plugins, and names the available
choices when the selected one is missing. ``ODRADEK_TRACE_HOOKS=1`` traces hook calls to stderr.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar

import pluggy

from . import hookspecs
from .errors import OdradekError
from .interfaces import (
    Assignor,
    Codec,
    ConfigKey,
    MetadataFactory,
    Partitioner,
    StorageFactory,
    TransportFactory,
)
from .plugin_origin import describe_plugin

ENTRY_POINT_GROUP = "odradek"
DISABLE_AUTOLOAD_ENV = "ODRADEK_DISABLE_PLUGIN_AUTOLOAD"
TRACE_ENV = "ODRADEK_TRACE_HOOKS"
BUILTIN_DISTRIBUTION = "odradek"

T = TypeVar("T")


class PluginError(OdradekError):
    """A plugin is missing, fails to load, or conflicts with another."""


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """One registered plugin as ``odradek plugins`` shows it."""

    name: str
    module: str
    distribution: str
    version: str
    roles: tuple[str, ...]
    offers: tuple[str, ...]


_HOOK_ROLES = {
    "odradek_config_keys": "config",
    "odradek_register_storage": "storage",
    "odradek_register_transports": "transport",
    "odradek_register_metadata": "metadata",
    "odradek_register_codecs": "compression",
    "odradek_register_partitioners": "partitioner",
    "odradek_register_assignors": "assignor",
}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _load_module(spec: str) -> types.ModuleType:
    try:
        return importlib.import_module(spec)
    except ImportError as exc:
        raise PluginError(f"plugin module {spec!r} cannot be imported: {exc}") from exc


def build_plugin_manager(
    *,
    autoload: bool | None = None,
    extra: Iterable[str | types.ModuleType | object] = (),
    disabled: Iterable[str] = (),
    trace: bool | None = None,
    entry_points_enabled: bool = True,
) -> pluggy.PluginManager:
    """A new plugin manager with specs, entry points and the named extra plugins registered.

    ``autoload`` defaults to "not ``ODRADEK_DISABLE_PLUGIN_AUTOLOAD``"; ``trace`` to
    ``ODRADEK_TRACE_HOOKS``. ``extra`` items are entry-point names, module paths or objects.
    ``entry_points_enabled=False`` loads no entry point at all, only ``extra`` (for unit tests that
    assemble exactly the plugins they exercise).
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    if autoload is None:
        autoload = not _env_flag(DISABLE_AUTOLOAD_ENV)
    eps = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for ep in eps.values() if entry_points_enabled else ():
        dist = ep.dist.name if ep.dist is not None else ""
        if autoload or dist == BUILTIN_DISTRIBUTION:
            _register(pm, _load_entry_point(ep), ep.name)
    for item in extra:
        if isinstance(item, str):
            if pm.has_plugin(item):
                continue
            module = _load_entry_point(eps[item]) if item in eps else _load_module(item)
            _register(pm, module, item)
        else:
            _register(pm, item, getattr(item, "__name__", None) or repr(item))
    for name in disabled:
        if pm.get_plugin(name) is None:
            raise PluginError(f"cannot disable plugin {name!r}: no plugin of that name is loaded")
        pm.unregister(name=name)
    if trace if trace is not None else _env_flag(TRACE_ENV):
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    return pm


def _load_entry_point(ep: EntryPoint) -> Any:
    try:
        return ep.load()
    except Exception as exc:  # a broken third-party plugin must be named, not crash anonymously
        dist = ep.dist.name if ep.dist is not None else "?"
        raise PluginError(
            f"plugin {ep.name!r} ({ep.value}, from distribution {dist!r}) failed to load: {exc!r}"
        ) from exc


def _register(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    for attr in dir(plugin):
        if attr.startswith("odradek_") and attr not in _HOOK_ROLES:
            raise PluginError(f"plugin {name!r} implements unknown hook {attr!r}")
    try:
        pm.register(plugin, name=name)
    except ValueError as exc:
        raise PluginError(f"plugin {name!r} conflicts with an already registered one: {exc}") from exc
    pm.check_pending()


class Plugins:
    """Role-by-name resolution over a plugin manager: what the kernel and clients ask."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm

    # -- collection with provenance -----------------------------------------------------------
    def _collect(self, hook_name: str) -> list[tuple[str, Any]]:
        hook = getattr(self.pm.hook, hook_name)
        out: list[tuple[str, Any]] = []
        trace = self.pm.trace.root.get("hook")
        for impl in hook.get_hookimpls():  # registration order
            # each implementation is called on its own to know which plugin offered what
            trace(hook_name, impl.plugin_name)
            items = impl.function()
            trace("finish", hook_name, impl.plugin_name, "->", items)
            for item in items or ():
                out.append((impl.plugin_name, item))
        return out

    def _by_name(self, hook_name: str, key: Callable[[Any], Any]) -> dict[Any, tuple[str, Any]]:
        merged: dict[Any, tuple[str, Any]] = {}
        for plugin, item in self._collect(hook_name):
            k = key(item)
            if k in merged:
                other = merged[k][0]
                raise PluginError(
                    f"{_HOOK_ROLES[hook_name]} {k!r} is registered by both plugin {other!r} "
                    f"and plugin {plugin!r}; disable one (plugins.disabled)"
                )
            merged[k] = (plugin, item)
        return merged

    def _select(self, hook_name: str, name: str) -> Any:
        merged = self._by_name(hook_name, lambda i: i.name)
        if name not in merged:
            role = _HOOK_ROLES[hook_name]
            choices = ", ".join(sorted(merged)) or "none"
            raise PluginError(
                f"no {role} plugin named {name!r} is loaded (available: {choices}); "
                f"install the plugin or fix the {role!r} setting"
            )
        return merged[name][1]

    # -- roles ---------------------------------------------------------------------------------
    def config_keys(self) -> list[ConfigKey]:
        """Every plugin's config keys. A key whose ``type`` is not a class (the string ``"int"``)
        would be accepted here and then coerce every value with ``"int"(raw)``: refused now,
        naming the plugin, so its author sees the mistake when the plugin is first loaded."""
        merged = self._by_name("odradek_config_keys", lambda k: k.name)
        for plugin, key in merged.values():
            if not isinstance(key.type, type):
                raise PluginError(
                    f"{describe_plugin(plugin)} declares config key {key.name!r} with type {key.type!r}: "
                    "ConfigKey.type must be a class (str, int, float, bool or list)"
                )
        return [item for _, item in merged.values()]

    def storage(self, name: str) -> StorageFactory:
        result: StorageFactory = self._select("odradek_register_storage", name)
        return result

    def metadata(self, name: str) -> MetadataFactory:
        result: MetadataFactory = self._select("odradek_register_metadata", name)
        return result

    def transports(self) -> list[TransportFactory]:
        return [i for _, i in self._by_name("odradek_register_transports", lambda t: t.name).values()]

    def transport(self, name: str) -> TransportFactory:
        result: TransportFactory = self._select("odradek_register_transports", name)
        return result

    def transport_for(self, security_protocol: str) -> TransportFactory:
        """The transport serving ``security_protocol`` (PLAINTEXT, SSL, ...)."""
        for t in self.transports():
            if security_protocol in t.security_protocols:
                return t
        raise PluginError(f"no transport plugin serves security protocol {security_protocol!r}")

    def codecs(self) -> dict[int, Codec]:
        return {k: v for k, (_, v) in self._by_name("odradek_register_codecs", lambda c: c.id).items()}

    def partitioner(self, name: str) -> Partitioner:
        cls = self._select("odradek_register_partitioners", name)
        instance: Partitioner = cls()
        return instance

    def assignor(self, name: str) -> Assignor:
        cls = self._select("odradek_register_assignors", name)
        instance: Assignor = cls()
        return instance

    def assignor_names(self) -> list[str]:
        return sorted(self._by_name("odradek_register_assignors", lambda a: a.name))

    # -- introspection -------------------------------------------------------------------------
    def describe(self) -> list[PluginInfo]:
        dists = {ep.name: ep.dist for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.dist is not None}
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if name is None or plugin is None:
                continue
            roles: list[str] = []
            offers: list[str] = []
            for hook_name, role in _HOOK_ROLES.items():
                fn = getattr(plugin, hook_name, None)
                if fn is None:
                    continue
                roles.append(role)
                for item in fn() or ():
                    label = getattr(item, "name", None)
                    offers.append(f"{role}:{label}")
            dist = dists.get(name)
            infos.append(
                PluginInfo(
                    name=name,
                    module=getattr(plugin, "__name__", type(plugin).__name__),
                    distribution=dist.name if dist is not None else "-",
                    version=dist.version if dist is not None else "-",
                    roles=tuple(roles),
                    offers=tuple(offers),
                )
            )
        return infos


def load_plugins(
    *,
    autoload: bool | None = None,
    extra: Sequence[str | types.ModuleType | object] = (),
    disabled: Sequence[str] = (),
) -> Plugins:
    """Build a manager and wrap it: the usual entry point for embedders and the CLI."""
    return Plugins(build_plugin_manager(autoload=autoload, extra=extra, disabled=disabled))


@cache
def default_plugins() -> Plugins:
    """A process-wide :class:`Plugins` built on first use (never at import time).

    Clients that are not given a manager (e.g. odradek's client inside a Spark executor) use it
    to find codecs, partitioners and assignors.
    """
    return load_plugins()
