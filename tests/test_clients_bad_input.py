"""Hostile bytes against a live broker: every bad connection is closed on its own, the broker
stays up, and a well-behaved client keeps producing and consuming throughout."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

import pytest
from client_helpers import TIMEOUT_S, consume
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_protocol import sample

from odradek.protocol import SUPPORTED_VERSIONS, ApiKey, encode_request, request_type
from odradek.testing import BrokerProcess, unique_topic

pytestmark = pytest.mark.integration

#: socket.request.max.bytes of the session broker (the default)
MAX_REQUEST = 104857600

VALID_FRAMES = [
    encode_request(sample(request_type(key, version)), correlation_id=7, client_id="fuzz")
    for key, rng in SUPPORTED_VERSIONS.items()
    if key not in (ApiKey.PRODUCE,)
    for version in (rng.min, rng.max)
]


def _header(api_key: int, api_version: int) -> bytes:
    return struct.pack(">hhih", api_key, api_version, 1, 4) + b"fuzz"


frames = st.one_of(
    # random bytes, sized honestly
    st.binary(max_size=300).map(lambda b: struct.pack(">i", len(b)) + b),
    # raw garbage with no framing at all
    st.binary(min_size=1, max_size=64),
    # a valid request cut short (the size promises more than arrives)
    st.tuples(st.sampled_from(VALID_FRAMES), st.floats(0, 0.99)).map(
        lambda t: struct.pack(">i", len(t[0])) + t[0][: int(len(t[0]) * t[1])]
    ),
    # a valid request with flipped bytes in its body
    st.tuples(
        st.sampled_from(VALID_FRAMES), st.lists(st.tuples(st.integers(10, 400), st.integers(0, 255)), max_size=4)
    ).map(lambda t: _flip(*t)),
    # a valid header followed by garbage
    st.tuples(st.sampled_from(sorted(SUPPORTED_VERSIONS)), st.binary(max_size=80)).map(
        lambda t: _framed(_header(t[0], SUPPORTED_VERSIONS[t[0]].max) + t[1])
    ),
    # wrong api versions and unknown api keys
    st.tuples(st.integers(-3, 120), st.integers(-5, 60)).map(lambda t: _framed(_header(*t) + b"\x00" * 8)),
    # sizes that are negative or beyond socket.request.max.bytes (the body is never sent)
    st.integers(MAX_REQUEST + 1, 2**31 - 1).map(lambda n: struct.pack(">i", n) + b"\x00" * 16),
    st.integers(-(2**31), -1).map(lambda n: struct.pack(">i", n)),
)


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _flip(frame: bytes, flips: list[tuple[int, int]]) -> bytes:
    body = bytearray(frame)
    for pos, value in flips:
        if pos < len(body):
            body[pos] = value
    return _framed(bytes(body))


def _send_and_drain(broker: BrokerProcess, data: bytes) -> bytes:
    """Send, half-close, and read until the broker closes (it must, within the timeout)."""
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)  # EOF: a truncated frame can never complete
        except OSError:
            return b""  # the broker already closed it (oversize frame): that is the point
        received = bytearray()
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
        return bytes(received)


class WellBehavedClient:
    """Produces one record at a time, each awaited, on a thread of its own while the attack runs."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.topic = unique_topic("steady")
        self.delivered: list[Any] = []
        self.errors: list[Any] = []
        self.producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def produce_one(self) -> None:
        def done(err: Any, msg: Any) -> None:
            (self.errors if err else self.delivered).append(err or msg.offset())

        self.producer.produce(self.topic, b"steady-%d" % len(self.delivered), on_delivery=done)
        if self.producer.flush(TIMEOUT_S) != 0:
            self.errors.append(f"undelivered after {TIMEOUT_S} s")

    def _run(self) -> None:
        while not self._stop.is_set() and not self.errors:
            self.produce_one()
            time.sleep(0.01)

    def __enter__(self) -> WellBehavedClient:
        self.produce_one()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)


def test_hostile_frames_close_their_connection_only(odradek_broker: BrokerProcess) -> None:
    @settings(
        max_examples=250,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        database=None,
    )
    @given(frames)
    def attack(data: bytes) -> None:
        _send_and_drain(odradek_broker, data)

    with WellBehavedClient(odradek_broker) as client:
        attack()
    odradek_broker.check_alive()
    assert not client.errors, client.errors
    assert len(client.delivered) > 1  # it kept producing while the attack ran
    assert client.delivered == list(range(len(client.delivered)))
    # every bad frame was a client error (logged as a WARNING): nothing failed unexpectedly
    assert not [p for p in odradek_broker.log_problems() if "unexpectedly" in p or "Traceback" in p]
    del client.producer  # destroy it now, not after the session broker is gone
    got = consume(odradek_broker, client.topic, len(client.delivered))
    assert [m.value() for m in got] == [b"steady-%d" % i for i in range(len(client.delivered))]


def _schema_cases() -> list[tuple[int, int]]:
    """(api, version) of every request kio can draw; Produce is left out (its records field has
    no strategy: test_well_framed_produce_of_garbage_batches_gets_per_partition_errors covers it)."""
    cases = []
    for key, rng in sorted(SUPPORTED_VERSIONS.items()):
        if key == ApiKey.PRODUCE:
            continue
        for version in sorted({rng.min, rng.max}):
            request_type(key, version)
            cases.append((key, version))
    return cases


@pytest.mark.parametrize(("api_key", "version"), _schema_cases(), ids=lambda v: str(v))
def test_requests_with_random_field_values_are_answered(
    odradek_broker: BrokerProcess, api_key: int, version: int
) -> None:
    """Every API at its lowest and highest version, well formed but with every field drawn at
    random (kio's hypothesis strategies: odd ids, negative counts, unknown names, huge
    timeouts). Each request is answered with the same correlation id (an error response at
    worst) or, when a value cannot even be represented, refused with a logged reason; no
    handler fails unexpectedly and the broker stays up."""
    state: dict[str, socket.socket | None] = {"sock": None}

    @settings(max_examples=4, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(request_type(api_key, version)), st.integers(1, 2**31 - 1))
    def ask(request: Any, correlation_id: int) -> None:
        frame = encode_request(request, correlation_id=correlation_id, client_id="field-fuzz")
        sock = state["sock"] or socket.create_connection((odradek_broker.host, odradek_broker.port), timeout=10)
        state["sock"] = sock
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        try:
            reply = _read_frame(sock)
        except AssertionError:  # closed: the value could not be decoded (logged as a WARNING)
            sock.close()
            state["sock"] = None
            return
        assert struct.unpack_from(">i", reply)[0] == correlation_id

    try:
        ask()
    finally:
        if state["sock"] is not None:
            state["sock"].close()
    odradek_broker.check_alive()
    assert not [p for p in odradek_broker.log_problems() if "unexpectedly" in p or "Traceback" in p]


def test_api_versions_of_unknown_version_gets_the_v0_fallback(odradek_broker: BrokerProcess) -> None:
    reply = _send_and_drain(odradek_broker, _framed(struct.pack(">hhih", 18, 99, 1234, -1) + b"\xff" * 10))
    size, correlation_id, error, count = struct.unpack_from(">iihi", reply)
    assert (size, correlation_id, error) == (len(reply) - 4, 1234, 35)
    # only ApiVersions' own range (KIP-511), as Kafka answers
    assert count == 1 and struct.unpack_from(">hhh", reply, 14) == (18, 0, 4)


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "the broker closed the connection"
            out += chunk
        return bytes(out)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def test_well_framed_produce_of_garbage_batches_gets_per_partition_errors(odradek_broker: BrokerProcess) -> None:
    """Decodable requests with hostile contents are answered (with errors), not dropped."""
    from odradek.protocol import (
        PartitionProduceData,
        ProduceRequestData,
        TopicProduceData,
        decode_response,
    )

    topic = unique_topic("garbage")
    state: dict[str, socket.socket] = {}

    def connection() -> socket.socket:
        if "sock" not in state:
            state["sock"] = socket.create_connection((odradek_broker.host, odradek_broker.port), timeout=10)
        return state["sock"]

    correlation = iter(range(1, 10**6))

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.binary(max_size=200), st.sampled_from([-1, 0, 1, 5]))
    def produce_garbage(records: bytes, acks: int) -> None:
        cid = next(correlation)
        request = ProduceRequestData(
            acks, 1000, [TopicProduceData(topic, [PartitionProduceData(0, bytearray(records))])], None, 7
        )
        frame = encode_request(request, correlation_id=cid, client_id="garbage")
        sock = connection()
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        if acks == 0:
            # no response to carry the error: the broker closes the connection (as Kafka)
            assert sock.recv(1) == b""
            sock.close()
            del state["sock"]
            return
        got_cid, response = decode_response(ApiKey.PRODUCE, 7, _read_frame(sock))
        assert got_cid == cid
        (partition,) = response.responses[0].partition_responses
        # garbage never appends; unknown acks (5) are refused too
        assert partition.error_code != 0

    try:
        produce_garbage()
    finally:
        if "sock" in state:
            state["sock"].close()
    odradek_broker.check_alive()
