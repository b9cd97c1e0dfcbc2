"""Conformance suite for the transport role (``TransportFactory``, ``Listener``, ``Connector`` and
``Connection`` in odradek.interfaces).

A transport plugin -- the built-in ``tcp`` or a third party's -- runs it against itself with one
line in a test module::

    TestMyTransport = check_transport(my_transport_factory)   # what odradek_register_transports returns

or by subclassing :class:`TransportConformance` (``factory``, ``config_overrides``,
``client_config``). A transport whose wire is not plain TCP (TLS, a Unix socket) overrides
:meth:`TransportConformance.open_stream`, which opens the raw byte stream the suite writes
Kafka frames to; everything else goes through the factory.

Each test builds a listener with ``factory.listener(config, broker, endpoint)`` for the endpoint
``127.0.0.1:0`` (the first of the factory's security protocols) and a small fake broker core
(:class:`FakeBrokerCore`: ApiVersions needs nothing from it, any other call fails), starts it
with ``nursery.start(listener.serve)`` and cancels it at the end. What a transport must honour:

- ``serve`` binds, reports the bound ``Endpoint`` list through ``task_status.started`` with the
  real port (the broker advertises it), and serves until cancelled;
- it speaks Kafka's framing: a request is an int32 size then that many bytes, answered by an
  int32 size then a response carrying the request's correlation id, in request order on a
  connection (pipelined requests included); ApiVersions v0 and v3 are answered;
- a malformed frame (an unknown API key, a header that does not parse, a negative size, a size
  over ``socket.request.max.bytes``, a peer gone mid-frame) closes that connection only (Kafka's
  rule), without reading an oversized body; the listener keeps serving everyone else;
- the broker's connection limits hold (``broker.connection_quotas``, a
  :class:`~odradek.connection_quotas.ConnectionQuotas`): a connection from an address that holds
  ``max.connections.per.ip`` is closed at once, and at ``max.connections`` the listener stops
  accepting (the next client is answered once an earlier one leaves);
- the broker's request memory holds (``broker.request_memory``, a
  :class:`~odradek.request_memory.RequestMemoryPool`: ``queued.max.request.bytes``): while it is
  full a request is not read, it is answered once memory comes back, and a request gives its
  memory back by the time it is answered (``serve_connection`` gives it back once decoded);
- cancelling ``serve`` returns promptly, closes the listening socket and the open connections;
- the connector's ``connect(host, port, timeout_s=...)`` returns a ``Connection`` that sends a
  request frame and receives its response frame (without the size prefix) from the listener,
  and ``aclose`` closes it; a refused connection raises ``OSError`` within the timeout.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import pytest
import trio

from ..config import Config, default_config
from ..connection_quotas import ConnectionQuotas
from ..interfaces import Connection, Connector, Endpoint, Listener, TransportFactory
from ..metrics import BrokerMetrics
from ..request_memory import RequestMemoryPool
from ._suite import suite_for

__all__ = ["FakeBrokerCore", "TransportConformance", "api_versions_frame", "check_transport"]

_SIZE = struct.Struct(">i")
#: Kafka's ApiVersions api key. odradek.protocol is imported only when a test runs: it loads kio,
#: which loads hypothesis, and a pytest plugin that imports hypothesis early makes it warn.
API_VERSIONS = 18

#: Frames Kafka answers by closing the connection, by what is wrong with them.
MALFORMED: dict[str, bytes] = {
    "an unknown api key": _SIZE.pack(10) + struct.pack(">hhih", 5000, 0, 1, -1),
    "a header that does not parse": _SIZE.pack(3) + b"\x00\x12\x00",
    "a client id longer than the frame": _SIZE.pack(12) + struct.pack(">hhih", 18, 0, 1, 200) + b"zz",
    "a negative size": _SIZE.pack(-5) + bytes(8),
    "a size over socket.request.max.bytes": _SIZE.pack(0x7FFFFFFF),
}


class FakeBrokerCore:
    """The broker core a listener is handed: the suite's requests need nothing from it, so any
    call fails loudly (a transport that calls the core for ApiVersions gets an error response).
    Its connection limits and request memory are unbounded unless a test passes its own."""

    def __init__(self, quotas: ConnectionQuotas | None = None, memory: RequestMemoryPool | None = None) -> None:
        self.connection_quotas = quotas or ConnectionQuotas()
        self.request_memory = memory or RequestMemoryPool()
        self.metrics = BrokerMetrics()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"the transport conformance suite's fake broker core has no {name!r}")


def api_versions_frame(version: int, correlation_id: int) -> bytes:
    """A Kafka ApiVersions request frame (header and body, without the size prefix)."""
    from ..protocol import encode_request, request_type

    cls = request_type(API_VERSIONS, version)
    fields = {"client_software_name": "odradek-conformance", "client_software_version": "1"} if version >= 3 else {}
    return encode_request(cls(**fields), correlation_id=correlation_id, client_id="conformance")


def check_api_versions(frame: bytes, version: int, correlation_id: int) -> None:
    """``frame`` is an ApiVersions response to ``correlation_id`` advertising ApiVersions itself."""
    from ..protocol import decode_response

    cid, response = decode_response(API_VERSIONS, version, frame)
    assert cid == correlation_id, f"response carries correlation id {cid}, the request {correlation_id}"
    assert int(response.error_code) == 0, f"ApiVersions v{version} answered error {response.error_code}"
    keys = {int(k.api_key): (k.min_version, k.max_version) for k in response.api_keys}
    assert API_VERSIONS in keys, f"ApiVersions does not advertise itself: {sorted(keys)}"


async def receive_exactly(stream: trio.abc.Stream, n: int) -> bytes:
    """``n`` bytes from ``stream``; fewer if the peer closes first."""
    data = bytearray()
    while len(data) < n:
        chunk = await stream.receive_some(n - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


async def receive_frame(stream: trio.abc.Stream) -> bytes | None:
    """One size-prefixed response frame, or None when the peer closed the connection."""
    head = await receive_exactly(stream, 4)
    if len(head) < 4:
        return None
    (size,) = _SIZE.unpack(head)
    assert 0 <= size < 1 << 30, f"response size {size} is not a Kafka frame size"
    body = await receive_exactly(stream, size)
    assert len(body) == size, f"connection closed after {len(body)} of a {size}-byte response"
    return body


class TransportConformance:
    """Base class of a transport's conformance tests; see the module docstring."""

    #: The ``TransportFactory`` the plugin registers.
    factory: ClassVar[Any] = None
    #: Broker config keys for the listener (Kafka names: "socket.request.max.bytes").
    config_overrides: ClassVar[Mapping[str, Any]] = {}
    #: The client config the connector is built with.
    client_config: ClassVar[Mapping[str, str]] = {}
    #: Upper bound for anything the suite waits for (a response, a close, a shutdown).
    wait_s: ClassVar[float] = 10.0
    #: ``socket.request.max.bytes`` for the tests (small, so oversized frames are cheap).
    max_request_bytes: ClassVar[int] = 64 * 1024

    pytestmark = pytest.mark.trio

    def transport(self) -> TransportFactory:
        factory = type(self).__dict__.get("factory", self.factory)
        if not isinstance(factory, TransportFactory):
            pytest.fail(f"{type(self).__name__} must set `factory` to a TransportFactory, not {factory!r}")
        return factory

    def config(self) -> Config:
        """The listener's broker config: built-in keys only (``default_config``); a transport
        with config keys of its own overrides this to load them (``load_config(plugins=...)``)."""
        values = {"socket.request.max.bytes": self.max_request_bytes, **self.config_overrides}
        return default_config(**{k.replace(".", "_"): v for k, v in values.items()})

    async def open_stream(self, endpoint: Endpoint) -> trio.abc.Stream:
        """The raw byte stream to a bound endpoint; override for transports that are not plain TCP."""
        return await trio.open_tcp_stream(endpoint.host, endpoint.port)

    @asynccontextmanager
    async def serving(
        self, quotas: ConnectionQuotas | None = None, memory: RequestMemoryPool | None = None
    ) -> AsyncIterator[Endpoint]:
        """A started listener on 127.0.0.1:0 (under the broker's connection limits ``quotas`` and
        request memory ``memory``, unbounded by default); cancelled (and checked to stop) on exit."""
        factory = self.transport()
        endpoint = Endpoint("CONFORMANCE", "127.0.0.1", 0, factory.security_protocols[0])
        listener = factory.listener(self.config(), FakeBrokerCore(quotas, memory), endpoint)
        assert isinstance(listener, Listener), f"{factory.name}: {listener!r} has no serve()"
        async with trio.open_nursery() as nursery:
            with trio.fail_after(self.wait_s):
                bound = await nursery.start(listener.serve)
            assert isinstance(bound, list) and bound, f"serve reported {bound!r}, not a list of Endpoints"
            assert all(isinstance(e, Endpoint) for e in bound), f"serve reported {bound!r}"
            yield next((e for e in bound if e.host == "127.0.0.1"), bound[0])
            nursery.cancel_scope.cancel()

    async def request(self, stream: trio.abc.Stream, version: int, correlation_id: int) -> None:
        frame = api_versions_frame(version, correlation_id)
        await stream.send_all(_SIZE.pack(len(frame)) + frame)

    async def assert_answers(self, endpoint: Endpoint) -> None:
        stream = await self.open_stream(endpoint)
        try:
            await self.request(stream, 3, 99)
            with trio.fail_after(self.wait_s):
                frame = await receive_frame(stream)
            assert frame is not None, "the listener closed a well-behaved connection"
            check_api_versions(frame, 3, 99)
        finally:
            await stream.aclose()

    async def assert_closed(self, stream: trio.abc.Stream, what: str) -> None:
        with trio.move_on_after(self.wait_s) as scope:
            try:
                while await stream.receive_some(65536):
                    pass
            except (trio.BrokenResourceError, OSError):
                pass  # a reset is a close too
        assert not scope.cancelled_caught, f"the connection stayed open {self.wait_s:.0f} s after {what}"
        await stream.aclose()

    # -- listener --------------------------------------------------------------------------------
    async def test_factory_fields(self) -> None:
        factory = self.transport()
        assert isinstance(factory.name, str) and factory.name.strip() == factory.name != ""
        assert factory.security_protocols and all(isinstance(p, str) for p in factory.security_protocols)
        assert callable(factory.listener) and callable(factory.connector)

    async def test_serve_reports_the_bound_port(self) -> None:
        async with self.serving() as bound:
            assert bound.port != 0, f"serve reported port 0 instead of the bound port: {bound}"
            assert bound.name == "CONFORMANCE", f"the endpoint lost its listener name: {bound}"

    @pytest.mark.parametrize("version", [0, 1, 2, 3])
    async def test_api_versions_framed_by_kafka_rules(self, version: int) -> None:
        async with self.serving() as bound:
            stream = await self.open_stream(bound)
            await self.request(stream, version, 7)
            with trio.fail_after(self.wait_s):
                frame = await receive_frame(stream)
            assert frame is not None, f"no answer to ApiVersions v{version}"
            check_api_versions(frame, version, 7)
            await stream.aclose()

    async def test_pipelined_requests_are_answered_in_order(self) -> None:
        async with self.serving() as bound:
            stream = await self.open_stream(bound)
            frames = b"".join(
                _SIZE.pack(len(f)) + f
                for f in (api_versions_frame(v % 4, cid) for v, cid in enumerate(range(100, 120)))
            )
            await stream.send_all(frames)  # all at once: several requests in one segment
            for i, cid in enumerate(range(100, 120)):
                with trio.fail_after(self.wait_s):
                    frame = await receive_frame(stream)
                assert frame is not None, f"connection closed before the response to request {i}"
                check_api_versions(frame, i % 4, cid)
            await stream.aclose()

    async def test_a_request_split_across_writes(self) -> None:
        async with self.serving() as bound:
            stream = await self.open_stream(bound)
            frame = api_versions_frame(3, 5)
            wire = _SIZE.pack(len(frame)) + frame
            for i in range(len(wire)):
                await stream.send_all(wire[i : i + 1])
                if i % 7 == 0:
                    await trio.sleep(0.001)
            with trio.fail_after(self.wait_s):
                answer = await receive_frame(stream)
            assert answer is not None
            check_api_versions(answer, 3, 5)
            await stream.aclose()

    @pytest.mark.parametrize("what", list(MALFORMED))
    async def test_a_malformed_frame_closes_only_its_connection(self, what: str) -> None:
        async with self.serving() as bound:
            bad = await self.open_stream(bound)
            await bad.send_all(MALFORMED[what])
            await self.assert_closed(bad, what)
            await self.assert_answers(bound)

    async def test_oversized_size_is_refused_before_the_body(self) -> None:
        """The listener must not wait for (or buffer) a body it will refuse."""
        async with self.serving() as bound:
            bad = await self.open_stream(bound)
            await bad.send_all(_SIZE.pack(self.max_request_bytes + 1) + b"\x00" * 1024)
            await self.assert_closed(bad, f"a {self.max_request_bytes + 1}-byte size with 1 KiB of it sent")
            await self.assert_answers(bound)

    async def test_peers_that_vanish_mid_frame(self) -> None:
        async with self.serving() as bound:
            for cut in (2, 4, 9):
                frame = api_versions_frame(3, 1)
                stream = await self.open_stream(bound)
                await stream.send_all((_SIZE.pack(len(frame)) + frame)[:cut])
                await stream.aclose()
            for _ in range(3):
                await self.assert_answers(bound)

    async def test_connections_over_the_per_address_limit_are_closed(self) -> None:
        quotas = ConnectionQuotas(max_connections_per_ip=2)
        async with self.serving(quotas) as bound:
            held = [await self.open_stream(bound) for _ in range(2)]
            for i, stream in enumerate(held):  # answered: both are counted before the third comes
                await self.request(stream, 3, i)
                with trio.fail_after(self.wait_s):
                    frame = await receive_frame(stream)
                assert frame is not None, "a connection within max.connections.per.ip was closed"
            over = await self.open_stream(bound)
            await self.assert_closed(over, "a third connection from an address limited to 2")
            assert quotas.total == 2, f"{quotas.total} connections counted, 2 are open"
            await held[0].aclose()
            with trio.fail_after(self.wait_s):
                while quotas.total > 1:  # the listener sees the close and frees the slot
                    await trio.sleep(0.01)
            await self.assert_answers(bound)
            await held[1].aclose()

    async def test_at_max_connections_the_listener_waits_for_a_slot(self) -> None:
        quotas = ConnectionQuotas(max_connections=1)
        async with self.serving(quotas) as bound:
            first = await self.open_stream(bound)
            await self.request(first, 3, 1)
            with trio.fail_after(self.wait_s):
                assert await receive_frame(first) is not None
            waiting = await self.open_stream(bound)  # queued in the backlog, not refused
            # sent from a task: over TLS the first write is the client's handshake, which the
            # listener answers only once it admits the connection
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.request, waiting, 3, 2)
                with trio.fail_after(self.wait_s):
                    while not quotas.waiting:  # the listener accepted it and waits for a slot
                        await trio.sleep(0.01)
                assert quotas.total == 1, f"{quotas.total} connections admitted at max.connections=1"
                await first.aclose()
            with trio.fail_after(self.wait_s):
                frame = await receive_frame(waiting)
            assert frame is not None, "the waiting connection was closed instead of served"
            check_api_versions(frame, 3, 2)
            await waiting.aclose()

    async def test_requests_wait_for_the_brokers_request_memory(self) -> None:
        memory = RequestMemoryPool(1000)
        await memory.acquire(1000)  # held by someone else: the pool is full
        async with self.serving(memory=memory) as bound:
            stream = await self.open_stream(bound)
            await self.request(stream, 3, 11)
            with trio.fail_after(self.wait_s):
                while not memory.waiting:  # the size prefix is read; the body waits for memory
                    await trio.sleep(0.01)
            with trio.move_on_after(0.2):
                frame = await receive_frame(stream)
                pytest.fail("a request was read and answered while the request memory was full")
            memory.release(1000)
            with trio.fail_after(self.wait_s):
                frame = await receive_frame(stream)
            assert frame is not None, "the connection was closed instead of waiting for request memory"
            check_api_versions(frame, 3, 11)
            assert memory.used == 0, f"an answered request still holds {memory.used} bytes of request memory"
            await stream.aclose()

    async def test_cancel_stops_serving_and_closes_connections(self) -> None:
        factory = self.transport()
        endpoint = Endpoint("CONFORMANCE", "127.0.0.1", 0, factory.security_protocols[0])
        listener = factory.listener(self.config(), FakeBrokerCore(), endpoint)
        with trio.fail_after(self.wait_s):
            async with trio.open_nursery() as nursery:
                (bound, *_) = await nursery.start(listener.serve)
                idle = await self.open_stream(bound)
                await self.assert_answers(bound)
                nursery.cancel_scope.cancel()
        await self.assert_closed(idle, "serve was cancelled")
        with pytest.raises(OSError):
            stream = await self.open_stream(bound)
            await stream.aclose()  # pragma: no cover -- reached only when still listening

    # -- connector -------------------------------------------------------------------------------
    async def test_connector_round_trip(self) -> None:
        factory = self.transport()
        connector = factory.connector(dict(self.client_config))
        assert isinstance(connector, Connector), f"{connector!r} has no connect()"
        async with self.serving() as bound:
            conn = await connector.connect(bound.host, bound.port, timeout_s=self.wait_s)
            assert isinstance(conn, Connection), f"{conn!r} lacks send_frame, receive_frame or aclose"
            for cid, version in ((1, 3), (2, 0), (3, 2)):
                await conn.send_frame(api_versions_frame(version, cid))
                with trio.fail_after(self.wait_s):
                    frame = await conn.receive_frame()
                check_api_versions(bytes(frame), version, cid)
            await conn.aclose()

    async def test_connector_refused(self) -> None:
        factory = self.transport()
        connector = factory.connector(dict(self.client_config))
        async with self.serving() as bound:
            port = bound.port
        with trio.fail_after(self.wait_s), pytest.raises(OSError):
            await connector.connect("127.0.0.1", port, timeout_s=self.wait_s / 2)


def check_transport(factory: TransportFactory, **attributes: Any) -> type[TransportConformance]:
    """A ``TransportConformance`` subclass for ``factory``; assign it to a ``Test*`` name::

    TestMyTransport = check_transport(my_transport_factory)
    """
    return suite_for(TransportConformance, "TransportConformanceSuite", {"factory": factory, **attributes})
