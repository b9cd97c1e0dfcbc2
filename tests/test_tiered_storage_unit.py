"""Sans-IO parts of tiered storage (odradek.broker.remote_log): finding a remote segment, its
leader epochs, the offset index lookup and cutting whole batches from a segment's bytes; and
the segment engine's local retention of a tiered log (only copied segments go)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from storage_helpers import append, batch, log_of, open_storage

from odradek import records
from odradek.broker.remote_log import (
    RemoteFetchData,
    RemoteLogView,
    epoch_entries_for,
    leader_epoch_checkpoint,
    offset_for_timestamp_in,
    offset_index_position,
    read_batches,
)
from odradek.errors import CorruptMessage
from odradek.interfaces import EpochEntry, FetchDataInfo, RemoteLogSegmentMetadata, TopicPartition

TP = TopicPartition("t", 0)


def segment(start: int, end: int, seg_id: str = "a") -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(TP, seg_id + str(start), start, end, 0, 100)


def test_the_segment_for_an_offset_takes_overlapping_copies_into_account() -> None:
    # a new leader copied [5, 14] whole although [0, 9] was there (its segments rolled elsewhere)
    view = RemoteLogView((segment(0, 9), segment(5, 14), segment(15, 19)), 0)
    assert view.segment_for(3) == segment(0, 9)
    assert view.segment_for(7) == segment(5, 14)
    assert view.segment_for(12) == segment(5, 14)
    assert view.segment_for(19) == segment(15, 19)
    assert view.segment_for(20) is None
    assert view.highest_copied_offset == 19
    assert RemoteLogView().highest_copied_offset == -1
    gap = RemoteLogView((segment(0, 4), segment(8, 9)), 0)
    assert gap.segment_for(6) == segment(8, 9)  # offsets compaction removed: the next segment


def test_epoch_entries_of_a_segment_and_their_checkpoint() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(2, 7), EpochEntry(3, 12), EpochEntry(5, 30)]
    assert epoch_entries_for(entries, 10, 20) == (EpochEntry(2, 7), EpochEntry(3, 12))
    assert epoch_entries_for(entries, 0, 7) == (EpochEntry(0, 0),)
    assert epoch_entries_for([], 0, 7) == ()
    assert leader_epoch_checkpoint([EpochEntry(2, 7), EpochEntry(3, 12)]) == b"0\n2\n2 7\n3 12\n"


def index(*entries: tuple[int, int], trailing_zeros: int = 0) -> bytes:
    raw = b"".join(r.to_bytes(4, "big") + p.to_bytes(4, "big") for r, p in entries)
    return raw + b"\0" * 8 * trailing_zeros


def test_offset_index_lookup() -> None:
    idx = index((0, 0), (10, 500), (20, 1000), trailing_zeros=3)
    assert offset_index_position(idx, 100, 100) == 0
    assert offset_index_position(idx, 100, 115) == 500
    assert offset_index_position(idx, 100, 120) == 1000
    assert offset_index_position(idx, 100, 500) == 1000  # zeros after the entries end the index
    assert offset_index_position(b"", 100, 150) == 0
    assert offset_index_position(index((4, 80)), 100, 102) == 0  # below the first entry


def segment_bytes() -> tuple[bytes, list[tuple[int, int]]]:
    """Five 4-record batches from offset 100; (base offset, size) of each."""
    data = bytearray()
    out = []
    for i in range(5):
        b = records.build_batch([(None, b"v%d" % j, [], 1000) for j in range(4)], base_offset=100 + 4 * i)
        out.append((100 + 4 * i, len(b)))
        data += b
    return bytes(data), out


def test_read_batches_starts_at_the_batch_holding_the_offset() -> None:
    data, _ = segment_bytes()
    found = read_batches(io.BytesIO(data), 109, 1 << 20, min_one_batch=True)
    assert found.first_batch_offset == 108 and found.next_offset == 120
    assert [b.base_offset for b in records.iter_batches(found.data)] == [108, 112, 116]


def test_read_batches_respects_max_bytes_in_whole_batches() -> None:
    data, sizes = segment_bytes()
    two = sizes[0][1] + sizes[1][1]
    found = read_batches(io.BytesIO(data), 100, two + 10, min_one_batch=True)
    assert [b.base_offset for b in records.iter_batches(found.data)] == [100, 104]
    one = read_batches(io.BytesIO(data), 100, 10, min_one_batch=True)
    assert [b.base_offset for b in records.iter_batches(one.data)] == [100]  # at least one batch
    none = read_batches(io.BytesIO(data), 100, 10, min_one_batch=False)
    assert none.data == b"" and none.first_batch_offset == -1


def test_read_batches_never_answers_a_truncated_or_corrupt_tail() -> None:
    data, sizes = segment_bytes()
    cut = read_batches(io.BytesIO(data[: sizes[0][1] + 30]), 100, 1 << 20, min_one_batch=True)
    assert [b.base_offset for b in records.iter_batches(cut.data)] == [100]
    bad = bytearray(data)
    bad[8:12] = (3).to_bytes(4, "big")  # a batchLength below any batch's
    with pytest.raises(CorruptMessage):
        read_batches(io.BytesIO(bytes(bad)), 100, 1 << 20, min_one_batch=True)


def test_a_timestamp_search_in_a_remote_segment_finds_the_first_record_at_or_after() -> None:
    """Records at 1000, 1010, ... 1190 (offsets 100-119, four a batch; the third batch's
    records out of order): the first record at or after the timestamp, from the log start."""
    data = bytearray()
    for i in range(5):
        stamps = [1000 + 40 * i + 10 * j for j in range(4)]
        if i == 2:
            stamps = [1100, 1130, 1110, 1120]
        data += records.build_batch([(None, b"v", [], t) for t in stamps], base_offset=100 + 4 * i)

    def search(timestamp: int, min_offset: int = 100) -> tuple[int, int] | None:
        return offset_for_timestamp_in(io.BytesIO(bytes(data)), timestamp, min_offset)

    assert search(0) == (100, 1000)
    assert search(1015) == (102, 1020)
    assert search(1125) == (109, 1130)  # the batch's largest timestamp reaches it: its first record that does
    assert search(1190) == (119, 1190)
    assert search(1191) is None
    assert search(1000, min_offset=105) == (105, 1050)  # DeleteRecords moved the log start inside
    truncated = offset_for_timestamp_in(io.BytesIO(bytes(data[:-5])), 1185, 100)
    assert truncated is None  # the last batch is cut short: never an answer


def test_remote_fetch_data_is_a_fetch_data_info() -> None:
    data, _ = segment_bytes()
    info = RemoteFetchData(101, read_batches(io.BytesIO(data), 101, 1 << 20, min_one_batch=True))
    assert isinstance(info, FetchDataInfo)
    assert info.file_range() is None and info.to_bytes() == data and info.size == len(data)
    assert (info.fetch_offset, info.first_batch_offset, info.next_offset) == (101, 100, 120)


@pytest.mark.trio
async def test_local_retention_of_a_tiered_log_keeps_what_is_not_copied(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_segment_bytes=250)
    log = log_of(storage, segment_bytes=250, retention_ms=-1, local_retention_bytes=0)
    for _ in range(12):
        append(log, batch(2))
    log.high_watermark = log.log_end_offset
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 4
    log.remote_copied_end = 0  # tiered, nothing copied yet
    await storage.run_retention()
    assert log.log_start_offset == 0
    log.remote_copied_end = bases[2]  # the first two segments are in remote storage
    await storage.run_retention()
    assert log.log_start_offset == bases[2]
    log.remote_copied_end = None  # not tiered: retention.bytes (-1) keeps everything
    await storage.run_retention()
    assert log.log_start_offset == bases[2]
    await storage.close()


@pytest.mark.trio
async def test_rolled_segments_are_the_inactive_ones_below_the_bound(tmp_path: Path) -> None:
    storage = await open_storage(tmp_path, log_segment_bytes=250)
    log = log_of(storage, segment_bytes=250)
    for _ in range(12):
        append(log, batch(2))
    segments = log.segments
    rolled = log.rolled_segments(log.log_end_offset)
    assert [r.base_offset for r in rolled] == [s.base_offset for s in segments[:-1]]
    assert all(r.next_offset == s.base_offset for r, s in zip(rolled, segments[1:], strict=False))
    assert all(r.log_path.exists() and r.size == r.log_path.stat().st_size for r in rolled)
    assert [r.base_offset for r in log.rolled_segments(segments[2].base_offset)] == [
        s.base_offset for s in segments[:2]
    ]
    await storage.close()


def test_a_follower_takes_the_producers_below_its_restart_offset_from_the_remote_snapshot() -> None:
    from odradek.broker.producer_state import ProducerStateManager
    from odradek.interfaces import BatchMeta

    leader = ProducerStateManager()
    # producer 7: batches at offsets 0-4 and 20-24; producer 8: only at 30-34 (past the restart)
    for pid, first_seq, first in ((7, 0, 0), (7, 5, 20), (8, 0, 30)):
        meta = BatchMeta(0, 100, 4, 5, 1000, producer_id=pid, producer_epoch=0, base_sequence=first_seq)
        leader.update([meta], [first], {})
    follower = ProducerStateManager()
    follower.restore_before(leader.to_bytes(), 20)
    assert sorted(follower.producers) == [7]
    assert follower.producers[7].last_seq == 4  # what it had written below offset 20
    assert follower.map_end_offset == 20
