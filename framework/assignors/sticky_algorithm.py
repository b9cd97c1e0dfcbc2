"""The sticky assignment algorithm shared by ``sticky`` and ``cooperative-sticky``.

A port of the Java client's ``AbstractStickyAssignor`` (without rack matching, since assignors
here see no replica racks): the result is as balanced as possible (member partition counts differ
by at most one when subscriptions allow) and moves as few previously owned partitions as it can.

- When every member subscribes to the same topics, the *constrained* path runs: members keep up to
  their quota (``floor``/``ceil`` of partitions per member) of what they owned, the rest is dealt
  round-robin to members under quota. It also reports the partitions that change owner, which
  the cooperative assignor withholds for one rebalance (KIP-429).
- Otherwise the *general* path keeps all valid ownership, places unowned partitions on the least
  loaded eligible member, then moves partitions from over-loaded members until balanced, preferring
  to return a partition to its owner of the previous generation, and reverts when the moves did
  not improve balance.

Java iterates ``HashMap``s where ties are possible; members are visited here in the order a Java
``HashMap`` of their ids iterates (:func:`odradek.kafka_types.java_hashmap_order`), so the same
subscriptions give the same assignment as the Java client (checked against its tests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..consumer_protocol import DEFAULT_GENERATION, java_string_key
from ..interfaces import TopicPartition
from ..kafka_types import java_hashmap_order


@dataclass(frozen=True, slots=True)
class StickyMember:
    """A member as the sticky algorithm needs it: subscription, claimed partitions, generations.

    ``generation`` is the generation of ``owned`` as the assignor's member data says (None when
    unknown); ``subscription_generation`` is the subscription's own field (v2+, -1 when absent),
    which Java uses to settle two members claiming one partition.
    """

    member_id: str
    topics: frozenset[str]
    owned: tuple[TopicPartition, ...]
    generation: int | None
    subscription_generation: int = DEFAULT_GENERATION


def _key(member_id: str) -> bytes:
    return java_string_key(member_id)


def _tp_key(tp: TopicPartition) -> tuple[bytes, int]:
    return (java_string_key(tp.topic), tp.partition)


def sticky_assign(
    partitions_per_topic: Mapping[str, int], members: Sequence[StickyMember]
) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str] | None]:
    """(assignment, partitions transferring ownership) -- the latter None on the general path,
    where the cooperative assignor computes it from the members' owned partitions."""
    # Java iterates its HashMap of subscriptions; ties between members fall the same way here
    by_id = {m.member_id: m for m in members}
    ordered = [by_id[member_id] for member_id in java_hashmap_order(list(by_id))]
    equal, owned, multiply_claimed, max_generation = _claimed_partitions(partitions_per_topic, ordered)
    if equal:
        return _ConstrainedAssignment(partitions_per_topic, owned, multiply_claimed).build()
    general = _GeneralAssignment(partitions_per_topic, ordered, owned, max_generation)
    return general.build(), None


def _claimed_partitions(
    partitions_per_topic: Mapping[str, int], members: Sequence[StickyMember]
) -> tuple[bool, dict[str, list[TopicPartition]], set[TopicPartition], int]:
    """Java's ``allSubscriptionsEqual``: whether subscriptions are equal, each member's still-valid
    claimed partitions (conflicts settled by generation), partitions claimed twice in one
    generation (owned by nobody now), and the highest generation seen."""
    equal = True
    subscribed: set[str] = set()
    owner_of: dict[TopicPartition, str] = {}
    owned: dict[str, list[TopicPartition]] = {}
    multiply_claimed: set[TopicPartition] = set()
    generation_of = {m.member_id: m.subscription_generation for m in members}
    max_generation = DEFAULT_GENERATION
    for m in members:
        if not subscribed:
            subscribed = set(m.topics)
        elif equal and set(m.topics) != subscribed:
            equal = False
        member_generation = m.generation if m.generation is not None else DEFAULT_GENERATION
        max_generation = max(max_generation, member_generation)
        mine: list[TopicPartition] = []
        owned[m.member_id] = mine
        for tp in m.owned:
            if tp.topic not in partitions_per_topic or tp.partition >= partitions_per_topic[tp.topic]:
                continue
            other = owner_of.get(tp)
            if other is None:
                mine.append(tp)
                owner_of[tp] = m.member_id
                continue
            other_generation = generation_of[other]
            if member_generation == other_generation:
                multiply_claimed.add(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                owner_of[tp] = m.member_id
            elif member_generation > other_generation:
                mine.append(tp)
                if tp in owned[other]:
                    owned[other].remove(tp)
                owner_of[tp] = m.member_id
    return equal, owned, multiply_claimed, max_generation


def _all_partitions(partitions_per_topic: Mapping[str, int], topics: Sequence[str]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]


class _ConstrainedAssignment:
    """Java's ``ConstrainedAssignmentBuilder`` (all subscriptions equal)."""

    def __init__(
        self,
        partitions_per_topic: Mapping[str, int],
        owned: Mapping[str, list[TopicPartition]],
        multiply_claimed: set[TopicPartition],
    ) -> None:
        self.partitions_per_topic = partitions_per_topic
        self.owned = owned
        self.multiply_claimed = multiply_claimed
        total = sum(partitions_per_topic.values())
        n = len(owned)
        self.min_quota, rest = divmod(total, n)
        self.max_quota = self.min_quota + (1 if rest else 0)
        self.expected_over_min = rest
        self.current_over_min = 0
        self.assignment: dict[str, list[TopicPartition]] = {m: [] for m in owned}
        self.maybe_revoked: dict[TopicPartition, str] = {}
        self.transferring: dict[TopicPartition, str] = {}
        self.under_min: list[str] = []
        self.exactly_min: list[str] = []

    def build(self) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str]]:
        assigned = self._assign_owned()
        topics = sorted(self.partitions_per_topic, key=java_string_key)
        unassigned = [tp for tp in _all_partitions(self.partitions_per_topic, topics) if tp not in assigned]
        self.under_min.sort(key=_key)
        self.exactly_min.sort(key=_key)
        self._assign_round_robin(unassigned)
        self._verify()
        return self.assignment, self.transferring

    def _assign_owned(self) -> set[TopicPartition]:
        assigned: set[TopicPartition] = set()
        for member, claimed in self.owned.items():
            mine = sorted(
                (tp for tp in claimed if tp not in self.multiply_claimed),
                key=lambda tp: (tp.partition, java_string_key(tp.topic)),
            )
            target = self.assignment[member]
            if len(mine) < self.min_quota:
                keep = len(mine)
                self.under_min.append(member)
            elif len(mine) >= self.max_quota and self.current_over_min < self.expected_over_min:
                keep = self.max_quota
                self.current_over_min += 1
                if self.current_over_min == self.expected_over_min:
                    self.exactly_min.clear()
            else:
                keep = self.min_quota
                if self.current_over_min < self.expected_over_min:
                    self.exactly_min.append(member)
            target.extend(mine[:keep])
            assigned.update(mine[:keep])
            for tp in mine[keep:]:
                self.maybe_revoked[tp] = member
        return assigned

    def _assign_round_robin(self, unassigned: list[TopicPartition]) -> None:
        at = 0  # Java iterates under_min with an Iterator that removes filled members
        for tp in unassigned:
            if at < len(self.under_min):
                member = self.under_min[at]
                at += 1
            elif not self.under_min and not self.exactly_min:
                raise RuntimeError("sticky assignor: no unfilled member left for the remaining partitions")
            elif not self.under_min:
                member = self.exactly_min.pop(0)
            else:
                at = 0
                member = self.under_min[at]
                at += 1
            count = self._assign_new(tp, member)
            if count == self.min_quota:
                at -= 1
                del self.under_min[at]
                self.exactly_min.append(member)
            elif count == self.max_quota:
                self.current_over_min += 1

    def _assign_new(self, tp: TopicPartition, member: str) -> int:
        target = self.assignment[member]
        target.append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != member) or tp in self.multiply_claimed:
            self.transferring[tp] = member
        return len(target)

    def _verify(self) -> None:
        if not self.under_min:
            return
        if self.current_over_min != self.expected_over_min:
            raise RuntimeError("sticky assignor: fewer members above min quota than expected")
        for member in self.under_min:
            if len(self.assignment[member]) != self.min_quota:
                raise RuntimeError(f"sticky assignor: member {member} is below min quota")


class _PartitionMovements:
    """Java's ``PartitionMovements``: where each moved partition came from, per topic and pair,
    so that a partition moving back and forth between two members is avoided."""

    def __init__(self) -> None:
        self.by_topic: dict[str, dict[tuple[str, str], set[TopicPartition]]] = {}
        self.moves: dict[TopicPartition, tuple[str, str]] = {}

    def _remove(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.moves.pop(tp)
        per_topic = self.by_topic[tp.topic]
        per_topic[pair].discard(tp)
        if not per_topic[pair]:
            del per_topic[pair]
        if not per_topic:
            del self.by_topic[tp.topic]
        return pair

    def _add(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.moves[tp] = pair
        self.by_topic.setdefault(tp.topic, {}).setdefault(pair, set()).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.moves:
            src, _ = self._remove(tp)
            if src != new:  # not moving back to where it started
                self._add(tp, (src, new))
        else:
            self._add(tp, (old, new))

    def partition_to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        """Rather than move ``tp`` from ``old`` to ``new``, move back a partition of the same topic
        that earlier went from ``new`` to ``old``'s origin (keeps partitions where they were)."""
        per_topic = self.by_topic.get(tp.topic)
        if per_topic is None:
            return tp
        if tp in self.moves:
            old = self.moves[tp][0]
        reverse = per_topic.get((new, old))
        if not reverse:
            return tp
        return min(reverse, key=_tp_key)


class _GeneralAssignment:
    """Java's ``GeneralAssignmentBuilder`` (subscriptions differ)."""

    def __init__(
        self,
        partitions_per_topic: Mapping[str, int],
        members: Sequence[StickyMember],
        owned: dict[str, list[TopicPartition]],
        max_generation: int,
    ) -> None:
        self.partitions_per_topic = partitions_per_topic
        self.members = members
        self.max_generation = max_generation
        self.topic_consumers: dict[str, list[str]] = {t: [] for t in partitions_per_topic}
        self.consumer_topics: dict[str, list[str]] = {}
        for m in members:
            topics = [t for t in sorted(m.topics, key=java_string_key) if t in partitions_per_topic]
            self.consumer_topics[m.member_id] = topics
            for t in topics:
                self.topic_consumers[t].append(m.member_id)
        self.current: dict[str, list[TopicPartition]] = {m.member_id: list(owned.get(m.member_id, ())) for m in members}
        self.owner: dict[TopicPartition, str] = {tp: c for c, tps in self.current.items() for tp in tps}
        topics = sorted(partitions_per_topic, key=lambda t: (len(self.topic_consumers[t]), java_string_key(t)))
        self.sorted_partitions = _all_partitions(partitions_per_topic, topics)
        self.active: set[str] = set()  # Java's sortedCurrentSubscriptions, ordered on demand
        self.revocation_required = False
        self.movements = _PartitionMovements()
        self.max_size = {c: sum(partitions_per_topic[t] for t in topics) for c, topics in self.consumer_topics.items()}

    # -- ordering helpers --------------------------------------------------------------------
    def _by_load(self) -> list[str]:
        return sorted(self.active, key=lambda c: (len(self.current[c]), _key(c)))

    def build(self) -> dict[str, list[TopicPartition]]:
        previous = self._previous_assignment()
        assigned = self._assign_owned()
        unassigned = [tp for tp in self.sorted_partitions if tp not in assigned]
        self.active.update(self.current)
        self._balance(previous, unassigned)
        return self.current

    def _previous_assignment(self) -> dict[TopicPartition, tuple[str, int]]:
        """Partitions members owned in generations older than the newest (Java's prevAssignment)."""
        previous: dict[TopicPartition, tuple[str, int]] = {}
        for m in self.members:
            if m.generation is not None and m.generation < self.max_generation:
                generation = m.generation
            elif m.generation is None and self.max_generation > DEFAULT_GENERATION:
                generation = DEFAULT_GENERATION
            else:
                continue
            for tp in m.owned:
                if tp not in previous or generation > previous[tp][1]:
                    previous[tp] = (m.member_id, generation)
        return previous

    def _assign_owned(self) -> set[TopicPartition]:
        assigned: set[TopicPartition] = set()
        for m in self.members:
            keep: list[TopicPartition] = []
            for tp in self.current[m.member_id]:
                if tp.topic not in self.topic_consumers:
                    self.owner.pop(tp, None)
                elif tp.topic not in m.topics:
                    self.revocation_required = True
                else:
                    keep.append(tp)
                    assigned.add(tp)
            self.current[m.member_id] = keep
        return assigned

    def _is_balanced(self) -> bool:
        order = self._by_load()
        if len(self.current[order[0]]) >= len(self.current[order[-1]]) - 1:
            return True
        for consumer in order:
            count = len(self.current[consumer])
            if count == self.max_size[consumer]:
                continue
            mine = set(self.current[consumer])
            for topic in self.consumer_topics[consumer]:
                for p in range(self.partitions_per_topic[topic]):
                    tp = TopicPartition(topic, p)
                    other = self.owner.get(tp)
                    if tp in mine or other is None or other not in self.current:
                        continue
                    if count + 1 < len(self.current[other]):
                        return False
        return True

    @staticmethod
    def _balance_score(assignment: Mapping[str, list[TopicPartition]]) -> int:
        sizes = [len(v) for v in assignment.values()]
        return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1 :])

    def _assign_to_least_loaded(self, tp: TopicPartition) -> None:
        for consumer in self._by_load():
            if tp.topic in self.consumer_topics[consumer]:
                self.current[consumer].append(tp)
                self.owner[tp] = consumer
                return

    def _topic_movable(self, topic: str) -> bool:
        return len(self.topic_consumers[topic]) >= 2

    def _consumer_movable(self, consumer: str) -> bool:
        if len(self.current[consumer]) < self.max_size[consumer]:
            return True
        return any(self._topic_movable(tp.topic) for tp in self.current[consumer])

    def _balance(self, previous: dict[TopicPartition, tuple[str, int]], unassigned: list[TopicPartition]) -> None:
        order = self._by_load()
        initializing = not self.current[order[-1]] if order else True
        for tp in unassigned:
            if self.topic_consumers[tp.topic]:
                self._assign_to_least_loaded(tp)
        fixed_topics = {t for t in self.topic_consumers if not self._topic_movable(t)}
        movable_partitions = [tp for tp in self.sorted_partitions if tp.topic not in fixed_topics]
        movable_unassigned = [tp for tp in unassigned if tp.topic not in fixed_topics]
        fixed: dict[str, list[TopicPartition]] = {}
        for consumer in list(self.consumer_topics):
            if not self._consumer_movable(consumer):
                self.active.discard(consumer)
                fixed[consumer] = self.current.pop(consumer)
        before = {c: list(tps) for c, tps in self.current.items()}
        owner_before = dict(self.owner)
        if not self.revocation_required:
            self._reassign(movable_unassigned, previous)
        moved = self._reassign(movable_partitions, previous)
        if not initializing and moved and self._balance_score(self.current) >= self._balance_score(before):
            self.current = before
            self.owner = owner_before
        for consumer, tps in fixed.items():
            self.current[consumer] = tps
            self.active.add(consumer)

    def _reassign(self, partitions: list[TopicPartition], previous: dict[TopicPartition, tuple[str, int]]) -> bool:
        performed = False
        modified = True
        while modified:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                consumer = self.owner.get(tp)
                if consumer is None or consumer not in self.current:
                    continue
                prev = previous.get(tp)
                if (
                    prev is not None
                    and prev[0] in self.current
                    and len(self.current[consumer]) > len(self.current[prev[0]]) + 1
                ):
                    self._move(tp, prev[0])
                    performed = modified = True
                    continue
                for other in self.topic_consumers[tp.topic]:
                    if other in self.current and len(self.current[consumer]) > len(self.current[other]) + 1:
                        self._move(tp, self._least_loaded_for(tp.topic))
                        performed = modified = True
                        break
        return performed

    def _least_loaded_for(self, topic: str) -> str:
        for consumer in self._by_load():
            if topic in self.consumer_topics[consumer]:
                return consumer
        raise RuntimeError(f"sticky assignor: no member subscribes to {topic}")

    def _move(self, tp: TopicPartition, new: str) -> None:
        to_move = self.movements.partition_to_move(tp, self.owner[tp], new)
        old = self.owner[to_move]
        self.movements.move(to_move, old, new)
        self.current[old].remove(to_move)
        self.current[new].append(to_move)
        self.owner[to_move] = new
