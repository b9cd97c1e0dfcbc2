"""Loading and selecting plugins: what a third-party author or an operator gets wrong, and the
errors that name the plugin (and its distribution) at fault.

Third-party distributions are made in a temporary directory (a ``*.dist-info`` with an
``entry_points.txt`` and a module next to it) put on ``sys.path`` for the test, or on
``PYTHONPATH`` for the CLI run as a subprocess, never installed into the venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.server import BrokerServer
from odradek.config import load_config, plugin_selection
from odradek.hookspecs import hookimpl
from odradek.interfaces import ConfigKey, StorageFactory, TransportFactory
from odradek.manager import PluginError, Plugins, build_plugin_manager

TCP = "odradek.plugins.transport_tcp.plugin"

GZIP_ALT = """
from odradek.hookspecs import hookimpl

class AltGzip:
    id = 1
    name = "gzip-alt"

    def compress(self, data, level=None):
        return bytes(data)

    def decompress(self, data):
        return bytes(data)

@hookimpl
def odradek_register_codecs():
    return [AltGzip()]
"""


def distribution(root: Path, name: str, entry_points: dict[str, str], modules: dict[str, str]) -> Path:
    """A distribution ``name`` under ``root`` offering ``entry_points`` in group ``odradek``."""
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[odradek]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    return root


def _module(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    for attr, value in attrs.items():
        setattr(mod, attr, value)
    return mod


def _plugins(*extra: object) -> Plugins:
    return Plugins(build_plugin_manager(entry_points_enabled=False, extra=extra))


def odradek_cli(*args: str, pythonpath: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ODRADEK_")} | env
    if pythonpath is not None:
        environ["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=120, env=environ
    )


# -- loading ------------------------------------------------------------------------------------


def test_a_disabled_plugin_is_never_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin that fails on import can be disabled: disabled names are skipped before loading."""
    distribution(tmp_path, "odr-boom", {"boom": "boom_on_import"}, {"boom_on_import": "raise RuntimeError('boom')"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"plugin 'boom' .*distribution 'odr-boom'.*boom"):
        build_plugin_manager()
    pm = build_plugin_manager(disabled=["boom"])
    assert not pm.has_plugin("boom") and "boom_on_import" not in sys.modules
    assert pm.has_plugin("compress")


def test_plugin_names_that_match_nothing_are_errors() -> None:
    with pytest.raises(PluginError, match=r"cannot disable plugin 'not_loaded_zz'.*plugins.disabled"):
        build_plugin_manager(disabled=["not_loaded_zz"])
    with pytest.raises(PluginError, match=r"'my_missing_plugin_zz' \(plugins\) is neither an entry point"):
        build_plugin_manager(entry_points_enabled=False, extra=["my_missing_plugin_zz"])
    # an entry point that is not loaded (autoload off) is still a name that can be disabled
    pm = build_plugin_manager(entry_points_enabled=False, extra=[TCP], disabled=["memory_storage", TCP])
    assert not pm.has_plugin(TCP)


def test_an_entry_point_name_offered_by_two_distributions_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    part = "from odradek.hookspecs import hookimpl\n"
    distribution(tmp_path, "odr-fnv-a", {"fnv_partitioner": "fnv_a"}, {"fnv_a": part})
    distribution(tmp_path, "odr-fnv-b", {"fnv_partitioner": "fnv_b"}, {"fnv_b": part})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"'fnv_partitioner'.*'odr-fnv-a' \(fnv_a\).*'odr-fnv-b' \(fnv_b\)"):
        build_plugin_manager()


def test_an_entry_point_shadowing_a_builtin_name_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    distribution(tmp_path, "odr-shadow", {"compress": "shadow_compress"}, {"shadow_compress": GZIP_ALT})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"'compress'.*'odradek'.*'odr-shadow'|'compress'.*'odr-shadow'.*'odradek'"):
        build_plugin_manager()
    assert build_plugin_manager(autoload=False).has_plugin("compress")  # only odradek's own is eligible


# -- registration checks --------------------------------------------------------------------------


def test_only_routines_are_checked_as_hook_implementations() -> None:
    """Modules, classes, constants and unmarked helpers under an ``odradek_`` name are fine."""
    factory = StorageFactory("mem2", create=lambda config: None)
    plugin = _module(
        "helpers",
        odradek_memory_storage=types.ModuleType("odradek_memory_storage"),  # import odradek_memory_storage...
        odradek_helper=lambda: 1,
        odradek_Engine=type("odradek_Engine", (), {}),
        odradek_VERSION="1",
        odradek_register_storage=hookimpl(lambda: [factory]),
    )
    assert _plugins(plugin).storage("mem2") is factory


def test_hook_implementation_mistakes_are_refused_naming_the_plugin() -> None:
    def takes_args(config: object) -> list[object]:
        return []

    cases: dict[str, tuple[str, object]] = {
        "register_storage": ("unknown hook 'register_storage'", hookimpl(lambda: [])),
        "odradek_register_storages": ("unknown hook 'odradek_register_storages'", hookimpl(lambda: [])),
        "odradek_register_codecs": ("without @hookimpl", lambda: []),
        "odradek_register_assignors": ("wrapper=True", hookimpl(wrapper=True)(lambda: (yield))),
        "odradek_register_partitioners": ("tryfirst=True", hookimpl(tryfirst=True)(lambda: [])),
        "odradek_register_metadata": ("invalid hook implementation", hookimpl(takes_args)),
    }
    for attr, (message, fn) in cases.items():
        with pytest.raises(PluginError, match=rf"plugin 'broken'.*{message}"):
            _plugins(_module("broken", **{attr: fn}))


def _broken(hook: str, result: Callable[[], Any]) -> types.ModuleType:
    return _module("broken", **{hook: hookimpl(result)})


def _explode() -> list[object]:
    raise ValueError("assignor hook exploded")


@pytest.mark.parametrize(
    ("hook", "result", "select", "message"),
    [
        ("odradek_register_partitioners", lambda: object(), lambda p: p.partitioner("x"), "expected a list"),
        ("odradek_register_storage", lambda: ["segment-ish"], lambda p: p.storage("x"), "not a StorageFactory"),
        ("odradek_register_metadata", lambda: [None], lambda p: p.metadata("x"), "not a MetadataFactory"),
        ("odradek_register_assignors", _explode, lambda p: p.assignor_names(), "ValueError.*exploded"),
        ("odradek_register_codecs", lambda: [types.SimpleNamespace(id=9)], lambda p: p.codecs(), "1 to 7"),
        ("odradek_config_keys", lambda: [ConfigKey("k", "int", 0, "")], lambda p: p.config_keys(), "not a type"),  # type: ignore[arg-type]
        (
            "odradek_register_transports",
            lambda: [TransportFactory("t", "PLAINTEXT", 1, 2)],
            lambda p: p.transports(),
            "security_protocols",
        ),
    ],
)
def test_a_broken_hook_result_is_an_error_naming_the_plugin(
    hook: str, result: Callable[[], Any], select: Callable[[Plugins], object], message: str
) -> None:
    plugins = _plugins(_broken(hook, result))
    with pytest.raises(PluginError, match=rf"plugin 'broken' .*{hook}.*{message}"):
        select(plugins)
    (info,) = plugins.describe()  # the listing goes on, with the problem against the plugin
    assert info.name == "broken" and message.split(".*")[0] in " ".join(info.problems)


def test_a_name_offered_twice_by_one_plugin_says_so() -> None:
    class Twice:
        name = "twice"

        def partition(self, *args: object) -> int:
            return 0

        def on_new_batch(self, *args: object) -> None:
            return None

    plugins = _plugins(_broken("odradek_register_partitioners", lambda: [Twice, Twice]))
    with pytest.raises(PluginError, match=r"partitioner 'twice' is offered twice by plugin 'broken'$|once"):
        plugins.partitioner("twice")


def test_a_codec_conflict_says_how_to_disable_either_plugin() -> None:
    gzip_alt = types.ModuleType("gzip_alt")
    exec(GZIP_ALT, gzip_alt.__dict__)
    plugins = _plugins("odradek.plugins.compress.plugin", gzip_alt)
    with pytest.raises(PluginError, match=r"compression 1 \(gzip-alt\) is offered by both") as err:
        plugins.codecs()
    assert "plugins.disabled = ['odradek.plugins.compress.plugin'] or ['gzip_alt']" in str(err.value)
    assert "ODRADEK_PLUGINS_DISABLED=" in str(err.value)
    assert any("compression 1" in c for c in plugins.conflicts())
    replaced = Plugins(build_plugin_manager(entry_points_enabled=False, extra=[gzip_alt]))
    assert replaced.codecs()[1].name == "gzip-alt"


def test_describe_lists_registered_implementations_and_is_traced(capsys: pytest.CaptureFixture[str]) -> None:
    pm = build_plugin_manager(entry_points_enabled=False, extra=["odradek.default_partitioners"], trace=True)
    (info,) = Plugins(pm).describe()
    assert info.roles == ("partitioner",) and "partitioner:murmur2" in info.offers and not info.problems
    assert "odradek_register_partitioners" in capsys.readouterr().err


# -- transport selection ----------------------------------------------------------------------------


def _transport_plugin(name: str, *protocols: str, connector: object = object) -> types.ModuleType:
    factory = TransportFactory(name, protocols, listener=object, connector=connector)
    return _module(f"{name}_plugin", odradek_register_transports=hookimpl(lambda: [factory]))


def test_the_builtin_transport_keeps_its_protocol_unless_named() -> None:
    plugins = _plugins(_transport_plugin("counting", "PLAINTEXT"), TCP)
    assert plugins.transport_for("PLAINTEXT").name == "tcp"
    assert plugins.transport_for("PLAINTEXT", "counting").name == "counting"
    assert not plugins.conflicts()
    with pytest.raises(PluginError, match=r"transport 'tcp' .*does not serve security protocol 'SSL'"):
        plugins.transport_for("SSL", "tcp")


def test_two_third_party_transports_for_one_protocol_is_an_error_naming_both() -> None:
    plugins = _plugins(_transport_plugin("a", "QUIC"), _transport_plugin("b", "QUIC"), TCP)
    with pytest.raises(PluginError, match=r"'QUIC' is served by both transport 'a' \(plugin 'a_plugin'\).*'b'"):
        plugins.transport_for("QUIC")
    assert plugins.transport_for("QUIC", "b").name == "b"
    assert any("'QUIC'" in c for c in plugins.conflicts())


def test_the_broker_connects_to_other_brokers_through_its_listeners_transport(tmp_path: Path) -> None:
    """Replica fetchers and the transaction marker channel use ``BrokerServer._connector``."""
    plugins = _plugins(_transport_plugin("counting", "PLAINTEXT", connector=lambda config: "counting"), TCP)
    config = load_config(env={}, plugins=plugins, overrides={"transport": "counting", "log.dirs": str(tmp_path)})
    assert BrokerServer(config, plugins)._connector() == "counting"
    default = load_config(env={}, plugins=plugins, overrides={"log.dirs": str(tmp_path)})
    assert type(BrokerServer(default, plugins)._connector()).__module__.startswith("odradek.plugins.transport_tcp")


# -- the config's plugin keys, the CLI and the clients --------------------------------------------------


def test_plugin_keys_are_read_before_the_config(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('plugins = ["a"]\nunknown.key = 1\n')
    env = {"ODRADEK_PLUGINS_DISABLED": "b,c"}
    assert plugin_selection(path, env=env) == (["a"], ["b", "c"])
    assert plugin_selection(path, env=env, overrides=[("plugins", "d")]) == (["d"], ["b", "c"])


FLAVOUR = """
from odradek.hookspecs import hookimpl
from odradek.interfaces import ConfigKey

@hookimpl
def odradek_config_keys():
    return [ConfigKey("example.flavour", str, "vanilla", "Flavour.")]
"""


def test_the_config_plugins_key_loads_a_plugin_whose_keys_the_file_uses(tmp_path: Path) -> None:
    root = distribution(tmp_path / "site", "odr-flavour", {"flavour": "odr_flavour"}, {"odr_flavour": FLAVOUR})
    config = tmp_path / "broker.toml"
    config.write_text('plugins = ["flavour"]\nexample.flavour = "mint"\n')
    r = odradek_cli(
        "config", "show", "--json", "--config", str(config), pythonpath=root, ODRADEK_DISABLE_PLUGIN_AUTOLOAD="1"
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["example.flavour"] == "mint"


def test_serve_refuses_plugin_names_that_match_nothing(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text(f'plugins.disabled = ["not_loaded_zz"]\nlog.dirs = ["{tmp_path}"]\n')
    r = odradek_cli("serve", "--config", str(config))
    assert r.returncode == 2 and "odradek: error: cannot disable plugin 'not_loaded_zz'" in r.stderr
    r = odradek_cli("serve", "--config", str(config), "--set", "plugins.disabled=", "--set", "plugins=zz_missing")
    assert r.returncode == 2 and "odradek: error: plugin 'zz_missing' (plugins)" in r.stderr


def test_odradek_plugins_shows_conflicts_and_clients_honour_the_environment(tmp_path: Path) -> None:
    root = distribution(tmp_path, "odr-gzip-alt", {"gzip_alt": "odr_gzip_alt"}, {"odr_gzip_alt": GZIP_ALT})
    r = odradek_cli("plugins", pythonpath=root)
    assert r.returncode == 1 and "gzip_alt" in r.stdout
    assert "odradek: error: compression 1 (gzip" in r.stderr and "'gzip_alt'" in r.stderr and "'compress'" in r.stderr
    assert odradek_cli("plugins", "--set", "plugins.disabled=gzip_alt", pythonpath=root).returncode == 0
    client = "from odradek.manager import default_plugins; print(default_plugins().codecs()[1].name)"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ODRADEK_")} | {"PYTHONPATH": str(root)}
    run = subprocess.run(
        [sys.executable, "-c", client],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ | {"ODRADEK_PLUGINS_DISABLED": "compress"},
    )
    assert run.stdout.strip() == "gzip-alt", run.stderr


def test_odradek_plugins_reports_a_broken_hook_without_a_traceback(tmp_path: Path) -> None:
    broken = """
    from odradek.hookspecs import hookimpl

    @hookimpl
    def odradek_register_partitioners():
        return object()
    """
    root = distribution(tmp_path, "odr-broken", {"broken": "odr_broken_hook"}, {"odr_broken_hook": broken})
    r = odradek_cli("plugins", "--json", pythonpath=root)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "odradek: error: plugin 'broken' (distribution 'odr-broken') returned <object" in r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert rows["broken"]["distribution"] == "odr-broken" and rows["broken"]["problems"]


def test_an_invalid_hook_implementation_is_reported_in_one_line() -> None:
    def takes_args(config: object) -> list[object]:
        return []

    with pytest.raises(PluginError) as info:
        _plugins(_module("broken", odradek_register_metadata=hookimpl(takes_args)))
    assert "\n" not in str(info.value) and "plugin 'broken'" in str(info.value)


def test_naming_an_autoloaded_plugin_by_its_module_path_is_a_no_op() -> None:
    """``plugins = ["odradek.plugins.transport_tcp.plugin"]`` names a plugin its entry point has
    already loaded: nothing to do (pluggy's "already registered" error dumped its registry)."""
    plugins = Plugins(build_plugin_manager(extra=[TCP]))
    assert plugins.transport("tcp").name == "tcp"


def test_a_plugin_redefining_a_built_in_config_key_is_named() -> None:
    plugins = _plugins(_module("keys", odradek_config_keys=hookimpl(lambda: [ConfigKey("broker.id", int, 0, "")])))
    with pytest.raises(Exception, match=r"'broker.id' redefines a built-in key \(offered by plugin 'keys'\)"):
        load_config(env={}, plugins=plugins)


def test_config_reference_honours_the_plugin_settings(tmp_path: Path) -> None:
    """``odradek config reference`` lists the keys of the plugins a config loads, like ``serve``
    (it used to load the default plugins whatever the settings said)."""
    root = distribution(tmp_path / "site", "odr-flavour", {"flavour": "odr_flavour"}, {"odr_flavour": FLAVOUR})
    no_autoload = {"ODRADEK_DISABLE_PLUGIN_AUTOLOAD": "1"}
    r = odradek_cli("config", "reference", "--set", "plugins=flavour", pythonpath=root, **no_autoload)
    assert r.returncode == 0, r.stderr
    assert "example.flavour" in r.stdout
    r = odradek_cli("config", "reference", pythonpath=root, **no_autoload)
    assert r.returncode == 0 and "example.flavour" not in r.stdout


_WITHOUT_CLUSTER_LIBRARIES = (
    "import sys\n"
    "for name in ('kazoo', 'etcd3', 'grpc'):\n"
    "    sys.modules[name] = None  # as after a plain `pip install odradek`, without the zk/etcd extras\n"
    "from odradek.cli import main\n"
    "sys.exit(main())\n"
)


def test_a_broker_on_embedded_metadata_runs_without_the_cluster_libraries(tmp_path: Path) -> None:
    """The README's first command is a plain ``pip install -e .``: kazoo, etcd3 and grpc come
    only with the ``zk``/``etcd`` extras, yet every broker loads the meta_zk and meta_etcd
    plugins. They import their clients when a store is created, so a broker on the embedded
    metadata starts; choosing ZooKeeper without kazoo is a config error naming the extra."""
    import socket
    import subprocess
    import sys
    import time

    from odradek.testing.servers import free_port

    port = free_port()
    serve = [sys.executable, "-c", _WITHOUT_CLUSTER_LIBRARIES, "serve", "--set", f"log.dirs={tmp_path / 'data'}"]
    listeners = ["--set", f"listeners=PLAINTEXT://127.0.0.1:{port}"]
    broker = subprocess.Popen([*serve, *listeners], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert broker.poll() is None, broker.communicate()[0]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the broker did not listen within 60 s"
                time.sleep(0.1)
    finally:
        broker.terminate()
        broker.communicate(timeout=30)
    refused = subprocess.run(
        [*serve, *listeners, "--set", "metadata=zookeeper"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2, refused.stderr
    assert 'metadata = "zookeeper" needs kazoo: pip install "odradek[zk]"' in refused.stderr
