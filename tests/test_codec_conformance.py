"""The built-in codecs (plugins/compress) against the codec conformance suite."""

from __future__ import annotations

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
