"""Which replica a consumer should fetch a partition from (KIP-392), as the broker decides it.

The replica selector (``replica.selector.class``) picks; this module decides what it may pick
from, as Kafka's ``ReplicaManager.findPreferredReadReplica`` does, and what the answer means:

- on the **leader**, the candidates are the leader itself and every follower that is in the ISR,
  alive (registered), and holds the fetch offset (its log start <= offset <= its log end, as the
  leader last saw them): a follower out of the ISR may lag without bound, and a consumer sent to
  it would lag with it (KAFKA-14372). The selector sees each one's log end and the time since it
  last caught up;
- on a **follower** serving a consumer a selector sent there, the choice is made again over what
  a follower knows: itself while it is in the ISR (its log end, caught up), the leader and the
  other alive ISR members (their log ends unknown, -1). A follower that fell out of the ISR, or
  that the selector no longer prefers, sends the consumer back to the leader or to the other
  replica. Kafka decides on the leader only (a consumer on a follower goes back to the leader on
  an error or when its lease on the preferred replica runs out, 5 minutes in librdkafka); the
  follower's re-check lets a consumer leave a lagging follower at its next fetch.

The answer is a broker id, or -1: read here (the selector chose this broker, or chose nothing).
"""

from __future__ import annotations

from collections.abc import Callable

from ..replica_selector import ClientMetadata, PartitionView, ReplicaSelector, ReplicaView
from .partition import Partition

#: the consumer reads from the broker it asked
HERE = -1


def leader_view(
    partition: Partition,
    fetch_offset: int,
    now_ms: int,
    rack_of: Callable[[int], str | None],
    alive: Callable[[int], bool],
) -> PartitionView:
    """The leader's candidates for a consumer fetching from ``fetch_offset`` (see the module doc)."""
    me = partition.local_broker_id
    leader = ReplicaView(me, rack_of(me), partition.log_end_offset, 0)
    replicas = [leader]
    for broker_id, state in partition.remote_replicas.items():
        if broker_id not in partition.isr or not alive(broker_id):
            continue
        if not state.log_start_offset <= fetch_offset <= state.log_end_offset:
            continue
        caught_up = state.last_caught_up_time_ms
        lag = max(now_ms - caught_up, 0) if caught_up >= 0 else -1
        replicas.append(ReplicaView(broker_id, rack_of(broker_id), state.log_end_offset, lag))
    return PartitionView(leader, tuple(replicas))


def follower_view(
    partition: Partition,
    rack_of: Callable[[int], str | None],
    alive: Callable[[int], bool],
) -> PartitionView | None:
    """A follower's candidates (see the module doc); None while it knows no live leader (it
    then keeps serving: there is nowhere better to send the consumer)."""
    leader_id = partition.leader_id
    if leader_id < 0 or not alive(leader_id):
        return None
    me = partition.local_broker_id
    leader = ReplicaView(leader_id, rack_of(leader_id), -1, -1)
    replicas = [leader]
    for broker_id in partition.replicas:
        if broker_id == leader_id or broker_id not in partition.isr:
            continue
        if broker_id == me:
            replicas.append(ReplicaView(me, rack_of(me), partition.log_end_offset, 0))
        elif alive(broker_id):
            replicas.append(ReplicaView(broker_id, rack_of(broker_id), -1, -1))
    return PartitionView(leader, tuple(replicas))


def preferred_read_replica(
    selector: ReplicaSelector,
    partition: Partition,
    client: ClientMetadata,
    fetch_offset: int,
    now_ms: int,
    rack_of: Callable[[int], str | None],
    alive: Callable[[int], bool],
) -> int:
    """The broker id the consumer should fetch ``partition`` from, or :data:`HERE`.

    On the leader, a choice of the leader (or of nothing) is HERE, as Kafka never answers a
    leader with itself; on a follower, a choice of anything but this follower redirects, the
    leader included (None from the selector means the leader). A choice outside the candidates
    (a selector's bug) is ignored: the consumer could not read there."""
    me = partition.local_broker_id
    if partition.is_leader:
        view = leader_view(partition, fetch_offset, now_ms, rack_of, alive)
    else:
        maybe = follower_view(partition, rack_of, alive)
        if maybe is None:
            return HERE
        view = maybe
    chosen = selector.select(partition.topic_partition, client, view)
    if chosen is None:
        chosen = view.leader
    if chosen.broker_id == me or all(r.broker_id != chosen.broker_id for r in view.replicas):
        return HERE
    return chosen.broker_id
