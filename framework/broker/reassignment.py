"""Partition reassignment (KIP-455): the controller's decisions, without I/O.

A reassignment moves a partition from its *original* replicas to a *target* set. While it runs,
the partition's assignment in the metadata store is Kafka's ``ReplicaAssignment``: the full
replica set RS = target + original (no duplicates, target first, so the target's first replica
is the preferred leader), with the *adding replicas* AR = RS - original and the *removing
replicas* RR = RS - target kept beside it in the topic's assignment (``adding_replicas`` and
``removing_replicas``, as in Kafka's ZooKeeper topic znode). Every broker in RS hosts the
partition, so the adding replicas start as followers and catch up the way any follower does;
Metadata shows RS, as Kafka does. Everything the controller needs is in the store, so a new
controller resumes a reassignment where the old one left it.

The reassignment completes once every target replica is in the ISR: the assignment becomes the
target, the removing replicas leave the ISR, a removed leader hands over to the first target
replica alive and in the ISR, and the leader epoch goes up (KRaft's rule: a replica set that
loses members bumps the epoch, which fences the removed replicas). The new assignment and the
new partition state are one transaction, so no broker ever sees the final assignment with the
old ISR. Brokers that are no longer replicas stop fetching and delete their logs when they read
the assignment (Kafka's StopReplica with deletePartition).

Cancelling (a null replica list) reverts to the original replicas at once, as KRaft's
``PartitionReassignmentRevert``: the adding replicas leave the replica set and the ISR. A new
target for a running reassignment replaces it, keeping the original replicas the original.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ErrorCode
from .api import ReassignmentResult
from .metadata_cache import PartitionState, encode

#: the assignment document's keys for a running reassignment's adding and removing replicas
#: (partition -> broker ids; present only while some partition of the topic is being reassigned)
ADDING_KEY = "adding_replicas"
REMOVING_KEY = "removing_replicas"


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A partition's replicas (RS) and, while it is being reassigned, which of them are being
    added (AR) and removed (RR): Kafka's ``ReplicaAssignment``."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """The replicas before the reassignment: RS - AR, in RS's order (a target that reorders
        original replicas reorders them here too, as Kafka's ``originReplicas``)."""
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas once the reassignment completes: RS - RR."""
        return tuple(r for r in self.replicas if r not in self.removing)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """The assignment that moves this partition's original replicas to ``target`` (a running
        reassignment is replaced: its original replicas stay the original). A target equal to
        the original replicas, or a reordering of them, is no reassignment: RS is the target."""
        original = self.original
        full = tuple(dict.fromkeys((*target, *original)))
        return ReplicaAssignment(
            full, tuple(r for r in full if r not in original), tuple(r for r in full if r not in target)
        )

    def revert(self) -> ReplicaAssignment:
        """The assignment a cancelled reassignment goes back to: the original replicas."""
        return ReplicaAssignment(self.original)


# -- the assignment document ----------------------------------------------------------------------


def decode_assignments(value: bytes) -> dict[int, ReplicaAssignment]:
    """Each partition's :class:`ReplicaAssignment` from a topic's assignment document."""
    doc = json.loads(value)
    return assignments_of(doc)


def assignments_of(doc: Mapping[str, Any]) -> dict[int, ReplicaAssignment]:
    """Each partition's :class:`ReplicaAssignment` from a decoded assignment document."""
    adding = doc.get(ADDING_KEY) or {}
    removing = doc.get(REMOVING_KEY) or {}
    return {
        int(p): ReplicaAssignment(
            tuple(int(r) for r in reps),
            tuple(int(r) for r in adding.get(p, ())),
            tuple(int(r) for r in removing.get(p, ())),
        )
        for p, reps in doc["partitions"].items()
    }


def reassignments_in(value: bytes) -> dict[int, ReplicaAssignment]:
    """The partitions of a topic's assignment document being reassigned (cheap for a topic with
    none: the controller asks on every pass)."""
    if ADDING_KEY.encode() not in value and REMOVING_KEY.encode() not in value:
        return {}
    return {p: a for p, a in decode_assignments(value).items() if a.is_reassigning}


def with_assignments(doc: Mapping[str, Any], changes: Mapping[int, ReplicaAssignment]) -> bytes:
    """The assignment document ``doc`` with ``changes`` applied (other partitions and fields
    unchanged); the adding/removing maps are written only while a partition has entries."""
    assignments = assignments_of(doc)
    assignments.update(changes)
    out = {k: v for k, v in doc.items() if k not in (ADDING_KEY, REMOVING_KEY)}
    out["partitions"] = {str(p): list(a.replicas) for p, a in sorted(assignments.items())}
    adding = {str(p): list(a.adding) for p, a in sorted(assignments.items()) if a.adding}
    removing = {str(p): list(a.removing) for p, a in sorted(assignments.items()) if a.removing}
    if adding:
        out[ADDING_KEY] = adding
    if removing:
        out[REMOVING_KEY] = removing
    return encode(out)


# -- decisions ------------------------------------------------------------------------------------


def validate_target(
    target: Sequence[int], current: ReplicaAssignment, live: Collection[int]
) -> ReassignmentResult | None:
    """Why Kafka's controller refuses ``target`` for a partition currently ``current``, or None:
    an empty list, a broker named twice, a negative id, or a replica to add that is not a live
    broker (brokers already replicas may be down: a reassignment away from a dead broker is
    what an operator needs)."""
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    if not target:
        return ReassignmentResult(code, "Empty replica list specified in partition reassignment.")
    if len(set(target)) != len(target):
        return ReassignmentResult(code, f"Duplicate replica ids in partition reassignment replica list: {list(target)}")
    if any(r < 0 for r in target):
        return ReassignmentResult(code, f"Invalid broker id in replica list: {list(target)}")
    adding = current.reassign_to(target).adding
    dead = [r for r in adding if r not in live]
    if dead:
        return ReassignmentResult(
            code,
            f"Replica assignment has brokers that are not alive: {dead} (adding {list(adding)}, "
            f"live brokers {sorted(live)})",
        )
    return None


def change_replicas(
    state: PartitionState, old: Sequence[int], new: Sequence[int], live: Collection[int]
) -> PartitionState | None:
    """The partition state once its replicas go from ``old`` to ``new``: the ISR keeps only
    replicas of ``new``; the leader stays when it is one of them and alive, else the first
    replica of ``new`` alive and in that ISR leads; the leader epoch goes up when the leader
    changes or a replica was removed (fencing the removed ones). ``state`` itself when nothing
    changes (always when no replica was removed: electing a leader for a dead one is the
    controller's offline-partition election); None when no replica of ``new`` can lead (none
    alive in the ISR)."""
    removed = any(r not in new for r in old)
    if not removed:
        return state
    isr = tuple(r for r in state.isr if r in new)
    if state.leader in new and state.leader in live and state.leader in isr:
        leader = state.leader
    else:
        candidates = [r for r in new if r in isr and r in live]
        if not candidates:
            return None
        leader = candidates[0]
    return PartitionState(leader, state.leader_epoch + 1, isr, state.version)


def completion(
    assignment: ReplicaAssignment, state: PartitionState, live: Collection[int]
) -> tuple[ReplicaAssignment, PartitionState] | None:
    """A running reassignment's end, once every target replica is in the ISR (Kafka's
    ``isReassignmentComplete``): the target assignment and the partition's new state
    (:func:`change_replicas`); None while it must go on (a target replica still catching up, or
    no target replica alive in the ISR to lead)."""
    if not assignment.is_reassigning:
        return None
    target = assignment.target
    if any(r not in state.isr for r in target):
        return None
    new = change_replicas(state, assignment.replicas, target, live)
    if new is None:
        return None
    return ReplicaAssignment(target), new


def alter(
    current: ReplicaAssignment,
    target: Sequence[int] | None,
    state: PartitionState,
    live: Collection[int],
    *,
    allow_replication_factor_change: bool = True,
) -> tuple[ReplicaAssignment, PartitionState] | ReassignmentResult:
    """One partition of an AlterPartitionReassignments request, as Kafka's controller decides
    it: the assignment and partition state to write (the state unchanged when only the
    assignment changes), or the answer when nothing is written.

    ``target`` None cancels: NO_REASSIGNMENT_IN_PROGRESS when none runs, else the original
    replicas come back at once (the adding ones leave the ISR; one that led hands over).
    Otherwise :func:`validate_target`, then the new full replica set; a target that changes
    nothing (the current replicas, or the target of the reassignment running) writes nothing. A change that would
    leave no replica alive in the ISR to lead is refused (INVALID_REPLICA_ASSIGNMENT): odradek's
    choice, where KRaft falls back to an unclean election. Without
    ``allow_replication_factor_change`` (KIP-860) a target of another size than the original
    replicas is refused (INVALID_REPLICA_ASSIGNMENT)."""
    if target is None:
        if not current.is_reassigning:
            return ReassignmentResult(
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No reassignment is in progress for this partition."
            )
        new = current.revert()
    else:
        refused = validate_target(target, current, live)
        if refused is not None:
            return refused
        if not allow_replication_factor_change and len(target) != len(current.original):
            return ReassignmentResult(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The replication factor is changed from {len(current.original)} to {len(target)} "
                "but allowReplicationFactorChange is false",
            )
        new = current.reassign_to(target)
        if new == current:  # the current replicas, or the running reassignment's own target
            return ReassignmentResult(ErrorCode.NONE)
    new_state = change_replicas(state, current.replicas, new.replicas, live)
    if new_state is None:
        return ReassignmentResult(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"no replica of {list(new.replicas)} is alive and in the ISR {list(state.isr)} to lead",
        )
    return new, new_state


__all__ = [
    "ADDING_KEY",
    "REMOVING_KEY",
    "ReplicaAssignment",
    "alter",
    "assignments_of",
    "change_replicas",
    "completion",
    "decode_assignments",
    "reassignments_in",
    "validate_target",
    "with_assignments",
]
