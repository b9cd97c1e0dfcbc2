"""How many client connections a broker holds at once (Kafka's ``ConnectionQuotas``).

Every connection costs the broker memory (a read buffer, the answers it has not read yet) and a
file descriptor, so an operator bounds them as in Kafka:

- ``max.connections`` (broker-wide, over all listeners): when the broker holds that many, a
  listener stops accepting until one closes. The new connections wait in the socket's backlog,
  as Kafka's acceptor blocks; none is refused.
- ``max.connections.per.ip``, with ``max.connections.per.ip.overrides`` (``host:count`` pairs,
  hostnames resolved once at start): a connection from an address that already holds its limit
  is closed at once, with an INFO line naming the address, as Kafka does. An address limited to
  0 is refused every connection.
- ``max.connection.creation.rate`` (KIP-612, broker-wide): each accepted connection counts in
  a rate over ``quota.window.num`` windows of ``quota.window.size.seconds``; above it the
  listener pauses accepting for the time that brings the rate back to the limit, as Kafka's
  acceptor blocks.
- ``connection_creation_rate`` of ``ip`` quota entities (KIP-612; one address, or the default
  for every address without its own): a connection that takes its address over the rate is
  not served and not counted, and its socket is closed once the throttle time has passed
  (Kafka's ``ConnectionThrottledException`` and delayed close), so a client reconnecting in a
  loop is slowed down instead of spinning. The rates come from the metadata store
  (:meth:`ConnectionQuotas.set_ip_rates`, fed by ``odradek.broker.ip_quota_configs``).

One :class:`ConnectionQuotas` belongs to the broker core (``BrokerCore.connection_quotas``) and
is shared by every listener, whatever its transport: a transport plugin calls :meth:`admit`
after accepting a socket and :meth:`release` when the connection ends (``odradek.transport``'s
``start_connection`` does both).
Kafka's defaults leave both unbounded; so do odradek's.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import socket
from collections.abc import Callable, Mapping
from typing import Protocol

import trio

from .config import INT_MAX, ConfigError, parse_connection_overrides
from .rates import Rate, throttle_time_ms

log = logging.getLogger("odradek.transport")


class Closable(Protocol):
    """An accepted socket, as far as admission needs it."""

    def close(self) -> None: ...


def normalize_address(host: str) -> str:
    """One spelling per address: an IPv4-mapped IPv6 peer (``::ffff:10.0.0.1``, what a dual-stack
    socket reports) is its IPv4 address; other addresses in their compressed form. A string that
    is not an address is returned as it is."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def resolve_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """The overrides by address: an IP stays as it is (normalized), a hostname stands for every
    address it resolves to now (Kafka resolves them once, with ``InetAddress.getByName``). A name
    that does not resolve is a config error naming it: a limit meant for it would silently not hold."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        if _is_address(host):
            out[normalize_address(host)] = count
            continue
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ConfigError(
                f"invalid value for 'max.connections.per.ip.overrides': cannot resolve {host!r}: {exc}"
            ) from None
        for info in infos:
            out[normalize_address(str(info[4][0]))] = count
    return out


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


#: an address's rate sensor not used for this long is dropped, checked at most once a minute
SENSOR_EXPIRY_S = 3600.0
_SWEEP_EVERY_S = 60.0


class ConnectionThrottled(Exception):
    """A connection that took its address over its ``connection_creation_rate``: not served,
    closed after ``throttle_ms`` (Kafka's ``ConnectionThrottledException``)."""

    def __init__(self, address: str, rate: float, throttle_ms: int) -> None:
        super().__init__(f"{address} is over its connection_creation_rate of {rate:g}/s")
        self.address = address
        self.rate = rate
        self.throttle_ms = throttle_ms


async def close_after(sock: Closable, delay_s: float) -> None:
    """Close ``sock`` after ``delay_s`` (at once if cancelled first)."""
    try:
        await trio.sleep(delay_s)
    finally:
        sock.close()


class ConnectionQuotas:
    """Counts the broker's connections, in total and per client address; see the module doc.

    All methods run on the broker's trio loop: :meth:`acquire` checks and counts with no
    checkpoint in between, so listeners accepting side by side never overshoot a limit."""

    def __init__(
        self,
        *,
        max_connections: int = INT_MAX,
        max_connections_per_ip: int = INT_MAX,
        per_ip_overrides: Mapping[str, int] | None = None,
        max_connection_creation_rate: int = INT_MAX,
        samples: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        if max_connections < 0 or max_connections_per_ip < 0 or max_connection_creation_rate < 0:
            raise ConfigError("connection limits must be >= 0")
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        #: new connections a second over all listeners (INT_MAX: no limit); changed at run time
        #: by the dynamic broker config
        self.max_connection_creation_rate = max_connection_creation_rate
        self.total = 0
        self._per_address: dict[str, int] = {}
        self._slot_freed = trio.lowlevel.ParkingLot()
        self._samples, self._window_ms = samples, window_s * 1000.0
        self.clock = clock
        self._creation = Rate(samples, self._window_ms)
        self._ip_rates: dict[str, float] = {}
        self._default_ip_rate: float | None = None
        #: address -> (its connection rate, when it last connected)
        self._ip_sensors: dict[str, tuple[Rate, float]] = {}
        self._next_sweep_s = -math.inf
        #: connections closed for their address's rate, and ms the listeners paused for the
        #: broker's rate, since the broker started
        self.ip_throttled = 0
        self.accept_throttled_ms = 0

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> ConnectionQuotas:
        """The limits a broker config sets (``max.connections``, ``max.connections.per.ip`` and
        its overrides, hostnames resolved now)."""
        overrides = parse_connection_overrides(str(config["max.connections.per.ip.overrides"]))
        return cls(
            max_connections=int(str(config["max.connections"])),
            max_connections_per_ip=int(str(config["max.connections.per.ip"])),
            per_ip_overrides=resolve_overrides(overrides),
            max_connection_creation_rate=int(str(config["max.connection.creation.rate"])),
            samples=int(str(config["quota.window.num"])),
            window_s=float(str(config["quota.window.size.seconds"])),
        )

    def set_ip_rates(self, rates: Mapping[str, float], default: float | None) -> None:
        """The ``connection_creation_rate`` of each address with its own, and the default one
        (None: addresses without their own are not limited)."""
        self._ip_rates = {normalize_address(ip): rate for ip, rate in rates.items()}
        self._default_ip_rate = default
        if default is None:
            for key in [k for k in self._ip_sensors if k not in self._ip_rates]:
                del self._ip_sensors[key]

    def ip_rate_for(self, address: str) -> float | None:
        """The connection rate ``address`` may open connections at (None: no limit)."""
        return self._ip_rates.get(normalize_address(address), self._default_ip_rate)

    def limit_for(self, address: str) -> int:
        """How many connections ``address`` may hold."""
        return self.per_ip_overrides.get(normalize_address(address), self.max_connections_per_ip)

    def count(self, address: str) -> int:
        """How many connections ``address`` holds now."""
        return self._per_address.get(normalize_address(address), 0)

    @property
    def waiting(self) -> int:
        """How many listeners wait for a connection slot (``max.connections`` reached)."""
        return len(self._slot_freed)

    async def acquire(self, address: str) -> bool:
        """Count a new connection from ``address``, first waiting while the broker holds
        ``max.connections``. False, counting nothing, when ``address`` already holds its limit:
        the caller closes the connection. Call it from the accept loop, so that waiting here is
        what stops accepting: for ``max.connections``, and for the time that brings the broker's
        connection creation rate back under ``max.connection.creation.rate``. Raises
        :class:`ConnectionThrottled`, counting nothing, when the connection takes its address over
        its ``connection_creation_rate``."""
        await self._wait_for_creation_rate()
        while self.total >= self.max_connections:
            await self._slot_freed.park()
        key = normalize_address(address)
        held = self._per_address.get(key, 0)
        if held >= self.per_ip_overrides.get(key, self.max_connections_per_ip):
            return False
        self._record_ip(key)
        self._per_address[key] = held + 1
        self.total += 1
        return True

    async def _wait_for_creation_rate(self) -> None:
        """Kafka's acceptor throttle: record the connection in the broker's rate and, over the
        limit, wait until the rate is back at it."""
        limit = self.max_connection_creation_rate
        if limit >= INT_MAX:
            return
        now_ms = self.clock() * 1000.0
        self._creation.record(1, now_ms)
        measured = self._creation.measure(now_ms)
        if measured <= limit:
            return
        throttle = throttle_time_ms(measured, max(limit, 1e-9), self._creation.window_size_ms(now_ms))
        if throttle > 0:
            self.accept_throttled_ms += throttle
            await trio.sleep(throttle / 1000.0)

    def _record_ip(self, key: str) -> None:
        """Kafka's ``recordIpConnectionMaybeThrottle``: count the connection in its address's
        rate; over the address's quota, take it back and raise :class:`ConnectionThrottled`."""
        rate = self._ip_rates.get(key, self._default_ip_rate)
        if rate is None:
            return
        now_s = self.clock()
        now_ms = now_s * 1000.0
        if now_s >= self._next_sweep_s:
            self._sweep(now_s)
        entry = self._ip_sensors.get(key)
        sensor = entry[0] if entry is not None else Rate(self._samples, self._window_ms)
        self._ip_sensors[key] = (sensor, now_s)
        sensor.record(1, now_ms)
        measured = sensor.measure(now_ms)
        if measured <= rate:
            return
        sensor.record(-1, now_ms)  # not accepted: it does not count
        throttle = throttle_time_ms(measured, rate, sensor.window_size_ms(now_ms)) if rate > 0 else 1000
        self.ip_throttled += 1
        raise ConnectionThrottled(key, rate, max(1, throttle))

    def _sweep(self, now_s: float) -> None:
        self._next_sweep_s = now_s + _SWEEP_EVERY_S
        for key in [k for k, (_, last) in self._ip_sensors.items() if now_s - last >= SENSOR_EXPIRY_S]:
            del self._ip_sensors[key]

    async def admit(
        self, sock: Closable, address: str, *, peer: str, where: str, nursery: trio.Nursery | None = None
    ) -> bool:
        """:meth:`acquire` for an accepted socket: closed when refused (with an INFO line naming
        ``peer`` and the listener ``where``, as Kafka logs it) or when the wait is cancelled (the
        listener stopping). A connection over its address's rate is closed after its throttle
        time by a task in ``nursery`` (at once without one). True: the caller serves it and calls
        :meth:`release` at its end."""
        try:
            admitted = await self.acquire(address)
        except ConnectionThrottled as throttled:
            log.debug("%s: throttled connection from %s: %s; closing it in %d ms", where, peer, throttled,
                      throttled.throttle_ms)  # fmt: skip
            if nursery is None:
                sock.close()
            else:
                nursery.start_soon(close_after, sock, throttled.throttle_ms / 1000.0)
            return False
        except BaseException:
            sock.close()
            raise
        if not admitted:
            log.info(
                "%s: rejected connection from %s: the address already holds its maximum of %d connection(s)",
                where,
                peer,
                self.limit_for(address),
            )
            sock.close()
        return admitted

    def release(self, address: str) -> None:
        """A connection counted by :meth:`acquire` has closed: free its slot."""
        key = normalize_address(address)
        held = self._per_address.get(key, 0)
        if held <= 0:
            raise RuntimeError(f"release of a connection from {address} that was never acquired")
        if held == 1:
            del self._per_address[key]
        else:
            self._per_address[key] = held - 1
        self.total -= 1
        # every waiting listener checks again (Kafka's notifyAll): one woken alone for a client
        # whose address is at its own limit would take the wakeup and leave the others parked
        self._slot_freed.unpark_all()


__all__ = ["ConnectionQuotas", "ConnectionThrottled", "close_after", "normalize_address", "resolve_overrides"]
