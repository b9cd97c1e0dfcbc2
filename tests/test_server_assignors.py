"""The built-in KIP-848 server-side assignors against the server assignor conformance suite."""

from __future__ import annotations

from odradek.default_assignors import odradek_register_server_assignors
from odradek.interfaces import AssignmentMember, AssignmentTopic
from odradek.server_assignors import RangeServerAssignor, UniformServerAssignor
from odradek.testing import check_server_assignor

TestUniformConformance = check_server_assignor(UniformServerAssignor, balance="total", sticky=True)
TestRangeConformance = check_server_assignor(RangeServerAssignor, balance="per-topic")


def test_every_registered_server_assignor_is_checked() -> None:
    assert set(odradek_register_server_assignors()) == {UniformServerAssignor, RangeServerAssignor}


def test_range_co_partitions() -> None:
    """Members subscribed to the same topics get the same partition numbers of each."""
    topics = {"a" * 32: AssignmentTopic("a" * 32, "left", 5), "b" * 32: AssignmentTopic("b" * 32, "right", 5)}
    members = {m: AssignmentMember(m, None, None, frozenset(topics)) for m in ("m1", "m2")}
    result = RangeServerAssignor().assign(members, topics)
    assert result["m1"] == {"a" * 32: frozenset({0, 1, 2}), "b" * 32: frozenset({0, 1, 2})}
    assert result["m2"] == {"a" * 32: frozenset({3, 4}), "b" * 32: frozenset({3, 4})}


def test_uniform_keeps_partitions_when_a_member_joins() -> None:
    """Two members with 3 partitions each: a third joining takes one from each, nothing else moves."""
    tid = "c" * 32
    topics = {tid: AssignmentTopic(tid, "orders", 6)}
    previous = {"m1": {tid: frozenset({0, 2, 4})}, "m2": {tid: frozenset({1, 3, 5})}}
    members = {m: AssignmentMember(m, None, None, frozenset(topics), previous.get(m, {})) for m in ("m1", "m2", "m3")}
    result = UniformServerAssignor().assign(members, topics)
    assert len(result["m3"][tid]) == 2
    assert result["m1"][tid] < previous["m1"][tid] and result["m2"][tid] < previous["m2"][tid]
