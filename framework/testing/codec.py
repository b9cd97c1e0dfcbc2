"""Conformance suite for the compression role (``Codec`` in odradek.interfaces).

A codec plugin -- the built-in gzip, snappy, lz4 and zstd or a third party's -- runs it against
itself with one line in a test module::

    TestMyCodec = check_codec(MyCodec())   # the object odradek_register_codecs returns

or, to tune it, by subclassing :class:`CodecConformance` and setting ``codec`` (and ``levels``).

What a codec must honour, and why:

- ``id`` is Kafka's compression id (bits 0-2 of a batch's attributes, so 1..7; 0 is "none") and
  ``name`` a non-empty name; Kafka's ids 1..4 carry Kafka's names (gzip, snappy, lz4, zstd),
  which ``compression.type`` selects;
- ``compress`` returns ``bytes`` or ``bytearray`` (the records layer writes it into the batch);
  ``decompress(compress(x)) == x`` for empty, small, large, incompressible and highly compressible
  records sections, at the default level and at every level in ``levels``; ``decompress`` takes a
  ``memoryview`` slice as well as bytes (the records layer hands it the batch's section in place);
- it compresses: 1 MiB of zeros comes out under a tenth of its size (a codec that never shrinks
  data, such as a cipher, is not what ``compression.type`` promises a producer);
- for Kafka's ids the bytes are Kafka's framing, because other clients read and write them:
  gzip (1) writes RFC 1952 members and reads concatenated ones; snappy (2) reads both the xerial
  framing (Java, kafka-python, aiokafka) and raw snappy (librdkafka), and writes one of them;
  lz4 (3) writes an LZ4 frame and reads frames whatever their flags (content size, checksums,
  linked blocks) and concatenated frames; zstd (4) writes zstd frames and reads frames with and
  without the content size (Java's streaming encoder omits it) and concatenated frames;
- corrupt or truncated input raises an ``Exception`` (never crashes the process, never hangs): the
  records layer turns it into ``CorruptMessage``, so a consumer gets Kafka's CORRUPT_MESSAGE.

- ``decompress(data, max_size=n)`` (the broker passes ``message.max.decompressed.bytes`` for
  every produced batch) returns output of exactly ``n`` bytes and raises
  :class:`odradek.errors.DecompressionLimitExceeded` for more, stopping at the bound instead of
  inflating a "bomb" first: 256 MiB of zeros compressed must be refused at 1 MiB within
  ``HANG_S``, allocating (as tracemalloc sees it) far less than the inflated size. A codec whose
  ``decompress`` has no ``max_size`` (written before it existed) is checked through the records
  layer, which decompresses it fully and checks afterwards: the same refusals, without the memory
  bound (unbounded memory, see docs/plugins.md).
"""

from __future__ import annotations

import gzip
import os
import random
import threading
import tracemalloc
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar

import pytest

from .. import records
from ..errors import CorruptMessage, DecompressionLimitExceeded
from ..interfaces import Codec
from ._suite import suite_for

__all__ = ["KAFKA_CODEC_NAMES", "CodecConformance", "check_codec"]

#: Kafka's codec names by id (``compression.type``).
KAFKA_CODEC_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
#: Kafka's compression level ranges (KIP-390) that the built-in ids are tried at.
KAFKA_LEVELS: dict[int, tuple[int, ...]] = {1: (1, 9), 2: (), 3: (1, 9, 17), 4: (-5, 1, 22)}
#: How long one decompress of a few MiB may take before the suite calls it a hang.
HANG_S = 30.0


def _inputs() -> dict[str, bytes]:
    rng = random.Random(20240917)
    words = [b"visit", b"/index.html", b"alice", b"bob", b"GET", b"200", b"{", b"}", b'"ts":']
    text = b" ".join(rng.choice(words) for _ in range(40_000))
    return {
        "empty": b"",
        "one byte": b"x",
        "small": b'{"user": "alice", "page": "/index.html"}',
        "incompressible": rng.randbytes(300_000),
        "text": text,
        "large compressible": bytes(1 << 20),
        "around a block boundary": rng.randbytes(64 * 1024 + 1) + bytes(32 * 1024 - 1),
    }


INPUTS = _inputs()


def bounded(fn: Callable[[], Any], what: str) -> Any:
    """``fn()`` on a thread, failing the test if it runs past ``HANG_S`` (a decoder in a loop)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # reported on the test's thread below
            outcome.append((False, exc))

    thread = threading.Thread(target=run, daemon=True, name=f"conformance: {what}")
    thread.start()
    thread.join(HANG_S)
    if thread.is_alive():
        pytest.fail(f"{what} did not return within {HANG_S:.0f} s (a decoder loop on bad input?)")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _corrupt_inputs(compressed: bytes) -> dict[str, bytes]:
    rng = random.Random(len(compressed))
    return {
        "garbage": rng.randbytes(200),
        "truncated to half": compressed[: len(compressed) // 2],
        "truncated by one byte": compressed[:-1],
        "header only": compressed[:6],
    }


class CodecConformance:
    """Base class of a codec's conformance tests; see the module docstring."""

    #: The codec object (or its class, made with no arguments) a plugin registers.
    codec: ClassVar[Any] = None
    #: Levels to try besides the default (None); by default Kafka's range for the built-in ids.
    levels: ClassVar[Sequence[int] | None] = None

    def make_codec(self) -> Codec:
        codec = type(self).__dict__.get("codec", self.codec)
        if codec is None:
            pytest.fail(f"{type(self).__name__} must set `codec` (the object odradek_register_codecs returns)")
        made: Codec = codec() if isinstance(codec, type) else codec
        return made

    def levels_to_try(self, codec: Codec) -> Sequence[int]:
        return KAFKA_LEVELS.get(codec.id, ()) if self.levels is None else self.levels

    # -- identity ------------------------------------------------------------------------------
    def test_id_and_name(self) -> None:
        codec = self.make_codec()
        assert isinstance(codec, Codec), f"{codec!r} lacks id, name, compress or decompress"
        assert type(codec.id) is int and 1 <= codec.id <= 7, f"id {codec.id!r} is not a compression id 1..7"
        assert isinstance(codec.name, str) and codec.name.strip() == codec.name != "", f"bad name {codec.name!r}"
        if codec.id in KAFKA_CODEC_NAMES:
            assert codec.name == KAFKA_CODEC_NAMES[codec.id], f"Kafka's codec {codec.id} is named differently"

    # -- round trips ---------------------------------------------------------------------------
    @pytest.mark.parametrize("kind", list(INPUTS))
    def test_round_trip(self, kind: str) -> None:
        codec = self.make_codec()
        data = INPUTS[kind]
        compressed = codec.compress(data)
        assert isinstance(compressed, bytes | bytearray), f"compress returned {type(compressed).__name__}"
        assert bounded(lambda: codec.decompress(compressed), "decompress") == data
        if kind == "large compressible":
            assert len(compressed) < len(data) // 10, f"{len(data)} zero bytes compressed to {len(compressed)}"

    def test_decompress_takes_a_memoryview_slice(self) -> None:
        codec = self.make_codec()
        data = INPUTS["text"]
        compressed = codec.compress(data)
        buffer = bytearray(b"\xee" * 61) + compressed + bytearray(b"\xee" * 7)
        view = memoryview(buffer)[61 : 61 + len(compressed)]
        assert codec.decompress(view) == data

    def test_levels(self) -> None:
        codec = self.make_codec()
        for level in self.levels_to_try(codec):
            for kind in ("small", "text"):
                compressed = codec.compress(INPUTS[kind], level)
                assert codec.decompress(compressed) == INPUTS[kind], f"level {level}, {kind} input"

    def test_highly_compressible_section(self) -> None:
        codec = self.make_codec()
        data = bytes(8 << 20)
        assert bounded(lambda: codec.decompress(codec.compress(data)), "decompress of 8 MiB zeros") == data

    def test_through_a_record_batch(self) -> None:
        """What clients do: build a compressed batch with it, decode it back."""
        codec = self.make_codec()
        recs: list[records.RecordTuple] = [
            (b"k%d" % i, os.urandom(8) + b"v" * (i % 50), [("h", b"1")], 1_700_000_000_000 + i) for i in range(200)
        ]
        batch = records.build_batch(recs, compression=codec.id, codecs={codec.id: codec})
        decoded = records.decode_batch(batch, codecs={codec.id: codec})
        assert [(r.key, r.value) for r in decoded.records] == [(k, v) for k, v, _h, _t in recs]

    # -- bounded decompression (max_size) ------------------------------------------------------
    # Through ``records.decompress_section``, the call every broker path makes: a codec taking
    # ``max_size`` is bounded by itself, an older one fully inflated and checked afterwards.

    def test_max_size_is_exact(self) -> None:
        codec = self.make_codec()
        for kind in ("small", "text", "incompressible"):
            data = INPUTS[kind]
            compressed = codec.compress(data)
            assert records.decompress_section(codec, compressed, len(data)) == data, f"{kind} input at its own size"
            with pytest.raises(DecompressionLimitExceeded):
                records.decompress_section(codec, compressed, len(data) - 1)

    def test_max_size_stops_a_bomb(self) -> None:
        """256 MiB of zeros, compressed, refused at 1 MiB within ``HANG_S``; for a codec taking
        ``max_size``, with the memory Python sees allocated during the call (tracemalloc: every
        ``bytes`` a C codec returns or grows) staying far below the inflated size. A codec
        without ``max_size`` is inflated whole first, so only the refusal is checked for it."""
        codec = self.make_codec()
        compressed = bytes(_bomb(codec))
        tracemalloc.start()
        try:
            with pytest.raises(DecompressionLimitExceeded):
                bounded(partial(records.decompress_section, codec, compressed, BOMB_LIMIT), "decompress of a bomb")
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        if records.takes_max_size(codec):
            assert peak < BOMB_SIZE // 8, f"decompress with max_size={BOMB_LIMIT} allocated {peak} bytes"

    # -- Kafka's framing -----------------------------------------------------------------------
    def test_writes_kafka_framing(self) -> None:
        codec = self.make_codec()
        data = INPUTS["text"]
        compressed = bytes(codec.compress(data))
        reference = _REFERENCE_DECODERS.get(codec.id)
        if reference is None:
            pytest.skip(f"id {codec.id} is not one of Kafka's codecs: no framing to check")
        try:
            decoded = reference(compressed)
        except Exception as exc:
            pytest.fail(f"{codec.name} output is not Kafka's framing for id {codec.id}: {exc!r}")
        assert decoded == data, f"{codec.name} output is not what other Kafka clients read"

    def test_reads_what_other_clients_write(self) -> None:
        codec = self.make_codec()
        encoders = _CLIENT_ENCODERS.get(codec.id)
        if encoders is None:
            pytest.skip(f"id {codec.id} is not one of Kafka's codecs: no other clients to read")
        for kind in ("empty", "small", "text", "incompressible"):
            data = INPUTS[kind]
            for client, encode in encoders.items():
                encoded = encode(data)
                assert codec.decompress(encoded) == data, f"{client}'s {codec.name} of the {kind} input"

    # -- bad input -----------------------------------------------------------------------------
    def test_corrupt_input_raises(self) -> None:
        codec = self.make_codec()
        compressed = bytes(codec.compress(INPUTS["incompressible"]))
        for what, bad in _corrupt_inputs(compressed).items():
            try:
                out = bounded(partial(codec.decompress, bad), f"decompress of {what} input")
            except Exception:
                continue  # any Exception: the records layer turns it into CorruptMessage
            pytest.fail(f"{codec.name}: decompress of {what} input returned {len(out)} bytes instead of raising")

    def test_corrupt_section_is_corrupt_message(self) -> None:
        """The records layer's contract for consumers: a batch whose section does not decompress
        is ``CorruptMessage`` (Kafka's CORRUPT_MESSAGE), whatever the codec raised."""
        codec = self.make_codec()
        batch = bytearray(
            records.build_batch([(None, b"v" * 100, [], 1)], compression=codec.id, codecs={codec.id: codec})
        )
        batch[records.HEADER_SIZE :] = random.Random(3).randbytes(len(batch) - records.HEADER_SIZE)
        with pytest.raises(CorruptMessage):
            records.decode_batch(batch, codecs={codec.id: codec}, verify_crc=False)


#: The bomb the suite inflates, and the bound it is decompressed with.
BOMB_SIZE = 256 << 20
BOMB_LIMIT = 1 << 20


def _bomb(codec: Codec) -> bytes:
    """BOMB_SIZE zero bytes compressed by ``codec`` (a codec compresses whole sections only)."""
    return codec.compress(bytes(BOMB_SIZE))


# -- reference framings (Kafka's, read and written by the other clients) -------------------------


def _gzip_members(data: bytes) -> bytes:
    return gzip.compress(data[: len(data) // 2], mtime=0) + gzip.compress(data[len(data) // 2 :], mtime=0)


def _snappy_raw(data: bytes) -> bytes:
    import snappy

    return bytes(snappy.compress(data))


def _snappy_xerial(data: bytes, block: int = 32 * 1024) -> bytes:
    """Java's ``SnappyOutputStream``: a 16-byte header then ``[int32 length, block]*``."""
    import snappy

    parts = [b"\x82SNAPPY\x00" + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")]
    for start in range(0, max(len(data), 1), block):
        chunk = bytes(snappy.compress(data[start : start + block]))
        parts += [len(chunk).to_bytes(4, "big"), chunk]
    return b"".join(parts)


def _snappy_reference(data: bytes) -> bytes:
    import snappy

    if data[:8] == b"\x82SNAPPY\x00":
        out, pos = [], 16
        while pos < len(data):
            length = int.from_bytes(data[pos : pos + 4], "big")
            out.append(bytes(snappy.uncompress(data[pos + 4 : pos + 4 + length])))
            pos += 4 + length
        return b"".join(out)
    return bytes(snappy.uncompress(data))


def _lz4(**flags: Any) -> Callable[[bytes], bytes]:
    def encode(data: bytes) -> bytes:
        import lz4.frame

        out: bytes = lz4.frame.compress(data, **flags)
        return out

    return encode


def _lz4_reference(data: bytes) -> bytes:
    import lz4.frame

    assert data[:4] == b"\x04\x22\x4d\x18", "not an LZ4 frame (magic 04 22 4D 18)"
    out: bytes = lz4.frame.decompress(data)
    return out


def _zstd_streaming(data: bytes) -> bytes:
    import zstandard

    cobj = zstandard.ZstdCompressor().compressobj()  # no content size, like Java's ZstdOutputStream
    return bytes(cobj.compress(data) + cobj.flush())


def _zstd_one_shot(data: bytes) -> bytes:
    import zstandard

    return bytes(zstandard.ZstdCompressor(level=3).compress(data))


def _zstd_reference(data: bytes) -> bytes:
    import zstandard

    assert data[:4] == b"\x28\xb5\x2f\xfd", "not a zstd frame (magic 28 B5 2F FD)"
    return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data))


def _halves(encode: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """Two concatenated frames (or members) of one section's halves."""
    return lambda data: encode(data[: len(data) // 2]) + encode(data[len(data) // 2 :])


_REFERENCE_DECODERS: dict[int, Callable[[bytes], bytes]] = {
    1: gzip.decompress,
    2: _snappy_reference,
    3: _lz4_reference,
    4: _zstd_reference,
}

_CLIENT_ENCODERS: dict[int, dict[str, Callable[[bytes], bytes]]] = {
    1: {"a gzip member": lambda d: gzip.compress(d, mtime=0), "concatenated members": _gzip_members},
    2: {
        "raw snappy (librdkafka)": _snappy_raw,
        "xerial (Java)": _snappy_xerial,
        "xerial, 1 KiB blocks": lambda d: _snappy_xerial(d, 1024),
    },
    3: {
        "Java (64 KiB independent blocks)": _lz4(block_size=4, block_linked=False, store_size=False),
        "content size and checksum": _lz4(store_size=True, content_checksum=True),
        "block checksums, linked blocks": _lz4(block_checksum=True, block_linked=True),
        "concatenated frames": _halves(_lz4()),
    },
    4: {
        "streaming (Java, no content size)": _zstd_streaming,
        "one-shot (content size)": _zstd_one_shot,
        "concatenated frames": _halves(_zstd_one_shot),
    },
}


def check_codec(codec: Any, **attributes: Any) -> type[CodecConformance]:
    """A ``CodecConformance`` subclass for ``codec``; assign it to a ``Test*`` name::

    TestMyCodec = check_codec(MyCodec())
    """
    if getattr(codec, "id", None) not in _REFERENCE_DECODERS:
        # a codec of its own id has no Kafka framing and no other clients: those checks are left
        # out of its suite rather than reported as skipped
        attributes = {"test_writes_kafka_framing": None, "test_reads_what_other_clients_write": None, **attributes}
    return suite_for(CodecConformance, "CodecConformanceSuite", {"codec": codec, **attributes})
