"""SASL configuration: the listener map, per-listener keys, start-up checks, the users' entity
configs in the metadata store, and KIP-554's rules (without a broker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.broker.configs import ConfigManager
from odradek.config import Config, ConfigError, default_config, load_config
from odradek.entity_configs import USERS, EntityConfigs, entity_key, sanitize
from odradek.errors import ErrorCode
from odradek.manager import default_plugins
from odradek.plugins.meta_local.store import FILE_NAME, open_local_store
from odradek.security.credentials import ScramCredentialStore
from odradek.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, generate_credential, salted_password
from odradek.security.scram_admin import (
    ScramUpsertion,
    alter_user_scram_credentials,
    describe_user_scram_credentials,
)
from odradek.security.settings import check_security_config, inter_broker_client_config, jaas_for

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
JAAS = f'{PLAIN} required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="a";'


def _load(overrides: dict[str, str] | None = None) -> Config:
    """The config with the built-in plugins' keys (the sasl plugin declares the SASL keys)."""
    return load_config(env={}, overrides=overrides or {}, plugins=default_plugins())


# -- listeners ----------------------------------------------------------------------------------
def test_listener_names_map_to_security_protocols() -> None:
    c = default_config(
        listeners="REPLICATION://127.0.0.1:9092,CLIENTS://127.0.0.1:9093",
        listener_security_protocol_map="REPLICATION:PLAINTEXT,CLIENTS:SASL_PLAINTEXT",
    )
    assert [(e.name, e.security_protocol) for e in c.listeners] == [
        ("REPLICATION", "PLAINTEXT"),
        ("CLIENTS", "SASL_PLAINTEXT"),
    ]
    assert default_config(listeners="SASL_PLAINTEXT://:1").listeners[0].security_protocol == "SASL_PLAINTEXT"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"listeners": "CLIENTS://:1"}, "no security protocol defined for listener CLIENTS"),
        ({"listener.security.protocol.map": "A:TLS"}, "'TLS' is not a security protocol"),
        ({"listener.security.protocol.map": "A:SSL,a:SSL"}, "the listener name A appears twice"),
        ({"listener.security.protocol.map": "A"}, "is not LISTENER_NAME:SECURITY_PROTOCOL"),
    ],
)
def test_bad_listener_maps_are_refused(sets: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(sets)


def test_per_listener_and_per_mechanism_keys() -> None:
    c = _load(
        {
            "listeners": "CLIENTS://:1",
            "listener.security.protocol.map": "CLIENTS:SASL_PLAINTEXT",
            "listener.name.clients.plain.sasl.jaas.config": JAAS,
            "listener.name.clients.sasl.enabled.mechanisms": "PLAIN",
        },
    )
    assert c.listener_setting("CLIENTS", "sasl.enabled.mechanisms") == ["PLAIN"]
    assert c.listener_setting("OTHER", "sasl.enabled.mechanisms") == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    entry = jaas_for(c, "CLIENTS", "PLAIN")  # type: ignore[arg-type]
    assert entry is not None and entry.plain_users() == {"admin": "admin-secret", "alice": "a"}
    assert jaas_for(c, "CLIENTS", "SCRAM-SHA-256") is None  # type: ignore[arg-type]
    for unknown in ("listener.name.clients.log.dirs", "listener.name.clients.plain.sasl.enabled.mechanisms"):
        with pytest.raises(ConfigError, match="unknown config key"):
            _load({unknown: "x"})


# -- start-up checks ----------------------------------------------------------------------------
SASL = {"listeners": "SASL_PLAINTEXT://127.0.0.1:1"}
PLAIN_ONLY = {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS}


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "no plugin offers SASL mechanism GSSAPI"),
        ({"sasl.enabled.mechanisms": ""}, "enables no mechanism"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, "PLAIN is enabled on listener SASL_PLAINTEXT but no JAAS config"),
        (
            {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": f'{SCRAM} required username="a" password="b";'},
            "names login module .*ScramLoginModule",
        ),
        (
            {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": f'{PLAIN} required username="a" password="b";'},
            "defines no user",
        ),
        ({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": f"{PLAIN} required user_a=;"}, "'sasl.jaas.config'"),
        ({"sasl.enabled.mechanisms": "SCRAM-SHA-256"}, "needs username=.* and password=.* in"),
        (
            {**PLAIN_ONLY, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
            "SCRAM-SHA-512 is not enabled on the inter-broker listener",
        ),
    ],
)  # fmt: skip
def test_start_up_refuses_what_cannot_work(sets: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_security_config(_load({**SASL, **sets}))


def test_start_up_accepts_plain_and_a_plaintext_first_listener() -> None:
    check_security_config(_load({**SASL, "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS}))
    # SCRAM users live in the store; a PLAINTEXT first listener needs no inter-broker credentials
    check_security_config(
        _load(
            {
                "listeners": "REPLICATION://127.0.0.1:1,CLIENTS://127.0.0.1:2",
                "listener.security.protocol.map": "REPLICATION:PLAINTEXT,CLIENTS:SASL_PLAINTEXT",
            },
        )
    )


def test_inter_broker_client_uses_the_listeners_jaas_credentials() -> None:
    c = _load(
        {
            **SASL,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        },
    )
    from odradek.security.settings import available_mechanisms

    got = inter_broker_client_config(c, c.listeners[0], available_mechanisms(c))
    assert got == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
    }


def test_describe_configs_never_shows_the_jaas_config() -> None:
    c = _load({"sasl.jaas.config": JAAS, "listener.name.x.plain.sasl.jaas.config": JAAS})
    entries = ConfigManager(c, None, None).broker_entries(include_synonyms=True, include_documentation=False)  # type: ignore[arg-type]
    jaas = [e for e in entries if e.name.endswith("sasl.jaas.config")]
    assert len(jaas) == 2 and all(e.value is None and e.is_sensitive and not e.synonyms for e in jaas)
    assert "admin-secret" not in repr(entries)


# -- the store ------------------------------------------------------------------------------------
async def test_entity_configs_use_kafkas_zookeeper_layout(tmp_path: Path) -> None:
    async with open_local_store(tmp_path / FILE_NAME) as store:
        entities = EntityConfigs(store)
        assert await entities.get(USERS, "a/b*c") == {}
        await entities.alter(USERS, "a/b*c", set={"SCRAM-SHA-256": "x", "producer_byte_rate": "1024"})
        raw = await store.get(entity_key(USERS, "a/b*c"))
        assert raw is not None and entity_key(USERS, "a/b*c") == "/config/users/a%2Fb%2Ac"
        assert json.loads(raw.value) == {"version": 1, "config": {"SCRAM-SHA-256": "x", "producer_byte_rate": "1024"}}
        assert await entities.list(USERS) == {"a/b*c": {"SCRAM-SHA-256": "x", "producer_byte_rate": "1024"}}
        await entities.alter(USERS, "a/b*c", delete=("SCRAM-SHA-256", "producer_byte_rate"))
        assert await store.get(entity_key(USERS, "a/b*c")) is None  # nothing left: the key goes
        assert sanitize("alice") == "alice"


async def test_scram_credentials_round_trip_through_the_store(tmp_path: Path) -> None:
    async with open_local_store(tmp_path / FILE_NAME) as store:
        creds = ScramCredentialStore(store)
        credential = generate_credential(SCRAM_SHA_256, "pw", 8192)
        await creds.alter("alice", {"SCRAM-SHA-256": credential})
        assert await creds.credential("alice", SCRAM_SHA_256) == credential
        assert await creds.credential("alice", SCRAM_SHA_512) is None
        assert await creds.describe_all() == {"alice": {"SCRAM-SHA-256": 8192}}
        await EntityConfigs(store).alter(USERS, "broken", set={"SCRAM-SHA-256": "garbage"})
        assert await creds.credential("broken", SCRAM_SHA_256) is None  # logged, refused like an unknown user


NOT_EXIST = "Attempt to describe a user credential that does not exist"
TWICE = "Cannot describe SCRAM credentials for the same user twice in a single request"


def _up(user: str, mechanism: int = 1, iterations: int = 4096, password: str = "pw") -> ScramUpsertion:
    m = SCRAM_SHA_256 if mechanism == 1 else SCRAM_SHA_512
    salted = salted_password(m, password, b"salt", iterations) if mechanism in (1, 2) else b"x"
    return ScramUpsertion(user, mechanism, iterations, b"salt", salted)


async def test_kip_554_rules_and_messages(tmp_path: Path) -> None:
    async with open_local_store(tmp_path / FILE_NAME) as store:
        creds = ScramCredentialStore(store)
        results = await alter_user_scram_credentials(
            creds,
            [("ghost", 1), ("", 1), ("weird", 9)],
            [_up("alice"), _up("alice", 2, 16384), _up("few", iterations=4095), _up("many", iterations=16385),
             _up("twice"), _up("twice"), _up("bad", 3)],
        )  # fmt: skip
        got = {r.user: (r.error, r.message) for r in results}
        assert got == {
            "ghost": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
            "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
            "weird": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
            "alice": (ErrorCode.NONE, None),
            "few": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
            "many": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
            "twice": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
            "bad": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        }
        assert await creds.describe_all() == {"alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 16384}}
        described = await describe_user_scram_credentials(creds, ["alice", "nobody", "", "dup", "dup"])
        assert [(r.user, r.error, r.message, r.credentials) for r in described] == [
            ("alice", ErrorCode.NONE, None, {1: 4096, 2: 16384}),
            ("nobody", ErrorCode.RESOURCE_NOT_FOUND, f"{NOT_EXIST}: nobody", {}),
            ("", ErrorCode.RESOURCE_NOT_FOUND, "Username must not be empty", {}),
            ("dup", ErrorCode.DUPLICATE_RESOURCE, f"{TWICE}: dup", {}),
        ]  # fmt: skip
        assert [r.user for r in await describe_user_scram_credentials(creds, None)] == ["alice"]
        deleted = await alter_user_scram_credentials(creds, [("alice", 1), ("alice", 2)], [])
        assert [(r.user, r.error) for r in deleted] == [("alice", ErrorCode.NONE)]
        assert await creds.describe_all() == {}


def test_config_show_hides_the_jaas_config(capsys: pytest.CaptureFixture[str]) -> None:
    from odradek.cli import main

    assert main(["config", "show", "--json", "--set", f"sasl.jaas.config={JAAS}"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["sasl.jaas.config"] == "(hidden)" and shown["sasl.enabled.mechanisms"] == [
        "SCRAM-SHA-256",
        "SCRAM-SHA-512",
    ]
