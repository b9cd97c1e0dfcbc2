"""Followers copying their leaders' logs (Kafka's ``ReplicaFetcherManager`` / ``ReplicaFetcherThread``).

:class:`ReplicaFetcherManager` keeps one :class:`ReplicaFetcher` task per *source broker* (a
leader of at least one partition this broker follows). It is told by the replica manager whenever
a partition becomes leader or follower or goes away, and hands each fetcher the partitions it
follows with their leader epoch.

A fetcher talks Kafka's protocol to its source over the transport connector, as any broker does:

1. **Truncation** (KIP-101/279): a partition whose leader or epoch changed finds where its log
   parts from the leader's. A leader offering Fetch v12+ is asked in the fetch itself (KIP-320
   as KIP-595 moved it, Kafka's truncation on fetch): each partition names its log's latest
   epoch as ``last_fetched_epoch``, and a leader whose epoch cache disagrees answers a
   ``diverging_epoch`` (the largest epoch <= it and that epoch's end offset) and no records;
   the follower truncates as below and fetches again. An older leader (mixed versions) is
   asked OffsetForLeaderEpoch with the latest epoch first, with the same answer. Either way
   the follower truncates to the smaller of that end and its own end of that epoch; a leader
   naming an epoch this log lacks makes another round with the older epoch left. A follower
   without epochs truncates to its high watermark.
2. **Fetch** (v9-15: v13+ names topics by id, v15 carries this broker's epoch in ReplicaState,
   KIP-903) with ``replica_id`` = this broker, the current leader epoch and the log end offset
   as fetch offset (the leader records that as the follower's LEO). The leader's batches are
   appended unchanged (``append_records_as_follower``) and the follower's HW becomes
   min(leader HW, own LEO). Fetches go in an incremental fetch session with the leader
   (KIP-227, :mod:`odradek.client.fetch_session_handler`): a request names only the partitions
   whose position changed, an answer only the partitions with news.
3. Errors: FENCED / UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER and UNKNOWN_TOPIC_OR_PARTITION
   re-read the topic's state from the metadata store and back off until the new state arrives
   (a new epoch re-arms truncation); OFFSET_OUT_OF_RANGE restarts the log at the leader's log
   start or truncates to the leader's HW; a broken connection reconnects with backoff.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from .. import records
from ..client.fetch_session_handler import FetchSessionHandler, PartitionData, fetch_topics, forgotten_topics
from ..config import Config
from ..errors import ErrorCode, KafkaError
from ..interfaces import Connector, TopicPartition
from ..protocol import ApiKey
from .metadata_cache import MetadataCache
from .partition import Partition
from .replica_manager import ReplicaManager
from .replication_quota import FOLLOWER, ReplicationQuotaManager

log = logging.getLogger(__name__)

#: Kafka's replica.fetch.backoff.ms default.
FETCH_BACKOFF_S = 1.0
CONNECT_TIMEOUT_S = 5.0
#: Top-level Fetch errors that only end the fetch session (the next request opens another).
_SESSION_ERRORS = frozenset(
    {
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        # a session opened by names and continued by ids (a topic without an id in between)
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    }
)
_REFRESH_ERRORS = frozenset(
    {
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
    }
)


@dataclass(slots=True)
class FetchState:
    """One followed partition in a fetcher: its leader epoch and what it must do next."""

    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0
    #: caught up with the leader's high watermark at the last fetch (Kafka's
    #: ``isReplicaInSync``): a replica in sync is never held back by the replication quota
    in_sync: bool = False


class ReplicaFetcher:
    """Fetches every partition this broker follows from one source broker (see module doc)."""

    def __init__(self, manager: ReplicaFetcherManager, source_id: int) -> None:
        self.manager = manager
        self.source_id = source_id
        self.partitions: dict[TopicPartition, FetchState] = {}
        self.changed = trio.Event()
        self.cancel_scope = trio.CancelScope()
        #: the fetch session with the source (KIP-227), kept across reconnects: a new
        #: connection's first request closes the old session on the leader and opens another
        self.session = FetchSessionHandler(f"broker {source_id}")

    def set_partitions(self, wanted: Mapping[TopicPartition, int]) -> None:
        """Follow exactly ``wanted`` (tp -> leader epoch); a new epoch re-arms truncation."""
        for tp in list(self.partitions):
            if tp not in wanted:
                del self.partitions[tp]
        for tp, epoch in wanted.items():
            state = self.partitions.get(tp)
            if state is None or state.leader_epoch != epoch:
                self.partitions[tp] = FetchState(epoch)
        self.changed.set()

    async def run(self) -> None:
        with self.cancel_scope:
            while True:
                try:
                    await self._run_connected()
                except KafkaError as exc:
                    log.info("replica fetcher for broker %d: %s; retrying", self.source_id, exc)
                except Exception:  # a storage or transport failure must not stop replication for good
                    log.exception("replica fetcher for broker %d failed; retrying", self.source_id)
                await trio.sleep(FETCH_BACKOFF_S)

    async def _run_connected(self) -> None:
        from ..client.connection import BrokerConnection

        manager = self.manager
        endpoint = manager.cache.endpoint_for(self.source_id, None)
        if endpoint is None:
            return  # not registered (yet): retry after the backoff
        async with trio.open_nursery() as nursery:
            try:
                conn = await BrokerConnection.open(
                    nursery,
                    manager.connector,
                    self.source_id,
                    endpoint[0],
                    endpoint[1],
                    client_id=f"broker-{manager.broker_id}-fetcher-{self.source_id}",
                    connect_timeout_s=CONNECT_TIMEOUT_S,
                    request_timeout_s=manager.request_timeout_s,
                )
            except KafkaError as exc:  # caught inside: the nursery would wrap it in a group
                log.info("replica fetcher for broker %d: %s; retrying", self.source_id, exc)
                nursery.cancel_scope.cancel()
                return
            try:
                while True:
                    # replaced before the round, so a change during it is not missed
                    changed = self.changed = trio.Event()
                    await self._truncate(conn)
                    if not await self._fetch(conn):
                        with trio.move_on_after(FETCH_BACKOFF_S):
                            await changed.wait()
            except KafkaError as exc:  # caught here, not outside: the nursery would wrap it in a group
                log.info("replica fetcher for broker %d: %s; reconnecting", self.source_id, exc)
            finally:
                await conn.close()
                nursery.cancel_scope.cancel()

    def _partition(self, tp: TopicPartition, state: FetchState) -> Partition | None:
        """The hosted partition if it still follows this source at the fetcher's epoch."""
        p = self.manager.replica_manager.get_partition(tp)
        if p is None or p.is_leader or p.leader_id != self.source_id or p.leader_epoch != state.leader_epoch:
            return None
        return p

    async def _truncate(self, conn: Any) -> None:
        now = trio.current_time()
        on_fetch = _fetch_version(conn) >= TRUNCATE_ON_FETCH_VERSION
        asks: list[tuple[TopicPartition, FetchState, Partition, int]] = []
        for tp, state in list(self.partitions.items()):
            if not state.truncating or state.delayed_until > now:
                continue
            p = self._partition(tp, state)
            if p is None:
                continue
            entries = p.log.epoch_entries()
            if not entries:
                p.truncate_to(p.high_watermark)
                state.truncating = False
                continue
            if on_fetch:
                state.truncating = False  # the fetch names the latest epoch: the leader checks it
                continue
            asks.append((tp, state, p, entries[-1].epoch))
        if not asks:
            return
        from ..client.requests import error_code, make_request

        by_topic: dict[str, list[dict[str, int]]] = {}
        for tp, state, _p, epoch in asks:
            by_topic.setdefault(tp.topic, []).append(
                {"partition": tp.partition, "current_leader_epoch": state.leader_epoch, "leader_epoch": epoch}
            )
        version = conn.version(ApiKey.OFFSET_FOR_LEADER_EPOCH, min_version=3)
        request = make_request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            version,
            replica_id=self.manager.broker_id,
            topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        )
        response = await conn.request(request, timeout_s=self.manager.request_timeout_s)
        answers = {TopicPartition(t.topic, int(p.partition)): p for t in response.topics for p in t.partitions}
        for tp, state, _p, epoch in asks:
            p = self._partition(tp, state)
            answer = answers.get(tp)
            if p is None or answer is None or self.partitions.get(tp) is not state:
                continue
            code = error_code(answer.error_code)
            if code is not ErrorCode.NONE:
                await self._on_partition_error(tp, state, code)
                continue
            target, done = truncation_offset(p, epoch, int(answer.leader_epoch), int(answer.end_offset))
            if target < p.log_end_offset:
                log.info("%s: truncating from %d to %d (leader epoch %d)", tp, p.log_end_offset, target, epoch)
                p.truncate_to(target)
            # not done: the leader named an epoch this log lacks; ask again with the latest
            # epoch left, which is older (each round drops one, so the rounds end)
            state.truncating = not done

    async def _fetch(self, conn: Any) -> bool:
        """One Fetch round trip; False when there was nothing to fetch.

        In a fetch session (KIP-227) with the leader: the request names only the partitions
        whose position changed since the last one, and the answer carries only the partitions
        with news; the others stay where the session holds them."""
        from ..client.requests import error_code, make_request

        manager = self.manager
        now = trio.current_time()
        version = _fetch_version(conn)
        on_fetch = version >= TRUNCATE_ON_FETCH_VERSION
        states: dict[TopicPartition, FetchState] = {}
        wanted: dict[TopicPartition, PartitionData] = {}
        quota = manager.quota if manager.quota.enabled else None
        for tp, state in self.partitions.items():
            if state.truncating or state.delayed_until > now:
                continue
            p = self._partition(tp, state)
            if p is None:
                continue
            if quota is not None and quota.should_throttle(tp, state.in_sync):
                continue  # Kafka's shouldFollowerThrottle: left out until the rate is under the quota
            states[tp] = state
            wanted[tp] = PartitionData(
                p.log_end_offset,
                p.log_start_offset,
                manager.fetch_max_bytes,
                state.leader_epoch,
                _latest_epoch(p) if on_fetch else -1,
            )
        if not wanted:
            return False
        fetch = self.session.build(wanted)
        # every topic of the session, not only those this request names: the answer of an
        # incremental fetch carries partitions it did not name (news at a position unchanged),
        # by id, and an id the request did not map read as a partition never asked for, so the
        # round's records were dropped and the session started again
        in_session = [*fetch.fetched, *fetch.forgotten]
        topic_ids = self._topic_ids(in_session) if version >= TOPIC_ID_VERSION else None
        if topic_ids is None:
            version = min(version, TOPIC_ID_VERSION - 1)
        request = make_request(
            ApiKey.FETCH,
            version,
            replica_id=manager.broker_id,
            replica_state={"replica_id": manager.broker_id, "replica_epoch": self._broker_epoch()},
            max_wait=manager.fetch_wait_max_ms,
            min_bytes=1,
            max_bytes=manager.fetch_response_max_bytes,
            isolation_level=0,
            session_id=fetch.session_id,
            session_epoch=fetch.epoch,
            topics=fetch_topics(fetch.to_send, topic_ids),
            forgotten_topics_data=forgotten_topics(fetch.forgotten, topic_ids),
            rack_id="",
        )
        try:
            response = await conn.request(
                request, timeout_s=manager.request_timeout_s + manager.fetch_wait_max_ms / 1000
            )
        except BaseException:
            self.session.handle_error()
            raise
        top = error_code(getattr(response, "error_code", 0))
        names = {v: k for k, v in topic_ids.items()} if topic_ids is not None else None
        answered = [
            TopicPartition(_answered_topic(t, names), int(pd.partition_index))
            for t in response.responses
            for pd in t.partitions
        ]
        if not self.session.handle_response(top, int(getattr(response, "session_id", 0)), answered):
            if top in _SESSION_ERRORS:
                return True  # the next round opens a new session at once
            if top is not ErrorCode.NONE:
                raise KafkaError(f"fetch from broker {self.source_id} failed with {top.name}", code=top)
            return True  # an answer outside the session: not used, the next round starts afresh
        fed: list[TopicPartition] = []
        for topic in response.responses:
            name = _answered_topic(topic, names)
            for pd in topic.partitions:
                tp = TopicPartition(name, int(pd.partition_index))
                asked = states.get(tp)
                if asked is None or self.partitions.get(tp) is not asked:
                    continue
                sent = fetch.fetched[tp]
                diverging = _diverging(pd) if on_fetch else None
                if diverging is not None:
                    self._truncate_on_diverging(tp, asked, sent, diverging)
                    continue
                offset = sent.fetch_offset
                if await self._process_partition(tp, asked, offset, pd, error_code(pd.error_code)):
                    fed.append(tp)
        # partitions that got records go to the back of the next request (Kafka's
        # updateAndMoveToEnd): the leader fills a response in request order, and gives a batch
        # over the partition limit only to the first partition with data, so a fixed order let
        # busy partitions first in it starve the rest (and a big batch behind them never came).
        # In a session the leader keeps that order itself, moving what it answered to the end.
        for tp in fed:
            if tp in self.partitions:
                self.partitions[tp] = self.partitions.pop(tp)
        return True

    async def _process_partition(
        self, tp: TopicPartition, state: FetchState, fetch_offset: int, pd: Any, code: ErrorCode
    ) -> bool:
        """Take one partition's answer; whether it brought records."""
        p = self._partition(tp, state)
        if p is None or p.log_end_offset != fetch_offset:
            return False
        if code is ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_start = int(pd.log_start_offset)
            if fetch_offset < leader_start:
                log.warning("%s: offset %d is below the leader's log start %d: restarting the log", tp,
                            fetch_offset, leader_start)  # fmt: skip
                p.truncate_fully_and_start_at(leader_start)
            else:
                p.truncate_to(max(p.local_log_start_offset, min(fetch_offset, int(pd.high_watermark))))
            return False
        if code is ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE:
            await self._restart_after_remote(tp, state, p, fetch_offset)
            return False
        if code is not ErrorCode.NONE:
            await self._on_partition_error(tp, state, code)
            return False
        data = pd.records or b""
        end = 0
        for pos, header in records.iter_headers(data):
            end = pos + header.size
        if end > 0:
            payload = bytes(data[:end])
            try:
                batches = records.validate_batches(payload, exact_counts=False)
                self._restart_before_straddling_batch(tp, p, payload)
                p.append_records_as_follower(payload, batches)
                self.manager.replica_manager.metrics.replicated(tp.topic, len(payload))
                quota = self.manager.quota
                if quota.enabled and quota.is_throttled(tp):
                    quota.record(len(payload))
            except (KafkaError, OSError) as exc:
                if isinstance(exc, KafkaError) and exc.code is not ErrorCode.KAFKA_STORAGE_ERROR:
                    # bytes this replica cannot take (a corrupt batch, an offset it does not
                    # expect): this partition backs off and retries, the others in the
                    # response go on (Kafka's partitionsWithError)
                    log.warning("%s: replica fetch from broker %d at offset %d: %s; retrying in %.0f s", tp,
                                self.source_id, fetch_offset, exc, FETCH_BACKOFF_S)  # fmt: skip
                else:
                    # a full disk or a failed log dir (then the partition goes offline and
                    # leaves this fetcher): logged once per dir, not a traceback per fetch
                    self.manager.replica_manager.follower_append_failed(tp, exc)
                state.delayed_until = trio.current_time() + FETCH_BACKOFF_S
                return False
        state.in_sync = p.log_end_offset >= int(pd.high_watermark)
        moved = p.update_follower_high_watermark(int(pd.high_watermark))
        # the leader's log start (DeleteRecords, retention): records gone there go here too, or
        # they came back when this replica took over
        p.follow_log_start_offset(int(pd.log_start_offset))
        if moved:
            self.manager.replica_manager.wake(tp)
        return end > 0

    def _topic_ids(self, partitions: Iterable[TopicPartition]) -> dict[str, uuid.UUID] | None:
        """The ids of the topics a v13+ request names (from the metadata cache), or None when one
        has none (a topic made before ids, or gone from the cache): then the request names them."""
        ids: dict[str, uuid.UUID] = {}
        topics = self.manager.cache.topics
        for tp in partitions:
            if tp.topic in ids:
                continue
            state = topics.get(tp.topic)
            topic_id = getattr(state, "topic_id", "") if state is not None else ""
            if not topic_id:
                return None
            ids[tp.topic] = uuid.UUID(hex=topic_id)
        return ids

    def _broker_epoch(self) -> int:
        """This broker's epoch, sent in v15's ReplicaState: a leader that knows a newer one
        refuses the fetch (KIP-903). The newer of what its own registration returned and what
        its metadata cache holds (-1 before either): after a lost session the cache held the
        previous registration's for a moment, so the first fetches were refused and the
        partitions backed off a second before rejoining."""
        cache = self.manager.cache
        reg = cache.brokers.get(self.manager.broker_id)
        return max(-1 if reg is None else int(reg.epoch), cache.registered_epoch)

    def _truncate_on_diverging(
        self, tp: TopicPartition, state: FetchState, sent: PartitionData, diverging: tuple[int, int]
    ) -> None:
        """The leader found this log diverging from its own at ``diverging`` (epoch, end offset;
        Kafka's ``truncateOnFetchResponse``): truncate to the end of the largest common epoch.
        When the leader named an epoch this log lacks, truncate to this log's end of its own
        largest epoch below that; the next fetch names the older epoch left and the leader
        checks again, until the logs agree."""
        p = self._partition(tp, state)
        if p is None or p.log_end_offset != sent.fetch_offset:
            return  # moved on since the request: the next fetch asks again
        target, _done = truncation_offset(p, sent.last_fetched_epoch, *diverging)
        if target < p.log_end_offset:
            log.info("%s: diverging from the leader at epoch %d end %d: truncating from %d to %d", tp,
                     diverging[0], diverging[1], p.log_end_offset, target)  # fmt: skip
            p.truncate_to(target)

    @staticmethod
    def _restart_before_straddling_batch(tp: TopicPartition, p: Partition, payload: bytes) -> None:
        """An empty log restarted at the leader's log start (OFFSET_OUT_OF_RANGE) when that start
        falls inside a batch (DeleteRecords may put it anywhere): the leader serves the whole
        batch, from its base offset. As in Kafka (``appendRecordsToFollowerOrFutureReplica``),
        the log restarts at that base offset; the leader's log start, which every fetch response
        carries, then moves this log's start back up past the records it deleted."""
        if p.log_end_offset != p.local_log_start_offset:
            return
        first = records.parse_header(payload, 0)
        if first.base_offset < p.log_end_offset <= first.last_offset:
            log.info("%s: the leader's first batch starts at %d, below this empty log's start %d: "
                     "restarting the log there", tp, first.base_offset, p.log_end_offset)  # fmt: skip
            p.truncate_fully_and_start_at(first.base_offset)

    async def _restart_after_remote(
        self, tp: TopicPartition, state: FetchState, p: Partition, fetch_offset: int
    ) -> None:
        """KIP-405: the leader keeps ``fetch_offset`` only in remote storage. The follower does
        not copy remote segments into its log: it restarts its log after the highest offset
        remote storage holds, which the leader still has locally (it deletes only copied
        segments, after recording them), takes the leader epoch in force there and the producer
        state from the remote segment's copies (Kafka's buildRemoteLogAuxState), and reads the
        earlier offsets from remote storage when it leads. Kafka asks the leader for its local
        log start instead; the remote metadata, which every broker shares, gives an offset at or
        above it."""
        rlm = self.manager.replica_manager.remote_log_manager
        restart = await rlm.follower_restart_offset(p) if rlm is not None else None
        if rlm is None or restart is None or restart <= fetch_offset or p.log_end_offset != fetch_offset:
            await self._on_partition_error(tp, state, ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE)
            return
        log.info("%s: offset %d is in remote storage only: restarting the log at %d", tp, fetch_offset, restart)
        epoch, snapshot = await rlm.follower_restart_state(p, restart)
        if p.log_end_offset != fetch_offset or self.partitions.get(tp) is not state:
            return  # the partition changed while remote storage was asked
        p.truncate_fully_and_start_at(restart)
        if epoch is not None:
            p.log.assign_epoch_start_offset(epoch.epoch, epoch.start_offset)
        if snapshot is not None:
            try:
                p.producer_state.restore_before(snapshot, restart)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("%s: the remote producer snapshot is unreadable, producers start afresh: %s", tp, exc)
                p.producer_state.truncate_and_reload(p.log)

    async def _on_partition_error(self, tp: TopicPartition, state: FetchState, code: ErrorCode) -> None:
        """Back off this partition and re-read its state (not its topic's: a leader moving many
        partitions at once sends each of their followers here); a new epoch replaces ``state``."""
        log.info("%s: replica fetch from broker %d: %s; refreshing metadata", tp, self.source_id, code.name)
        state.delayed_until = trio.current_time() + FETCH_BACKOFF_S
        await self.manager.cache.refresh_partition(tp)


#: The first Fetch version with ``last_fetched_epoch`` and ``diverging_epoch`` (KIP-595):
#: a leader offering it is not asked OffsetForLeaderEpoch first.
TRUNCATE_ON_FETCH_VERSION = 12
#: The first Fetch version naming topics by id: the follower's session stays keyed by name, the
#: request and answer carry the ids the metadata cache maps the names to.
TOPIC_ID_VERSION = 13
#: The highest Fetch version a follower sends: v15 carries its broker epoch in ReplicaState
#: (KIP-903); v16 only adds KIP-951's leader hints, which a follower does not use.
FOLLOWER_FETCH_MAX_VERSION = 15


def _fetch_version(conn: Any) -> int:
    """The Fetch version a follower uses with its leader (v9+: current leader epochs)."""
    version: int = conn.version(ApiKey.FETCH, min_version=9, max_version=FOLLOWER_FETCH_MAX_VERSION)
    return version


def _answered_topic(topic: Any, names: Mapping[uuid.UUID, str] | None) -> str:
    """The name of a response topic: v13+ answers by id (an id not asked about: "")."""
    if names is None:
        return str(topic.topic)
    return names.get(topic.topic_id, "")


def _latest_epoch(p: Partition) -> int:
    """The epoch of the log's last record, which a v12+ fetch names (-1: none)."""
    entries = p.log.epoch_entries()
    return entries[-1].epoch if entries else -1


def _diverging(pd: Any) -> tuple[int, int] | None:
    """A v12+ partition answer's diverging epoch (epoch, end offset), or None when unset
    (Kafka's ``FetchResponse.isDivergingEpoch``: either part other than -1)."""
    div = getattr(pd, "diverging_epoch", None)
    if div is None or (int(div.epoch) == -1 and int(div.end_offset) == -1):
        return None
    return int(div.epoch), int(div.end_offset)


def truncation_offset(p: Partition, local_epoch: int, leader_epoch: int, leader_end: int) -> tuple[int, bool]:
    """Where a follower truncates after OffsetForLeaderEpoch (KIP-279), given its latest epoch and
    the leader's answer (largest epoch <= it, that epoch's end offset), and whether that ends
    the truncation.

    When the leader answers an epoch this log does not have, the log's own largest epoch below
    it ends where the log stops agreeing with nothing it can check yet: the follower truncates
    to that end and asks again with the epoch before (Kafka's ``getOffsetTruncationState``). Done
    at once, it kept offsets the leader wrote under the epoch it lacks (after an unclean
    election, say), and the replicas diverged for good."""
    leo = p.log_end_offset
    if leader_epoch < 0 or leader_end < 0:
        return min(p.high_watermark, leo), True  # the leader knows no such epoch: fall back to the HW
    if leader_epoch == local_epoch:
        return min(leader_end, leo), True
    own_epoch, own_end = p.log.end_offset_for_epoch(leader_epoch)
    if own_epoch < 0 or own_end < 0:
        return min(leader_end, leo), True
    if own_epoch != leader_epoch:
        return min(own_end, leo), False
    return min(leader_end, own_end, leo), True


class ReplicaFetcherManager:
    """One :class:`ReplicaFetcher` per source broker, rebuilt whenever partition roles change."""

    def __init__(
        self,
        config: Config,
        replica_manager: ReplicaManager,
        cache: MetadataCache,
        connector_factory: Callable[[], Connector],
        *,
        quota: ReplicationQuotaManager | None = None,
    ) -> None:
        self.broker_id = config.broker_id
        self.replica_manager = replica_manager
        self.cache = cache
        self._connector_factory = connector_factory
        self._connector: Connector | None = None
        self.fetch_max_bytes = int(config["replica.fetch.max.bytes"])
        self.fetch_response_max_bytes = max(self.fetch_max_bytes, 10 * 1024 * 1024)
        self.fetch_wait_max_ms = int(config["replica.fetch.wait.max.ms"])
        self.request_timeout_s = 30.0
        #: the follower side's replication quota (KIP-73; the broker core's, whose rate follows
        #: the dynamic configs): without one given, one with no rate
        self.quota = quota or ReplicationQuotaManager(FOLLOWER, config.broker_id, cache.topic_throttles)
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._changed = trio.Event()
        replica_manager.on_partitions_changed = self.partitions_changed

    @property
    def connector(self) -> Connector:
        """The transport's client side, built when the first fetcher connects."""
        if self._connector is None:
            self._connector = self._connector_factory()
        return self._connector

    def partitions_changed(self) -> None:
        """Called (synchronously) after a partition became leader or follower or was removed."""
        self._changed.set()

    def wanted(self) -> dict[int, dict[TopicPartition, int]]:
        """source broker -> {followed partition: leader epoch}."""
        out: dict[int, dict[TopicPartition, int]] = {}
        for tp, p in self.replica_manager.partitions.items():
            if not p.is_leader and p.leader_id >= 0 and p.leader_id != self.broker_id:
                out.setdefault(p.leader_id, {})[tp] = p.leader_epoch
        return out

    async def run(self) -> None:
        """Reassign partitions to fetchers on every change, until cancelled."""
        async with trio.open_nursery() as nursery:
            while True:
                self._changed = trio.Event()
                wanted = self.wanted()
                for source, fetcher in list(self.fetchers.items()):
                    if source not in wanted:
                        fetcher.cancel_scope.cancel()
                        del self.fetchers[source]
                for source, parts in wanted.items():
                    current = self.fetchers.get(source)
                    if current is None:
                        current = self.fetchers[source] = ReplicaFetcher(self, source)
                        nursery.start_soon(current.run)
                    current.set_partitions(parts)
                await self._changed.wait()
