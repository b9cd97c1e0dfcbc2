"""``meta.properties``: which cluster and broker a log dir belongs to (Kafka's ``BrokerMetadata``).

Kafka writes ``version=0``, ``broker.id`` and ``cluster.id`` into every log dir on first start and
checks them on every start after: a log dir of another cluster (a wrong ``zookeeper.connect``),
or a metadata store that lost its data and now holds another cluster id (or none), is refused
before anything acts on it (``InconsistentClusterIdException``). Without this a broker pointed at
an empty store created a new cluster id and, with it, treated every log it had as stray.

The file is plain Java properties (``key=value`` lines, ``#`` comments), written atomically
(a temporary file renamed over it), so a crash never leaves half a file.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import OdradekError

log = logging.getLogger(__name__)

FILE_NAME = "meta.properties"
VERSION = "0"


class InconsistentClusterId(OdradekError):
    """The cluster id of the metadata store differs from the configured one or from the one
    this broker's log dirs recorded (Kafka's ``InconsistentClusterIdException``), or the store
    has none although the log dirs belong to a cluster (the store was lost or reset)."""


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


def write(log_dir: Path, broker_id: int, cluster_id: str) -> None:
    """Write ``meta.properties`` in Kafka's format into ``log_dir`` (atomically, synced)."""
    body = f"#\n#odradek\nversion={VERSION}\nbroker.id={broker_id}\ncluster.id={cluster_id}\n"
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
    """Write ``meta.properties`` into every existing log dir that lacks it or names another
    cluster (only after the checks above passed). A dir the storage did not create (an
    in-memory storage) is left alone: its logs do not outlive the process."""
    for log_dir in log_dirs:
        if not log_dir.is_dir():
            continue
        props = read(log_dir)
        if props is None or props.get("cluster.id") != cluster_id or props.get("broker.id") != str(broker_id):
            try:
                write(log_dir, broker_id, cluster_id)
            except OSError as exc:
                # a full or failing dir must not stop the broker from serving what it has (its
                # logs report their own errors); the file is written at a later start
                with contextlib.suppress(OSError):
                    (log_dir / (FILE_NAME + ".tmp")).unlink(missing_ok=True)
                log.error("%s: cannot write %s (%s); it is written at a later start", log_dir, FILE_NAME, exc)
