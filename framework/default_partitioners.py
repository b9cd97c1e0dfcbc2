"""The producer's built-in partitioners, registered through the same hook third parties use.

``murmur2`` (the default) is Java's default behaviour: a keyed record goes to
``toPositive(murmur2(key)) % num_partitions`` -- bit for bit the Java client's ``Utils.murmur2``
(seed ``0x9747b28c``), so the same key lands on the same partition as with the Java client and
librdkafka's ``murmur2_random`` -- and a keyless record is partitioned stickily (KIP-480).
``sticky`` ignores keys and sticks every record to one partition until its batch closes (Java's
``UniformStickyPartitioner``); ``roundrobin`` ignores keys and cycles (Java's
``RoundRobinPartitioner``).

Sticky partitioning: the producer asks for a partition, tries to append to that partition's open
batch, and when the append would have to open a *new* batch it calls ``on_new_batch`` first and
asks again; so records stick to one partition until its batch fills or is drained by
``linger.ms``, then move to another random partition. Large batches, even spread.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .hookspecs import hookimpl
from .interfaces import Partitioner

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The Java client's ``Utils.murmur2`` of ``data`` as an unsigned 32-bit value.

    Java works on signed ints with wrap-around; masking with 0xFFFFFFFF after every multiply
    and using logical shifts gives the same bits. ``to_positive`` then matches Java's
    ``Utils.toPositive``.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    words = int.from_bytes  # little-endian 4-byte words, as Java assembles them
    for i in range(0, whole, 4):
        k = (words(data[i : i + 4], "little") * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    rest = length & 3
    if rest:
        if rest == 3:
            h ^= data[whole + 2] << 16
        if rest >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h


def to_positive(value: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``, which differs at INT_MIN)."""
    return value & 0x7FFFFFFF


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """The partition Java's default partitioner picks for ``key``."""
    return to_positive(murmur2(key)) % num_partitions


class _StickyChoice:
    """Per-topic sticky partition: chosen at random, changed on every new batch."""

    __slots__ = ("_current", "_rng")

    def __init__(self) -> None:
        self._current: dict[str, int] = {}
        self._rng = random.Random()

    def partition(self, topic: str, num_partitions: int) -> int:
        p = self._current.get(topic)
        if p is None or p >= num_partitions:
            p = self._current[topic] = self._rng.randrange(num_partitions)
        return p

    def switch(self, topic: str, previous_partition: int, num_partitions: int) -> None:
        """KIP-480: move to another partition, but only if the one that closed is still current
        (several records racing for a new batch must switch once, not once each)."""
        current = self._current.get(topic)
        if current is not None and current != previous_partition:
            return
        if num_partitions <= 1:
            self._current[topic] = 0
            return
        p = self._rng.randrange(num_partitions - 1)
        self._current[topic] = p + 1 if p >= previous_partition else p


class Murmur2Partitioner:
    """Java's default partitioner: murmur2 of the key, sticky (KIP-480) for keyless records."""

    name = "murmur2"

    def __init__(self) -> None:
        self._sticky = _StickyChoice()

    def partition(self, topic: str, key: bytes | None, value: bytes | None, num_partitions: int) -> int:
        if key is None:
            return self._sticky.partition(topic, num_partitions)
        return to_positive(murmur2(key)) % num_partitions

    def on_new_batch(self, topic: str, previous_partition: int, num_partitions: int) -> None:
        self._sticky.switch(topic, previous_partition, num_partitions)


class StickyPartitioner:
    """Every record sticky, keys ignored (Java's ``UniformStickyPartitioner``)."""

    name = "sticky"

    def __init__(self) -> None:
        self._sticky = _StickyChoice()

    def partition(self, topic: str, key: bytes | None, value: bytes | None, num_partitions: int) -> int:
        return self._sticky.partition(topic, num_partitions)

    def on_new_batch(self, topic: str, previous_partition: int, num_partitions: int) -> None:
        self._sticky.switch(topic, previous_partition, num_partitions)


class RoundRobinPartitioner:
    """Records cycle through partitions one by one, keys ignored (Java's ``RoundRobinPartitioner``)."""

    name = "roundrobin"

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, value: bytes | None, num_partitions: int) -> int:
        n = self._counters.get(topic, 0)
        self._counters[topic] = n + 1
        return n % num_partitions

    def on_new_batch(self, topic: str, previous_partition: int, num_partitions: int) -> None:
        return None


@hookimpl
def odradek_register_partitioners() -> Sequence[type[Partitioner]]:
    return [Murmur2Partitioner, StickyPartitioner, RoundRobinPartitioner]
