"""lz4 (Kafka codec id 3): the LZ4 frame format (magic ``04 22 4D 18``), as magic-2 batches use.

Clients differ in frame flags: the Java client writes independent 64 KiB blocks without content
size; librdkafka and cramjam-based clients may set content size, content checksum, block
checksums or linked blocks. liblz4's frame decoder honours every flag, so all of them decode.
"""

from __future__ import annotations

import lz4.frame

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

    def decompress(self, data: bytes | memoryview) -> bytes:
        """Every frame in ``data`` (concatenated frames are legal), whatever their flags."""
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
