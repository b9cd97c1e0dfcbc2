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

One :class:`ConnectionQuotas` belongs to the broker core (``BrokerCore.connection_quotas``) and
is shared by every listener, whatever its transport: a transport plugin calls :meth:`admit`
after accepting a socket and :meth:`release` when the connection ends (``odradek.transport``'s
``start_connection`` does both).
Kafka's defaults leave both unbounded; so do odradek's.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Mapping
from typing import Protocol

import trio

from .config import INT_MAX, ConfigError, parse_connection_overrides

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
    ) -> None:
        if max_connections < 0 or max_connections_per_ip < 0:
            raise ConfigError("connection limits must be >= 0")
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.total = 0
        self._per_address: dict[str, int] = {}
        self._slot_freed = trio.lowlevel.ParkingLot()

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> ConnectionQuotas:
        """The limits a broker config sets (``max.connections``, ``max.connections.per.ip`` and
        its overrides, hostnames resolved now)."""
        overrides = parse_connection_overrides(str(config["max.connections.per.ip.overrides"]))
        return cls(
            max_connections=int(str(config["max.connections"])),
            max_connections_per_ip=int(str(config["max.connections.per.ip"])),
            per_ip_overrides=resolve_overrides(overrides),
        )

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
        what stops accepting."""
        while self.total >= self.max_connections:
            await self._slot_freed.park()
        key = normalize_address(address)
        held = self._per_address.get(key, 0)
        if held >= self.per_ip_overrides.get(key, self.max_connections_per_ip):
            return False
        self._per_address[key] = held + 1
        self.total += 1
        return True

    async def admit(self, sock: Closable, address: str, *, peer: str, where: str) -> bool:
        """:meth:`acquire` for an accepted socket: closed when refused (with an INFO line naming
        ``peer`` and the listener ``where``, as Kafka logs it) or when the wait is cancelled (the
        listener stopping). True: the caller serves it and calls :meth:`release` at its end."""
        try:
            admitted = await self.acquire(address)
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


__all__ = ["ConnectionQuotas", "normalize_address", "resolve_overrides"]
