"""The consumer's incremental decoding: same records as odradek.records, taken a few at a time,
with control batches and aborted transactions skipped for read_committed."""

from __future__ import annotations

import random

import pytest

from odradek.client.decoding import ConsumerRecord, RecordCursor, records_section
from odradek.client.fetcher import CompletedFetch
from odradek.errors import CorruptMessage
from odradek.interfaces import TopicPartition
from odradek.manager import Plugins, build_plugin_manager
from odradek.plugins.storage_segment.scan import empty_batch_like
from odradek.records import (
    Compression,
    ControlRecordType,
    build_batch,
    build_control_batch,
    decode_batch,
    parse_header,
)

TP = TopicPartition("t", 3)


@pytest.fixture(scope="module")
def codecs() -> dict:
    return Plugins(build_plugin_manager(entry_points_enabled=False, extra=["odradek.plugins.compress.plugin"])).codecs()


def _records(n: int, rng: random.Random) -> list[tuple]:
    out = []
    for _i in range(n):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 300))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 9000))
        headers = [
            (f"h{j}", None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 20)))
            for j in range(rng.randint(0, 3))
        ]
        out.append((key, value, headers, 1_700_000_000_000 + rng.randint(-5, 10**7)))
    return out


@pytest.mark.parametrize("compression", list(Compression))
def test_cursor_matches_decode_batch(codecs: dict, compression: Compression) -> None:
    rng = random.Random(int(compression))
    recs = _records(300, rng)
    buf = build_batch(recs, base_offset=1000, compression=compression, codecs=codecs, partition_leader_epoch=4)
    header = parse_header(buf)
    expected = decode_batch(buf, codecs=codecs).records
    cursor = RecordCursor(records_section(buf, 0, header, codecs, True), header)
    out: list[ConsumerRecord] = []
    position = 1000
    while not cursor.exhausted:
        position, _ = cursor.take(TP.topic, TP.partition, position, rng.randint(1, 40), out)
    assert position == 1300
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in out] == [
        (e.offset, e.timestamp, e.key, e.value, e.headers) for e in expected
    ]
    assert {r.leader_epoch for r in out} == {4} and {(r.topic, r.partition) for r in out} == {("t", 3)}


def test_cursor_skips_records_before_the_position() -> None:
    buf = build_batch([(None, b"v%d" % i, (), 5) for i in range(10)], base_offset=50)
    header = parse_header(buf)
    cursor = RecordCursor(records_section(buf, 0, header, None, True), header)
    out: list[ConsumerRecord] = []
    position, taken = cursor.take("t", 0, 57, 100, out)
    assert (position, taken) == (60, 3) and [r.value for r in out] == [b"v7", b"v8", b"v9"]


def test_crc_mismatch_is_corrupt() -> None:
    buf = bytearray(build_batch([(None, b"value", (), 5)]))
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptMessage):
        records_section(bytes(buf), 0, parse_header(buf), None, True)
    records_section(bytes(buf), 0, parse_header(buf), None, False)  # check.crcs=false reads on


def _fetch(data: bytes, offset: int, aborted: list[tuple[int, int]] | None = None) -> CompletedFetch:
    return CompletedFetch(TP, offset, data, high_watermark=-1, last_stable_offset=-1, log_start_offset=0,
                          aborted=aborted, assignment_id=1)  # fmt: skip


def _take_all(fetch: CompletedFetch, position: int) -> tuple[list[ConsumerRecord], int]:
    out: list[ConsumerRecord] = []
    while not fetch.exhausted:
        position = fetch.take(position, 7, out, None, True)
    return out, position


def test_completed_fetch_spans_batches_and_starts_mid_batch() -> None:
    data = b"".join(
        build_batch([(None, b"%d" % (b * 10 + i), (), 1) for i in range(10)], base_offset=b * 10) for b in range(4)
    )
    fetch = _fetch(data + data[:30], 13)  # a trailing partial batch is ignored
    assert fetch.end_offset == 40
    out, position = _take_all(fetch, 13)
    assert [r.offset for r in out] == list(range(13, 40)) and position == 40


def test_read_committed_drops_aborted_transactions_and_markers() -> None:
    committed_pid, aborted_pid = 7, 9
    parts = [
        build_batch([(None, b"c0", (), 1), (None, b"c1", (), 1)], base_offset=0, producer_id=committed_pid,
                    producer_epoch=0, base_sequence=0, is_transactional=True),
        build_batch([(None, b"a0", (), 1), (None, b"a1", (), 1)], base_offset=2, producer_id=aborted_pid,
                    producer_epoch=0, base_sequence=0, is_transactional=True),
        build_control_batch(ControlRecordType.COMMIT, producer_id=committed_pid, producer_epoch=0, base_offset=4),
        build_control_batch(ControlRecordType.ABORT, producer_id=aborted_pid, producer_epoch=0, base_offset=5),
        build_batch([(None, b"plain", (), 1)], base_offset=6),
        build_batch([(None, b"later", (), 1)], base_offset=7, producer_id=aborted_pid, producer_epoch=0,
                    base_sequence=2, is_transactional=True),
    ]  # fmt: skip
    data = b"".join(parts)
    committed, position = _take_all(_fetch(data, 0, aborted=[(aborted_pid, 2)]), 0)
    assert [r.value for r in committed] == [b"c0", b"c1", b"plain", b"later"]
    assert position == 8
    uncommitted, _ = _take_all(_fetch(data, 0, aborted=None), 0)
    assert [r.value for r in uncommitted] == [b"c0", b"c1", b"a0", b"a1", b"plain", b"later"]


def test_empty_batches_kept_by_compaction_move_the_position() -> None:
    """Compaction keeps an active producer's last batch with no records (for producer state). A
    consumer must step over it: the position stayed at its offset, so odradek's consumer (and
    the Spark connector on it) polled there until the timeout. Found with a compacted topic."""
    kept = build_batch([(b"k", b"v", (), 1)], base_offset=0, producer_id=3, producer_epoch=0, base_sequence=0)
    empty = bytes(empty_batch_like(kept))
    parts = [empty, build_batch([(b"k", b"later", (), 1)], base_offset=1)]
    out, position = _take_all(_fetch(b"".join(parts), 0), 0)
    assert [(r.offset, r.value) for r in out] == [(1, b"later")] and position == 2
    out, position = _take_all(_fetch(empty, 0), 0)  # only empty batches in a response
    assert out == [] and position == 1
