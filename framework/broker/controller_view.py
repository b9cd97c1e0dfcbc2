"""The controller's view of ``/brokers/``: a listing kept current by a watch
(:class:`FollowedView`) and the pure functions that decode it into live brokers, assignments and
partition states for a decision pass (:func:`cluster_view`, :func:`topics_view`), decoding only
what changed since the last pass.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from typing import Any

import trio

from ..interfaces import MetadataCompacted, MetadataStore, TopicPartition, Versioned
from .log_dir_failures import offline_replicas_of
from .metadata_cache import BROKERS_PREFIX, TOPICS_PREFIX, PartitionState
from .reassignment import reassignments_in

log = logging.getLogger(__name__)

#: registrations and partition states: the controller's election triggers
WATCHED_PREFIX = "/brokers/"


class FollowedView:
    """A ``/brokers/`` listing kept current by a watch from its revision, so each decision pass
    reads the store's latest state without listing it again: a listing per change made the
    controller's work grow with the square of the topics (on ZooKeeper a listing walks every
    znode), and creating a few hundred topics took minutes. Changes that arrive while a pass
    runs are decided together by the next one."""

    def __init__(self, store: MetadataStore, items: dict[str, Versioned], revision: int) -> None:
        self.store = store
        self.items = items
        #: the keys outside ``/brokers/topics/`` (registrations, offline replicas)
        self.brokers = {k: v for k, v in items.items() if not k.startswith(TOPICS_PREFIX)}
        self.revision = revision
        #: partitions changed since the last :meth:`take_changed`; None: something else did
        self._changed_partitions: Changed | None = {}
        #: the watch ended: the session ended, or (``compacted``) the store must be listed again
        self.ended = False
        self.compacted = False
        self._changed = trio.Event()

    async def follow(self) -> None:
        try:
            async for ev in self.store.watch(WATCHED_PREFIX, after_revision=self.revision):
                log.debug("controller: change of %s at %d", ev.key, ev.revision)
                # a registration's create revision is its broker's epoch (_note_returns)
                value = None if ev.value is None else Versioned(ev.value, ev.version, ev.create_revision)
                for into in (self.items, None if ev.key.startswith(TOPICS_PREFIX) else self.brokers):
                    if into is not None:
                        if value is None:
                            into.pop(ev.key, None)
                        else:
                            into[ev.key] = value
                if not ev.key.startswith(TOPICS_PREFIX):
                    self._changed_partitions = None
                else:
                    name, partition = partition_of(ev.key)
                    self._note_change(name, partition)
                self.revision = ev.revision
                self._changed.set()
        except MetadataCompacted:
            self.compacted = True
        self.ended = True
        self._changed.set()

    def topic_config_changed(self, topic: str) -> None:
        """The metadata cache's listener: ``topic``'s config changed, so its partitions are
        decided again (Kafka's controller elects on ``unclean.leader.election.enable`` being
        set; a partial pass otherwise never looked at a leaderless partition again until a
        broker came or went)."""
        self._note_change(topic, None)
        self._changed.set()

    def everything_changed(self) -> None:
        """Every partition is decided again by the next pass: a cluster-wide setting the
        elections read changed (the dynamic ``unclean.leader.election.enable`` default was
        turned on, on which Kafka's controller elects every leaderless partition it allows)."""
        self._changed_partitions = None
        self._changed.set()

    def _note_change(self, topic: str, partition: int | None) -> None:
        """Record a change of ``topic``'s ``partition`` (None: of the whole topic)."""
        changed = self._changed_partitions
        if changed is None:
            return
        if partition is None:
            changed[topic] = None
        elif topic not in changed:
            changed[topic] = {partition}
        else:
            partitions = changed[topic]
            if partitions is not None:
                partitions.add(partition)

    async def changed(self) -> None:
        """Wait for a change since the last call (or for the watch's end)."""
        await self._changed.wait()
        self._changed = trio.Event()

    def take_changed(self) -> Changed | None:
        """The partitions changed since the last call (per topic; None for a topic whose
        assignment or config changed), or None when a registration or an offline replica
        changed too (every partition must be decided again)."""
        changed, self._changed_partitions = self._changed_partitions, {}
        return changed


#: decoded ``/brokers/`` values of the last decision pass: key -> (the Versioned it came from, decoded)
ParsedItems = dict[str, tuple[Versioned, Any]]
#: partitions to decide: topic -> its partitions, or None for all of them
Changed = dict[str, set[int] | None]
#: per topic: (its assignment: partition -> replicas, its partition states)
TopicsView = dict[str, tuple[dict[int, tuple[int, ...]], dict[int, PartitionState]]]


def partition_of(key: str) -> tuple[str, int | None]:
    """(topic, partition) of a key under ``/brokers/topics/``: the partition of a partition
    state key, None for any other key of the topic (its assignment)."""
    parts = key[len(TOPICS_PREFIX) :].split("/")
    if len(parts) == 4 and parts[1] == "partitions" and parts[3] == "state" and parts[2].isdigit():
        return parts[0], int(parts[2])
    return parts[0], None


def covers(changed: Mapping[str, Collection[int] | None], tp: TopicPartition) -> bool:
    """Whether ``changed`` covers ``tp``."""
    if tp.topic not in changed:
        return False
    partitions = changed[tp.topic]
    return partitions is None or tp.partition in partitions


def cluster_view(
    items: Mapping[str, Versioned], parsed: ParsedItems | None = None
) -> tuple[set[int], TopicsView, dict[TopicPartition, set[int]]]:
    """Live broker ids, per topic (assignment, partition states), and the live brokers whose
    replica of a partition is offline (a failed log dir), from a ``/brokers/`` listing.

    ``parsed`` (the controller's, kept across passes) holds what the last pass decoded; a value
    still the same object is not decoded again, and the dict is refilled with this pass's
    values only. Decoding every assignment and state on every pass was most of a pass's time
    with a thousand topics, and a pass runs on every change."""
    live: set[int] = set()
    topics: TopicsView = {}
    earlier: ParsedItems = dict(parsed) if parsed is not None else {}
    if parsed is not None:
        parsed.clear()
    for key, v in items.items():
        if key.startswith(BROKERS_PREFIX):
            if key[len(BROKERS_PREFIX) :].isdigit():
                live.add(int(key[len(BROKERS_PREFIX) :]))
            continue
        if not key.startswith(TOPICS_PREFIX):
            continue
        parts = key[len(TOPICS_PREFIX) :].split("/")
        if len(parts) == 1:
            decode: Any = decode_assignment
        elif len(parts) == 4 and parts[1] == "partitions" and parts[3] == "state":
            decode = PartitionState.decode
        else:
            continue
        seen = earlier.get(key)
        value = seen[1] if seen is not None and seen[0] is v else decode(v)
        if parsed is not None:
            parsed[key] = (v, value)
        entry = topics.setdefault(parts[0], ({}, {}))
        if len(parts) == 1:
            entry[0].update(value)
        else:
            entry[1][int(parts[2])] = value
    return live, topics, offline_replicas_of(items, live)


def any_reassigning(items: Mapping[str, Versioned]) -> bool:
    """Whether a ``/brokers/`` listing has a partition being reassigned."""
    return any(
        reassignments_in(v.value)
        for key, v in items.items()
        if key.startswith(TOPICS_PREFIX) and "/" not in key[len(TOPICS_PREFIX) :]
    )


def broker_epochs(items: Mapping[str, Versioned]) -> dict[int, int]:
    """Registered broker ids -> their broker epochs (registration create revisions), from a
    ``/brokers/`` listing."""
    return {
        int(key[len(BROKERS_PREFIX) :]): v.create_revision
        for key, v in items.items()
        if key.startswith(BROKERS_PREFIX) and key[len(BROKERS_PREFIX) :].isdigit()
    }


def brokers_view(brokers: Mapping[str, Versioned]) -> tuple[set[int], dict[TopicPartition, set[int]]]:
    """Live broker ids and offline replicas from the keys of ``/brokers/`` that are not topics'."""
    live = {
        int(key[len(BROKERS_PREFIX) :])
        for key in brokers
        if key.startswith(BROKERS_PREFIX) and key[len(BROKERS_PREFIX) :].isdigit()
    }
    return live, offline_replicas_of(brokers, live)


def topics_view(
    items: Mapping[str, Versioned], names: Mapping[str, Collection[int] | None], parsed: ParsedItems
) -> TopicsView:
    """(assignment, partition states) of the topics ``names`` that exist in ``items``, with the
    states of only the partitions ``names`` lists for each (None: all), decoding only values
    ``parsed`` does not hold yet (and adding them)."""

    def decoded(key: str, v: Versioned, decode: Any) -> Any:
        seen = parsed.get(key)
        if seen is not None and seen[0] is v:
            return seen[1]
        value = decode(v)
        parsed[key] = (v, value)
        return value

    topics: TopicsView = {}
    for name in names:
        key = TOPICS_PREFIX + name
        v = items.get(key)
        if v is None:
            continue  # deleted: nothing left to decide
        assignment: dict[int, tuple[int, ...]] = decoded(key, v, decode_assignment)
        states: dict[int, PartitionState] = {}
        wanted = names[name]
        for p in assignment if wanted is None else sorted(wanted):
            state_key = f"{key}/partitions/{p}/state"
            sv = items.get(state_key)
            if sv is not None:
                states[p] = decoded(state_key, sv, PartitionState.decode)
        topics[name] = (assignment, states)
    return topics


def decode_assignment(v: Versioned) -> dict[int, tuple[int, ...]]:
    doc = json.loads(v.value)
    return {int(p): tuple(int(r) for r in reps) for p, reps in doc["partitions"].items()}
