"""Failed log dirs: take their partitions offline and tell the controller (Kafka's
``LogDirFailureChannel`` and ``ReplicaManager.handleLogDirFailure``).

A log dir that is removed, unmounted or turned read-only under a running broker cannot serve its
partitions any more. Left alone, the broker kept leading them and answering every produce with
KAFKA_STORAGE_ERROR, and its followers stayed in the ISRs, so clients of a replicated topic
stalled although two healthy replicas had every record. The storage engine says which dirs are
offline (``LogStorage.describe_log_dirs``, async: the segment engine asks the file system in a
worker thread, so a stuck mount never freezes the event loop); :class:`LogDirFailureHandler`
asks it from a task of its own (:meth:`LogDirFailureHandler.run`), woken by storage errors, and
every :data:`CHECK_INTERVAL_S`, then

1. takes the partitions of a newly failed dir offline in the replica manager (produce and fetch
   answer KAFKA_STORAGE_ERROR, the replica fetchers drop them, checkpoints skip them): they stay
   offline until the broker is restarted with the dir repaired, as in Kafka;
2. publishes them in the metadata store as this broker's offline replicas, an ephemeral
   ``/brokers/offline_replicas/<id>`` (:data:`OFFLINE_REPLICAS_PREFIX`), the role of Kafka's
   ZooKeeper ``/log_dir_event_notification`` and KRaft's offline dirs in the broker heartbeat.
   The controller treats those replicas like replicas of a dead broker (a new leader from the
   rest of the ISR, the broker out of the ISR) and leaders never add them back to an ISR. The
   key dies with the session, so a restarted broker's replicas count again; a broker that lost
   its session and registered again writes it anew at its next check;
3. when no log dir is online any more, or the dir holding the metadata store failed (meta_local
   keeps its file in the first log dir: Kafka halts a broker whose metadata log dir failed),
   sets :attr:`LogDirFailureHandler.must_stop`: the server stops the broker (Kafka halts it),
   whose partitions the others lead by then. Without this, a broker whose meta_local dir
   failed lived on with a store it could not write, and warned every check that its offline
   replicas were not published.

A failed append cannot wait for a check (it happens on the hot path, on the trio thread), so its
line waits instead: the next check tells a failed dir's append failures, which the dir's one
ERROR line covers, from the others (a full disk), which the replica manager's rate-limited
failure log gets then.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import trio

from ..errors import OdradekError
from ..interfaces import LogStorage, MetadataConflict, MetadataStore, TopicPartition, Versioned, described_log_dirs
from .metadata_cache import encode
from .replica_manager import ReplicaManager, log_dir_of

log = logging.getLogger(__name__)

#: ``<prefix><broker id>``: the partitions whose replica on that broker is offline (ephemeral)
OFFLINE_REPLICAS_PREFIX = "/brokers/offline_replicas/"
#: how often the log dirs are checked when no storage error prompts it
CHECK_INTERVAL_S = 5.0
#: the least time between two checks prompted by failed appends (a full disk fails every append,
#: and a full disk is not a failed dir)
MIN_CHECK_INTERVAL_S = 1.0


def offline_replicas_key(broker_id: int) -> str:
    return f"{OFFLINE_REPLICAS_PREFIX}{broker_id}"


def encode_offline_replicas(log_dirs: Iterable[str], partitions: Iterable[TopicPartition]) -> bytes:
    topics: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return encode({"version": 1, "log_dirs": sorted(log_dirs), "partitions": topics})


def decode_offline_replicas(value: bytes) -> frozenset[TopicPartition]:
    """The partitions an offline-replicas value names (none for a value that is not one)."""
    try:
        topics = json.loads(value).get("partitions", {})
        return frozenset(TopicPartition(t, int(p)) for t, ps in topics.items() for p in ps)
    except (ValueError, AttributeError, TypeError):
        return frozenset()


def offline_replicas_of(items: Mapping[str, Versioned], live: Iterable[int]) -> dict[TopicPartition, set[int]]:
    """From a ``/brokers/`` listing: partition -> the live brokers whose replica of it is offline."""
    out: dict[TopicPartition, set[int]] = {}
    alive = set(live)
    for key, v in items.items():
        if not key.startswith(OFFLINE_REPLICAS_PREFIX):
            continue
        suffix = key[len(OFFLINE_REPLICAS_PREFIX) :]
        if not suffix.isdigit() or int(suffix) not in alive:
            continue
        for tp in decode_offline_replicas(v.value):
            out.setdefault(tp, set()).add(int(suffix))
    return out


class LogDirsFailed(OdradekError):
    """Every log dir of the broker is offline: nothing is left to serve."""


@dataclass
class _Check:
    """One check of the log dirs, from before it starts until it is done."""

    done: trio.Event = field(default_factory=trio.Event)
    #: whether a dir went offline in it
    found: bool = False
    #: the append failures reported before it started, which it judges: partition -> (the log
    #: dir named, the last error, how many)
    append_failures: dict[TopicPartition, tuple[str, BaseException, int]] = field(default_factory=dict)


class LogDirFailureHandler:
    """Finds failed log dirs, takes their partitions offline and publishes them (module doc)."""

    def __init__(
        self,
        broker_id: int,
        storage: LogStorage,
        store: MetadataStore,
        replica_manager: ReplicaManager,
        *,
        clock: Callable[[], float] = trio.current_time,
        metadata_dir: str | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.storage = storage
        self.store = store
        self.replica_manager = replica_manager
        self.clock = clock
        #: the log dir the metadata store keeps its data in (meta_local's first dir), if any
        self.metadata_dir = metadata_dir
        #: offline log dir -> why
        self.offline_dirs: dict[str, str] = {}
        #: the storage's describe_log_dirs raised at the last check (logged once until it answers)
        self._describe_failing = False
        #: set once no log dir is online, or the metadata store's dir is offline
        self.must_stop = trio.Event()
        self.failure_reason = ""
        self._wakeup = trio.Event()
        #: when a failed append last woke the check (a full disk fails every append, and each
        #: check asks every dir's volume)
        self._last_prompted = -MIN_CHECK_INTERVAL_S
        #: the check that starts next
        self._next = _Check()
        replica_manager.on_append_failure = self.append_failed
        replica_manager.check_log_dirs = self.checked

    def append_failed(self, tp: TopicPartition, where: str, exc: BaseException) -> None:
        """An append to ``tp`` (in the log dir ``where``) failed: the replica manager calls this
        synchronously, on the hot path. Its line waits for the next check (module doc), which
        this wakes at most once per :data:`MIN_CHECK_INTERVAL_S`; later failures wait for the
        next one woken or the periodic one."""
        failures = self._next.append_failures
        earlier = failures.get(tp)
        failures[tp] = (where, exc, 1 if earlier is None else earlier[2] + 1)
        now = self.clock()
        if now - self._last_prompted >= MIN_CHECK_INTERVAL_S:
            self._last_prompted = now
            self._wakeup.set()

    async def checked(self) -> bool:
        """Wake the check and wait for it (a checkpoint failed: the replica manager writes again
        at once, without logging, if it was a failed dir's). Whether a dir went offline in it."""
        waited = self._next
        self._wakeup.set()
        await waited.done.wait()
        return waited.found

    async def check(self) -> bool:
        """Ask the storage which dirs are offline; take the partitions of newly failed ones
        offline. Whether any dir went offline now (publishing follows in :meth:`run`). Only
        :meth:`run` calls it, so checks never overlap."""
        try:
            dirs = await described_log_dirs(self.storage)
        except Exception as exc:  # a storage engine's bug: the broker and its other dirs go on
            if not self._describe_failing:
                log.error("cannot check the log dirs: the storage's describe_log_dirs failed", exc_info=exc)
            self._describe_failing = True
            return False
        if self._describe_failing:
            log.info("the storage's describe_log_dirs answers again: log dirs are checked")
            self._describe_failing = False
        if dirs is None:  # an engine written before describe_log_dirs: never offline
            return False
        failed = [d for d in dirs if d.error is not None and d.path not in self.offline_dirs]
        if not failed:
            return False
        rm = self.replica_manager
        all_failed = all(d.error is not None for d in dirs)
        store_lost = next((d for d in failed if d.path == self.metadata_dir), None)
        for d in failed:
            self.offline_dirs[d.path] = d.error or ""
            tps = set(d.partitions) | {tp for tp, p in rm.partitions.items() if log_dir_of(p) == d.path}
            hosted = rm.take_offline(tps, d.path)
            if not all_failed and store_lost is None:  # else the broker stops, with one line
                log.error(
                    "%s; %d partition(s) taken offline (%d hosted%s): their other replicas take over until "
                    "this broker is restarted with the dir repaired",
                    d.error, len(tps), len(hosted), _names(hosted),
                )  # fmt: skip
        if all_failed:
            self.failure_reason = f"broker {self.broker_id}: every log dir is offline, shutting down: " + "; ".join(
                self.offline_dirs.values()
            )
            self.must_stop.set()
        elif store_lost is not None:
            self.failure_reason = (
                f"broker {self.broker_id}: the log dir holding the metadata store is offline, shutting down: "
                f"{store_lost.error}"
            )
            self.must_stop.set()
        return True

    async def run(self) -> None:
        """Check every :data:`CHECK_INTERVAL_S` (or when woken), and keep the published offline
        replicas current (written again after a lost session took the ephemeral away). The
        broker runs this in its nursery: a check waiting on a stuck mount holds this task only."""
        while True:
            with trio.move_on_after(CHECK_INTERVAL_S):
                await self._wakeup.wait()
            self._wakeup = trio.Event()
            await self._check_once()
            try:
                await self.publish()
            except Exception as exc:  # the store away, or kept in the failed dir (meta_local)
                log.warning("offline replicas not published yet: %s", exc)

    async def _check_once(self) -> None:
        this, self._next = self._next, _Check()
        try:
            this.found = await self.check()
        finally:
            this.done.set()
            self._judge(this.append_failures)

    def _judge(self, failures: Mapping[TopicPartition, tuple[str, BaseException, int]]) -> None:
        """Log the append failures a check found not to be a failed dir's, through the replica
        manager's rate-limited failure log (a failed dir's partitions are offline by now)."""
        rm = self.replica_manager
        for tp, (where, exc, count) in failures.items():
            if tp not in rm.offline_partitions:
                rm.append_failures.failed(where, exc, count)

    async def publish(self) -> None:
        """Write this broker's offline replicas to the store unless it holds them already (or
        it kept its data in a failed dir: the broker stops, there is nothing to write to)."""
        if not self.offline_dirs or self.metadata_dir in self.offline_dirs:
            return
        key = offline_replicas_key(self.broker_id)
        value = encode_offline_replicas(self.offline_dirs, self.replica_manager.offline_partitions)
        current = await self.store.get(key)
        if current is not None and current.value == value:
            return
        try:
            if current is None:
                await self.store.create(key, value, ephemeral=True)
            else:
                await self.store.put(key, value, expect=current.version)
        except MetadataConflict:
            self._wakeup.set()  # changed meanwhile (a session ending): look again
            return
        count = len(self.replica_manager.offline_partitions)
        log.info("broker %d: published %d offline replica(s)", self.broker_id, count)


def _names(tps: list[TopicPartition]) -> str:
    if not tps:
        return ""
    return ": " + ", ".join(map(str, tps[:10])) + (", ..." if len(tps) > 10 else "")


__all__ = [
    "CHECK_INTERVAL_S",
    "OFFLINE_REPLICAS_PREFIX",
    "LogDirFailureHandler",
    "LogDirsFailed",
    "decode_offline_replicas",
    "encode_offline_replicas",
    "offline_replicas_key",
    "offline_replicas_of",
]
