"""The server's SASL state machine (SaslServerAuthenticator), sans-IO: frames in, steps out."""

from __future__ import annotations

from typing import Any

import pytest

from odradek.errors import ErrorCode
from odradek.principal import KafkaPrincipal
from odradek.protocol import ApiKey, decode_response, parse_request_header
from odradek.security.authenticator import SaslState, generic_failure
from odradek.security.plain import PlainSaslClient, PlainSaslServer
from odradek.security.plugin import odradek_register_sasl_mechanisms
from odradek.security.scram import SCRAM_SHA_256, ScramSaslClient, ScramSaslServer, generate_credential
from odradek.testing.sasl import authenticator_for, request_frame, run_exchange

USERS = {"alice": "alice-secret"}
MECHANISMS = {m.name: m for m in odradek_register_sasl_mechanisms()}
METADATA_V8 = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_cluster_authorized_operations": False,
    "include_topic_authorized_operations": False,
}
CREDENTIAL = generate_credential(SCRAM_SHA_256, "bob-secret", 4096)


async def _lookup(user: str, mechanism: Any) -> Any:
    return CREDENTIAL if user == "bob" and mechanism == SCRAM_SHA_256 else None


def _auth(process: Any = None, **kwargs: Any) -> Any:
    mechanisms = {
        "PLAIN": lambda: PlainSaslServer(USERS),
        "SCRAM-SHA-256": lambda: ScramSaslServer(SCRAM_SHA_256, _lookup),
    }
    return authenticator_for(mechanisms, process, **kwargs) if process else authenticator_for(mechanisms, **kwargs)


async def _api_versions(header: Any, frame: Any) -> bytes:
    return b"API_VERSIONS_ANSWER"


@pytest.mark.parametrize("handshake_version", [0, 1])
async def test_plain_and_scram_complete_with_the_users_principal(handshake_version: int) -> None:
    auth = _auth()
    step, _ = await run_exchange(
        auth, PlainSaslClient("alice", "alice-secret"), "PLAIN", handshake_version=handshake_version
    )
    assert not step.close and auth.complete and str(auth.principal) == "User:alice"
    auth = _auth()
    client = ScramSaslClient(SCRAM_SHA_256, "bob", "bob-secret")
    step, _ = await run_exchange(auth, _Scram(client), "SCRAM-SHA-256", handshake_version=handshake_version)
    assert not step.close and auth.complete and str(auth.principal) == "User:bob"


def _Scram(client: ScramSaslClient) -> Any:
    """The built-in SCRAM-SHA-256 mechanism's client side for ``client``'s credentials."""
    return MECHANISMS["SCRAM-SHA-256"].client(client.username, client.password)  # type: ignore[misc]


async def test_api_versions_first_then_handshake_and_only_once() -> None:
    auth = _auth(_api_versions)
    step = await auth.receive(
        request_frame(ApiKey.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    )
    assert step.response == b"API_VERSIONS_ANSWER" and not step.close
    assert auth.state is SaslState.HANDSHAKE_REQUEST
    again = await auth.receive(
        request_frame(ApiKey.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    )
    assert again.close and again.response is None and "Unexpected Kafka request of type ApiVersions" in again.reason


async def test_an_unknown_api_versions_version_may_be_retried() -> None:
    auth = _auth(_api_versions)
    await auth.receive(request_frame(ApiKey.API_VERSIONS, 0) | _version(99))
    assert auth.state is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST


def _version(v: int) -> Any:
    class Patch:
        def __ror__(self, frame: bytearray) -> bytearray:
            frame[2:4] = v.to_bytes(2, "big")
            return frame

    return Patch()


@pytest.mark.parametrize(
    ("api_key", "version", "fields"),
    [
        (ApiKey.METADATA, 8, METADATA_V8),
        (ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00alice\x00alice-secret"}),
    ],
)  # fmt: skip
async def test_other_requests_before_authentication_close_the_connection(
    api_key: int, version: int, fields: dict[str, Any]
) -> None:
    auth = _auth()
    step = await auth.receive(request_frame(api_key, version, **fields))
    assert step.close and step.response is None and step.delay_s == 0
    assert "during SASL handshake" in step.reason
    assert auth.state is SaslState.FAILED and auth.principal is None


async def test_a_request_other_than_sasl_authenticate_after_the_handshake_closes() -> None:
    auth = _auth()
    await auth.receive(request_frame(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"))
    step = await auth.receive(request_frame(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"))
    assert step.close and "during SASL authentication" in step.reason


async def test_unknown_mechanism_gets_the_enabled_list_then_a_delayed_close() -> None:
    auth = _auth(failed_delay_s=0.25)
    step = await auth.receive(request_frame(ApiKey.SASL_HANDSHAKE, 1, mechanism="GSSAPI"))
    _, answer = decode_response(ApiKey.SASL_HANDSHAKE, 1, step.response)
    assert int(answer.error_code) == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert step.close and step.delay_s == 0.25


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_wrong_password_answers_kafkas_message_at_every_version(version: int) -> None:
    auth = _auth()
    await auth.receive(request_frame(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"))
    step = await auth.receive(request_frame(ApiKey.SASL_AUTHENTICATE, version, auth_bytes=b"\x00alice\x00nope"))
    _, answer = decode_response(ApiKey.SASL_AUTHENTICATE, version, step.response)
    assert int(answer.error_code) == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer.error_message == "Authentication failed: Invalid username or password"
    assert step.close and step.delay_s == 0.1 and not auth.complete


async def test_scram_failures_tell_the_client_only_the_generic_message() -> None:
    """Unknown user and wrong password read the same to the client (Kafka's SaslException)."""
    for user, password in (("nobody", "x"), ("bob", "wrong")):
        auth = _auth()
        step, answer = await run_exchange(auth, _Scram(ScramSaslClient(SCRAM_SHA_256, user, password)), "SCRAM-SHA-256")
        assert step.close and int(answer.error_code) == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer.error_message == generic_failure("SCRAM-SHA-256")
        assert "SCRAM-SHA-256" in step.reason or "credentials" in step.reason


async def test_success_reports_no_session_lifetime() -> None:
    """connections.max.reauth.ms is 0: SaslAuthenticate v1+ says the session never expires."""
    auth = _auth()
    await auth.receive(request_frame(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"))
    step = await auth.receive(request_frame(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00alice-secret"))
    _, answer = decode_response(ApiKey.SASL_AUTHENTICATE, 2, step.response)
    assert int(answer.error_code) == ErrorCode.NONE and answer.session_lifetime.total_seconds() == 0
    assert auth.complete


async def test_the_final_answer_carries_the_session_lifetime() -> None:
    """connections.max.reauth.ms for the mechanism (KIP-368): only the last answer says it."""
    auth = _auth(reauth_ms={"SCRAM-SHA-256": 60000})
    _, answer = await run_exchange(auth, _Scram(ScramSaslClient(SCRAM_SHA_256, "bob", "bob-secret")), "SCRAM-SHA-256")
    assert auth.complete and answer.session_lifetime.total_seconds() == 60
    assert auth.session_lifetime_ms == 60000 and auth.mechanism == "SCRAM-SHA-256"
    auth = _auth(reauth_ms={"SCRAM-SHA-256": 60000})
    await run_exchange(auth, PlainSaslClient("alice", "alice-secret"), "PLAIN")
    assert auth.complete and auth.session_lifetime_ms == 0  # another mechanism's lifetime


async def test_a_reauthentication_as_the_same_principal_renews_the_session() -> None:
    alice = KafkaPrincipal("User", "alice")
    auth = _auth(reauth_ms={"PLAIN": 5000}, reauthenticating=(alice, "PLAIN"))
    assert auth.state is SaslState.HANDSHAKE_REQUEST  # no ApiVersions in between requests
    step, answer = await run_exchange(auth, PlainSaslClient("alice", "alice-secret"), "PLAIN")
    assert not step.close and auth.complete and auth.principal == alice
    assert answer.session_lifetime.total_seconds() == 5


@pytest.mark.parametrize(
    ("user", "mechanism", "previous", "message"),
    [
        (
            "bob",
            "SCRAM-SHA-256",
            "SCRAM-SHA-256",
            "Cannot change principals during re-authentication from User.alice: User.bob",
        ),
        (
            "alice",
            "PLAIN",
            "SCRAM-SHA-256",
            "SASL mechanism 'PLAIN' requested by client is not supported for re-authentication of mechanism "
            "'SCRAM-SHA-256'",
        ),
    ],
)
async def test_a_reauthentication_may_not_change_principal_or_mechanism(
    user: str, mechanism: str, previous: str, message: str
) -> None:
    auth = _auth(reauth_ms={"PLAIN": 5000}, reauthenticating=(KafkaPrincipal("User", "alice"), previous))
    if mechanism == "PLAIN":
        client = PlainSaslClient(user, USERS[user])
    else:
        client = _Scram(ScramSaslClient(SCRAM_SHA_256, user, "bob-secret"))
    step, answer = await run_exchange(auth, client, mechanism)
    assert step.close and not auth.complete
    assert int(answer.error_code) == ErrorCode.SASL_AUTHENTICATION_FAILED and answer.error_message == message


async def test_a_reauthentication_needs_handshake_v1() -> None:
    auth = _auth(reauthenticating=(KafkaPrincipal("User", "alice"), "PLAIN"))
    step = await auth.receive(request_frame(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN"))
    assert step.close and "needs SaslHandshake v1" in step.reason


async def test_v0_raw_tokens_failure_closes_without_an_answer() -> None:
    auth = _auth()
    step, _ = await run_exchange(auth, PlainSaslClient("alice", "wrong"), "PLAIN", handshake_version=0)
    assert step.close and step.response is None and step.delay_s == 0.1


@pytest.mark.parametrize(
    "frame",
    [
        bytearray(b""),
        bytearray(b"\x00"),
        bytearray(b"\x00\x11\x00\x01\x00\x00\x00\x01\x00\x00"),  # a handshake header, then no body
        bytearray(b"\x00\x11\x00\x01\x00\x00\x00\x01\x00\x00\x7f\xff"),  # a mechanism longer than the frame
        bytearray(b"\x00\x11\x00\x07\x00\x00\x00\x01\xff\xff\x00\x05PLAIN"),  # SaslHandshake v7
        bytearray(b"\x00\x24\x00\x02\x00\x00\x00\x01\x00\x00\x00\xff\xff\xff\xff\xff"),  # garbage v2 body
        bytearray(b"\xff" * 64),
    ],
    ids=lambda f: f.hex()[:24] or "empty",
)
async def test_malformed_frames_close_and_never_raise(frame: bytearray) -> None:
    auth = _auth()
    step = await auth.receive(frame)
    assert step.close and step.response is None and not auth.complete


async def test_malformed_sasl_authenticate_body_after_the_handshake_closes() -> None:
    auth = _auth()
    await auth.receive(request_frame(ApiKey.SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-256"))
    frame = request_frame(ApiKey.SASL_AUTHENTICATE, 1, auth_bytes=b"x")
    header = parse_request_header(frame)
    step = await auth.receive(frame[: header.body_offset + 2])
    assert step.close and step.response is None
