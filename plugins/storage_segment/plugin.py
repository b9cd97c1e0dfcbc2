"""Registers the segment engine (``storage = "segment"``, the default) and its config keys."""

from __future__ import annotations

from collections.abc import Sequence

from odradek.config import Config
from odradek.hookspecs import hookimpl
from odradek.interfaces import ConfigKey, StorageFactory

from .cleaner import DEDUPE_BUFFER_KEY, DEFAULT_DEDUPE_BUFFER, DEFAULT_LOAD_FACTOR, LOAD_FACTOR_KEY
from .segment import DEFAULT_RESERVE_BYTES
from .storage import MAX_MAPPED_INDEXES_KEY, MAX_OPEN_FILES_KEY, RESERVE_BYTES_KEY, SegmentLogStorage


def _create(config: Config) -> SegmentLogStorage:
    return SegmentLogStorage(config)


@hookimpl
def odradek_register_storage() -> Sequence[StorageFactory]:
    return [
        StorageFactory(
            name="segment",
            create=_create,
            description="Kafka's segmented log: .log/.index/.timeindex files per partition in log.dirs",
        )
    ]


@hookimpl
def odradek_config_keys() -> Sequence[ConfigKey]:
    return [
        ConfigKey(
            MAX_OPEN_FILES_KEY,
            int,
            0,
            "Segment files kept open at once across all partitions (idle ones are closed); 0: a quarter "
            "of the fd limit, at most 4096.",
            minimum=0,
        ),
        ConfigKey(
            MAX_MAPPED_INDEXES_KEY,
            int,
            0,
            "Index files kept memory-mapped at once across all partitions (each map holds a descriptor); "
            "0: the same as the open-file budget.",
            minimum=0,
        ),
        ConfigKey(
            RESERVE_BYTES_KEY,
            int,
            DEFAULT_RESERVE_BYTES,
            "Disk an active segment reserves ahead of its data, one step of this size at a time "
            "(fallocate with KEEP_SIZE: the file's size does not change), so appends write into "
            "allocated blocks; cut on roll and close. 0: off. Linux only; unused under log.preallocate.",
            minimum=0,
        ),
        ConfigKey(
            DEDUPE_BUFFER_KEY,
            int,
            DEFAULT_DEDUPE_BUFFER,
            "Memory for the compaction cleaner's key map (key -> latest offset); a round whose dirty "
            "part has more keys cleans up to where the map filled and the next round goes on.",
            minimum=1,
        ),
        ConfigKey(
            LOAD_FACTOR_KEY,
            float,
            DEFAULT_LOAD_FACTOR,
            "Share of log.cleaner.dedupe.buffer.size the key map fills before a round stops, in (0, 1].",
            minimum=0,
            maximum=1,
        ),
    ]
