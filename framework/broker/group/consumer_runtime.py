"""Write-then-answer for KIP-848 consumer groups (the part of Kafka's ``CoordinatorRuntime`` they need).

Kafka's group coordinator answers a ConsumerGroupHeartbeat only once the records it generated
are committed to ``__consumer_offsets`` (appended with ``acks=all`` and past the high
watermark); if the write fails, the in-memory state goes back to the last committed one and the
client gets the mapped error (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ...: the mapping
SyncGroup uses, :func:`.metadata_manager.group_append_error`). So a member
is never told an epoch or an assignment that a coordinator restarting from the log would not
know. :class:`ConsumerGroupWriter` does the same per group:

- an *operation* (a heartbeat, a timer fencing a member, a deletion) runs synchronously against
  the group's in-memory state and marks the group changed (:meth:`ConsumerGroupWriter.mark`);
- when it changed, the records that differ from what was last written
  (:meth:`.metadata_manager.GroupMetadataManager.consumer_group_delta`) are appended and waited
  for before :meth:`ConsumerGroupWriter.run` returns; a failed append restores the group as it
  was before the operation and returns the error;
- an operation that changed nothing writes nothing and waits for nothing, except for a write
  of the same group still under way: operations of one group run one at a time (a lock per
  group), so a heartbeat never reads, nor answers from, state that is not yet in the log. Kafka
  serialises per ``__consumer_offsets`` partition; per group is enough here because a group's
  records are all it reads.

The append itself is shielded from cancellation (a client disconnecting mid-write): it ends, by
success or by its own timeout, and the state follows what happened to it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import trio

from ...errors import ErrorCode
from ..internal_topic import Record
from .consumer_group import ConsumerGroup
from .metadata_manager import group_append_error

if TYPE_CHECKING:
    from .metadata_manager import GroupMetadataManager

log = logging.getLogger(__name__)

T = TypeVar("T")

#: puts a group back as it was before a failed write (None: it did not exist)
Restore = Callable[[str, "ConsumerGroup | None"], None]


class ConsumerGroupWriter:
    """Runs operations on consumer groups and persists what they changed before returning."""

    def __init__(self, manager: GroupMetadataManager, restore: Restore) -> None:
        self.manager = manager
        self.restore = restore
        self._locks: dict[str, trio.Lock] = {}
        #: groups an operation under way changed (set by :meth:`mark`)
        self._changed: set[str] = set()
        #: records an operation adds to its group's batch (a conversion's records of the other
        #: group type), with what to do once they are written
        self._extra: dict[str, tuple[list[Record], list[Callable[[], None]]]] = {}

    def mark(self, group: ConsumerGroup) -> None:
        """An operation changed ``group``: its records are written when the operation ends."""
        self._changed.add(group.group_id)

    def after_write(self, group_id: str, records: list[Record], action: Callable[[], None]) -> None:
        """Write ``records`` with the running operation's batch and call ``action`` once the
        batch is written (never, when it fails): a conversion between group types changes the
        other type's state only when its records are in the log."""
        pending = self._extra.setdefault(group_id, ([], []))
        pending[0].extend(records)
        pending[1].append(action)
        self._changed.add(group_id)

    def discard(self, group_id: str) -> None:
        """The running operation of ``group_id`` was undone: nothing it arranged with
        :meth:`after_write` is written or done (a conversion refused half-way)."""
        self._extra.pop(group_id, None)

    async def settled(self, group_id: str) -> None:
        """Until the operations of ``group_id`` under way have been written (or undone): a
        request deciding which kind of group it talks to must not see a conversion half-way."""
        lock = self._locks.get(group_id)
        if lock is not None and lock.locked():
            async with lock:
                pass

    async def run(self, group_id: str, operation: Callable[[], T]) -> tuple[T | None, ErrorCode]:
        """Run ``operation`` on ``group_id`` after the group's earlier operations, then write
        what it changed. Returns (its result, NONE), or (None, the error) when the write
        failed and the group was put back as it was."""
        lock = self._locks.setdefault(group_id, trio.Lock())
        try:
            async with lock:
                return await self._run_locked(group_id, operation)
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0 and self._locks.get(group_id) is lock:
                del self._locks[group_id]

    async def _run_locked(self, group_id: str, operation: Callable[[], T]) -> tuple[T | None, ErrorCode]:
        manager = self.manager
        before = manager.consumer_groups.get(group_id)
        saved = before.copy() if before is not None else None
        written = manager.consumer_written.get(group_id)
        self._changed.discard(group_id)
        self._extra.pop(group_id, None)
        try:
            result = operation()
        except BaseException:  # a bug: the group goes back to its last written state
            self._extra.pop(group_id, None)
            self._changed.discard(group_id)
            self._undo(group_id, saved, written)
            raise
        extra, actions = self._extra.pop(group_id, ([], []))
        if group_id not in self._changed:
            return result, ErrorCode.NONE
        self._changed.discard(group_id)
        if not manager.is_local(group_id):  # given up meanwhile: nothing of it is written here
            return result, ErrorCode.NONE
        group = manager.consumer_groups.get(group_id)
        records: list[Record] = []
        if group is not None or saved is not None:
            records = list(manager.consumer_group_delta(group or saved, deleted=group is None))  # type: ignore[arg-type]
        records += extra
        if records:
            with trio.CancelScope(shield=True):
                error = await manager.log.append(manager.partition_for(group_id), records, manager.now_ms())
        else:
            error = ErrorCode.NONE
        if error == ErrorCode.NONE:
            for action in actions:
                action()
            return result, ErrorCode.NONE
        mapped = group_append_error(ErrorCode(error))
        log.warning("storing consumer group %s failed (%s): its last change is undone, the member gets %s",
                    group_id, ErrorCode(error).name, mapped.name)  # fmt: skip
        self._undo(group_id, saved, written)
        return None, mapped

    def _undo(self, group_id: str, saved: ConsumerGroup | None, written: dict[bytes, bytes] | None) -> None:
        if written is None:
            self.manager.consumer_written.pop(group_id, None)
        else:
            self.manager.consumer_written[group_id] = written
        self.restore(group_id, saved)


__all__ = ["ConsumerGroupWriter"]
