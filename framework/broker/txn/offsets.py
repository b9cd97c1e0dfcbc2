"""Transactional offset commits (TxnOffsetCommit) held by the group coordinator's broker until
the transaction ends: materialised as ordinary offset commits in ``__consumer_offsets`` when the
transaction commits, dropped when it aborts. Until then OffsetFetch returns the previous offsets,
so a consume-transform-produce application that aborts re-reads its input.

Kafka writes the pending offsets as transactional records into ``__consumer_offsets`` and applies
them on the marker; odradek keeps them in memory keyed by producer id (see docs/transactions.md
for what that means across a broker restart).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ...errors import ErrorCode
from ...interfaces import TopicPartition
from ..group import GroupCoordinator, OffsetAndMetadata
from ..group.state import GroupMetadata

log = logging.getLogger(__name__)


class PendingTxnOffsets:
    """Offsets committed inside transactions, per producer id and group."""

    def __init__(self, groups: Callable[[], GroupCoordinator | None]) -> None:
        self._groups = groups
        self.pending: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}

    async def commit(
        self,
        group_id: str,
        producer_id: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        """Validate like OffsetCommit (group placement; membership when a generation is given)
        and hold the offsets for the producer's transaction."""
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
        self.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)
        return dict.fromkeys(offsets, ErrorCode.NONE)

    def offsets_partition(self, group_id: str) -> int | None:
        coordinator = self._groups()
        return coordinator.partition_for(group_id) if coordinator is not None else None

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in groups.get(group_id, {}) for groups in self.pending.values())

    async def complete(self, producer_id: int, commit: bool) -> None:
        """The producer's transaction ended: store its offsets (commit) or forget them (abort)."""
        groups = self.pending.pop(producer_id, {})
        coordinator = self._groups()
        if not commit or coordinator is None:
            return
        for group_id, offsets in groups.items():
            group = coordinator.manager.get_group(group_id)
            if group is None:
                group = coordinator.manager.add_group(
                    GroupMetadata(group_id, current_state_timestamp=coordinator.now_ms())
                )
            results = await coordinator.manager.store_offsets(group, offsets)
            failed = {tp: e for tp, e in results.items() if e != ErrorCode.NONE}
            if failed:
                log.error("transactional offsets of group %r not stored: %s", group_id, failed)
