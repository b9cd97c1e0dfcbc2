"""Sans-IO tests of the SASL pieces: JAAS parsing, PLAIN, SCRAM (RFC 7677's vector), credentials.

The built-in mechanisms also run odradek.testing's SaslMechanismConformance, as a third-party
mechanism would.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from odradek.security.jaas import PLAIN_LOGIN_MODULE, JaasError, parse_jaas_config
from odradek.security.mechanism import SaslAuthenticationError, SaslError
from odradek.security.plain import PlainSaslServer
from odradek.security.plugin import odradek_register_sasl_mechanisms
from odradek.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramMechanism,
    ScramSaslClient,
    ScramSaslServer,
    credential_from_salted,
    generate_credential,
    salted_password,
)
from odradek.testing import SaslMechanismConformance

JAAS = (
    f"{PLAIN_LOGIN_MODULE} required\n"
    '  username="admin" password="admin-secret"\n'
    '  user_admin="admin-secret" user_alice="alice-secret";'
)
MECHANISMS = {m.name: m for m in odradek_register_sasl_mechanisms()}


# -- JAAS ---------------------------------------------------------------------------------------
def test_jaas_parses_kafkas_plain_example() -> None:
    entry = parse_jaas_config(JAAS)
    assert (entry.login_module, entry.control_flag) == (PLAIN_LOGIN_MODULE, "required")
    assert entry.options["username"] == "admin"
    assert entry.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}
    assert "secret" not in repr(entry)


def test_jaas_quotes_escapes_comments_and_bare_words() -> None:
    entry = parse_jaas_config('com.example.Login optional /* a comment */ a="x \\" y;z" b=bare // trailing\n c="";')
    assert entry.control_flag == "optional"
    assert entry.options == {"a": 'x " y;z', "b": "bare", "c": ""}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "0 login modules"),
        (f"{PLAIN_LOGIN_MODULE} required;{PLAIN_LOGIN_MODULE} required;", "2 login modules"),
        (f"{PLAIN_LOGIN_MODULE} mandatory;", "invalid control flag 'mandatory'"),
        (f'{PLAIN_LOGIN_MODULE} required user_a="a"', "do not end with ';'"),
        (f'{PLAIN_LOGIN_MODULE} required user_a="a;', "unterminated quoted value"),
        (f"{PLAIN_LOGIN_MODULE} required user_a;", "has no '=<value>'"),
        (f"{PLAIN_LOGIN_MODULE} required user_a=;", "has no value"),
        (f'{PLAIN_LOGIN_MODULE} required a="1" a="2";', "appears twice"),
        (f"{PLAIN_LOGIN_MODULE} required /* open", "unterminated comment"),
        ('"quoted" required;', "expected a login module class name"),
    ],
)
def test_jaas_errors_say_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(JaasError, match="sasl.jaas.config") as info:
        parse_jaas_config(text)
    assert why in str(info.value)


def test_jaas_errors_never_quote_passwords() -> None:
    with pytest.raises(JaasError) as info:
        parse_jaas_config(f'{PLAIN_LOGIN_MODULE} required user_a="hunter2" broken')
    assert "hunter2" not in str(info.value)


# -- PLAIN --------------------------------------------------------------------------------------
async def test_plain_accepts_a_user_of_the_jaas_config() -> None:
    server = PlainSaslServer(parse_jaas_config(JAAS).plain_users())
    assert await server.evaluate_response(b"\x00alice\x00alice-secret") == b""
    assert server.complete and server.authorization_id == "alice"


@pytest.mark.parametrize(
    ("token", "error", "message"),
    [
        (b"\x00alice\x00wrong", SaslAuthenticationError, "Authentication failed: Invalid username or password"),
        (b"\x00bob\x00alice-secret", SaslAuthenticationError, "Authentication failed: Invalid username or password"),
        (b"\x00\x00pw", SaslAuthenticationError, "Authentication failed: username not specified"),
        (b"\x00alice\x00", SaslAuthenticationError, "Authentication failed: password not specified"),
        (b"admin\x00alice\x00alice-secret", SaslAuthenticationError, "authorization id that is different"),
        (b"alice\x00alice-secret", SaslError, "expected 3 tokens, got 2"),
        (b"\x00a\x00b\x00c", SaslError, "expected 3 tokens, got 4"),
        (b"\xff\x00alice\x00alice-secret", SaslError, "not UTF-8"),
    ],
)
async def test_plain_refuses_with_kafkas_messages(token: bytes, error: type[Exception], message: str) -> None:
    server = PlainSaslServer(parse_jaas_config(JAAS).plain_users())
    with pytest.raises(error, match=message):
        await server.evaluate_response(token)
    assert not server.complete


async def test_plain_authzid_equal_to_the_user_is_accepted() -> None:
    server = PlainSaslServer({"alice": "pw"})
    await server.evaluate_response(b"alice\x00alice\x00pw")
    assert server.authorization_id == "alice"


# -- SCRAM --------------------------------------------------------------------------------------
def test_scram_sha_256_matches_rfc_7677s_example() -> None:
    """RFC 7677 section 3: user, password, nonces, salt and iterations give exactly its messages."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    client = ScramSaslClient(SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.final_message(server_first)
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    client.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(SaslError, match="invalid server signature"):
        client.verify_server_final(b"v=" + base64.b64encode(b"\x00" * 32))
    # the server side of the same exchange: the credential the salted password gives
    salted = salted_password(SCRAM_SHA_256, "pencil", salt, 4096)
    credential = credential_from_salted(SCRAM_SHA_256, salt, salted, 4096)
    assert ScramCredential.from_text(credential.to_text()) == credential


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.mechanism_name)
async def test_scram_exchange_round_trip_and_wrong_password(mechanism: ScramMechanism) -> None:
    credential = generate_credential(mechanism, "alice-secret", 4096)

    async def lookup(user: str, m: ScramMechanism) -> ScramCredential | None:
        return credential if (user, m) == ("al,i=ce", mechanism) else None

    server = ScramSaslServer(mechanism, lookup)
    client = ScramSaslClient(mechanism, "al,i=ce", "alice-secret")
    assert client.first_message().startswith(b"n,,n=al=2Ci=3Dce,r=")
    final = client.final_message(await server.evaluate_response(client.first_message()))
    client.verify_server_final(await server.evaluate_response(final))
    assert server.complete and server.authorization_id == "al,i=ce"

    wrong = ScramSaslClient(mechanism, "al,i=ce", "nope")
    server = ScramSaslServer(mechanism, lookup)
    final = wrong.final_message(await server.evaluate_response(wrong.first_message()))
    with pytest.raises(SaslError, match="Invalid client credentials"):
        await server.evaluate_response(final)
    assert not server.complete


async def test_scram_unknown_user_low_iterations_and_malformed_messages() -> None:
    weak = generate_credential(SCRAM_SHA_256, "pw", 4096)
    weak = ScramCredential(weak.salt, weak.stored_key, weak.server_key, 1000)

    async def lookup(user: str, m: ScramMechanism) -> ScramCredential | None:
        return weak if user == "weak" else None

    with pytest.raises(SaslError, match="Invalid user credentials"):
        await ScramSaslServer(SCRAM_SHA_256, lookup).evaluate_response(b"n,,n=nobody,r=abc")
    with pytest.raises(SaslError, match="Iterations 1000 is less than the minimum 4096"):
        await ScramSaslServer(SCRAM_SHA_256, lookup).evaluate_response(b"n,,n=weak,r=abc")
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different"):
        await ScramSaslServer(SCRAM_SHA_256, lookup).evaluate_response(b"n,a=other,n=weak,r=abc")
    for bad in (b"p=tls-unique,,n=weak,r=abc", b"n,,n=weak", b"y,,n=weak,r=abc", b"n,,n=,r=abc"):
        with pytest.raises(SaslError, match="invalid SCRAM client first message"):
            await ScramSaslServer(SCRAM_SHA_256, lookup).evaluate_response(bad)
    with pytest.raises(SaslError, match="delegation tokens are not supported"):
        await ScramSaslServer(SCRAM_SHA_256, lookup).evaluate_response(b"n,,n=weak,r=abc,tokenauth=true")
    server = ScramSaslServer(SCRAM_SHA_256, lambda u, m: _const(generate_credential(SCRAM_SHA_256, "pw")))
    await server.evaluate_response(b"n,,n=u,r=abc")
    with pytest.raises(SaslError, match="Invalid client nonce"):
        await server.evaluate_response(b"c=biws,r=other,p=AAAA")


async def _const(value: Any) -> Any:
    return value


def test_credential_text_is_kafkas_and_bad_text_is_refused() -> None:
    credential = generate_credential(SCRAM_SHA_512, "pw", 8192, salt=b"salty")
    text = credential.to_text()
    assert text.startswith("salt=c2FsdHk=,stored_key=") and text.endswith(",iterations=8192")
    for bad in ("", "salt=x", "salt=!!,stored_key=,server_key=,iterations=1"):
        with pytest.raises(ValueError, match="invalid SCRAM credential"):
            ScramCredential.from_text(bad)


# -- conformance of the built-in mechanisms -----------------------------------------------------
class TestPlainConformance(SaslMechanismConformance):
    mechanism = MECHANISMS["PLAIN"]
    jaas = JAAS


class _ScramConformance(SaslMechanismConformance):
    scram: ScramMechanism = SCRAM_SHA_256

    async def credential_for(self, user: str, mechanism: Any) -> Any:
        if user == self.username and mechanism == self.scram:
            return generate_credential(self.scram, self.password, 4096, salt=b"fixed salt")
        return None


class TestScramSha256Conformance(_ScramConformance):
    mechanism = MECHANISMS["SCRAM-SHA-256"]
    scram = SCRAM_SHA_256


class TestScramSha512Conformance(_ScramConformance):
    mechanism = MECHANISMS["SCRAM-SHA-512"]
    scram = SCRAM_SHA_512
