"""zstd (Kafka codec id 4, KIP-110): zstd frames, with or without the content size in the header.

Java's ``ZstdOutputStream`` and librdkafka's streaming path write frames without a content size;
one-shot encoders (kafka-python, cramjam) include it. One-shot decompression needs the size, so
frames without it go through the streaming decompressor. Contexts are reused per thread
(a zstd context is costly to set up and may not be shared between threads).
"""

from __future__ import annotations

import threading

import zstandard

from odradek.errors import DecompressionLimitExceeded
from odradek.plugins.compress.frame_bounds import zstd_output_bound

DEFAULT_LEVEL = 3  # zstd's default, also Kafka's
#: With a bound, a frame without a content size is fed to the streaming decoder in steps of
#: (room left >> _STEP_SHIFT) compressed bytes, at least _MIN_STEP: a zstd block inflates at most
#: ~32 KiB per input byte (an RLE block: 4 bytes for 128 KiB), so one step's output stays under
#: about half the room left plus one block, and a bomb stops within ~2x the bound.
_STEP_SHIFT = 16
_MIN_STEP = 64


class _Contexts(threading.local):
    def __init__(self) -> None:
        self.dctx = zstandard.ZstdDecompressor()
        self.cctx: dict[int, zstandard.ZstdCompressor] = {}


class ZstdCodec:
    """zstd via the ``zstandard`` package."""

    id = 4
    name = "zstd"

    def __init__(self) -> None:
        self._local = _Contexts()

    def compress(self, data: bytes, level: int | None = None) -> bytes:
        """One frame, with content size and without checksum."""
        lvl = DEFAULT_LEVEL if level is None else level
        cctx = self._local.cctx.get(lvl)
        if cctx is None:
            cctx = self._local.cctx[lvl] = zstandard.ZstdCompressor(level=lvl)
        return cctx.compress(data)

    def decompress(self, data: bytes | memoryview, *, max_size: int | None = None) -> bytes:
        """Every frame in ``data``: one-shot when the (only) frame records its content size,
        streaming frame by frame otherwise (no size, or several concatenated frames). With
        ``max_size``, a declared content size over it is refused before anything is allocated;
        frames whose block headers bound the output under it decode like unbounded ones (see
        :mod:`.frame_bounds`), and the rest are fed in bounded steps (see ``_STEP_SHIFT``)."""
        dctx = self._local.dctx
        declared = zstandard.frame_content_size(data)
        if max_size is not None:
            if declared > max_size:
                raise DecompressionLimitExceeded(max_size, codec=self.name, declared=declared)
            bound = zstd_output_bound(memoryview(data))
            if bound is not None and bound <= max_size:
                max_size = None  # the block headers prove the output fits: decode in one go
        if declared >= 0:
            try:
                return dctx.decompress(data, allow_extra_data=False)
            except zstandard.ZstdError:
                pass  # more frames follow the first: decode them one by one below
        out: list[bytes] = []
        total = 0
        rest: bytes | memoryview = data
        while rest:
            d = dctx.decompressobj()
            if max_size is None:
                out.append(d.decompress(rest))
                pos = len(rest)
            else:
                mv = memoryview(rest)
                pos = 0
                while not d.eof and pos < len(mv):
                    step = max(_MIN_STEP, (max_size - total) >> _STEP_SHIFT)
                    piece = d.decompress(mv[pos : pos + step])
                    pos += step
                    total += len(piece)
                    if total > max_size:
                        raise DecompressionLimitExceeded(max_size, codec=self.name)
                    out.append(piece)
            if not d.eof:
                raise ValueError("zstd data is truncated")
            rest = d.unused_data + bytes(memoryview(rest)[pos:]) if pos < len(rest) else d.unused_data
        return out[0] if len(out) == 1 else b"".join(out)
