"""Conformance suite for the assignor role (``Assignor`` in odradek.interfaces).

An assignor plugin -- the built-in range, roundrobin, sticky and cooperative-sticky or a third
party's -- runs it against itself with one line in a test module::

    TestMyAssignor = check_assignor(MyAssignor)   # the class the hook registers

or by subclassing :class:`AssignorConformance` and setting ``assignor``.

The suite plays consumer groups the way odradek's consumer does: one assignor instance per
member, each member's subscription (topics, ``subscription_user_data``, owned partitions and
generation for the cooperative protocol) encoded and decoded with Kafka's consumer protocol, one
member's instance assigning as group leader, every member's assignment encoded, decoded and handed
to its own instance's ``on_assignment``. Then members join and leave and the group rebalances
again. After every ``assign`` it checks:

- the registered class has a ``name`` (the JoinGroup protocol name) and a ``rebalance_protocol``
  of ``eager`` or ``cooperative``, and is made with no arguments;
- the result has exactly one entry per member (an empty one when a member gets nothing) and
  ``MemberAssignment`` values whose user data is bytes or None;
- every partition given exists, goes to a member subscribed to its topic, and is given once;
- topics that do not exist (absent from ``partitions_per_topic``, or with 0 partitions) are
  ignored; a group where nobody subscribes to an existing topic assigns nothing of it;
- eager: every partition of every subscribed topic is assigned in every rebalance;
- cooperative (KIP-429): no partition goes to a member while another member still owns it
  (its owner must revoke it first); everything is assigned in the first rebalance, and after
  any rebalance the next one (the revoking members rejoin) assigns everything;
- the same input gives the same result (fresh instances, same subscriptions);
- user data survives the consumer protocol: what ``subscription_user_data`` returns is bytes or
  None, and the leader decodes the members' user data without failing.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..consumer_protocol import (
    DEFAULT_GENERATION,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from ..interfaces import Assignor, GroupMember, MemberAssignment, TopicPartition
from ._suite import random_groups, registered_class, suite_for

__all__ = ["AssignorConformance", "GroupSimulation", "check_assignor"]

PROTOCOLS = ("eager", "cooperative")


@dataclass
class SimulatedMember:
    """One consumer: its own assignor instance, what it subscribes to and what it owns."""

    member_id: str
    assignor: Assignor
    topics: tuple[str, ...]
    group_instance_id: str | None = None
    owned: list[TopicPartition] = field(default_factory=list)
    generation: int = DEFAULT_GENERATION


class GroupSimulation:
    """A consumer group driven through rebalances with one assignor class (see the module docstring)."""

    def __init__(self, assignor_class: type[Any]) -> None:
        self.assignor_class = assignor_class
        self.members: dict[str, SimulatedMember] = {}
        self.generation = 0
        self.results: list[dict[str, MemberAssignment]] = []

    @property
    def cooperative(self) -> bool:
        return str(self.assignor_class.rebalance_protocol) == "cooperative"

    def join(self, member_id: str, topics: Sequence[str], group_instance_id: str | None = None) -> None:
        assignor: Assignor = self.assignor_class()
        self.members[member_id] = SimulatedMember(member_id, assignor, tuple(topics), group_instance_id)

    def leave(self, member_id: str) -> None:
        del self.members[member_id]

    def subscriptions(self) -> list[GroupMember]:
        """What the leader decodes from the JoinGroup responses' member metadata."""
        out = []
        for m in self.members.values():
            owned = list(m.owned) if self.cooperative else []
            user_data = m.assignor.subscription_user_data(m.topics, owned, m.generation)
            assert user_data is None or isinstance(user_data, bytes), (
                f"subscription_user_data returned {type(user_data).__name__}, not bytes or None"
            )
            generation = m.generation if self.cooperative else DEFAULT_GENERATION
            sub = decode_subscription(encode_subscription(Subscription(m.topics, user_data, tuple(owned), generation)))
            assert sub.user_data == user_data, "user data did not survive the consumer protocol"
            out.append(
                GroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    topics=tuple(sub.topics),
                    user_data=sub.user_data,
                    owned_partitions=tuple(sub.owned_partitions),
                    generation=sub.generation_id,
                    rack_id=sub.rack_id,
                )
            )
        return out

    def rebalance(self, partitions_per_topic: Mapping[str, int]) -> dict[str, MemberAssignment]:
        """One rebalance: subscriptions, the leader's assign (checked), every member's on_assignment."""
        members = self.subscriptions()
        leader = next(iter(self.members.values())).assignor
        result = leader.assign(dict(partitions_per_topic), members)
        check_assignment(result, partitions_per_topic, members, cooperative=self.cooperative)
        self.generation += 1
        for m in self.members.values():
            given = result[m.member_id]
            wire = decode_assignment(encode_assignment(Assignment(tuple(given.partitions), given.user_data)))
            m.assignor.on_assignment(MemberAssignment(tuple(wire.partitions), wire.user_data), self.generation)
            m.owned = list(wire.partitions)
            m.generation = self.generation
        self.results.append(result)
        return result


def _describe(members: Sequence[GroupMember]) -> str:
    return ", ".join(f"{m.member_id}:{sorted(m.topics)}" for m in members)


def check_assignment(
    result: Any,
    partitions_per_topic: Mapping[str, int],
    members: Sequence[GroupMember],
    *,
    cooperative: bool,
) -> None:
    """Every rule an ``assign`` result must follow (see the module docstring)."""
    group = _describe(members)
    assert isinstance(result, Mapping), f"assign returned {type(result).__name__}, not a mapping"
    assert set(result) == {m.member_id for m in members}, (
        f"assignment keys {sorted(result)} are not the members {sorted(m.member_id for m in members)}"
    )
    owner: dict[TopicPartition, str] = {}
    by_id = {m.member_id: m for m in members}
    for member_id, given in result.items():
        assert isinstance(given, MemberAssignment), f"{member_id} got {given!r}, not a MemberAssignment"
        assert given.user_data is None or isinstance(given.user_data, bytes), f"{member_id}'s user data"
        for tp in given.partitions:
            topic, partition = tp
            assert 0 <= partition < partitions_per_topic.get(topic, 0), f"{tp} does not exist (group {group})"
            assert topic in by_id[member_id].topics, f"{tp} went to {member_id}, not subscribed to {topic}"
            assert tp not in owner, f"{tp} given to both {owner[tp]} and {member_id} (group {group})"
            owner[tp] = member_id
    subscribed = {t for m in members for t in m.topics}
    every = {TopicPartition(t, p) for t, n in partitions_per_topic.items() if t in subscribed for p in range(n)}
    missing = sorted(every - set(owner))
    if not cooperative:
        assert not missing, f"eager assignment left {missing} unassigned (group {group})"
        return
    owned_by = {tp: m.member_id for m in members for tp in m.owned_partitions}
    for tp, member_id in owner.items():
        previous = owned_by.get(tp)
        assert previous in (None, member_id), (
            f"{tp} moved from {previous} to {member_id} in one cooperative rebalance: it must be revoked first"
        )
    if not owned_by:
        assert not missing, f"first cooperative assignment left {missing} unassigned (group {group})"


def _result_key(result: Mapping[str, MemberAssignment]) -> dict[str, tuple[list[TopicPartition], bytes | None]]:
    return {m: (sorted(a.partitions), a.user_data) for m, a in result.items()}


class AssignorConformance:
    """Base class of an assignor's conformance tests; see the module docstring."""

    #: The assignor class the plugin registers (``odradek_register_assignors``).
    assignor: ClassVar[Any] = None

    def assignor_class(self) -> type[Any]:
        return registered_class(self, "assignor")

    def group(self) -> GroupSimulation:
        return GroupSimulation(self.assignor_class())

    def settle(self, group: GroupSimulation, partitions: Mapping[str, int]) -> dict[str, MemberAssignment]:
        """A rebalance; for a cooperative assignor also the follow-up one that must assign all."""
        result = group.rebalance(partitions)
        if group.cooperative:
            result = group.rebalance(partitions)
            members = group.subscriptions()
            assigned = {tp for a in result.values() for tp in a.partitions}
            subscribed = {t for m in members for t in m.topics}
            every = {TopicPartition(t, p) for t, n in partitions.items() if t in subscribed for p in range(n)}
            assert assigned == every, f"the follow-up cooperative rebalance left {sorted(every - assigned)} unassigned"
        return result

    def test_name_and_protocol(self) -> None:
        cls = self.assignor_class()
        name = getattr(cls, "name", None)
        assert isinstance(name, str) and name.strip() == name != "", f"{cls.__name__}.name is {name!r}"
        assert getattr(cls, "rebalance_protocol", None) in PROTOCOLS, f"rebalance_protocol is not one of {PROTOCOLS}"
        instance = cls()
        assert isinstance(instance, Assignor), f"{instance!r} lacks a method of the Assignor protocol"

    def test_one_member_gets_everything(self) -> None:
        group = self.group()
        group.join("m1", ["orders"])
        result = self.settle(group, {"orders": 5})
        assert sorted(result["m1"].partitions) == [TopicPartition("orders", p) for p in range(5)]

    def test_more_members_than_partitions(self) -> None:
        group = self.group()
        for i in range(5):
            group.join(f"m{i}", ["orders"])
        result = self.settle(group, {"orders": 2})
        assert sum(len(a.partitions) for a in result.values()) == 2

    def test_members_with_different_subscriptions(self) -> None:
        group = self.group()
        group.join("a", ["orders", "visits"])
        group.join("b", ["visits"])
        group.join("c", ["payments"], group_instance_id="static-c")
        self.settle(group, {"orders": 3, "visits": 4, "payments": 2, "unsubscribed": 6})

    def test_unknown_and_empty_topics_are_ignored(self) -> None:
        group = self.group()
        group.join("a", ["orders", "no-such-topic"])
        group.join("b", ["no-such-topic", "empty"])
        result = self.settle(group, {"orders": 3, "empty": 0})
        assert not result["b"].partitions, f"b subscribes to no existing topic but got {result['b'].partitions}"

    def test_no_partitions_at_all(self) -> None:
        group = self.group()
        group.join("a", ["nothing"])
        group.join("b", ["nothing"])
        result = group.rebalance({})
        assert all(not a.partitions for a in result.values())

    def test_membership_changes(self) -> None:
        """Members join and leave between rebalances, with owned partitions and user data from
        the rounds before (what sticky and cooperative assignors build on)."""
        rng = random.Random(42)
        partitions = {"orders": 12, "visits": 7, "payments": 3}
        topics = list(partitions)
        group = self.group()
        group.join("m0", topics)
        next_id = 1
        for _ in range(25):
            if len(group.members) > 1 and rng.random() < 0.4:
                group.leave(rng.choice(sorted(group.members)))
            else:
                group.join(f"m{next_id}", rng.sample(topics, rng.randint(1, 3)))
                next_id += 1
            self.settle(group, partitions)

    def test_random_groups(self) -> None:
        for partitions, members in random_groups(20240917):
            group = self.group()
            for member_id, topics, static in members:
                group.join(member_id, topics, static)
            self.settle(group, partitions)

    def test_same_input_same_result(self) -> None:
        partitions = {"orders": 10, "visits": 5}

        def run() -> list[dict[str, tuple[list[TopicPartition], bytes | None]]]:
            group = self.group()
            for i, topics in enumerate((["orders"], ["orders", "visits"], ["visits"], ["orders", "visits"])):
                group.join(f"m{i}", topics)
            out = [_result_key(group.rebalance(partitions))]
            group.leave("m1")
            group.join("m9", ["orders"])
            out.append(_result_key(group.rebalance(partitions)))
            return out

        assert run() == run()

    def test_user_data_round_trip(self) -> None:
        """The leader reads user data its peers' instances wrote after their last assignment."""
        group = self.group()
        group.join("a", ["orders"])
        group.join("b", ["orders"])
        first = group.rebalance({"orders": 6})
        for m in group.members.values():
            data = m.assignor.subscription_user_data(m.topics, list(m.owned), m.generation)
            assert data is None or isinstance(data, bytes)
        fresh = self.assignor_class()()
        second = fresh.assign({"orders": 6}, group.subscriptions())
        check_assignment(second, {"orders": 6}, group.subscriptions(), cooperative=group.cooperative)
        assert set(second) == set(first)


def check_assignor(assignor: type[Any], **attributes: Any) -> type[AssignorConformance]:
    """An ``AssignorConformance`` subclass for ``assignor``; assign it to a ``Test*`` name::

    TestMyAssignor = check_assignor(MyAssignor)
    """
    return suite_for(AssignorConformance, "AssignorConformanceSuite", {"assignor": assignor, **attributes})
