"""The compress plugin: registers Kafka's codecs through the compression hook.

A third-party codec plugin looks the same: a module (named by an ``odradek`` entry point) whose
``odradek_register_codecs`` returns objects with ``id``, ``name``, ``compress`` and
``decompress`` (:class:`odradek.interfaces.Codec`), under a new id (5, 6 or 7: the codec id is 3
bits of a batch's attributes and Kafka uses 1-4) and a new name, which ``compression.type``
selects; or under one of these ids to replace a built-in codec (see docs/plugins.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.hookspecs import hookimpl
from odradek.interfaces import Codec

from .gzip_codec import GzipCodec
from .lz4_codec import Lz4Codec
from .snappy_codec import SnappyCodec
from .zstd_codec import ZstdCodec

# One instance each, shared by every caller: codecs are stateless but for zstd's per-thread
# contexts, which are worth keeping across batches.
_CODECS: tuple[Codec, ...] = (GzipCodec(), SnappyCodec(), Lz4Codec(), ZstdCodec())


@hookimpl
def odradek_register_codecs() -> Sequence[Codec]:
    """gzip (1), snappy (2), lz4 (3), zstd (4)."""
    return list(_CODECS)
