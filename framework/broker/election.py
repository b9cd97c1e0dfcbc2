"""Kafka's partition leader election algorithms, as pure functions of a partition's assignment,
state and the live brokers: the offline-partition election (:func:`elect_leader`), the
preferred-replica election (:func:`preferred_leader`), the ISR shrink when brokers die
(:func:`shrink_dead_from_isr`), the auto leader rebalance's moves (:func:`leader_imbalance_moves`)
and an ElectLeaders request's decision (:func:`decide_election`). The controller
(:mod:`~odradek.broker.controller`) applies them; they are tested without a store.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

from ..errors import ErrorCode
from ..interfaces import TopicPartition
from .api import ElectionType, ElectLeadersResult
from .metadata_cache import PartitionState

log = logging.getLogger(__name__)


def shrink_dead_from_isr(state: PartitionState, live: set[int]) -> PartitionState | None:
    """A live leader's state without the dead brokers in its ISR (same leader epoch), or None."""
    isr = tuple(r for r in state.isr if r in live or r == state.leader)
    if isr == state.isr:
        return None
    return PartitionState(state.leader, state.leader_epoch, isr, state.version)


def preferred_leader(replicas: tuple[int, ...], state: PartitionState, live: set[int]) -> PartitionState | None:
    """Kafka's preferred-replica election: the first assigned replica leads again (epoch + 1)
    once it is alive and in the ISR; None when it already leads or does not qualify."""
    if not replicas or replicas[0] == state.leader or replicas[0] not in live or replicas[0] not in state.isr:
        return None
    return PartitionState(replicas[0], state.leader_epoch + 1, state.isr, state.version)


def leader_imbalance_moves(
    topics: Mapping[str, tuple[Mapping[int, tuple[int, ...]], Mapping[int, PartitionState]]],
    live: set[int],
    offline: Mapping[TopicPartition, set[int]],
    percentage: int,
) -> list[tuple[TopicPartition, PartitionState]]:
    """The preferred-leader elections one leader-imbalance check makes, as Kafka's controller
    decides them: partitions are grouped by preferred (first assigned) replica; a broker's
    imbalance is the share of its group whose state names another leader (a partition with no
    state yet counts in the group only); when that share is over ``percentage`` %, each such
    partition whose preferred replica is alive, its replica not offline, and in the ISR is moved
    back to it (:func:`preferred_leader`). Sorted by partition."""
    groups: dict[int, list[tuple[TopicPartition, tuple[int, ...], PartitionState | None]]] = {}
    for name, (assignment, states) in topics.items():
        for p, replicas in assignment.items():
            if replicas:
                groups.setdefault(replicas[0], []).append((TopicPartition(name, p), replicas, states.get(p)))
    moves: list[tuple[TopicPartition, PartitionState]] = []
    for broker, group in sorted(groups.items()):
        elsewhere = [(tp, r, s) for tp, r, s in group if s is not None and s.leader != broker]
        if not elsewhere or len(elsewhere) * 100 <= percentage * len(group):
            continue
        found = 0
        for tp, replicas, state in elsewhere:
            assert state is not None
            new = preferred_leader(replicas, state, live - offline.get(tp, set()))
            if new is not None:
                moves.append((tp, new))
                found += 1
        if found:
            log.info(
                "leader imbalance of broker %d: %d of its %d preferred partitions led elsewhere; moving %d back",
                broker,
                len(elsewhere),
                len(group),
                found,
            )
    moves.sort(key=lambda m: (m[0].topic, m[0].partition))
    return moves


def elect_leader(
    replicas: tuple[int, ...],
    state: PartitionState,
    live: set[int],
    unclean: bool,
    returned: Collection[int] = (),
) -> PartitionState | None:
    """Kafka's ``offlinePartitionLeaderElection``: the new state, or None when nobody qualifies.

    ``returned`` are brokers that came back since ``state`` was written (restarted): Kafka's
    controller takes them for dead first, so another live ISR member leads if there is one,
    without them in its ISR (they rejoin it by catching up); only when none is left is one of
    them elected, before any unclean election."""
    in_sync_live = [r for r in replicas if r in live and r in state.isr]
    others = [r for r in in_sync_live if r not in returned] if returned else in_sync_live
    if others:
        return PartitionState(others[0], state.leader_epoch + 1, tuple(others), state.version)
    if in_sync_live:
        return PartitionState(in_sync_live[0], state.leader_epoch + 1, tuple(in_sync_live), state.version)
    if unclean:
        live_replicas = [r for r in replicas if r in live]
        if live_replicas:
            return PartitionState(live_replicas[0], state.leader_epoch + 1, (live_replicas[0],), state.version)
    return None


def decide_election(
    election_type: ElectionType, replicas: tuple[int, ...], state: PartitionState, live: set[int]
) -> PartitionState | ElectLeadersResult:
    """An ElectLeaders election for one partition, as Kafka's controller decides it: the new
    state to write, or the answer when there is nothing to write.

    PREFERRED: ELECTION_NOT_NEEDED when the first assigned replica already leads (and is
    alive); otherwise it leads (epoch + 1, same ISR) if it is alive and in the ISR, else
    PREFERRED_LEADER_NOT_AVAILABLE. UNCLEAN: ELECTION_NOT_NEEDED while the leader is alive;
    otherwise the offline-partition election with unclean election allowed whatever the topic
    says (a live ISR member, else the first live replica with the ISR just itself), else
    ELIGIBLE_LEADERS_NOT_AVAILABLE."""
    leader_alive = state.leader in live
    if election_type is ElectionType.PREFERRED:
        if leader_alive and replicas and replicas[0] == state.leader:
            return ElectLeadersResult(ErrorCode.ELECTION_NOT_NEEDED)
        new = preferred_leader(replicas, state, live)
        if new is None:
            if not replicas:
                why = "the partition has no assigned replicas"
            elif replicas[0] not in live:
                why = f"the preferred replica {replicas[0]} is not alive"
            else:
                why = f"the preferred replica {replicas[0]} is not in the ISR {list(state.isr)}"
            return ElectLeadersResult(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, why)
        return new
    if leader_alive:
        return ElectLeadersResult(ErrorCode.ELECTION_NOT_NEEDED)
    new = elect_leader(replicas, state, live, unclean=True)
    if new is None:
        return ElectLeadersResult(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"no replica of {list(replicas)} is alive")
    return new
