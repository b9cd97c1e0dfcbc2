"""lz4 (Kafka codec id 3): the LZ4 frame format (magic ``04 22 4D 18``), as magic-2 batches use.

Clients differ in frame flags: the Java client writes independent 64 KiB blocks without content
size; librdkafka and cramjam-based clients may set content size, content checksum, block
checksums or linked blocks. liblz4's frame decoder honours every flag, so all of them decode.
"""

from __future__ import annotations

import lz4.frame

from odradek.errors import DecompressionLimitExceeded
from odradek.plugins.compress.frame_bounds import lz4_output_bound

DEFAULT_LEVEL = 0  # lz4's fast mode; 3..16 select LZ4-HC


class Lz4Codec:
    """LZ4 frames via the ``lz4`` package."""

    id = 3
    name = "lz4"

    def compress(self, data: bytes, level: int | None = None) -> bytes:
        """One frame in the Java client's shape: independent 64 KiB blocks, no content size."""
        out: bytes = lz4.frame.compress(
            data,
            compression_level=DEFAULT_LEVEL if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return out

    def decompress(self, data: bytes | memoryview, *, max_size: int | None = None) -> bytes:
        """Every frame in ``data`` (concatenated frames are legal), whatever their flags. With
        ``max_size``, frames whose block headers bound the output under it decode in one call
        (see :mod:`.frame_bounds`); the others go through ``_decompress_bounded``."""
        if max_size is not None:
            bound = lz4_output_bound(memoryview(data))
            if bound is None or bound > max_size:
                return self._decompress_bounded(memoryview(data), max_size)
            # else the block headers prove the output fits: decode like an unbounded call
        out: bytes
        used: int
        out, used = lz4.frame.decompress(data, return_bytes_read=True)
        if used == len(data):
            return out
        parts = [out]
        mv = memoryview(data)
        while used < len(mv):
            chunk, n = lz4.frame.decompress(mv[used:], return_bytes_read=True)
            if n == 0:
                raise ValueError(f"lz4 data has {len(mv) - used} undecodable trailing bytes")
            parts.append(chunk)
            used += n
        return b"".join(parts)

    def _decompress_bounded(self, mv: memoryview, max_size: int) -> bytes:
        """Frame by frame, refusing a declared content size over the room left before decoding
        (the one-shot decoder allocates it), then asking the streaming decoder for at most one
        byte more than that room (``max_length``)."""
        parts: list[bytes] = []
        total = 0
        pos = 0
        while True:
            room = max_size - total
            declared = int(lz4.frame.get_frame_info(mv[pos:])["content_size"])  # 0: not recorded
            if declared > room:
                raise DecompressionLimitExceeded(max_size, codec=self.name, declared=total + declared)
            d = lz4.frame.LZ4FrameDecompressor()
            chunk: bytes = d.decompress(mv[pos:], max_length=room + 1)
            total += len(chunk)
            if total > max_size:
                raise DecompressionLimitExceeded(max_size, codec=self.name)
            if not d.eof:
                raise ValueError("lz4 data is truncated")
            parts.append(chunk)
            pos = len(mv) - len(d.unused_data or b"")  # None when the frame ended the data
            if pos >= len(mv):
                return parts[0] if len(parts) == 1 else b"".join(parts)
