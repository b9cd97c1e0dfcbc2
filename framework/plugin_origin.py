"""Which plugin, from which distribution, offers a named thing: for errors that name the culprit.

When a plugin's object misbehaves at run time (a partitioner returning a partition that does not
exist, an assignor handing out a partition twice), the
error must say which installed plugin to blame, so that the operator knows what to fix, update or
disable. These helpers find the plugin through the plugin manager, which names it with its
distribution (:meth:`odradek.manager.Plugins.label`); they run only on error paths, so they may
call hooks again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .manager import Plugins


def plugin_offering(plugins: Plugins, hook_name: str, label: object, *, attr: str = "name") -> str | None:
    """The name of the plugin whose ``hook_name`` implementation offers an item whose ``attr``
    (``name``; ``id`` for codecs) equals ``label``; None when no plugin offers it."""
    for impl in getattr(plugins.pm.hook, hook_name).get_hookimpls():
        try:
            items = impl.function()
        except Exception:  # reported where it is selected; here we only look for an owner
            continue
        if any(getattr(item, attr, None) == label for item in items or ()):
            return str(impl.plugin_name)
    return None


def origin(plugins: Plugins, hook_name: str, label: object, *, attr: str = "name") -> str:
    """``plugin 'x' (distribution 'y')`` for the plugin offering ``label`` (see
    :func:`plugin_offering`), or ``an unknown plugin`` when none can be found."""
    name = plugin_offering(plugins, hook_name, label, attr=attr)
    return plugins.label(name) if name is not None else "an unknown plugin"
