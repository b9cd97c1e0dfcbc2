"""The built-in partitioners: Java's murmur2 bit for bit, KIP-480 sticky, round-robin.

Parity with librdkafka's ``murmur2_random`` (through a real broker) is checked in
test_client_integration.py; here kafka-python's port of Java's ``Utils.murmur2`` is the offline
oracle, and the plugin registration is exercised through the hook.
"""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from odradek.default_partitioners import (
    Murmur2Partitioner,
    RoundRobinPartitioner,
    StickyPartitioner,
    murmur2,
    murmur2_partition,
    to_positive,
)
from odradek.manager import Plugins, build_plugin_manager


def test_murmur2_matches_the_java_port_for_random_keys() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        key = rng.randbytes(rng.randint(0, 64))
        assert murmur2(key) == kafka_python_murmur2(key) & 0xFFFFFFFF, key


def test_murmur2_every_tail_length_and_high_bytes() -> None:
    # lengths 0..8 cover every switch case of Java's tail handling; 0xff bytes check sign handling
    for n in range(9):
        for fill in (b"\x00", b"\x7f", b"\x80", b"\xff"):
            key = fill * n
            assert murmur2(key) == kafka_python_murmur2(key) & 0xFFFFFFFF


def test_to_positive_is_not_abs() -> None:
    assert to_positive(0x80000000) == 0  # Java: Utils.toPositive(Integer.MIN_VALUE) == 0
    assert to_positive(0xFFFFFFFF) == 0x7FFFFFFF
    assert murmur2_partition(b"21", 10) == (murmur2(b"21") & 0x7FFFFFFF) % 10


def test_keyed_records_hash_keyless_stick() -> None:
    p = Murmur2Partitioner()
    for key in (b"a", b"user-42", b""):
        assert p.partition("t", key, b"v", 12) == murmur2_partition(key, 12)
    first = p.partition("t", None, b"v", 12)
    assert all(p.partition("t", None, b"v", 12) == first for _ in range(50))


def test_sticky_switches_to_another_partition_on_new_batch() -> None:
    p = StickyPartitioner()
    seen = set()
    current = p.partition("t", b"ignored-key", None, 5)
    for _ in range(200):
        p.on_new_batch("t", current, 5)
        nxt = p.partition("t", None, None, 5)
        assert nxt != current
        seen.add(nxt)
        current = nxt
    assert seen == set(range(5))


def test_sticky_switches_once_when_several_records_race_for_a_new_batch() -> None:
    p = StickyPartitioner()
    current = p.partition("t", None, None, 8)
    p.on_new_batch("t", current, 8)
    moved = p.partition("t", None, None, 8)
    p.on_new_batch("t", current, 8)  # a second record saw the same closed batch: no second move
    assert p.partition("t", None, None, 8) == moved


def test_sticky_with_one_partition_and_topics_are_independent() -> None:
    p = StickyPartitioner()
    assert p.partition("one", None, None, 1) == 0
    p.on_new_batch("one", 0, 1)
    assert p.partition("one", None, None, 1) == 0
    a = p.partition("a", None, None, 1000)
    p.on_new_batch("b", 3, 1000)
    assert p.partition("a", None, None, 1000) == a


def test_roundrobin_cycles_per_topic() -> None:
    p = RoundRobinPartitioner()
    assert [p.partition("t", b"k", None, 3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert p.partition("other", None, None, 3) == 0


@pytest.mark.parametrize("name, cls", [("murmur2", Murmur2Partitioner), ("sticky", StickyPartitioner),
                                       ("roundrobin", RoundRobinPartitioner)])  # fmt: skip
def test_registered_through_the_partitioner_hook(name: str, cls: type) -> None:
    plugins = Plugins(build_plugin_manager(entry_points_enabled=False, extra=["odradek.default_partitioners"]))
    made = plugins.partitioner(name)
    assert isinstance(made, cls)
    assert made is not plugins.partitioner(name)  # one instance per producer
