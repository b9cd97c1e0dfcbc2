"""The ssl transport (plugins/transport_tcp/ssl_transport.py): the transport conformance suite
over TLS, wire-level faults (plaintext, garbage, a truncated or stalled handshake, certificates
the listener does not trust), the principal a client certificate gives its connection, and
Fetch record slices read from their file and encrypted."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import ssl
import struct
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trio
import trustme
from broker_harness import plugins_with
from tls_helpers import make_pki

from odradek.config import Config, load_config
from odradek.interfaces import FileRange
from odradek.plugins.transport_tcp.apis import Dispatcher
from odradek.plugins.transport_tcp.connection import write_envelope
from odradek.plugins.transport_tcp.framing import FrameReader
from odradek.plugins.transport_tcp.plugin import odradek_register_transports
from odradek.plugins.transport_tcp.ssl_principal import SslPrincipalMapper
from odradek.plugins.transport_tcp.ssl_transport import SslConnector, SslListener
from odradek.plugins.transport_tcp.transport_layer import SslHandshakeError, SslTransportLayer, write_frame
from odradek.principal import ANONYMOUS, KafkaPrincipal
from odradek.protocol import FetchEnvelope
from odradek.testing import TransportConformance
from odradek.testing.transport import FakeBrokerCore, api_versions_frame, check_api_versions, receive_frame
from odradek.transport import Endpoint

SSL = next(t for t in odradek_register_transports() if t.name == "ssl")
_DIR = Path(tempfile.mkdtemp(prefix="odr-tls-"))
atexit.register(shutil.rmtree, _DIR, True)
PKI = make_pki(_DIR)
_SIZE = struct.Struct(">i")
WAIT_S = 10.0


def broker_config(**overrides: Any) -> Config:
    values = {
        "log.dirs": str(_DIR / "data"),
        "listeners": "SSL://127.0.0.1:0",
        "socket.request.max.bytes": 64 * 1024,
        "ssl.keystore.location": str(PKI.server_pem),
        **overrides,
    }
    return load_config(env={}, plugins=plugins_with(), overrides=values)


def client_context(cert: tuple[Path, Path] | None = None, ca: Path = PKI.ca_pem) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


class TestSslTransportConformance(TransportConformance):
    """The conformance suite with a TLS client stream (trio's SSLStream, a second TLS
    implementation on the client side)."""

    factory = SSL
    client_config: ClassVar[dict[str, str]] = {"ssl.ca.location": str(PKI.ca_pem)}

    def config(self) -> Config:
        return broker_config(**{"socket.request.max.bytes": self.max_request_bytes, **self.config_overrides})

    async def open_stream(self, endpoint: Endpoint) -> trio.abc.Stream:
        tcp = await trio.open_tcp_stream(endpoint.host, endpoint.port)
        return trio.SSLStream(tcp, client_context(), server_hostname=endpoint.host)


# -- a listener in this process -----------------------------------------------------------------


@asynccontextmanager
async def serving(**overrides: Any) -> AsyncIterator[tuple[Endpoint, SslListener]]:
    listener = SslListener(broker_config(**overrides), FakeBrokerCore(), Endpoint("SSL", "127.0.0.1", 0, "SSL"))
    async with trio.open_nursery() as nursery:
        (bound, *_) = await nursery.start(listener.serve)
        yield bound, listener
        nursery.cancel_scope.cancel()


async def answers(bound: Endpoint, context: ssl.SSLContext | None = None) -> bool:
    """Whether a TLS client gets ApiVersions answered (False: the listener refused it)."""
    tcp = await trio.open_tcp_stream(bound.host, bound.port)
    stream = trio.SSLStream(tcp, context or client_context(), server_hostname="localhost")
    try:
        with trio.fail_after(WAIT_S):
            frame = api_versions_frame(3, 7)
            await stream.send_all(_SIZE.pack(len(frame)) + frame)
            got = await receive_frame(stream)
    except (trio.BrokenResourceError, OSError):
        return False
    finally:
        with trio.move_on_after(1):
            try:
                await stream.aclose()
            except (trio.BrokenResourceError, OSError):
                pass
    if got is None:
        return False
    check_api_versions(got, 3, 7)
    return True


async def closed_by_listener(sock: trio.socket.SocketType) -> bytes:
    """What the listener sends before closing ``sock`` (an alert, or nothing)."""
    data = b""
    with trio.fail_after(WAIT_S):
        while True:
            try:
                chunk = await sock.recv(65536)
            except OSError:
                return data
            if not chunk:
                return data
            data += chunk


def client_hello() -> bytes:
    """The first flight of a TLS client: a ClientHello."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def _handshake_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "TLS handshake" in r.getMessage()]


async def test_plaintext_kafka_on_a_tls_listener_fails_the_handshake(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "odradek.transport")
    async with serving() as (bound, _listener):
        sock = trio.socket.socket()
        await sock.connect((bound.host, bound.port))
        frame = api_versions_frame(3, 1)
        await sock.send(_SIZE.pack(len(frame)) + frame)
        reply = await closed_by_listener(sock)
        sock.close()
        assert not reply.startswith(b"\x00"), "a Kafka response went to a plaintext client"
        assert await answers(bound), "the listener stopped serving after a plaintext client"
    (line,) = _handshake_lines(caplog)
    assert "TLS handshake failed" in line and "127.0.0.1" in line


@pytest.mark.parametrize(
    "garbage", [b"\x16\x03\x01\xff\xff" + os.urandom(64), b"GET / HTTP/1.1\r\n\r\n", os.urandom(300)]
)
async def test_garbage_fails_the_handshake(garbage: bytes, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "odradek.transport")
    async with serving() as (bound, listener):
        sock = trio.socket.socket()
        await sock.connect((bound.host, bound.port))
        await sock.send(garbage)
        await closed_by_listener(sock)
        sock.close()
        assert await answers(bound)
        assert not listener.connections or len(listener.connections) <= 1
    assert len(_handshake_lines(caplog)) == 1, _handshake_lines(caplog)


async def test_a_truncated_handshake_closes_only_that_connection(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "odradek.transport")
    hello = client_hello()
    async with serving() as (bound, _listener):
        sock = trio.socket.socket()
        await sock.connect((bound.host, bound.port))
        await sock.send(hello[: len(hello) // 2])
        sock.shutdown(trio.socket.SHUT_WR)  # gone halfway through its ClientHello
        await closed_by_listener(sock)
        sock.close()
        assert await answers(bound)
    assert len(_handshake_lines(caplog)) == 1


async def test_a_client_that_stalls_mid_handshake_is_closed_at_the_handshake_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "odradek.transport")
    hello = client_hello()
    async with serving(**{"ssl.handshake.timeout.ms": 300}) as (bound, listener):
        sock = trio.socket.socket()
        await sock.connect((bound.host, bound.port))
        await sock.send(hello[:20])  # ... and never the rest
        await closed_by_listener(sock)
        sock.close()
        assert await answers(bound)
        with trio.fail_after(WAIT_S):
            while listener.connections:
                await trio.sleep(0.01)
    (line,) = _handshake_lines(caplog)
    assert "TLS handshake not done within" in line


async def test_a_port_probe_is_not_a_handshake_failure(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "odradek.transport")
    async with serving() as (bound, _listener):
        sock = trio.socket.socket()
        await sock.connect((bound.host, bound.port))
        sock.close()
        assert await answers(bound)
    assert _handshake_lines(caplog) == []


# -- client certificates -------------------------------------------------------------------------


async def test_mutual_tls_required(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "odradek.transport")
    rogue = trustme.CA(organization_name="not the broker's CA")
    rogue_cert = rogue.issue_cert("mallory@example.com", common_name="mallory")
    rogue_crt, rogue_key = _DIR / "mallory.crt", _DIR / "mallory.key"
    rogue_cert.cert_chain_pems[0].write_to_path(str(rogue_crt))
    rogue_cert.private_key_pem.write_to_path(str(rogue_key))
    settings = {"ssl.client.auth": "required", "ssl.truststore.location": str(PKI.ca_pem)}
    async with serving(**settings) as (bound, _listener):
        assert await answers(bound, client_context((PKI.client_crt, PKI.client_key)))
        assert not await answers(bound), "a client without a certificate was served"
        assert not await answers(bound, client_context((rogue_crt, rogue_key))), "an untrusted certificate was served"
    lines = _handshake_lines(caplog)
    assert len(lines) == 2, lines
    assert "certificate" in lines[0] and "certificate" in lines[1]


async def _handshake_pair(
    server_settings: dict[str, Any], cert: tuple[Path, Path] | None
) -> tuple[SslTransportLayer, SslTransportLayer]:
    listener = SslListener(broker_config(**server_settings), FakeBrokerCore(), Endpoint("SSL", "127.0.0.1", 0, "SSL"))
    a, b = trio.socket.socketpair()
    server = listener.transport_layer(a)
    client = SslTransportLayer(b, client_context(cert), server_side=False, server_hostname="localhost")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.handshake)
        nursery.start_soon(client.handshake)
    return server, client


async def test_the_principal_of_a_client_certificate() -> None:
    settings = {"ssl.client.auth": "required", "ssl.truststore.location": str(PKI.ca_pem)}
    server, client = await _handshake_pair(settings, (PKI.client_crt, PKI.client_key))
    assert server.principal == KafkaPrincipal("User", "CN=alice,OU=eng,O=Example")
    server.close(), client.close()
    rules = {"ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U"}
    server, client = await _handshake_pair({**settings, **rules}, (PKI.client_crt, PKI.client_key))
    assert str(server.principal) == "User:ALICE@ENG"
    server.close(), client.close()
    server, client = await _handshake_pair({**settings, "ssl.client.auth": "requested"}, None)
    assert server.principal == ANONYMOUS
    server.close(), client.close()
    server, client = await _handshake_pair({}, (PKI.client_crt, PKI.client_key))  # not asked for: anonymous
    assert server.principal == ANONYMOUS
    server.close(), client.close()


async def test_the_connection_takes_the_certificates_principal() -> None:
    """What handlers see (``KafkaConnection.principal``, handed to each as
    ``RequestContext.principal``) is the principal of the handshake's certificate."""
    config = broker_config(**{"ssl.client.auth": "required", "ssl.truststore.location": str(PKI.ca_pem)})
    endpoint = Endpoint("SSL", "127.0.0.1", 0, "SSL")
    listener = SslListener(config, FakeBrokerCore(), endpoint)
    a, b = trio.socket.socketpair()
    conn = listener.connection(a, Dispatcher(listener.broker, config, endpoint), "pair")
    assert conn.principal == ANONYMOUS
    client = SslTransportLayer(
        b, client_context((PKI.client_crt, PKI.client_key)), server_side=False, server_hostname="localhost"
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        with trio.fail_after(WAIT_S):
            await client.handshake()
            await write_frame(client, api_versions_frame(3, 9))
            reader = FrameReader(b, 1 << 20, layer=client)
            frame = await reader.read_frame()
        assert frame is not None
        check_api_versions(bytes(frame), 3, 9)
        assert conn.principal == KafkaPrincipal("User", "CN=alice,OU=eng,O=Example")
        conn.stop_reading()
    client.close()


async def test_a_certificate_no_rule_maps_is_refused() -> None:
    settings = {
        "ssl.client.auth": "required",
        "ssl.truststore.location": str(PKI.ca_pem),
        "ssl.principal.mapping.rules": "RULE:^CN=bob,.*$/bob/",
    }
    with pytest.RaisesGroup(pytest.RaisesExc(SslHandshakeError, match="no principal"), allow_unwrapped=True):
        await _handshake_pair(settings, (PKI.client_crt, PKI.client_key))


def test_mapper_default_is_the_dn() -> None:
    assert SslPrincipalMapper().principal_name("CN=x") == "CN=x"


# -- the client side: hostname verification ------------------------------------------------------


async def test_connector_verifies_the_broker_host_name() -> None:
    only_localhost = _DIR / "localhost-only.pem"
    PKI.ca.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(only_localhost))
    async with serving(**{"ssl.keystore.location": str(only_localhost)}) as (bound, _listener):
        checked = SslConnector({"ssl.ca.location": str(PKI.ca_pem)})
        conn = await checked.connect("localhost", bound.port, timeout_s=5)
        await conn.send_frame(api_versions_frame(3, 5))
        check_api_versions(bytes(await conn.receive_frame()), 3, 5)
        await conn.aclose()
        # the certificate names localhost, not 127.0.0.1 (the same socket)
        with pytest.raises(ConnectionError, match="IP address mismatch"):
            await checked.connect("127.0.0.1", bound.port, timeout_s=5)
        unchecked = SslConnector({"ssl.ca.location": str(PKI.ca_pem), "ssl.endpoint.identification.algorithm": ""})
        conn = await unchecked.connect("127.0.0.1", bound.port, timeout_s=5)
        await conn.aclose()
        untrusted = SslConnector({"ssl.ca.location": str(trustme_ca_file())})
        with pytest.raises(ConnectionError, match="unable to get local issuer certificate"):
            await untrusted.connect("localhost", bound.port, timeout_s=5)


def trustme_ca_file() -> Path:
    path = _DIR / "other-ca.pem"
    if not path.exists():
        trustme.CA().cert_pem.write_to_path(str(path))
    return path


# -- Fetch record slices over TLS ----------------------------------------------------------------


class _Slice:
    """A record slice backed by a file range (what storage hands the Fetch envelope)."""

    def __init__(self, fd: int, position: int, length: int, data: bytes) -> None:
        self._range = FileRange(fd, position, length)
        self.size = length
        self._data = data

    def file_range(self) -> FileRange:
        return self._range

    def to_bytes(self) -> bytes:
        raise AssertionError("a TLS transport reads the file range itself, in chunks")

    def release(self) -> None:
        pass


async def test_record_slices_are_read_from_the_file_and_encrypted(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)  # many write chunks, and a tail
    path = tmp_path / "segment.log"
    path.write_bytes(b"x" * 100 + data)
    fd = os.open(path, os.O_RDONLY)
    try:
        server, client = await _handshake_pair({}, None)
        part = _Slice(fd, 100, len(data), data)
        head = b"HEAD"
        envelope = FetchEnvelope(len(head) + len(data), [head, part], [part])  # type: ignore[list-item]
        received = bytearray()

        async def read_all() -> None:
            view = memoryview(bytearray(65536))
            while len(received) < len(head) + len(data):
                try:
                    n = client.read_into(view)
                except BlockingIOError:
                    await client.wait_readable()
                    continue
                assert n, "EOF before the envelope was read"
                received.extend(view[:n])

        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_all)
                await write_envelope(server, envelope)
        assert bytes(received) == head + data
        # a file that ends early cannot be sent: the frame is on the wire, the connection must close
        short = _Slice(fd, 100 + len(data) - 10, 20, b"")
        with pytest.raises(Exception, match="ended 10 bytes early"):
            await write_envelope(server, FetchEnvelope(20, [short], [short]))  # type: ignore[list-item]
        server.close(), client.close()
    finally:
        os.close(fd)
