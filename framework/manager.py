"""Building the plugin manager and resolving plugins by role and name.

The manager is built by :func:`build_plugin_manager`, never at import time, so tests and embedders
build as many independent ones as they like. Load order (written down because it matters):

1. hook specs (:mod:`odradek.hookspecs`);
2. entry points of group ``odradek`` -- built-ins are registered there too, from the ``odradek``
   distribution. With ``ODRADEK_DISABLE_PLUGIN_AUTOLOAD=1`` only the ``odradek`` distribution's own
   entry points load; third-party ones must then be named explicitly;
3. plugins named explicitly (the ``plugins`` config key or the ``extra`` argument): an entry-point
   name, a module path, or a module object.

Names in ``plugins.disabled`` are skipped before their entry point is imported. An entry-point
name two distributions offer, a disabled or extra name that matches nothing, and a hook
implementation odradek would get wrong (a typo, a missing ``@hookimpl``, a wrapper) are errors
naming the plugin and its distribution.

Roles are then resolved by name (``storage = "segment"``): :class:`Plugins` calls each
implementation, checks what it returned, merges what every plugin registered, refuses duplicates
with an error naming both plugins, and names the available choices when the selected one is
missing. ``ODRADEK_TRACE_HOOKS=1`` traces hook calls to stderr.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

import pluggy

from . import hookspecs
from .config import BROKER_KEYS, plugin_selection
from .errors import OdradekError
from .interfaces import (
    Assignor,
    Codec,
    ConfigKey,
    MetadataFactory,
    Partitioner,
    RemoteStorageFactory,
    ServerAssignor,
    StorageFactory,
    TransportFactory,
)
from .records import takes_max_size
from .replica_selector import ReplicaSelector, selector_name
from .security.authorizer import AuthorizerFactory, authorizer_name
from .security.mechanism import SaslMechanism

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
    #: why a hook of this plugin could not be listed (it raised or returned the wrong thing)
    problems: tuple[str, ...] = ()


#: the config key that selects a hook's item, where it is not the role's name
_HOOK_SETTINGS = {
    "odradek_register_remote_storage": "remote.log.storage.manager",
    "odradek_register_replica_selectors": "replica.selector.class",
}

_HOOK_ROLES = {
    "odradek_config_keys": "config",
    "odradek_register_storage": "storage",
    "odradek_register_remote_storage": "remote storage",
    "odradek_register_transports": "transport",
    "odradek_register_metadata": "metadata",
    "odradek_register_codecs": "compression",
    "odradek_register_partitioners": "partitioner",
    "odradek_register_assignors": "assignor",
    "odradek_register_server_assignors": "server assignor",
    "odradek_register_replica_selectors": "replica selector",
    "odradek_register_sasl_mechanisms": "SASL mechanism",
    "odradek_register_authorizers": "authorizer",
}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


class PluginManager(pluggy.PluginManager):
    """pluggy's manager plus where each plugin came from, so errors name its distribution."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        #: plugin name -> "distribution 'x'" or "module m" (absent for in-process objects)
        self.origins: dict[str, str] = {}
        #: names of plugins that ship with odradek (they win a security protocol; see transport_for)
        self.builtin: set[str] = set()


def _dist_name(ep: EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else "?"


@cache
def _builtin_modules() -> frozenset[str]:
    """The modules odradek's own entry points name: a plugin loaded from one of them by module
    path (as unit tests do) is still a built-in."""
    return frozenset(ep.value for ep in entry_points(group=ENTRY_POINT_GROUP) if _dist_name(ep) == BUILTIN_DISTRIBUTION)


def _entry_points_by_name() -> dict[str, list[EntryPoint]]:
    """Entry points of group ``odradek`` by name; two pointing at one module count once."""
    out: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        same = out.setdefault(ep.name, [])
        if all(other.value != ep.value for other in same):
            same.append(ep)
    return out


def _only(name: str, candidates: Sequence[EntryPoint]) -> EntryPoint:
    """The one entry point named ``name``: importlib.metadata would hand back either one of two
    distributions' entry points with one name, so which plugin runs would depend on sys.path."""
    if len(candidates) > 1:
        a, b = candidates[0], candidates[1]
        raise PluginError(
            f"entry point {name!r} of group {ENTRY_POINT_GROUP!r} is offered by both distribution "
            f"{_dist_name(a)!r} ({a.value}) and distribution {_dist_name(b)!r} ({b.value}); "
            "uninstall one, or rename one distribution's entry point"
        )
    return candidates[0]


def _load_module(spec: str) -> types.ModuleType:
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (spec == exc.name or spec.startswith(exc.name + ".")):
            raise PluginError(
                f"plugin {spec!r} (plugins) is neither an entry point of group {ENTRY_POINT_GROUP!r} "
                "nor an importable module; install it or fix the name"
            ) from exc
        raise PluginError(f"plugin module {spec!r} cannot be imported: {exc}") from exc
    except Exception as exc:  # a module raising on import is named, not a traceback
        raise PluginError(f"plugin module {spec!r} failed to load: {exc!r}") from exc


def build_plugin_manager(
    *,
    autoload: bool | None = None,
    extra: Iterable[str | types.ModuleType | object] = (),
    disabled: Iterable[str] = (),
    trace: bool | None = None,
    entry_points_enabled: bool = True,
) -> PluginManager:
    """A new plugin manager with specs, entry points and the named extra plugins registered.

    ``autoload`` defaults to "not ``ODRADEK_DISABLE_PLUGIN_AUTOLOAD``"; ``trace`` to
    ``ODRADEK_TRACE_HOOKS``. ``extra`` items are entry-point names, module paths or objects.
    ``disabled`` names are never loaded (so a plugin that fails on import can be disabled); a
    disabled name that is neither an entry point nor an ``extra`` plugin is an error, as a typo
    would otherwise leave the plugin it meant running. ``entry_points_enabled=False`` loads no
    entry point at all, only ``extra`` (for unit tests that assemble exactly the plugins they
    exercise).
    """
    pm = PluginManager()
    pm.add_hookspecs(hookspecs)
    if autoload is None:
        autoload = not _env_flag(DISABLE_AUTOLOAD_ENV)
    off = list(dict.fromkeys(disabled))
    eps = _entry_points_by_name()
    if entry_points_enabled:
        for name, candidates in eps.items():
            eligible = candidates if autoload else [ep for ep in candidates if _dist_name(ep) == BUILTIN_DISTRIBUTION]
            if eligible and name not in off:
                _register_entry_point(pm, _only(name, eligible))
    extra_names: set[str] = set()
    for item in extra:
        name = item if isinstance(item, str) else getattr(item, "__name__", None) or repr(item)
        extra_names.add(name)
        if name in off or pm.has_plugin(name):
            continue
        if not isinstance(item, str):
            _register(pm, item, name)
        elif name in eps:
            _register_entry_point(pm, _only(name, eps[name]))
        else:
            module = _load_module(name)
            if pm.is_registered(module):  # named by module path, already loaded by its entry point
                continue
            _register(pm, module, name, f"module {name}")
    unknown = [name for name in off if name not in eps and name not in extra_names]
    if unknown:
        known = ", ".join(sorted(set(eps) | extra_names)) or "none"
        raise PluginError(
            f"cannot disable plugin {unknown[0]!r} (plugins.disabled): no plugin has that name (known: {known})"
        )
    if trace if trace is not None else _env_flag(TRACE_ENV):
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    return pm


def _register_entry_point(pm: PluginManager, ep: EntryPoint) -> None:
    dist = _dist_name(ep)
    try:
        plugin = ep.load()
    except Exception as exc:  # a broken third-party plugin must be named, not crash anonymously
        raise PluginError(
            f"plugin {ep.name!r} ({ep.value}, from distribution {dist!r}) failed to load: {exc!r}; "
            f"uninstall it or disable it (plugins.disabled = [{ep.name!r}])"
        ) from exc
    _register(pm, plugin, ep.name, f"distribution {dist!r}")
    if dist == BUILTIN_DISTRIBUTION:
        pm.builtin.add(ep.name)


def _label(pm: pluggy.PluginManager, name: str) -> str:
    origin = pm.origins.get(name) if isinstance(pm, PluginManager) else None
    return f"plugin {name!r} ({origin})" if origin else f"plugin {name!r}"


#: hookimpl options that need pluggy's own hook calling, which odradek does not use (see _collect)
_UNSUPPORTED_OPTIONS = ("wrapper", "hookwrapper", "tryfirst", "trylast")


def _check_hookimpls(pm: pluggy.PluginManager, plugin: object, label: str) -> None:
    """Refuse what pluggy would register but odradek would then get wrong.

    Checked are the routines a plugin defines: one marked ``@hookimpl`` must name a known hook (a
    typo, with or without the ``odradek_`` prefix, is refused instead of never being called) and
    use no ordering or wrapper option; one named like a hook must be marked, or pluggy ignores it.
    Modules, classes and constants a plugin happens to bind under an ``odradek_`` name (``import
    odradek_memory_storage.engine``) are not hook implementations and are left alone."""
    for attr in dir(plugin):
        opts = pm.parse_hookimpl_opts(plugin, attr)
        if opts is None:
            if attr in _HOOK_ROLES and inspect.isroutine(getattr(plugin, attr, None)):
                raise PluginError(
                    f"{label} defines {attr}() without @hookimpl, so it would never be called; "
                    "decorate it with odradek.hookspecs.hookimpl"
                )
            continue
        hook = opts.get("specname") or attr
        if hook not in _HOOK_ROLES:
            raise PluginError(
                f"{label} implements unknown hook {hook!r} (a typo?); known hooks: {', '.join(_HOOK_ROLES)}"
            )
        used = [option for option in _UNSUPPORTED_OPTIONS if opts.get(option)]
        if used:
            raise PluginError(
                f"{label} marks {attr}() @hookimpl({used[0]}=True): odradek calls every implementation "
                "itself and merges their lists by name, so wrappers and tryfirst/trylast are not supported"
            )


def _register(pm: PluginManager, plugin: object, name: str, origin: str = "") -> None:
    if origin:
        pm.origins[name] = origin
    if getattr(plugin, "__name__", None) in _builtin_modules():
        pm.builtin.add(name)
    label = _label(pm, name)
    _check_hookimpls(pm, plugin, label)
    try:
        pm.register(plugin, name=name)
        pm.check_pending()
    except ValueError as exc:
        raise PluginError(f"{label} conflicts with an already registered one: {exc}") from exc
    except pluggy.PluginValidationError as exc:
        detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise PluginError(f"{label} has an invalid hook implementation: {detail}") from exc


def _is_sequence(value: object) -> TypeGuard[Sequence[Any]]:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


def _named(item: Any) -> str | None:
    name = getattr(item, "name", None)
    return None if isinstance(name, str) and name else "its name is not a non-empty string"


def _factory_problem(item: Any) -> str | None:
    return _named(item) or (None if callable(getattr(item, "create", None)) else "it has no callable create")


def _sasl_mechanism_problem(item: Any) -> str | None:
    name = getattr(item, "name", None)
    if not isinstance(name, str) or not name or name != name.upper():
        return "its name is not an upper-case SASL mechanism name"
    return None if callable(getattr(item, "server", None)) else "it has no callable server"


def _transport_problem(item: Any) -> str | None:
    protocols = getattr(item, "security_protocols", None)
    if not _is_sequence(protocols) or not all(isinstance(p, str) for p in protocols):
        return "its security_protocols is not a list of strings"
    for attr in ("listener", "connector"):
        if not callable(getattr(item, attr, None)):
            return f"it has no callable {attr}"
    return _named(item)


def _codec_problem(item: Any) -> str | None:
    codec_id = getattr(item, "id", None)
    if isinstance(codec_id, bool) or not isinstance(codec_id, int) or not 1 <= codec_id <= 7:
        return "its id is not an integer from 1 to 7 (the batch attributes' compression bits)"
    for attr in ("compress", "decompress"):
        if not callable(getattr(item, attr, None)):
            return f"it has no callable {attr}"
    return _named(item)


def _class_problem(*methods: str) -> Callable[[Any], str | None]:
    def problem(item: Any) -> str | None:
        if not isinstance(item, type):
            return "it is not a class (the kernel makes one instance per client)"
        for attr in methods:
            if not callable(getattr(item, attr, None)):
                return f"it has no method {attr}"
        return _named(item)

    return problem


def _config_key_problem(item: Any) -> str | None:
    if not isinstance(item, ConfigKey):
        return "it is not an odradek.interfaces.ConfigKey"
    if not isinstance(item.type, type):
        return f"its type {item.type!r} is not a type (int, str, ...)"
    return _named(item)


#: What each hook's items must look like: the kernel would otherwise fail far from the plugin at
#: fault (an AttributeError when a broker selects its storage), or not at all until a client uses it.
_ITEM_CHECKS: dict[str, tuple[str, Callable[[Any], str | None]]] = {
    "odradek_config_keys": ("a ConfigKey", _config_key_problem),
    "odradek_register_storage": ("a StorageFactory", _factory_problem),
    "odradek_register_remote_storage": ("a RemoteStorageFactory", _factory_problem),
    "odradek_register_transports": ("a TransportFactory", _transport_problem),
    "odradek_register_metadata": ("a MetadataFactory", _factory_problem),
    "odradek_register_codecs": ("a codec", _codec_problem),
    "odradek_register_partitioners": ("a partitioner class", _class_problem("partition", "on_new_batch")),
    "odradek_register_assignors": ("an assignor class", _class_problem("assign")),
    "odradek_register_server_assignors": ("a server assignor class", _class_problem("assign")),
    "odradek_register_replica_selectors": ("a replica selector class", _class_problem("select")),
    "odradek_register_sasl_mechanisms": ("a SaslMechanism", _sasl_mechanism_problem),
    "odradek_register_authorizers": ("an AuthorizerFactory", _factory_problem),
}


_log = logging.getLogger(__name__)
_WARNED_UNBOUNDED: set[tuple[str, int]] = set()


def _warn_if_unbounded(codec: Codec, label: str) -> None:
    """Once per codec: a ``decompress`` without ``max_size`` (written before the bound existed)
    still works, but the broker can only check a produced batch's size after inflating it all."""
    if takes_max_size(codec) or (label, codec.id) in _WARNED_UNBOUNDED:
        return
    _WARNED_UNBOUNDED.add((label, codec.id))
    _log.warning(
        "codec %r (%s) has no max_size in decompress: batches it reads are inflated completely before "
        "message.max.decompressed.bytes is checked (see docs/plugins.md)",
        codec.name,
        label,
    )


def _merge_key(hook_name: str) -> Callable[[Any], Any]:
    """What two items must not share: a codec's id (the batch attributes carry it), else the name."""
    if hook_name == "odradek_register_codecs":
        return lambda codec: codec.id
    return lambda item: item.name


class Plugins:
    """Role-by-name resolution over a plugin manager: what the kernel and clients ask."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm

    def label(self, plugin_name: str) -> str:
        """``plugin 'x' (distribution 'y')``: how errors name a plugin."""
        return _label(self.pm, plugin_name)

    def is_builtin(self, plugin_name: str) -> bool:
        return isinstance(self.pm, PluginManager) and plugin_name in self.pm.builtin

    # -- collection with provenance -----------------------------------------------------------
    def _call(self, hook_name: str, impl: pluggy.HookImpl) -> list[Any]:
        """One implementation's items, checked: a plugin that raises or returns the wrong thing
        is named here rather than surfacing as a traceback wherever the items are used."""
        trace = self.pm.trace.root.get("hook")
        trace(hook_name, impl.plugin_name)
        try:
            items = impl.function()
        except Exception as exc:
            raise PluginError(f"{self.label(impl.plugin_name)} failed in {hook_name}(): {exc!r}") from exc
        trace("finish", hook_name, impl.plugin_name, "->", items)
        what, problem = _ITEM_CHECKS[hook_name]
        if not _is_sequence(items):
            raise PluginError(
                f"{self.label(impl.plugin_name)} returned {items!r} from {hook_name}(); "
                f"expected a list, each item {what}"
            )
        for item in items:
            reason = problem(item)
            if reason is not None:
                raise PluginError(
                    f"{self.label(impl.plugin_name)} returned {item!r} from {hook_name}(), "
                    f"which is not {what}: {reason}"
                )
        return list(items)

    def _collect(self, hook_name: str) -> list[tuple[str, Any]]:
        # each implementation is called on its own (not through pluggy's hook caller) to know
        # which plugin offered what; registration order
        hook = getattr(self.pm.hook, hook_name)
        return [(impl.plugin_name, item) for impl in hook.get_hookimpls() for item in self._call(hook_name, impl)]

    def _merge(self, hook_name: str, key: Callable[[Any], Any]) -> tuple[dict[Any, tuple[str, Any]], list[str]]:
        """Items by key, and a message for every key offered twice."""
        merged: dict[Any, tuple[str, Any]] = {}
        conflicts: list[str] = []
        role = _HOOK_ROLES[hook_name]
        for plugin, item in self._collect(hook_name):
            k = key(item)
            if k not in merged:
                merged[k] = (plugin, item)
                continue
            other = merged[k][0]
            what = f"{role} {k!r}" + (f" ({item.name})" if role == "compression" and k != item.name else "")
            if other == plugin:
                conflicts.append(f"{what} is offered twice by {self.label(plugin)}; a plugin offers each name once")
            else:
                conflicts.append(
                    f"{what} is offered by both {self.label(other)} and {self.label(plugin)}; disable one "
                    f"(with everything it offers): plugins.disabled = [{other!r}] or [{plugin!r}] in the "
                    f"broker config, or ODRADEK_PLUGINS_DISABLED={other} or ={plugin} in the environment "
                    "of odradek serve and odradek's clients"
                )
        return merged, conflicts

    def _by_name(self, hook_name: str, key: Callable[[Any], Any]) -> dict[Any, tuple[str, Any]]:
        merged, conflicts = self._merge(hook_name, key)
        if conflicts:
            raise PluginError(conflicts[0])
        return merged

    def _select(self, hook_name: str, name: str) -> Any:
        return self._select_with_plugin(hook_name, name)[1]

    def _select_with_plugin(self, hook_name: str, name: str) -> tuple[str, Any]:
        merged = self._by_name(hook_name, lambda i: i.name)
        if name not in merged:
            role = _HOOK_ROLES[hook_name]
            choices = ", ".join(sorted(merged)) or "none"
            raise PluginError(
                f"no {role} plugin named {name!r} is loaded (available: {choices}); "
                f"install the plugin or fix the {_HOOK_SETTINGS.get(hook_name, role)!r} setting"
            )
        return merged[name]

    # -- roles ---------------------------------------------------------------------------------
    def config_keys(self) -> list[ConfigKey]:
        """Every plugin's config keys (a key whose ``type`` is not a class, such as the string
        ``"int"``, was refused naming the plugin when its hook was called: see ``_ITEM_CHECKS``)."""
        return [item for _, item in self._by_name("odradek_config_keys", lambda k: k.name).values()]

    def storage(self, name: str) -> StorageFactory:
        result: StorageFactory = self._select("odradek_register_storage", name)
        return result

    def remote_storage(self, name: str) -> RemoteStorageFactory:
        """The remote storage (tiered storage) named by ``remote.log.storage.manager``."""
        result: RemoteStorageFactory = self._select("odradek_register_remote_storage", name)
        return result

    def metadata(self, name: str) -> MetadataFactory:
        result: MetadataFactory = self._select("odradek_register_metadata", name)
        return result

    def sasl_mechanisms(self) -> dict[str, SaslMechanism]:
        """Every SASL mechanism by name (``PLAIN``, ``SCRAM-SHA-256`` ...); a name offered by
        two plugins is an error naming both."""
        return {k: v for k, (_, v) in self._by_name("odradek_register_sasl_mechanisms", lambda m: m.name).items()}

    def authorizer(self, name: str) -> AuthorizerFactory:
        """The authorizer ``authorizer.class.name`` selects (a Kafka class name of its ACL
        authorizers is the built-in ``acl``)."""
        result: AuthorizerFactory = self._by_config_name(
            "odradek_register_authorizers",
            authorizer_name(name),
            f"authorizer.class.name = {name!r}: no authorizer plugin offers it",
            "Kafka's kafka.security.authorizer.AclAuthorizer / org.apache.kafka.metadata.authorizer."
            "StandardAuthorizer for acl; empty for none",
        )
        return result

    def _by_config_name(self, hook: str, key: str, refusal: str, aliases: str) -> Any:
        """What a plugin registers under ``key`` (a config value after its Kafka aliases are
        mapped) through ``hook``; else a :class:`PluginError` that starts with ``refusal`` and
        lists what is available, then ``aliases``."""
        merged = self._by_name(hook, lambda item: item.name)
        chosen = merged.get(key)
        if chosen is None:
            choices = ", ".join(sorted(merged)) or "none"
            raise PluginError(f"{refusal} (available: {choices}, or {aliases})")
        return chosen[1]

    def transports(self) -> list[TransportFactory]:
        return [i for _, i in self._by_name("odradek_register_transports", lambda t: t.name).values()]

    def transport(self, name: str) -> TransportFactory:
        result: TransportFactory = self._select("odradek_register_transports", name)
        return result

    def transport_for(self, security_protocol: str, name: str = "") -> TransportFactory:
        """The transport for ``security_protocol`` (PLAINTEXT, SSL, ...) under the ``transport``
        setting ``name``: the broker's listeners and its own connections to other brokers use it.

        A named transport must serve the protocol. With no name, the one transport serving it is
        chosen; when several do, the built-in one wins (installing a plugin never silently takes
        over a listener), and without a built-in among them the choice is an error naming them.
        """
        if name:
            selected: tuple[str, TransportFactory] = self._select_with_plugin("odradek_register_transports", name)
            plugin, chosen = selected
            if security_protocol not in chosen.security_protocols:
                raise PluginError(
                    f"transport {name!r} ({self.label(plugin)}) does not serve security protocol "
                    f"{security_protocol!r} (it serves {', '.join(chosen.security_protocols) or 'none'}); "
                    "fix the 'transport' setting or the listener"
                )
            return chosen
        serving = self._serving(security_protocol)
        if not serving:
            raise PluginError(f"no transport plugin serves security protocol {security_protocol!r}")
        builtin = [(p, t) for p, t in serving if self.is_builtin(p)]
        if len(serving) == 1 or len(builtin) == 1:
            picked: TransportFactory = (builtin or serving)[0][1]
            return picked
        raise PluginError(self._ambiguity(security_protocol, serving))

    def _serving(self, security_protocol: str) -> list[tuple[str, TransportFactory]]:
        merged = self._by_name("odradek_register_transports", lambda t: t.name)
        return [(p, t) for p, t in merged.values() if security_protocol in t.security_protocols]

    def _ambiguity(self, security_protocol: str, serving: list[tuple[str, TransportFactory]]) -> str:
        (p1, t1), (p2, t2) = serving[0], serving[1]
        return (
            f"security protocol {security_protocol!r} is served by both transport {t1.name!r} "
            f"({self.label(p1)}) and transport {t2.name!r} ({self.label(p2)}); choose one with the "
            "'transport' setting or disable one (plugins.disabled)"
        )

    def codecs(self) -> dict[int, Codec]:
        """Every codec by id. Two codecs with one id, or with one name (``compression.type``
        selects by name, so a third-party id-7 codec called ``gzip`` would make ``gzip`` mean
        different codecs to the broker and to the producer), are errors naming both plugins."""
        by_id = self._by_name("odradek_register_codecs", lambda c: c.id)
        self._by_name("odradek_register_codecs", lambda c: c.name)
        for plugin_name, codec in by_id.values():
            _warn_if_unbounded(codec, self.label(plugin_name))
        return {k: v for k, (_, v) in by_id.items()}

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

    def server_assignor(self, name: str) -> ServerAssignor:
        """A KIP-848 server-side assignor by name (``group.consumer.assignors``)."""
        cls = self._select("odradek_register_server_assignors", name)
        instance: ServerAssignor = cls()
        return instance

    def replica_selector(self, name: str) -> ReplicaSelector:
        """The KIP-392 replica selector ``replica.selector.class`` names (Kafka's class names of
        its selectors are the built-in ``rack-aware`` and ``leader``)."""
        factory = self._by_config_name(
            "odradek_register_replica_selectors",
            selector_name(name),
            f"replica.selector.class = {name!r}: no replica selector plugin offers it",
            "Kafka's org.apache.kafka.common.replica.RackAwareReplicaSelector / LeaderSelector for "
            "rack-aware / leader; empty for none",
        )
        instance: ReplicaSelector = factory()
        return instance

    # -- introspection -------------------------------------------------------------------------
    def describe(self) -> list[PluginInfo]:
        """Every registered plugin with what its registered hook implementations offer (the same
        calls, checks and tracing as selection, so this lists exactly what can be selected); a
        hook that fails is reported in ``problems`` instead of stopping the listing."""
        dists = {ep.name: ep.dist for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.dist is not None}
        offered: dict[str, list[tuple[str, str]]] = {}
        problems: dict[str, list[str]] = {}
        for hook_name, role in _HOOK_ROLES.items():
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                found = offered.setdefault(impl.plugin_name, [])
                try:
                    items = self._call(hook_name, impl)
                except PluginError as exc:
                    problems.setdefault(impl.plugin_name, []).append(str(exc))
                    items = []
                found.append((role, ""))
                found.extend((role, str(getattr(item, "name", item))) for item in items)
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if name is None or plugin is None:
                continue
            mine = offered.get(name, [])
            dist = dists.get(name) if isinstance(self.pm, PluginManager) and name in self.pm.origins else None
            infos.append(
                PluginInfo(
                    name=name,
                    module=getattr(plugin, "__name__", type(plugin).__name__),
                    distribution=dist.name if dist is not None else "-",
                    version=dist.version if dist is not None else "-",
                    roles=tuple(dict.fromkeys(role for role, _ in mine)),
                    offers=tuple(f"{role}:{label}" for role, label in mine if label),
                    problems=tuple(problems.get(name, ())),
                )
            )
        return infos

    def conflicts(self) -> list[str]:
        """Every conflict that would make selecting something fail: a name (or codec id) offered
        twice, a security protocol served by several transports none of them built in."""
        out: list[str] = []
        for hook_name in _HOOK_ROLES:
            key_fns: list[Callable[[Any], Any]] = [lambda i: i.name]
            if hook_name == "odradek_register_codecs":
                key_fns.insert(0, lambda c: c.id)  # one id or one name: both are conflicts
            try:
                for key in key_fns:
                    out.extend(self._merge(hook_name, key)[1])
            except PluginError:
                continue  # a failing hook: describe() reports it against its plugin
        try:
            keys = self._collect("odradek_config_keys")
        except PluginError:
            keys = []
        builtin_keys = {k.name for k in BROKER_KEYS}
        out += [
            f"config key {k.name!r} of {self.label(p)} redefines a built-in key"
            for p, k in keys
            if k.name in builtin_keys
        ]
        try:
            transports = self._by_name("odradek_register_transports", lambda t: t.name).values()
        except PluginError:
            return out
        for protocol in sorted({p for _, t in transports for p in t.security_protocols}):
            serving = self._serving(protocol)
            if len(serving) > 1 and sum(self.is_builtin(p) for p, _ in serving) != 1:
                out.append(self._ambiguity(protocol, serving))
        return out


def load_plugins(
    *,
    autoload: bool | None = None,
    extra: Sequence[str | types.ModuleType | object] = (),
    disabled: Sequence[str] = (),
) -> Plugins:
    """Build a manager and wrap it: the usual entry point for embedders and the CLI."""
    return Plugins(build_plugin_manager(autoload=autoload, extra=extra, disabled=disabled))


def configured_plugins(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
    env: Mapping[str, str] | None = None,
) -> Plugins:
    """The plugins a broker config selects: its ``plugins`` loaded, its ``plugins.disabled`` never
    loaded, read from the file, ``ODRADEK_PLUGINS``/``ODRADEK_PLUGINS_DISABLED`` and overrides
    before the rest of the config (which the plugins' keys are needed to validate)."""
    extra, disabled = plugin_selection(path, overrides=overrides, env=env)
    return load_plugins(extra=extra, disabled=disabled)


@cache
def default_plugins() -> Plugins:
    """A process-wide :class:`Plugins` built on first use (never at import time).

    Clients that are not given a manager (e.g. odradek's client inside a Spark executor) use it
    to find codecs, partitioners and assignors. It honours ``ODRADEK_PLUGINS`` and
    ``ODRADEK_PLUGINS_DISABLED`` as a broker does, so one environment variable disables a
    conflicting plugin for ``odradek serve`` and the clients alike.
    """
    return configured_plugins()
