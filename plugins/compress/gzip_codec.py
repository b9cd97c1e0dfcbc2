"""gzip (Kafka codec id 1): RFC 1952 gzip members, what every Kafka client writes."""

from __future__ import annotations

import zlib

from odradek.errors import DecompressionLimitExceeded

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip container, 32 KiB window
DEFAULT_LEVEL = 6  # zlib's default; Kafka's Java client uses Deflater.DEFAULT_COMPRESSION too


class GzipCodec:
    """gzip through zlib (C speed, no ``gzip`` module file objects)."""

    id = 1
    name = "gzip"

    def compress(self, data: bytes, level: int | None = None) -> bytes:
        """One gzip member (header mtime 0, so equal input gives equal output)."""
        c = zlib.compressobj(DEFAULT_LEVEL if level is None else level, zlib.DEFLATED, _GZIP_WBITS)
        return c.compress(data) + c.flush()

    def decompress(self, data: bytes | memoryview, *, max_size: int | None = None) -> bytes:
        """Every concatenated gzip member (Java's GZIPInputStream reads them all); a truncated
        member raises ValueError. With ``max_size``, zlib is asked for at most one byte more than
        the bound has room for (``max_length``), so a bomb stops there, not after inflating."""
        out: list[bytes] = []
        total = 0
        rest: bytes | memoryview = data
        while True:
            d = zlib.decompressobj(_GZIP_WBITS)
            if max_size is None:
                chunk = d.decompress(rest)
            else:
                # max_length >= 1 (0 would mean "no limit"); zlib stops once it has that much
                chunk = d.decompress(rest, max_size - total + 1)
                total += len(chunk)
                if total > max_size:
                    raise DecompressionLimitExceeded(max_size, codec=self.name)
            out.append(chunk)
            if not d.eof:
                raise ValueError("gzip data is truncated")
            rest = d.unused_data
            if not rest:
                return out[0] if len(out) == 1 else b"".join(out)
