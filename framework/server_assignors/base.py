"""What the server-side assignors share: a deterministic member order and who subscribes to what."""

from __future__ import annotations

from collections.abc import Mapping

from ..consumer_protocol import java_string_key
from ..interfaces import AssignmentMember, AssignmentTopic


def member_order(member: AssignmentMember) -> tuple[int, bytes]:
    """Static members (by instance id) before dynamic ones (by member id), strings compared as
    Java compares them: the order does not depend on the order members joined, so a group whose
    membership did not change gets the same assignment from any coordinator."""
    if member.instance_id is not None:
        return (0, java_string_key(member.instance_id))
    return (1, java_string_key(member.member_id))


def subscribers_by_topic(
    members: Mapping[str, AssignmentMember], topics: Mapping[str, AssignmentTopic]
) -> dict[str, list[str]]:
    """Topic id -> the ids of the members subscribed to it, in :func:`member_order`, for every
    existing topic with partitions that some member subscribes to (the others are not assigned)."""
    ordered = sorted(members.values(), key=member_order)
    out: dict[str, list[str]] = {}
    for topic_id, topic in topics.items():
        if topic.num_partitions <= 0:
            continue
        subscribed = [m.member_id for m in ordered if topic_id in m.subscribed_topic_ids]
        if subscribed:
            out[topic_id] = subscribed
    return out


def frozen(assignment: Mapping[str, Mapping[str, set[int]]]) -> dict[str, dict[str, frozenset[int]]]:
    """An assignment under construction (sets) as an assignor returns it, empty topics dropped."""
    return {
        member_id: {topic_id: frozenset(parts) for topic_id, parts in by_topic.items() if parts}
        for member_id, by_topic in assignment.items()
    }


def rack_mismatch(member: AssignmentMember, topic: AssignmentTopic, partition: int) -> bool:
    """Whether giving ``partition`` to ``member`` loses rack locality: both racks are known and
    none of the partition's replicas is in the member's rack (unknown racks never mismatch, so
    without racks the rack-aware choices reduce to the plain ones)."""
    if member.rack_id is None:
        return False
    racks = topic.racks(partition)
    return bool(racks) and member.rack_id not in racks
