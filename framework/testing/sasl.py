"""Conformance suite for SASL mechanisms (``odradek_register_sasl_mechanisms``).

A mechanism plugin -- the built-in PLAIN and SCRAM or a third party's OAUTHBEARER -- runs it
against itself::

    class TestMyMechanism(SaslMechanismConformance):
        mechanism = MY_MECHANISM            # the SaslMechanism the hook registers
        jaas = 'com.example.MyLoginModule required ...;'
        username, password = "alice", "alice-secret"

What a mechanism must honour, and why (the broker's ``SaslServerAuthenticator`` drives it):

- with the right credentials its client and server complete an exchange, over SaslAuthenticate
  (SaslHandshake v1) and over bare tokens (v0), and the principal is ``User:<username>``;
- a wrong password fails with ``SaslError`` (answered SASL_AUTHENTICATION_FAILED, then closed);
- whatever bytes a client sends (empty, garbage, not UTF-8, large) the server raises nothing but
  ``SaslError``: a malformed token never reaches the broker as a crash;
- every exchange gets a new server: one that failed leaves the next unaffected.

:func:`run_exchange` drives an authenticator with a client without sockets; tests of the
authenticator itself use it too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import pytest

from ..errors import ErrorCode
from ..protocol import ApiKey, decode_response, encode_request, request_type
from ..security.authenticator import SaslServerAuthenticator, SaslStep
from ..security.jaas import parse_jaas_config
from ..security.mechanism import SaslClient, SaslError, SaslMechanism, SaslServerContext

__all__ = ["SaslMechanismConformance", "authenticator_for", "run_exchange"]

GARBAGE: tuple[bytes, ...] = (b"", b"\x00", b"\xff\xfe\xfd", b"n,,", b"\x00\x00\x00", b"=" * 70_000, bytes(range(256)))


async def _no_api_versions(header: Any, frame: Any) -> Any:
    raise AssertionError("no ApiVersions expected")


def authenticator_for(
    mechanisms: dict[str, Callable[[], Any]],
    process: Callable[[Any, Any], Awaitable[Any]] = _no_api_versions,
    *,
    failed_delay_s: float = 0.1,
    **options: Any,
) -> SaslServerAuthenticator:
    """An authenticator for ``mechanisms`` (name -> server factory), with no connection;
    ``options`` are the authenticator's others (``reauth_ms``, ``reauthenticating``)."""
    return SaslServerAuthenticator(
        mechanisms, process, peer="test", listener="TEST", failed_delay_s=failed_delay_s, **options
    )


def request_frame(api_key: int, version: int, correlation_id: int = 1, **fields: Any) -> bytearray:
    """A request frame (header and body, no size prefix), as a client sends it."""
    request = request_type(api_key, version)(**fields)
    return bytearray(encode_request(request, correlation_id=correlation_id, client_id="conformance"))


async def run_exchange(
    auth: SaslServerAuthenticator, client: SaslClient, mechanism: str, *, handshake_version: int = 1
) -> tuple[SaslStep, Any]:
    """Drive ``auth`` with ``client`` until it completes or closes: (the last step, the last
    decoded response or bare challenge)."""
    step = await auth.receive(request_frame(ApiKey.SASL_HANDSHAKE, handshake_version, mechanism=mechanism))
    _, answer = decode_response(ApiKey.SASL_HANDSHAKE, handshake_version, step.response)
    if step.close or int(answer.error_code) != ErrorCode.NONE:
        return step, answer
    token: bytes | None = client.initial_response()
    correlation = 2
    while token is not None:
        if handshake_version == 0:
            step = await auth.receive(bytearray(token))
            if step.close:
                return step, None
            challenge = bytes(step.response)
            answer = challenge
        else:
            step = await auth.receive(request_frame(ApiKey.SASL_AUTHENTICATE, 1, correlation, auth_bytes=token))
            correlation += 1
            _, answer = decode_response(ApiKey.SASL_AUTHENTICATE, 1, step.response)
            if step.close:
                return step, answer
            challenge = bytes(answer.auth_bytes)
        if auth.complete and not challenge:
            return step, answer
        token = client.evaluate_challenge(challenge)
    return step, answer


class SaslMechanismConformance:
    """Base class of a SASL mechanism's conformance tests; see the module docstring."""

    #: the SaslMechanism the plugin registers
    mechanism: ClassVar[SaslMechanism | None] = None
    #: the listener's JAAS config for it (None: none)
    jaas: ClassVar[str | None] = None
    #: a user the server accepts, and its password
    username: ClassVar[str] = "alice"
    password: ClassVar[str] = "alice-secret"

    async def credential_for(self, user: str, mechanism: Any) -> Any:
        """Credentials the server looks up (SCRAM): override to provide them."""
        return None

    def _mechanism(self) -> SaslMechanism:
        if self.mechanism is None:
            pytest.fail(f"{type(self).__name__} must set `mechanism` to the SaslMechanism under test")
        return self.mechanism

    def context(self) -> SaslServerContext:
        m = self._mechanism()
        jaas = parse_jaas_config(self.jaas) if self.jaas else None
        return SaslServerContext("CONFORMANCE", m.name, jaas, self.credential_for, None)

    def authenticator(self) -> SaslServerAuthenticator:
        m, context = self._mechanism(), self.context()
        if m.check is not None:
            m.check(context)
        return authenticator_for({m.name: lambda: m.server(context)}, failed_delay_s=0)

    def client(self, password: str | None = None) -> SaslClient:
        m = self._mechanism()
        if m.client is None:
            pytest.skip(f"{m.name} has no client side")
        return m.client(self.username, self.password if password is None else password)

    @pytest.mark.trio
    @pytest.mark.parametrize("handshake_version", [0, 1])
    async def test_right_credentials_authenticate(self, handshake_version: int) -> None:
        auth = self.authenticator()
        step, _ = await run_exchange(auth, self.client(), self._mechanism().name, handshake_version=handshake_version)
        assert not step.close, step.reason
        assert auth.complete and str(auth.principal) == f"User:{self.username}"

    @pytest.mark.trio
    async def test_wrong_password_fails(self) -> None:
        auth = self.authenticator()
        step, answer = await run_exchange(auth, self.client("not-" + self.password), self._mechanism().name)
        assert step.close and not auth.complete
        assert int(answer.error_code) == ErrorCode.SASL_AUTHENTICATION_FAILED, answer

    @pytest.mark.trio
    @pytest.mark.parametrize("token", GARBAGE, ids=lambda t: f"{len(t)}B")
    async def test_garbage_tokens_fail_cleanly(self, token: bytes) -> None:
        m = self._mechanism()
        server = m.server(self.context())
        try:
            reply = await server.evaluate_response(token)
        except SaslError:
            assert not server.complete
            return
        assert isinstance(reply, bytes)
        assert not server.complete, "a garbage token authenticated"

    @pytest.mark.trio
    async def test_each_exchange_gets_a_new_server(self) -> None:
        failed = self.authenticator()
        await run_exchange(failed, self.client("wrong"), self._mechanism().name)
        auth = self.authenticator()
        step, _ = await run_exchange(auth, self.client(), self._mechanism().name)
        assert auth.complete, step.reason
