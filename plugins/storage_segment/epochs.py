"""The leader-epoch cache of one partition (Kafka's ``LeaderEpochFileCache``, KIP-101).

It maps each leader epoch to the first offset written in it, so a follower can ask "where did
epoch N end?" (OffsetForLeaderEpoch) and truncate exactly to the divergence point instead of to
its high watermark. It lives beside the log (``leader-epoch-checkpoint``) and is edited together
with the log: truncating the log's tail drops epochs that started in the cut part, advancing the
log start offset moves the first epoch's start forward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from odradek.interfaces import EpochEntry

from .checkpoint import read_epochs, write_epochs

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED = (-1, -1)


class _Persist(Protocol):
    def __call__(self, path: Path, entries: list[EpochEntry], *, sync: bool = True) -> None: ...


class LeaderEpochCache:
    """Epoch -> start offset, monotonic in both, persisted on every change.

    A new epoch (:meth:`assign`, on the append path) is written without fsync, as Kafka does
    since KAFKA-15046: an fsync per partition on its first append after a leader change stalls
    every request behind it (seconds for 1,000 new partitions). The log fsyncs the file with its
    segments (:attr:`unsynced` says it must), and recovery re-derives the epochs of unflushed
    data from the batches' partitionLeaderEpoch, so a crash loses nothing the log keeps.
    A truncation from the end removes entries and is made durable at once (a stale file could
    keep an epoch the recovered batches do not have). A move of the log start is not
    (:meth:`truncate_from_start`).
    """

    def __init__(self, path: Path, persist: _Persist = write_epochs) -> None:
        self.path = path
        self._persist = persist
        self._entries: list[EpochEntry] = []
        #: the newest epoch, -1 when none (an attribute: the append path reads it per batch)
        self.latest_epoch = -1
        self._set(read_epochs(path))
        #: written since the last fsync of :attr:`path` (the log's flush fsyncs it and clears this)
        self.unsynced = False

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def _set(self, entries: list[EpochEntry]) -> None:
        self._entries = entries
        self.latest_epoch = entries[-1].epoch if entries else -1

    def _flush(self, *, sync: bool = True) -> None:
        self._persist(self.path, self._entries, sync=sync)
        self.unsynced = not sync

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; entries that contradict it (a later
        or equal epoch, or a later or equal start) are dropped. Returns whether anything changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} and start offset {start_offset} must be >= 0")
        if self._entries:
            last = self._entries[-1]
            if last.epoch == epoch and start_offset >= last.start_offset:
                return False
        kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        self._set([*kept, EpochEntry(epoch, start_offset)])
        self._flush(sync=False)
        return True

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch, with Kafka's answers: the latest epoch ends at the log end;
        an older epoch ends where the next larger known epoch starts, reported under the
        largest known epoch <= ``requested`` (or ``requested`` itself when it predates them all)."""
        if requested < 0 or not self._entries:
            return UNDEFINED
        if requested == self._entries[-1].epoch:
            return requested, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested), None)
        if higher is None:
            return UNDEFINED
        floor = None
        for e in self._entries:
            if e.epoch <= requested:
                floor = e
        return (floor.epoch if floor is not None else requested), higher.start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut at ``end_offset``: forget epochs that started at or after it."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if len(kept) != len(self._entries):
            self._set(kept)
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch covering it starts there.

        Written without fsync, like a new epoch (KAFKA-15046): retention and DeleteRecords
        move the log start on the trio thread, where an fsync (of the file and of the
        directory) stalls every client behind a busy disk. The log's flush makes it durable
        (:attr:`unsynced`); a file a crash left older differs only in entries below the log
        start, which the load trims again (the log calls this with the log start it loaded)."""
        if not self._entries or self._entries[0].start_offset >= start_offset:
            return
        before = [e for e in self._entries if e.start_offset <= start_offset]
        after = [e for e in self._entries if e.start_offset > start_offset]
        self._set([EpochEntry(before[-1].epoch, start_offset), *after])
        self._flush(sync=False)

    def clear(self) -> None:
        if self._entries or self.path.exists():
            self._set([])
            self._flush()
