"""Every hook spec: documented with its exact signature, exercised by a test, resolvable by name.

The meta-tests (the last two) fail when a hook spec is added without documentation in
docs/plugins.md or without a ``test_hook_<name>`` test here.
"""

from __future__ import annotations

import inspect
import re
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from odradek import hookspecs
from odradek.config import load_config
from odradek.hookspecs import hookimpl
from odradek.interfaces import (
    AssignmentMember,
    AssignmentTopic,
    ConfigKey,
    MetadataFactory,
    RemoteStorageFactory,
    StorageFactory,
    TopicPartition,
    TransportFactory,
)
from odradek.manager import PluginError, Plugins, build_plugin_manager
from odradek.security.mechanism import SaslError, SaslMechanism
from odradek.testing import SaslMechanismConformance

ROOT = Path(__file__).resolve().parents[1]
HOOKS = sorted(n for n in dir(hookspecs) if n.startswith("odradek_"))


def _signature(name: str) -> str:
    return name + str(inspect.signature(getattr(hookspecs, name))).replace("'", "")


def _plugins(*extra: object) -> Plugins:
    return Plugins(build_plugin_manager(entry_points_enabled=False, extra=extra))


def _module(name: str, **hooks: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(mod, hook_name, hookimpl(fn))  # type: ignore[call-overload]
    return mod


def test_hook_odradek_config_keys() -> None:
    key = ConfigKey("example.flavour", str, "vanilla", "Flavour.", choices=("vanilla", "mint"))
    plugins = _plugins(_module("flavours", odradek_config_keys=lambda: [key]))
    assert load_config(env={}, plugins=plugins)["example.flavour"] == "vanilla"
    assert load_config(env={}, plugins=plugins, overrides={"example.flavour": "mint"})["example.flavour"] == "mint"
    with pytest.raises(Exception, match="example.flavour"):
        load_config(env={}, plugins=plugins, overrides={"example.flavour": "tar"})
    dup = _module("flavours2", odradek_config_keys=lambda: [key])
    with pytest.raises(PluginError, match="flavours.*flavours2|flavours2.*flavours"):
        _plugins(_module("flavours", odradek_config_keys=lambda: [key]), dup).config_keys()


def test_hook_odradek_register_storage() -> None:
    made: list[object] = []
    factory = StorageFactory("toy", create=lambda config: made.append(config) or "storage")
    plugins = _plugins(_module("toy_storage", odradek_register_storage=lambda: [factory]))
    assert plugins.storage("toy").create("cfg") == "storage"
    with pytest.raises(PluginError, match=r"no storage plugin named 'nope'.*available: toy"):
        plugins.storage("nope")
    clash = _module("other_storage", odradek_register_storage=lambda: [factory])
    with pytest.raises(PluginError, match="toy_storage.*other_storage"):
        _plugins(_module("toy_storage", odradek_register_storage=lambda: [factory]), clash).storage("toy")


def test_hook_odradek_register_remote_storage() -> None:
    pair = ("remote storage manager", "remote log metadata manager")
    factory = RemoteStorageFactory("bucket", create=lambda config: pair)
    plugins = _plugins(_module("bucket_storage", odradek_register_remote_storage=lambda: [factory]))
    assert plugins.remote_storage("bucket").create("cfg") == pair
    with pytest.raises(PluginError, match=r"no remote storage plugin named 'directory'.*available: bucket"):
        plugins.remote_storage("directory")
    broken = _module("broken_storage", odradek_register_remote_storage=lambda: [object()])
    with pytest.raises(PluginError, match="broken_storage"):
        _plugins(broken).remote_storage("x")


def test_hook_odradek_register_transports() -> None:
    t = TransportFactory("carrier-pigeon", ("PIGEON",), listener=object, connector=object)
    plugins = _plugins(_module("pigeons", odradek_register_transports=lambda: [t]))
    assert plugins.transport_for("PIGEON") is t
    assert plugins.transport("carrier-pigeon") is t
    with pytest.raises(PluginError, match="SSL"):
        plugins.transport_for("SSL")


def test_hook_odradek_register_metadata() -> None:
    m = MetadataFactory("notebook", create=lambda config: "store")
    plugins = _plugins(_module("notebook", odradek_register_metadata=lambda: [m]))
    assert plugins.metadata("notebook").create(None) == "store"
    with pytest.raises(PluginError, match="metadata plugin named 'zookeeper'"):
        plugins.metadata("zookeeper")


class _Rot13:
    id = 6  # the batch attributes hold 3 bits of codec id; Kafka leaves 5-7 unused
    name = "rot13"

    def compress(self, data: bytes, level: int | None = None) -> bytes:
        return bytes(b ^ 13 for b in data)

    def decompress(self, data: bytes | memoryview) -> bytes:
        return bytes(b ^ 13 for b in bytes(data))


def test_hook_odradek_register_codecs() -> None:
    plugins = _plugins(_module("rot", odradek_register_codecs=lambda: [_Rot13()]))
    codec = plugins.codecs()[6]
    assert codec.decompress(codec.compress(b"kafka")) == b"kafka"
    with pytest.raises(PluginError, match="compression 6"):
        _plugins(
            _module("rot", odradek_register_codecs=lambda: [_Rot13()]),
            _module("rot_again", odradek_register_codecs=lambda: [_Rot13()]),
        ).codecs()


class _AlwaysZero:
    name = "zero"

    def partition(self, topic: str, key: bytes | None, value: bytes | None, num_partitions: int) -> int:
        return 0

    def on_new_batch(self, topic: str, previous_partition: int, num_partitions: int) -> None:
        return None


def test_hook_odradek_register_partitioners() -> None:
    plugins = _plugins(_module("zero", odradek_register_partitioners=lambda: [_AlwaysZero]))
    a, b = plugins.partitioner("zero"), plugins.partitioner("zero")
    assert a is not b  # one instance per producer: sticky state is never shared
    assert a.partition("t", b"k", b"v", 8) == 0


class _Everything:
    name = "everything-to-first"
    rebalance_protocol = "eager"

    def subscription_user_data(self, topics: object, owned: object, generation: int) -> bytes | None:
        return None

    def assign(self, partitions_per_topic: dict[str, int], members: list[object]) -> dict[str, object]:
        return {}

    def on_assignment(self, assignment: object, generation: int) -> None:
        return None


def test_hook_odradek_register_assignors() -> None:
    plugins = _plugins(_module("greedy", odradek_register_assignors=lambda: [_Everything]))
    assert plugins.assignor_names() == ["everything-to-first"]
    assert plugins.assignor("everything-to-first").rebalance_protocol == "eager"


class _AllToFirst:
    """A server assignor giving every partition to the first member by id."""

    name = "all-to-first"

    def assign(
        self, members: Mapping[str, AssignmentMember], topics: Mapping[str, AssignmentTopic]
    ) -> dict[str, dict[str, frozenset[int]]]:
        first = min(members, default=None)
        out: dict[str, dict[str, frozenset[int]]] = {m: {} for m in members}
        if first is not None:
            out[first] = {t: frozenset(range(topic.num_partitions)) for t, topic in topics.items()}
        return out


def test_hook_odradek_register_server_assignors() -> None:
    plugins = _plugins(_module("greedy_server", odradek_register_server_assignors=lambda: [_AllToFirst]))
    assignor = plugins.server_assignor("all-to-first")
    topics = {"a" * 32: AssignmentTopic("a" * 32, "orders", 2)}
    members = {m: AssignmentMember(m, None, None, frozenset(topics)) for m in ("m2", "m1")}
    assert assignor.assign(members, topics) == {"m1": {"a" * 32: frozenset({0, 1})}, "m2": {}}
    with pytest.raises(PluginError, match="no server assignor plugin named 'uniform'"):
        plugins.server_assignor("uniform")


class _NearestBroker:
    """A third-party replica selector: the lowest broker id offered."""

    name = "lowest-id"

    def select(self, tp: Any, client: Any, partition: Any) -> Any:
        return min(partition.replicas, key=lambda r: r.broker_id)


def test_hook_odradek_register_replica_selectors() -> None:
    from odradek.replica_selector import ClientMetadata, PartitionView, ReplicaView

    plugins = _plugins(_module("nearest", odradek_register_replica_selectors=lambda: [_NearestBroker]))
    selector = plugins.replica_selector("lowest-id")
    leader, other = ReplicaView(3, "a", 10, 0), ReplicaView(1, "b", 10, 0)
    client = ClientMetadata("b", "c", "127.0.0.1:1", "User:ANONYMOUS", "PLAINTEXT")
    assert selector.select(TopicPartition("t", 0), client, PartitionView(leader, (leader, other))) == other
    with pytest.raises(
        PluginError, match="replica.selector.class = 'rack-aware': no replica selector plugin offers it"
    ):
        plugins.replica_selector("rack-aware")
    not_a_class = _module("bad", odradek_register_replica_selectors=lambda: [_NearestBroker()])
    with pytest.raises(PluginError, match="replica selector class"):
        _plugins(not_a_class).replica_selector("lowest-id")


def test_hook_odradek_register_sasl_mechanisms() -> None:
    """A third-party mechanism is offered next to the built-in ones (and passes the SASL
    conformance suite: TestToyMechanismConformance below); it may not take a built-in name."""
    from odradek.security.plugin import odradek_register_sasl_mechanisms as builtin

    toy_plugin = _module("toy", odradek_register_sasl_mechanisms=lambda: [TOY])
    assert _plugins(toy_plugin).sasl_mechanisms() == {"TOY": TOY}
    both = _plugins(_module("builtin_sasl", odradek_register_sasl_mechanisms=builtin), toy_plugin)
    assert sorted(both.sasl_mechanisms()) == ["OAUTHBEARER", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "TOY"]
    fake_plain = _module("fake_plain", odradek_register_sasl_mechanisms=lambda: [SaslMechanism("PLAIN", _ToyServer)])
    clashing = _plugins(_module("builtin_sasl", odradek_register_sasl_mechanisms=builtin), fake_plain)
    with pytest.raises(PluginError, match="PLAIN"):
        clashing.sasl_mechanisms()
    lower = _module("lower", odradek_register_sasl_mechanisms=lambda: [SaslMechanism("toy", _ToyServer)])
    with pytest.raises(PluginError, match="upper-case"):
        _plugins(lower).sasl_mechanisms()


def test_hook_odradek_register_authorizers() -> None:
    """A third-party authorizer is selected by its name next to the built-in ``acl`` (which
    Kafka's class names select too); it may not take the built-in name, and an item that is no
    factory is refused naming the plugin."""
    from odradek.security.authorizer import AuthorizerFactory
    from odradek.security.plugin import odradek_register_authorizers as builtin

    toy = AuthorizerFactory("toy", lambda config, store: None)
    both = _plugins(
        _module("builtin_acl", odradek_register_authorizers=builtin),
        _module("toy", odradek_register_authorizers=lambda: [toy]),
    )
    assert both.authorizer("toy") is toy
    assert both.authorizer("org.apache.kafka.metadata.authorizer.StandardAuthorizer").name == "acl"
    fake = _module("fake_acl", odradek_register_authorizers=lambda: [AuthorizerFactory("acl", lambda c, s: None)])
    with pytest.raises(PluginError, match="'acl'"):
        _plugins(_module("builtin_acl", odradek_register_authorizers=builtin), fake).authorizer("acl")
    broken = _module("broken", odradek_register_authorizers=lambda: [object()])
    with pytest.raises(PluginError, match="not an AuthorizerFactory"):
        _plugins(broken).authorizer("toy")


class _ToyServer:
    """Accepts ``<user>:<password>`` when the password is the user name reversed."""

    mechanism_name = "TOY"

    def __init__(self, context: object = None) -> None:
        self.complete = False
        self.authorization_id: str | None = None

    async def evaluate_response(self, token: bytes) -> bytes:
        user, sep, password = token.partition(b":")
        if not sep or not user or password != user[::-1]:
            raise SaslError("toy: wrong password")
        self.authorization_id = user.decode(errors="replace")
        self.complete = True
        return b""


class _ToyClient:
    def __init__(self, username: str, password: str) -> None:
        self.token = f"{username}:{password}".encode()

    def initial_response(self) -> bytes:
        return self.token

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        return None


TOY = SaslMechanism("TOY", _ToyServer, client=_ToyClient)


class TestToyMechanismConformance(SaslMechanismConformance):
    """The conformance suite a third-party mechanism runs against itself."""

    mechanism = TOY
    username = "alice"
    password = "ecila"


def test_unknown_hook_name_is_refused() -> None:
    typo = types.ModuleType("typo")
    typo.odradek_register_storages = hookimpl(lambda: [])  # type: ignore[attr-defined]
    with pytest.raises(PluginError, match="odradek_register_storages"):
        build_plugin_manager(entry_points_enabled=False, extra=[typo])


def test_trace_env_prints_hook_calls(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ODRADEK_TRACE_HOOKS", "1")
    pm = build_plugin_manager(
        entry_points_enabled=False, extra=[_module("zero", odradek_register_partitioners=lambda: [_AlwaysZero])]
    )
    Plugins(pm).partitioner("zero")
    assert "odradek_register_partitioners" in capsys.readouterr().err


def test_builtin_plugins_load_through_entry_points() -> None:
    from odradek.manager import load_plugins

    plugins = load_plugins()
    names = {info.name for info in plugins.describe()}
    assert {"compress", "storage_segment", "transport_tcp", "meta_local", "default_partitioners"} <= names
    assert set(plugins.codecs()) >= {1, 2, 3, 4}
    assert plugins.storage("segment").name == "segment"
    assert plugins.metadata("local").name == "local"
    assert plugins.transport_for("PLAINTEXT").name == "tcp"


def test_disable_autoload_keeps_only_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import entry_points

    third_party = {ep.name for ep in entry_points(group="odradek") if ep.dist and ep.dist.name != "odradek"}
    assert third_party, "the example third-party plugin (examples/memory_storage) must be installed"
    assert third_party <= {name for name, _ in build_plugin_manager().list_name_plugin()}
    monkeypatch.setenv("ODRADEK_DISABLE_PLUGIN_AUTOLOAD", "1")
    pm = build_plugin_manager()
    loaded = {name for name, _ in pm.list_name_plugin()}
    assert not (third_party & loaded)
    assert "storage_segment" in loaded
    explicit = build_plugin_manager(extra=sorted(third_party))
    assert third_party <= {name for name, _ in explicit.list_name_plugin()}


def test_missing_extra_plugin_is_named() -> None:
    with pytest.raises(PluginError, match="no_such_plugin_module"):
        build_plugin_manager(entry_points_enabled=False, extra=["no_such_plugin_module"])
    assert "no_such_plugin_module" not in sys.modules


# -- meta-tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented_with_its_signature(hook: str) -> None:
    docs = (ROOT / "docs" / "plugins.md").read_text()
    assert _signature(hook) in docs, f"docs/plugins.md lacks the exact signature {_signature(hook)!r}"
    assert f"### {hook}" in docs


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_test(hook: str) -> None:
    source = Path(__file__).read_text()
    assert re.search(rf"^def test_hook_{hook}\(", source, re.M), f"no test_hook_{hook} in {__file__}"
    documented = {h for h in re.findall(r"^### (odradek_\w+)", (ROOT / "docs" / "plugins.md").read_text(), re.M)}
    assert documented == set(HOOKS), "docs/plugins.md documents hooks that do not exist"
