"""Small durable files in Kafka's text formats, always replaced atomically.

Kafka's checkpoint files (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``cleaner-offset-checkpoint``, ``replication-offset-checkpoint`` per log dir; a partition's
``leader-epoch-checkpoint``) share one layout: a version line (``0``), an entry-count line, then
one entry per line with space-separated fields. Keeping that layout lets an operator read them
with the same eyes (and tools) as Kafka's. Every write goes to a temp file that is fsynced and
renamed over the old one, then the directory is fsynced, so a crash leaves the old or the new
file, never a mix.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from odradek.interfaces import EpochEntry, TopicPartition

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 0
TEMP_SUFFIX = ".tmp"


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_paths(paths: Sequence[Path]) -> None:
    """fsync files by path (a fresh descriptor flushes the inode's dirty pages, mmap'd or not)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # deleted meanwhile: nothing left to make durable
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data``: write a temp file, fsync, rename, fsync the directory.

    ``sync=False`` skips both fsyncs: readers still see the old or the new file whole, but
    after a power loss either may be there (or neither's data); for files whose caller makes
    them durable later (fsync of the path and its directory) or can rebuild them.

    Raises ``OSError`` naming the file (a bare ``[Errno 28]`` from ``write`` does not), with
    the temp file removed: a full disk must not keep a half-written one.
    """
    tmp = path.with_name(path.name + TEMP_SUFFIX)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    if sync:
        fsync_dir(path.parent)


def _render(lines: Sequence[str]) -> bytes:
    return ("\n".join([str(CHECKPOINT_VERSION), str(len(lines)), *lines]) + "\n").encode()


def _parse(text: str, fields: int, path: Path) -> list[list[str]]:
    """Entries of a checkpoint file; raises ValueError naming the file when it is malformed."""
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise ValueError(f"{path}: unknown checkpoint version {lines[0] if lines else '<empty>'!r}")
    count = int(lines[1])
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise ValueError(f"{path}: expected {count} entries of {fields} fields, found {entries!r}")
    return entries


def write_offsets(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    """An offset checkpoint: ``<topic> <partition> <offset>`` per line."""
    lines = [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
    atomic_write(path, _render(lines))


def read_offsets(path: Path) -> dict[TopicPartition, int]:
    """An offset checkpoint's entries; empty when missing. A malformed file is logged and
    treated as missing: the callers then fall back to the safe choice (recover everything)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        return {TopicPartition(t, int(p)): int(o) for t, p, o in _parse(text, 3, path)}
    except ValueError as exc:
        log.warning("ignoring malformed checkpoint file: %s", exc)
        return {}


def write_epochs(path: Path, entries: Iterable[EpochEntry], *, sync: bool = True) -> None:
    """A leader-epoch checkpoint: ``<epoch> <start offset>`` per line, oldest first."""
    atomic_write(path, _render([f"{e.epoch} {e.start_offset}" for e in entries]), sync=sync)


def read_epochs(path: Path) -> list[EpochEntry]:
    """A leader-epoch checkpoint's entries; empty when missing or malformed (logged)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    try:
        return [EpochEntry(int(e), int(o)) for e, o in _parse(text, 2, path)]
    except ValueError as exc:
        log.warning("ignoring malformed leader-epoch checkpoint: %s", exc)
        return []
