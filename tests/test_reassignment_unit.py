"""Partition reassignment's decisions without I/O (KIP-455, ``odradek.broker.reassignment``):
the full replica set and the adding/removing replicas a target gives, when a reassignment
completes and who leads after it, what a cancel or a replaced target writes, and the errors
Kafka's controller answers."""

from __future__ import annotations

import json

from odradek.broker.api import ReassignmentResult
from odradek.broker.metadata_cache import PartitionState
from odradek.broker.reassignment import (
    ReplicaAssignment,
    alter,
    assignments_of,
    change_replicas,
    completion,
    reassignments_in,
    validate_target,
    with_assignments,
)
from odradek.errors import ErrorCode


def test_a_target_gives_the_full_replica_set_and_the_adding_and_removing_replicas() -> None:
    moved = ReplicaAssignment((1, 2, 3)).reassign_to([3, 4, 5])
    assert moved == ReplicaAssignment((3, 4, 5, 1, 2), adding=(4, 5), removing=(1, 2))
    assert moved.original == (3, 1, 2)  # RS - AR: the target's reordering shows (as Kafka's originReplicas)
    assert moved.target == (3, 4, 5)
    assert moved.is_reassigning
    # a running reassignment replaced: the original replicas stay the original
    again = moved.reassign_to([1, 6])
    assert again == ReplicaAssignment((1, 6, 3, 2), adding=(6,), removing=(3, 2))
    assert again.revert() == ReplicaAssignment((1, 3, 2))
    # back to the original replicas, or a reordering of them: no reassignment
    assert moved.reassign_to([1, 2, 3]) == ReplicaAssignment((1, 2, 3))
    assert ReplicaAssignment((1, 2)).reassign_to([2, 1]) == ReplicaAssignment((2, 1))
    assert not ReplicaAssignment((2, 1)).is_reassigning


def test_the_assignment_document_keeps_kafkas_adding_and_removing_maps() -> None:
    doc = {"version": 3, "topic_id": "ab", "partitions": {"0": [1, 2], "1": [2, 3]}}
    moving = ReplicaAssignment((1, 2)).reassign_to([2, 3])
    written = json.loads(with_assignments(doc, {0: moving}))
    assert written == {
        "version": 3,
        "topic_id": "ab",
        "partitions": {"0": [2, 3, 1], "1": [2, 3]},
        "adding_replicas": {"0": [3]},
        "removing_replicas": {"0": [1]},
    }
    assert assignments_of(written) == {0: moving, 1: ReplicaAssignment((2, 3))}
    assert reassignments_in(json.dumps(written).encode()) == {0: moving}
    assert reassignments_in(json.dumps(doc).encode()) == {}
    # once done, the maps go from the document
    done = json.loads(with_assignments(written, {0: ReplicaAssignment((2, 3))}))
    assert done == {"version": 3, "topic_id": "ab", "partitions": {"0": [2, 3], "1": [2, 3]}}


def test_invalid_targets_are_refused_as_kafka_refuses_them() -> None:
    current = ReplicaAssignment((1, 2))
    live = {1, 2, 3}

    def refused(target: list[int]) -> ErrorCode | None:
        r = validate_target(target, current, live)
        return None if r is None else r.error

    assert refused([]) is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert refused([3, 3]) is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert refused([-1, 2]) is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert refused([2, 9]) is ErrorCode.INVALID_REPLICA_ASSIGNMENT  # broker 9 is not alive
    assert refused([2, 3]) is None
    # a replica already assigned may be down: moving away from a dead broker must work
    assert validate_target([1, 3], current, {1, 3}) is None


def test_a_reassignment_completes_once_every_target_replica_is_in_the_isr() -> None:
    moving = ReplicaAssignment((1, 2)).reassign_to([2, 3])  # RS [2, 3, 1], leader 1
    live = {1, 2, 3}
    catching_up = PartitionState(1, 4, (1, 2), 10)
    assert completion(moving, catching_up, live) is None
    in_sync = PartitionState(1, 4, (1, 2, 3), 11)
    done = completion(moving, in_sync, live)
    assert done is not None
    # the removed leader hands over to the first target replica in the ISR, epoch + 1
    assert done == (ReplicaAssignment((2, 3)), PartitionState(2, 5, (2, 3), 11))
    # a partition not being reassigned never completes
    assert completion(ReplicaAssignment((1, 2)), in_sync, live) is None


def test_a_leader_in_the_target_keeps_leading_at_a_new_epoch() -> None:
    moving = ReplicaAssignment((1, 2)).reassign_to([1, 3])
    done = completion(moving, PartitionState(1, 7, (1, 2, 3), 3), {1, 2, 3})
    assert done == (ReplicaAssignment((1, 3)), PartitionState(1, 8, (1, 3), 3))
    # only adding replicas: nothing removed, the state stays as it is
    growing = ReplicaAssignment((1,)).reassign_to([1, 2])
    state = PartitionState(1, 7, (1, 2), 3)
    done = completion(growing, state, {1, 2})
    assert done is not None and done[0] == ReplicaAssignment((1, 2)) and done[1] is state


def test_no_target_replica_alive_to_lead_keeps_the_reassignment_going() -> None:
    moving = ReplicaAssignment((1,)).reassign_to([2])
    assert completion(moving, PartitionState(1, 0, (1, 2), 1), {1}) is None
    assert change_replicas(PartitionState(1, 0, (1,), 1), (1, 2), (2,), {1, 2}) is None


def test_cancelling_reverts_to_the_original_replicas() -> None:
    live = {1, 2, 3}
    moving = ReplicaAssignment((1, 2)).reassign_to([2, 3])  # RS [2, 3, 1]
    # broker 3 caught up and leads: it leaves the ISR and an original replica leads again
    state = PartitionState(3, 5, (3, 2, 1), 9)
    reverted = alter(moving, None, state, live)
    assert reverted == (ReplicaAssignment((2, 1)), PartitionState(2, 6, (2, 1), 9))
    # nothing to cancel
    nothing = alter(ReplicaAssignment((1, 2)), None, PartitionState(1, 0, (1, 2), 1), live)
    assert nothing == ReassignmentResult(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, nothing.error_message)  # type: ignore[union-attr]
    # a cancel that would leave nobody in the ISR is refused
    lonely = alter(moving, None, PartitionState(3, 5, (3,), 9), live)
    assert isinstance(lonely, ReassignmentResult) and lonely.error is ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_starting_and_replacing_a_reassignment() -> None:
    live = {1, 2, 3, 4}
    state = PartitionState(1, 2, (1, 2), 5)
    started = alter(ReplicaAssignment((1, 2)), [3, 4], state, live)
    assert started == (ReplicaAssignment((3, 4, 1, 2), (3, 4), (1, 2)), state)  # the state stays
    assert isinstance(started, tuple)
    # replaced while broker 3 is in the ISR already: 3 leaves it (and the replicas), epoch + 1
    in_sync = PartitionState(1, 2, (1, 2, 3), 6)
    replaced = alter(started[0], [2, 4], in_sync, live)
    assert replaced == (ReplicaAssignment((2, 4, 1), (4,), (1,)), PartitionState(1, 3, (1, 2), 6))
    # the current replicas, not being reassigned, or the running target again: nothing to do
    assert alter(ReplicaAssignment((1, 2)), [1, 2], state, live) == ReassignmentResult(ErrorCode.NONE)
    assert alter(started[0], [3, 4], state, live) == ReassignmentResult(ErrorCode.NONE)
    # KIP-860: a changed replication factor refused when the request does not allow it
    rf = alter(ReplicaAssignment((1, 2)), [3], state, live, allow_replication_factor_change=False)
    assert isinstance(rf, ReassignmentResult) and rf.error is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    same_rf = alter(ReplicaAssignment((1, 2)), [3, 4], state, live, allow_replication_factor_change=False)
    assert isinstance(same_rf, tuple)
