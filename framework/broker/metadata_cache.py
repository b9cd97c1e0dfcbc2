"""The broker's view of cluster metadata, kept in the MetadataStore (Kafka's ``MetadataCache``).

Layout in the store (Kafka's ZooKeeper paths, JSON values, KRaft record names as a guide):

- ``/cluster/id`` -- the cluster id;
- ``/brokers/ids/<id>`` -- ephemeral broker registration: endpoints per listener, rack;
- ``/brokers/topics/<topic>`` -- the assignment: topic id and partition -> replica list;
- ``/brokers/topics/<topic>/partitions/<p>/state`` -- leader, leader epoch, ISR; its store
  version is the partition epoch, and every change is a compare-and-set on it;
- ``/config/topics/<topic>`` -- topic config overrides (strings, as clients sent them).

:class:`MetadataCache` holds the decoded state in memory and answers every read from it (Metadata
requests never touch the store). It is filled by one ``list`` of the store and kept current by a
gap-free ``watch`` from that list's revision, so changes made by any broker or tool reach it. After
each topic change it *reconciles* this broker with the new state through the replica manager:
partitions it leads become leaders (a new leader epoch starts in their log), partitions it
follows become followers, partitions it no longer hosts are removed, changed topic configs are
applied to the logs live. Writers (:mod:`~odradek.broker.admin`) also call :meth:`MetadataCache.
refresh_topic` after their own writes, so a CreateTopics is usable when it returns; reconciling is
idempotent, so seeing the same change again through the watch is harmless.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import trio

from ..config import Config, TopicConfig
from ..errors import ErrorCode, KafkaError, KafkaStorageError, OdradekError
from ..interfaces import MetadataCompacted, MetadataStore, PartitionLog, TopicPartition, Versioned, WatchEvent
from .replica_manager import ReplicaManager

log = logging.getLogger(__name__)

CLUSTER_ID_KEY = "/cluster/id"
BROKERS_PREFIX = "/brokers/ids/"
TOPICS_PREFIX = "/brokers/topics/"
CONFIG_PREFIX = "/config/topics/"
CONTROLLER_ELECTION = "controller"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
#: the per-partition state (beside the log) holding its topic's id
TOPIC_ID_STATE = "partition.metadata"
_TOPIC_ID = re.compile(r"[0-9a-fA-F]{32}")
_STATE_KEY = re.compile(r"/brokers/topics/([^/]+)/partitions/([0-9]+)/state")
#: how often the controller is asked again when the store cannot tell its changes or failed
CONTROLLER_POLL_S = 1.0
#: how often partitions left unhosted by a storage error (a full disk) are tried again
UNHOSTED_RETRY_S = 10.0


class MetadataStoreReset(OdradekError):
    """The metadata store no longer holds this broker's cluster id (its data was lost and the
    server restarted empty, or the broker now talks to another cluster's store): nothing read
    from it may be acted on. The broker shuts down (see :meth:`MetadataCache.halt`)."""


def parse_topic_id(data: bytes) -> str | None:
    """The topic id a ``partition.metadata`` state holds (the hex of its UUID, as written by
    :meth:`MetadataCache._reconcile`), lower-cased; None when the bytes are not one."""
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    return text.lower() if _TOPIC_ID.fullmatch(text) else None


def topic_key(topic: str) -> str:
    return f"{TOPICS_PREFIX}{topic}"


#: ``<prefix><broker id>``: ephemeral, created by a broker when its controlled shutdown starts;
#: dies with its session, so a restarted broker (a new session) is eligible again. Under
#: ``/brokers/`` so the controller's listing and watch see it: a broker in controlled shutdown
#: is elected leader of nothing, and joins no ISR (KIP-841)
SHUTTING_DOWN_PREFIX = "/brokers/shutting_down/"


def shutting_down_ids(items: Iterable[str]) -> set[int]:
    """The brokers in controlled shutdown, from the keys of a ``/brokers/`` listing."""
    n = len(SHUTTING_DOWN_PREFIX)
    return {int(k[n:]) for k in items if k.startswith(SHUTTING_DOWN_PREFIX) and k[n:].isdigit()}


def partition_state_key(topic: str, partition: int) -> str:
    return f"{TOPICS_PREFIX}{topic}/partitions/{partition}/state"


def partition_prefix(topic: str, partition: int) -> str:
    """The prefix below which a partition's keys (its ``state``) live."""
    return f"{TOPICS_PREFIX}{topic}/partitions/{partition}/"


def config_key(topic: str) -> str:
    return f"{CONFIG_PREFIX}{topic}"


def encode(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker: its endpoints by listener name -> (host, port, security protocol)."""

    broker_id: int
    endpoints: Mapping[str, tuple[str, int, str]]
    rack: str | None
    epoch: int

    @classmethod
    def decode(cls, broker_id: int, v: Versioned) -> BrokerRegistration:
        doc = json.loads(v.value)
        eps = {
            e["name"]: (e["host"], int(e["port"]), e.get("security_protocol", "PLAINTEXT")) for e in doc["endpoints"]
        }
        return cls(broker_id, eps, doc.get("rack"), v.create_revision)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Leader, epoch and ISR of one partition; ``version`` is the store's CAS token (Kafka's
    partition epoch). ``controller_epoch`` names the controller that last wrote it, as in
    Kafka's state znode; nothing decides on it, so it is left out of comparisons."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    version: int
    controller_epoch: int = field(default=0, compare=False)

    def to_json(self, controller_epoch: int | None = None) -> bytes:
        """The stored value; ``controller_epoch`` (when given) replaces this state's own."""
        epoch = self.controller_epoch if controller_epoch is None else controller_epoch
        return encode(
            {"leader": self.leader, "leader_epoch": self.leader_epoch, "isr": list(self.isr),
             "controller_epoch": epoch, "version": 1}
        )  # fmt: skip

    @classmethod
    def decode(cls, v: Versioned) -> PartitionState:
        return cls.parse(v.value, v.version)

    @classmethod
    def parse(cls, value: bytes, version: int) -> PartitionState:
        doc = json.loads(value)
        leader, leader_epoch = int(doc["leader"]), int(doc["leader_epoch"])
        return cls(leader, leader_epoch, tuple(doc["isr"]), version, int(doc.get("controller_epoch", 0)))


@dataclass(slots=True)
class TopicState:
    """Everything known about one topic."""

    name: str
    topic_id: str
    assignment: dict[int, tuple[int, ...]]
    version: int  # of the assignment key
    states: dict[int, PartitionState] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)
    config_version: int | None = None
    #: counts the partition states changed in place since the topic was read (a leader or ISR
    #: change): what was derived from ``states`` (a Metadata answer) is stale when it moved
    state_changes: int = 0
    #: partition -> (adding replicas, removing replicas) of each partition being reassigned
    #: (KIP-455, :mod:`~odradek.broker.reassignment`); its ``assignment`` is then the full
    #: replica set, target and original replicas together
    reassigning: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)

    @property
    def num_partitions(self) -> int:
        return len(self.assignment)

    @property
    def replication_factor(self) -> int:
        return len(self.assignment[0]) if self.assignment else 0


class _Listed(NamedTuple):
    """One topic's keys as a listing already read them: those below its key, its assignment,
    its config, and the listing's revision."""

    items: Mapping[str, Versioned]
    assignment: Versioned | None
    config: Versioned | None
    read_at: int


class MetadataCache:
    """Topics, brokers and controller as this broker sees them, reconciled with its partitions."""

    def __init__(self, config: Config, store: MetadataStore, replica_manager: ReplicaManager) -> None:
        self.config = config
        self.store = store
        self.replica_manager = replica_manager
        self.broker_id = config.broker_id
        self.topics: dict[str, TopicState] = {}
        self._names_by_id: dict[str, str] = {}  # see topic_names
        self.brokers: dict[int, BrokerRegistration] = {}
        self.local_endpoints: dict[str, tuple[str, int, str]] = {}
        #: the listener brokers reach each other on (``inter.broker.listener.name``); None: the first
        self.inter_broker_listener: str | None = None
        #: this broker's epoch as its own registration returned it (-1 before): known before the
        #: watch brings the registration back, so a follower's fetch after a re-registration
        #: does not name the epoch of its previous session (KIP-903 refuses that)
        self.registered_epoch = -1
        self.controller_id = -1
        #: set once any broker is known to be the controller
        self.controller_known = trio.Event()
        self.cluster_id = ""
        self.revision = 0
        self._topic_configs: dict[str, TopicConfig] = {}
        self._problems_logged: dict[str, dict[str, Any]] = {}  # topic -> overrides whose problems were logged
        #: the store revision each topic was last read at: watch events at or below it are already
        #: in what was read (creating a 1,000-partition topic is 1,000 events: one refresh, not 1,000)
        self._topic_read_at: dict[str, int] = {}
        #: the store revision each partition's state was last read or changed at, when later
        #: than its topic's read (topic -> partition -> revision): a leader or ISR change of one
        #: partition is taken from its watch event alone, not from a re-read of its whole topic
        #: (a broker failure changes a third of a topic's partitions: a re-read of the topic per
        #: change made the brokers' work grow with the square of the topic's partition count)
        self._partition_read_at: dict[str, dict[int, int]] = {}
        # one reconciliation at a time: the watch and an admin call may refresh the same topic
        self._lock = trio.Lock()
        #: called with a topic's name when a topic this cache knew is deleted (by any broker or
        #: tool), after its local partitions are removed; must not block (the group coordinator
        #: starts removing the topic's committed offsets)
        self.topic_deleted_listeners: list[Callable[[str], None]] = []
        #: called when this broker's own registration (``/brokers/ids/<id>``) is deleted from the
        #: store; must not block (the server registers again if its session still lives)
        self.registration_deleted_listeners: list[Callable[[], None]] = []
        #: called with a topic's name when its effective config changed (the cache holds the new
        #: one by then); must not block (the controller decides the topic's partitions again:
        #: enabling unclean.leader.election.enable may give a leaderless partition its leader)
        self.topic_config_listeners: list[Callable[[str], None]] = []
        #: partitions this broker should host whose log could not be created (a full disk):
        #: the storage error, until hosting one succeeds (CreateTopics reports it)
        self.storage_failures: dict[TopicPartition, KafkaError] = {}
        #: whether the first :meth:`load` deletes stray logs (logs no topic of the metadata owns
        #: here): set by the server, True when the store's cluster id was there before this
        #: start; False (only report them) for a new, empty store, so a broker pointed at the
        #: wrong store never deletes its logs as strays; None (the default): not looked for
        self.delete_stray_logs: bool | None = None
        self._strays_checked = False
        #: why this broker stopped acting on the metadata (the store lost its cluster id), once
        #: :meth:`halt` was called: no reconciliation, no log deletion, no controller work
        self.halted: str | None = None
        #: set by :meth:`halt`; the server shuts the broker down when it is
        self.halted_event = trio.Event()
        #: set (and replaced) after every topic re-read and partition state taken in: see :meth:`next_refresh`
        self._refreshed = trio.Event()

    # -- loading ---------------------------------------------------------------------------------
    async def load(self) -> None:
        """Read the whole state once (the watch continues from its revision) and reconcile."""
        # one snapshot of everything: the watch on "/" starts exactly at its revision (a store
        # like ZooKeeper can resume a watch only from a snapshot of the watched prefix)
        everything, self.revision = await self.store.list("/")
        brokers = {k: v for k, v in everything.items() if k.startswith(BROKERS_PREFIX)}
        topic_items = {k: v for k, v in everything.items() if k.startswith(TOPICS_PREFIX)}
        config_items = {k: v for k, v in everything.items() if k.startswith(CONFIG_PREFIX)}
        self.brokers = {}
        for key, v in brokers.items():
            self._set_broker(key, v)
        names = {_topic_of(k) for k in topic_items} | {k[len(CONFIG_PREFIX) :] for k in config_items}
        # each topic from this one listing: re-reading every topic's keys made a start with a
        # thousand topics wait for several thousand more reads (seconds on ZooKeeper)
        below: dict[str, dict[str, Versioned]] = {}
        for key, v in topic_items.items():
            name = _topic_of(key)
            if key != topic_key(name):
                below.setdefault(name, {})[key] = v
        for name in sorted(n for n in names if n):
            listed = _Listed(
                below.get(name, {}), everything.get(topic_key(name)), everything.get(config_key(name)), self.revision
            )
            await self.refresh_topic(name, listed)
        await self.refresh_controller()
        if self.delete_stray_logs is not None and not self._strays_checked:
            self._strays_checked = True
            async with self._lock:
                await self._remove_stray_logs(delete=self.delete_stray_logs)

    # -- the cluster id guard --------------------------------------------------------------------
    async def check_cluster_id(self, why: str) -> bool:
        """Whether the store still holds this broker's cluster id (``/cluster/id``), read now.

        Called before acting on a change that could be a lost store rather than a real one: a
        re-registration after a lost session (the new session may be on a server restarted with
        an empty data dir), a watch that lost its history, a topic missing on a re-read. An
        empty or replaced store has no id or another one; then this broker halts (:meth:`halt`) and
        this returns False. ``why`` says what prompted the check (for the log line)."""
        if self.halted is not None:
            return False
        if not self.cluster_id:  # a core run without a server: nothing to compare with
            return True
        current = await self.store.get(CLUSTER_ID_KEY)
        found = current.value.decode() if current is not None else None
        if found == self.cluster_id:
            return True
        what = "has no cluster id" if found is None else f"holds cluster id {found}"
        self.halt(
            f"broker {self.broker_id}: the metadata store {what}, but this broker belongs to cluster "
            f"{self.cluster_id} ({why}): the store looks empty or reset (its data lost?) or is another "
            "cluster's; to keep the logs, this broker stops acting on metadata and shuts down. Restore the "
            "store's data (a backup holding this cluster id) and start the broker again "
            "(see docs/operations.md, 'Metadata store lost or reset')"
        )
        return False

    def halt(self, reason: str) -> None:
        """Stop acting on the metadata for good: no reconciliation (so no log is deleted, no
        leadership taken or given up) from now on; the server shuts the broker down. One
        CRITICAL line says why."""
        if self.halted is not None:
            return
        self.halted = reason
        log.critical("%s", reason)
        self.halted_event.set()

    # -- stray logs ------------------------------------------------------------------------------
    async def _remove_stray_logs(self, *, delete: bool) -> None:
        """At start-up, once the metadata is loaded: delete the logs on disk that no topic owns
        here (Kafka KRaft's stray replicas). A DeleteTopics commits to the store first and
        deletes the logs one by one after, so a crash in between left the rest of them on disk,
        loaded at every start, for ever; a broker down while its topic was deleted, or its
        partition moved to other brokers, is left the same. A log is stray when its topic is
        not in the metadata, its partition is not in the topic, the partition's replicas do
        not include this broker (as in Kafka: the metadata is the authority on where replicas
        live, and the running broker removes such a log too when the change reaches it), or
        its ``partition.metadata`` names another topic id. Hosted logs are left alone (their
        topic id was checked when hosting), as is a log of a partition whose state is not
        written yet (a topic being created). One WARNING per topic and reason. With ``delete``
        False (the store was new at this start) they are only reported."""
        storage = self.replica_manager.storage
        strays: dict[tuple[str, str], list[TopicPartition]] = {}
        for tp, plog in sorted(storage.all_logs().items()):
            if self.replica_manager.get_partition(tp) is not None:
                continue
            why = self._stray_reason(tp, plog)
            if why is not None:
                strays.setdefault((tp.topic, why), []).append(tp)
        if not delete:
            if strays:
                log.warning(
                    "keeping %d partition log(s) of %d topic(s) the metadata does not know (%s): the "
                    "metadata store was empty when this broker started, so it may not be this broker's",
                    sum(len(t) for t in strays.values()), len({t for t, _ in strays}),
                    ", ".join(sorted({t for t, _ in strays})[:10]),
                )  # fmt: skip
            return
        for (topic, why), tps in strays.items():
            log.warning(
                "deleting %d stray partition log(s) of topic %s (%s): %s",
                len(tps), topic, ", ".join(str(tp.partition) for tp in tps[:10]) + (", ..." if len(tps) > 10 else ""),
                why,
            )  # fmt: skip
            for tp in tps:
                try:
                    await storage.delete_log(tp)
                except (KafkaError, OSError) as exc:  # tried again at the next start
                    log.error("deleting the stray log of %s failed: %s", tp, exc)

    def _stray_reason(self, tp: TopicPartition, plog: PartitionLog) -> str | None:
        """Why an unhosted log is stray, or None when it may still be this broker's."""
        topic = self.topics.get(tp.topic)
        if topic is None:
            return "the topic is not in the metadata (deleted)"
        replicas = topic.assignment.get(tp.partition)
        if replicas is None:
            return f"the topic has no partition {tp.partition}"
        if self.broker_id not in replicas:
            return f"the partition's replicas do not include broker {self.broker_id}"
        if topic.topic_id:
            try:
                stored = plog.read_state(TOPIC_ID_STATE)
            except OSError:
                return None
            found = parse_topic_id(stored) if stored is not None else None
            if found is not None and found != topic.topic_id.lower():
                return f"the log belongs to an earlier topic of this name (id {found}, now {topic.topic_id})"
        return None

    def _set_broker(self, key: str, v: Versioned | None) -> None:
        try:
            broker_id = int(key[len(BROKERS_PREFIX) :])
        except ValueError:
            return
        if v is None:
            self.brokers.pop(broker_id, None)
        else:
            self.brokers[broker_id] = BrokerRegistration.decode(broker_id, v)

    async def refresh_controller(self) -> None:
        self._set_controller(await self.store.leader(CONTROLLER_ELECTION))

    def _set_controller(self, leader: tuple[bytes, int] | None) -> None:
        self.controller_id = int(leader[0]) if leader is not None else -1
        if self.controller_id >= 0:
            self.controller_known.set()

    async def follow_controller(self) -> None:
        """Keep :attr:`controller_id` (Metadata's controller id, where admin clients send
        CreateTopics) on the broker that holds the ``controller`` election, through the store's
        ``leader_changes``: every store keeps an election in its own keys (``/controller`` on
        ZooKeeper and etcd), so only the store can say when it changed. A store without it (a
        plugin written before it existed) is asked every ``CONTROLLER_POLL_S``."""
        follow = getattr(self.store, "leader_changes", None)
        while self.halted is None:
            try:
                if follow is None:
                    await self.refresh_controller()
                    await trio.sleep(CONTROLLER_POLL_S)
                    continue
                async for leader in follow(CONTROLLER_ELECTION):
                    self._set_controller(leader)
                return  # the store closed
            except Exception as exc:  # the store is away: follow again once it answers
                log.debug("following the controller election failed: %s", exc)
                await trio.sleep(CONTROLLER_POLL_S)

    async def refresh_topic(self, name: str, listed: _Listed | None = None) -> None:
        """Re-read one topic from the store (or take it from ``listed``, a listing the caller
        already holds) and reconcile this broker's partitions with it."""
        async with self._lock:
            try:
                await self._refresh_topic(name, listed)
            finally:
                self._notify_refreshed()

    def _notify_refreshed(self) -> None:
        self._refreshed.set()
        self._refreshed = trio.Event()

    async def refresh_partition(self, tp: TopicPartition) -> None:
        """Re-read one partition's state (leader, epoch, ISR) and reconcile this broker with it:
        what a change of that partition alone calls for (this broker's own ISR write, a replica
        fetch told that the leader moved), at the cost of one key instead of its whole topic.
        A partition or topic this cache does not know, or a state that is gone, re-reads the
        topic (:meth:`refresh_topic`): that is a topic created, deleted or grown.

        The key is read before the lock is taken, so the ISR writes a leader has in flight
        re-read their partitions side by side (under the lock, one store round trip after
        another, they were a broker's whole pace of rejoining ISRs); a read older than what the
        cache took in meanwhile is dropped by :meth:`_apply_state`'s revision check."""
        items, read_at = await self.store.list(partition_prefix(tp.topic, tp.partition))
        v = items.get(partition_state_key(tp.topic, tp.partition))
        async with self._lock:
            whole = v is None or not await self._apply_state(tp, v.value, v.version, read_at)
        if whole:
            await self.refresh_topic(tp.topic)

    async def _apply_state(self, tp: TopicPartition, value: bytes, version: int, revision: int) -> bool:
        """Take ``tp``'s state as of ``revision`` (a watch event's or a listing's) into the
        cached topic and reconcile this broker's replica of it; the caller holds the lock. False
        when the topic is to be re-read whole instead: it is not known here, or has no such
        partition (created or grown since its last read; a topic deleted and created again
        changes its assignment first, and that change re-reads it). A state at or below what
        was read already is left (a watch event the read included)."""
        if self.halted is not None:
            return True
        topic = self.topics.get(tp.topic)
        if topic is None or tp.partition not in topic.assignment:
            return False
        read = self._partition_read_at.setdefault(tp.topic, {})
        if revision <= max(self._topic_read_at.get(tp.topic, -1), read.get(tp.partition, -1)):
            return True
        cached = topic.states.get(tp.partition)
        if cached is not None and version < cached.version:
            # older than what the cache holds: a re-read that listed before this broker's own
            # ISR write, taken in without a revision (:meth:`take_own_write`), and got the lock
            # after it. Applied, it put the smaller ISR back on the leader, whose HW then ran
            # ahead of a follower the store still counts in sync. A key's version only grows
            # while it lives, and a state deleted with its topic re-reads the topic instead.
            return True
        read[tp.partition] = revision
        topic.states[tp.partition] = PartitionState.parse(value, version)
        topic.state_changes += 1
        try:
            if self.broker_id in topic.assignment[tp.partition]:
                config = self._topic_configs.get(tp.topic)
                if config is None:  # not reconciled yet (an empty config is still one)
                    config = self._topic_configs[tp.topic] = self._load_topic_config(topic)
                plog = await self._reconcile_partition(topic, config, tp.partition)
                if plog is not None:
                    await trio.to_thread.run_sync(_record_topic_id, [plog], topic.topic_id)
        finally:
            self._notify_refreshed()
        return True

    def reassigning_partitions(self) -> set[TopicPartition]:
        """The partitions being reassigned (KIP-455), of every topic."""
        return {TopicPartition(name, p) for name, topic in self.topics.items() for p in topic.reassigning}

    def removing_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        """The replicas a running reassignment of ``tp`` is removing (none when it is not being
        reassigned)."""
        topic = self.topics.get(tp.topic)
        moving = topic.reassigning.get(tp.partition) if topic is not None else None
        return moving[1] if moving is not None else ()

    def partition_state(self, tp: TopicPartition) -> PartitionState | None:
        """The cached state of ``tp`` (None for a partition this cache does not know)."""
        topic = self.topics.get(tp.topic)
        return topic.states.get(tp.partition) if topic is not None else None

    def take_own_write(self, tp: TopicPartition, state: PartitionState, replaced: int) -> None:
        """Take in ``state``, which this broker just wrote by a compare-and-set over version
        ``replaced`` (a leader's ISR change), without reading it back: Metadata shows it when
        the write returns, where a re-read cost a store round trip per ISR change (four on
        ZooKeeper, with the write). Taken only while the cached state is still the replaced
        one; a cache that already holds the write or a later state keeps what it has. The
        write's own watch event comes after and finds the same state."""
        topic = self.topics.get(tp.topic)
        cached = topic.states.get(tp.partition) if topic is not None else None
        if self.halted is not None or topic is None or cached is None or cached.version != replaced:
            return
        topic.states[tp.partition] = state
        topic.state_changes += 1
        self._notify_refreshed()

    async def next_refresh(self) -> None:
        """Return after the next topic re-read or partition state taken in: for a request
        waiting until this broker sees a change it asked for (ElectLeaders waits for the leaders
        it elected)."""
        await self._refreshed.wait()

    def topic_names(self, topic_ids: Iterable[str]) -> dict[str, str]:
        """The names of the topics with these ids (32 hex digits) that exist; unknown ids are left
        out. A Fetch v13+ resolves its ids on every request: the id -> name map is kept between
        calls and rebuilt (once a call) only when an id is missing from it or names a topic that
        has another id now, so a steady consumer costs a dict lookup per topic."""
        ids = list(topic_ids)
        names = self._names_by_id
        found = {i: n for i in ids if (n := names.get(i)) is not None and self._has_id(n, i)}
        if len(found) < len(ids):
            self._names_by_id = names = {t.topic_id: n for n, t in self.topics.items() if t.topic_id}
            found = {i: n for i in ids if (n := names.get(i)) is not None}
        return found

    def _has_id(self, name: str, topic_id: str) -> bool:
        topic = self.topics.get(name)
        return topic is not None and topic.topic_id == topic_id

    def leader_of(self, tp: TopicPartition) -> int:
        """The leader the cached partition state names, -1 for an unknown partition."""
        state = self.partition_state(tp)
        return state.leader if state is not None else -1

    async def _refresh_topic(self, name: str, listed: _Listed | None = None) -> None:
        """Re-read ``name`` (or take it from ``listed``, a listing the caller already holds)."""
        if self.halted is not None:
            return
        items: Mapping[str, Versioned]
        if listed is None:
            items, read_at = await self.store.list(topic_key(name) + "/")
            assignment = await self.store.get(topic_key(name))
            cfg = await self.store.get(config_key(name))
        else:
            items, assignment, cfg, read_at = listed
        self._topic_read_at[name] = read_at
        self._partition_read_at.pop(name, None)  # each at or below read_at: the topic read includes it
        if assignment is None:
            local = self.replica_manager.hosted_partitions(name)
            # a topic missing on a re-read is a deletion only if the store is still this
            # cluster's: an emptied store (a wiped etcd or ZooKeeper) lacks every topic, and
            # deleting the logs then would lose every record the cluster had
            if local and not await self.check_cluster_id(f"topic {name} is missing on a re-read"):
                return
            known = self.topics.pop(name, None) is not None
            if local:
                log.warning(
                    "deleting the local log(s) of topic %s (partitions %s): the topic was deleted "
                    "(its assignment is gone from the metadata store of cluster %s)",
                    name, ", ".join(map(str, local)), self.cluster_id or "?",
                )  # fmt: skip
            await self._forget_topic(name, known=known, local=bool(local))
            return
        doc = json.loads(assignment.value)
        topic = TopicState(
            name,
            doc.get("topic_id", ""),
            {int(p): tuple(int(r) for r in reps) for p, reps in doc["partitions"].items()},
            assignment.version,
        )
        adding, removing = doc.get("adding_replicas") or {}, doc.get("removing_replicas") or {}
        for p in sorted({*adding, *removing}, key=int):
            topic.reassigning[int(p)] = (tuple(adding.get(p, ())), tuple(removing.get(p, ())))
        previous = self.topics.get(name)
        if previous is not None and previous.topic_id and topic.topic_id and previous.topic_id != topic.topic_id:
            # deleted and created again between two re-reads (ZooKeeper's watch merges the
            # changes between its re-reads; on any store the watch's events of both can come
            # while this broker is busy, so the deletion's re-read runs after the creation):
            # the earlier topic goes as if its deletion had been seen alone, so its records,
            # producer states and committed offsets never pass for the new topic's (KRaft
            # brokers tell the two apart by topic id in one metadata delta the same way)
            local = self.replica_manager.hosted_partitions(name)
            log.warning(
                "topic %s was deleted and created again (id %s, now %s): deleting its earlier local log(s) %s",
                name, previous.topic_id, topic.topic_id, ", ".join(map(str, local)) or "(none)",
            )  # fmt: skip
            self.topics.pop(name, None)
            await self._forget_topic(name, known=True, local=bool(local))
        for key, v in items.items():
            parts = key[len(topic_key(name)) + 1 :].split("/")
            if len(parts) == 3 and parts[0] == "partitions" and parts[2] == "state":
                topic.states[int(parts[1])] = PartitionState.decode(v)
        if cfg is not None:
            topic.overrides = dict(json.loads(cfg.value).get("config", {}))
            topic.config_version = cfg.version
        self.topics[name] = topic
        await self._reconcile(topic)

    async def _forget_topic(self, name: str, *, known: bool, local: bool) -> None:
        """A deleted topic (popped from :attr:`topics` by the caller) goes from this broker:
        its hosted partitions and their logs, its configs, and, when this cache knew it, the
        listeners hear of it (its committed offsets go)."""
        if known or local:
            await self._remove_local(name, set())
        self._topic_configs.pop(name, None)
        self._problems_logged.pop(name, None)
        if known:
            for listener in self.topic_deleted_listeners:
                listener(name)

    async def _reconcile(self, topic: TopicState) -> None:
        config = self._load_topic_config(topic)
        old_config = self._topic_configs.get(topic.name)
        self._topic_configs[topic.name] = config
        hosted: set[int] = set()
        new_logs: list[PartitionLog] = []
        for p, replicas in sorted(topic.assignment.items()):
            if self.broker_id not in replicas or p not in topic.states:
                continue
            hosted.add(p)
            plog = await self._reconcile_partition(topic, config, p)
            if plog is not None:
                new_logs.append(plog)
        if new_logs:
            # each write fsyncs the file and its directory: in a worker thread, all of a topic's
            # at once, since on a busy disk an fsync takes seconds and this thread serves clients
            await trio.to_thread.run_sync(_record_topic_id, new_logs, topic.topic_id)
        if old_config is not None and dict(old_config) != dict(config):
            self.replica_manager.update_config(topic.name, config)
            for listener in self.topic_config_listeners:
                listener(topic.name)
        await self._remove_local(topic.name, hosted)

    async def _reconcile_partition(self, topic: TopicState, config: TopicConfig, p: int) -> PartitionLog | None:
        """Make this broker leader or follower of partition ``p`` as its cached state says (a
        replica of it, the caller checked); the log when it was created (or adopted) just now and
        its topic id is still to be recorded."""
        replicas, state = topic.assignment[p], topic.states[p]
        tp = TopicPartition(topic.name, p)
        if tp in self.replica_manager.offline_partitions:
            return None  # its log dir failed: the controller counts the replica out until a restart
        current = self.replica_manager.get_partition(tp)
        try:
            id_on_disk = await self._check_topic_id(tp, topic.topic_id) if current is None and topic.topic_id else True
            if state.leader == self.broker_id:
                if (
                    current is None
                    or not current.is_leader
                    or current.leader_epoch != state.leader_epoch
                    or (current.isr != frozenset(state.isr))
                    or current.partition_epoch != state.version  # its ISR writes expect it
                    or current.replicas != replicas  # a reassignment adds followers
                ):
                    self.replica_manager.become_leader(
                        tp, config, state.leader_epoch, replicas, state.isr, state.version
                    )
            elif (
                current is None
                or current.leader_id != state.leader
                or current.leader_epoch != state.leader_epoch
                or current.replicas != replicas
            ):
                self.replica_manager.become_follower(
                    tp, config, state.leader, state.leader_epoch, replicas, state.isr, state.version
                )
        except KafkaError as exc:
            # its log cannot be created (a full disk): not hosted; the others still are, and
            # the metadata watch, which reconciles, must not die of it
            if exc.code is not ErrorCode.KAFKA_STORAGE_ERROR:
                raise
            log.error("cannot host %s: %s", tp, exc)
            self.storage_failures[tp] = exc
            return None
        self.storage_failures.pop(tp, None)
        return None if id_on_disk else self.replica_manager.storage.get_log(tp)

    def _load_topic_config(self, topic: TopicState) -> TopicConfig:
        """The topic's effective configs from its stored overrides, keeping every override that
        can be kept (:meth:`TopicConfig.load`): a conflict with a broker default changed since,
        or a key that is invalid now, must not take the topic's other overrides (its
        ``retention.ms=-1``) with it. Problems are logged once per set of stored overrides, not
        again on every leader or ISR change of the topic."""
        config, problems = TopicConfig.load(self.config, topic.overrides)
        if problems and self._problems_logged.get(topic.name) != topic.overrides:
            self._problems_logged[topic.name] = dict(topic.overrides)
            for p in problems:
                if p.dropped:
                    log.error("topic %s: ignoring its config %s=%r: %s", topic.name, p.key, p.raw, p.message)
                else:
                    log.warning("topic %s: its configs conflict: %s", topic.name, p.message)
        elif not problems:
            self._problems_logged.pop(topic.name, None)
        return config

    async def _check_topic_id(self, tp: TopicPartition, topic_id: str) -> bool:
        """Before hosting ``tp``: whether a log on disk already records ``topic_id``. A log left
        by an earlier topic of the same name (deleted while this broker was down, then created
        again) goes first, so its records never reappear under the new topic: logs remember
        their topic's id (Kafka's ``partition.metadata``, KIP-516); one without it (written
        before ids were kept) is adopted. Only an id read whole that names another topic
        deletes the log: a file that cannot be read, or is empty or not an id (a damaged disk,
        a crash on a file system that lost the write) proves nothing about whose the records
        are, so the log is kept as the current topic's (logged) and the file written again.
        False means the id is to be written once hosted."""
        storage = self.replica_manager.storage
        plog = storage.get_log(tp)
        if plog is None:
            return False
        try:
            stored = plog.read_state(TOPIC_ID_STATE)
        except OSError as exc:
            log.warning(
                "%s: cannot read %s (%s); keeping the log as topic id %s's and writing the file again",
                tp, TOPIC_ID_STATE, exc, topic_id,
            )  # fmt: skip
            return False
        if stored is None:
            return False
        if stored == topic_id.encode():
            return True
        found = parse_topic_id(stored)
        if found is None:
            what = "is empty" if not stored else f"holds {bytes(stored[:64])!r}, which is not a topic id"
            log.warning(
                "%s: %s %s; keeping the log as topic id %s's and writing the file again",
                tp, TOPIC_ID_STATE, what, topic_id,
            )  # fmt: skip
            return False
        if found == topic_id.lower():
            return True
        log.warning(
            "%s: the log on disk belongs to an earlier topic of this name (id %s, now %s): deleting it",
            tp, found, topic_id,
        )  # fmt: skip
        await storage.delete_log(tp)
        return False

    async def _remove_local(self, name: str, keep: set[int]) -> None:
        for tp in [TopicPartition(name, p) for p in self.replica_manager.hosted_partitions(name) if p not in keep]:
            try:
                await self.replica_manager.remove_partition(tp, delete=True)
            except Exception as exc:  # one partition's failure must not keep the others' logs
                log.error("removing the log of %s failed: %s", tp, exc)

    async def retry_unhosted(self) -> int:
        """Try again to host the partitions whose log could not be created (a full disk): the
        watch reconciles only on changes, so without this they stayed unhosted until the next
        change to their topic or a restart. Returns how many are still unhosted."""
        for name in sorted({tp.topic for tp in self.storage_failures}):
            if name in self.topics:
                await self.refresh_topic(name)
            else:  # the topic went meanwhile
                for tp in [tp for tp in self.storage_failures if tp.topic == name]:
                    del self.storage_failures[tp]
        return len(self.storage_failures)

    async def retry_unhosted_forever(self) -> None:
        """Background (the server's nursery): :meth:`retry_unhosted` every ``UNHOSTED_RETRY_S``."""
        while True:
            interval_s = UNHOSTED_RETRY_S
            await trio.sleep(interval_s)
            if self.storage_failures:
                try:
                    await self.retry_unhosted()
                except Exception:  # a store hiccup: the next interval tries again
                    log.exception("hosting partitions again failed; retrying in %.0f s", interval_s)

    # -- the watch -------------------------------------------------------------------------------
    async def run(self) -> None:
        """Follow the store's changes and the controller election until cancelled (re-listing
        after a compaction)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.follow_controller)
            await self._follow_changes()
            nursery.cancel_scope.cancel()

    async def _follow_changes(self) -> None:
        while True:
            try:
                async for ev in self.store.watch("/", after_revision=self.revision):
                    self.revision = max(self.revision, ev.revision)
                    await self._on_change(ev)
                return  # the session ended
            except MetadataCompacted as exc:
                # compacted history, or a store whose revisions went back (restarted empty):
                # re-read only if it is still this cluster's store
                if not await self.check_cluster_id(f"the metadata watch lost its history: {exc}"):
                    return
                log.warning("metadata watch fell behind; re-reading the whole state")
                await self.load()

    async def _on_change(self, ev: WatchEvent) -> None:
        if self.halted is not None:
            return
        key, value, revision = ev.key, ev.value, ev.revision
        if key == CLUSTER_ID_KEY and value is None:
            # deleted with the chroot or namespace by an operator, or a store restarted empty:
            # every other key went with it, and no topic deletion may be acted on
            await self.check_cluster_id("the cluster id was deleted from the metadata store")
        elif key.startswith(BROKERS_PREFIX):
            if value is None:
                broker_id = _int_or(key[len(BROKERS_PREFIX) :])
                self.brokers.pop(broker_id, None)
                if broker_id == self.broker_id:
                    for listener in self.registration_deleted_listeners:
                        listener()
            else:
                v = await self.store.get(key)
                if v is not None:
                    self._set_broker(key, v)
        elif key.startswith(TOPICS_PREFIX):
            state = _STATE_KEY.fullmatch(key) if value is not None else None
            if state is not None and value is not None:
                tp = TopicPartition(state[1], int(state[2]))
                async with self._lock:
                    applied = await self._apply_state(tp, value, ev.version, revision)
                if applied:
                    return
            await self._refresh_if_older(_topic_of(key), revision)
        elif key.startswith(CONFIG_PREFIX):
            await self._refresh_if_older(key[len(CONFIG_PREFIX) :], revision)

    async def _refresh_if_older(self, name: str, revision: int) -> None:
        """Refresh ``name`` unless it was read at ``revision`` or later (the change is in it),
        checked again once the lock is held: the read this waited for (a CreateTopics' own
        re-read) may hold the change already."""
        if self._read_since(name, revision):
            return
        async with self._lock:
            if self._read_since(name, revision):
                return
            try:
                await self._refresh_topic(name)
            finally:
                self._notify_refreshed()

    def _read_since(self, name: str, revision: int) -> bool:
        return 0 <= revision <= self._topic_read_at.get(name, -1)

    # -- reads -----------------------------------------------------------------------------------
    def topic_config(self, name: str) -> TopicConfig | None:
        return self._topic_configs.get(name)

    def topic_throttles(self, name: str, key: str) -> list[str]:
        """A topic's ``leader.`` or ``follower.replication.throttled.replicas`` (empty for a topic
        not known here)."""
        config = self._topic_configs.get(name)
        return [] if config is None else list(config[key])

    def contains_partition(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` exists in the cluster (not whether this broker hosts it)."""
        topic = self.topics.get(tp.topic)
        return topic is not None and tp.partition in topic.assignment

    def contains_topic(self, name: str) -> bool:
        return name in self.topics

    def endpoint_for(self, broker_id: int, listener_name: str | None) -> tuple[str, int] | None:
        """(host, port) of ``broker_id`` on ``listener_name``; None names the inter-broker listener
        (its first listener when that is not set or the broker does not have it)."""
        reg = self.brokers.get(broker_id)
        endpoints = reg.endpoints if reg is not None else (self.local_endpoints if broker_id == self.broker_id else {})
        if not endpoints:
            return None
        if listener_name is None and self.inter_broker_listener in endpoints:
            listener_name = self.inter_broker_listener
        if listener_name is None:
            host, port, _ = next(iter(endpoints.values()))
            return host, port
        ep = endpoints.get(listener_name)
        return (ep[0], ep[1]) if ep is not None else None

    def live_broker_ids(self) -> list[int]:
        ids = set(self.brokers)
        if self.local_endpoints:
            ids.add(self.broker_id)  # before our own registration is visible
        return sorted(ids)

    def rack_of(self, broker_id: int) -> str | None:
        reg = self.brokers.get(broker_id)
        return reg.rack if reg is not None else None


def _record_topic_id(logs: Sequence[PartitionLog], topic_id: str) -> None:
    """Write ``topic_id`` into each new log's ``partition.metadata`` (a worker thread). A failure
    is logged and left: the check at the next start reports a log without one."""
    for plog in logs:
        try:
            plog.write_state(TOPIC_ID_STATE, topic_id.encode())
        except (KafkaStorageError, OSError) as exc:
            log.error("%s: cannot record the topic id in %s: %s", plog.topic_partition, TOPIC_ID_STATE, exc)


def _topic_of(key: str) -> str:
    return key[len(TOPICS_PREFIX) :].split("/", 1)[0]


def _int_or(s: str, default: int = -1) -> int:
    try:
        return int(s)
    except ValueError:
        return default


def registration_json(endpoints: Sequence[tuple[str, str, int, str]], rack: str | None) -> bytes:
    """The ``/brokers/ids/<id>`` value for (listener name, host, port, security protocol)s."""
    return encode(
        {
            "endpoints": [{"name": n, "host": h, "port": p, "security_protocol": sp} for n, h, p, sp in endpoints],
            "rack": rack,
            "version": 1,
        }
    )
