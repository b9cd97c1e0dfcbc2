"""IP connection-rate quotas (KIP-612): ``connection_creation_rate`` of ``ip`` entities.

Kafka keeps them as entity configs of type ``ips``: ``/config/ips/<address>`` for one address
and ``/config/ips/<default>`` for every address without its own, each
``{"version":1,"config":{"connection_creation_rate":"10"}}``. AlterClientQuotas and
DescribeClientQuotas manage them (:mod:`odradek.broker.quota_admin`, entity type ``ip``, which
takes no other component and no other key). :class:`IpConnectionRates` keeps them in memory,
listed at start and then followed by a watch, and hands every change to the broker's
:class:`~odradek.connection_quotas.ConnectionQuotas`, which enforces them as connections arrive.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Callable, Mapping

import trio

from ..connection_quotas import normalize_address
from ..entity_configs import follow_changes
from ..interfaces import MetadataStore, WatchEvent
from .quota_configs import DEFAULT_SEGMENT

log = logging.getLogger(__name__)

IP_CONNECTION_RATE = "connection_creation_rate"
IP_CONFIG_ROOT = "/config/ips/"


def valid_ip(name: str) -> bool:
    """Whether ``name`` is an IPv4 or IPv6 address (Kafka's ``isValidIpEntity``: no host names)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def ip_entity_key(ip: str | None) -> str:
    """The store key of an address's quotas (None: the default)."""
    return f"{IP_CONFIG_ROOT}{DEFAULT_SEGMENT if ip is None else normalize_address(ip)}"


def parse_ip_key(key: str) -> tuple[bool, str | None]:
    """(is an ip entity key, the address or None for the default)."""
    if not key.startswith(IP_CONFIG_ROOT):
        return False, None
    rest = key[len(IP_CONFIG_ROOT) :]
    if not rest or "/" in rest:
        return False, None
    return True, None if rest == DEFAULT_SEGMENT else rest


def ip_rate(value: bytes | None) -> float | None:
    """The ``connection_creation_rate`` of a stored ip entity config (None: none, or unreadable)."""
    if value is None:
        return None
    try:
        doc = json.loads(value)
        raw = doc.get("config", {}).get(IP_CONNECTION_RATE) if isinstance(doc, dict) else None
        rate = float(raw) if raw is not None else None
    except (ValueError, TypeError, AttributeError):
        log.warning("ignoring an unreadable ip quota config: %r", value[:200])
        return None
    return rate if rate is not None and rate >= 0 else None


class IpConnectionRates:
    """Every address's ``connection_creation_rate`` and the default one, kept by a watch of
    ``/config/ips/``; ``on_change(rates, default)`` gets the whole set after each change."""

    def __init__(self, store: MetadataStore, on_change: Callable[[Mapping[str, float], float | None], None]) -> None:
        self.store = store
        self.on_change = on_change
        self.rates: dict[str, float] = {}
        self.default: float | None = None
        self.revision = 0
        self.loaded = trio.Event()

    def set_rate(self, ip: str | None, rate: float | None) -> None:
        """An address's (None: the default's) rate as just written (None: removed): the broker
        that wrote it enforces it before its watch brings the change."""
        self._set(ip, rate)

    def _set(self, ip: str | None, rate: float | None) -> None:
        if ip is None:
            self.default = rate
        elif rate is None:
            self.rates.pop(normalize_address(ip), None)
        else:
            self.rates[normalize_address(ip)] = rate
        self.on_change(self.rates, self.default)

    def set_entity(self, ip: str | None, value: bytes | None) -> None:
        """An ip entity's stored config changed (``value`` None: deleted)."""
        self._set(ip, ip_rate(value))

    async def load(self) -> None:
        found, revision = await self.store.list(IP_CONFIG_ROOT)
        self.rates, self.default = {}, None
        for key, versioned in found.items():
            is_ip, ip = parse_ip_key(key)
            if is_ip:
                rate = ip_rate(versioned.value)
                if ip is None:
                    self.default = rate
                elif rate is not None:
                    self.rates[normalize_address(ip)] = rate
        self.revision = revision
        self.on_change(self.rates, self.default)
        self.loaded.set()

    async def run(self) -> None:
        if not self.loaded.is_set():
            await self.load()
        await follow_changes(self.store, IP_CONFIG_ROOT, self, self._apply, "ip quota config")

    def _apply(self, ev: WatchEvent) -> None:
        is_ip, ip = parse_ip_key(ev.key)
        if is_ip:
            self.set_entity(ip, ev.value)


__all__ = [
    "IP_CONFIG_ROOT",
    "IP_CONNECTION_RATE",
    "IpConnectionRates",
    "ip_entity_key",
    "ip_rate",
    "parse_ip_key",
    "valid_ip",
]
