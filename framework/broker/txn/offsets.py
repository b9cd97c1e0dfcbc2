"""Transactional offset commits (TxnOffsetCommit), as Kafka keeps them: written at once into the
group's ``__consumer_offsets`` partition as the producer's transactional records, held by the
group coordinator until the transaction's marker lands in that partition, then applied (COMMIT)
or dropped (ABORT). Until then OffsetFetch returns the previous offsets, so a
consume-transform-produce application that aborts re-reads its input; and because they are in
the log, a broker restart before the transaction ends loses nothing (the coordinator's load
rebuilds them and the marker settles them).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from ...errors import ErrorCode
from ...interfaces import TopicPartition
from ..group import GroupCoordinator, OffsetAndMetadata
from ..group.state import GroupMetadata


class PendingTxnOffsets:
    """The transaction coordinator's and the TxnOffsetCommit handler's door to the group
    coordinator's pending transactional offsets (``GroupMetadataManager.pending_txn``)."""

    def __init__(self, groups: Callable[[], GroupCoordinator | None]) -> None:
        self._groups = groups

    async def commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """Validate like OffsetCommit (group placement; membership when a generation is given),
        then write the offsets as the producer's transactional records and hold them."""
        coordinator = self._groups()
        if coordinator is None:
            return dict.fromkeys(offsets, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = coordinator.validate_group(group_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        group = coordinator.manager.get_group(group_id)
        if group is not None and (generation_id >= 0 or member_id or group_instance_id is not None):
            error = coordinator.validate_offset_commit(group, generation_id, member_id, group_instance_id)
            if error is not None:
                return dict.fromkeys(offsets, error)
        elif group is None and generation_id >= 0:
            return dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION)
        elif group is None:
            # a simple group, as Kafka's coordinator creates one here: DescribeGroups says Empty
            # and ListGroups lists it while its transaction is open
            coordinator.manager.add_group(GroupMetadata(group_id, current_state_timestamp=coordinator.now_ms()))
        return await coordinator.manager.store_txn_offsets(group_id, producer_id, producer_epoch, offsets)

    def offsets_partition(self, group_id: str) -> int | None:
        coordinator = self._groups()
        return coordinator.partition_for(group_id) if coordinator is not None else None

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        coordinator = self._groups()
        return coordinator is not None and coordinator.manager.has_pending_txn(group_id, tp)

    def complete_partitions(self, producer_id: int, commit: bool, partitions: Collection[int]) -> None:
        """The producer's marker was appended to these ``__consumer_offsets`` partitions (by this
        broker, their leader): apply its offsets of the groups placed there (commit) or forget
        them (abort). Called by :class:`~.markers.MarkerAppender`, whichever broker coordinates
        the transaction."""
        coordinator = self._groups()
        if coordinator is not None:
            coordinator.manager.complete_txn(producer_id, commit, partitions)
