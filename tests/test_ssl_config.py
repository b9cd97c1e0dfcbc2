"""TLS config and principals, without a network: Kafka's ``ssl.*`` keys into an ``SSLContext``
(every mistake a ConfigError naming the key), ``listener.name.<listener>.ssl.*`` overrides, the
RFC 2253 subject of a client certificate and ``ssl.principal.mapping.rules`` (KIP-371)."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import pytest
from broker_harness import plugins_with
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from tls_helpers import PASSWORD, Pki, make_pki

from odradek.config import ConfigError, load_config
from odradek.manager import Plugins
from odradek.plugins.transport_tcp.ssl_factory import client_context, openssl_cipher_name, server_context
from odradek.plugins.transport_tcp.ssl_principal import (
    SslPrincipalMapper,
    certificate_subject,
    distinguished_name,
    parse_rules,
)
from odradek.plugins.transport_tcp.ssl_transport import SslListener, listener_ssl_settings
from odradek.principal import ANONYMOUS, KafkaPrincipal
from odradek.testing.transport import FakeBrokerCore
from odradek.transport import Endpoint


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _server(**settings: Any) -> ssl.SSLContext:
    return server_context(settings)


# -- keystores ------------------------------------------------------------------------------------


def test_pem_keystore_file(pki: Pki) -> None:
    context = _server(**{"ssl.keystore.location": str(pki.server_pem)})
    assert context.verify_mode == ssl.CERT_NONE
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.maximum_version == ssl.TLSVersion.TLSv1_3


def test_pkcs12_keystore(pki: Pki) -> None:
    store = pki.server_pkcs12()
    _server(**{"ssl.keystore.location": str(store), "ssl.keystore.type": "PKCS12", "ssl.keystore.password": PASSWORD})
    _server(**{"ssl.keystore.location": str(store), "ssl.keystore.password": PASSWORD})  # type from the content
    with pytest.raises(ConfigError, match=r"'ssl.keystore.location'.*ssl.keystore.password is not its password"):
        _server(**{"ssl.keystore.location": str(store), "ssl.keystore.password": "wrong"})


def test_inline_pem_keystore_with_an_encrypted_key(pki: Pki) -> None:
    key, chain = pki.server_key_and_chain(PASSWORD)
    settings = {"ssl.keystore.key": key, "ssl.keystore.certificate.chain": chain, "ssl.keystore.type": "PEM"}
    _server(**settings, **{"ssl.key.password": PASSWORD})
    with pytest.raises(ConfigError, match=r"'ssl.keystore.key'.*wrong or missing ssl.key.password"):
        _server(**settings, **{"ssl.key.password": "wrong"})
    with pytest.raises(ConfigError, match=r"'ssl.keystore.key'.*wrong or missing ssl.key.password"):
        _server(**settings)  # never a terminal prompt for the password
    with pytest.raises(ConfigError, match=r"'ssl.keystore.certificate.chain' must be set"):
        _server(**{"ssl.keystore.key": key})


def test_a_key_that_does_not_match_its_certificate(pki: Pki, tmp_path: Path) -> None:
    other_key, _ = make_pki(tmp_path / "other").server_key_and_chain()
    _, chain = pki.server_key_and_chain()
    with pytest.raises(ConfigError, match="the private key does not belong to the certificate"):
        _server(**{"ssl.keystore.key": other_key, "ssl.keystore.certificate.chain": chain})


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({}, r"an SSL listener needs a keystore: set 'ssl.keystore.location'"),
        ({"ssl.keystore.location": "/nonexistent/broker.p12"}, r"'ssl.keystore.location'.*no such file"),
        ({"ssl.keystore.type": "JKS"}, r"'ssl.keystore.type'.*JKS .*use PKCS12 or PEM"),
        ({"ssl.keystore.type": "BKS"}, r"'ssl.keystore.type'.*unknown store type 'BKS'; supported: PKCS12, PEM"),
        ({"ssl.client.auth": "always"}, r"'ssl.client.auth'.*expected one of none, requested, required"),
        ({"ssl.enabled.protocols": ["TLSv1.1"]}, r"'ssl.enabled.protocols'.*'TLSv1.1' is not supported"),
        ({"ssl.protocol": "SSLv3"}, r"'ssl.protocol'.*'SSLv3' is not supported"),
        ({"ssl.cipher.suites": ["TLS_NOPE_WITH_NOTHING"]}, r"'ssl.cipher.suites'"),
        (
            {"ssl.client.auth": "required", "ssl.truststore.location": "/nonexistent/ca.pem"},
            r"'ssl.truststore.location'.*no such file",
        ),
    ],
)
def test_bad_settings_name_their_key(pki: Pki, settings: dict[str, Any], error: str) -> None:
    if "ssl.keystore.type" in settings or (settings and "ssl.keystore.location" not in settings):
        settings = {**settings, "ssl.keystore.location": str(pki.server_pem)}
    with pytest.raises(ConfigError, match=error):
        _server(**settings)


def test_a_keystore_that_is_not_one(pki: Pki, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("-----BEGIN NOTHING-----\nAAAA\n-----END NOTHING-----\n")
    with pytest.raises(ConfigError, match=r"'ssl.keystore.location'"):
        _server(**{"ssl.keystore.location": str(bogus)})
    with pytest.raises(ConfigError, match=r"'ssl.truststore.location'.*no PEM certificates"):
        _server(
            **{
                "ssl.keystore.location": str(pki.server_pem),
                "ssl.client.auth": "required",
                "ssl.truststore.location": str(bogus),
            }
        )


def test_client_auth_and_truststores(pki: Pki) -> None:
    base = {"ssl.keystore.location": str(pki.server_pem), "ssl.truststore.location": str(pki.ca_pem)}
    assert _server(**base, **{"ssl.client.auth": "required"}).verify_mode == ssl.CERT_REQUIRED
    assert _server(**base, **{"ssl.client.auth": "requested"}).verify_mode == ssl.CERT_OPTIONAL
    inline = {"ssl.truststore.certificates": pki.ca_pem.read_text(), "ssl.client.auth": "required"}
    context = _server(**{"ssl.keystore.location": str(pki.server_pem)}, **inline)
    assert len(context.get_ca_certs()) == 1


def test_protocols_and_cipher_suites(pki: Pki) -> None:
    base = {"ssl.keystore.location": str(pki.server_pem)}
    assert _server(**base, **{"ssl.enabled.protocols": ["TLSv1.3"]}).minimum_version == ssl.TLSVersion.TLSv1_3
    assert _server(**base, **{"ssl.protocol": "TLSv1.2"}).maximum_version == ssl.TLSVersion.TLSv1_2
    suites = ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"]
    names = {c["name"] for c in _server(**base, **{"ssl.cipher.suites": suites}).get_ciphers()}
    assert "ECDHE-ECDSA-AES128-GCM-SHA256" in names and "ECDHE-RSA-AES256-GCM-SHA384" not in names
    assert openssl_cipher_name("TLS_RSA_WITH_AES_256_GCM_SHA384") == "AES256-GCM-SHA384"
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-RSA-CHACHA20-POLY1305"
    assert openssl_cipher_name("ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"


def test_client_contexts_take_librdkafka_and_java_names(pki: Pki) -> None:
    librdkafka = client_context({"ssl.ca.location": str(pki.ca_pem), "ssl.endpoint.identification.algorithm": "https"})
    assert librdkafka.check_hostname and librdkafka.verify_mode == ssl.CERT_REQUIRED
    java = client_context({"ssl.truststore.location": str(pki.ca_pem), "ssl.endpoint.identification.algorithm": ""})
    assert not java.check_hostname and java.verify_mode == ssl.CERT_REQUIRED
    client_context(
        {
            "ssl.ca.location": str(pki.ca_pem),
            "ssl.certificate.location": str(pki.client_crt),
            "ssl.key.location": str(pki.client_key),
        }
    )
    with pytest.raises(ConfigError, match=r"'ssl.ca.location'.*no such file"):
        client_context({"ssl.ca.location": "/nonexistent/ca.pem"})
    with pytest.raises(ConfigError, match=r"'ssl.endpoint.identification.algorithm'"):
        client_context({"ssl.endpoint.identification.algorithm": "dns"})


# -- broker config: keys, per-listener overrides, errors at listener build -------------------------


def _config(plugins: Plugins, tmp_path: Path, **overrides: str) -> Any:
    return load_config(env={}, plugins=plugins, overrides={"log.dirs": str(tmp_path), **overrides})


def _plugins() -> Plugins:
    return plugins_with()


def test_listener_overrides_win_over_broker_wide_keys(pki: Pki, tmp_path: Path) -> None:
    config = _config(
        _plugins(),
        tmp_path,
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        **{
            "ssl.keystore.location": "/nonexistent/broad.pem",
            "listener.name.ssl.ssl.keystore.location": str(pki.server_pem),
            "listener.name.ssl.ssl.client.auth": "required",
        },
    )
    settings = listener_ssl_settings(config, "SSL")
    assert settings["ssl.keystore.location"] == str(pki.server_pem)
    assert settings["ssl.client.auth"] == "required"
    assert listener_ssl_settings(config, "OTHER")["ssl.keystore.location"] == "/nonexistent/broad.pem"
    with pytest.raises(ConfigError, match=r"'listener.name.ssl.ssl.client.auth': 'always' is not one of"):
        _config(_plugins(), tmp_path, **{"listener.name.ssl.ssl.client.auth": "always"})
    with pytest.raises(ConfigError, match=r"unknown config key 'listener.name.ssl.log.dirs'"):
        _config(_plugins(), tmp_path, **{"listener.name.ssl.log.dirs": "/x"})


def test_a_bad_listener_config_fails_when_the_listener_is_built(pki: Pki, tmp_path: Path) -> None:
    config = _config(_plugins(), tmp_path, listeners="SSL://127.0.0.1:0")
    with pytest.raises(ConfigError, match="an SSL listener needs a keystore"):
        SslListener(config, FakeBrokerCore(), Endpoint("SSL", "127.0.0.1", 0, "SSL"))
    config = _config(
        _plugins(),
        tmp_path,
        **{"ssl.principal.mapping.rules": "RULE:oops", "ssl.keystore.location": str(pki.server_pem)},
    )
    with pytest.raises(ConfigError, match="'ssl.principal.mapping.rules'"):
        SslListener(config, FakeBrokerCore(), Endpoint("SSL", "127.0.0.1", 0, "SSL"))


def test_inter_broker_listener_keys(pki: Pki, tmp_path: Path) -> None:
    listeners = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"
    config = _config(_plugins(), tmp_path, listeners=listeners, **{"inter.broker.listener.name": "SSL"})
    assert config.inter_broker_listener.name == "SSL"
    assert config.inter_broker_client_config()["ssl.endpoint.identification.algorithm"] == "https"
    config = _config(_plugins(), tmp_path, listeners=listeners, **{"security.inter.broker.protocol": "SSL"})
    assert config.inter_broker_listener.name == "SSL"
    config = _config(_plugins(), tmp_path, listeners=listeners)
    assert config.inter_broker_listener.name == "PLAINTEXT" and config.inter_broker_client_config() == {}
    with pytest.raises(ConfigError, match="only one of 'inter.broker.listener.name' and 'security.inter.broker"):
        _config(
            _plugins(),
            tmp_path,
            listeners=listeners,
            **{"inter.broker.listener.name": "SSL", "security.inter.broker.protocol": "SSL"},
        )
    with pytest.raises(ConfigError, match="'inter.broker.listener.name': INTERNAL is not one of the listeners"):
        _config(_plugins(), tmp_path, listeners=listeners, **{"inter.broker.listener.name": "INTERNAL"})


# -- principals -----------------------------------------------------------------------------------


def _name(*attributes: tuple[Any, str]) -> x509.Name:
    """A Name in certificate order (most general first), as a certificate stores it."""
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])


def test_distinguished_names_in_rfc2253_form() -> None:
    name = _name(
        (NameOID.COUNTRY_NAME, "US"),
        (NameOID.ORGANIZATION_NAME, "Example, Inc."),
        (NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
        (NameOID.COMMON_NAME, "alice"),
    )
    assert distinguished_name(name) == "CN=alice,OU=eng,O=Example\\, Inc.,C=US"
    email = _name((NameOID.EMAIL_ADDRESS, "a@b.c"), (NameOID.COMMON_NAME, "#x "))
    # Java's X500Principal prints attributes without an RFC 2253 keyword as OID=#<DER hex>
    assert distinguished_name(email) == "CN=\\#x\\ ,1.2.840.113549.1.9.1=#16056140622e63"


def test_the_principal_of_a_client_certificate(pki: Pki) -> None:
    der = x509.load_pem_x509_certificate(pki.client_crt.read_bytes()).public_bytes(Encoding.DER)
    assert certificate_subject(der) == "CN=alice,OU=eng,O=Example"
    assert SslPrincipalMapper().principal(der) == KafkaPrincipal("User", "CN=alice,OU=eng,O=Example")
    assert SslPrincipalMapper().principal(None) == ANONYMOUS
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),O=(.*)$/$1@$2/U,DEFAULT")
    assert str(mapper.principal(der)) == "User:ALICE@ENG"


@pytest.mark.parametrize(
    ("rules", "dn", "expected"),
    [
        ("DEFAULT", "CN=alice,OU=eng", "CN=alice,OU=eng"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=kafka1,OU=ServiceUsers,O=Org", "kafka1"),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=bob,OU=People", "CN=bob,OU=People"),
        ("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L", "CN=Alice,OU=ENG", "alice@eng"),
        ("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/U", "CN=Alice,OU=eng", "ALICE@ENG"),
        ("RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,\nDEFAULT", "OU=x,CN=Web.Server,O=y", "web.server"),
        ("RULE:^CN=([^,]*)\\,.*$/$1/ , DEFAULT", "CN=a,OU=b", "a"),
        ("RULE:^CN=(.*)$/\\$$1/", "CN=x", "$x"),
    ],
)
def test_mapping_rules(rules: str, dn: str, expected: str) -> None:
    assert SslPrincipalMapper(rules).principal_name(dn) == expected


def test_no_matching_rule_and_bad_rules() -> None:
    with pytest.raises(ValueError, match="no ssl.principal.mapping.rules apply to CN=bob"):
        SslPrincipalMapper("RULE:^CN=alice$/alice/").principal_name("CN=bob")
    for bad in ("", "RULE:abc", "RULE:a/b", "NOPE", "RULE:(/x/", "RULE:a/b/X"):
        with pytest.raises(ValueError):
            parse_rules(bad)


def test_passwords_and_keys_are_not_shown(capsys: pytest.CaptureFixture[str]) -> None:
    from odradek.cli import main

    sets = ["ssl.keystore.password=abc", "listener.name.ssl.ssl.key.password=xyz", "ssl.keystore.location=/k.p12"]
    assert main(["config", "show", "--json", "--changed", *(x for s in sets for x in ("--set", s))]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["ssl.keystore.password"] == shown["listener.name.ssl.ssl.key.password"] == "(hidden)"
    assert shown["ssl.keystore.location"] == "/k.p12"
