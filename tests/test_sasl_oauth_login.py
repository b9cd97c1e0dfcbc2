"""OAUTHBEARER logins without a broker: the client-credentials request and answer (sans-IO), its
retries and refusals, the refresh at 80% of a token's lifetime (trio's autojump clock), librdkafka's
``oidc`` client settings, Kafka's unsecured and token endpoint broker logins from JAAS, the
inter-broker client config, and the URL allow-list."""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

import pytest
import trio

from odradek.config import Config, ConfigError, load_config
from odradek.manager import default_plugins
from odradek.security.client import AuthenticationFailed, SaslClientSettings
from odradek.security.jaas import parse_jaas_config
from odradek.security.oauth_login import login_provider
from odradek.security.oauth_token_endpoint import (
    RefreshingTokenProvider,
    TokenEndpointError,
    TokenEndpointSettings,
    fetch_token,
    parse_token_response,
    token_request,
)
from odradek.security.oauth_unsecured import UnsecuredValidator
from odradek.security.oauthbearer import BearerToken
from odradek.security.settings import check_security_config, inter_broker_client_config
from odradek.testing.oauth import TokenEndpoint, TokenIssuer

IDP = TokenIssuer.rsa("unit-key")
SETTINGS = TokenEndpointSettings("https://idp.test/token", "alice", "s3cret:x", scope="kafka read")
NOW = 1_800_000_000.0
MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


# -- the client-credentials exchange, sans-IO ------------------------------------------------------


def test_token_request_is_a_client_credentials_form_with_basic_auth() -> None:
    body, headers = token_request(SETTINGS)
    assert urllib.parse.parse_qs(body.decode()) == {"grant_type": ["client_credentials"], "scope": ["kafka read"]}
    assert base64.b64decode(headers["Authorization"].removeprefix("Basic ")) == b"alice:s3cret:x"
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"
    no_scope, _ = token_request(TokenEndpointSettings("https://idp.test/token", "alice", "s"))
    assert no_scope == b"grant_type=client_credentials"
    assert "s3cret" not in repr(SETTINGS)


def test_token_lifetime_from_exp_else_expires_in() -> None:
    jwt = IDP.token("alice", life_s=100, now_s=NOW)
    answer = json.dumps({"access_token": jwt, "expires_in": 5}).encode()
    token = parse_token_response(200, answer, SETTINGS, now_s=NOW)
    assert (token.value, token.expires_at_s, token.principal) == (jwt, NOW + 100, "alice")  # exp wins
    opaque = parse_token_response(200, b'{"access_token": "opaque", "expires_in": 60}', SETTINGS, now_s=NOW)
    assert (opaque.expires_at_s, opaque.principal) == (NOW + 60, "alice")


@pytest.mark.parametrize(
    ("status", "body", "message", "retriable"),
    [
        (401, b'{"error": "invalid_client"}', 'HTTP 401: {"error": "invalid_client"}', False),
        (400, b"", "HTTP 400: (empty body)", False),
        (503, b"x" * 500, "HTTP 503: " + "x" * 200 + "...", True),
        (200, b"<html>", "with no JSON: <html>", False),
        (200, b'{"token": "t"}', "no access_token", False),
        (200, b'{"access_token": "opaque"}', "no exp claim and no expires_in", False),
    ],
)  # fmt: skip
def test_bad_answers_say_what_failed(status: int, body: bytes, message: str, retriable: bool) -> None:
    with pytest.raises(TokenEndpointError) as failed:
        parse_token_response(status, body, SETTINGS, now_s=NOW)
    assert message in str(failed.value) and SETTINGS.url in str(failed.value)
    assert failed.value.retriable is retriable


def test_an_expired_token_is_refused() -> None:
    expired = json.dumps({"access_token": IDP.token("alice", life_s=-5, now_s=NOW)}).encode()
    with pytest.raises(TokenEndpointError, match="already expired"):
        parse_token_response(200, expired, SETTINGS, now_s=NOW)


class FakeEndpoint:
    """Answers ``answers`` in turn (an int: that status; an exception: raised)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def __call__(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if answer == 200:
            return 200, json.dumps({"access_token": "t", "expires_in": 60}).encode()
        return answer, b'{"error": "x"}'


async def test_server_errors_are_retried_with_backoff(autojump_clock: trio.abc.Clock) -> None:
    endpoint = FakeEndpoint(TokenEndpointError("refused", retriable=True), 503, 200)
    start = trio.current_time()
    token = await fetch_token(SETTINGS, post=endpoint)
    assert (token.value, endpoint.calls) == ("t", 3)
    assert trio.current_time() - start == pytest.approx(0.1 + 0.2)  # sasl.login.retry.backoff.ms, doubled


async def test_client_errors_are_not_retried_and_retries_are_bounded(autojump_clock: trio.abc.Clock) -> None:
    refused = FakeEndpoint(401, 200)
    with pytest.raises(TokenEndpointError, match="HTTP 401"):
        await fetch_token(SETTINGS, post=refused)
    assert refused.calls == 1
    down = FakeEndpoint(*[503] * 10)
    with pytest.raises(TokenEndpointError, match=r"HTTP 503.*after 5 attempts"):
        await fetch_token(SETTINGS, post=down)
    assert down.calls == 5


async def test_a_silent_endpoint_times_out(autojump_clock: trio.abc.Clock) -> None:
    settings = TokenEndpointSettings("https://idp.test/token", "a", "b", timeout_s=2, attempts=1)

    async def hangs(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
        await trio.sleep_forever()
        raise AssertionError

    with pytest.raises(TokenEndpointError, match="did not answer within 2 s"):
        await fetch_token(settings, post=hangs)


async def test_the_token_is_kept_until_80_percent_of_its_lifetime(autojump_clock: trio.abc.Clock) -> None:
    fetched: list[float] = []

    async def fetch() -> BearerToken:
        fetched.append(trio.current_time())
        return BearerToken(f"t{len(fetched)}", trio.current_time() + 100)

    provider = RefreshingTokenProvider(fetch, now=trio.current_time)
    assert (await provider()).value == "t1"
    await trio.sleep(79)
    assert (await provider()).value == "t1"
    await trio.sleep(1)
    assert (await provider()).value == "t2"  # 80 s of 100: replaced
    assert provider.fetches == 2


async def test_the_local_token_endpoint_over_http() -> None:
    with TokenEndpoint(IDP, {"alice": "right"}, life_s=30) as endpoint:
        settings = TokenEndpointSettings(endpoint.token_url, "alice", "right", scope="kafka")
        token = await fetch_token(settings)
        assert token.principal == "alice" and endpoint.issued["alice"] == 1
        with pytest.raises(TokenEndpointError, match="HTTP 401.*invalid_client"):
            await fetch_token(TokenEndpointSettings(endpoint.token_url, "alice", "wrong"))
    with pytest.raises(TokenEndpointError, match="cannot reach the token endpoint"):
        await fetch_token(TokenEndpointSettings(endpoint.token_url, "alice", "right", attempts=1))


# -- librdkafka's client settings -------------------------------------------------------------------

OIDC = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "OAUTHBEARER",
    "sasl.oauthbearer.method": "oidc",
    "sasl.oauthbearer.token.endpoint.url": "https://idp.test/token",
    "sasl.oauthbearer.client.id": "alice",
    "sasl.oauthbearer.client.secret": "s",
}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"sasl.oauthbearer.token.endpoint.url": ""}, "'sasl.oauthbearer.token.endpoint.url' is mandatory"),
        ({"sasl.oauthbearer.client.id": ""}, "'sasl.oauthbearer.client.id' is mandatory"),
        ({"sasl.oauthbearer.client.secret": ""}, "'sasl.oauthbearer.client.secret' is mandatory"),
        ({"sasl.oauthbearer.token.endpoint.url": "ftp://idp/token"}, "must be a http:, https: URL"),
        ({"sasl.oauthbearer.token.endpoint.url": "file:/tmp/token"}, "must be a http:, https: URL"),
        ({"sasl.oauthbearer.token.endpoint.url": "https:///token"}, "has no host"),
        ({"oauth_cb": lambda c: ("t", 1)}, "mutually exclusive"),
        ({"enable.sasl.oauthbearer.unsecure.jwt": "true"}, "mutually exclusive"),
        ({"sasl.oauthbearer.extensions": "novalue"}, "expected key=value"),
        ({"sasl.oauthbearer.extensions": "a1=x"}, "letters only"),
        ({"sasl.oauthbearer.method": "aws"}, "default or oidc"),
    ],
)  # fmt: skip
def test_oidc_client_config_errors(change: dict[str, Any], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        SaslClientSettings.from_config({**OIDC, **change})


async def test_oidc_client_failure_is_an_authentication_failure_naming_the_endpoint() -> None:
    with TokenEndpoint(IDP, {"alice": "right"}) as endpoint:
        conf = {**OIDC, "sasl.oauthbearer.token.endpoint.url": endpoint.token_url, "sasl.oauthbearer.extensions": "a=b"}
        settings = SaslClientSettings.from_config(conf)
        assert settings is not None and settings.token_provider is not None
        with pytest.raises(AuthenticationFailed, match="token provider failed: .*HTTP 401"):
            await settings.client_for({})
        good = SaslClientSettings.from_config({**conf, "sasl.oauthbearer.client.secret": "right"})
        assert good is not None and good.token_provider is not None
        token = await good.token_provider()  # type: ignore[misc]
        assert token.extensions == {"a": "b"}


# -- the broker's logins ----------------------------------------------------------------------------


def _jaas(options: str) -> Any:
    return parse_jaas_config(f"{MODULE} required {options};")


def _setting(values: Mapping[str, Any]) -> Any:
    return lambda name, default: values.get(name, default)


async def test_kafkas_unsecured_login_claims_from_jaas() -> None:
    jaas = _jaas(
        'unsecuredLoginStringClaim_sub="broker" unsecuredLoginListClaim_scope=",a,b" '
        'unsecuredLoginNumberClaim_n="7" unsecuredLoginLifetimeSeconds="60" unsecuredLoginExtension_traceId="x"'
    )
    provider = login_provider(jaas, _setting({}), "here")
    token = await provider()
    assert token.principal == "broker" and token.extensions == {"traceId": "x"}
    validated = await UnsecuredValidator(required_scope=frozenset({"a"})).validate(token.value)
    assert validated.principal_name == "broker" and validated.scope == {"a", "b"}
    assert validated.lifetime_ms - validated.start_time_ms == pytest.approx(60_000, abs=2)  # type: ignore[operator]
    assert await provider() is token  # kept for the next login


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ("", 'needs its principal: unsecuredLoginStringClaim_sub="<name>"'),
        ('unsecuredLoginStringClaim_uid="b" unsecuredLoginPrincipalClaimName="sub"', "needs its principal"),
        ('unsecuredLoginStringClaim_sub="b" unsecuredLoginNumberClaim_exp="1"', "exp claim is set by the login"),
        ('unsecuredLoginStringClaim_sub="b" unsecuredLoginNumberClaim_n="x"', "is not a number"),
        ('unsecuredLoginStringClaim_sub="b" unsecuredLoginLifetimeSeconds="0"', "must be positive"),
        ('unsecuredLoginStringClaim_sub="b" unsecuredLoginExtension_auth="x"', "reserved"),
    ],
)  # fmt: skip
def test_unsecured_login_errors(options: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        login_provider(_jaas(options), _setting({}), "here")


async def test_token_endpoint_login_from_jaas() -> None:
    with TokenEndpoint(IDP, {"broker": "pw"}) as endpoint:
        jaas = _jaas('clientId="broker" clientSecret="pw" scope="kafka" extension_traceId="y"')
        url = {"sasl.oauthbearer.token.endpoint.url": endpoint.token_url}
        token = await login_provider(jaas, _setting(url), "here")()
        assert token.principal == "broker" and token.extensions == {"traceId": "y"}
        assert endpoint.issued["broker"] == 1


@pytest.mark.parametrize(
    ("options", "settings", "why"),
    [
        ('clientSecret="pw"', {}, 'needs clientId="..."'),
        ('clientId="b"', {}, 'needs clientSecret="..."'),
        ('clientId="b" clientSecret="pw"', {"sasl.oauthbearer.token.endpoint.url": "ftp://x/t"}, "must be a"),
        ('clientId="b" clientSecret="pw"', {"sasl.oauthbearer.allowed.urls": ["https://other/t"]}, "not allowed"),
        ("", {"sasl.oauthbearer.token.endpoint.url": "file:/nonexistent/token"}, "no token file at"),
    ],
)  # fmt: skip
def test_token_endpoint_login_errors(options: str, settings: dict[str, Any], why: str) -> None:
    values = {"sasl.oauthbearer.token.endpoint.url": "https://idp.test/token", **settings}
    with pytest.raises(ConfigError, match=why):
        login_provider(_jaas(options), _setting(values), "here")


async def test_token_file_login(tmp_path: Any) -> None:
    path = tmp_path / "token"
    path.write_text(IDP.token("broker", life_s=300) + "\n")
    token = await login_provider(None, _setting({"sasl.oauthbearer.token.endpoint.url": f"file:{path}"}), "here")()
    assert token.principal == "broker"


def test_a_plain_login_module_is_refused() -> None:
    jaas = parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required username="a";')
    with pytest.raises(ConfigError, match="not org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"):
        login_provider(jaas, _setting({}), "here")


# -- the broker config ------------------------------------------------------------------------------


def _broker(overrides: dict[str, str]) -> Config:
    base = {
        "listeners": "REPL://127.0.0.1:0,CLIENTS://127.0.0.1:0",
        "listener.security.protocol.map": "REPL:SASL_PLAINTEXT,CLIENTS:SASL_PLAINTEXT",
        "inter.broker.listener.name": "REPL",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
        "listener.name.repl.oauthbearer.sasl.jaas.config": f'{MODULE} required unsecuredLoginStringClaim_sub="b";',
    }
    return load_config(env={}, overrides={**base, **overrides}, plugins=default_plugins())


async def test_inter_broker_oauthbearer_client_config_logs_in_per_listener() -> None:
    config = _broker({})
    check_security_config(config)
    endpoint = config.inter_broker_listener
    assert endpoint is not None
    out = inter_broker_client_config(config, endpoint, default_plugins().sasl_mechanisms())
    assert out["sasl.mechanism"] == "OAUTHBEARER"
    settings = SaslClientSettings.from_config(out)
    assert settings is not None
    client = await settings.client_for({})
    assert client.initial_response().startswith(b"n,,\x01auth=Bearer ")


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"listener.name.repl.oauthbearer.sasl.jaas.config": f"{MODULE} required;"}, "needs its principal"),
        (
            {"listener.name.repl.oauthbearer.sasl.oauthbearer.token.endpoint.url": "https://idp.test/token"},
            'needs clientId="..."',
        ),
        (
            {"sasl.oauthbearer.jwks.endpoint.url": "https://idp.test/jwks",
             "sasl.oauthbearer.allowed.urls": "https://idp.test/token"},
            "'https://idp.test/jwks' is not allowed as an OAUTHBEARER endpoint",
        ),
    ],
)  # fmt: skip
def test_inter_broker_oauthbearer_mistakes_stop_the_start(overrides: dict[str, str], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        check_security_config(_broker(overrides))


async def test_logins_at_the_same_time_share_one_fetch(autojump_clock: trio.abc.Clock) -> None:
    fetches = 0

    async def fetch() -> BearerToken:
        nonlocal fetches
        fetches += 1
        await trio.sleep(1)  # the endpoint is slow
        return BearerToken("t", trio.current_time() + 100)

    provider = RefreshingTokenProvider(fetch, now=trio.current_time)
    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(provider)
    assert fetches == 1
