"""Connection limits (Kafka's ``ConnectionQuotas``): max.connections, max.connections.per.ip and
its overrides, connection creation rates (KIP-612), per-listener limits and the protected
inter-broker listener (KIP-402). The listener side runs in the transport conformance suite (every
transport must honour them); here the counting, the config rules, and a broker process that
enforces them."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from broker_harness import running_broker
from test_replication_quota import _alter, _describe

from odradek.broker.api import AlterConfigOp, ConfigSource
from odradek.config import INT_MAX, ConfigError, default_config, parse_connection_overrides
from odradek.connection_quotas import ConnectionQuotas, normalize_address, resolve_overrides
from odradek.errors import ErrorCode
from odradek.testing.broker import sample, start_broker
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


# -- connection creation rates (KIP-612) -----------------------------------------------------------


class _Socket:
    def __init__(self) -> None:
        self.closed_at: float | None = None

    def close(self) -> None:
        self.closed_at = trio.current_time()


def test_an_address_over_its_creation_rate_is_closed_after_its_throttle_time() -> None:
    """2 connections a second from 10.0.0.7 (a 1 s window): the third at once is not served, not
    counted, and closed 0.5 s later; another address has the default rate, and one without its
    own and no default is not limited."""
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def main() -> None:
        quotas = ConnectionQuotas(samples=2, window_s=1.0)
        quotas.set_ip_rates({"10.0.0.7": 2}, None)
        async with trio.open_nursery() as nursery:
            admitted = [
                await quotas.admit(_Socket(), "10.0.0.7", peer="p", where="test", nursery=nursery) for _ in range(2)
            ]
            over = _Socket()
            start = trio.current_time()
            assert admitted == [True, True]
            assert not await quotas.admit(over, "::ffff:10.0.0.7", peer="p", where="test", nursery=nursery)
            assert quotas.count("10.0.0.7") == 2 and quotas.ip_throttled == 1
        assert over.closed_at is not None and over.closed_at - start == pytest.approx(0.5)
        for _ in range(5):  # not limited
            assert await quotas.admit(_Socket(), "10.0.0.9", peer="p", where="test")
        quotas.set_ip_rates({"10.0.0.7": 2}, 1)
        assert await quotas.admit(_Socket(), "10.0.0.10", peer="p", where="test")
        assert not await quotas.admit(_Socket(), "10.0.0.10", peer="p", where="test")  # the default's 1/s
        await trio.sleep(2)  # the rate falls back under the quota
        assert await quotas.admit(_Socket(), "10.0.0.7", peer="p", where="test")

    trio.run(main, clock=clock)


def test_the_broker_creation_rate_pauses_accepting() -> None:
    """max.connection.creation.rate: over it, acquire waits the time that brings the rate back,
    which is what makes the listener stop accepting; nobody is refused."""
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def main() -> None:
        quotas = ConnectionQuotas(samples=2, window_s=1.0, max_connection_creation_rate=4)
        start = trio.current_time()
        for _ in range(6):
            assert await quotas.acquire("10.0.0.1")
        assert trio.current_time() - start > 0  # the fifth and sixth waited
        assert quotas.accept_throttled_ms > 0 and quotas.total == 6
        quotas.max_connection_creation_rate = INT_MAX  # a dynamic change: no limit any more
        before = trio.current_time()
        for _ in range(10):
            assert await quotas.acquire("10.0.0.1")
        assert trio.current_time() == before

    trio.run(main, clock=clock)


# -- per listener (KIP-402, KIP-612) and the protected inter-broker listener -------------------------


class _Served:
    """A served connection as ConnectionQuotas sees it (``Evictable``)."""

    def __init__(self, last_active: float) -> None:
        self.last_active = last_active
        self.evicted = False

    def evict(self) -> None:
        self.evicted = True


def test_listener_limits_come_from_listener_name_keys_and_default_to_the_broker_wide_ones() -> None:
    config = default_config(
        listeners=["CLIENTS://127.0.0.1:0", "REPLICATION://127.0.0.1:0"],
        listener_security_protocol_map="CLIENTS:PLAINTEXT,REPLICATION:PLAINTEXT",
        inter_broker_listener_name="REPLICATION",
        max_connections=50,
        **{"listener.name.clients.max.connections": 7, "listener.name.clients.max.connection.creation.rate": 3},
    )
    quotas = ConnectionQuotas.from_config(config)
    assert (quotas.listener_limit("CLIENTS"), quotas.listener_limit("REPLICATION")) == (7, 50)
    assert quotas.listener_creation_rates == {"CLIENTS": 3}
    assert quotas.protected_listener == "REPLICATION"
    alone = default_config(listeners=["PLAINTEXT://127.0.0.1:0"])
    assert ConnectionQuotas.from_config(alone).protected_listener is None  # only protected among others
    with pytest.raises(ConfigError, match="below the minimum"):
        default_config(**{"listener.name.plaintext.max.connections": -1})


async def test_a_listener_at_its_limit_waits_while_the_others_accept() -> None:
    quotas = ConnectionQuotas(listener_max_connections={"clients": 1}, listeners=["CLIENTS", "OTHER"])
    assert await quotas.acquire("10.0.0.1", "CLIENTS")
    admitted: list[str] = []

    async def accept(address: str, listener: str) -> None:
        if await quotas.acquire(address, listener):
            admitted.append(address)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept, "10.0.0.2", "CLIENTS")
        await trio.testing.wait_all_tasks_blocked()
        assert (admitted, quotas.waiting) == ([], 1)
        assert await quotas.acquire("10.0.0.3", "OTHER")  # its own count, no limit of its own
        assert (quotas.listener_count("CLIENTS"), quotas.listener_count("other"), quotas.total) == (1, 1, 2)
        quotas.release("10.0.0.1", "CLIENTS")  # the count goes back down: the waiting one gets in
        await trio.testing.wait_all_tasks_blocked()
    assert admitted == ["10.0.0.2"] and quotas.listener_count("CLIENTS") == 1
    with pytest.raises(RuntimeError, match="never acquired"):
        quotas.release("10.0.0.3", "CLIENTS_2")


async def test_the_inter_broker_listener_gets_in_past_max_connections_and_the_lru_client_goes() -> None:
    """KIP-402: at max.connections a client listener waits, the inter-broker one is accepted and
    the least recently used connection of another listener is closed to make room."""
    quotas = ConnectionQuotas(
        max_connections=2, listeners=["CLIENTS", "REPLICATION"], inter_broker_listener="REPLICATION"
    )
    older, newer = _Served(1.0), _Served(5.0)
    for conn in (newer, older):
        assert await quotas.acquire("10.0.0.1", "CLIENTS")
        quotas.track("CLIENTS", conn)
    with trio.move_on_after(1) as waited:
        await quotas.acquire("10.0.0.2", "CLIENTS")
    assert waited.cancelled_caught  # a client connection waits for a slot
    assert await quotas.acquire("10.0.0.9", "REPLICATION")  # at once
    replica = _Served(0.0)  # the least recently used of all, but protected
    quotas.track("REPLICATION", replica)
    assert (older.evicted, newer.evicted, replica.evicted, quotas.evicted) == (True, False, False, 1)
    assert quotas.total == 3  # until the evicted connection's release
    assert await quotas.acquire("10.0.0.9", "REPLICATION")  # older is closing: newer goes too
    assert newer.evicted and quotas.evicted == 2
    quotas.release("10.0.0.1", "CLIENTS", older)
    quotas.release("10.0.0.1", "CLIENTS", newer)
    assert (quotas.total, quotas.listener_count("CLIENTS"), quotas.listener_count("REPLICATION")) == (2, 0, 2)
    # lowering max.connections (dynamic) closes the unprotected listeners' excess only
    client = _Served(9.0)
    quotas.set_max_connections(5)
    assert await quotas.acquire("10.0.0.3", "CLIENTS")
    quotas.track("CLIENTS", client)
    quotas.set_max_connections(1)
    assert client.evicted and not replica.evicted


async def test_without_other_listeners_the_inter_broker_one_is_not_protected() -> None:
    quotas = ConnectionQuotas(max_connections=1, listeners=["REPLICATION"], inter_broker_listener="REPLICATION")
    assert await quotas.acquire("10.0.0.1", "REPLICATION")
    with trio.move_on_after(1) as waited:
        await quotas.acquire("10.0.0.2", "REPLICATION")
    assert waited.cancelled_caught


def test_listener_creation_rates_pause_their_listener_and_spare_the_inter_broker_one() -> None:
    """listener.name.<l>.max.connection.creation.rate (KIP-612): a listener over its own rate
    pauses; the broker-wide rate does not count the protected inter-broker listener, which has
    only its own (by default the broker-wide value, as Kafka's prefix override)."""
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def main() -> None:
        quotas = ConnectionQuotas(
            samples=2,
            window_s=1.0,
            max_connection_creation_rate=4,
            listener_creation_rates={"CLIENTS": 2, "REPLICATION": 100},
            listeners=["CLIENTS", "OTHER", "REPLICATION"],
            inter_broker_listener="REPLICATION",
        )
        start = trio.current_time()
        for _ in range(2):
            assert await quotas.acquire("10.0.0.1", "CLIENTS")
        assert trio.current_time() == start
        for _ in range(2):
            assert await quotas.acquire("10.0.0.1", "OTHER")  # the broker's rate: 4 so far
        assert trio.current_time() == start
        for _ in range(20):
            assert await quotas.acquire("10.0.0.9", "REPLICATION")  # not in the broker's rate
        assert trio.current_time() == start and quotas.accept_throttled_ms == 0
        assert await quotas.acquire("10.0.0.1", "CLIENTS")  # over both: waits the longer time
        waited = trio.current_time() - start
        assert waited > 0 and quotas.accept_throttled_ms == round(waited * 1000)
        quotas.listener_creation_rates["CLIENTS"] = INT_MAX
        quotas.max_connection_creation_rate = INT_MAX
        before = trio.current_time()
        for _ in range(10):
            assert await quotas.acquire("10.0.0.1", "CLIENTS")
        assert trio.current_time() == before

    trio.run(main, clock=clock)


async def test_max_connections_is_a_dynamic_broker_config(tmp_path: Path) -> None:
    """IncrementalAlterConfigs on the broker (or the cluster default) changes max.connections at
    once: a lowered limit closes the unprotected listeners' least recently used connections."""
    async with running_broker(tmp_path) as core:
        quotas = core.connection_quotas
        assert quotas.max_connections == INT_MAX
        served = [_Served(float(i)) for i in range(3)]
        for conn in served:
            assert await quotas.acquire("10.0.0.1", "PLAINTEXT")
            quotas.track("PLAINTEXT", conn)
        [done] = await core.incremental_alter_configs([_alter("", ("max.connections", AlterConfigOp.SET, "2"))], False)
        assert done.error == ErrorCode.NONE, done.error_message
        assert quotas.max_connections == 2
        assert [conn.evicted for conn in served] == [True, False, False]
        ops = _alter("", ("max.connections", AlterConfigOp.DELETE, None))
        [done] = await core.incremental_alter_configs([ops], False)
        assert quotas.max_connections == INT_MAX


async def test_listener_limits_are_dynamic_broker_configs(tmp_path: Path) -> None:
    """listener.name.<listener>.max.connections and .max.connection.creation.rate (Kafka's
    ListenerReconfigurableConfigs): set on a broker or the cluster default, described, deleted."""
    key, rate_key = "listener.name.plaintext.max.connections", "listener.name.plaintext.max.connection.creation.rate"

    async def alter(broker: str, *ops: tuple[str, AlterConfigOp, str | None]) -> Any:
        [done] = await core.incremental_alter_configs([_alter(broker, *ops)], False)
        return done

    async with running_broker(tmp_path) as core:
        quotas = core.connection_quotas
        assert quotas.listener_limit("PLAINTEXT") == INT_MAX
        done = await alter("", (key, AlterConfigOp.SET, "9"))
        assert done.error == ErrorCode.NONE, done.error_message
        done = await alter("0", (key, AlterConfigOp.SET, "4"), (rate_key, AlterConfigOp.SET, "7"))
        assert done.error == ErrorCode.NONE, done.error_message
        assert (quotas.listener_limit("PLAINTEXT"), quotas.listener_creation_rates) == (4, {"PLAINTEXT": 7})
        entry = await _describe(core, "0", key)
        assert (entry.name, entry.value, entry.source, entry.read_only) == (
            key,
            "4",
            ConfigSource.DYNAMIC_BROKER_CONFIG,
            False,
        )
        assert [(s[1], s[2]) for s in entry.synonyms] == [
            ("4", ConfigSource.DYNAMIC_BROKER_CONFIG),
            ("9", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ]
        await alter("0", (key, AlterConfigOp.DELETE, None))
        assert quotas.listener_limit("PLAINTEXT") == 9  # the cluster default's
        await alter("", (key, AlterConfigOp.DELETE, None))
        assert quotas.listener_limit("PLAINTEXT") == INT_MAX
        for refused in ("listener.name.plaintext.ssl.keystore.location", "listener.name.plaintext.num.io.threads"):
            done = await alter("0", (refused, AlterConfigOp.SET, "x"))
            assert done.error == ErrorCode.INVALID_CONFIG and refused in (done.error_message or ""), done
        done = await alter("0", (key, AlterConfigOp.SET, "-1"))
        assert done.error == ErrorCode.INVALID_CONFIG and "below the minimum" in (done.error_message or "")


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


@pytest.mark.integration
def test_a_broker_throttles_an_address_over_its_connection_creation_rate(tmp_path: Path) -> None:
    """An ip quota set through AlterClientQuotas (odradek's CLI) on 127.0.0.1: connections beyond
    the rate are closed without an answer; the quota deleted, every connection is served."""
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "odradek", "quotas", *args, "--bootstrap-server", broker.bootstrap],
            capture_output=True,
            text=True,
            timeout=120,
        )

    settings = {"quota.window.num": 2, "metrics.prometheus.listener": "127.0.0.1:0"}
    with start_broker(tmp_path, settings) as broker:
        done = cli("alter", "--ip", "127.0.0.1", "--add", "connection_creation_rate=2")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "Completed updating config for ip '127.0.0.1'."
        described = cli("describe", "--ip", "127.0.0.1")
        assert described.stdout.strip() == "Quota configs for ip '127.0.0.1' are connection_creation_rate=2.0"
        refused = cli("alter", "--ip", "127.0.0.1", "--add", "producer_byte_rate=5")
        assert refused.returncode == 1 and "Invalid configuration key producer_byte_rate" in refused.stderr
        served = 0
        for attempt in range(8):  # at once: the rate's window holds 2 a second
            with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
                served += _answers(sock, attempt)
        assert served < 8
        throttled = sum(v for (name, _), v in broker.metrics().items() if name == "odradek_connections_ip_throttled")
        assert throttled >= 8 - served
        assert cli("alter", "--ip", "127.0.0.1", "--delete", "connection_creation_rate").returncode == 0
        time.sleep(0.5)  # the other brokers would hear through their watch; this one knows at once
        for attempt in range(8):
            with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
                assert _answers(sock, 100 + attempt)


def _silent(sock: socket.socket, correlation_id: int, wait_s: float = 1.0) -> bool:
    """Whether ``sock``'s ApiVersions goes unanswered for ``wait_s`` (the broker has not accepted
    it yet: it waits in the listen backlog); the request stays sent."""
    frame = api_versions_frame(3, correlation_id)
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    sock.settimeout(wait_s)
    try:
        return not sock.recv(4, socket.MSG_PEEK)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(10)


def _answered_later(sock: socket.socket, correlation_id: int) -> bool:
    """Whether the request :func:`_silent` left pending is answered now."""
    head = sock.recv(4)
    if len(head) < 4:
        return False
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    return struct.unpack(">i", body[:4])[0] == correlation_id


def _closed_by_broker(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True


@pytest.mark.integration
def test_a_broker_holds_listener_limits_and_keeps_room_for_inter_broker_connections(tmp_path: Path) -> None:
    """KIP-402 over real sockets: PLAINTEXT holds at most 2 connections (a third waits until one
    closes); at max.connections=3, inter-broker (REPLICATION) connections still get in and the
    least recently used PLAINTEXT connection is closed for them."""
    import re

    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
        "inter.broker.listener.name": "REPLICATION",
        "max.connections": 3,
        "listener.name.plaintext.max.connections": 2,
        "metrics.prometheus.listener": "127.0.0.1:0",
    }
    with start_broker(tmp_path, settings) as broker:
        ports = dict(re.findall(r"listening on (\w+)://127\.0\.0\.1:(\d+)", broker.log_path.read_text()))
        replication = int(ports["REPLICATION"])
        first, second = _served_connection(broker.port), _served_connection(broker.port)
        third = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        opened = [first, second, third]
        try:
            assert _silent(third, 7), "a third PLAINTEXT connection was served over its listener's limit"
            first.close()  # the listener's count goes back down: the waiting one is accepted
            assert _answered_later(third, 7)
            assert _answers(second, 8)
            time.sleep(0.1)
            assert _answers(third, 9)  # second is now the least recently used PLAINTEXT connection
            # the broker holds 2 of its max.connections=3: one inter-broker connection fills it,
            # the next goes past it, and a PLAINTEXT connection makes room
            for attempt in range(2):
                inter = socket.create_connection(("127.0.0.1", replication), timeout=10)
                opened.append(inter)
                assert _answers(inter, 20 + attempt), "an inter-broker connection was not served"
            assert _closed_by_broker(second), "the least recently used PLAINTEXT connection stayed open"
            assert _answers(third, 10)
            metrics = broker.metrics()
            assert sample(metrics, "odradek_connections_evicted") == 1
            count = "kafka_server_socket_server_metrics_listener_connection_count"
            held = {listener: sample(metrics, count, listener=listener) for listener in ("PLAINTEXT", "REPLICATION")}
            assert held == {"PLAINTEXT": 1, "REPLICATION": 2}
            assert sample(metrics, "odradek_listener_max_connections", listener="PLAINTEXT") == 2
        finally:
            for sock in opened:
                sock.close()
        assert "and this is the least recently used one" in broker.log_path.read_text()


async def test_per_ip_limits_are_dynamic_broker_configs(tmp_path: Path) -> None:
    """max.connections.per.ip and its overrides (Kafka's DynamicConnectionQuota): altered on the
    broker or the cluster default, in force for new connections at once, checked as the static
    config is (host:count entries, 0 only with overrides, hostnames that resolve)."""

    async def alter(broker: str, *ops: tuple[str, AlterConfigOp, str | None]) -> Any:
        [done] = await core.incremental_alter_configs([_alter(broker, *ops)], False)
        return done

    async with running_broker(tmp_path) as core:
        quotas = core.connection_quotas
        assert await quotas.acquire("10.0.0.1", "PLAINTEXT") and await quotas.acquire("10.0.0.1", "PLAINTEXT")
        done = await alter("", ("max.connections.per.ip", AlterConfigOp.SET, "2"))
        assert done.error == ErrorCode.NONE, done.error_message
        assert not await quotas.acquire("10.0.0.1", "PLAINTEXT")  # holds 2, the new limit
        done = await alter("0", ("max.connections.per.ip.overrides", AlterConfigOp.SET, "10.0.0.1:3,localhost:1"))
        assert done.error == ErrorCode.NONE, done.error_message
        assert quotas.limit_for("10.0.0.1") == 3 and quotas.limit_for("127.0.0.1") == 1
        assert await quotas.acquire("10.0.0.1", "PLAINTEXT")
        assert not await quotas.acquire("10.0.0.1", "PLAINTEXT")
        entry = await _describe(core, "0", "max.connections.per.ip.overrides")
        assert (entry.value, entry.source) == ("10.0.0.1:3,localhost:1", ConfigSource.DYNAMIC_BROKER_CONFIG)

        for bad, why in (
            (("max.connections.per.ip.overrides", "10.0.0.1"), "not host:count"),
            (("max.connections.per.ip.overrides", "no-such-host.invalid:2"), "cannot resolve"),
            (("max.connections.per.ip", "-1"), "max.connections.per.ip"),
        ):
            done = await alter("0", (bad[0], AlterConfigOp.SET, bad[1]))
            assert done.error == ErrorCode.INVALID_CONFIG and why in (done.error_message or ""), done
        done = await alter("0", ("max.connections.per.ip.overrides", AlterConfigOp.DELETE, None))
        assert done.error == ErrorCode.NONE, done.error_message
        done = await alter("0", ("max.connections.per.ip", AlterConfigOp.SET, "0"))
        assert done.error == ErrorCode.INVALID_CONFIG and "only with" in (done.error_message or ""), done
        assert quotas.limit_for("10.0.0.1") == 2  # the refused changes changed nothing

        await alter("", ("max.connections.per.ip", AlterConfigOp.DELETE, None))
        assert quotas.limit_for("10.0.0.1") == INT_MAX
