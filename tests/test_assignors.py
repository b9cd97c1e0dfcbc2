"""The built-in assignors: examples from the Java client's own tests (same answers), then
validity, balance and stickiness properties over random groups (hypothesis)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.assignors import CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor, StickyAssignor
from odradek.assignors.sticky_algorithm import StickyMember, sticky_assign
from odradek.consumer_protocol import encode_sticky_user_data
from odradek.interfaces import Assignor, GroupMember, TopicPartition
from odradek.manager import Plugins, build_plugin_manager


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def member(member_id: str, *topics: str, instance: str | None = None, **kw: object) -> GroupMember:
    return GroupMember(member_id, instance, list(topics), **kw)  # type: ignore[arg-type]


def parts(assignment: dict, member_id: str) -> list[TopicPartition]:  # type: ignore[type-arg]
    return list(assignment[member_id].partitions)


def test_registered_through_the_assignor_hook() -> None:
    plugins = Plugins(build_plugin_manager(entry_points_enabled=False, extra=["odradek.default_assignors"]))
    assert plugins.assignor_names() == ["cooperative-sticky", "range", "roundrobin", "sticky"]
    for name in plugins.assignor_names():
        assignor = plugins.assignor(name)
        assert isinstance(assignor, Assignor) and assignor.name == name
    assert plugins.assignor("cooperative-sticky").rebalance_protocol == "cooperative"
    assert plugins.assignor("sticky").rebalance_protocol == "eager"


# -- Java parity: RangeAssignorTest / RoundRobinAssignorTest ---------------------------------


def test_range_two_consumers_one_topic_three_partitions() -> None:
    result = RangeAssignor().assign({"topic": 3}, [member("consumer2", "topic"), member("consumer1", "topic")])
    assert parts(result, "consumer1") == [tp("topic", 0), tp("topic", 1)]
    assert parts(result, "consumer2") == [tp("topic", 2)]


def test_range_multiple_consumers_mixed_topics() -> None:
    members = [member("consumer1", "topic1"), member("consumer2", "topic1", "topic2"), member("consumer3", "topic1")]
    result = RangeAssignor().assign({"topic1": 3, "topic2": 2}, members)
    assert parts(result, "consumer1") == [tp("topic1", 0)]
    assert sorted(parts(result, "consumer2")) == [tp("topic1", 1), tp("topic2", 0), tp("topic2", 1)]
    assert parts(result, "consumer3") == [tp("topic1", 2)]


def test_range_orders_static_members_by_instance_id() -> None:
    # Java's MemberInfo: static members sort by group.instance.id, before dynamic ones
    members = [
        member("a-member", "t", instance="zzz"),
        member("b-member", "t", instance="aaa"),
        member("0-dynamic", "t"),
    ]
    result = RangeAssignor().assign({"t": 3}, members)
    assert parts(result, "b-member") == [tp("t", 0)]
    assert parts(result, "a-member") == [tp("t", 1)]
    assert parts(result, "0-dynamic") == [tp("t", 2)]


def test_range_skips_unknown_topics_and_non_subscribers() -> None:
    result = RangeAssignor().assign({"t": 2, "other": 4}, [member("c1", "t", "missing")])
    assert parts(result, "c1") == [tp("t", 0), tp("t", 1)]


def test_roundrobin_two_consumers_two_topics_six_partitions() -> None:
    result = RoundRobinAssignor().assign(
        {"topic1": 3, "topic2": 3}, [member("consumer1", "topic1", "topic2"), member("consumer2", "topic1", "topic2")]
    )
    assert parts(result, "consumer1") == [tp("topic1", 0), tp("topic1", 2), tp("topic2", 1)]
    assert parts(result, "consumer2") == [tp("topic1", 1), tp("topic2", 0), tp("topic2", 2)]


def test_roundrobin_multiple_consumers_mixed_topics() -> None:
    members = [member("consumer1", "topic1"), member("consumer2", "topic1", "topic2"), member("consumer3", "topic1")]
    result = RoundRobinAssignor().assign({"topic1": 3, "topic2": 2}, members)
    assert parts(result, "consumer1") == [tp("topic1", 0)]
    assert parts(result, "consumer2") == [tp("topic1", 1), tp("topic2", 0), tp("topic2", 1)]
    assert parts(result, "consumer3") == [tp("topic1", 2)]


# -- Java parity: AbstractStickyAssignorTest ----------------------------------------------------


def sm(
    member_id: str, topics: Sequence[str], owned: Sequence[TopicPartition] = (), generation: int | None = 1
) -> StickyMember:
    return StickyMember(
        member_id, frozenset(topics), tuple(owned), generation, generation if generation is not None else -1
    )


def test_sticky_multiple_consumers_mixed_topic_subscriptions() -> None:
    members = [sm("consumer1", ["topic1"], generation=None), sm("consumer2", ["topic1", "topic2"], generation=None),
               sm("consumer3", ["topic1"], generation=None)]  # fmt: skip
    assignment, transferring = sticky_assign({"topic1": 3, "topic2": 2}, members)
    assert assignment["consumer1"] == [tp("topic1", 0), tp("topic1", 2)]
    assert assignment["consumer2"] == [tp("topic2", 0), tp("topic2", 1)]
    assert assignment["consumer3"] == [tp("topic1", 1)]
    assert transferring is None


def test_sticky_two_consumers_two_topics_six_partitions() -> None:
    members = [
        sm("consumer1", ["topic1", "topic2"], generation=None),
        sm("consumer2", ["topic1", "topic2"], generation=None),
    ]
    assignment, transferring = sticky_assign({"topic1": 3, "topic2": 3}, members)
    assert assignment["consumer1"] == [tp("topic1", 0), tp("topic1", 2), tp("topic2", 1)]
    assert assignment["consumer2"] == [tp("topic1", 1), tp("topic2", 0), tp("topic2", 2)]
    assert transferring == {}


def test_sticky_consumer_owning_min_quota_expected_max_quota() -> None:
    both = ["topic1", "topic2"]
    members = [
        sm("consumer1", both, [tp("topic1", 0), tp("topic2", 1)]),
        sm("consumer2", both, [tp("topic1", 1), tp("topic2", 2)]),
    ]
    assignment, transferring = sticky_assign({"topic1": 2, "topic2": 3}, members)
    assert assignment["consumer1"] == [tp("topic1", 0), tp("topic2", 1), tp("topic2", 0)]
    assert assignment["consumer2"] == [tp("topic1", 1), tp("topic2", 2)]
    assert transferring == {}


def test_sticky_max_quota_consumers_more_than_expected() -> None:
    both = ["topic1", "topic2"]
    members = [
        sm("consumer1", both, [tp("topic1", 0), tp("topic2", 0)]),
        sm("consumer2", both, [tp("topic1", 1), tp("topic2", 1)]),
        sm("consumer3", both, []),
    ]
    assignment, transferring = sticky_assign({"topic1": 2, "topic2": 2}, members)
    assert transferring == {tp("topic2", 0): "consumer3"}
    assert assignment["consumer1"] == [tp("topic1", 0)]
    assert assignment["consumer2"] == [tp("topic1", 1), tp("topic2", 1)]
    assert assignment["consumer3"] == [tp("topic2", 0)]


def test_sticky_all_consumers_under_min_quota() -> None:
    both = ["topic1", "topic2"]
    members = [
        sm("consumer1", both, [tp("topic1", 0)]),
        sm("consumer2", both, [tp("topic1", 1)]),
        sm("consumer3", both),
    ]
    assignment, transferring = sticky_assign({"topic1": 2, "topic2": 3}, members)
    assert transferring == {}
    assert assignment["consumer1"] == [tp("topic1", 0), tp("topic2", 1)]
    assert assignment["consumer2"] == [tp("topic1", 1), tp("topic2", 2)]
    assert assignment["consumer3"] == [tp("topic2", 0)]


def test_sticky_add_consumer_moves_one_partition() -> None:
    first, _ = sticky_assign({"topic": 3}, [sm("consumer1", ["topic"], generation=None)])
    assert first["consumer1"] == [tp("topic", 0), tp("topic", 1), tp("topic", 2)]
    second, transferring = sticky_assign(
        {"topic": 3}, [sm("consumer1", ["topic"], first["consumer1"]), sm("consumer2", ["topic"], [])]
    )
    assert transferring == {tp("topic", 2): "consumer2"}
    assert second["consumer1"] == [tp("topic", 0), tp("topic", 1)]
    assert second["consumer2"] == [tp("topic", 2)]


def test_sticky_partition_claimed_twice_in_one_generation() -> None:
    members = [
        sm("consumer1", ["topic"], [tp("topic", 0), tp("topic", 1)]),
        sm("consumer2", ["topic"], [tp("topic", 0), tp("topic", 2)]),
        sm("consumer3", ["topic"], []),
    ]
    assignment, transferring = sticky_assign({"topic": 3}, members)
    assert transferring == {tp("topic", 0): "consumer3"}
    assert assignment == {"consumer1": [tp("topic", 1)], "consumer2": [tp("topic", 2)], "consumer3": [tp("topic", 0)]}


def test_sticky_stale_generation_loses_claims() -> None:
    owned = [tp("topic", 0), tp("topic", 2), tp("topic2", 1)]
    members = [sm("consumer1", ["topic", "topic2"], owned, 10), sm("consumer2", ["topic", "topic2"], owned, 9)]
    assignment, transferring = sticky_assign({"topic": 3, "topic2": 3}, members)
    assert set(assignment["consumer1"]) == set(owned)
    assert set(assignment["consumer2"]) == {tp("topic", 1), tp("topic2", 0), tp("topic2", 2)}
    assert transferring == {}


def test_sticky_no_reassignment_of_current_members() -> None:
    topics = ["topic", "topic2", "topic3", "topic1"]
    members = [
        sm("consumer1", topics, [], None),
        sm("consumer2", topics, [tp("topic", 0), tp("topic2", 0), tp("topic1", 0)], 9),
        sm("consumer3", topics, [tp("topic3", 2), tp("topic2", 2), tp("topic1", 1)], 8),
        sm("consumer4", topics, [tp("topic3", 1), tp("topic", 1), tp("topic", 2)], 7),
    ]
    assignment, transferring = sticky_assign(dict.fromkeys(topics, 3), members)
    assert set(assignment["consumer1"]) == {tp("topic1", 2), tp("topic2", 1), tp("topic3", 0)}
    assert transferring == {}


def test_eager_sticky_reads_previous_assignment_from_user_data() -> None:
    previous = encode_sticky_user_data([tp("t", 0), tp("t", 1), tp("t", 2)], 4)
    members = [member("c1", "t", user_data=previous, generation=4), member("c2", "t")]
    result = StickyAssignor().assign({"t": 3}, members)
    assert set(parts(result, "c1")) <= {tp("t", 0), tp("t", 1), tp("t", 2)} and len(parts(result, "c1")) == 2
    assert len(parts(result, "c2")) == 1
    assignor = StickyAssignor()
    assert assignor.subscription_user_data(["t"], [], -1) is None
    from odradek.interfaces import MemberAssignment

    assignor.on_assignment(MemberAssignment([tp("t", 1)]), 7)
    assert assignor.subscription_user_data(["t"], [], -1) == encode_sticky_user_data([tp("t", 1)], 7)


def test_cooperative_withholds_partitions_changing_owner() -> None:
    coop = CooperativeStickyAssignor()
    owned_all = [tp("t", p) for p in range(6)]
    first = coop.assign(
        {"t": 6}, [member("c1", "t", owned_partitions=owned_all, generation=3), member("c2", "t", generation=3)]
    )
    assert parts(first, "c1") == [tp("t", 0), tp("t", 1), tp("t", 2)]
    assert parts(first, "c2") == []  # c1 must revoke 3..5 before c2 may have them
    second = coop.assign(
        {"t": 6},
        [member("c1", "t", owned_partitions=parts(first, "c1"), generation=4), member("c2", "t", generation=4)],
    )
    assert parts(second, "c2") == [tp("t", 3), tp("t", 4), tp("t", 5)]


# -- properties ---------------------------------------------------------------------------------

ASSIGNORS = [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]


@st.composite
def groups(draw: st.DrawFn, equal_subscriptions: bool | None = None) -> tuple[dict[str, int], list[GroupMember]]:
    topics = draw(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=4, unique=True))
    counts = {t: draw(st.integers(1, 12)) for t in topics}
    n = draw(st.integers(1, 7))
    equal = draw(st.booleans()) if equal_subscriptions is None else equal_subscriptions
    members = []
    for i in range(n):
        subscribed = topics if equal else draw(st.lists(st.sampled_from(topics), min_size=1, unique=True))
        members.append(GroupMember(f"member-{i:02d}", None, subscribed))
    return counts, members


def check_valid(counts: dict[str, int], members: list[GroupMember], result: dict) -> None:  # type: ignore[type-arg]
    assert set(result) == {m.member_id for m in members}
    seen: list[TopicPartition] = []
    by_id = {m.member_id: m for m in members}
    for member_id, assignment in result.items():
        for p in assignment.partitions:
            assert p.topic in by_id[member_id].topics
            seen.append(p)
    assert len(seen) == len(set(seen)), "a partition has two owners"
    expected = {tp(t, p) for t, n in counts.items() if any(t in m.topics for m in members) for p in range(n)}
    assert set(seen) == expected, "every subscribed partition has an owner"


@pytest.mark.parametrize("assignor_cls", ASSIGNORS, ids=lambda c: c.name)
@settings(max_examples=60, deadline=None)
@given(group=groups())
def test_every_partition_exactly_one_subscribed_owner(assignor_cls: type, group: tuple) -> None:  # type: ignore[type-arg]
    counts, members = group
    check_valid(counts, members, assignor_cls().assign(counts, members))


@pytest.mark.parametrize(
    "assignor_cls", [RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor], ids=lambda c: c.name
)
@settings(max_examples=60, deadline=None)
@given(group=groups(equal_subscriptions=True))
def test_equal_subscriptions_are_balanced(assignor_cls: type, group: tuple) -> None:  # type: ignore[type-arg]
    counts, members = group
    sizes = [len(a.partitions) for a in assignor_cls().assign(counts, members).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=60, deadline=None)
@given(group=groups(), data=st.data())
def test_general_sticky_leaves_no_obvious_improvement(group: tuple, data: st.DataObject) -> None:  # type: ignore[type-arg]
    """Java's isBalanced: no partition could move to a subscriber owning two fewer partitions."""
    counts, members = group
    result = StickyAssignor().assign(counts, members)
    size = {m: len(a.partitions) for m, a in result.items()}
    owner = {p: m for m, a in result.items() for p in a.partitions}
    for m in members:
        for t in m.topics:
            for p in range(counts[t]):
                assert size[m.member_id] + 1 >= size[owner[tp(t, p)]]


@settings(max_examples=60, deadline=None)
@given(group=groups(equal_subscriptions=True), joiners=st.integers(0, 3), leavers=st.integers(0, 3))
def test_sticky_keeps_what_it_can_after_membership_change(
    group: tuple,
    joiners: int,
    leavers: int,  # type: ignore[type-arg]
) -> None:
    counts, members = group
    coop = CooperativeStickyAssignor()
    first = coop.assign(counts, [GroupMember(m.member_id, None, m.topics, generation=1) for m in members])
    stayed = members[leavers:] if leavers < len(members) else members[:1]
    new = [GroupMember(f"new-{i}", None, members[0].topics, generation=-1) for i in range(joiners)]
    round2 = [
        GroupMember(m.member_id, None, m.topics, owned_partitions=first[m.member_id].partitions, generation=2)
        for m in stayed
    ] + new
    second = coop.assign(counts, round2)
    total = sum(counts.values())
    quota = total // len(round2)
    owned_by = {p: m.member_id for m in round2 for p in m.owned_partitions}
    for m in stayed:
        kept = set(second[m.member_id].partitions) & set(first[m.member_id].partitions)
        assert len(kept) >= min(len(first[m.member_id].partitions), quota)
        for p in second[m.member_id].partitions:  # cooperative: never take a partition still owned elsewhere
            assert owned_by.get(p, m.member_id) == m.member_id
    for m in new:
        assert all(p not in owned_by for p in second[m.member_id].partitions)
    # once owners revoked, the next round completes a balanced assignment
    round3 = [
        GroupMember(m.member_id, None, m.topics, owned_partitions=second[m.member_id].partitions, generation=3)
        for m in round2
    ]
    third = coop.assign(counts, round3)
    check_valid(counts, round3, third)
    sizes = [len(a.partitions) for a in third.values()]
    assert max(sizes) - min(sizes) <= 1
