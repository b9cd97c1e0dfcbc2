"""``meta.properties``: which cluster and broker a log dir belongs to (Kafka's ``BrokerMetadata``).

Kafka writes ``version=0``, ``broker.id`` and ``cluster.id`` into every log dir on first start and
checks them on every start after: a log dir of another cluster (a wrong ``zookeeper.connect``),
or a metadata store that lost its data and now holds another cluster id (or none), is refused
before anything acts on it (``InconsistentClusterIdException``). Without this a broker pointed at
an empty store created a new cluster id and, with it, treated every log it had as stray.

Kafka also gives each dir an id and the controller remembers which dir holds which replica, so
a dir that comes back empty (its volume not mounted, a restart after it failed) is offline, not
a fresh home for those replicas. odradek's stand-in: every ``meta.properties`` lists the broker's
log dirs (``odradek.log.dirs``), and a start finding one of them missing or empty is refused
(:func:`check_log_dirs_present`); it used to create the dir again and serve its partitions
empty, from offset 0, without a word. A dir added to ``log.dirs`` is not listed yet, so it is
created as before.

The file is plain Java properties (``key=value`` lines, ``#`` comments), written atomically
(a temporary file renamed over it), so a crash never leaves half a file.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import OdradekError

log = logging.getLogger(__name__)

FILE_NAME = "meta.properties"
VERSION = "0"
#: the broker's log dirs when the file was written (resolved, comma-separated)
LOG_DIRS_KEY = "odradek.log.dirs"
#: files a start may leave in a dir before it reads anything (the storage's lock)
_NOT_DATA = frozenset({".lock"})


class InconsistentClusterId(OdradekError):
    """The cluster id of the metadata store differs from the configured one or from the one
    this broker's log dirs recorded (Kafka's ``InconsistentClusterIdException``), or the store
    has none although the log dirs belong to a cluster (the store was lost or reset)."""


class MissingLogDir(OdradekError):
    """A log dir this broker kept data in is missing or empty (Kafka: an offline dir)."""


class InconsistentBrokerId(OdradekError):
    """A log dir's ``meta.properties`` names another ``broker.id`` (Kafka's
    ``InconsistentBrokerIdException``): the dir is another broker's."""


def read(log_dir: Path) -> dict[str, str] | None:
    """The properties of ``log_dir``'s ``meta.properties``, None when there is none."""
    try:
        text = (log_dir / FILE_NAME).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def write(log_dir: Path, broker_id: int, cluster_id: str, members: str = "") -> None:
    """Write ``meta.properties`` in Kafka's format into ``log_dir`` (atomically, synced), with
    the broker's log dirs (``members``, as :func:`_members` joins them) when given."""
    body = f"#\n#odradek\nversion={VERSION}\nbroker.id={broker_id}\ncluster.id={cluster_id}\n"
    if members:
        body += f"{LOG_DIRS_KEY}={members}\n"
    tmp = log_dir / (FILE_NAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, log_dir / FILE_NAME)


def recorded_cluster_id(log_dirs: Sequence[Path], broker_id: int) -> str | None:
    """The cluster id the log dirs recorded (None when none has a ``meta.properties``).

    As Kafka checks at start-up: every dir that has the file must name this ``broker_id``
    (``InconsistentBrokerId`` otherwise) and all of them the same cluster id
    (``InconsistentClusterId`` otherwise)."""
    found: dict[str, list[Path]] = {}
    for log_dir in log_dirs:
        props = read(log_dir)
        if props is None:
            continue
        recorded_broker = props.get("broker.id", props.get("node.id"))
        if recorded_broker is not None and recorded_broker != str(broker_id):
            raise InconsistentBrokerId(
                f"configured broker.id {broker_id} doesn't match stored broker.id {recorded_broker} "
                f"in {log_dir / FILE_NAME}: is the log dir another broker's?"
            )
        cluster_id = props.get("cluster.id")
        if cluster_id:
            found.setdefault(cluster_id, []).append(log_dir)
    if len(found) > 1:
        raise InconsistentClusterId(
            "the log dirs belong to different clusters: "
            + "; ".join(f"{cid} in {', '.join(str(d) for d in dirs)}" for cid, dirs in found.items())
        )
    return next(iter(found), None)


def record(log_dirs: Sequence[Path], broker_id: int, cluster_id: str) -> None:
    """Write ``meta.properties`` into every existing log dir that lacks it, names another
    cluster or lists other log dirs (only after the checks above passed). A dir the storage did
    not create (an in-memory storage) is left alone: its logs do not outlive the process."""
    members = _members(d for d in log_dirs if d.is_dir())
    for log_dir in log_dirs:
        if not log_dir.is_dir():
            continue
        props = read(log_dir)
        if props is None or (props.get("cluster.id"), props.get("broker.id"), props.get(LOG_DIRS_KEY)) != (
            cluster_id,
            str(broker_id),
            members,
        ):
            try:
                write(log_dir, broker_id, cluster_id, members)
            except OSError as exc:
                # a full or failing dir must not stop the broker from serving what it has (its
                # logs report their own errors); the file is written at a later start
                with contextlib.suppress(OSError):
                    (log_dir / (FILE_NAME + ".tmp")).unlink(missing_ok=True)
                log.error("%s: cannot write %s (%s); it is written at a later start", log_dir, FILE_NAME, exc)


def check_log_dirs_present(log_dirs: Sequence[Path]) -> None:
    """Before the storage opens (and would create what is missing): refuse a log dir of
    ``log_dirs`` that another one's ``meta.properties`` lists as this broker's but that is gone
    or empty, as an unmounted volume's mount point is (``MissingLogDir``). A dir that still holds
    anything passes, even without ``meta.properties`` (one that could not be written)."""
    configured = {str(d.resolve()) for d in log_dirs}
    for log_dir in log_dirs:
        try:
            props = read(log_dir)
        except OSError:  # not readable: the storage reports it when it opens the dir
            continue
        for member in (props or {}).get(LOG_DIRS_KEY, "").split(","):
            if member in configured and _empty(Path(member)):
                raise MissingLogDir(
                    f"log dir {member} is missing or empty, but this broker kept partitions there "
                    f"({log_dir / FILE_NAME} lists it): is its volume not mounted? Mount it and start again. "
                    "To start without its data instead, remove it from log.dirs (its partitions are then "
                    "created empty in the other dirs: replicated ones catch up from their leaders, one without "
                    "another replica loses its records) and add it back later"
                )


def _members(log_dirs: Iterable[Path]) -> str:
    return ",".join(sorted(str(d.resolve()) for d in log_dirs))


def _empty(log_dir: Path) -> bool:
    try:
        with os.scandir(log_dir) as entries:
            return all(e.name in _NOT_DATA for e in entries)
    except FileNotFoundError:
        return True
    except OSError:  # there but unreadable: the storage reports it when it opens the dir
        return False
