"""The consumer's fetcher: prefetching Fetch requests, one in flight per broker, and decoding.

A background task keeps one Fetch request in flight to every broker that leads a fetchable
partition. A partition's response (a :class:`CompletedFetch`: the raw record bytes) is buffered
until ``poll()`` decodes it; while one response per partition is being drained the next one is
already requested from the offset where the buffered bytes end, so a steady consumer never waits
a round trip. At most two responses per partition are buffered, and none is requested while the
buffered bytes exceed ``fetch.max.bytes``: memory stays bounded however slowly ``poll()`` is
called.

Decoding happens in ``poll()``, in the caller's task, record by record and only as far as
``max.poll.records`` needs (:mod:`odradek.client.decoding`): batches that end before the position
are skipped from their header alone, control batches are skipped, and with
``isolation.level=read_committed`` the batches of aborted transactions are dropped using the
response's aborted-transaction list, as Kafka's consumer does.
"""

from __future__ import annotations

import heapq
import logging
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

import trio

from ..errors import ErrorCode, KafkaError
from ..interfaces import Codec, TopicPartition
from ..protocol import ApiKey
from ..records import ControlRecordType, decode_batch, iter_headers, parse_control_record
from .config import ClientConfig
from .connection import BrokerConnection
from .decoding import ConsumerRecord, RecordCursor, records_section
from .fetch_session_handler import (
    INVALID_SESSION_ID,
    FetchRequestData,
    FetchSessionHandler,
    PartitionData,
    fetch_topics,
)
from .network import FETCH_CHANNEL, NetworkClient
from .offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets
from .requests import error_code, make_request
from .subscription import EARLIEST, LATEST, SubscriptionState

log = logging.getLogger("odradek.client.consumer")

_LEADER_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        # Fetch v13+ (KIP-516): the broker knows no topic by that id, or the partition's topic
        # has another one -- metadata is stale (the topic was deleted, or created again)
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
    }
)
#: The partition errors whose answer (Fetch v16) may name the current leader (KIP-951).
_HINTED_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


#: Top-level Fetch errors that only end the fetch session (the next request opens another).
_SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH})
#: The first Fetch version with sessions (KIP-227); older ones fetch everything every time.
SESSION_MIN_VERSION = 7
#: The first Fetch version naming topics by id (KIP-516); without every topic's id, v12 at most.
TOPIC_ID_MIN_VERSION = 13
#: The newest Fetch version the consumer speaks (v16: KIP-951 leader hints).
FETCH_MAX_VERSION = 16
#: The epoch of a full fetch that opens no session.
FINAL_EPOCH = -1


def answered_topics(response: Any, fetch: FetchRequestData | None) -> tuple[list[tuple[str, Any]], list[uuid.UUID]]:
    """A Fetch answer's topics with their names -- from v13 on the answer names them by id
    only, resolved through the ids the request (``fetch``) named -- and the ids it could not
    resolve (an answer about a topic the request did not name: unusable, as Java's
    ``verifyFullFetchResponsePartitions`` says)."""
    out: list[tuple[str, Any]] = []
    unknown: list[uuid.UUID] = []
    names = fetch.topic_names if fetch is not None else {}
    for t in response.responses:
        name = getattr(t, "topic", None)
        if name is None:
            name = names.get(t.topic_id)
            if name is None:
                unknown.append(t.topic_id)
                continue
        out.append((name, t))
    return out, unknown


def leader_hint(p: Any) -> tuple[int, int] | None:
    """The current leader (id, epoch) a partition's Fetch v12+ answer names with
    NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH (KIP-951, sent from v16), None without one (as
    Java: both the id and the epoch must be set)."""
    leader = getattr(p, "current_leader", None)
    if leader is None or error_code(p.error_code) not in _HINTED_ERRORS:
        return None
    leader_id, epoch = int(leader.leader_id), int(leader.leader_epoch)
    return (leader_id, epoch) if leader_id >= 0 and epoch >= 0 else None


class NoOffsetForPartition(KafkaError):
    """``auto.offset.reset=none`` and the partition has no committed offset (or it is out of range)."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class LogTruncationError(KafkaError):
    """The leader's log diverged before the consumer's position (KIP-320) and
    ``auto.offset.reset=none``: the records consumed after ``divergent_offsets[tp][0]`` are not
    in the log any more (Java's ``LogTruncationException``). Seek to resume."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(self, message: str, divergent_offsets: dict[TopicPartition, tuple[int, int]]) -> None:
        super().__init__(message)
        #: partition -> (first offset known to diverge, its leader epoch)
        self.divergent_offsets = divergent_offsets


class CompletedFetch:
    """One partition's records from one Fetch response, decoded lazily by :meth:`take`."""

    __slots__ = (
        "_aborted",
        "_aborted_pids",
        "_batches",
        "_cursor",
        "assignment_id",
        "data",
        "end_offset",
        "fetch_offset",
        "high_watermark",
        "last_epoch",
        "last_stable_offset",
        "log_start_offset",
        "size",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        data: bytes,
        *,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        aborted: list[tuple[int, int]] | None,
        assignment_id: int,
    ) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset
        self.data = data
        self.size = len(data)
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.assignment_id = assignment_id
        self._batches = deque(iter_headers(data))
        self.end_offset = self._batches[-1][1].next_offset if self._batches else fetch_offset
        #: the leader epoch of the last batch: the ``last_fetched_epoch`` of a fetch from ``end_offset``
        self.last_epoch = self._batches[-1][1].partition_leader_epoch if self._batches else -1
        # read_committed: (first_offset, producer_id) heap of aborted transactions in this slice
        self._aborted: list[tuple[int, int]] | None = None
        if aborted is not None:
            self._aborted = [(first, pid) for pid, first in aborted]
            heapq.heapify(self._aborted)
        self._aborted_pids: set[int] = set()
        self._cursor: RecordCursor | None = None  # the batch being returned

    @property
    def exhausted(self) -> bool:
        return not self._batches and (self._cursor is None or self._cursor.exhausted)

    def take(
        self,
        position: int,
        max_records: int,
        out: list[ConsumerRecord],
        codecs: Mapping[int, Codec] | None,
        check_crcs: bool,
    ) -> int:
        """Append up to ``max_records`` records at or after ``position`` to ``out``; returns the
        new position (past skipped control and aborted batches too)."""
        topic, partition = self.tp
        want = max_records
        while want > 0:
            cursor = self._cursor
            if cursor is not None and not cursor.exhausted:
                position, taken = cursor.take(topic, partition, position, want, out)
                want -= taken
                continue
            if not self._batches:
                break
            pos, header = self._batches.popleft()
            if header.next_offset <= position:
                continue  # the whole batch is before the position
            if self._aborted is not None and self._skip_aborted(header, pos):
                position = max(position, header.next_offset)
                continue
            if header.is_control or header.record_count == 0:
                # markers, and the empty batches compaction keeps for producer state: nothing to
                # return, but the position moves past them (a consumer would poll there for ever)
                position = max(position, header.next_offset)
                continue
            self._cursor = RecordCursor(records_section(self.data, pos, header, codecs, check_crcs), header)
        return position

    def _skip_aborted(self, header: Any, pos: int) -> bool:
        """read_committed bookkeeping for one batch; True when it must not be returned."""
        aborted = self._aborted
        assert aborted is not None
        while aborted and aborted[0][0] <= header.last_offset:
            self._aborted_pids.add(heapq.heappop(aborted)[1])
        if header.is_control:
            if header.producer_id in self._aborted_pids:
                batch = decode_batch(self.data, pos, codecs=None, verify_crc=False)
                if batch.records and parse_control_record(batch.records[0]).type is ControlRecordType.ABORT:
                    self._aborted_pids.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._aborted_pids


class Fetcher:
    """Prefetching fetches and decoding for one consumer (see module doc)."""

    def __init__(
        self,
        network: NetworkClient,
        subscriptions: SubscriptionState,
        config: ClientConfig,
        codecs: Mapping[int, Codec] | None,
    ) -> None:
        self.network = network
        self.subs = subscriptions
        self.codecs = codecs
        self.check_crcs = bool(config["check.crcs"])
        self.min_bytes = config["fetch.min.bytes"]
        self.max_wait_ms = config["fetch.max.wait.ms"]
        self.max_bytes = config["fetch.max.bytes"]
        self.partition_max_bytes = config["max.partition.fetch.bytes"]
        self.isolation_level = 1 if config["isolation.level"] == "read_committed" else 0
        self.request_timeout_s = config["request.timeout.ms"] / 1000.0 + self.max_wait_ms / 1000.0
        self.default_timeout_s = config["default.api.timeout.ms"] / 1000.0
        self._buffered: dict[TopicPartition, deque[CompletedFetch]] = {}
        self._buffered_bytes = 0
        self._in_flight_nodes: set[int] = set()
        #: the fetch session with each broker (KIP-227), by node id
        self._sessions: dict[int, FetchSessionHandler] = {}
        self._in_flight_partitions: set[TopicPartition] = set()
        self._wakeup = trio.Event()
        self.data_ready = trio.Event()
        self._resetting = False
        self._errors: list[KafkaError] = []
        self.enabled = True
        network.metadata_listeners.append(self.wakeup)

    # -- waking ------------------------------------------------------------------------------------
    def wakeup(self) -> None:
        self._wakeup.set()

    def _signal_data(self) -> None:
        event, self.data_ready = self.data_ready, trio.Event()
        event.set()

    # -- fetch loop --------------------------------------------------------------------------------
    async def run(self, nursery: trio.Nursery) -> None:
        while True:
            self._wakeup = trio.Event()
            timeout = float("inf")
            if self.enabled:
                if self.subs.needing_reset() and not self._resetting:
                    self._resetting = True
                    nursery.start_soon(self._reset_positions)
                by_node, unknown = self._fetchable_by_node()
                if unknown:
                    self.network.add_topics({tp.topic for tp in unknown})
                    self.network.request_update()
                    timeout = self.network.retry_backoff.max_ms / 1000.0  # a metadata update wakes us sooner
                for node, parts in by_node.items():
                    if node in self._in_flight_nodes:
                        continue
                    self._in_flight_nodes.add(node)
                    self._in_flight_partitions.update(parts)
                    nursery.start_soon(self._fetch, node, parts)
            with trio.move_on_after(timeout):
                await self._wakeup.wait()

    def _fetch_position(self, tp: TopicPartition) -> tuple[int, int] | None:
        """Where the next fetch of ``tp`` starts, with the leader epoch of the record before it
        (``last_fetched_epoch``): after its buffered data, else its position."""
        buffered = self._buffered.get(tp)
        if buffered:
            if len(buffered) >= 2:
                return None
            return buffered[-1].end_offset, buffered[-1].last_epoch
        st = self.subs.assignment.get(tp)
        return None if st is None or st.position is None else (st.position, st.offset_epoch)

    def _fetchable_by_node(self) -> tuple[dict[int, dict[TopicPartition, tuple[int, int]]], list[TopicPartition]]:
        by_node: dict[int, dict[TopicPartition, tuple[int, int]]] = {}
        unknown: list[TopicPartition] = []
        if self._buffered_bytes >= self.max_bytes:
            return by_node, unknown
        cluster = self.network.cluster
        for tp in self.subs.fetchable():
            if tp in self._in_flight_partitions:
                continue
            at = self._fetch_position(tp)
            if at is None:
                continue
            leader = cluster.leader_for(tp)
            if leader < 0:
                unknown.append(tp)
                continue
            by_node.setdefault(leader, {})[tp] = at
        return by_node, unknown

    async def _fetch(self, node: int, parts: dict[TopicPartition, tuple[int, int]]) -> None:
        """One Fetch of ``parts`` (partition -> fetch offset and last fetched epoch) from ``node``, in the fetch
        session with that broker (KIP-227, Fetch v7+): the request names only the partitions
        whose position moved since the session last heard of them, and the answer carries only
        the partitions with news, as the Java consumer does."""
        assignment_id = self.subs.assignment_id
        cluster = self.network.cluster
        wanted = {
            tp: PartitionData(
                offset, -1, self.partition_max_bytes, cluster.leader_epoch(tp), epoch, cluster.topic_id(tp.topic)
            )
            for tp, (offset, epoch) in parts.items()
        }
        session = self._sessions.get(node)
        if session is None:
            session = self._sessions[node] = FetchSessionHandler(f"broker {node}")
        in_session = False
        fetch: FetchRequestData | None = None

        def build(conn: BrokerConnection) -> Any:
            nonlocal in_session, fetch
            version = conn.version(ApiKey.FETCH, min_version=4, max_version=FETCH_MAX_VERSION)
            in_session = version >= SESSION_MIN_VERSION
            if in_session:
                fetch = session.build(wanted)
                if not fetch.can_use_topic_ids:  # Java's rule: by id only with every topic's id
                    version = min(version, TOPIC_ID_MIN_VERSION - 1)
                by_id = version >= TOPIC_ID_MIN_VERSION
                session_id, epoch, to_send = fetch.session_id, fetch.epoch, fetch.to_send
                topics = fetch_topics(to_send, fetch.topic_ids() if by_id else None)
                forgotten = fetch.forgotten_topics(by_id)
            else:
                session_id, epoch, topics, forgotten = INVALID_SESSION_ID, FINAL_EPOCH, fetch_topics(wanted), []
            return make_request(
                ApiKey.FETCH,
                version,
                replica_id=-1,
                max_wait=self.max_wait_ms,
                min_bytes=self.min_bytes,
                max_bytes=self.max_bytes,
                isolation_level=self.isolation_level,
                session_id=session_id,
                session_epoch=epoch,
                topics=topics,
                forgotten_topics_data=forgotten,
                rack_id="",
            )

        got_data = False
        try:
            try:
                # a connection of its own: the long poll holds up nothing else sent to the broker
                response = await self.network.send(node, build, timeout_s=self.request_timeout_s, channel=FETCH_CHANNEL)
            except KafkaError as exc:
                if in_session:
                    session.handle_error()
                log.debug("fetch from broker %d failed: %r", node, exc)
                self.network.request_update()
                await trio.sleep(self.network.retry_backoff.seconds(0))
                return
            except BaseException:
                if in_session:
                    session.handle_error()
                raise
            top = error_code(getattr(response, "error_code", 0))
            answers, unknown_ids = answered_topics(response, fetch)
            if in_session:
                answered = [TopicPartition(name, int(p.partition_index)) for name, t in answers for p in t.partitions]
                usable = session.handle_response(top, int(getattr(response, "session_id", 0)), answered, unknown_ids)
                if top is ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR:
                    # the session and the request disagree on names and ids (Java: a metadata
                    # update; the next fetch, a full one, opens a new session)
                    self.network.request_update()
                    return
                if not usable and (top in _SESSION_ERRORS or top is ErrorCode.NONE):
                    return  # the next fetch, at once, is a full one that opens a new session
            if top is not ErrorCode.NONE:
                log.debug("fetch from broker %d: %s", node, top.name)
                await trio.sleep(self.network.retry_backoff.seconds(0))
                return
            hints: dict[TopicPartition, tuple[int, int]] = {}
            for name, topic in answers:
                for p in topic.partitions:
                    tp = TopicPartition(name, int(p.partition_index))
                    requested = parts.get(tp)
                    if requested is None:
                        continue
                    hint = leader_hint(p)
                    if hint is not None:
                        hints[tp] = hint
                    got_data |= self._handle_partition(tp, requested, p, assignment_id)
            # KIP-951 (v16): the leaders the answer names take over at once, without waiting
            # for Metadata (the partitions' next fetch goes there; Java's
            # updatePartitionLeadership, a Metadata refresh still asked in the background)
            self.network.follow_leader_hints(hints, getattr(response, "node_endpoints", ()))
        finally:
            self._in_flight_nodes.discard(node)
            self._in_flight_partitions.difference_update(parts)
            self._wakeup.set()
            if got_data:
                self._signal_data()

    def _handle_partition(self, tp: TopicPartition, at: tuple[int, int], p: Any, assignment_id: int) -> bool:
        """Take one partition's answer; whether it gave ``poll()`` something (records or an error)."""
        st = self.subs.assignment.get(tp)
        if st is None or (assignment_id != self.subs.assignment_id and tp not in self.subs.assignment):
            return False
        offset = at[0]
        code = error_code(p.error_code)
        diverging = getattr(p, "diverging_epoch", None)
        if code is ErrorCode.NONE and diverging is not None and int(diverging.epoch) >= 0:
            if self._fetch_position(tp) == at:  # else a seek or a reset moved on meanwhile
                self._handle_divergence(tp, int(diverging.epoch), int(diverging.end_offset))
            return st.truncation is not None
        if code is ErrorCode.NONE:
            st.high_watermark = int(p.high_watermark)
            st.last_stable_offset = int(getattr(p, "last_stable_offset", -1))
            st.log_start_offset = int(getattr(p, "log_start_offset", -1))
            data = p.records
            if not data:
                return False
            aborted = None
            if self.isolation_level == 1:
                aborted = [(int(a.producer_id), int(a.first_offset)) for a in (p.aborted_transactions or ())]
            completed = CompletedFetch(
                tp,
                offset,
                data,
                high_watermark=st.high_watermark,
                last_stable_offset=st.last_stable_offset,
                log_start_offset=st.log_start_offset,
                aborted=aborted,
                assignment_id=assignment_id,
            )
            if completed.end_offset <= offset:
                return False  # only a partial batch: nothing to return yet
            self._buffered.setdefault(tp, deque()).append(completed)
            self._buffered_bytes += completed.size
            return True
        if code is ErrorCode.OFFSET_OUT_OF_RANGE:
            if st.position == offset:
                if self.subs.default_reset == "none":
                    self._errors.append(NoOffsetForPartition(f"fetch offset {offset} is out of range for {tp}"))
                else:
                    log.info("offset %d out of range for %s: resetting to %s", offset, tp, self.subs.default_reset)
                    self.subs.request_reset(tp)
            return False
        if code in _LEADER_ERRORS:
            self.network.request_update()
            return False
        if code.retriable:
            return False
        self._errors.append(KafkaError(f"fetch of {tp} failed with {code.name}", code=code))
        return True

    def _handle_divergence(self, tp: TopicPartition, epoch: int, end_offset: int) -> None:
        """The leader's log diverges from what was fetched (KIP-320): its ``epoch`` ends at
        ``end_offset``. As the Java consumer's ``SubscriptionState.maybeCompleteValidation``:
        when that is before the position, the records consumed after it are gone -- with
        ``auto.offset.reset=none`` that is a :class:`LogTruncationError`, else the position moves
        back to the first offset known to diverge (logged); when it is not, the position stands
        and only the data fetched past it (buffered, not yet consumed) is dropped."""
        st = self.subs.state(tp)
        self.discard(tp)  # fetched from the diverging log: refetched from the position
        position = st.position
        assert position is not None
        if end_offset < 0:
            if self.subs.default_reset == "none":
                self._errors.append(NoOffsetForPartition(f"{tp}: the leader knows no end of epoch {epoch}"))
            else:
                self.subs.request_reset(tp)
            return
        if end_offset >= position:
            return
        if self.subs.default_reset == "none":
            log.warning(
                "truncation detected for %s: position %d (epoch %d) is past the end of epoch %d at offset %d",
                tp,
                position,
                st.offset_epoch,
                epoch,
                end_offset,
            )
            st.truncation = (end_offset, epoch)  # every poll() raises until the user seeks
            return
        log.info(
            "truncation detected for %s at offset %d (epoch %d): resetting to the first offset known to diverge, %d"
            " (epoch %d)",
            tp,
            position,
            st.offset_epoch,
            end_offset,
            epoch,
        )
        self.subs.seek_validated(tp, end_offset, epoch)

    # -- positions ---------------------------------------------------------------------------------
    async def _reset_positions(self) -> None:
        """ListOffsets for every partition waiting for a reset (earliest / latest / timestamp)."""
        try:
            while True:
                pending = self.subs.needing_reset()  # auto.offset.reset=none: poll() raises instead
                if not pending:
                    return
                wanted = {
                    tp: EARLIEST_TIMESTAMP if v == EARLIEST else LATEST_TIMESTAMP if v == LATEST else int(v)
                    for tp, v in pending.items()
                }
                try:
                    found = await list_offsets(
                        self.network, wanted, isolation_level=self.isolation_level, timeout_s=self.default_timeout_s
                    )
                except KafkaError as exc:
                    log.warning("offset reset failed: %s", exc)
                    await trio.sleep(self.network.retry_backoff.seconds(3))
                    continue
                for tp, result in found.items():
                    st = self.subs.assignment.get(tp)
                    if st is None or st.position is not None or st.reset != pending.get(tp):
                        continue  # seeked or unassigned meanwhile
                    offset = result.offset
                    if offset < 0:  # timestamp past the last record: go to the end
                        latest = await list_offsets(
                            self.network, {tp: LATEST_TIMESTAMP}, timeout_s=self.default_timeout_s
                        )
                        offset = latest[tp].offset
                    st.position = offset
                    st.reset = None
        finally:
            self._resetting = False
            self._wakeup.set()

    # -- draining (poll) ---------------------------------------------------------------------------
    def raise_errors(self) -> None:
        if self._errors:
            error = self._errors.pop(0)
            raise error

    def raise_truncations(self) -> None:
        """Java's ``LogTruncationException``, raised by every poll() while a partition's log was
        truncated before its position under ``auto.offset.reset=none``, until the user seeks it."""
        truncated = self.subs.truncations()
        if truncated:
            where = ", ".join(f"{tp} at offset {at} (epoch {epoch})" for tp, (at, epoch) in truncated.items())
            raise LogTruncationError(f"truncation detected (auto.offset.reset=none): {where}", truncated)

    def discard(self, tp: TopicPartition) -> None:
        """Drop buffered data of ``tp`` (seek, pause, revocation)."""
        for completed in self._buffered.pop(tp, ()):
            self._buffered_bytes -= completed.size

    def has_buffered(self) -> bool:
        return any(self._buffered.values())

    def drain(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Decode up to ``max_records`` buffered records, advancing positions."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        if not self._buffered:
            return out
        want = max_records
        assignment = self.subs.assignment
        for tp in list(self._buffered):
            if want <= 0:
                break
            queue = self._buffered[tp]
            st = assignment.get(tp)
            if st is None or st.paused or st.position is None:
                self.discard(tp)
                continue
            while queue and want > 0:
                completed = queue[0]
                if not completed.fetch_offset <= st.position < completed.end_offset:
                    self.discard(tp)  # a seek moved the position away: the data is stale
                    break
                records: list[ConsumerRecord] = []
                st.position = completed.take(st.position, want, records, self.codecs, self.check_crcs)
                completed.fetch_offset = st.position
                if records:
                    st.offset_epoch = records[-1].leader_epoch
                    out[tp] = out[tp] + records if tp in out else records
                    want -= len(records)
                if completed.exhausted:
                    queue.popleft()
                    self._buffered_bytes -= completed.size
            if not queue:
                self._buffered.pop(tp, None)
        self._wakeup.set()  # room for the next prefetch
        return out
