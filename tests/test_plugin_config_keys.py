"""A plugin's ConfigKey must have a class as its type: a string such as "int" is refused when the
plugin's keys are first read, naming the plugin (it used to be accepted and break later)."""

from __future__ import annotations

import types

import pytest

from odradek.config import load_config
from odradek.hookspecs import hookimpl
from odradek.interfaces import ConfigKey
from odradek.manager import PluginError, Plugins, build_plugin_manager


def _plugins(key: ConfigKey) -> Plugins:
    module = types.ModuleType("stringly")
    module.odradek_config_keys = hookimpl(lambda: [key])  # type: ignore[attr-defined]
    return Plugins(build_plugin_manager(entry_points_enabled=False, extra=[module]))


@pytest.mark.parametrize("bad_type", ["int", None, 3])
def test_a_config_key_whose_type_is_not_a_class_is_refused_naming_the_plugin(bad_type: object) -> None:
    plugins = _plugins(ConfigKey("stringly.retries", bad_type, 3, "Retries."))  # type: ignore[arg-type]
    refused = r"^plugin 'stringly' returned ConfigKey\(name='stringly.retries'.* its type .* is not a type"
    with pytest.raises(PluginError, match=refused):
        plugins.config_keys()
    with pytest.raises(PluginError, match=refused):
        load_config(env={}, plugins=plugins)


def test_a_config_key_with_a_class_is_accepted() -> None:
    plugins = _plugins(ConfigKey("stringly.retries", int, 3, "Retries."))
    assert load_config(env={}, plugins=plugins, overrides={"stringly.retries": "5"})["stringly.retries"] == 5
