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

Per listener (KIP-402, KIP-612), as Kafka's ``ListenerConnectionQuota``:

- ``listener.name.<listener>.max.connections``: at the limit, that listener stops accepting
  until one of its connections closes; unset, the listener's limit is ``max.connections``.
- ``listener.name.<listener>.max.connection.creation.rate``: the listener's own rate, recorded
  next to the broker's; the listener pauses for the longer of the two throttle times. Unset, it
  is ``max.connection.creation.rate``.
- the inter-broker listener is *protected* when the broker has more than one listener: neither
  ``max.connections`` nor ``max.connection.creation.rate`` (the broker-wide ones) hold it back,
  only its own listener limits. When one of its connections takes the broker over
  ``max.connections``, the least recently used connection of the other listeners is closed
  (Kafka's ``closeExcessConnections``), so replication and the controller always get in.

One :class:`ConnectionQuotas` belongs to the broker core (``BrokerCore.connection_quotas``) and
is shared by every listener, whatever its transport: a transport plugin calls :meth:`admit`
after accepting a socket, :meth:`track` once it serves it (so that it can be closed to make room)
and :meth:`release` when the connection ends (``odradek.transport``'s ``start_connection`` does
all three).
Kafka's defaults leave both unbounded; so do odradek's.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import trio

from .config import INT_MAX, Config, ConfigError, listener_key, parse_connection_overrides
from .rates import Rate, throttle_time_ms

log = logging.getLogger("odradek.transport")


class Closable(Protocol):
    """An accepted socket, as far as admission needs it."""

    def close(self) -> None: ...


class Evictable(Protocol):
    """A served connection, as far as making room for an inter-broker one needs it."""

    #: trio time it last read a request (or was accepted): the least recently used goes first
    last_active: float

    def evict(self) -> None:
        """Close it now (its requests in flight are abandoned)."""


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


def _record_rate(rate: Rate, limit: int, now_ms: float) -> int:
    """Record one connection in ``rate``; the ms until it is back at ``limit`` (0: within it;
    nothing is recorded without a limit)."""
    if limit >= INT_MAX:
        return 0
    rate.record(1, now_ms)
    measured = rate.measure(now_ms)
    if measured <= limit:
        return 0
    return max(0, throttle_time_ms(measured, max(limit, 1e-9), rate.window_size_ms(now_ms)))


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
        listener_max_connections: Mapping[str, int] | None = None,
        listener_creation_rates: Mapping[str, int] | None = None,
        listeners: Sequence[str] = (),
        inter_broker_listener: str | None = None,
    ) -> None:
        limits = [max_connections, max_connections_per_ip, max_connection_creation_rate]
        limits += [*(listener_max_connections or {}).values(), *(listener_creation_rates or {}).values()]
        if min(limits) < 0:
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
        #: ``listener.name.<listener>.max.connections`` and ``...max.connection.creation.rate``
        #: where set (a listener without its own takes the broker-wide value), by listener name
        self.listener_max_connections = {k.upper(): v for k, v in (listener_max_connections or {}).items()}
        self.listener_creation_rates = {k.upper(): v for k, v in (listener_creation_rates or {}).items()}
        #: the listener the broker-wide limits never hold back (see the module doc): the
        #: inter-broker one, when there are others
        self.protected_listener = (
            inter_broker_listener.upper() if inter_broker_listener and len(set(listeners)) > 1 else None
        )
        self._per_listener: dict[str, int] = {}
        self._listener_rates: dict[str, Rate] = {}
        #: served connections by listener (:meth:`track`), and those closed to make room
        self._tracked: dict[str, set[Evictable]] = {}
        self._evicting: set[Evictable] = set()
        #: connections closed to make room for inter-broker ones since the broker started
        self.evicted = 0

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> ConnectionQuotas:
        """The limits a broker config sets (``max.connections``, ``max.connections.per.ip`` and
        its overrides, hostnames resolved now)."""
        overrides = parse_connection_overrides(str(config["max.connections.per.ip.overrides"]))
        listeners = [ep.name for ep in config.listeners] if isinstance(config, Config) else []
        inter_broker = config.inter_broker_listener if isinstance(config, Config) else None

        def per_listener(name: str) -> dict[str, int]:
            assert isinstance(config, Config)
            return {
                listener: int(str(config[key]))
                for listener in listeners
                if config.is_set(key := listener_key(listener, name))
            }

        return cls(
            max_connections=int(str(config["max.connections"])),
            max_connections_per_ip=int(str(config["max.connections.per.ip"])),
            per_ip_overrides=resolve_overrides(overrides),
            max_connection_creation_rate=int(str(config["max.connection.creation.rate"])),
            samples=int(str(config["quota.window.num"])),
            window_s=float(str(config["quota.window.size.seconds"])),
            listener_max_connections=per_listener("max.connections"),
            listener_creation_rates=per_listener("max.connection.creation.rate"),
            listeners=listeners,
            inter_broker_listener=None if inter_broker is None else inter_broker.name,
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

    def listener_count(self, listener: str) -> int:
        """How many connections ``listener`` holds now."""
        return self._per_listener.get(listener.upper(), 0)

    def listener_rows(self) -> list[tuple[str, int, int]]:
        """(listener, connections it holds, its limit) for every listener that took one, for the
        metrics."""
        return [(name, count, self.listener_limit(name)) for name, count in sorted(self._per_listener.items())]

    def listener_limit(self, listener: str) -> int:
        """How many connections ``listener`` may hold (its own limit, else ``max.connections``)."""
        return self.listener_max_connections.get(listener.upper(), self.max_connections)

    def _slot_available(self, listener: str | None) -> bool:
        """Kafka's ``connectionSlotAvailable``: the listener below its own limit, and the broker
        below ``max.connections`` unless the listener is the protected one."""
        if listener is not None and self._per_listener.get(listener, 0) >= self.listener_limit(listener):
            return False
        protected = listener is not None and listener == self.protected_listener
        return protected or self.total < self.max_connections

    def set_max_connections(self, max_connections: int) -> None:
        """A new ``max.connections`` (the dynamic broker config): waiting listeners check again,
        and connections over a lowered limit are closed, least recently used first, as Kafka's
        processors close theirs."""
        self.max_connections = max_connections
        self._slot_freed.unpark_all()
        self._make_room()

    def set_per_ip_limits(self, max_connections_per_ip: int, overrides: Mapping[str, int]) -> None:
        """A new ``max.connections.per.ip`` and overrides (the dynamic broker config; ``overrides``
        by address, see :func:`resolve_overrides`). They hold for new connections: an address over
        a lowered limit keeps what it holds, as in Kafka."""
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = {normalize_address(k): v for k, v in overrides.items()}

    def set_listener_limits(self, max_connections: Mapping[str, int], creation_rates: Mapping[str, int]) -> None:
        """The listeners' own ``max.connections`` and ``max.connection.creation.rate`` (the
        dynamic broker config), by listener name; a listener left out takes the broker-wide
        value. A listener over a lowered limit keeps its connections (Kafka closes connections
        only for the broker-wide limit) and accepts again below it."""
        self.listener_max_connections = {k.upper(): v for k, v in max_connections.items()}
        self.listener_creation_rates = {k.upper(): v for k, v in creation_rates.items()}
        self._slot_freed.unpark_all()

    async def acquire(self, address: str, listener: str | None = None) -> bool:
        """Count a new connection from ``address`` on ``listener`` (None: a transport that does
        not name it; only the broker-wide limits hold), first waiting while the listener or the
        broker holds its maximum (see the module doc for the inter-broker listener). False,
        counting nothing, when ``address`` already holds its limit: the caller closes the
        connection. Call it from the accept loop, so that waiting here is what stops accepting:
        for the connection limits, and for the time that brings the broker's and the listener's
        connection creation rates back under theirs. Raises :class:`ConnectionThrottled`,
        counting nothing, when the connection takes its address over its
        ``connection_creation_rate``."""
        name = None if listener is None else listener.upper()
        await self._wait_for_creation_rate(name)
        while not self._slot_available(name):
            await self._slot_freed.park()
        key = normalize_address(address)
        held = self._per_address.get(key, 0)
        if held >= self.per_ip_overrides.get(key, self.max_connections_per_ip):
            return False
        self._record_ip(key)
        self._per_address[key] = held + 1
        self.total += 1
        if name is not None:
            self._per_listener[name] = self._per_listener.get(name, 0) + 1
        if self.total > self.max_connections:
            self._make_room()  # only the protected listener gets past the limit
        return True

    async def _wait_for_creation_rate(self, listener: str | None) -> None:
        """Kafka's acceptor throttle: record the connection in the broker's rate (not for the
        protected listener) and in the listener's and, over either limit, wait until both are
        back at theirs."""
        now_ms = self.clock() * 1000.0
        throttle = 0
        if listener is None or listener != self.protected_listener:
            throttle = _record_rate(self._creation, self.max_connection_creation_rate, now_ms)
        if listener is not None:
            limit = self.listener_creation_rates.get(listener, self.max_connection_creation_rate)
            if limit < INT_MAX:
                rate = self._listener_rates.get(listener)
                if rate is None:
                    rate = self._listener_rates[listener] = Rate(self._samples, self._window_ms)
                throttle = max(throttle, _record_rate(rate, limit, now_ms))
        if throttle > 0:
            self.accept_throttled_ms += throttle
            await trio.sleep(throttle / 1000.0)

    def track(self, listener: str | None, connection: Evictable) -> None:
        """``connection`` (admitted on ``listener``) is served: it may be closed to make room for
        an inter-broker connection. :meth:`release` forgets it."""
        if listener is not None:
            self._tracked.setdefault(listener.upper(), set()).add(connection)

    def _make_room(self) -> None:
        """Close the least recently used connections of the unprotected listeners while the
        broker holds more than ``max.connections`` (Kafka's ``closeExcessConnections``); those
        already closing count as gone."""
        excess = self.total - len(self._evicting) - self.max_connections
        while excess > 0:
            candidates = [
                conn
                for listener, conns in self._tracked.items()
                if listener != self.protected_listener
                for conn in conns
                if conn not in self._evicting
            ]
            if not candidates:
                return
            victim = min(candidates, key=lambda conn: conn.last_active)
            self._evicting.add(victim)
            self.evicted += 1
            victim.evict()
            excess -= 1

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
        self,
        sock: Closable,
        address: str,
        *,
        peer: str,
        where: str,
        nursery: trio.Nursery | None = None,
        listener: str | None = None,
    ) -> bool:
        """:meth:`acquire` for an accepted socket: closed when refused (with an INFO line naming
        ``peer`` and the listener ``where``, as Kafka logs it) or when the wait is cancelled (the
        listener stopping). A connection over its address's rate is closed after its throttle
        time by a task in ``nursery`` (at once without one). True: the caller serves it and calls
        :meth:`release` at its end."""
        try:
            admitted = await self.acquire(address, listener)
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

    def release(self, address: str, listener: str | None = None, connection: Evictable | None = None) -> None:
        """A connection counted by :meth:`acquire` (on ``listener``; ``connection`` if it was
        tracked) has closed: free its slot."""
        if listener is not None:
            name = listener.upper()
            count = self._per_listener.get(name, 0)
            if count <= 0:
                raise RuntimeError(f"release of a connection on listener {name} that was never acquired")
            self._per_listener[name] = count - 1
            if connection is not None:
                self._tracked.get(name, set()).discard(connection)
        if connection is not None:
            self._evicting.discard(connection)
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


__all__ = [
    "ConnectionQuotas",
    "ConnectionThrottled",
    "Evictable",
    "close_after",
    "normalize_address",
    "resolve_overrides",
]
