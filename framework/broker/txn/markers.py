"""Transaction markers written by this broker's replica manager (Kafka sends WriteTxnMarkers to
each partition leader; odradek's coordinator appends them locally, as the coordinator origin).

A marker is one control batch (:func:`odradek.records.build_control_batch`) carrying the
producer id and epoch; the partition's producer state closes the producer's open transaction on
it, moves the last stable offset and, for ABORT, adds the aborted-transaction index entry that
read_committed fetches return. Appending wakes delayed fetches on the partition, so a
read_committed consumer parked at the old LSO is answered as soon as the LSO moves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from ...errors import ErrorCode
from ...interfaces import TopicPartition
from ...records import ControlRecordType, build_control_batch
from ..producer_state import AppendOrigin
from ..replica_manager import ReplicaManager

#: how long a marker append waits for acks=all
MARKER_TIMEOUT_MS = 5000


class ReplicaMarkerWriter:
    """Appends markers to partitions this broker leads (a cluster needs WriteTxnMarkers)."""

    def __init__(self, replica_manager: ReplicaManager, partition_exists: Callable[[TopicPartition], bool]) -> None:
        self.replica_manager = replica_manager
        self.partition_exists = partition_exists

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        result: ControlRecordType,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        now = time.time_ns() // 1_000_000
        out: dict[TopicPartition, ErrorCode] = {}
        entries: dict[TopicPartition, bytearray | memoryview] = {}
        for tp in partitions:
            if not self.partition_exists(tp):
                out[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # deleted: nothing left to mark
                continue
            entries[tp] = bytearray(
                build_control_batch(
                    result,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    coordinator_epoch=coordinator_epoch,
                    timestamp=now,
                )
            )
        if entries:
            appended = await self.replica_manager.append_records(
                -1, MARKER_TIMEOUT_MS, entries, origin=AppendOrigin.COORDINATOR
            )
            for tp, r in appended.items():
                # UNKNOWN_TOPIC_OR_PARTITION here means "not hosted yet", not "deleted": retry
                out[tp] = (
                    ErrorCode.NOT_LEADER_OR_FOLLOWER if r.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else r.error
                )
        return out
