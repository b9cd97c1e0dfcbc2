"""Connection limits (Kafka's ``ConnectionQuotas``): max.connections, max.connections.per.ip and
its overrides. The listener side runs in the transport conformance suite (every transport must
honour them); here the counting, the config rules, and a broker process that enforces them."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest
import trio
import trio.testing

from odradek.config import INT_MAX, ConfigError, default_config, parse_connection_overrides
from odradek.connection_quotas import ConnectionQuotas, normalize_address, resolve_overrides
from odradek.testing.broker import start_broker
from odradek.testing.transport import api_versions_frame

# -- config ---------------------------------------------------------------------------------------


def test_overrides_parse_hosts_ipv6_and_counts() -> None:
    assert parse_connection_overrides(" 127.0.0.1:5, [::1]:3 ,client-host:0,,fe80::1:7") == {
        "127.0.0.1": 5,
        "::1": 3,
        "client-host": 0,
        "fe80::1": 7,
    }
    assert parse_connection_overrides("") == {}
    assert parse_connection_overrides("h:99999999999") == {"h": INT_MAX}


@pytest.mark.parametrize("bad", ["127.0.0.1", "h:-1", "h:x", ":5", "h:1,h:2"])
def test_a_bad_override_is_a_config_error_naming_it(bad: str) -> None:
    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        default_config(max_connections_per_ip_overrides=bad)


def test_a_per_ip_limit_of_zero_needs_overrides() -> None:
    with pytest.raises(ConfigError, match=r"'max.connections.per.ip': 0 is allowed only with"):
        default_config(max_connections_per_ip=0)
    config = default_config(max_connections_per_ip=0, max_connections_per_ip_overrides="127.0.0.1:3")
    quotas = ConnectionQuotas.from_config(config)
    assert (quotas.limit_for("127.0.0.1"), quotas.limit_for("10.0.0.1")) == (3, 0)


def test_the_defaults_are_unbounded_as_in_kafka() -> None:
    quotas = ConnectionQuotas.from_config(default_config())
    assert (quotas.max_connections, quotas.limit_for("127.0.0.1"), quotas.per_ip_overrides) == (INT_MAX, INT_MAX, {})


@pytest.mark.parametrize("key", ["max.connections", "max.connections.per.ip"])
def test_negative_limits_are_refused(key: str) -> None:
    with pytest.raises(ConfigError, match="below the minimum"):
        default_config(**{key.replace(".", "_"): -1})


def test_addresses_have_one_spelling() -> None:
    assert normalize_address("::ffff:127.0.0.1") == "127.0.0.1"  # a dual-stack socket's IPv4 peer
    assert normalize_address("0:0:0:0:0:0:0:1") == "::1"
    assert normalize_address("fe80::1%eth0") == "fe80::1"
    assert normalize_address("unix") == "unix"


def test_hostnames_stand_for_their_addresses() -> None:
    resolved = resolve_overrides({"localhost": 4, "::ffff:10.1.2.3": 1})
    assert resolved["127.0.0.1"] == 4
    assert resolved["10.1.2.3"] == 1
    with pytest.raises(ConfigError, match=r"cannot resolve 'no-such-host\.invalid'"):
        resolve_overrides({"no-such-host.invalid": 1})


# -- counting -------------------------------------------------------------------------------------


async def test_an_address_over_its_limit_is_refused_and_counts_nothing() -> None:
    quotas = ConnectionQuotas(max_connections_per_ip=2, per_ip_overrides={"10.0.0.9": 0})
    assert await quotas.acquire("127.0.0.1")
    assert await quotas.acquire("::ffff:127.0.0.1")  # the same address spelled another way
    assert not await quotas.acquire("127.0.0.1")
    assert not await quotas.acquire("10.0.0.9")
    assert await quotas.acquire("10.0.0.1")  # other addresses have their own count
    assert (quotas.total, quotas.count("127.0.0.1"), quotas.count("10.0.0.9")) == (3, 2, 0)
    quotas.release("127.0.0.1")
    assert await quotas.acquire("127.0.0.1")
    with pytest.raises(RuntimeError, match="never acquired"):
        quotas.release("10.0.0.9")


async def test_at_max_connections_acquire_waits_for_a_release() -> None:
    quotas = ConnectionQuotas(max_connections=2)
    assert await quotas.acquire("a")
    assert await quotas.acquire("b")
    admitted: list[str] = []

    async def accept(address: str) -> None:
        if await quotas.acquire(address):
            admitted.append(address)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept, "c")
        nursery.start_soon(accept, "d")
        await trio.testing.wait_all_tasks_blocked()
        assert (admitted, quotas.waiting, quotas.total) == ([], 2, 2)
        quotas.release("a")
        await trio.testing.wait_all_tasks_blocked()
        assert (len(admitted), quotas.waiting, quotas.total) == (1, 1, 2)  # one slot, one admitted
        quotas.release("b")
    assert sorted(admitted) == ["c", "d"]
    assert quotas.total == 2


async def test_a_slot_freed_reaches_every_waiting_listener() -> None:
    """Two listeners wait at max.connections; the first one parked has a client whose address is
    at its own limit. The freed slot must still reach the second: a single wakeup goes to the
    first parked, which refuses its client and leaves the second parked on a free slot.

    Trio runs woken tasks in a random order, so the first listener may run before or after the
    second takes the slot: refused at once, or parked again for the next slot (Kafka's acceptor
    also waits for a slot before it checks the address). Either way the second is admitted."""
    quotas = ConnectionQuotas(max_connections=2, max_connections_per_ip=1)
    assert await quotas.acquire("10.0.0.1")
    assert await quotas.acquire("10.0.0.2")
    results: dict[str, bool] = {}

    async def accept(address: str) -> None:
        results[address] = await quotas.acquire(address)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept, "10.0.0.1")  # parked first: a single wakeup would go to it
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(accept, "10.0.0.3")
        await trio.testing.wait_all_tasks_blocked()
        assert quotas.waiting == 2
        quotas.release("10.0.0.2")
        await trio.testing.wait_all_tasks_blocked()
        assert results.get("10.0.0.3") is True
        assert results.get("10.0.0.1", False) is False
        assert quotas.waiting == (0 if "10.0.0.1" in results else 1)
        nursery.cancel_scope.cancel()
    assert quotas.total == 2


# -- a broker process -----------------------------------------------------------------------------


def _answers(sock: socket.socket, correlation_id: int) -> bool:
    """Whether the broker answers an ApiVersions request on ``sock`` (False: it closed it)."""
    frame = api_versions_frame(3, correlation_id)
    try:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        head = sock.recv(4)
    except ConnectionError:
        return False
    if len(head) < 4:
        return False
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        assert chunk, "the broker closed the connection mid-answer"
        body += chunk
    return struct.unpack(">i", body[:4])[0] == correlation_id


def _served_connection(port: int) -> socket.socket:
    """A connection the broker serves, retried while the address's slots are still held by
    connections closed a moment ago (the broker frees a slot when it sees the close)."""
    for attempt in range(200):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if _answers(sock, attempt):
            return sock
        sock.close()
        time.sleep(0.05)
    pytest.fail("no connection from 127.0.0.1 was served for 10 s")


@pytest.mark.integration
def test_a_broker_closes_connections_over_the_per_address_limit(tmp_path: Path) -> None:
    settings = {"max.connections.per.ip": 0, "max.connections.per.ip.overrides": "127.0.0.1:2"}
    with start_broker(tmp_path, settings) as broker:
        # the fixture's start-up probe holds a slot until the broker sees it close
        held = [_served_connection(broker.port), _served_connection(broker.port)]
        try:
            with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as over:
                assert not _answers(over, 9), "a third connection from 127.0.0.1 was served"
            held.pop().close()
            held.append(_served_connection(broker.port))  # the broker frees the slot once it sees the close
        finally:
            for s in held:
                s.close()
        log = broker.log_path.read_text()
        assert "rejected connection from 127.0.0.1:" in log
        assert "maximum of 2 connection(s)" in log
