"""Validation of an assignor plugin's result on the group leader, before SyncGroup.

The leader hands whatever ``Assignor.assign`` returns to every member of the group, so a broken
assignor breaks the whole group, including members running other clients. Kafka's
``ConsumerCoordinator`` checks the leader's assignment before sending it: a cooperative
assignment that moves a partition straight from its owner to another member fails the rebalance
(``IllegalStateException``), and a member given a partition of a topic it does not subscribe to
rejoins. odradek checks more, because every one of these is a bug in the assignor, and each
would otherwise surface far from its cause (a consumer that silently gets nothing, two consumers
reading one partition, a rebalance loop):

- ``assign`` raising, or returning something that is not a mapping of member id to
  :class:`~odradek.interfaces.MemberAssignment` (``partitions`` of ``(topic, partition)`` pairs);
- a group member missing from the result (give it an empty assignment instead), or a member id
  that is not in the group;
- a partition of a topic that is unknown or has no such partition, or of a topic that the member
  receiving it does not subscribe to;
- a partition assigned twice (to two members, or twice to one);
- with the cooperative protocol (KIP-429), a partition given to another member in the same
  rebalance as it is taken from its current owner: the owner must revoke it first, so the
  assignor leaves it out of this round and hands it out in the next one. The current owner is
  the member claiming it with the newest generation; a partition claimed by several members of
  one generation has no owner.

Each fails the rebalance with :class:`InvalidAssignment`, naming the assignor, its plugin and
distribution and the offending member or partition; ``poll()`` raises it. A subscribed topic none
of whose partitions is assigned is only logged (as Kafka does): an assignor may have reasons.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from ..errors import KafkaError
from ..interfaces import GroupMember, MemberAssignment, TopicPartition
from ..manager import PluginError

log = logging.getLogger("odradek.client.consumer")


class InvalidAssignment(PluginError, KafkaError):
    """The group leader's assignor returned an assignment that breaks the assignor contract.

    A :class:`~odradek.manager.PluginError` (a plugin is at fault) and a non-retriable
    :class:`~odradek.errors.KafkaError` (the rebalance failed; ``poll()`` raises it)."""


def check_assignment(
    result: object,
    members: Sequence[GroupMember],
    partitions_per_topic: Mapping[str, int],
    *,
    cooperative: bool,
    culprit: Callable[[], str],
) -> dict[str, MemberAssignment]:
    """``result`` as ``{member id: MemberAssignment}`` with ``TopicPartition``s, or raise
    :class:`InvalidAssignment` (see module doc). ``culprit()`` names the assignor and its plugin
    for the message; it is only called on failure."""

    def fail(why: str) -> InvalidAssignment:
        return InvalidAssignment(f"{culprit()} returned an invalid assignment: {why}")

    if not isinstance(result, Mapping):
        raise fail(f"expected a mapping of member id to MemberAssignment, got {type(result).__name__}")
    by_id = {m.member_id: m for m in members}
    unknown = sorted(str(k) for k in result if k not in by_id)
    if unknown:
        raise fail(f"member(s) {', '.join(map(repr, unknown))} are not in the group (members: {sorted(by_id)})")
    missing = [m for m in by_id if m not in result]
    if missing:
        raise fail(
            f"member(s) {', '.join(map(repr, missing))} of the group are missing from it "
            "(give a member with nothing an empty MemberAssignment)"
        )
    checked: dict[str, MemberAssignment] = {}
    given_to: dict[TopicPartition, str] = {}
    for member_id, assignment in result.items():
        partitions = getattr(assignment, "partitions", None)
        if partitions is None or isinstance(partitions, str | bytes):
            raise fail(f"member {member_id!r} was given {assignment!r}, not a MemberAssignment")
        subscribed = set(by_id[member_id].topics)
        tps: list[TopicPartition] = []
        for item in partitions:
            tp = _topic_partition(item)
            if tp is None:
                raise fail(f"member {member_id!r} was given {item!r}, not a (topic, partition) pair")
            count = partitions_per_topic.get(tp.topic, 0)
            if count <= 0:
                raise fail(f"member {member_id!r} was given {tp}, a partition of unknown topic {tp.topic!r}")
            if not 0 <= tp.partition < count:
                raise fail(f"member {member_id!r} was given {tp}, but {tp.topic!r} has {count} partition(s)")
            if tp.topic not in subscribed:
                raise fail(f"member {member_id!r} was given {tp}, but it does not subscribe to {tp.topic!r}")
            if tp in given_to:
                other = given_to[tp]
                whom = "twice to the same member" if other == member_id else f"to both {other!r} and {member_id!r}"
                raise fail(f"partition {tp} is assigned {whom}")
            given_to[tp] = member_id
            tps.append(tp)
        checked[member_id] = MemberAssignment(tuple(tps), getattr(assignment, "user_data", None))
    moved = _moved(members, given_to) if cooperative else {}
    if moved:
        tp, (owner, new_owner) = min(moved.items())
        raise fail(
            f"with the cooperative protocol, {tp} moves from its owner {owner!r} to {new_owner!r} in one "
            f"rebalance; leave it out until {owner!r} has revoked it (the next rebalance)"
        )
    unassigned = sorted({t for m in members for t in m.topics} - {tp.topic for tp in given_to})
    if unassigned:
        log.warning("assignor left every partition of subscribed topic(s) %s unassigned", unassigned)
    return checked


def _topic_partition(item: object) -> TopicPartition | None:
    if isinstance(item, TopicPartition):
        return item
    if isinstance(item, tuple) and len(item) == 2:
        topic, partition = item
        if isinstance(topic, str) and isinstance(partition, int) and not isinstance(partition, bool):
            return TopicPartition(topic, partition)
    return None


def _moved(
    members: Sequence[GroupMember], given_to: Mapping[TopicPartition, str]
) -> dict[TopicPartition, tuple[str, str]]:
    """Owned partitions given to a member other than their owner: ``{tp: (owner, new owner)}``.
    The owner is the member claiming ``tp`` with the newest generation; ties own nothing."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for m in members:
        for tp in m.owned_partitions:
            claims.setdefault(TopicPartition(*tp), []).append((m.generation, m.member_id))
    moved: dict[TopicPartition, tuple[str, str]] = {}
    for tp, claimants in claims.items():
        claimants.sort(reverse=True)
        if len(claimants) > 1 and claimants[0][0] == claimants[1][0]:
            continue
        owner = claimants[0][1]
        new_owner = given_to.get(tp)
        if new_owner is not None and new_owner != owner:
            moved[tp] = (owner, new_owner)
    return moved
