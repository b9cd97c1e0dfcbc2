"""Upper bounds on what zstd and LZ4 frames inflate to, read from their block headers.

A bounded decompression (``decompress(data, max_size=n)``) must not inflate a bomb, but feeding a
streaming decoder in small steps to enforce that made ordinary batches 1.3-3x slower to check
(librdkafka's zstd frames carry no content size, and python-lz4 allocates ``max_length`` up
front). Both formats frame their data in blocks whose headers say how much each block can
regenerate, so a walk over the headers (no decoding, one step per block) gives a bound on the
whole output: when it fits under ``max_size`` the codec decodes in one call, as fast as an
unbounded one; only data whose headers allow more (a bomb, or extreme ratios) takes the slow,
stepped path. A walk that finds anything it does not understand returns None and leaves the
verdict to the decoder.

Formats: RFC 8878 (zstd frames, skippable frames) and the LZ4 Frame Format 1.6.x.
"""

from __future__ import annotations

from collections.abc import Callable

_SKIPPABLE_LOW, _SKIPPABLE_HIGH = 0x184D2A50, 0x184D2A5F
_ZSTD_MAGIC = 0xFD2FB528
_LZ4_MAGIC = 0x184D2204
#: zstd's Block_Maximum_Size: no block regenerates more (RFC 8878, 3.1.1.2.4)
_ZSTD_BLOCK_MAX = 128 * 1024
#: LZ4 Block Maximum Size by the BD byte's bits 6-4
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
#: Legitimate encoders write blocks of up to 64 KiB-4 MiB of output, so this many blocks already
#: bounds far more than any batch may inflate to; a frame of more, tiny blocks (each a few bytes
#: of input) is not walked at Python speed but left to the stepped decoder.
_MAX_BLOCKS = 4096


def _u32(data: memoryview, pos: int) -> int:
    return int.from_bytes(data[pos : pos + 4], "little")


def _skippable(data: memoryview, pos: int) -> int | None:
    """The position after a skippable frame at ``pos``, or None if there is none there."""
    if len(data) - pos >= 8 and _SKIPPABLE_LOW <= _u32(data, pos) <= _SKIPPABLE_HIGH:
        return pos + 8 + _u32(data, pos + 4)
    return None


#: A walk of one frame: (data, position of its magic, blocks left to walk) -> (position after the
#: frame, at most how much it regenerates, blocks walked), or None when it does not parse.
_FrameWalk = Callable[[memoryview, int, int], "tuple[int, int, int] | None"]


def _walk(data: memoryview, frame: _FrameWalk) -> int | None:
    """Sum the bounds of the frames (and skip the skippable frames) that tile ``data``; None when
    they do not tile it exactly or the frames and blocks walked exceed ``_MAX_BLOCKS``."""
    n = len(data)
    pos = total = walked = 0
    while pos < n:
        walked += 1
        skip = _skippable(data, pos)
        if skip is not None:
            pos = skip
        else:
            step = frame(data, pos, _MAX_BLOCKS - walked)
            if step is None:
                return None
            pos, inflated, blocks = step
            total += inflated
            walked += blocks
        if walked > _MAX_BLOCKS:
            return None
    return total if pos == n else None


def zstd_output_bound(data: memoryview) -> int | None:
    """At most how many bytes the zstd frames in ``data`` regenerate: a raw or RLE block exactly
    its size field, a compressed block at most 128 KiB (Block_Maximum_Size is that or a smaller
    window; the bound does not trust a frame's window, libzstd enforces the 128 KiB). None
    when the headers do not tile ``data`` exactly or there are too many blocks to walk."""
    return _walk(data, _zstd_frame)


def _zstd_frame(data: memoryview, pos: int, blocks_left: int) -> tuple[int, int, int] | None:
    n = len(data)
    if n - pos < 5 or _u32(data, pos) != _ZSTD_MAGIC:
        return None
    descriptor = data[pos + 4]
    pos += 5
    size_flag, single_segment = descriptor >> 6, (descriptor >> 5) & 1
    pos += 0 if single_segment else 1  # Window_Descriptor
    pos += (0, 1, 2, 4)[descriptor & 3]  # Dictionary_ID
    pos += (single_segment, 2, 4, 8)[size_flag]  # Frame_Content_Size
    total = blocks = 0
    while True:
        if n - pos < 3 or blocks >= blocks_left:
            return None
        header = int.from_bytes(data[pos : pos + 3], "little")
        pos += 3
        blocks += 1
        kind, size = (header >> 1) & 3, header >> 3
        if kind == 0:  # Raw_Block
            total += size
            pos += size
        elif kind == 1:  # RLE_Block: one byte, repeated Block_Size times
            total += size
            pos += 1
        elif kind == 2:  # Compressed_Block: Block_Size is the compressed size
            total += _ZSTD_BLOCK_MAX
            pos += size
        else:
            return None
        if header & 1:  # Last_Block
            break
    pos += 4 if (descriptor >> 2) & 1 else 0  # Content_Checksum
    return pos, total, blocks


def lz4_output_bound(data: memoryview) -> int | None:
    """At most how many bytes the LZ4 frames in ``data`` regenerate: an uncompressed block
    exactly its size, a compressed one at most the frame's Block Maximum Size. None when the
    headers do not tile ``data`` exactly or there are too many blocks to walk."""
    return _walk(data, _lz4_frame)


def _lz4_frame(data: memoryview, pos: int, blocks_left: int) -> tuple[int, int, int] | None:
    n = len(data)
    if n - pos < 7 or _u32(data, pos) != _LZ4_MAGIC:
        return None
    flags, bd = data[pos + 4], data[pos + 5]
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 7)
    if flags >> 6 != 1 or block_max is None:
        return None
    block_checksum = 4 if (flags >> 4) & 1 else 0
    pos += 6 + (8 if (flags >> 3) & 1 else 0) + (4 if flags & 1 else 0) + 1  # sizes, dict id, HC
    total = blocks = 0
    while True:
        if n - pos < 4 or blocks >= blocks_left:
            return None
        word = _u32(data, pos)
        pos += 4
        if word == 0:  # EndMark
            break
        blocks += 1
        size = word & 0x7FFFFFFF
        total += size if word >> 31 else block_max
        pos += size + block_checksum
    pos += 4 if (flags >> 2) & 1 else 0  # Content Checksum
    return pos, total, blocks
