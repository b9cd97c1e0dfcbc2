"""Conformance suite for the server assignor role (``ServerAssignor`` in odradek.interfaces).

A server-side assignor plugin -- the built-in ``uniform`` and ``range`` or a third party's --
runs it against itself with one line in a test module::

    TestMyAssignor = check_server_assignor(MyAssignor)                 # correctness only
    TestUniform = check_server_assignor(UniformServerAssignor, balance="total", sticky=True)

The suite plays KIP-848 groups the way odradek's group coordinator does: one instance for the
group, each round's members with their subscriptions (topic ids) and the previous round's target
assignment as their ``assigned``, members joining and leaving between rounds. After every
``assign`` it checks:

- the class has a ``name``, is made with no arguments, and ``assign`` returns one entry per
  member, each a mapping of topic id to a set of partitions (ints);
- every partition of every topic some member subscribes to is assigned exactly once, to a
  member subscribed to its topic; topics absent from ``topics`` or with no partitions are not;
- the same input gives the same result (a fresh instance, members given in another order);
- with ``balance="total"``: when all members subscribe to the same topics, the members' partition
  counts differ by at most one; with ``balance="per-topic"``: each topic's partitions are spread
  over its subscribers with counts differing by at most one;
- with ``sticky=True`` (same subscriptions everywhere): after a membership change, a member that
  stays keeps at least as many of its previous partitions as the new quota (``T // N``) allows
  (all of them when members only left).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar

from ..interfaces import AssignmentMember, AssignmentTopic
from ._suite import random_groups, registered_class, suite_for

__all__ = ["ServerAssignorConformance", "ServerGroupSimulation", "check_server_assignor"]

Assignment = dict[str, dict[str, frozenset[int]]]


def topic_id(name: str) -> str:
    """A stable 32-hex-digit id for a topic name (what the coordinator passes is a topic id)."""
    return name.encode().hex().ljust(32, "0")[:32]


class ServerGroupSimulation:
    """A KIP-848 group driven through target-assignment rounds with one assignor instance."""

    def __init__(self, assignor: Any) -> None:
        self.assignor = assignor
        #: member id -> (instance id, subscribed topic names)
        self.members: dict[str, tuple[str | None, frozenset[str]]] = {}
        self.target: Assignment = {}

    def join(self, member_id: str, topics: list[str], instance_id: str | None = None) -> None:
        self.members[member_id] = (instance_id, frozenset(topics))

    def leave(self, member_id: str) -> None:
        del self.members[member_id]
        self.target.pop(member_id, None)

    def inputs(self, partitions: Mapping[str, int]) -> tuple[dict[str, AssignmentMember], dict[str, AssignmentTopic]]:
        topics = {topic_id(n): AssignmentTopic(topic_id(n), n, count) for n, count in partitions.items()}
        members = {
            member_id: AssignmentMember(
                member_id,
                instance_id,
                None,
                frozenset(topic_id(t) for t in subscribed if topic_id(t) in topics),
                self.target.get(member_id, {}),
            )
            for member_id, (instance_id, subscribed) in self.members.items()
        }
        return members, topics

    def rebalance(self, partitions: Mapping[str, int]) -> Assignment:
        members, topics = self.inputs(partitions)
        result: Assignment = self.assignor.assign(members, topics)
        check_target(result, members, topics)
        self.target = {m: dict(by_topic) for m, by_topic in result.items()}
        return result


def check_target(result: Any, members: Mapping[str, AssignmentMember], topics: Mapping[str, AssignmentTopic]) -> None:
    """Every rule an ``assign`` result must follow (see the module docstring)."""
    assert isinstance(result, Mapping), f"assign returned {type(result).__name__}, not a mapping"
    assert set(result) == set(members), f"assignment keys {sorted(result)} are not the members {sorted(members)}"
    owner: dict[tuple[str, int], str] = {}
    for member_id, by_topic in result.items():
        assert isinstance(by_topic, Mapping), f"{member_id}'s assignment is {type(by_topic).__name__}, not a mapping"
        for tid, parts in by_topic.items():
            assert tid in topics, f"{member_id} was given topic id {tid}, which is not a subscribed existing topic"
            assert tid in members[member_id].subscribed_topic_ids, (
                f"{member_id} was given {topics[tid].name}, which it does not subscribe to"
            )
            for p in parts:
                assert isinstance(p, int), f"partition {p!r} of {topics[tid].name} is not an int"
                assert 0 <= p < topics[tid].num_partitions, f"{topics[tid].name}-{p} does not exist"
                assert (tid, p) not in owner, f"{topics[tid].name}-{p} given to {owner[(tid, p)]} and {member_id}"
                owner[(tid, p)] = member_id
    for tid, topic in topics.items():
        if any(tid in m.subscribed_topic_ids for m in members.values()):
            missing = [p for p in range(topic.num_partitions) if (tid, p) not in owner]
            assert not missing, f"partitions {missing} of {topic.name} were not assigned"


def _counts(result: Assignment) -> dict[str, int]:
    return {m: sum(len(p) for p in by_topic.values()) for m, by_topic in result.items()}


class ServerAssignorConformance:
    """Subclass (or use :func:`check_server_assignor`) and set ``assignor`` to the class."""

    assignor: ClassVar[type[Any] | None] = None
    #: "total" (counts of members differ by <= 1 with equal subscriptions), "per-topic", or None
    balance: ClassVar[str | None] = None
    #: whether staying members keep their partitions across membership changes
    sticky: ClassVar[bool] = False

    def make(self) -> Any:
        cls = registered_class(self, "assignor")
        return cls()

    def group(self) -> ServerGroupSimulation:
        return ServerGroupSimulation(self.make())

    def check_balance(self, result: Assignment, group: ServerGroupSimulation, partitions: Mapping[str, int]) -> None:
        if self.balance == "total":
            counts = _counts(result)
            assert max(counts.values()) - min(counts.values()) <= 1, f"unbalanced: {counts}"
        elif self.balance == "per-topic":
            for name in partitions:
                tid = topic_id(name)
                spread = [len(result[m].get(tid, ())) for m, (_, topics) in group.members.items() if name in topics]
                if spread:
                    assert max(spread) - min(spread) <= 1, f"{name} unbalanced: {spread}"

    def test_named_and_made_without_arguments(self) -> None:
        instance = self.make()
        assert isinstance(getattr(instance, "name", None), str) and instance.name, "a server assignor needs a name"
        assert callable(getattr(instance, "assign", None)), "a server assignor needs assign()"

    def test_one_member(self) -> None:
        group = self.group()
        group.join("a", ["orders", "visits"])
        result = group.rebalance({"orders": 4, "visits": 3})
        assert _counts(result) == {"a": 7}

    def test_more_members_than_partitions(self) -> None:
        group = self.group()
        for i in range(5):
            group.join(f"m{i}", ["orders"])
        result = group.rebalance({"orders": 3})
        assert sorted(_counts(result).values()) == [0, 0, 1, 1, 1]

    def test_unknown_and_empty_topics_are_ignored(self) -> None:
        group = self.group()
        group.join("a", ["orders", "no-such-topic"])
        group.join("b", ["no-such-topic", "empty"])
        result = group.rebalance({"orders": 3, "empty": 0})
        assert not any(result["b"].values()), f"b subscribes to no existing topic but got {result['b']}"

    def test_no_members(self) -> None:
        assert self.group().rebalance({"orders": 3}) == {}

    def test_balance_with_equal_subscriptions(self) -> None:
        rng = random.Random(848)
        for _ in range(20):
            partitions = {f"t{i}": rng.randint(1, 12) for i in range(rng.randint(1, 4))}
            group = self.group()
            for i in range(rng.randint(1, 7)):
                group.join(f"member-{rng.randrange(1000)}-{i}", list(partitions))
            self.check_balance(group.rebalance(partitions), group, partitions)

    def test_membership_changes(self) -> None:
        """Members join and leave with equal subscriptions; the target of each round is the
        next round's ``assigned`` (balance and stickiness are checked when promised)."""
        rng = random.Random(42)
        partitions = {"orders": 12, "visits": 7, "payments": 3}
        total = sum(partitions.values())
        group = self.group()
        group.join("m0", list(partitions))
        previous = group.rebalance(partitions)
        next_id = 1
        for _ in range(25):
            only_left = len(group.members) > 1 and rng.random() < 0.4
            if only_left:
                group.leave(rng.choice(sorted(group.members)))
            else:
                group.join(f"m{next_id}", list(partitions))
                next_id += 1
            result = group.rebalance(partitions)
            self.check_balance(result, group, partitions)
            if self.sticky:
                quota = total // len(group.members)
                for member_id, before in previous.items():
                    if member_id not in result:
                        continue
                    kept = sum(len(parts & result[member_id].get(tid, frozenset())) for tid, parts in before.items())
                    had = sum(len(p) for p in before.values())
                    wanted = had if only_left else min(had, quota)
                    assert kept >= wanted, f"{member_id} kept {kept} of its {had} partitions (quota {quota})"
            previous = result

    def test_different_subscriptions(self) -> None:
        for partitions, members in random_groups(20241129):
            group = self.group()
            for member_id, topics, static in members:
                group.join(member_id, topics, static)
            group.rebalance(partitions)
            group.leave(next(iter(group.members)))
            group.rebalance(partitions)

    def test_same_input_same_result(self) -> None:
        partitions = {"orders": 10, "visits": 5}
        first = self.group()
        for i, topics in enumerate((["orders"], ["orders", "visits"], ["visits"], ["orders", "visits"])):
            first.join(f"m{i}", topics)
        members, topics_by_id = first.inputs(partitions)
        shuffled = dict(reversed(list(members.items())))
        assert self.make().assign(members, topics_by_id) == self.make().assign(shuffled, topics_by_id)


def check_server_assignor(
    assignor: type[Any], *, balance: str | None = None, sticky: bool = False
) -> type[ServerAssignorConformance]:
    """A ``ServerAssignorConformance`` subclass for ``assignor``; assign it to a ``Test*`` name."""
    return suite_for(
        ServerAssignorConformance,
        "ServerAssignorConformanceSuite",
        {"assignor": assignor, "balance": balance, "sticky": sticky},
    )
