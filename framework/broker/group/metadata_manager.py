"""The group cache and its persistence in ``__consumer_offsets`` (Kafka's ``GroupMetadataManager``).

It owns the groups of the ``__consumer_offsets`` partitions this broker leads: loads them from the
log (offset commits, group metadata, tombstones; the last record per key wins, as compaction will
eventually make physically true), appends group metadata after a rebalance and offset commits
as they come, and expires offsets of groups no one uses any more (``offsets.retention.minutes``),
writing tombstones so compaction drops them. Group membership rules live in the coordinator.
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from ...errors import CorruptMessage, ErrorCode
from ...interfaces import TopicPartition
from ...records import ControlRecordType
from .consumer_group import ConsumerGroup
from .consumer_schema import ConsumerGroupKey, group_from_records, group_records
from .hashing import partition_for
from .schema import (
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from .state import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata

if TYPE_CHECKING:
    from ...config import Config
    from .offsets_log import OffsetsLog

log = logging.getLogger(__name__)

#: OffsetFetch's "no committed offset"
INVALID_OFFSET = -1


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    """One partition of an OffsetFetch answer."""

    offset: int = INVALID_OFFSET
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


class PendingTxnOffset(NamedTuple):
    """A transactional offset commit awaiting its transaction's marker, with the place of its
    record in the log (:attr:`GroupMetadataManager._commit_seq` order): at a COMMIT marker it
    becomes the committed offset only if no later record (a plain commit written after it)
    already set one, as Kafka's ``completePendingTxnOffsetCommit`` compares log offsets."""

    value: OffsetAndMetadata
    seq: int


def _commit_append_error(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed offsets append to what OffsetCommit returns."""
    if error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return error


def group_append_error(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed group-metadata append to what SyncGroup/JoinGroup (and a
    KIP-848 heartbeat whose records could not be written) return."""
    if error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return error


class GroupMetadataManager:
    """Groups of the owned ``__consumer_offsets`` partitions, in memory and in the log."""

    def __init__(self, offsets_log: OffsetsLog, config: Config, now_ms: Callable[[], int]) -> None:
        self.log = offsets_log
        self.now_ms = now_ms
        self.groups: dict[str, GroupMetadata] = {}
        #: KIP-848 consumer groups (their committed offsets stay in :attr:`groups`, under an Empty
        #: classic group of the same id)
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        #: group -> the consumer group records last appended (encoded key -> value)
        self.consumer_written: dict[str, dict[bytes, bytes]] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self.max_metadata_bytes = int(config["offset.metadata.max.bytes"])
        self.retention_ms = int(config["offsets.retention.minutes"]) * 60_000
        #: the order of offset records in the log: each plain or transactional commit takes the
        #: next number before its append (appends to a partition reach the log in call order),
        #: and loading numbers the records it reads
        self._commit_seq = itertools.count()
        #: (group, partition) -> the number of the record behind its committed offset
        self._applied_seq: dict[tuple[str, TopicPartition], int] = {}
        #: TxnOffsetCommit offsets written (as the producer's transactional records) but not yet
        #: settled by the transaction's marker: producer id -> group -> partition -> offset.
        #: Rebuilt from the log on load, so they survive a restart, as in Kafka.
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, PendingTxnOffset]]] = {}
        #: group -> the producers in :attr:`pending_txn` holding offsets of it: OffsetFetch with
        #: ``require_stable`` asks about one group's partitions, and walking every producer for
        #: each partition cost O(open transactions of every group) per partition
        self._pending_txn_producers: dict[str, set[int]] = {}
        #: markers appended to a partition while it loads (partition -> (producer id, commit)):
        #: the load may have read past their place already, so they are applied at its end
        self._settled_while_loading: dict[int, list[tuple[int, bool]]] = {}

    # -- ownership -------------------------------------------------------------------------------
    @property
    def num_partitions(self) -> int:
        """The partition count of ``__consumer_offsets`` (the topic's own once it exists)."""
        return self.log.num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.log.num_partitions)

    def is_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading

    def is_local(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned

    def get_group(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def add_group(self, group: GroupMetadata) -> GroupMetadata:
        return self.groups.setdefault(group.group_id, group)

    def local_groups(self) -> list[GroupMetadata]:
        return [g for g in self.groups.values() if self.partition_for(g.group_id) in self.owned]

    # -- loading -----------------------------------------------------------------------------------
    async def load_partition(
        self,
        partition: int,
        on_loaded: Callable[[GroupMetadata], None],
        on_consumer_group_loaded: Callable[[ConsumerGroup], None] = lambda group: None,
    ) -> int:
        """Read ``partition`` from its log start and install its groups (classic and KIP-848
        consumer groups); returns how many groups.

        The partition answers COORDINATOR_LOAD_IN_PROGRESS until this returns.
        """
        self.loading.add(partition)
        try:
            #: KIP-848 groups: group -> key -> the last value (None: a tombstone)
            consumer_records: dict[str, dict[ConsumerGroupKey, bytes | None]] = defaultdict(dict)
            offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = defaultdict(dict)
            applied: dict[tuple[str, TopicPartition], int] = {}  # the record behind each offset
            records: dict[str, GroupRecord | None] = {}
            # transactional offset commits wait for their producer's marker (Kafka's loader):
            # COMMIT applies them at the marker's place in the log unless a later plain commit
            # of the partition came before the marker, ABORT drops them
            pending: dict[int, dict[str, dict[TopicPartition, PendingTxnOffset]]] = {}

            def settle(by_group: Mapping[str, Mapping[TopicPartition, PendingTxnOffset]]) -> None:
                for group_id, values in by_group.items():
                    for tp, held in values.items():
                        if applied.get((group_id, tp), -1) < held.seq:
                            offsets[group_id][tp] = held.value
                            applied[group_id, tp] = held.seq

            async for entry in self.log.read_entries(partition):
                if entry.control is not None:
                    settled = pending.pop(entry.producer_id, {})
                    if entry.control is ControlRecordType.COMMIT:
                        settle(settled)
                    continue
                if entry.key is None:
                    continue
                try:
                    key = decode_key(entry.key)
                    if isinstance(key, OffsetKey):
                        seq = next(self._commit_seq)
                        if entry.transactional:
                            if entry.value is not None:
                                by_group = pending.setdefault(entry.producer_id, {})
                                held = PendingTxnOffset(decode_offset_value(entry.value), seq)
                                by_group.setdefault(key.group, {})[key.tp] = held
                        elif entry.value is None:
                            # a tombstone also takes the partition's offsets out of the open
                            # transactions before it (Kafka's replay of an offset tombstone):
                            # OffsetDelete and DeleteGroups write one for them
                            offsets[key.group].pop(key.tp, None)
                            applied.pop((key.group, key.tp), None)
                            for by_group in pending.values():
                                by_group.get(key.group, {}).pop(key.tp, None)
                        else:
                            offsets[key.group][key.tp] = decode_offset_value(entry.value)
                            applied[key.group, key.tp] = seq
                    elif isinstance(key, GroupKey):
                        records[key.group] = decode_group_value(entry.value) if entry.value is not None else None
                    elif isinstance(key, ConsumerGroupKey):
                        consumer_records[key.group][key] = entry.value
                except CorruptMessage as exc:
                    log.warning("skipping unreadable __consumer_offsets-%d record: %s", partition, exc)
            for pid, commit in self._settled_while_loading.pop(partition, []):
                settled = pending.pop(pid, {})
                if commit:
                    settle(settled)
            for pid, by_group in pending.items():  # transactions still open: settled by their marker later
                mine = self.pending_txn.setdefault(pid, {})
                for group_id, values in by_group.items():
                    mine.setdefault(group_id, {}).update(values)
                    self._pending_txn_producers.setdefault(group_id, set()).add(pid)
            loaded = self._install_consumer_groups(partition, consumer_records, on_consumer_group_loaded)
            for group_id in set(offsets) | set(records):
                record = records.get(group_id)
                group_offsets = offsets.get(group_id, {})
                if record is None and not group_offsets:
                    continue  # deleted group
                if group_id in self.consumer_groups and record is not None and record.members:
                    # a classic record written after the group became a consumer group (an
                    # assignment stored while the upgrade was written): the consumer group wins
                    log.warning("group %s of __consumer_offsets-%d has classic members and consumer group records; "
                                "loading it as a consumer group", group_id, partition)  # fmt: skip
                    record = None
                group = self._group_from_record(group_id, record)
                group.offsets.update(group_offsets)
                for tp in group_offsets:
                    self._applied_seq[group_id, tp] = applied[group_id, tp]
                self.groups[group_id] = group
                loaded += 1
                on_loaded(group)
            self.owned.add(partition)
            return loaded
        finally:
            self.loading.discard(partition)
            self._settled_while_loading.pop(partition, None)

    def _install_consumer_groups(
        self,
        partition: int,
        by_group: Mapping[str, Mapping[ConsumerGroupKey, bytes | None]],
        on_loaded: Callable[[ConsumerGroup], None],
    ) -> int:
        """Rebuild the KIP-848 groups of a loaded partition from the last value of each key."""
        loaded = 0
        for group_id, latest in by_group.items():
            live = {k: v for k, v in latest.items() if v is not None}
            try:
                group = group_from_records(group_id, live)
            except CorruptMessage as exc:
                log.warning("skipping consumer group %s of __consumer_offsets-%d: %s", group_id, partition, exc)
                continue
            if group is None:
                continue
            self.consumer_groups[group_id] = group
            self.consumer_written[group_id] = {k.encode(): v for k, v in live.items()}
            loaded += 1
            on_loaded(group)
        return loaded

    def consumer_group_delta(self, group: ConsumerGroup, *, deleted: bool = False) -> list[tuple[bytes, bytes | None]]:
        """The records to append for a KIP-848 group: what changed since the last write (Kafka's
        records: group epoch, subscriptions, target and current assignments) and tombstones for
        what is gone (members that left; everything when ``deleted``). Taken as written: call
        it in the order the changes happened and append the results in that order."""
        written = self.consumer_written.get(group.group_id, {})
        now = {} if deleted else group_records(group)
        changes: list[tuple[bytes, bytes | None]] = [(k, v) for k, v in now.items() if written.get(k) != v]
        changes += [(k, None) for k in written if k not in now]
        if deleted:
            self.consumer_written.pop(group.group_id, None)
        else:
            self.consumer_written[group.group_id] = now
        return changes

    def _group_from_record(self, group_id: str, record: GroupRecord | None) -> GroupMetadata:
        if record is None:
            return GroupMetadata(group_id, current_state_timestamp=None)
        group = GroupMetadata(
            group_id,
            state=GroupState.STABLE if record.members else GroupState.EMPTY,
            generation_id=record.generation,
            protocol_type=record.protocol_type or None,
            protocol_name=record.protocol,
            leader_id=record.leader,
            current_state_timestamp=record.current_state_timestamp if record.current_state_timestamp >= 0 else None,
        )
        for m in record.members:
            member = MemberMetadata(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                record.protocol_type,
                [(record.protocol or "", m.subscription)],
                assignment=m.assignment,
            )
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
            group.supported_protocols.update(member.protocols)
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    # -- group metadata --------------------------------------------------------------------------
    def group_record(self, group: GroupMetadata, assignment: Mapping[str, bytes]) -> GroupRecord:
        protocol = group.protocol_name
        members = tuple(
            MemberRecord(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(protocol) if protocol is not None else b"",
                assignment.get(m.member_id, b""),
            )
            for m in group.members.values()
        )
        ts = group.current_state_timestamp if group.current_state_timestamp is not None else -1
        return GroupRecord(group.protocol_type or "", group.generation_id, protocol, group.leader_id, ts, members)

    async def store_group(self, group: GroupMetadata, assignment: Mapping[str, bytes]) -> ErrorCode:
        """Append the group's metadata (after a rebalance) and wait for it; NONE or the error to
        return to the members."""
        record = group_value(self.group_record(group, assignment))
        error = await self.log.append(
            self.partition_for(group.group_id), [(group_key(group.group_id), record)], self.now_ms()
        )
        return group_append_error(error)

    # -- offsets -------------------------------------------------------------------------------------
    def _check_metadata_sizes(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, OffsetAndMetadata]]:
        """(OFFSET_METADATA_TOO_LARGE for metadata past ``offset.metadata.max.bytes``, the rest)."""
        result: dict[TopicPartition, ErrorCode] = {}
        valid: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, value in offsets.items():
            if len(value.metadata.encode("utf-8")) > self.max_metadata_bytes:
                result[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                valid[tp] = value
        return result, valid

    async def store_offsets(
        self, group: GroupMetadata, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> dict[TopicPartition, ErrorCode]:
        """Append offset commits; the cache changes only once the append succeeded."""
        result, valid = self._check_metadata_sizes(offsets)
        if not valid:
            return result
        seq = next(self._commit_seq)
        records = [(offset_key(group.group_id, tp), offset_value(v)) for tp, v in valid.items()]
        group.pending_offset_commits.update(valid.keys())
        try:
            error = await self.log.append(self.partition_for(group.group_id), records, self.now_ms())
        finally:
            group.pending_offset_commits.subtract(valid.keys())
            group.pending_offset_commits += type(group.pending_offset_commits)()
        if error != ErrorCode.NONE:
            mapped = _commit_append_error(error)
            return {**result, **dict.fromkeys(valid, mapped)}
        if group.state is not GroupState.DEAD:
            for tp, value in valid.items():
                key = (group.group_id, tp)
                if self._applied_seq.get(key, -1) <= seq:  # a slower, older commit must not win
                    self._applied_seq[key] = seq
                    group.offsets[tp] = value
        return {**result, **dict.fromkeys(valid, ErrorCode.NONE)}

    def get_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None, require_stable: bool = False
    ) -> dict[TopicPartition, PartitionOffset]:
        """Committed offsets (all of the group's when ``partitions`` is None); -1 when none.

        ``require_stable`` (OffsetFetch v7+, KIP-447): a partition with an offset commit still
        in flight, or with transactional offsets whose transaction has not ended, answers
        UNSTABLE_OFFSET_COMMIT instead of the last committed offset (Kafka's
        ``hasPendingOffsetCommitsForTopicPartition``); the client retries until it is settled.
        """
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            # a TxnOffsetCommit may precede the group's first plain commit: still unstable
            return {
                tp: PartitionOffset(error=ErrorCode.UNSTABLE_OFFSET_COMMIT)
                if require_stable and self.has_pending_txn(group_id, tp)
                else PartitionOffset()
                for tp in partitions or ()
            }
        wanted: Iterable[TopicPartition] = partitions if partitions is not None else list(group.offsets)
        out: dict[TopicPartition, PartitionOffset] = {}
        for tp in wanted:
            if require_stable and (group.pending_offset_commits[tp] > 0 or self.has_pending_txn(group_id, tp)):
                out[tp] = PartitionOffset(error=ErrorCode.UNSTABLE_OFFSET_COMMIT)
                continue
            value = group.offsets.get(tp)
            out[tp] = (
                PartitionOffset(value.offset, value.leader_epoch, value.metadata)
                if value is not None
                else PartitionOffset()
            )
        return out

    # -- transactional offsets (TxnOffsetCommit) ---------------------------------------------------------
    async def store_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """Write offsets committed inside a transaction as the producer's transactional records
        (Kafka's way: durable at once, visible only once the transaction's COMMIT marker lands
        in this partition) and hold them until :meth:`complete_txn`.

        They are held from before the append (Kafka's ``prepareTxnOffsetCommit``): the append
        waits for acks=all, and the transaction's marker can land meanwhile (it timed out, or a
        new instance aborted it). Held only after the append, they were held for a transaction
        that had ended: UNSTABLE for require-stable fetches for ever, and applied by the
        producer's next committed transaction. A failed append lets go of what it held."""
        result, valid = self._check_metadata_sizes(offsets)
        if not valid:
            return result
        held = self.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
        replaced = {tp: held[tp] for tp in valid if tp in held}
        seq = next(self._commit_seq)
        holding = {tp: PendingTxnOffset(value, seq) for tp, value in valid.items()}
        held.update(holding)
        self._pending_txn_producers.setdefault(group_id, set()).add(producer_id)
        records = [(offset_key(group_id, tp), offset_value(v)) for tp, v in valid.items()]
        error = await self.log.append(
            self.partition_for(group_id),
            records,
            self.now_ms(),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transactional=True,
        )
        if error != ErrorCode.NONE:
            self._let_go_of_txn_offsets(producer_id, group_id, held, holding, replaced)
            return {**result, **dict.fromkeys(valid, _commit_append_error(error))}
        return {**result, **dict.fromkeys(valid, ErrorCode.NONE)}

    def _let_go_of_txn_offsets(
        self,
        producer_id: int,
        group_id: str,
        held: dict[TopicPartition, PendingTxnOffset],
        failed: Mapping[TopicPartition, PendingTxnOffset],
        replaced: Mapping[TopicPartition, PendingTxnOffset],
    ) -> None:
        """A failed transactional offset append: its offsets are held no more (the ones it
        replaced are held again), unless the transaction was settled meanwhile (``held`` is
        then no longer the producer's pending map for the group)."""
        if self.pending_txn.get(producer_id, {}).get(group_id) is not held:
            return
        for tp, value in failed.items():
            if held.get(tp) is value:
                if tp in replaced:
                    held[tp] = replaced[tp]
                else:
                    del held[tp]
        if not held:
            self._drop_pending_txn(producer_id, group_id)
            if not self.pending_txn[producer_id]:
                del self.pending_txn[producer_id]

    def has_pending_txn(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in self.pending_txn[pid][group_id] for pid in self._pending_txn_producers.get(group_id, ()))

    def has_any_pending_txn(self, group_id: str) -> bool:
        """Whether an open transaction holds offsets of the group (it is not expired then)."""
        return group_id in self._pending_txn_producers

    def pending_txn_partitions(self, group_id: str) -> set[TopicPartition]:
        return {tp for pid in self._pending_txn_producers.get(group_id, ()) for tp in self.pending_txn[pid][group_id]}

    def _drop_pending_txn_partitions(self, group_id: str, partitions: Collection[TopicPartition]) -> None:
        """Forget the pending transactional offsets of these partitions of the group, whichever
        producer holds them (Kafka's ``removeOffsets``: OffsetDelete, DeleteGroups and topic
        deletion take them too, so its marker cannot bring a deleted offset back)."""
        for pid in list(self._pending_txn_producers.get(group_id, ())):
            held = self.pending_txn[pid][group_id]
            for tp in partitions:
                held.pop(tp, None)
            if not held:
                self._drop_pending_txn(pid, group_id)
                if not self.pending_txn[pid]:
                    del self.pending_txn[pid]

    def _drop_pending_txn(self, producer_id: int, group_id: str) -> None:
        """Forget the producer's pending offsets of the group (settled, or coordinated elsewhere now)."""
        del self.pending_txn[producer_id][group_id]
        producers = self._pending_txn_producers.get(group_id)
        if producers is not None:
            producers.discard(producer_id)
            if not producers:
                del self._pending_txn_producers[group_id]

    def complete_txn(self, producer_id: int, commit: bool, partitions: Collection[int] | None = None) -> int:
        """The producer's transaction ended and its marker is in the log of ``partitions`` (all
        when None): its offsets of the groups placed there become the groups' committed offsets
        (commit) or are dropped (abort). Returns how many applied."""
        for p in self.loading if partitions is None else self.loading & set(partitions):
            self._settled_while_loading.setdefault(p, []).append((producer_id, commit))
        held = self.pending_txn.get(producer_id, {})
        settled = {g: v for g, v in held.items() if partitions is None or self.partition_for(g) in partitions}
        for group_id in settled:
            self._drop_pending_txn(producer_id, group_id)
        if not held:
            self.pending_txn.pop(producer_id, None)
        if not commit:
            return 0
        applied = 0
        for group_id, values in settled.items():
            if self.partition_for(group_id) not in self.owned:
                continue  # coordinated elsewhere now: that broker's load applies the marker
            group = self.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                group = self.add_group(GroupMetadata(group_id, current_state_timestamp=self.now_ms()))
            for tp, txn_offset in values.items():
                key = (group_id, tp)
                if self._applied_seq.get(key, -1) < txn_offset.seq:  # no later plain commit of it
                    group.offsets[tp] = txn_offset.value
                    self._applied_seq[key] = txn_offset.seq
                    applied += 1
        return applied

    def forget_pending_txn(self, partition: int) -> None:
        """This broker stopped coordinating ``partition``: its pending offsets go with its
        groups (the new coordinator rebuilds them from the log), as do the log places of their
        committed offsets (a later load numbers them again)."""
        self._applied_seq = {k: v for k, v in self._applied_seq.items() if self.partition_for(k[0]) != partition}
        for pid in list(self.pending_txn):
            by_group = self.pending_txn[pid]
            for group_id in [g for g in by_group if self.partition_for(g) == partition]:
                self._drop_pending_txn(pid, group_id)
            if not by_group:
                del self.pending_txn[pid]

    # -- expiry and deletion ---------------------------------------------------------------------------
    def expired_offsets(self, group: GroupMetadata, now: int) -> list[TopicPartition]:
        """Kafka's ``removeExpiredOffsets`` rule: an empty group's offsets expire a retention period
        after it became empty; a stable consumer group's offsets of topics it no longer subscribes
        to expire a retention period after their commit; a simple consumer's (no protocol) too;
        a commit with an explicit expire timestamp (OffsetCommit v2-v4) expires then."""
        consumer_group = self.consumer_groups.get(group.group_id)
        if consumer_group is not None and consumer_group.members:
            # a KIP-848 group with members: the offsets of topics it subscribes to stay
            subscribed: set[str] = consumer_group.subscribed_topic_names()

            def base(v: OffsetAndMetadata) -> int:
                return v.commit_timestamp
        elif group.protocol_type is not None and group.state is GroupState.EMPTY:
            subscribed = set()

            def base(v: OffsetAndMetadata) -> int:
                ts = group.current_state_timestamp
                return ts if ts is not None else v.commit_timestamp
        elif (
            group.protocol_type == "consumer"
            and group.subscribed_topics is not None
            and group.is_state(GroupState.STABLE)
        ):
            subscribed = group.subscribed_topics

            def base(v: OffsetAndMetadata) -> int:
                return v.commit_timestamp
        elif group.protocol_type is None:
            subscribed = set()

            def base(v: OffsetAndMetadata) -> int:
                return v.commit_timestamp
        else:
            return []
        expired = []
        pending_txn = self.pending_txn_partitions(group.group_id)
        for tp, value in group.offsets.items():
            if tp.topic in subscribed or group.pending_offset_commits[tp] > 0 or tp in pending_txn:
                continue
            if value.expire_timestamp is not None:
                if now >= value.expire_timestamp:
                    expired.append(tp)
            elif now - base(value) >= self.retention_ms:
                expired.append(tp)
        return expired

    async def cleanup_group_metadata(
        self, groups: Iterable[GroupMetadata], select: Callable[[GroupMetadata], list[TopicPartition]]
    ) -> int:
        """Remove the offsets ``select`` picks from each group (committed ones and pending
        transactional ones, each with a tombstone, which a reload applies to both), turn groups
        left empty and without offsets (pending transactional ones count, as in Kafka) Dead,
        forget Dead groups with their pending transactional offsets, and append the tombstones;
        returns committed offsets removed."""
        tombstones: dict[int, list[tuple[bytes, bytes | None]]] = defaultdict(list)
        removed = 0
        for group in list(groups):
            partition = self.partition_for(group.group_id)
            selected = select(group)
            pending = self.pending_txn_partitions(group.group_id)
            self._drop_pending_txn_partitions(group.group_id, selected)
            for tp in selected:
                committed = group.offsets.pop(tp, None) is not None
                if not committed and tp not in pending:
                    continue
                self._tombstoned(group, tp)
                tombstones[partition].append((offset_key(group.group_id, tp), None))
                removed += committed
            if (
                group.state is GroupState.EMPTY
                and not group.has_offsets()
                and not self.has_any_pending_txn(group.group_id)
            ):
                group.transition_to(GroupState.DEAD, self.now_ms())
            if group.state is GroupState.DEAD and self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
                leftover = self.pending_txn_partitions(group.group_id)
                self._drop_pending_txn_partitions(group.group_id, leftover)
                tombstones[partition] += [(offset_key(group.group_id, tp), None) for tp in leftover]
                if group.generation_id > 0:  # offsets-only groups never wrote metadata
                    tombstones[partition].append((group_key(group.group_id), None))
        for partition, records in tombstones.items():
            error = await self.log.append(partition, records, self.now_ms())
            if error != ErrorCode.NONE:
                log.warning("writing %d tombstones to __consumer_offsets-%d failed: %s", len(records), partition, error)
        return removed

    def _tombstoned(self, group: GroupMetadata, tp: TopicPartition) -> None:
        """A tombstone of the partition's offset is about to be appended: a commit still in
        flight was written before it and must not bring the offset back when it completes."""
        key = (group.group_id, tp)
        if group.pending_offset_commits[tp] > 0:
            self._applied_seq[key] = next(self._commit_seq)
        else:
            self._applied_seq.pop(key, None)

    async def expire_offsets(self) -> int:
        """The periodic ``offsets.retention.check.interval.ms`` task's work."""
        now = self.now_ms()
        return await self.cleanup_group_metadata(self.local_groups(), lambda g: self.expired_offsets(g, now))
