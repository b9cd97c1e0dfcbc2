"""One partition's replication state on this broker (Kafka's ``Partition``).

The storage engine keeps bytes and offsets; everything that depends on *other* replicas lives
here, in one place the metadata layer updates: leader and leader epoch, replicas and ISR, the
follower log-end offsets the leader has seen, and the high watermark (HW), which is the minimum log
end offset (LEO) over the ISR and never moves backwards while this broker leads. On a single node
the ISR is just the leader, so the HW is the LEO right after every append.

Two append paths, as in Kafka: :meth:`Partition.append_records_to_leader` (a client or a
coordinator writes; offsets are assigned here, producer sequences are checked, duplicates are
answered with their original offsets) and :meth:`Partition.append_records_as_follower` (the
replica fetcher copies the leader's batches, offsets and epochs included). The last stable offset
(LSO) is the HW capped by the first offset of any open transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from .. import records
from ..config import LONG_MAX, LONG_MIN, TopicConfig
from ..errors import (
    ErrorCode,
    FencedLeaderEpoch,
    KafkaError,
    NotLeaderOrFollower,
    OffsetMovedToTieredStorage,
    OffsetOutOfRange,
    UnknownLeaderEpoch,
)
from ..interfaces import BatchMeta, FetchDataInfo, LogAppendInfo, PartitionLog, TopicPartition
from .api import DEBUGGING_REPLICA_ID, IsolationLevel
from .log_validator import AppendSettings
from .producer_state import (
    AbortedTxn,
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerStateManager,
    control_markers,
)
from .remote_log import RemoteLogView

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of a follower: its LEO and when it last caught up, and the
    leader's LEO at its previous fetch (Kafka's ``lastFetchLeaderLogEndOffset``)."""

    broker_id: int
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_fetch_time_ms: int = -1
    last_caught_up_time_ms: int = -1
    last_fetch_leader_log_end_offset: int = -1


@dataclass(frozen=True, slots=True)
class LeaderAppendResult:
    """A leader append: ``info`` when appended, ``duplicate`` when a retry was recognised."""

    info: LogAppendInfo | None
    duplicate: BatchMetadata | None = None
    completed_txns: tuple[CompletedTxn, ...] = ()

    @property
    def first_offset(self) -> int:
        if self.duplicate is not None:
            return self.duplicate.first_offset
        assert self.info is not None
        return self.info.first_offset


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A read with the offsets a fetch response reports alongside it."""

    info: FetchDataInfo
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    #: (epoch, end offset) of a fetch whose last fetched epoch this log contradicts (no records)
    diverging_epoch: tuple[int, int] | None = None


class Partition:
    """Leader/follower state, HW, LSO and both append paths of one partition."""

    def __init__(
        self,
        tp: TopicPartition,
        log: PartitionLog,
        local_broker_id: int,
        config: TopicConfig,
        *,
        producer_id_expiration_ms: int = 86_400_000,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.topic_partition = tp
        self.log = log
        self.local_broker_id = local_broker_id
        self.config = config
        self.append_settings = AppendSettings.from_config(config)
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        #: leader: the LEO when it took its current leader epoch (Kafka's
        #: ``leaderEpochStartOffsetOpt``); until the HW reaches it, ListOffsets cannot say what
        #: is readable (OFFSET_NOT_AVAILABLE). None while following
        self.leader_epoch_start_offset: int | None = None
        self.replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()
        #: replicas this leader is adding to the ISR in a write still in flight: the HW waits
        #: for them already (Kafka's ``maximalIsr``), so that none joins below the HW
        self.pending_isr_additions: frozenset[int] = frozenset()
        self.remote_replicas: dict[int, ReplicaState] = {}
        self._high_watermark = log.log_start_offset
        self._tell_log = True  # an engine written before PartitionLog.high_watermark may lack it
        self._set_high_watermark(self._high_watermark)
        #: follower: the leader's HW from the last fetch response (-1 until one arrives)
        self._leader_high_watermark = -1
        self.producer_state = ProducerStateManager(producer_id_expiration_ms, clock_ms=clock_ms)
        #: the log's compaction_count when the aborted index was last checked against it (-1:
        #: never, so the first read_committed fetch checks a state loaded from a snapshot too)
        self._aborted_checked_at = -1
        #: tiered storage (KIP-405): the remote segments the remote log manager last saw, None
        #: while the topic is not tiered. Its start is the log start offset while it lies below
        #: the local log's (``self.log.log_start_offset``, Kafka's local log start offset)
        self.remote: RemoteLogView | None = None

    # -- state changes from the metadata layer -------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    def make_leader(
        self,
        leader_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        partition_epoch: int = 0,
        now_ms: int = 0,
        *,
        own_isr_write: bool = False,
    ) -> bool:
        """Become (or stay) leader at ``leader_epoch``; returns True if this is a new leadership.

        A new epoch is recorded in the log's leader-epoch cache starting at the current LEO, so
        followers can truncate by epoch (KIP-101). ``own_isr_write``: the state is this leader's
        own ISR change, whose shrinks keep what the leader knows of the followers (Kafka resets
        it only for a state from elsewhere).
        """
        new_leadership = not self.is_leader or leader_epoch != self.leader_epoch
        old_isr = self.isr
        self.leader_id = self.local_broker_id
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.partition_epoch = partition_epoch
        if new_leadership:
            self.leader_epoch = leader_epoch
            self.leader_epoch_start_offset = self.log.log_end_offset
            entries = self.log.epoch_entries()
            if not entries or entries[-1].epoch < leader_epoch:
                self.log.assign_epoch_start_offset(leader_epoch, self.log.log_end_offset)
            self.remote_replicas = {
                r: ReplicaState(r, last_caught_up_time_ms=now_ms) for r in replicas if r != self.local_broker_id
            }
        else:
            for r in replicas:
                if r == self.local_broker_id:
                    continue
                if r not in self.remote_replicas:
                    self.remote_replicas[r] = ReplicaState(r, last_caught_up_time_ms=now_ms)
                elif r in old_isr and r not in self.isr and not own_isr_write:
                    # a follower taken out of the ISR (by the controller: it came back from a
                    # crash and its log may have lost an unflushed tail) rejoins only on what
                    # it fetches from now on, not on the log end it had before (Kafka's
                    # resetReplicaState: "not brought back into the ISR before a fetch")
                    self.remote_replicas[r] = ReplicaState(r)
        self.maybe_increment_high_watermark()
        return new_leadership

    def make_follower(
        self, leader_id: int, leader_epoch: int, replicas: Sequence[int], isr: Sequence[int], partition_epoch: int = 0
    ) -> bool:
        """Follow ``leader_id``; returns True if the leader or epoch changed (the fetcher then
        truncates by epoch before fetching)."""
        changed = leader_id != self.leader_id or leader_epoch != self.leader_epoch
        if changed:
            self._leader_high_watermark = -1  # a new leader's HW is not known until it answers
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.leader_epoch_start_offset = None
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.partition_epoch = partition_epoch
        self.remote_replicas = {}
        return changed

    def update_config(self, config: TopicConfig) -> None:
        """Apply changed topic configs live (to this object and to the log)."""
        self.config = config
        self.append_settings = AppendSettings.from_config(config)
        self.log.update_config(config)

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's fencing of requests that carry the requester's view of the leader epoch."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpoch(f"{self.topic_partition}: epoch {current_leader_epoch} < {self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpoch(f"{self.topic_partition}: epoch {current_leader_epoch} > {self.leader_epoch}")

    # -- offsets ---------------------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        """The first readable offset: in remote storage for a tiered partition that has deleted
        segments locally, else the local log's first."""
        local = self.log.log_start_offset
        remote = self.remote
        if remote is None or not 0 <= remote.log_start_offset <= remote.highest_copied_offset:
            return local
        return min(local, remote.log_start_offset)

    @property
    def local_log_start_offset(self) -> int:
        """The first offset in the local log (KIP-405's local log start offset)."""
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        hw = self._high_watermark
        unstable = self.producer_state.first_unstable_offset(hw)
        if unstable is None:
            return hw
        # an open transaction whose first records retention or DeleteRecords took: the LSO
        # does not fall below the log start (Kafka's updateFirstUnstableOffset)
        return min(hw, max(unstable, self.log.log_start_offset))

    def _set_high_watermark(self, hw: int) -> None:
        """Move the HW, and tell the log (retention and compaction stop below it)."""
        self._high_watermark = hw
        if self._tell_log:
            try:
                self.log.high_watermark = hw
            except AttributeError:  # a log with __slots__ and no such slot: it has no use for it
                self._tell_log = False

    def restore_high_watermark(self, checkpointed: int) -> None:
        """Start from the checkpointed HW (bounded by the log) after a restart."""
        self._set_high_watermark(max(self.log.log_start_offset, min(checkpointed, self.log.log_end_offset)))

    @property
    def effective_min_isr(self) -> int:
        """``min.insync.replicas``, but never more than the partition has replicas (Kafka's
        ``effectiveMinIsr``, KAFKA-15583): a topic of replication factor 1 under a broker-wide
        ``min.insync.replicas=2`` would otherwise never move its HW nor take acks=all."""
        return min(self.config.min_insync_replicas, len(self.replicas) or 1)

    def maybe_increment_high_watermark(self) -> bool:
        """Leader: HW = min LEO over the ISR and the replicas an ISR write in flight adds (Kafka's
        ``maximalIsr``: acks=all answered while a replica joins would otherwise leave it below the
        HW, electable without those records), never backwards; frozen while the ISR is smaller
        than :attr:`effective_min_isr` (Kafka 3.7+). Returns True if it moved."""
        if not self.is_leader or len(self.isr) < self.effective_min_isr:
            return False
        new_hw = self.log.log_end_offset
        for r in self.isr | self.pending_isr_additions:
            if r == self.local_broker_id:
                continue
            state = self.remote_replicas.get(r)
            new_hw = min(new_hw, state.log_end_offset if state is not None else -1)
        if new_hw > self._high_watermark:
            self._set_high_watermark(new_hw)
            return True
        return False

    def update_follower_high_watermark(self, leader_high_watermark: int) -> bool:
        """Follower: HW = min(leader's HW, own LEO) as reported in each fetch response."""
        self._leader_high_watermark = leader_high_watermark
        new_hw = max(self.log.log_start_offset, min(leader_high_watermark, self.log.log_end_offset))
        moved = new_hw != self._high_watermark
        self._set_high_watermark(new_hw)
        return moved

    def follow_log_start_offset(self, leader_log_start_offset: int) -> bool:
        """Follower: move the log start up to the leader's (Kafka's follower does it on every
        fetch response), never past this replica's HW; whether it moved."""
        target = min(leader_log_start_offset, self._high_watermark)
        remote = self.remote
        if remote is not None and remote.segments and remote.log_start_offset < target <= remote.highest_copied_offset:
            # tiered: the leader's DeleteRecords moved the start inside remote storage
            self.remote = RemoteLogView(remote.segments, target)
        if target <= self.log.log_start_offset:
            return False
        self.log.delete_records_before(target)
        self.producer_state.on_log_start_offset_advanced(self.log.log_start_offset)
        return True

    @property
    def offset_lag(self) -> int:
        """How far this replica's log end is behind what the leader has (DescribeLogDirs'
        offset lag): 0 on the leader; on a follower, the leader's HW from its last fetch
        response minus this log's LEO, at least 0 (0 too before any response). The leader's
        LEO never reaches a follower, and its HW is the part of it that counts (committed)."""
        if self.is_leader or self._leader_high_watermark < 0:
            return 0
        return max(self._leader_high_watermark - self.log.log_end_offset, 0)

    # -- the leader's view of followers ----------------------------------------------------------
    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, log_start_offset: int, now_ms: int
    ) -> bool:
        """A follower fetched from ``fetch_offset`` (a read without error): that is its LEO.
        Returns True if the HW moved.

        It is caught up now if it reached the leader's LEO, and caught up as of its previous
        fetch if it reached what the leader had then (KAFKA-1546): under a steady produce load
        the leader has appended again by the time the next fetch comes, so a follower that
        always fetches all it was given never reaches the LEO of the moment, and left the ISR
        after ``replica.lag.time.max.ms`` although it was one fetch behind."""
        state = self.remote_replicas.get(replica_id)
        if state is None:
            raise NotLeaderOrFollower(f"{self.topic_partition}: broker {replica_id} is not a replica")
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, state.last_fetch_time_ms)
        state.log_end_offset = fetch_offset
        state.log_start_offset = log_start_offset
        state.last_fetch_time_ms = now_ms
        state.last_fetch_leader_log_end_offset = leo
        return self.maybe_increment_high_watermark()

    def low_watermark(self, live_brokers: Collection[int]) -> int:
        """Leader: the smallest log start offset among this replica and the followers on live
        brokers (Kafka's ``lowWatermarkIfLeader``): what DeleteRecords answers once it is past
        the new start. A follower reports its log start in each fetch (-1 before its first)."""
        low = self.log_start_offset
        for r, state in self.remote_replicas.items():
            if r in live_brokers and state.log_start_offset < low:
                low = state.log_start_offset
        return low

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int) -> set[int]:
        """ISR members that have not caught up to the leader's LEO within ``max_lag_ms``
        (candidates for an ISR shrink, proposed through the metadata store)."""
        out = set()
        for r in self.isr:
            if r == self.local_broker_id:
                continue
            state = self.remote_replicas.get(r)
            if state is None or now_ms - state.last_caught_up_time_ms > max_lag_ms:
                out.add(r)
        return out

    def can_join_isr(self, replica_id: int, now_ms: int | None = None, max_lag_ms: int | None = None) -> bool:
        """A follower rejoins once its LEO reached the HW and the start of the current epoch;
        with ``now_ms``, only if it also caught up within ``max_lag_ms`` (Kafka's
        ``isCaughtUp``): a follower that stopped fetching must not rejoin on the LEO it had."""
        state = self.remote_replicas.get(replica_id)
        if state is None or replica_id in self.isr:
            return False
        if now_ms is not None and max_lag_ms is not None and now_ms - state.last_caught_up_time_ms > max_lag_ms:
            return False
        entries = self.log.epoch_entries()
        epoch_start = entries[-1].start_offset if entries else 0
        return state.log_end_offset >= max(self._high_watermark, epoch_start)

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """acks=all: (done, error) for a batch ending before ``required_offset``."""
        if not self.is_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._high_watermark >= required_offset:
            if len(self.isr) < self.effective_min_isr:
                return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return True, ErrorCode.NONE
        return False, ErrorCode.NONE

    # -- appends ---------------------------------------------------------------------------------
    def append_records_to_leader(
        self,
        data: bytearray | memoryview,
        batches: Sequence[BatchMeta],
        origin: AppendOrigin,
        required_acks: int = 1,
    ) -> LeaderAppendResult:
        """Append validated batches as leader: duplicate check, producer-state validation, offset
        assignment by the log, producer-state update, HW advance. Synchronous from start to end,
        so no other append can slip between the checks and the write."""
        if not self.is_leader:
            raise NotLeaderOrFollower(f"{self.topic_partition}: leader is {self.leader_id}")
        if required_acks == -1 and len(self.isr) < self.effective_min_isr:
            raise KafkaError(
                f"{self.topic_partition}: ISR {sorted(self.isr)} is smaller than min.insync.replicas "
                f"{self.effective_min_isr}",
                code=ErrorCode.NOT_ENOUGH_REPLICAS,
            )
        if origin is AppendOrigin.CLIENT and len(batches) == 1:
            dup = self.producer_state.find_duplicate(batches[0])
            if dup is not None:
                return LeaderAppendResult(None, duplicate=dup)
        markers = control_markers(data, batches) if any(b.is_control for b in batches) else {}
        self.producer_state.validate(batches, origin, markers)
        lso_before = self.last_stable_offset
        info = self.log.append_as_leader(data, batches, self.leader_epoch)
        firsts = _first_offsets(info.first_offset, batches)
        completed = self.producer_state.update(batches, firsts, markers, lso_before)
        self.maybe_increment_high_watermark()
        return LeaderAppendResult(info, completed_txns=tuple(completed))

    def append_records_as_follower(self, data: bytes, batches: Sequence[BatchMeta]) -> LogAppendInfo:
        """Append the leader's batches unchanged (offsets and epochs already set)."""
        if self.is_leader:
            raise NotLeaderOrFollower(f"{self.topic_partition}: this broker leads, it cannot follow")
        headers = [records.parse_header(data, b.position) for b in batches]
        firsts = [h.base_offset for h in headers]
        markers = control_markers(data, batches) if any(b.is_control for b in batches) else {}
        self.producer_state.validate(batches, AppendOrigin.REPLICATION)
        info = self.log.append_as_follower(data, batches)
        self.producer_state.update(batches, firsts, markers, self.last_stable_offset)
        for header in headers:
            entries = self.log.epoch_entries()
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not entries or entries[-1].epoch < epoch):
                self.log.assign_epoch_start_offset(epoch, header.base_offset)
        return info

    def truncate_to(self, offset: int) -> None:
        """Follower truncation (by leader epoch): cut the log and make derived state match it."""
        self.log.truncate_to(offset)
        self.producer_state.truncate_and_reload(self.log)
        self._set_high_watermark(min(self._high_watermark, self.log.log_end_offset))

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Follower: empty the log and restart it at ``offset`` (its fetch offset fell below the
        leader's log start, or the leader's first batch straddles it). The HW is the new log end,
        as in Kafka's ``truncateFullyAndStartAt``: below the log start it would be checkpointed
        and, after a takeover, answered as a LATEST offset that no longer exists."""
        self.log.truncate_fully_and_start_at(offset)
        self.producer_state.truncate_and_reload(self.log)
        self._set_high_watermark(self.log.log_end_offset)

    # -- reads -----------------------------------------------------------------------------------
    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [fetch_offset, upper_bound_offset)
        must name, after dropping those whose ABORT marker compaction removed (checked once per
        compaction of the log, not per fetch)."""
        count = self.log.compaction_count
        if count != self._aborted_checked_at:
            removed = self.producer_state.drop_aborted_without_marker(self.log)
            if removed:
                log.info("%s: %d aborted transactions lost their markers to compaction", self.topic_partition, removed)
            self._aborted_checked_at = count
        return self.producer_state.aborted_transactions(fetch_offset, upper_bound_offset)

    def read_records(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation_level: IsolationLevel,
        *,
        min_one_batch: bool,
        replica_id: int = -1,
        current_leader_epoch: int = -1,
        fetch_only_from_leader: bool = True,
        last_fetched_epoch: int = -1,
    ) -> ReadResult:
        """Read for a consumer (up to the HW or LSO), a follower or a debugging consumer
        (replica id -2, Kafka's ``DEBUGGING_CONSUMER_ID``: up to the LEO).

        ``fetch_only_from_leader=False`` (KIP-392: a consumer sent here by a replica selector)
        lets a follower serve a consumer, up to its own HW (what its leader last told it) or
        LSO. An offset past its log end is OFFSET_OUT_OF_RANGE for a consumer that sent its
        leader epoch (KIP-320: it asks the leader what is true), and an empty answer for one
        that did not, which may have come on stale metadata and retries (as Kafka since 3.4,
        apache/kafka#12734).

        ``last_fetched_epoch`` (Fetch v12+, >= 0): see :meth:`diverging_epoch`."""
        # the requester's epoch first, as Kafka's getLocalLog: a replica that is not the leader
        # tells an older epoch FENCED_LEADER_EPOCH and a newer one UNKNOWN_LEADER_EPOCH
        self.check_leader_epoch(current_leader_epoch)
        if not self.is_leader and (fetch_only_from_leader or replica_id >= 0):
            # followers fetch from the leader, and so do consumers unless a selector sent them
            raise NotLeaderOrFollower(f"{self.topic_partition}: leader is {self.leader_id}")
        if replica_id >= 0 and replica_id not in self.remote_replicas:
            raise NotLeaderOrFollower(f"{self.topic_partition}: broker {replica_id} is not a follower of it")
        hw = self._high_watermark
        lso = self.last_stable_offset
        lstart = self.log.log_start_offset
        leo = self.log.log_end_offset
        if replica_id >= 0 or replica_id == DEBUGGING_REPLICA_ID:
            max_offset = None
        elif isolation_level is IsolationLevel.READ_COMMITTED:
            max_offset = lso
        else:
            max_offset = hw
        if last_fetched_epoch >= 0:
            diverging = self.diverging_epoch(fetch_offset, last_fetched_epoch)
            if diverging is not None:
                empty = self.log.read(leo, max_bytes, max_offset=leo, min_one_batch=False)
                return ReadResult(empty, hw, lso, self.log_start_offset, leo, diverging)
        if fetch_offset < lstart and (
            self.log_start_offset <= fetch_offset or (self.remote is None and self.config.remote_storage_enable)
        ):
            # below the local log, in remote storage: a consumer's read is served from there
            # (ReplicaManager), a follower restarts at the local log start (KIP-405). A tiered
            # partition whose remote segments were not listed yet asks remote storage too
            raise OffsetMovedToTieredStorage(
                f"{self.topic_partition}: offset {fetch_offset} is below the local log start {lstart}"
            )
        if fetch_offset > leo and not self.is_leader and current_leader_epoch < 0 and lstart <= fetch_offset:
            empty = self.log.read(leo, max_bytes, max_offset=max_offset, min_one_batch=False)
            return ReadResult(empty, hw, lso, self.log_start_offset, leo)
        if fetch_offset < lstart or fetch_offset > leo:
            raise OffsetOutOfRange(f"{self.topic_partition}: offset {fetch_offset} is outside [{lstart}, {leo}]")
        info = self.log.read(fetch_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        if replica_id < 0 and 0 < info.size <= _EMPTY_RUN_BYTES and info.size % records.HEADER_SIZE == 0:
            info = self._past_empty_batches(info, max_bytes, max_offset, min_one_batch)
        return ReadResult(info, hw, lso, self.log_start_offset, leo)

    def diverging_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """Where a fetcher's log, ending at ``fetch_offset`` under ``last_fetched_epoch``,
        diverges from this one (Kafka's check in ``Partition.readFromLocalLog``, KIP-320 moved
        into Fetch v12 by KIP-595), for followers and consumers alike: this log's largest epoch
        <= ``last_fetched_epoch`` and its end offset, when that epoch is older or ends before
        ``fetch_offset``; None when the logs agree.

        OFFSET_OUT_OF_RANGE when this log knows no epoch that old (it cannot tell where the
        logs part), and when the offset is below the log start, diverging or not (as Kafka)."""
        epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0 or end < 0:
            raise OffsetOutOfRange(
                f"{self.topic_partition}: no end offset for the last fetched epoch {last_fetched_epoch}"
            )
        if fetch_offset < self.log_start_offset:
            raise OffsetOutOfRange(
                f"{self.topic_partition}: offset {fetch_offset} is below the log start {self.log_start_offset}"
            )
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def _past_empty_batches(
        self, info: FetchDataInfo, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> FetchDataInfo:
        """A consumer's read that found only empty batches (what compaction keeps of a batch
        whose records all went, e.g. a cleaned segment that held nothing else) reads on past
        them, so the answer holds records when the log has more. librdkafka takes an answer of
        empty batches alone for a message too large for its fetch size: it doubles that size
        each time and, after a run of them, reports MSG_SIZE_TOO_LARGE to the application.
        Followers still get every batch (their producer state needs them); at the end of what
        the consumer may read, the empty batches are answered (the client moves past them)."""
        limit = self.log.log_end_offset if max_offset is None else max_offset
        current = info
        for _ in range(_EMPTY_RUN_READS):
            after = _after_empty_batches(current.to_bytes())
            if after is None or after >= limit:
                break
            nxt = self.log.read(after, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
            if nxt.size == 0:
                nxt.release()
                break
            if current is not info:
                current.release()
            current = nxt
            if current.size > _EMPTY_RUN_BYTES:
                break
        if current is not info:
            info.release()
        return current

    def fetch_offset_for_timestamp(
        self, timestamp: int, isolation_level: IsolationLevel, bound: int | None = None
    ) -> tuple[int, int] | None:
        """ListOffsets by time: (offset, timestamp) of the first batch at or after ``timestamp``
        that is visible (below ``bound``: by default the HW or LSO), or None."""
        if bound is None:
            committed = isolation_level is IsolationLevel.READ_COMMITTED
            bound = self.last_stable_offset if committed else self._high_watermark
        found = self.log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= bound:
            return None
        offset, record_timestamp = found
        if not LONG_MIN <= record_timestamp <= LONG_MAX:  # (the offset is below the bound, so in range)
            # a batch written before produce refused them may hold a record whose timestamp
            # (firstTimestamp + delta) overflows int64, which no ListOffsets answer can carry;
            # Kafka's Java arithmetic wraps it. Clamping keeps the answer's meaning (the record
            # is at or after the asked timestamp) and the partition answerable.
            record_timestamp = min(max(record_timestamp, LONG_MIN), LONG_MAX)
        return offset, record_timestamp

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance the log start (never past the HW); -1 means the HW.

        Only where ``cleanup.policy`` has ``delete``, as Kafka's ``deleteRecordsOnLeader``: a
        compacted-only topic keeps every key's latest record (``__consumer_offsets`` its groups'
        committed offsets), and moving its start would drop them -- POLICY_VIOLATION instead."""
        if not self.is_leader:
            raise NotLeaderOrFollower(f"{self.topic_partition}: leader is {self.leader_id}")
        if not self.config.delete:
            raise KafkaError(
                f"Records of partition {self.topic_partition} can not be deleted due to the configured policy",
                code=ErrorCode.POLICY_VIOLATION,
            )
        target = self._high_watermark if offset == -1 else offset
        if target < 0 or target > self._high_watermark:
            raise OffsetOutOfRange(
                f"{self.topic_partition}: cannot delete records before {offset}: high watermark is "
                f"{self._high_watermark}"
            )
        remote = self.remote
        if remote is not None and remote.segments and target > remote.log_start_offset:
            # the remote log manager deletes the remote segments wholly below it
            self.remote = RemoteLogView(remote.segments, target)
        new_start = self.log.delete_records_before(target) if target > self.log.log_start_offset else target
        self.producer_state.on_log_start_offset_advanced(self.log.log_start_offset)
        return max(new_start, self.log_start_offset)


def _first_offsets(first_offset: int, batches: Sequence[BatchMeta]) -> list[int]:
    out = []
    offset = first_offset
    for b in batches:
        out.append(offset)
        offset += b.last_offset_delta + 1
    return out


#: reads of at most this many bytes, and a multiple of 61 (an empty batch is a bare 61-byte header),
#: are checked for holding empty batches only: the check reads the bytes, so a consumer that keeps
#: up (small reads, each fetch) pays it about once in 61 reads, not on each
_EMPTY_RUN_BYTES = 4096
#: how many further reads a consumer's read may take to get past runs of empty batches
_EMPTY_RUN_READS = 64


def _after_empty_batches(data: bytes) -> int | None:
    """The offset after the batches in ``data`` when every one is an empty data batch (no
    records, not a control batch), else None."""
    last = None
    for _, header in records.iter_headers(data):
        if header.record_count != 0 or header.is_control:
            return None
        last = header.last_offset
    return None if last is None else last + 1
