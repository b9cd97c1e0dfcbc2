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


TID = "d" * 32
#: even partitions have replicas only in rack "east", odd ones only in "west"
SPLIT = {p: frozenset({"east" if p % 2 == 0 else "west"}) for p in range(6)}
EVERYWHERE = {p: frozenset({"east", "west"}) for p in range(6)}


def racked(
    racks: dict[str, str | None],
    partition_racks: dict[int, frozenset[str]],
    previous: dict[str, set[int]] | None = None,
) -> tuple[dict[str, AssignmentMember], dict[str, AssignmentTopic]]:
    topics = {TID: AssignmentTopic(TID, "orders", 6, partition_racks)}
    members = {
        m: AssignmentMember(m, None, rack, frozenset(topics), {TID: frozenset((previous or {}).get(m, ()))})
        for m, rack in racks.items()
    }
    return members, topics


def parts(result: dict[str, dict[str, frozenset[int]]], member: str) -> set[int]:
    return set(result[member].get(TID, frozenset()))


def test_uniform_aligns_partitions_with_member_racks() -> None:
    result = UniformServerAssignor().assign(*racked({"m1": "west", "m2": "east"}, SPLIT))
    assert parts(result, "m1") == {1, 3, 5} and parts(result, "m2") == {0, 2, 4}
    # a third member in the east: balance first (two each), locality where it can be had
    result = UniformServerAssignor().assign(*racked({"m1": "west", "m2": "east", "m3": "east"}, SPLIT))
    assert sorted(len(parts(result, m)) for m in ("m1", "m2", "m3")) == [2, 2, 2]
    rack = {"m1": "west", "m2": "east", "m3": "east"}
    local = sum(1 for m in rack for p in parts(result, m) if rack[m] in SPLIT[p])
    assert local == 5  # one west partition must go east for the balance
    # stickiness before racks: kept partitions stay where they are
    previous = {"m1": {0, 2, 4}, "m2": {1, 3, 5}}
    result = UniformServerAssignor().assign(*racked({"m1": "west", "m2": "east"}, SPLIT, previous))
    assert parts(result, "m1") == {0, 2, 4}


def test_uniform_balance_wins_over_racks() -> None:
    only_east = {p: frozenset({"east"}) for p in range(6)}
    result = UniformServerAssignor().assign(*racked({"m1": "west", "m2": "east"}, only_east))
    assert len(parts(result, "m1")) == len(parts(result, "m2")) == 3


def test_range_aligns_partitions_with_member_racks() -> None:
    result = RangeServerAssignor().assign(*racked({"m1": "west", "m2": "east"}, SPLIT))
    assert parts(result, "m1") == {1, 3, 5} and parts(result, "m2") == {0, 2, 4}
    # replicas in every rack, or no racks at all: the plain consecutive ranges
    for partition_racks in (EVERYWHERE, {}):
        result = RangeServerAssignor().assign(*racked({"m1": "west", "m2": "east"}, partition_racks))
        assert parts(result, "m1") == {0, 1, 2} and parts(result, "m2") == {3, 4, 5}
    # a member without a rack takes what is left in order, counts unchanged
    result = RangeServerAssignor().assign(*racked({"m1": None, "m2": "east", "m3": "west"}, SPLIT))
    assert parts(result, "m1") == {0, 1} and parts(result, "m2") == {2, 4} and parts(result, "m3") == {3, 5}
