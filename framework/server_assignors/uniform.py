"""The server-side ``uniform`` assignor (Kafka's default): balanced and sticky.

Three steps, each deterministic:

1. stickiness: every member keeps the partitions its previous target assignment gave it that
   still exist and that it still subscribes to (a partition claimed twice goes to the first
   member in :func:`~.base.member_order`);
2. the partitions nobody kept go one by one, topics and partitions in order, to the least
   loaded member subscribed to their topic (among equally loaded ones, a member in the rack of
   one of the partition's replicas first);
3. balance: while a member holds at least two partitions more than another member that
   subscribes to the topic of one of them, that partition moves to the lighter member (from the
   most loaded member, to the least loaded; the partition moved is preferably one whose
   replicas are in the taker's rack and not in the giver's).

Racks (a member's ``rack_id``, the replicas' ``broker.rack``) only break ties: balance and
stickiness come first, and without racks the result is the same as without this rule (Kafka's
4.x built-in assignors ignore racks; KIP-881's client-side assignors align on a best-effort
basis, which is what this does).

With every member subscribed to the same topics this gives each member ``T // N`` or
``T // N + 1`` of the ``T`` partitions, moving no more partitions than that balance needs: a
member joining takes partitions only from members above the new quota, a member leaving hands
its partitions to the others and nobody else loses one. With different subscriptions it is a
best effort under the same rules, as Kafka's ``GeneralUniformAssignmentBuilder`` is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..interfaces import AssignmentMember, AssignmentTopic
from .base import frozen, member_order, rack_mismatch, subscribers_by_topic

TopicPartitionId = tuple[str, int]


class UniformServerAssignor:
    """Kafka's server-side ``uniform`` assignor."""

    name = "uniform"

    def assign(
        self, members: Mapping[str, AssignmentMember], topics: Mapping[str, AssignmentTopic]
    ) -> dict[str, dict[str, frozenset[int]]]:
        subscribers = subscribers_by_topic(members, topics)
        order = [m.member_id for m in sorted(members.values(), key=member_order)]
        rank = {member_id: i for i, member_id in enumerate(order)}
        owned: dict[str, set[TopicPartitionId]] = {member_id: set() for member_id in order}
        taken: set[TopicPartitionId] = set()
        # 1. keep what is still valid
        for member_id in order:
            member = members[member_id]
            for topic_id, parts in member.assigned.items():
                if topic_id not in subscribers or member_id not in subscribers[topic_id]:
                    continue
                for p in sorted(parts):
                    tp = (topic_id, p)
                    if 0 <= p < topics[topic_id].num_partitions and tp not in taken:
                        taken.add(tp)
                        owned[member_id].add(tp)
        # 2. the rest to the least loaded subscriber
        for topic_id in sorted(subscribers, key=lambda t: (topics[t].name, t)):
            candidates = subscribers[topic_id]
            for p in range(topics[topic_id].num_partitions):
                if (topic_id, p) in taken:
                    continue
                target = min(
                    candidates,
                    key=lambda m: (len(owned[m]), rack_mismatch(members[m], topics[topic_id], p), rank[m]),
                )
                owned[target].add((topic_id, p))
        # 3. balance

        def move_cost(tp: TopicPartitionId, giver: str, taker: str) -> tuple[bool, bool]:
            """Lower is better: (the taker loses locality, the giver keeps locality)."""
            topic = topics[tp[0]]
            return rack_mismatch(members[taker], topic, tp[1]), not rack_mismatch(members[giver], topic, tp[1])

        subscribed = {member_id: members[member_id].subscribed_topic_ids for member_id in order}
        while _move_one(order, rank, owned, subscribed, move_cost):
            pass
        result: dict[str, dict[str, set[int]]] = {member_id: {} for member_id in members}
        for member_id, tps in owned.items():
            for topic_id, p in tps:
                result[member_id].setdefault(topic_id, set()).add(p)
        return frozen(result)


def _move_one(
    order: list[str],
    rank: Mapping[str, int],
    owned: dict[str, set[TopicPartitionId]],
    subscribed: Mapping[str, frozenset[str]],
    move_cost: Callable[[TopicPartitionId, str, str], tuple[bool, bool]],
) -> bool:
    """Move one partition from the most loaded member that can give one to a member holding at
    least two fewer (the one ``move_cost`` rates best, racks-wise); False when no such move
    exists (the assignment is balanced)."""
    heaviest_first = sorted(order, key=lambda m: (-len(owned[m]), rank[m]))
    lightest_first = sorted(order, key=lambda m: (len(owned[m]), rank[m]))
    for giver in heaviest_first:
        for taker in lightest_first:
            if len(owned[giver]) - len(owned[taker]) <= 1:
                break
            movable = [tp for tp in owned[giver] if tp[0] in subscribed[taker]]
            if movable:
                # the best by racks; among equals the last partition (min keeps the first seen)
                tp = min(sorted(movable, reverse=True), key=lambda tp: move_cost(tp, giver, taker))
                owned[giver].discard(tp)
                owned[taker].add(tp)
                return True
    return False
