"""The compress plugin: round-trips for every codec, every framing real clients write, and
interop with kafka-python's and aiokafka's codec functions in both directions."""

from __future__ import annotations

import gzip
import struct
import types
import zlib

import cramjam
import lz4.frame
import pytest
import snappy
import zstandard
from aiokafka import codec as aio_codec
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kp_codec

from odradek import records as R
from odradek.errors import CorruptMessage
from odradek.hookspecs import hookimpl
from odradek.interfaces import Codec
from odradek.manager import PluginError, Plugins, build_plugin_manager
from odradek.plugins.compress.snappy_codec import XERIAL_BLOCK_SIZE, XERIAL_MAGIC

PLUGIN = "odradek.plugins.compress.plugin"
CODECS: dict[int, Codec] = Plugins(build_plugin_manager(entry_points_enabled=False, extra=[PLUGIN])).codecs()
GZIP, SNAPPY, LZ4, ZSTD = (CODECS[i] for i in (1, 2, 3, 4))

# mixes of incompressible and very compressible data, sometimes spanning several 32/64 KiB blocks
PAYLOAD = (
    st.binary(max_size=3000)
    | st.builds(lambda seed, n: (seed * n)[:n], st.binary(min_size=1, max_size=16), st.integers(0, 200_000))
    | st.builds(lambda a, b: a * 3000 + b, st.binary(min_size=1, max_size=30), st.binary(max_size=500))
)


def test_registered_codecs() -> None:
    assert {i: (c.name, type(c).__module__.rsplit(".", 1)[-1]) for i, c in CODECS.items()} == {
        1: ("gzip", "gzip_codec"),
        2: ("snappy", "snappy_codec"),
        3: ("lz4", "lz4_codec"),
        4: ("zstd", "zstd_codec"),
    }
    for cid, codec in CODECS.items():
        assert isinstance(codec, Codec) and codec.id == cid == R.Compression[codec.name.upper()]


@settings(max_examples=40, deadline=None)
@given(data=PAYLOAD, cid=st.sampled_from([1, 2, 3, 4]), level=st.sampled_from([None, 1, 3]))
def test_round_trip_every_codec(data: bytes, cid: int, level: int | None) -> None:
    codec = CODECS[cid]
    packed = codec.compress(data, level)
    assert codec.decompress(packed) == data
    assert codec.decompress(memoryview(packed)) == data
    assert codec.decompress(memoryview(b"xx" + packed)[2:]) == data


@settings(max_examples=25, deadline=None)
@given(data=PAYLOAD)
def test_odradek_output_decodes_in_kafka_python_and_aiokafka(data: bytes) -> None:
    for theirs in (kp_codec, aio_codec):
        assert theirs.gzip_decode(GZIP.compress(data)) == data
        assert theirs.snappy_decode(SNAPPY.compress(data)) == data
        assert theirs.lz4_decode(LZ4.compress(data)) == data
        assert theirs.zstd_decode(ZSTD.compress(data)) == data


@settings(max_examples=25, deadline=None)
@given(data=PAYLOAD)
def test_kafka_python_and_aiokafka_output_decodes_in_odradek(data: bytes) -> None:
    for theirs in (kp_codec, aio_codec):
        assert GZIP.decompress(theirs.gzip_encode(data)) == data
        assert SNAPPY.decompress(theirs.snappy_encode(data)) == data  # xerial
        assert SNAPPY.decompress(theirs.snappy_encode(data, xerial_compatible=False)) == data  # raw
        assert LZ4.decompress(theirs.lz4_encode(data)) == data
        assert ZSTD.decompress(theirs.zstd_encode(data)) == data


# ---------------------------------------------------------------------------------------------
# gzip
# ---------------------------------------------------------------------------------------------


def test_gzip_writes_rfc1952_and_reads_concatenated_members() -> None:
    data = b"gzip me " * 1000
    packed = GZIP.compress(data)
    assert packed[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(packed) == data
    assert GZIP.decompress(gzip.compress(data[:100]) + gzip.compress(data[100:], 9)) == data
    assert len(GZIP.compress(data, 9)) <= len(GZIP.compress(data, 1))


def test_gzip_truncated_or_zlib_framed_is_an_error() -> None:
    packed = GZIP.compress(b"x" * 5000)
    with pytest.raises(ValueError, match="truncated"):
        GZIP.decompress(packed[:-4])
    with pytest.raises(zlib.error):
        GZIP.decompress(zlib.compress(b"not gzip framing"))


# ---------------------------------------------------------------------------------------------
# snappy
# ---------------------------------------------------------------------------------------------


def test_snappy_writes_xerial_in_32k_blocks() -> None:
    data = bytes(range(256)) * 500  # 128000 bytes -> 4 blocks
    packed = SNAPPY.compress(data)
    assert packed[:8] == XERIAL_MAGIC == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", packed[8:16]) == (1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        blocks.append(snappy.uncompress(packed[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    assert pos == len(packed)
    assert [len(b) for b in blocks] == [XERIAL_BLOCK_SIZE] * 3 + [len(data) - 3 * XERIAL_BLOCK_SIZE]
    assert b"".join(blocks) == data


@settings(max_examples=25, deadline=None)
@given(data=PAYLOAD)
def test_snappy_reads_raw_blocks_as_librdkafka_writes(data: bytes) -> None:
    assert SNAPPY.decompress(snappy.compress(data)) == data
    assert SNAPPY.decompress(bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_reads_any_xerial_block_size_and_version() -> None:
    data = b"abc" * 30_000
    chunks = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    framed = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for chunk in chunks:
        block = snappy.compress(chunk)
        framed += struct.pack(">i", len(block)) + block
    assert SNAPPY.decompress(framed) == data
    assert SNAPPY.decompress(XERIAL_MAGIC + struct.pack(">ii", 1, 1)) == b""  # empty stream


def test_snappy_errors() -> None:
    packed = SNAPPY.compress(b"y" * 100_000)
    with pytest.raises(ValueError, match="declares"):
        SNAPPY.decompress(packed[:-3])
    with pytest.raises(ValueError, match="truncated"):
        SNAPPY.decompress(packed + b"\x00\x00")
    with pytest.raises(snappy.UncompressError):
        SNAPPY.decompress(b"\xff\xff\xff\xff not snappy")


# ---------------------------------------------------------------------------------------------
# lz4
# ---------------------------------------------------------------------------------------------

LZ4_FLAGS = [
    dict(block_linked=bl, content_checksum=cc, block_checksum=bc, store_size=ss, block_size=bs)
    for bl in (False, True)
    for cc in (False, True)
    for bc in (False, True)
    for ss in (False, True)
    for bs in (lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX4MB)
]


@pytest.mark.parametrize("flags", LZ4_FLAGS, ids=lambda f: "-".join(f"{k}={int(v)}" for k, v in f.items()))
def test_lz4_reads_every_frame_flag_variant(flags: dict[str, int]) -> None:
    data = b"lz4 frame " * 20_000 + bytes(range(256)) * 10
    assert LZ4.decompress(lz4.frame.compress(data, **flags)) == data


def test_lz4_reads_cramjam_frames_and_concatenated_frames() -> None:
    data = b"0123456789" * 10_000
    c = cramjam.lz4.Compressor(level=9, content_checksum=False, block_linked=False)
    c.compress(data)
    assert LZ4.decompress(bytes(c.finish())) == data
    assert LZ4.decompress(bytes(cramjam.lz4.compress(data))) == data
    assert LZ4.decompress(lz4.frame.compress(data[:5]) + lz4.frame.compress(data[5:])) == data


def test_lz4_writes_the_java_client_frame_shape() -> None:
    packed = LZ4.compress(b"z" * 200_000)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 0b01  # version 1
    assert flg & 0x20  # independent blocks
    assert not flg & 0x08  # no content size
    assert (bd >> 4) & 0x7 == 4  # 64 KiB maximum block size


def test_lz4_truncated_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        LZ4.decompress(LZ4.compress(b"q" * 10_000)[:-6])


# ---------------------------------------------------------------------------------------------
# zstd
# ---------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(data=PAYLOAD)
def test_zstd_reads_frames_with_and_without_content_size(data: bytes) -> None:
    with_size = zstandard.ZstdCompressor().compress(data)
    assert zstandard.frame_content_size(with_size) == len(data)
    assert ZSTD.decompress(with_size) == data
    cobj = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    streamed = cobj.compress(data) + cobj.flush()  # like Java's ZstdOutputStream / librdkafka
    assert zstandard.frame_content_size(streamed) == -1
    assert ZSTD.decompress(streamed) == data
    assert ZSTD.decompress(bytes(cramjam.zstd.compress(data))) == data


def test_zstd_reads_concatenated_frames() -> None:
    a, b = b"first " * 5000, b"second " * 7000
    sized = zstandard.ZstdCompressor().compress
    cobj = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    unsized = cobj.compress(b) + cobj.flush()
    assert ZSTD.decompress(sized(a) + sized(b)) == a + b
    assert ZSTD.decompress(sized(a) + unsized) == a + b
    assert ZSTD.decompress(unsized + sized(a)) == b + a


def test_zstd_levels_and_truncation() -> None:
    data = bytes(range(200)) * 2000
    assert len(ZSTD.compress(data, 19)) <= len(ZSTD.compress(data, 1))
    cobj = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    streamed = cobj.compress(data) + cobj.flush()
    with pytest.raises(ValueError, match="truncated"):
        ZSTD.decompress(streamed[:-5])
    with pytest.raises(zstandard.ZstdError):
        ZSTD.decompress(b"\x00\x01\x02\x03 not zstd")


# ---------------------------------------------------------------------------------------------
# codecs through the records layer, and third-party codecs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cid", [1, 2, 3, 4])
def test_codec_failure_inside_a_batch_is_corrupt_message(cid: int) -> None:
    good = R.build_batch([(b"k", b"v" * 3000, [], 1)], compression=cid, codecs=CODECS)
    body = CODECS[cid].compress(b"v" * 3000)[: -max(4, len(good) // 10)]  # truncated stream
    bad = bytearray(good[: R.HEADER_SIZE] + body)
    struct.pack_into(">i", bad, R.BATCH_LENGTH_OFFSET, len(bad) - R.LOG_OVERHEAD)
    struct.pack_into(">I", bad, R.CRC_OFFSET, R.compute_crc(bad))
    R.validate_batches(bad)  # the header and CRC are fine
    with pytest.raises(CorruptMessage, match=CODECS[cid].name):
        R.decode_batch(bad, codecs=CODECS)


class _Rot13ishCodec:
    """A toy third-party codec under a new id: xor every byte, then zlib."""

    id = 6
    name = "xorzlib"

    def compress(self, data: bytes, level: int | None = None) -> bytes:
        return zlib.compress(bytes(b ^ 0x5A for b in data))

    def decompress(self, data: bytes | memoryview) -> bytes:
        return bytes(b ^ 0x5A for b in zlib.decompress(data))


def _codec_plugin(name: str, codec: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.odradek_register_codecs = hookimpl(lambda: [codec])  # type: ignore[attr-defined]
    return mod


def test_third_party_codec_plugin_adds_an_id() -> None:
    plugins = Plugins(
        build_plugin_manager(entry_points_enabled=False, extra=[PLUGIN, _codec_plugin("xor_codec", _Rot13ishCodec())])
    )
    codecs = plugins.codecs()
    assert sorted(codecs) == [1, 2, 3, 4, 6]
    buf = R.build_batch([(b"k", b"secret" * 10, [], 1)], compression=6, codecs=codecs)
    assert R.parse_header(buf).compression_id == 6
    assert R.decode_batch(buf, codecs=codecs).records[0].value == b"secret" * 10


def test_codec_id_clash_names_both_plugins() -> None:
    class FakeGzip(_Rot13ishCodec):
        id = 1

    plugins = Plugins(
        build_plugin_manager(entry_points_enabled=False, extra=[PLUGIN, _codec_plugin("fake_gzip", FakeGzip())])
    )
    with pytest.raises(PluginError, match="fake_gzip"):
        plugins.codecs()
