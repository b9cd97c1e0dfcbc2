"""The built-in codecs (plugins/compress) against the codec conformance suite."""

from __future__ import annotations

import zlib

from odradek.plugins.compress.gzip_codec import GzipCodec
from odradek.plugins.compress.lz4_codec import Lz4Codec
from odradek.plugins.compress.plugin import odradek_register_codecs
from odradek.plugins.compress.snappy_codec import SnappyCodec
from odradek.plugins.compress.zstd_codec import ZstdCodec
from odradek.testing import check_codec

TestGzipConformance = check_codec(GzipCodec())
TestSnappyConformance = check_codec(SnappyCodec())
TestLz4Conformance = check_codec(Lz4Codec())
TestZstdConformance = check_codec(ZstdCodec())


def test_every_registered_codec_is_checked() -> None:
    checked = {GzipCodec, SnappyCodec, Lz4Codec, ZstdCodec}
    assert {type(codec) for codec in odradek_register_codecs()} == checked


class _LegacyZlibCodec:
    """A third-party codec written before ``max_size`` existed (zlib under a non-Kafka id): the
    suite checks its bound through the records layer instead of skipping."""

    id = 6
    name = "legacy-zlib"

    def compress(self, data: bytes, level: int | None = None) -> bytes:
        return zlib.compress(data, -1 if level is None else level)

    def decompress(self, data: bytes | memoryview) -> bytes:
        return zlib.decompress(data)


TestLegacyCodecConformance = check_codec(_LegacyZlibCodec())
