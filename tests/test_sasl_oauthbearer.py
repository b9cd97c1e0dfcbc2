"""SASL/OAUTHBEARER without sockets: the client's first message (RFC 7628 as Kafka parses it),
Kafka's unsecured validator, the KIP-768 JWT validator over a JWKS (refresh, unknown kid), the
server's error flow through the authenticator, the session lifetime a token bounds, the
listener settings and odradek's client-side token providers. Every bad input ends in an
authentication failure with a reason, never an exception out of the authenticator."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from odradek.config import ConfigError, load_config
from odradek.errors import ErrorCode
from odradek.manager import default_plugins
from odradek.security.authenticator import SaslServerAuthenticator
from odradek.security.client import SaslClientSettings
from odradek.security.jaas import parse_jaas_config
from odradek.security.mechanism import SaslAuthenticationError, SaslError, SaslServerContext
from odradek.security.oauth_jwt import JwksSource, JwtValidator
from odradek.security.oauth_settings import build_validator, oauthbearer_mechanism
from odradek.security.oauth_unsecured import UnsecuredValidator, parse_unsecured_config, unsecured_token
from odradek.security.oauthbearer import (
    BearerToken,
    ClientInitialResponse,
    OAuthBearerSaslClient,
    OAuthBearerSaslServer,
    TokenValidationError,
    TokenValidator,
    parse_client_initial_response,
)
from odradek.testing.oauth import TokenIssuer, jwks_document
from odradek.testing.sasl import GARBAGE, authenticator_for, run_exchange

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
RSA = TokenIssuer.rsa("rsa-1")
EC = TokenIssuer.ec("ec-1")


def _b64(obj: Any) -> str:
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unsecured(claims: dict[str, Any], header: Any = None, signature: str = "") -> str:
    return f"{_b64(header if header is not None else {'alg': 'none'})}.{_b64(claims)}.{signature}"


def _now() -> int:
    return int(time.time())


# -- the client's first message ------------------------------------------------------------------


def test_first_message_round_trips_with_authzid_and_extensions() -> None:
    message = ClientInitialResponse("abc.def.", "us=er,x", {"traceId": "123", "logicalCluster": "lkc-1"}).encode()
    assert message.startswith(b"n,a=us=3Der=2Cx,\x01auth=Bearer abc.def.\x01")
    parsed = parse_client_initial_response(message)
    assert parsed.token == "abc.def."
    assert parsed.authorization_id == "us=er,x"
    assert dict(parsed.extensions) == {"traceId": "123", "logicalCluster": "lkc-1"}


def test_first_message_without_authzid_or_extensions() -> None:
    parsed = parse_client_initial_response(b"n,,\x01auth=bearer t0k3n\x01\x01")
    assert (parsed.token, parsed.authorization_id, dict(parsed.extensions)) == ("t0k3n", "", {})


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (b"", "Invalid OAUTHBEARER client first message"),
        (b"y,,\x01auth=Bearer t\x01\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,,\x01auth=Bearer t\x01", "Invalid OAUTHBEARER client first message"),  # no final \x01
        (b"n,,\x01\x01", "'auth' not specified"),
        (b"n,,\x01auth=Basic dXNlcg==\x01\x01", "Invalid scheme"),
        (b"n,,\x01auth=Bearer\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Bearer a b\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Bearer t\x01bad_key=v\x01\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,,\x01auth=Bearer t\x01k=\x01\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,,\x01auth=Bearer \xff\x01\x01", "not UTF-8"),
    ],
)
def test_malformed_first_messages_are_refused(message: bytes, why: str) -> None:
    with pytest.raises(SaslError, match=why):
        parse_client_initial_response(message)


def test_client_refuses_invalid_extensions() -> None:
    for extensions in ({"auth": "x"}, {"bad-name": "x"}, {"ok": "\x00"}):
        with pytest.raises(SaslError, match="extension"):
            ClientInitialResponse("t", "", extensions).encode()


# -- the unsecured validator -----------------------------------------------------------------------


async def _refusal(validator: TokenValidator, token: str) -> TokenValidationError:
    with pytest.raises(TokenValidationError) as info:
        await validator.validate(token)
    return info.value


@pytest.mark.trio
async def test_unsecured_token_validates() -> None:
    token = unsecured_token("alice", scope=("read", "write"), life_s=600)
    validated = await UnsecuredValidator(required_scope=frozenset({"read"})).validate(token.value)
    assert validated.principal_name == "alice"
    assert validated.scope == {"read", "write"}
    assert abs(validated.lifetime_ms - (time.time() + 600) * 1000) < 5000


@pytest.mark.trio
@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("not-a-jws", "3 dot-separated parts"),
        ("@@@.@@@.", "not base64url|not JSON"),
        (f"{_b64(b'not json')}.{_b64({'sub': 'a'})}.", "header is not JSON"),
        (f"{_b64([1])}.{_b64({'sub': 'a'})}.", "not a JSON object"),
        (_unsecured({"sub": "a", "exp": 2**40}, header={"alg": "RS256"}), "alg 'none'"),
        (_unsecured({"sub": "a", "exp": 2**40}, signature="c2ln"), "empty signature"),
        (_unsecured({"exp": 2**40}), "Required claim missing: sub"),
        (_unsecured({"sub": "", "exp": 2**40}), "non-empty string"),
        (_unsecured({"sub": 7, "exp": 2**40}), "non-empty string"),
        (_unsecured({"sub": "a"}), "Required claim missing: exp"),
        (_unsecured({"sub": "a", "exp": "soon"}), "incorrect type"),
        (_unsecured({"sub": "a", "exp": 1000}), "on or after the Expiration Time"),
        (_unsecured({"sub": "a", "exp": 2**40, "iat": 2**39}), "Issued At value"),
        (_unsecured({"sub": "a", "exp": 1000, "iat": 2000}), "Expiration Time"),
        (_unsecured({"sub": "a", "exp": 2**40, "scope": 5}), "scope claim had the incorrect type"),
    ],
)
async def test_unsecured_validator_refuses(token: str, why: str) -> None:
    refusal = await _refusal(UnsecuredValidator(), token)
    assert refusal.status == "invalid_token"
    assert re.search(why, refusal.explanation), refusal.explanation


@pytest.mark.trio
async def test_unsecured_validator_required_scope_is_insufficient_scope() -> None:
    validator = UnsecuredValidator(required_scope=frozenset({"kafka", "admin"}))
    refusal = await _refusal(validator, unsecured_token("a", scope=("kafka",)).value)
    assert (refusal.status, refusal.scope) == ("insufficient_scope", "admin kafka")


@pytest.mark.trio
async def test_unsecured_validator_options_from_jaas() -> None:
    jaas = parse_jaas_config(
        f'{MODULE} required unsecuredValidatorPrincipalClaimName="name" unsecuredValidatorScopeClaimName="scp" '
        'unsecuredValidatorRequiredScope="kafka" unsecuredValidatorAllowableClockSkewMs="60000";'
    )
    validator = UnsecuredValidator.from_jaas(jaas)
    now = _now()
    # expired 30 s ago, within the 60 s skew; principal from "name", scope from "scp"
    token = _unsecured({"name": "carol", "exp": now - 30, "scp": "kafka other"})
    assert (await validator.validate(token)).principal_name == "carol"
    assert (await _refusal(validator, _unsecured({"name": "c", "exp": now - 90, "scp": "kafka"}))).status
    assert (await _refusal(validator, _unsecured({"sub": "c", "exp": now + 60, "scp": "kafka"}))).explanation == (
        "Required claim missing: name"
    )
    with pytest.raises(ValueError, match="must not be negative"):
        UnsecuredValidator.from_jaas(
            parse_jaas_config(f'{MODULE} required unsecuredValidatorAllowableClockSkewMs="-1";')
        )


# -- the JWT validator over a JWKS ---------------------------------------------------------------------


class FakeJwks:
    """What the JWKS URL serves; counts reads."""

    def __init__(self, *issuers: TokenIssuer) -> None:
        self.document = jwks_document(*issuers)
        self.reads = 0

    def __call__(self, url: str) -> bytes:
        self.reads += 1
        return json.dumps(self.document).encode()


def _validator(fetch: Callable[[str], bytes], **options: Any) -> JwtValidator:
    return JwtValidator(JwksSource("https://idp.test/jwks", 60_000, fetch=fetch), **options)


@pytest.mark.trio
@pytest.mark.parametrize("issuer", [RSA, EC], ids=["RS256", "ES256"])
async def test_signed_token_validates(issuer: TokenIssuer) -> None:
    validator = _validator(FakeJwks(RSA, EC), expected_audience=("kafka",), expected_issuer="https://idp.test")
    validated = await validator.validate(issuer.token("alice", audience="kafka", scope="read write"))
    assert validated.principal_name == "alice"
    assert validated.scope == {"read", "write"}


@pytest.mark.trio
async def test_sub_and_scope_claim_names() -> None:
    validator = _validator(FakeJwks(RSA), sub_claim="client_id", scope_claim="scp")
    validated = await validator.validate(RSA.token("ignored", client_id="svc-a", scp=["produce"]))
    assert (validated.principal_name, validated.scope) == ("svc-a", {"produce"})


@pytest.mark.trio
@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: RSA.token("a", audience="other"), "audience"),
        (lambda: RSA.token("a", issuer="https://evil.test"), "issuer"),
        (lambda: RSA.token("a", life_s=-120), "expired"),
        (lambda: RSA.token("a", now_s=time.time() + 600), "not yet valid|iat"),
        (lambda: RSA.token("", audience="kafka"), "non-empty string"),
        (lambda: _unsecured({"sub": "a", "exp": 2**40}), "algorithm 'none'"),
        (lambda: "x.y.z", "not a JWS"),
        (lambda: RSA.token("a", audience="kafka")[:-4] + "AAAA", "Signature verification failed"),
        (lambda: EC.token("a", audience="kafka", kid="rsa-1"), "is not its key's"),
        (lambda: TokenIssuer.rsa("rsa-1").token("a", audience="kafka"), "Signature verification failed"),
        (lambda: RSA.token("a", audience="kafka", kid="nobody"), "no key with kid 'nobody'"),
    ],
    ids=[
        "audience", "issuer", "expired", "future-iat", "empty-sub", "alg-none", "garbage",
        "bad-signature", "alg-mismatch", "wrong-key", "unknown-kid",
    ],
)  # fmt: skip
async def test_jwt_validator_refuses(make: Callable[[], str], why: str) -> None:
    validator = _validator(FakeJwks(RSA, EC), expected_audience=("kafka",), expected_issuer="https://idp.test")
    refusal = await _refusal(validator, make())
    assert refusal.status == "invalid_token"
    assert re.search(why, refusal.explanation, re.IGNORECASE), refusal.explanation


@pytest.mark.trio
async def test_jwt_validator_needs_exp_and_iat() -> None:
    import jwt as pyjwt

    validator = _validator(FakeJwks(RSA))
    for claims in ({"sub": "a", "iat": _now()}, {"sub": "a", "exp": _now() + 60}):
        token = pyjwt.encode(claims, RSA.private_key, algorithm="RS256", headers={"kid": RSA.kid})
        assert "Could not validate" in (await _refusal(validator, token)).explanation


@pytest.mark.trio
async def test_unknown_kid_reloads_the_jwks_rate_limited(autojump_clock: trio.abc.Clock) -> None:
    fetch = FakeJwks(RSA)
    validator = _validator(fetch)
    await validator.validate(RSA.token("a"))
    assert fetch.reads == 1
    rotated = TokenIssuer.rsa("rsa-2")
    fetch.document = jwks_document(RSA, rotated)  # the provider rotates its key
    assert (await validator.validate(rotated.token("b"))).principal_name == "b"
    assert fetch.reads == 2
    # made-up kids: no reload within 10 s of the last one for an unknown kid, then one
    await _refusal(validator, RSA.token("a", kid="x1"))
    assert fetch.reads == 2
    await trio.sleep(10)
    await _refusal(validator, RSA.token("a", kid="x2"))
    await _refusal(validator, RSA.token("a", kid="x3"))
    assert fetch.reads == 3


@pytest.mark.trio
async def test_jwks_refreshes_after_its_interval_and_keeps_keys_when_a_reload_fails(
    autojump_clock: trio.abc.Clock,
) -> None:
    fetch = FakeJwks(RSA)
    validator = _validator(fetch)
    await validator.validate(RSA.token("a"))
    await trio.sleep(30)
    await validator.validate(RSA.token("a"))
    assert fetch.reads == 1
    await trio.sleep(31)
    fetch.document = {"keys": []}  # a broken reload keeps the keys already loaded
    assert (await validator.validate(RSA.token("a"))).principal_name == "a"
    assert fetch.reads == 2


@pytest.mark.trio
async def test_unreachable_jwks_is_a_refusal() -> None:
    def down(url: str) -> bytes:
        from odradek.security.oauth_jwt import JwksError

        raise JwksError(f"cannot read the JWKS at {url}: connection refused")

    assert "connection refused" in (await _refusal(_validator(down), RSA.token("a"))).explanation


# -- the exchange through the authenticator ------------------------------------------------------------


def _authenticator(validator: TokenValidator, **options: Any) -> SaslServerAuthenticator:
    return authenticator_for({"OAUTHBEARER": lambda: OAuthBearerSaslServer(validator)}, failed_delay_s=0, **options)


@pytest.mark.trio
async def test_exchange_authenticates_and_the_token_bounds_the_session() -> None:
    auth = _authenticator(UnsecuredValidator(), reauth_ms={"OAUTHBEARER": 3_600_000})
    step, answer = await run_exchange(auth, OAuthBearerSaslClient(unsecured_token("alice", life_s=60)), "OAUTHBEARER")
    assert not step.close and str(auth.principal) == "User:alice"
    lifetime_ms = answer.session_lifetime.total_seconds() * 1000
    assert 55_000 < lifetime_ms <= 60_000  # min(connections.max.reauth.ms, the token's remaining life)


@pytest.mark.trio
async def test_a_token_expired_within_the_skew_gets_a_session_that_ends_at_once() -> None:
    auth = _authenticator(UnsecuredValidator(clock_skew_ms=60_000))
    token = unsecured_token("alice", life_s=30, now_s=time.time() - 40)  # expired 10 s ago
    step, answer = await run_exchange(auth, OAuthBearerSaslClient(token), "OAUTHBEARER")
    assert not step.close and auth.session_lifetime_ms == 1
    assert answer.session_lifetime.total_seconds() == 0.001


@pytest.mark.trio
async def test_raw_tokens_after_a_v0_handshake() -> None:
    """Old clients (SaslHandshake v0) send bare tokens: the same exchange, the JSON challenge bare too."""
    auth = _authenticator(UnsecuredValidator())
    step, _ = await run_exchange(
        auth, OAuthBearerSaslClient(unsecured_token("alice")), "OAUTHBEARER", handshake_version=0
    )
    assert not step.close and str(auth.principal) == "User:alice"
    refused = _authenticator(UnsecuredValidator(required_scope=frozenset({"kafka"})))
    step, _ = await run_exchange(
        refused, OAuthBearerSaslClient(unsecured_token("alice")), "OAUTHBEARER", handshake_version=0
    )
    assert step.close and not refused.complete and "insufficient_scope" in step.reason


@pytest.mark.trio
async def test_max_reauth_bounds_a_long_token() -> None:
    auth = _authenticator(UnsecuredValidator(), reauth_ms={"OAUTHBEARER": 2000})
    _, answer = await run_exchange(auth, OAuthBearerSaslClient(unsecured_token("alice", life_s=600)), "OAUTHBEARER")
    assert answer.session_lifetime.total_seconds() == 2


@pytest.mark.trio
async def test_refused_token_gets_kafkas_json_error_then_fails() -> None:
    auth = _authenticator(UnsecuredValidator(required_scope=frozenset({"kafka"})))
    step, answer = await run_exchange(auth, OAuthBearerSaslClient(unsecured_token("alice")), "OAUTHBEARER")
    assert step.close and not auth.complete
    assert int(answer.error_code) == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer.error_message == '{"status":"insufficient_scope", "scope":"kafka"}'


@pytest.mark.trio
async def test_server_sends_the_json_challenge_and_fails_on_the_clients_ack() -> None:
    server = OAuthBearerSaslServer(UnsecuredValidator())
    challenge = await server.evaluate_response(ClientInitialResponse("a.b.c").encode())
    assert challenge == b'{"status":"invalid_token"}'
    with pytest.raises(SaslAuthenticationError, match='"status":"invalid_token"'):
        await server.evaluate_response(b"\x01")
    other = OAuthBearerSaslServer(UnsecuredValidator())
    await other.evaluate_response(ClientInitialResponse("a.b.c").encode())
    with pytest.raises(SaslError, match="acknowledge"):
        await other.evaluate_response(b"n,,\x01auth=Bearer x\x01\x01")


@pytest.mark.trio
async def test_authzid_must_be_the_tokens_principal() -> None:
    server = OAuthBearerSaslServer(UnsecuredValidator())
    token = unsecured_token("alice").value
    with pytest.raises(SaslAuthenticationError, match=r"authorization id \(bob\)"):
        await server.evaluate_response(ClientInitialResponse(token, "bob").encode())
    ok = OAuthBearerSaslServer(UnsecuredValidator())
    assert await ok.evaluate_response(ClientInitialResponse(token, "alice", {"traceId": "1"}).encode()) == b""
    assert ok.complete and ok.authorization_id == "alice" and dict(ok.extensions) == {"traceId": "1"}


@pytest.mark.trio
@pytest.mark.parametrize("token", GARBAGE, ids=lambda t: f"{len(t)}B")
async def test_garbage_fails_cleanly_through_the_authenticator(token: bytes) -> None:
    from odradek.protocol import ApiKey, decode_response
    from odradek.testing.sasl import request_frame

    auth = _authenticator(UnsecuredValidator())
    await auth.receive(request_frame(ApiKey.SASL_HANDSHAKE, 1, mechanism="OAUTHBEARER"))
    step = await auth.receive(request_frame(ApiKey.SASL_AUTHENTICATE, 1, 2, auth_bytes=token))
    _, answer = decode_response(ApiKey.SASL_AUTHENTICATE, 1, step.response)
    assert step.close and int(answer.error_code) == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "OAUTHBEARER" in answer.error_message


# -- the listener's settings ---------------------------------------------------------------------------


def _context(tmp_path: Path, settings: dict[str, Any], jaas: str | None = None) -> SaslServerContext:
    config = load_config(
        env={},
        plugins=default_plugins(),
        overrides={
            "log.dirs": str(tmp_path / "logs"),
            "listeners": "CLIENTS://127.0.0.1:0",
            "listener.security.protocol.map": "CLIENTS:SASL_PLAINTEXT",
            **settings,
        },
    )

    async def none(user: str, mechanism: Any) -> Any:
        return None

    return SaslServerContext("CLIENTS", "OAUTHBEARER", parse_jaas_config(jaas) if jaas else None, none, config)


def test_listener_without_jwks_takes_the_unsecured_validator(tmp_path: Path) -> None:
    context = _context(tmp_path, {}, f'{MODULE} required unsecuredValidatorRequiredScope="kafka";')
    validator = build_validator(context)
    assert isinstance(validator, UnsecuredValidator) and validator.required_scope == {"kafka"}


def test_per_listener_jwks_settings(tmp_path: Path) -> None:
    url = RSA.write_jwks(tmp_path / "jwks.json")
    context = _context(
        tmp_path,
        {
            "listener.name.clients.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": url,
            "sasl.oauthbearer.expected.audience": "kafka,other",
            "listener.name.clients.oauthbearer.sasl.oauthbearer.expected.issuer": "https://idp.test",
            "sasl.oauthbearer.clock.skew.seconds": "5",
        },
    )
    validator = build_validator(context)
    assert isinstance(validator, JwtValidator)
    assert (validator.expected_audience, validator.expected_issuer, validator.clock_skew_s) == (
        ("kafka", "other"), "https://idp.test", 5,
    )  # fmt: skip


@pytest.mark.trio
async def test_file_jwks_validates_through_the_mechanism(tmp_path: Path) -> None:
    url = RSA.write_jwks(tmp_path / "jwks.json")
    context = _context(tmp_path, {"sasl.oauthbearer.jwks.endpoint.url": url})
    mechanism = oauthbearer_mechanism()
    assert mechanism.listener_servers is not None
    servers = mechanism.listener_servers(context)
    auth = authenticator_for({"OAUTHBEARER": servers}, failed_delay_s=0)
    token = BearerToken(RSA.token("dave"), time.time() + 3600)
    step, _ = await run_exchange(auth, OAuthBearerSaslClient(token), "OAUTHBEARER")
    assert not step.close and str(auth.principal) == "User:dave"


@pytest.mark.parametrize(
    ("settings", "jaas", "why"),
    [
        ({"sasl.oauthbearer.jwks.endpoint.url": "ftp://idp/jwks"}, None, "file:, http: or https:"),
        ({"sasl.oauthbearer.jwks.endpoint.url": "file:/nonexistent/jwks.json"}, None, "cannot read the JWKS"),
        ({}, 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";', "not " + MODULE),
        ({}, f'{MODULE} required unsecuredValidatorAllowableClockSkewMs="soon";', "must be an integer"),
    ],
)
def test_bad_listener_settings_stop_the_broker(
    tmp_path: Path, settings: dict[str, Any], jaas: str | None, why: str
) -> None:
    with pytest.raises(ConfigError, match=why):
        build_validator(_context(tmp_path, settings, jaas))


def test_bad_jwks_file_stops_the_broker(tmp_path: Path) -> None:
    (tmp_path / "jwks.json").write_text('{"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}')
    with pytest.raises(ConfigError, match="no usable signing key"):
        build_validator(_context(tmp_path, {"sasl.oauthbearer.jwks.endpoint.url": f"file:{tmp_path}/jwks.json"}))


# -- odradek's client: where tokens come from ------------------------------------------------------------

SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}
UNSECURE = {"enable.sasl.oauthbearer.unsecure.jwt": "true"}


@pytest.mark.trio
async def test_oauth_cb_is_called_for_every_login() -> None:
    calls: list[str] = []

    def oauth_cb(config: str) -> tuple[str, float, str, dict[str, str]]:
        calls.append(config)
        return f"tok{len(calls)}", time.time() + 60, "alice", {"traceId": "7"}

    settings = SaslClientSettings.from_config({**SASL, "oauth_cb": oauth_cb, "sasl.oauthbearer.config": "x=y"})
    assert settings is not None
    for n in (1, 2):
        client = await settings.client_for({})
        message = parse_client_initial_response(client.initial_response())
        assert (message.token, dict(message.extensions)) == (f"tok{n}", {"traceId": "7"})
    assert calls == ["x=y", "x=y"]


@pytest.mark.trio
async def test_unsecured_jwt_from_sasl_oauthbearer_config() -> None:
    settings = SaslClientSettings.from_config(
        {
            **SASL,
            "enable.sasl.oauthbearer.unsecure.jwt": "true",
            "sasl.oauthbearer.config": "principal=erin scope=a,b lifeSeconds=120 extension_traceId=9",
        }
    )
    assert settings is not None
    client = await settings.client_for({})
    message = parse_client_initial_response(client.initial_response())
    validated = await UnsecuredValidator(required_scope=frozenset({"a", "b"})).validate(message.token)
    assert validated.principal_name == "erin" and dict(message.extensions) == {"traceId": "9"}


@pytest.mark.trio
async def test_a_failing_oauth_cb_is_an_authentication_failure() -> None:
    from odradek.security.client import AuthenticationFailed

    def broken(config: str) -> Any:
        return "not a tuple"

    settings = SaslClientSettings.from_config({**SASL, "oauth_cb": broken})
    assert settings is not None
    with pytest.raises(AuthenticationFailed, match="token provider failed"):
        await settings.client_for({})


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({}, "needs a token"),
        ({"oauth_cb": "not callable"}, "expected a callable"),
        ({**UNSECURE}, "principal=<name> is required"),
        ({**UNSECURE, "sasl.oauthbearer.config": "principal=a bogus=1"}, "unknown"),
        ({**UNSECURE, "sasl.oauthbearer.config": "principal=a lifeSeconds=x"}, "lifeSeconds"),
    ],
)  # fmt: skip
def test_client_oauthbearer_config_errors(config: dict[str, Any], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        SaslClientSettings.from_config({**SASL, **config})


def test_parse_unsecured_config() -> None:
    assert parse_unsecured_config("principal=a principalClaimName=uid scopeClaimName=scp") == {
        "principal": "a", "extensions": {}, "principal_claim": "uid", "scope_claim": "scp",
    }  # fmt: skip


@pytest.mark.trio
async def test_http_jwks_is_read_in_a_thread_and_reread_for_a_new_kid(tmp_path: Path) -> None:
    """A real http: JWKS (a local server): read without blocking trio, re-read when keys rotate."""
    import functools
    import http.server
    import threading

    RSA.write_jwks(tmp_path / "jwks.json")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        validator = JwtValidator(JwksSource(url, 3_600_000))
        assert (await validator.validate(RSA.token("alice"))).principal_name == "alice"
        rotated = TokenIssuer.ec("ec-rotated")
        RSA.write_jwks(tmp_path / "jwks.json", rotated)
        assert (await validator.validate(rotated.token("bob"))).principal_name == "bob"
        assert validator.jwks.fetches == 2
        missing = JwtValidator(JwksSource(url.replace("jwks.json", "nope.json"), 3_600_000))
        assert "404" in (await _refusal(missing, RSA.token("a"))).explanation
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
