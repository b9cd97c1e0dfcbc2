"""The built-in partitioners (odradek.default_partitioners) against the partitioner conformance suite."""

from __future__ import annotations

from odradek.default_partitioners import (
    Murmur2Partitioner,
    RoundRobinPartitioner,
    StickyPartitioner,
    odradek_register_partitioners,
)
from odradek.testing import check_partitioner

TestMurmur2Conformance = check_partitioner(Murmur2Partitioner)
TestStickyConformance = check_partitioner(StickyPartitioner, key_determines_partition=False)
TestRoundRobinConformance = check_partitioner(RoundRobinPartitioner, key_determines_partition=False)


def test_every_registered_partitioner_is_checked() -> None:
    checked = {Murmur2Partitioner, StickyPartitioner, RoundRobinPartitioner}
    assert set(odradek_register_partitioners()) == checked
