"""zstd (Kafka codec id 4, KIP-110): zstd frames, with or without the content size in the header.

Java's ``ZstdOutputStream`` and librdkafka's streaming path write frames without a content size;
one-shot encoders (kafka-python, cramjam) include it. One-shot decompression needs the size, so
frames without it go through the streaming decompressor. Contexts are reused per thread
(a zstd context is costly to set up and may not be shared between threads).
"""

from __future__ import annotations

import threading

import zstandard

DEFAULT_LEVEL = 3  # zstd's default, also Kafka's


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

    def decompress(self, data: bytes | memoryview) -> bytes:
        """Every frame in ``data``: one-shot when the (only) frame records its content size,
        streaming frame by frame otherwise (no size, or several concatenated frames)."""
        dctx = self._local.dctx
        if zstandard.frame_content_size(data) >= 0:
            try:
                return dctx.decompress(data, allow_extra_data=False)
            except zstandard.ZstdError:
                pass  # more frames follow the first: decode them one by one below
        out: list[bytes] = []
        rest: bytes | memoryview = data
        while rest:
            d = dctx.decompressobj()
            out.append(d.decompress(rest))
            if not d.eof:
                raise ValueError("zstd data is truncated")
            rest = d.unused_data
        return out[0] if len(out) == 1 else b"".join(out)
