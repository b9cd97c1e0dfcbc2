"""snappy (Kafka codec id 2): reads raw snappy and xerial-framed snappy, writes xerial-framed.

librdkafka writes raw snappy blocks; the Java client, kafka-python and aiokafka write the xerial
``SnappyOutputStream`` framing: a 16-byte header (magic ``82 53 4E 41 50 50 59 00``, int32
version, int32 minimum compatible version) then ``[int32 length, snappy block]*``, each block
compressing at most 32 KiB of input. Writing xerial is what every Kafka reader accepts.
"""

from __future__ import annotations

import struct

import snappy

from odradek.errors import DecompressionLimitExceeded

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible with 1
XERIAL_HEADER_SIZE = 16
XERIAL_BLOCK_SIZE = 32 * 1024
_LEN = struct.Struct(">i")


class SnappyCodec:
    """snappy via python-snappy (cramjam underneath)."""

    id = 2
    name = "snappy"

    def compress(self, data: bytes, level: int | None = None) -> bytes:
        """xerial-framed snappy in 32 KiB blocks, like the Java client (``level`` is ignored)."""
        parts = [XERIAL_HEADER]
        mv = memoryview(data)
        pack = _LEN.pack
        # empty input still gets one (empty) block: some readers only detect xerial past 16 bytes
        for start in range(0, max(len(data), 1), XERIAL_BLOCK_SIZE):
            block = snappy.compress(mv[start : start + XERIAL_BLOCK_SIZE])
            parts.append(pack(len(block)))
            parts.append(block)
        return b"".join(parts)

    def decompress(self, data: bytes | memoryview, *, max_size: int | None = None) -> bytes:
        """xerial-framed when the data starts with the xerial magic, raw snappy otherwise.

        With ``max_size``, the uncompressed lengths the data declares (each raw block's varint
        preamble) are added up and refused over the bound *before* the library runs: cramjam
        allocates a block's declared length up front and aborts the process when that fails."""
        mv = memoryview(data)  # any buffer (bytes, memoryview, cramjam.Buffer) slices alike
        if len(mv) >= XERIAL_HEADER_SIZE and mv[:8] == XERIAL_MAGIC:
            blocks = _xerial_blocks(mv)
            if max_size is not None:
                declared = sum(declared_length(block) for block in blocks)
                if declared > max_size:
                    raise DecompressionLimitExceeded(max_size, codec=self.name, declared=declared)
            return b"".join([bytes(snappy.uncompress(block)) for block in blocks])
        if max_size is not None:
            declared = declared_length(mv)
            if declared > max_size:
                raise DecompressionLimitExceeded(max_size, codec=self.name, declared=declared)
        return bytes(snappy.uncompress(mv))


def declared_length(block: memoryview) -> int:
    """The uncompressed length a raw snappy block declares: its leading varint (at most 5 bytes,
    a uint32). Raises ValueError when the varint is missing or longer."""
    value = 0
    for i in range(min(len(block), 5)):
        byte = block[i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value
    raise ValueError("raw snappy data has no valid uncompressed-length preamble")


def _xerial_blocks(mv: memoryview) -> list[memoryview]:
    """The raw snappy blocks of xerial-framed data (``[int32 length, block]*`` after the header)."""
    blocks: list[memoryview] = []
    pos = XERIAL_HEADER_SIZE
    n = len(mv)
    unpack = _LEN.unpack_from
    while pos < n:
        if n - pos < 4:
            raise ValueError(f"xerial snappy block length at {pos} is truncated")
        (length,) = unpack(mv, pos)
        pos += 4
        if length < 0 or pos + length > n:
            raise ValueError(f"xerial snappy block at {pos} declares {length} bytes, {n - pos} present")
        blocks.append(mv[pos : pos + length])
        pos += length
    return blocks
