"""The controller's election duty: give offline partitions a new leader (Kafka's controller,
``PartitionStateMachine`` offline-partition election).

Every broker campaigns for the ``controller`` election in the metadata store; the winner (the only
broker on a single node) elects leaders for partitions whose leader is not a live broker: the first
replica in assignment order that is alive and in the ISR, or, with
``unclean.leader.election.enable``, the first live replica (its ISR then becomes just itself).
Each election bumps the leader epoch and is a compare-and-set on the partition state carrying the
controller's fence, so a deposed controller's late writes fail. It runs once on winning and again
whenever the set of live brokers changes, and for a topic whose partition states or config
changed (setting ``unclean.leader.election.enable`` elects a leaderless partition's leader at
once, as in Kafka). A replica a live broker published as offline (its log
dir failed, :mod:`~odradek.broker.log_dir_failures`) counts as a dead broker's for its partition:
it loses the leadership, leaves the ISR and is not elected.

The same pass also takes dead brokers out of the ISRs of partitions whose leader is alive (so
acks=all produce does not wait ``replica.lag.time.max.ms`` for them). ISR changes themselves are
written by leaders (:mod:`~odradek.broker.alter_partition`), controlled shutdown by the stopping
broker. Partition reassignments (KIP-455, :mod:`~odradek.broker.reassignment`) are started,
replaced and cancelled here (:meth:`Controller.alter_reassignments`) and completed by the
decision passes: a pass that finds every target replica of a partition being reassigned in its
ISR writes the target assignment and the new state together (:meth:`Controller._write_topic`).

With ``auto.leader.rebalance.enable`` the controller also runs Kafka's auto leader rebalance task:
5 s into its term and then every ``leader.imbalance.check.interval.seconds`` it groups the
partitions by preferred (first assigned) replica, and for each broker whose share of them led
elsewhere is over ``leader.imbalance.per.broker.percentage`` it moves back those whose preferred
replica is alive and in the ISR (:func:`leader_imbalance_moves`); none while a partition is being
reassigned, as in Kafka. Not at once when a broker
rejoins an ISR: a broker that restarts or flaps is not handed leadership (and its clients'
traffic) again until it has stayed, and a small imbalance is left alone, as in Kafka.

ElectLeaders requests (:mod:`~odradek.broker.elect_leaders`) are decided here too
(:meth:`Controller.elect_requested`, :func:`decide_election`), one decision pass at a time with
the controller's own, through the same fenced write.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from enum import Enum
from typing import Any

import trio

from ..config import Config
from ..errors import ErrorCode
from ..interfaces import (
    Check,
    Leadership,
    MetadataConflict,
    MetadataStore,
    Put,
    TopicPartition,
    Versioned,
)
from ..pacing import paced
from ..sessions import MetadataUnavailable
from .api import ElectionType, ElectLeadersResult, ReassignmentResult
from .controller_view import (
    WATCHED_PREFIX,
    Changed,
    FollowedView,
    ParsedItems,
    TopicsView,
    any_reassigning,
    broker_epochs,
    brokers_view,
    cluster_view,
    covers,
    topics_view,
)
from .dynamic_config import DynamicBrokerConfig
from .election import decide_election, elect_leader, leader_imbalance_moves, shrink_dead_from_isr
from .in_flight import each_in_flight
from .metadata_cache import (
    CONTROLLER_ELECTION,
    MetadataCache,
    PartitionState,
    partition_state_key,
    shutting_down_ids,
    topic_key,
)
from .reassignment import ReplicaAssignment, alter, assignments_of, completion, reassignments_in, with_assignments

log = logging.getLogger(__name__)

#: pause before campaigning again after leadership (or the session) was lost, or a store error
CAMPAIGN_BACKOFF_S = 0.5
#: how long into a term the first leader-imbalance check comes (Kafka's controller schedules
#: its auto leader rebalance task 5 s after failover); sooner when the interval is shorter
FIRST_IMBALANCE_CHECK_S = 5.0
#: partition states the controller writes at once (Kafka's controller sends the ZooKeeper
#: writes of a batch of elections together): one at a time, a broker's failure on a topic of
#: 1,000 partitions it led waited a store round trip per partition for its leaders
STATE_WRITES_IN_FLIGHT = 16
#: how often an ElectLeaders request's elections are decided again after losing a
#: compare-and-set to a concurrent change before the partition is answered REQUEST_TIMED_OUT
REQUESTED_ELECTION_ROUNDS = 5
#: the setting that lets a leaderless partition elect an out-of-sync replica (topic and broker)
UNCLEAN = "unclean.leader.election.enable"


class Controller:
    """Campaigns for controllership and, while holding it, elects leaders of offline partitions."""

    def __init__(
        self, config: Config, store: MetadataStore, cache: MetadataCache, dynamic: DynamicBrokerConfig | None = None
    ) -> None:
        self.config = config
        self.store = store
        self.cache = cache
        #: the dynamic broker configs, for the cluster-wide ``unclean.leader.election.enable``
        #: (None: the static config alone)
        self.dynamic = dynamic
        self.leadership: Leadership | None = None
        self._term: trio.CancelScope | None = None
        #: one decision pass at a time (Kafka's controller is one event thread): the pass on a
        #: watch event and an ElectLeaders request never race each other's compare-and-sets
        self._deciding = trio.Lock()
        #: partitions the last pass found with no eligible leader -> (replicas, ISR) when it
        #: warned: a pass runs on every change under ``/brokers/`` (each topic created, each ISR
        #: update), so the warning is logged once per partition until it has a leader again or
        #: its replicas or ISR change (a dir that failed under a replication-factor-1 topic
        #: left its partitions so, and logged each of them on every pass)
        self._leaderless: dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        #: what the last decision pass decoded (see :func:`cluster_view`)
        self._parsed: ParsedItems = {}
        #: live brokers -> their epochs (registration create revisions) as of this term's last
        #: pass over every partition; None before the term's first
        self._broker_epochs: dict[int, int] | None = None
        #: partitions whose leader or ISR named a broker when it came back (:meth:`_note_returns`)
        #: -> (their leader epoch then, those brokers), until a pass writes the partition
        self._returned: dict[TopicPartition, tuple[int, frozenset[int]]] = {}
        #: leader-imbalance checks completed (all terms): what a test or an operator waits on
        self.imbalance_checks = 0
        #: topics whose reassignment completion lost its compare-and-set: decided whole by the
        #: next pass (which a partial pass would not do for a change of another partition)
        self._reassign_again: set[str] = set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Campaign (blocks while another broker controls), then elect on every broker change;
        campaign again whenever leadership or the metadata session is lost. Reports started as
        soon as *some* broker is known to be the controller."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._campaign_forever)
            await self.cache.controller_known.wait()
            task_status.started()

    def session_lost(self) -> None:
        """The metadata session expired: its election key is gone (another broker may lead by
        now), so stop acting as controller and campaign again in the next session."""
        self.leadership = None
        if self._term is not None:
            self._term.cancel()

    async def _campaign_forever(self) -> None:
        while self.cache.halted is None:  # a halted broker must not take leadership decisions
            with trio.CancelScope() as term:
                self._term = term
                try:
                    await self._lead()
                except Exception as exc:  # the store is away: a new session will come
                    log.warning("controller: %s; campaigning again", one_line(exc))
            self._term = None
            if self.leadership is not None:
                log.info("broker %d is no longer the controller", self.config.broker_id)
            self.leadership = None
            await trio.sleep(CAMPAIGN_BACKOFF_S)

    async def _lead(self) -> None:
        """One term: win the election, then elect on every change until leadership is lost
        (a fenced write) or the watch ends."""
        self.leadership = await self.store.campaign(CONTROLLER_ELECTION, str(self.config.broker_id).encode())
        log.info("broker %d is the controller (epoch %d)", self.config.broker_id, self.leadership.epoch)
        # as a new Kafka controller, this term takes the brokers it finds as they are
        self._broker_epochs = None
        self._returned = {}
        await self.cache.refresh_controller()
        while self.leadership is not None:
            items, revision = await self.store.list(WATCHED_PREFIX)
            view = FollowedView(self.store, dict(items), revision)
            # a topic's config lives outside /brokers/: the cache says when one changed
            self.cache.topic_config_listeners.append(view.topic_config_changed)
            unclean_turned_on = self._unclean_default_listener(view)
            if self.dynamic is not None:
                self.dynamic.listeners.append(unclean_turned_on)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(view.follow)
                    nursery.start_soon(self._check_imbalance_forever, view)
                    changed: Changed | None = None  # the first pass decides every partition
                    while self.leadership is not None and not view.ended:
                        if changed is None:
                            await self.elect_offline_leaders(view.items)
                        else:
                            await self.elect_offline_leaders(view.items, topics=changed, brokers=view.brokers)
                        await view.changed()
                        changed = view.take_changed()
                    nursery.cancel_scope.cancel()
            finally:
                self.cache.topic_config_listeners.remove(view.topic_config_changed)
                if self.dynamic is not None:
                    self.dynamic.listeners.remove(unclean_turned_on)
            if not view.compacted:
                return  # fenced (another broker controls) or the session ended

    async def elect_offline_leaders(
        self,
        items: Mapping[str, Versioned] | None = None,
        *,
        topics: Changed | None = None,
        brokers: Mapping[str, Versioned] | None = None,
    ) -> int:
        """One pass over every partition of one consistent listing of ``/brokers/`` (live
        brokers, assignments, partition states: never the cache, which may lag the store);
        returns how many partition states were changed. A write that loses its compare-and-set
        is decided again on the next listing (the watch reports the change that beat it).

        With ``topics`` (and ``brokers``, the listing's keys outside ``/brokers/topics/``), only
        the partitions it names (per topic; None: all of the topic's): what a change to them
        alone can alter, since every other partition was decided on the same brokers before
        (the controller's watch asks for a whole pass whenever a broker or an offline replica
        changes). A change of one partition's state is decided alone: deciding its whole topic
        again made each of the controller's own writes cost a pass over the topic, and a burst
        of them on a topic of 1,000 partitions kept the broker's event loop busy for seconds."""
        async with self._deciding:
            return await self._elect_offline_leaders(items, topics, brokers)

    async def _elect_offline_leaders(
        self,
        items: Mapping[str, Versioned] | None,
        only: Changed | None = None,
        brokers: Mapping[str, Versioned] | None = None,
    ) -> int:
        leadership = self.leadership
        if leadership is None or self.cache.halted is not None:
            return 0
        if items is None:
            items, _ = await self.store.list(WATCHED_PREFIX)
        if only is not None and self._reassign_again:
            only = {**only, **dict.fromkeys(self._reassign_again)}
        self._reassign_again = set()
        if only is None or brokers is None:
            live, topics, offline = cluster_view(items, self._parsed)
            self._note_returns(items, topics)
        else:
            live, offline = brokers_view(brokers)
            topics = topics_view(items, only, self._parsed)
        # a broker in controlled shutdown keeps what it leads until it hands it over, and is
        # elected to nothing (Kafka's controller leaves shutting-down brokers out of elections)
        stopping = shutting_down_ids(brokers if brokers is not None else items)
        decided: list[tuple[TopicPartition, PartitionState]] = []
        leaderless: dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        completed: dict[str, dict[int, tuple[ReplicaAssignment, PartitionState, PartitionState]]] = {}
        for name, (assignment, states) in sorted(topics.items()):
            unclean = self._unclean_allowed(name)
            assigned = items.get(topic_key(name))
            moving = reassignments_in(assigned.value) if assigned is not None else {}
            for p, state in sorted(states.items()):
                replicas = assignment.get(p)
                if replicas is None:
                    self._returned.pop(TopicPartition(name, p), None)
                    continue
                # a replica in a failed log dir counts as a dead broker's
                tp = TopicPartition(name, p)
                usable = live - offline.get(tp, set())
                returned = self._returned_in(tp, state)
                if state.leader in usable and state.leader not in returned:
                    new = shrink_dead_from_isr(state, usable - returned)
                    if new is None:
                        self._returned.pop(tp, None)
                        if p in moving:  # a reassignment ends once its target is in the ISR
                            done = completion(moving[p], state, usable - stopping - returned)
                            if done is not None:
                                completed.setdefault(name, {})[p] = (*done, state)
                        continue
                else:
                    new = elect_leader(replicas, state, usable - stopping, unclean, returned)
                    if new is None:
                        leaderless[tp] = (replicas, state.isr)
                        if self._leaderless.get(tp) != leaderless[tp]:
                            log.warning("%s has no eligible leader (replicas %s, isr %s)", tp, replicas, state.isr)
                        continue
                decided.append((tp, new))
        outcomes = await self._write_states(leadership, decided)
        for tp, outcome in outcomes.items():
            if outcome is _Write.WRITTEN:
                self._returned.pop(tp, None)
        for name, changes in sorted(completed.items()):
            assigned = items.get(topic_key(name))
            if assigned is None or self.leadership is not leadership:
                continue
            room = self._partitions_per_txn()
            if room is not None and len(changes) > room:  # the rest on the pass this write brings
                changes = dict(sorted(changes.items())[:room])
                self._reassign_again.add(name)
            written = await self._write_topic(leadership, name, assigned, changes, check_all_states=True)
            if written is _Write.STALE:
                self._reassign_again.add(name)
            elif written is _Write.WRITTEN:
                for p, (a, _, _) in sorted(changes.items()):
                    log.info("%s-%d: reassignment completed; replicas %s", name, p, list(a.replicas))
        if only is not None and brokers is not None:  # the other partitions' entries still hold
            kept = {tp: e for tp, e in self._leaderless.items() if not covers(only, tp)}
            leaderless = kept | leaderless
        self._leaderless = leaderless
        return sum(1 for o in outcomes.values() if o is _Write.WRITTEN)

    def _note_returns(self, items: Mapping[str, Versioned], topics: TopicsView) -> None:
        """Kafka's controller on a broker change (``processBrokerChange``): a broker whose epoch
        (its registration's create revision) changed since the last pass over every partition
        restarted, perhaps between two passes (its registration was deleted and created again),
        and one not registered then was dead. Either comes back as a new replica: a leadership
        or an ISR place its partition states still give it predate its return, and are not
        taken on trust (its log may have lost an unflushed tail). Each such partition is noted
        for :meth:`_returned_in` until a pass writes it."""
        epochs = broker_epochs(items)
        before, self._broker_epochs = self._broker_epochs, epochs
        if before is None:
            return
        back = {b for b, epoch in epochs.items() if before.get(b) != epoch}
        if not back:
            return
        noted = 0
        for name, (_, states) in topics.items():
            for p, state in states.items():
                named = back.intersection((state.leader, *state.isr))
                if named:
                    self._returned[TopicPartition(name, p)] = (state.leader_epoch, frozenset(named))
                    noted += 1
        log.info("brokers %s came back: deciding the %d partitions they led or were in sync for", sorted(back), noted)

    def _returned_in(self, tp: TopicPartition, state: PartitionState) -> frozenset[int]:
        """The brokers ``state`` names that came back since it was written (its leader epoch is
        still the noted one: once elected again, a leader is of its new life)."""
        noted = self._returned.get(tp)
        if noted is None:
            return frozenset()
        if noted[0] != state.leader_epoch:
            del self._returned[tp]
            return frozenset()
        return noted[1]

    async def _check_imbalance_forever(self, view: FollowedView) -> None:
        """Kafka's auto leader rebalance task for one view of a term: the first check
        :data:`FIRST_IMBALANCE_CHECK_S` in, then one every ``leader.imbalance.check.interval.seconds``
        (both read again each time, as is ``auto.leader.rebalance.enable``). A check that finds
        the store unreachable is logged and left to the next one: it is no reason to end the
        term (the election passes, which must not be skipped, do end it)."""
        interval = float(self.config["leader.imbalance.check.interval.seconds"])
        await trio.sleep(min(FIRST_IMBALANCE_CHECK_S, interval))
        while True:
            if self.config["auto.leader.rebalance.enable"]:
                try:
                    await self.balance_leaders(view.items)
                except MetadataUnavailable as exc:
                    log.warning("leader-imbalance check skipped: %s", one_line(exc))
            await trio.sleep(float(self.config["leader.imbalance.check.interval.seconds"]))

    async def balance_leaders(self, items: Mapping[str, Versioned] | None = None) -> int:
        """One leader-imbalance check (Kafka's ``checkAndTriggerAutoLeaderRebalance``) over one
        consistent ``/brokers/`` listing (``items``, else a fresh one): the moves
        :func:`leader_imbalance_moves` finds, each written as a preferred-leader election
        (leader epoch + 1, the same fenced compare-and-set as every other election); returns
        how many were written. A write that loses to a concurrent change is left to the next
        check."""
        async with self._deciding:
            leadership = self.leadership
            moved = 0
            if leadership is not None and self.cache.halted is None:
                if items is None:
                    items, _ = await self.store.list(WATCHED_PREFIX)
                live, topics, offline = cluster_view(items, self._parsed)
                percentage = int(self.config["leader.imbalance.per.broker.percentage"])
                moves = leader_imbalance_moves(topics, live - shutting_down_ids(items), offline, percentage)
                if moves and any_reassigning(items):
                    # as Kafka's controller: no automatic preferred elections while partitions
                    # move (the target's first replica may lead before the move completes)
                    log.info("leader imbalance: %d moves left for after the reassignments in progress", len(moves))
                    moves = []
                outcomes = await self._write_states(leadership, moves)
                moved = sum(1 for o in outcomes.values() if o is _Write.WRITTEN)
            self.imbalance_checks += 1
            return moved

    async def elect_requested(
        self, election_type: ElectionType, partitions: Collection[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, ElectLeadersResult]]:
        """An ElectLeaders request's elections (Kafka's ``processReplicaLeaderElection``):
        (the leader elected for each partition whose state was written, the answer for each
        other one). Decided, like the controller's own passes, from one consistent listing of
        ``/brokers/`` and written by the same fenced compare-and-set. A write that loses to a
        concurrent change (a leader's ISR update) is decided again on a fresh listing, at most
        :data:`REQUESTED_ELECTION_ROUNDS` times. Not the controller: NOT_CONTROLLER for all."""
        elected: dict[TopicPartition, int] = {}
        answers: dict[TopicPartition, ElectLeadersResult] = {}
        pending = list(dict.fromkeys(partitions))
        unreachable: str | None = None
        async with self._deciding:
            try:
                await self._elect_rounds(election_type, pending, elected, answers)
            except MetadataUnavailable as exc:
                # elections already written stay; the rest are answered as timed out (retriable)
                unreachable = str(exc)
                log.warning("ElectLeaders: the metadata store is unreachable: %s", exc)
        pending = [tp for tp in pending if tp not in answers and tp not in elected]
        for tp in pending:
            if unreachable is not None:
                answers[tp] = ElectLeadersResult(
                    ErrorCode.REQUEST_TIMED_OUT, f"the metadata store is unreachable: {unreachable}"
                )
            elif self.leadership is None or self.cache.halted is not None:
                answers[tp] = ElectLeadersResult(
                    ErrorCode.NOT_CONTROLLER, f"broker {self.config.broker_id} is not the controller"
                )
            else:
                answers[tp] = ElectLeadersResult(
                    ErrorCode.REQUEST_TIMED_OUT, "the partition state kept changing during the election; try again"
                )
        return elected, answers

    async def _elect_rounds(
        self,
        election_type: ElectionType,
        pending: list[TopicPartition],
        elected: dict[TopicPartition, int],
        answers: dict[TopicPartition, ElectLeadersResult],
    ) -> None:
        """:meth:`elect_requested`'s rounds: fill ``elected`` and ``answers`` for ``pending``."""
        for _ in range(REQUESTED_ELECTION_ROUNDS):
            leadership = self.leadership
            if not pending or leadership is None or self.cache.halted is not None:
                break
            items, _ = await self.store.list(WATCHED_PREFIX)
            live, topics, offline = cluster_view(items)
            live -= shutting_down_ids(items)
            decisions: list[tuple[TopicPartition, PartitionState]] = []
            async for tp in paced(pending):
                replicas = topics.get(tp.topic, ({}, {}))[0].get(tp.partition)
                state = topics.get(tp.topic, ({}, {}))[1].get(tp.partition)
                if replicas is None or state is None:
                    answers[tp] = ElectLeadersResult(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
                    )
                    continue
                decided = decide_election(election_type, replicas, state, live - offline.get(tp, set()))
                if isinstance(decided, ElectLeadersResult):
                    answers[tp] = decided
                    continue
                decisions.append((tp, decided))
            outcomes = await self._write_states(leadership, decisions)
            stale = [tp for tp, _ in decisions if outcomes.get(tp) is _Write.STALE]
            changed: set[str] = set()
            for tp, new in decisions:
                if outcomes.get(tp) is _Write.WRITTEN:
                    elected[tp] = new.leader
                    changed.add(tp.topic)
            for name in sorted(changed):
                await self.cache.refresh_topic(name)
            pending = [tp for tp in pending if tp not in answers and tp not in elected]
            if pending and stale:
                log.info("elections of %s lost to concurrent changes; deciding again", ", ".join(map(str, stale)))

    async def alter_reassignments(
        self, requested: Mapping[TopicPartition, Sequence[int] | None], *, allow_replication_factor_change: bool = True
    ) -> dict[TopicPartition, ReassignmentResult]:
        """An AlterPartitionReassignments request (Kafka's ``onPartitionReassignment`` start,
        KIP-455): per partition, the target replicas to move to, or None to cancel. Decided
        from one consistent listing of ``/brokers/`` (:func:`~odradek.broker.reassignment.alter`)
        and written per topic as one fenced compare-and-set of its assignment and the states
        that change (a cancel or a replaced target takes replicas out of the ISR). The answer
        comes once the change is written (and this broker's cache has it, so a
        ListPartitionReassignments that follows sees it), not when the reassignment completes:
        the decision passes complete it. A write that loses to a concurrent change is decided
        again on a fresh listing, up to :data:`REQUESTED_ELECTION_ROUNDS` times (then
        REQUEST_TIMED_OUT); NOT_CONTROLLER once this broker is deposed."""
        results: dict[TopicPartition, ReassignmentResult] = {}
        unreachable: str | None = None
        async with self._deciding:
            try:
                await self._alter_rounds(requested, results, allow_replication_factor_change)
            except MetadataUnavailable as exc:
                unreachable = str(exc)
                log.warning("AlterPartitionReassignments: the metadata store is unreachable: %s", exc)
        for tp in requested:
            if tp in results:
                continue
            if unreachable is not None:
                why = f"the metadata store is unreachable: {unreachable}"
                results[tp] = ReassignmentResult(ErrorCode.REQUEST_TIMED_OUT, why)
            elif self.leadership is None or self.cache.halted is not None:
                why = f"broker {self.config.broker_id} is not the controller"
                results[tp] = ReassignmentResult(ErrorCode.NOT_CONTROLLER, why)
            else:
                why = "the partition kept changing during the reassignment; try again"
                results[tp] = ReassignmentResult(ErrorCode.REQUEST_TIMED_OUT, why)
        return results

    async def _alter_rounds(
        self,
        requested: Mapping[TopicPartition, Sequence[int] | None],
        results: dict[TopicPartition, ReassignmentResult],
        allow_replication_factor_change: bool,
    ) -> None:
        """:meth:`alter_reassignments`' rounds, each on a fresh listing: fill ``results``. A
        round writes at most :meth:`_partitions_per_txn` partitions of a topic (the rest wait
        for the next round); only rounds that lost a compare-and-set count against
        :data:`REQUESTED_ELECTION_ROUNDS`."""
        lost_rounds = 0
        while lost_rounds < REQUESTED_ELECTION_ROUNDS:
            leadership = self.leadership
            pending = [tp for tp in requested if tp not in results]
            if not pending or leadership is None or self.cache.halted is not None:
                return
            items, _ = await self.store.list(WATCHED_PREFIX)
            live, _, offline = cluster_view(items)
            live -= shutting_down_ids(items)
            by_topic: dict[str, list[TopicPartition]] = {}
            for tp in pending:
                by_topic.setdefault(tp.topic, []).append(tp)
            written: set[str] = set()
            lost = False
            for name, tps in sorted(by_topic.items()):
                assigned = items.get(topic_key(name))
                changes = self._decide_alter(
                    name, tps, items, live, offline, requested, results, allow_replication_factor_change
                )
                if not changes or assigned is None:
                    continue
                outcome = await self._write_topic(leadership, name, assigned, changes, check_all_states=False)
                if outcome is _Write.DEPOSED:
                    return
                lost = lost or outcome is _Write.STALE
                if outcome is _Write.WRITTEN:
                    written.add(name)
                    for p, (a, _, _) in sorted(changes.items()):
                        results[TopicPartition(name, p)] = ReassignmentResult(ErrorCode.NONE)
                        log.info(
                            "%s-%d: replicas %s (adding %s, removing %s)",
                            name, p, list(a.replicas), list(a.adding), list(a.removing),
                        )  # fmt: skip
            for name in sorted(written):
                await self.cache.refresh_topic(name)
            if lost:
                lost_rounds += 1
            elif not written:
                return  # every partition left is answered (or the controller is gone)

    def _decide_alter(
        self,
        name: str,
        tps: Sequence[TopicPartition],
        items: Mapping[str, Versioned],
        live: set[int],
        offline: Mapping[TopicPartition, set[int]],
        requested: Mapping[TopicPartition, Sequence[int] | None],
        results: dict[TopicPartition, ReassignmentResult],
        allow_replication_factor_change: bool,
    ) -> dict[int, tuple[ReplicaAssignment, PartitionState, PartitionState]]:
        """One topic's partitions of an AlterPartitionReassignments round, decided from the
        listing ``items``: the answers that need no write go into ``results``; returns the
        changes to write (at most :meth:`_partitions_per_txn` of them)."""
        assigned = items.get(topic_key(name))
        current = assignments_of(json.loads(assigned.value)) if assigned is not None else {}
        changes: dict[int, tuple[ReplicaAssignment, PartitionState, PartitionState]] = {}
        room = self._partitions_per_txn()
        for tp in tps:
            sv = items.get(partition_state_key(name, tp.partition))
            if tp.partition not in current or sv is None:
                results[tp] = ReassignmentResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            if room is not None and len(changes) >= room:
                continue  # the next round writes it
            state = PartitionState.decode(sv)
            target = requested[tp]
            decided = alter(
                current[tp.partition],
                None if target is None else tuple(target),
                state,
                live - offline.get(tp, set()),
                allow_replication_factor_change=allow_replication_factor_change,
            )
            if isinstance(decided, ReassignmentResult):
                results[tp] = decided
            else:
                changes[tp.partition] = (*decided, state)
        return changes

    def _partitions_per_txn(self) -> int | None:
        """How many partitions' changes one of :meth:`_write_topic`'s transactions may carry:
        the store's limit on a transaction's writes and checks (etcd's ``--max-txn-ops``) less
        the assignment and the fence; None when the store has none."""
        limit = getattr(self.store, "max_txn_ops", None)
        return max(1, limit - 2) if isinstance(limit, int) and limit > 0 else None

    async def _write_topic(
        self,
        leadership: Leadership,
        topic: str,
        assigned: Versioned,
        changes: Mapping[int, tuple[ReplicaAssignment, PartitionState, PartitionState]],
        *,
        check_all_states: bool,
    ) -> _Write:
        """Write ``topic``'s new assignment (``assigned`` with each changed partition's
        :class:`ReplicaAssignment`) and the partition states that change with it, in one
        transaction fenced by this controller's epoch: a compare-and-set on the assignment's
        version and on each changed partition's state version (``changes``: partition ->
        (assignment, new state, the state it was decided from; the same object when the state
        stays)). A reassignment's end is decided on its ISR, so with ``check_all_states`` the
        state is checked even when it is not written (a start is not decided on it)."""
        doc = with_assignments(json.loads(assigned.value), {p: a for p, (a, _, _) in changes.items()})
        checks = [leadership.fence, Check(topic_key(topic), assigned.version)]
        ops = [Put(topic_key(topic), doc)]
        for p, (_, new, old) in sorted(changes.items()):
            key = partition_state_key(topic, p)
            if new is not old or check_all_states:
                checks.append(Check(key, old.version))
            if new is not old:
                ops.append(Put(key, new.to_json(leadership.epoch)))
        outcome = await self._fenced_txn(leadership, checks, ops)
        if outcome is not _Write.WRITTEN:
            return outcome
        for p, (_, new, old) in sorted(changes.items()):
            if new is not old:
                log.info("%s-%d: leader %d at epoch %d, isr %s", topic, p, new.leader, new.leader_epoch, list(new.isr))
        return _Write.WRITTEN

    async def _write_states(
        self, leadership: Leadership, decided: Sequence[tuple[TopicPartition, PartitionState]]
    ) -> dict[TopicPartition, _Write]:
        """Write each decided state (:meth:`_write_state`), up to :data:`STATE_WRITES_IN_FLIGHT`
        at once; returns how each write ended. None is started once a write found this
        controller deposed (those partitions are missing from the result), nor once the store
        failed one: that error is raised when the writes in flight have ended."""
        outcomes: dict[TopicPartition, _Write] = {}

        async def write(entry: tuple[TopicPartition, PartitionState]) -> bool:
            tp, new = entry
            outcomes[tp] = await self._write_state(leadership, tp.topic, tp.partition, new)
            return outcomes[tp] is _Write.WRITTEN

        if decided:  # most passes (an ISR change, a topic created) decide nothing
            await each_in_flight(decided, write, STATE_WRITES_IN_FLIGHT, stop=lambda: self.leadership is not leadership)
        return outcomes

    async def _write_state(self, leadership: Leadership, topic: str, partition: int, new: PartitionState) -> _Write:
        """Write one partition's new state: a compare-and-set on the version it was decided
        from (``new.version``), fenced by this controller's epoch. STALE when the state changed
        meanwhile; DEPOSED (and leadership dropped) when another broker controls by now."""
        key = partition_state_key(topic, partition)
        checks = [leadership.fence, Check(key, new.version)]
        outcome = await self._fenced_txn(leadership, checks, [Put(key, new.to_json(leadership.epoch))])
        if outcome is not _Write.WRITTEN:
            return outcome
        log.info("%s-%d: leader %d at epoch %d, isr %s", topic, partition, new.leader, new.leader_epoch, list(new.isr))
        return _Write.WRITTEN

    async def _fenced_txn(self, leadership: Leadership, checks: Sequence[Check], ops: Sequence[Put]) -> _Write:
        """One of this controller's writes (``checks`` start with its fence): STALE when another
        check failed, DEPOSED (and leadership dropped) when another broker controls by now."""
        try:
            await self.store.txn(checks, ops)
        except MetadataConflict as exc:
            if exc.key == leadership.fence.key:
                log.warning("lost controllership; stopping elections")
                self.leadership = None
                return _Write.DEPOSED
            return _Write.STALE
        return _Write.WRITTEN

    def _unclean_default(self) -> bool:
        """The broker-level ``unclean.leader.election.enable`` in force: its dynamic value (this
        broker's, else the cluster default), else the static config."""
        if self.dynamic is not None:
            return bool(self.dynamic.value(UNCLEAN))
        return bool(self.config[UNCLEAN])

    def _unclean_allowed(self, topic: str) -> bool:
        """Whether ``topic``'s leaderless partitions may elect an out-of-sync replica: the
        topic's own override, else the broker-level value in force. Kafka's controller reads
        the dynamic broker value the same way (``DynamicLogConfig``: the dynamic default sits
        under topic overrides), so setting it with IncrementalAlterConfigs needs no restart."""
        config = self.cache.topic_config(topic)
        if config is not None and UNCLEAN in config.overrides:
            return bool(config.overrides[UNCLEAN])
        return self._unclean_default()

    def _unclean_default_listener(self, view: FollowedView) -> Callable[[], None]:
        """A dynamic-config listener for this term: when the broker-level unclean election
        setting turns on, every partition is decided again (Kafka's controller runs its
        ``UncleanLeaderElectionEnable`` event then); turning it off needs nothing."""
        enabled = self._unclean_default()

        def changed() -> None:
            nonlocal enabled
            now = self._unclean_default()
            if now and not enabled:
                log.info("unclean.leader.election.enable turned on: deciding every partition again")
                view.everything_changed()
            enabled = now

        return changed


class _Write(Enum):
    """How a partition state write ended."""

    WRITTEN = "written"
    STALE = "stale"  #: the state changed since it was read: decide again
    DEPOSED = "deposed"  #: another broker is the controller now


def one_line(exc: BaseException) -> str:
    """An error for a log line: its type and message on one line (a store's client library
    may raise errors whose text spans lines, such as gRPC's)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
