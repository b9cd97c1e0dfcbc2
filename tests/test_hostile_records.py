"""Hostile produced batches: decompression bombs, records a rebuild cannot hold, non-consecutive
offset deltas on recompressed topics, and timestamps that overflow int64 (sans-IO through
``validate_records`` and the codecs, then one broker-level check per finding)."""

from __future__ import annotations

import logging
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import lz4.frame
import pytest
import zstandard
from broker_harness import batch, create, fetch_records, produce, running_broker
from crc32c import crc32c

from odradek import records
from odradek.broker.api import IsolationLevel, ListOffsetsPartition
from odradek.broker.log_validator import AppendSettings, validate_records
from odradek.broker.producer_state import AppendOrigin
from odradek.config import ConfigError, default_config
from odradek.errors import CorruptMessage, DecompressionLimitExceeded, ErrorCode, MessageTooLarge
from odradek.interfaces import Codec, TopicPartition
from odradek.manager import Plugins, build_plugin_manager
from odradek.plugins.compress import plugin as compress_plugin

CODECS: dict[int, Codec] = Plugins(build_plugin_manager(entry_points_enabled=False, extra=[compress_plugin])).codecs()
GZIP, SNAPPY, LZ4, ZSTD = (CODECS[i] for i in (1, 2, 3, 4))
LONG_MAX = 2**63 - 1
MiB = 1 << 20


# -- hand-built bytes ------------------------------------------------------------------------------


_varint = records._varint  # Kafka's zigzag varint, for hand-built hostile records


def _record(value: bytes, *, offset_delta: int = 0, ts_delta: int = 0, key: bytes = b"k") -> bytes:
    body = b"\x00" + _varint(ts_delta) + _varint(offset_delta) + _varint(len(key)) + key
    body += _varint(len(value)) + value + _varint(0)
    return _varint(len(body)) + body


def _batch(
    section: bytes, *, count: int = 1, codec: int = 0, first_ts: int | None = None, max_ts: int | None = None
) -> bytearray:
    """A CRC-valid client batch around ``section`` (compressed with ``codec`` when set), whatever
    its records say: what a hostile producer can send. Timestamps default to now (an old one
    would roll a segment, and a fetch reads one segment)."""
    if first_ts is None:
        first_ts = int(time.time() * 1000)
    if codec:
        section = CODECS[codec].compress(section)
    return _raw(section, count=count, codec=codec, first_ts=first_ts, max_ts=first_ts if max_ts is None else max_ts)


def _raw(section: bytes, *, count: int, codec: int, first_ts: int, max_ts: int) -> bytearray:
    header = struct.pack(
        ">qiibIhiqqqhii", 0, 49 + len(section), -1, 2, 0, codec, count - 1, first_ts, max_ts, -1, -1, -1, count
    )
    out = bytearray(header + section)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return out


def _validate(data: bytearray, limit: int = 64 * MiB, **settings: Any) -> Any:
    base: dict[str, Any] = dict(
        max_message_bytes=10 * MiB,
        log_append_time=False,
        compact=False,
        target_compression=None,
        timestamp_window_ms=None,
    )
    base.update(settings)
    return validate_records(
        data,
        AppendSettings(**base),
        origin=AppendOrigin.CLIENT,
        api_version=7,
        now_ms=1_700_000_000_000,
        codecs=CODECS,
        max_decompressed_bytes=limit,
    )


def _zstd_rle_bomb(inflated: int) -> bytes:
    """A zstd frame of RLE blocks without a content size: 4 bytes per 128 KiB of zeros."""
    out = bytearray(b"\x28\xb5\x2f\xfd\x00\x58")
    blocks = inflated // (128 * 1024)
    for i in range(blocks):
        out += (((128 * 1024) << 3) | 2 | (i == blocks - 1)).to_bytes(3, "little") + b"\x00"
    return bytes(out)


def _zstd_streamed(inflated: int) -> bytes:
    """What Java's ZstdOutputStream writes: a frame without a content size."""
    cobj = zstandard.ZstdCompressor().compressobj()
    return bytes(cobj.compress(bytes(inflated)) + cobj.flush())


def _gzip_bomb(inflated: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join([c.compress(bytes(MiB)) for _ in range(inflated // MiB)] + [c.flush()])


def _lz4_bomb(inflated: int) -> bytes:
    c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX4MB)
    return b"".join([c.begin()] + [c.compress(bytes(4 * MiB)) for _ in range(inflated // (4 * MiB))] + [c.flush()])


def _snappy_lying(claimed: int) -> bytes:
    """Raw snappy whose preamble claims ``claimed`` bytes and holds one literal byte (cramjam
    allocates the claim up front and aborts the process when that fails)."""
    pre = bytearray()
    while claimed > 0x7F:
        pre.append((claimed & 0x7F) | 0x80)
        claimed >>= 7
    pre.append(claimed)
    return bytes(pre) + b"\x00x"


def _xerial(blocks: list[bytes]) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    return out + b"".join(struct.pack(">i", len(b)) + b for b in blocks)


# -- finding 1: the codecs stop at max_size --------------------------------------------------------

BOMBS = {
    "zstd RLE blocks (no content size)": (ZSTD, lambda: _zstd_rle_bomb(2048 * MiB)),
    "zstd streamed (no content size)": (ZSTD, lambda: _zstd_streamed(96 * MiB)),
    "zstd lying content size": (
        ZSTD,
        lambda: b"\x28\xb5\x2f\xfd\xe0" + (2**40).to_bytes(8, "little") + b"\x83\x00\x00\x00",
    ),
    "gzip": (GZIP, lambda: _gzip_bomb(256 * MiB)),
    "lz4": (LZ4, lambda: _lz4_bomb(256 * MiB)),
    "snappy raw, 4 GiB claimed": (SNAPPY, lambda: _snappy_lying(2**32 - 1)),
    "snappy xerial, blocks adding up": (SNAPPY, lambda: _xerial([_snappy_lying(40 * MiB)] * 3)),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_codecs_stop_at_max_size(name: str) -> None:
    codec, make = BOMBS[name]
    data = make()
    with pytest.raises(DecompressionLimitExceeded) as info:
        codec.decompress(data, max_size=8 * MiB)
    assert info.value.limit == 8 * MiB and info.value.code == ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD], ids=lambda c: c.name)
def test_max_size_is_a_bound_not_a_cut(codec: Codec) -> None:
    """Exactly ``max_size`` bytes decode; one more byte of output is refused."""
    data = bytes(range(256)) * 4096
    compressed = codec.compress(data)
    assert codec.decompress(compressed, max_size=len(data)) == data
    with pytest.raises(DecompressionLimitExceeded):
        codec.decompress(compressed, max_size=len(data) - 1)


class _LegacyCodec:
    """A third-party codec written before ``max_size`` existed."""

    id = 6
    name = "legacy"

    def compress(self, data: bytes, level: int | None = None) -> bytes:
        return zlib.compress(data)

    def decompress(self, data: bytes | memoryview) -> bytes:
        return zlib.decompress(data)


def test_a_codec_without_max_size_is_checked_after_decompressing(caplog: pytest.LogCaptureFixture) -> None:
    legacy = _LegacyCodec()
    assert not records.takes_max_size(legacy) and records.takes_max_size(GZIP)
    data = zlib.compress(bytes(MiB))
    assert records.decompress_section(legacy, data, MiB) == bytes(MiB)
    with pytest.raises(DecompressionLimitExceeded):
        records.decompress_section(legacy, data, MiB - 1)
    # the plugin manager loads it, saying once that its batches are inflated before the check
    module = type("m", (), {"odradek_register_codecs": staticmethod(lambda: [legacy])})
    from odradek.hookspecs import hookimpl

    hookimpl(module.odradek_register_codecs)
    with caplog.at_level(logging.WARNING, logger="odradek.manager"):
        plugins = Plugins(build_plugin_manager(entry_points_enabled=False, extra=[compress_plugin, module]))
        assert plugins.codecs()[6] is legacy
        plugins.codecs()
    warned = [r for r in caplog.records if "no max_size" in r.getMessage()]
    assert len(warned) == 1 and "legacy" in warned[0].getMessage()


# -- finding 1: every validation path passes the bound ----------------------------------------------


def _bomb_batch(codec: Codec, inflated: int) -> bytearray:
    """A CRC-valid batch of one record whose value is ``inflated`` zero bytes, compressed."""
    section = _record(bytes(inflated))
    return _raw(codec.compress(section), count=1, codec=codec.id, first_ts=1_700_000_000_000, max_ts=1_700_000_000_000)


@pytest.mark.parametrize(
    "settings",
    [
        {},  # the header path's decompress check
        {"full_validation": True},
        {"compact": True},  # compaction's key check
        {"target_compression": 1},  # the rebuild for compression.type=gzip
    ],
    ids=["header", "full", "compact", "recompress"],
)
@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD], ids=lambda c: c.name)
def test_every_path_that_inflates_honours_the_limit(codec: Codec, settings: dict[str, Any]) -> None:
    data = _bomb_batch(codec, 2 * MiB)
    with pytest.raises(MessageTooLarge, match=r"message.max.decompressed.bytes \(1048576\)"):
        _validate(bytearray(data), limit=MiB, **settings)
    _validate(bytearray(data), limit=4 * MiB, **settings)  # within the bound: accepted


def test_config_key_is_validated() -> None:
    assert default_config()["message.max.decompressed.bytes"] == 64 * MiB
    with pytest.raises(ConfigError, match="message.max.decompressed.bytes"):
        default_config(message_max_decompressed_bytes=0)


async def test_broker_answers_a_bomb_with_message_too_large(tmp_path: Path) -> None:
    async with running_broker(tmp_path, message_max_decompressed_bytes=MiB) as core:
        await create(core, "bombs")
        tp = TopicPartition("bombs", 0)
        bomb = _raw(_zstd_rle_bomb(1024 * MiB), count=1, codec=4, first_ts=1, max_ts=1)
        result = await produce(core, tp, bomb)
        assert result.error == ErrorCode.MESSAGE_TOO_LARGE
        assert result.error_message is not None and "message.max.decompressed.bytes (1048576)" in result.error_message
        ok = batch([b"v" * 1000], compression=records.Compression.ZSTD)
        assert (await produce(core, tp, ok)).error == ErrorCode.NONE


# -- finding 2: records a rebuild cannot hold are CORRUPT_MESSAGE -----------------------------------


@pytest.mark.parametrize("target", [1, 4], ids=["gzip", "zstd"])
@pytest.mark.parametrize(
    "section, first_ts",
    [
        (_record(b"v", offset_delta=2**31), 1_700_000_000_000),
        (_record(b"v", ts_delta=2**62), LONG_MAX),
        (_record(b"v", ts_delta=-(2**62)), -(2**63) + 5),
    ],
    ids=["offsetDelta 2**31", "timestamp above int64", "timestamp below int64"],
)
def test_recompression_refuses_records_no_batch_can_hold(section: bytes, first_ts: int, target: int) -> None:
    data = _raw(section, count=1, codec=0, first_ts=first_ts, max_ts=first_ts)
    with pytest.raises(CorruptMessage, match="outside int"):
        _validate(data, target_compression=target)


async def test_broker_answers_corrupt_message_when_a_rebuild_cannot_hold_a_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "gz", **{"compression.type": "gzip"})
        tp = TopicPartition("gz", 0)
        with caplog.at_level(logging.INFO):
            result = await produce(core, tp, _batch(_record(b"v", offset_delta=2**31)))
        assert result.error == ErrorCode.CORRUPT_MESSAGE
        assert result.error_message is not None and "offsetDelta 2147483648" in result.error_message
        lines = [r for r in caplog.records if "refused records for gz-0" in r.getMessage()]
        assert len(lines) == 1 and lines[0].exc_info is None  # one line, no traceback
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# -- finding 3: a rebuilt batch gets consecutive offset deltas --------------------------------------


@pytest.mark.parametrize("deltas", [[-1], [0, 0, 2], [5, 3, 1]])
def test_a_rebuilt_batch_has_consecutive_offsets(deltas: list[int]) -> None:
    section = b"".join(_record(b"v%d" % i, offset_delta=d) for i, d in enumerate(deltas))
    validated = _validate(_batch(section, count=len(deltas)), target_compression=1)
    header = records.parse_header(validated.data, 0)
    assert header.last_offset_delta == len(deltas) - 1 and header.compression_id == 1
    decoded = records.decode_batch(validated.data, codecs=CODECS)
    assert [r.offset for r in decoded.records] == list(range(len(deltas)))
    assert [r.value for r in decoded.records] == [b"v%d" % i for i in range(len(deltas))]


async def test_broker_stores_a_negative_offset_delta_renumbered_on_a_recompressed_topic(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as core:
        await create(core, "gz", **{"compression.type": "gzip"})
        tp = TopicPartition("gz", 0)
        assert (await produce(core, tp, _batch(_record(b"evil", offset_delta=-1)))).error == ErrorCode.NONE
        assert (await produce(core, tp, batch([b"good"]))).base_offset == 1
        assert [(r.offset, r.value) for r in await fetch_records(core, tp)] == [(0, b"evil"), (1, b"good")]


# -- finding 4: timestamps beyond int64 -------------------------------------------------------------


def test_header_check_refuses_a_first_timestamp_after_the_max() -> None:
    with pytest.raises(CorruptMessage, match="firstTimestamp .* after its maxTimestamp"):
        _validate(_batch(_record(b"v"), first_ts=LONG_MAX, max_ts=0))


def test_full_validation_refuses_a_timestamp_beyond_int64() -> None:
    data = _batch(_record(b"v", ts_delta=2**62), first_ts=LONG_MAX)
    _validate(bytearray(data))  # header-only validation cannot see it: the read side copes below
    with pytest.raises(CorruptMessage, match="outside int64"):
        _validate(bytearray(data), full_validation=True)
    small_first = _batch(_record(b"v", ts_delta=LONG_MAX), first_ts=1)  # a 10-byte delta varint
    with pytest.raises(CorruptMessage, match="outside int64"):
        _validate(small_first, full_validation=True)


def test_check_records_refuses_an_offset_delta_beyond_int32() -> None:
    with pytest.raises(CorruptMessage, match="outside int32"):
        records.check_records(_record(b"v", offset_delta=-(2**31) - 1), 1)


async def test_list_offsets_survives_a_stored_timestamp_beyond_int64(tmp_path: Path) -> None:
    """A batch stored before produce refused such records (or let through by header-only
    validation) answers ListOffsets with a clamped timestamp instead of failing to encode."""
    async with running_broker(tmp_path) as core:
        await create(core, "ts")
        tp = TopicPartition("ts", 0)
        poisoned = _batch(_record(b"v", ts_delta=2**62), first_ts=LONG_MAX)
        assert (await produce(core, tp, poisoned)).error == ErrorCode.NONE
        for ts in (0, 1_700_000_000_000):
            found = await core.list_offsets(-1, IsolationLevel.READ_UNCOMMITTED, [ListOffsetsPartition(tp, ts)])
            assert found[tp].error == ErrorCode.NONE
            assert (found[tp].offset, found[tp].timestamp) == (0, LONG_MAX)
