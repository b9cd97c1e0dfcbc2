"""The output bounds read from zstd and LZ4 block headers (plugins/compress/frame_bounds.py):
never below what the frames really inflate to, whatever the encoder's flags; None for anything
the walk does not understand; and the codecs decode in one call when the bound fits."""

from __future__ import annotations

import os

import lz4.frame
import pytest
import zstandard

from odradek.errors import DecompressionLimitExceeded
from odradek.plugins.compress import frame_bounds, lz4_codec, zstd_codec
from odradek.plugins.compress.frame_bounds import lz4_output_bound, zstd_output_bound

MiB = 1 << 20
SKIPPABLE = (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"12345"
PAYLOADS = {
    "empty": b"",
    "random": os.urandom(300_000),
    "text": b"the quick brown fox jumps over the lazy dog " * 40_000,
    "zeros": bytes(3 * MiB),
    "mixed": os.urandom(70_000) + bytes(500_000) + b"abc" * 90_000,
}


def _zstd_frames(data: bytes) -> dict[str, bytes]:
    return {
        "content size": zstandard.ZstdCompressor(write_content_size=True).compress(data),
        "no content size (librdkafka, Java)": zstandard.ZstdCompressor(write_content_size=False).compress(data),
        "checksum": zstandard.ZstdCompressor(write_checksum=True).compress(data),
        "streamed": b"".join(zstandard.ZstdCompressor().read_to_iter(data)) if data else b"",
        "small window": zstandard.ZstdCompressor(
            compression_params=zstandard.ZstdCompressionParameters(window_log=10)
        ).compress(data),
        "two frames and a skippable one": zstandard.ZstdCompressor().compress(data)
        + SKIPPABLE
        + zstandard.ZstdCompressor().compress(data[:1000]),
    }


def _lz4_frames(data: bytes) -> dict[str, bytes]:
    return {
        "Java shape": lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False),
        "content size, checksums": lz4.frame.compress(
            data, store_size=True, content_checksum=True, block_checksum=True
        ),
        "4 MiB blocks, linked": lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=True),
        "high compression": lz4.frame.compress(data, compression_level=9),
        "two frames and a skippable one": lz4.frame.compress(data) + SKIPPABLE + lz4.frame.compress(data[:1000]),
    }


@pytest.mark.parametrize("payload", list(PAYLOADS))
def test_zstd_bound_is_never_below_the_output(payload: str) -> None:
    data = PAYLOADS[payload]
    for shape, frame in _zstd_frames(data).items():
        if not frame:
            continue
        out = zstd_codec.ZstdCodec().decompress(frame)
        bound = zstd_output_bound(memoryview(frame))
        assert bound is not None and bound >= len(out), (shape, bound, len(out))
        if shape != "small window":  # its blocks hold 1 KiB each but count 128 KiB
            # compressed blocks count 128 KiB each: the bound stays within a block per 128 KiB
            assert bound <= len(out) + 128 * 1024 * (len(out) // (128 * 1024) + 2), shape


@pytest.mark.parametrize("payload", list(PAYLOADS))
def test_lz4_bound_is_never_below_the_output(payload: str) -> None:
    data = PAYLOADS[payload]
    for shape, frame in _lz4_frames(data).items():
        out = lz4_codec.Lz4Codec().decompress(frame)
        bound = lz4_output_bound(memoryview(frame))
        assert bound is not None and bound >= len(out), (shape, bound, len(out))


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x28\xb5\x2f\xfd",  # zstd magic alone
        b"garbage that is no frame",
        zstandard.ZstdCompressor().compress(b"x" * 10_000)[:-3],  # truncated
        zstandard.ZstdCompressor().compress(b"x" * 10_000) + b"\x00",  # trailing byte
        lz4.frame.compress(b"y" * 10_000),  # the other format
    ],
)
def test_zstd_walk_refuses_what_it_does_not_understand(frame: bytes) -> None:
    expected = 0 if frame == b"" else None
    assert zstd_output_bound(memoryview(frame)) == expected


@pytest.mark.parametrize(
    "frame",
    [
        b"\x04\x22\x4d\x18",  # lz4 magic alone
        lz4.frame.compress(b"y" * 10_000)[:-2],  # truncated end mark
        lz4.frame.compress(b"y" * 10_000) + b"\x00",
        zstandard.ZstdCompressor().compress(b"x" * 10_000),
    ],
)
def test_lz4_walk_refuses_what_it_does_not_understand(frame: bytes) -> None:
    assert lz4_output_bound(memoryview(frame)) is None


def test_too_many_blocks_are_not_walked() -> None:
    """Tiny blocks cost a Python step each: past the cap the stepped decoder decides instead."""
    data = os.urandom(64) * 10  # stored as raw blocks when the compressor is told to flush often
    cctx = zstandard.ZstdCompressor()
    obj = cctx.compressobj()
    frame = (
        b"".join(
            obj.compress(data[i % len(data) : i % len(data) + 1]) + obj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
            for i in range(frame_bounds._MAX_BLOCKS + 10)
        )
        + obj.flush()
    )
    assert zstd_output_bound(memoryview(frame)) is None
    assert len(zstd_codec.ZstdCodec().decompress(frame, max_size=MiB)) == frame_bounds._MAX_BLOCKS + 10


def test_a_frame_bounded_under_max_size_decodes_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path: no stepping when the headers prove the output fits (the stepped decoders
    are made to fail here); a bomb still takes the stepped path and is refused."""
    data = b"records " * 200_000
    zstd, lz4c = zstd_codec.ZstdCodec(), lz4_codec.Lz4Codec()
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)

    def stepping(*args: object, **kwargs: object) -> None:
        raise AssertionError("took the stepped path")

    with monkeypatch.context() as m:
        m.setattr(lz4c, "_decompress_bounded", stepping)
        m.setattr(zstd_codec, "_MIN_STEP", None)  # any stepping would fail on it
        assert zstd.decompress(no_size, max_size=64 * MiB) == data
        assert lz4c.decompress(lz4.frame.compress(data), max_size=64 * MiB) == data
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(256 * MiB))
    with pytest.raises(DecompressionLimitExceeded):
        zstd.decompress(bomb, max_size=8 * MiB)
    with pytest.raises(DecompressionLimitExceeded):
        lz4c.decompress(lz4.frame.compress(bytes(64 * MiB)), max_size=8 * MiB)
