"""The fetcher's side of an incremental fetch session (KIP-227): Kafka's ``FetchSessionHandler``.

A fetcher that asks one broker for the same partitions over and over (a follower copying its
leader: every partition it follows, in every Fetch) opens a session with a full fetch at epoch 0.
From then on each request names only the partitions whose fetch position changed since the
session last heard of them (its fetch offset, log start, leader epoch or byte limit), plus the
ones to forget, and the answer carries only the partitions with something new. An idle partition
then costs neither side anything per round trip.

The handler is sans-IO: :meth:`FetchSessionHandler.build` turns the partitions the fetcher wants
now into what the next request states, and :meth:`FetchSessionHandler.handle_response` /
:meth:`FetchSessionHandler.handle_error` move the session on. The broker's side is
:mod:`odradek.broker.fetch_session`.

Recovery follows Kafka. A session error in the answer (FETCH_SESSION_ID_NOT_FOUND: the broker
evicted it or restarted; INVALID_FETCH_SESSION_EPOCH: a request was lost), an answer naming a
partition outside the session, or a failed request (a broken connection: the broker may or may
not have taken the request in) all end in a full fetch: with the old session id and epoch 0 where
the broker may still hold the session, which closes it there and opens a new one, with no id when
the broker said it has none.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ErrorCode
from ..interfaces import TopicPartition

log = logging.getLogger(__name__)

#: The epochs with a meaning of their own (Kafka's FetchMetadata): 0 opens a session.
INITIAL_EPOCH = 0
#: Session id 0: no session.
INVALID_SESSION_ID = 0


def fetch_topics(
    partitions: Mapping[TopicPartition, PartitionData], topic_ids: Mapping[str, uuid.UUID] | None = None
) -> list[dict[str, Any]]:
    """A Fetch request's ``topics`` for ``partitions``, in their order, a topic named again
    each time the order comes back to it (as Kafka's FetchRequest.Builder does): grouped by first
    appearance, a topic with an idle partition up front would keep its busy ones ahead of
    everything else under the response's byte limit. ``topic_ids`` (v13+) names each topic by
    its id as well."""
    runs: list[tuple[str, list[dict[str, int]]]] = []
    for tp, data in partitions.items():
        if not runs or runs[-1][0] != tp.topic:
            runs.append((tp.topic, []))
        runs[-1][1].append(
            {
                "partition": tp.partition,
                "current_leader_epoch": data.current_leader_epoch,
                "fetch_offset": data.fetch_offset,
                "log_start_offset": data.log_start_offset,
                "partition_max_bytes": data.max_bytes,
                "last_fetched_epoch": data.last_fetched_epoch,
            }
        )
    return [{**_named(topic, topic_ids), "partitions": entries} for topic, entries in runs]


def forgotten_topics(
    partitions: Iterable[TopicPartition], topic_ids: Mapping[str, uuid.UUID] | None = None
) -> list[dict[str, Any]]:
    """A Fetch request's ``forgotten_topics_data`` for ``partitions`` (by id too with ``topic_ids``)."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [{**_named(topic, topic_ids), "partitions": ps} for topic, ps in by_topic.items()]


def _named(topic: str, topic_ids: Mapping[str, uuid.UUID] | None) -> dict[str, Any]:
    """A request topic's name, and its id when the version names topics by id (v13+)."""
    if topic_ids is None:
        return {"topic": topic}
    return {"topic": topic, "topic_id": topic_ids[topic]}


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: it wraps from 2^31-1 to 1 (0 means a new session)."""
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass(frozen=True, slots=True)
class PartitionData:
    """What a Fetch request states for one partition; a session resends it when it changes."""

    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    #: Fetch v12+: the epoch of the fetcher's last record (-1: none); a follower's leader
    #: answers a diverging epoch when its own log disagrees (KIP-320)
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class FetchRequestData:
    """What the next Fetch request carries, and what it fetches."""

    session_id: int
    epoch: int
    #: the partitions the request names, in the fetcher's order (a full request: all of them)
    to_send: dict[TopicPartition, PartitionData]
    #: the partitions the session drops (``forgotten_topics_data``)
    forgotten: list[TopicPartition]
    #: every partition the request fetches, with the position the broker reads it from: the
    #: ones sent, and the session's unchanged ones the broker still holds
    fetched: dict[TopicPartition, PartitionData]

    @property
    def incremental(self) -> bool:
        return self.epoch != INITIAL_EPOCH


@dataclass(slots=True)
class FetchSessionHandler:
    """One fetcher's session with one broker (see the module doc)."""

    #: who the session is with, for logs
    node: str
    session_id: int = INVALID_SESSION_ID
    epoch: int = INITIAL_EPOCH
    #: the partitions the broker holds for the session, as it last heard of them
    session: dict[TopicPartition, PartitionData] = field(default_factory=dict)
    #: the request in flight, until its answer (or failure) is handled
    _pending: FetchRequestData | None = None

    def build(self, wanted: Mapping[TopicPartition, PartitionData]) -> FetchRequestData:
        """The request for fetching exactly ``wanted`` now (in the fetcher's order)."""
        if self.epoch == INITIAL_EPOCH:
            request = FetchRequestData(self.session_id, INITIAL_EPOCH, dict(wanted), [], dict(wanted))
        else:
            to_send = {tp: data for tp, data in wanted.items() if self.session.get(tp) != data}
            forgotten = [tp for tp in self.session if tp not in wanted]
            request = FetchRequestData(self.session_id, self.epoch, to_send, forgotten, dict(wanted))
        self._pending = request
        return request

    def handle_response(self, error: ErrorCode, session_id: int, partitions: Iterable[TopicPartition]) -> bool:
        """Take the answer to the last built request; False when it cannot be used (a session
        error, or partitions the request did not fetch): the next request is a full one."""
        request, self._pending = self._pending, None
        if request is None:
            raise RuntimeError("a fetch response without a request built for it")
        if error is not ErrorCode.NONE:
            if error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                log.info("fetch session %d with %s: not found; starting a new one", self.session_id, self.node)
                self._restart(INVALID_SESSION_ID)
            else:
                log.info("fetch session %d with %s: %s; starting a new one", self.session_id, self.node, error.name)
                self._restart(self.session_id)
            return False
        stray = [tp for tp in partitions if tp not in request.fetched]
        if stray:
            log.warning(
                "fetch session %d with %s: the answer names %s, which the request did not fetch; starting a new one",
                session_id,
                self.node,
                ", ".join(map(str, stray[:5])),
            )
            self._restart(session_id)
            return False
        if session_id == INVALID_SESSION_ID:  # no session: the broker has none, or no room for one
            self._restart(INVALID_SESSION_ID)
            return True
        if not request.incremental:
            log.debug(
                "fetch session %d with %s: opened with %d partitions", session_id, self.node, len(request.fetched)
            )
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        self.session = request.fetched
        return True

    def handle_error(self) -> None:
        """The last request failed without an answer (a broken connection, a timeout): the
        broker may have taken it in and moved the session on, so the next request is a full one
        that closes the session there (Kafka's ``nextCloseExisting``)."""
        self._pending = None
        self._restart(self.session_id)

    def _restart(self, session_id: int) -> None:
        self.session_id, self.epoch, self.session = session_id, INITIAL_EPOCH, {}


__all__ = [
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "FetchRequestData",
    "FetchSessionHandler",
    "PartitionData",
    "fetch_topics",
    "forgotten_topics",
    "next_epoch",
]
