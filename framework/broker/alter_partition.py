"""ISR changes proposed by partition leaders, and controlled shutdown (Kafka's ``AlterPartition``
path and ``ControlledShutdown``).

A leader shrinks the ISR of a partition when a follower has not caught up to its log end offset
for ``replica.lag.time.max.ms`` and expands it when a follower's LEO reaches the high watermark
and the start of the current leader epoch. Kafka (2.7+) sends such changes to the controller as
AlterPartition; odradek's leaders write them themselves, with the same fencing: a compare-and-set
on the partition state key whose version is the partition epoch, expecting the one the leader
last took in. Any state written since (an election, the controller taking a dead follower out of
the ISR) changes the version, so the leader's stale proposal fails and it waits for the new state.

Controlled shutdown moves this broker's leaderships to the first other live in-sync replica in
assignment order that is not shutting down too (leader epoch + 1) and takes it out of the ISR of
partitions it follows, by the same compare-and-set, before the broker stops, so clients and
followers switch without waiting for the metadata session to expire. A write that loses to a
concurrent one (the leader's ISR update, the controller) is decided again on the state re-read,
a bounded number of times.

Controlled shutdown first marks the broker as shutting down with an ephemeral key
(:data:`SHUTTING_DOWN_PREFIX`), which leaders check before adding a follower to an ISR (KIP-841:
a broker in controlled shutdown is ineligible; the controller elects it to nothing either):
until its session closes, the stopping broker is still registered and, as of its last fetch,
caught up, so without the mark a leader added it back on that last LEO.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Set

import trio

from ..config import Config
from ..interfaces import MetadataConflict, MetadataStore, TopicPartition
from ..sessions import MetadataUnavailable
from .in_flight import each_in_flight
from .log_dir_failures import decode_offline_replicas, offline_replicas_key
from .metadata_cache import (
    BROKERS_PREFIX,
    SHUTTING_DOWN_PREFIX,
    MetadataCache,
    PartitionState,
    partition_state_key,
    shutting_down_ids,
)
from .partition import Partition
from .replica_manager import ReplicaManager

log = logging.getLogger(__name__)

#: how many times controlled shutdown decides a partition's new state again after its
#: compare-and-set lost to a concurrent write, before leaving the partition as it is
CONTROLLED_SHUTDOWN_ROUNDS = 5
#: ISR changes a leader writes at once (see :meth:`AlterPartitionManager.maybe_update_isrs`)
ISR_WRITES_IN_FLIGHT = 16


class AlterPartitionManager:
    """Shrinks and expands the ISRs of the partitions this broker leads (see module doc)."""

    def __init__(
        self, config: Config, store: MetadataStore, cache: MetadataCache, replica_manager: ReplicaManager
    ) -> None:
        self.broker_id = config.broker_id
        self.store = store
        self.cache = cache
        self.replica_manager = replica_manager
        self.max_lag_ms = int(config["replica.lag.time.max.ms"])
        self._wakeup = trio.Event()
        replica_manager.on_isr_expand_candidate = self._expand_candidate

    def _expand_candidate(self, tp: TopicPartition) -> None:
        self._wakeup.set()

    async def run(self) -> None:
        """Check every led partition each ``replica.lag.time.max.ms / 2`` and whenever a follower
        may rejoin, until cancelled."""
        while True:
            with trio.move_on_after(self.max_lag_ms / 2000):
                await self._wakeup.wait()
            self._wakeup = trio.Event()
            try:
                await self.maybe_update_isrs()
            except MetadataUnavailable as exc:
                log.warning("ISR update deferred: %s", exc)

    async def maybe_update_isrs(self) -> int:
        """Propose every due ISR change; returns how many were written. Up to
        :data:`ISR_WRITES_IN_FLIGHT` partitions are written at once (Kafka's leaders send one
        AlterPartition naming many): one at a time, a broker back from a restart waited on a
        store round trip or three per partition for each of its leaders to add it (~80 ms a
        partition on ZooKeeper, 26 s for 1,000). Each decides from its partition as it is when
        its turn comes, not as the pass found it."""
        rm = self.replica_manager
        # KIP-841: only a registered broker may join an ISR (the controller takes dead ones out)
        live = set(self.cache.live_broker_ids())
        joinable: dict[int, frozenset[TopicPartition] | None] = {}  # per broker, for this pass
        now = rm.clock_ms()
        due = [
            tp
            for tp, p in list(rm.partitions.items())
            if p.is_leader and (self._expansions(p, live, now) or p.out_of_sync_replicas(now, self.max_lag_ms))
        ]
        # the store away: the rest wait for the next pass
        return await each_in_flight(
            due, lambda tp: self._update_isr(tp, live, joinable), ISR_WRITES_IN_FLIGHT, catch=MetadataUnavailable
        )

    def _expansions(self, p: Partition, live: set[int], now: int) -> set[int]:
        return {r for r in p.replicas if r != self.broker_id and r in live and p.can_join_isr(r, now, self.max_lag_ms)}

    async def _update_isr(
        self, tp: TopicPartition, live: set[int], joinable: dict[int, frozenset[TopicPartition] | None]
    ) -> bool:
        """Shrink and expand one led partition's ISR as its followers stand now; whether written."""
        p = self.replica_manager.get_partition(tp)
        if p is None or not p.is_leader:
            return False
        now = self.replica_manager.clock_ms()
        shrink = p.out_of_sync_replicas(now, self.max_lag_ms)
        expand = {r for r in self._expansions(p, live, now) if await self._eligible(r, tp, joinable)}
        if not shrink and not expand:
            return False
        new_isr = tuple(r for r in p.replicas if (r in p.isr or r in expand) and r not in shrink)
        old_isr = sorted(p.isr)  # alter_isr adopts the new one
        if not await self.alter_isr(tp, new_isr):
            return False
        log.info("%s: ISR %s -> %s", tp, old_isr, list(new_isr))
        metrics = self.replica_manager.metrics
        if shrink:
            metrics.isr_shrinks += 1
        if expand - shrink:
            metrics.isr_expands += 1
        return True

    async def _eligible(
        self, broker_id: int, tp: TopicPartition, memo: dict[int, frozenset[TopicPartition] | None] | None = None
    ) -> bool:
        """KIP-841: only a registered broker that is not in controlled shutdown joins an ISR, and
        only with a replica that is not offline (its log dir failed: its last fetch may look
        caught up, but it fetches no more). The store is asked, not the cache, which may not
        have seen a stopping broker's mark or its registration vanish yet. ``memo`` keeps each
        broker's answer for one pass over the partitions: a broker back from a restart is a
        candidate for every partition it follows, and three reads each made its return slow."""
        if memo is not None and broker_id in memo:
            offline = memo[broker_id]
        else:
            offline = await self._joinable(broker_id)
            if memo is not None:
                memo[broker_id] = offline
        return offline is not None and tp not in offline

    async def _joinable(self, broker_id: int) -> frozenset[TopicPartition] | None:
        """None when ``broker_id`` may join no ISR (not registered, or shutting down); else its
        offline replicas."""
        if await self.store.get(f"{SHUTTING_DOWN_PREFIX}{broker_id}") is not None:
            return None
        offline = await self.store.get(offline_replicas_key(broker_id))
        if await self.store.get(f"{BROKERS_PREFIX}{broker_id}") is None:
            return None
        return decode_offline_replicas(offline.value) if offline is not None else frozenset()

    async def alter_isr(self, tp: TopicPartition, new_isr: tuple[int, ...]) -> bool:
        """Write ``new_isr`` for a partition this broker leads, by a compare-and-set on the
        partition epoch this leader holds (the state key's version), as Kafka's AlterPartition
        carries the leader's partition epoch and the controller refuses a stale one. A state
        written since (the controller took a dead follower out of the ISR, or elected) fails
        the write: the leader's ISR, proposed from what it saw, must not put back what that
        write took out. It then re-reads the partition and decides again on the next pass.
        On success the local partition and the metadata cache adopt the new state at once:
        one store write per ISR change, no read before or after."""
        p = self.replica_manager.get_partition(tp)
        if p is None or not p.is_leader:
            return False
        cached = self.cache.partition_state(tp)
        controller_epoch = cached.controller_epoch if cached is not None else 0
        replaced, leader_epoch = p.partition_epoch, p.leader_epoch
        value = PartitionState(self.broker_id, leader_epoch, new_isr, replaced, controller_epoch).to_json()
        p.pending_isr_additions = frozenset(new_isr) - p.isr
        try:
            version = await self.store.put(partition_state_key(tp.topic, tp.partition), value, expect=replaced)
        except MetadataConflict:
            await self.cache.refresh_partition(tp)
            return False
        finally:
            p.pending_isr_additions = frozenset()
        # adopted only over the state it replaced: one taken in meanwhile (the watch delivered
        # this write and the controller's next, say) is newer, as Kafka's leader ignores an
        # AlterPartition answer older than the partition epoch it holds
        if self.replica_manager.get_partition(tp) is p and p.is_leader and p.partition_epoch == replaced:
            p.make_leader(
                leader_epoch, p.replicas, new_isr, version, now_ms=self.replica_manager.clock_ms(), own_isr_write=True
            )
            self.replica_manager.wake(tp)
        written = PartitionState(self.broker_id, leader_epoch, new_isr, version, controller_epoch)
        self.cache.take_own_write(tp, written, replaced)
        return True

    async def controlled_shutdown(self) -> int:
        """Move leaderships away and leave ISRs before stopping; returns how many partition
        states changed. Partitions with no other live in-sync replica keep this broker as leader
        (the controller elects once its registration is gone)."""
        replicated = [
            (name, part, replicas)
            for name, topic in list(self.cache.topics.items())
            for part, replicas in sorted(topic.assignment.items())
            if self.broker_id in replicas and len(replicas) >= 2
        ]
        stopping: set[int] = set()
        if replicated:  # a broker with no replicated partition writes nothing (the store may be away)
            with contextlib.suppress(MetadataConflict):  # marked already (a second call)
                await self.store.create(f"{SHUTTING_DOWN_PREFIX}{self.broker_id}", b"", ephemeral=True)
            # others stopping too (a rolling restart of several): they take no leadership over
            stopping = shutting_down_ids((await self.store.list(SHUTTING_DOWN_PREFIX))[0])
        live = set(self.cache.brokers) - {self.broker_id} - stopping
        # up to ISR_WRITES_IN_FLIGHT partitions at once (Kafka's controller moves a stopping
        # broker's partitions in one batch): one at a time took a store round trip or two per
        # partition, ~10 s for 1,000 partitions on ZooKeeper, while clients of the partitions
        # still to come waited on a leader about to go
        moved = await each_in_flight(
            replicated, lambda entry: self._leave_partition(*entry, live, stopping), ISR_WRITES_IN_FLIGHT
        )
        log.info("broker %d: controlled shutdown changed %d partition states", self.broker_id, moved)
        return moved

    async def _leave_partition(
        self, name: str, part: int, replicas: tuple[int, ...], live: set[int], stopping: set[int]
    ) -> bool:
        """One partition's controlled shutdown: whether its state was changed. A compare-and-set
        that loses to a concurrent write (the leader's ISR update, the controller's election) is
        decided again on the state re-read, as Kafka's controller retries a ZooKeeper version
        conflict, at most :data:`CONTROLLED_SHUTDOWN_ROUNDS` times; skipping it at once left a
        stopping leader leading (clients waited for its session to expire) or a stopping
        follower in the ISR (acks=all stalled until the leader shrank it)."""
        key = partition_state_key(name, part)
        for _ in range(CONTROLLED_SHUTDOWN_ROUNDS):
            current = await self.store.get(key)
            if current is None:
                return False
            stored = PartitionState.decode(current)
            new = _shutdown_state(self.broker_id, replicas, stored, live, stopping)
            if new is None:
                return False
            try:
                await self.store.put(key, new.to_json(stored.controller_epoch), expect=current.version)
            except MetadataConflict:
                continue
            return True
        log.warning(
            "broker %d: controlled shutdown left %s-%d as it was: its state kept changing (%d attempts)",
            self.broker_id,
            name,
            part,
            CONTROLLED_SHUTDOWN_ROUNDS,
        )
        return False


def _shutdown_state(
    broker_id: int, replicas: tuple[int, ...], state: PartitionState, live: set[int], stopping: Set[int] = frozenset()
) -> PartitionState | None:
    """The state a partition moves to when ``broker_id`` shuts down: leadership to the first
    other live in-sync replica in assignment order (leader epoch + 1), with the brokers in
    ``stopping`` (also shutting down: never in ``live``) left out of the new ISR, as Kafka's
    controlled shutdown election does; as a follower, ``broker_id`` out of the ISR. None when
    nothing is to change or no such change is possible."""
    if broker_id not in state.isr and state.leader != broker_id:
        return None
    isr = tuple(r for r in state.isr if r != broker_id)
    if state.leader == broker_id:
        successors = [r for r in replicas if r in isr and r in live]
        if not successors:
            return None
        return PartitionState(successors[0], state.leader_epoch + 1, tuple(r for r in isr if r not in stopping), 0)
    if state.leader in live and isr:
        return PartitionState(state.leader, state.leader_epoch, isr, 0)
    return None
