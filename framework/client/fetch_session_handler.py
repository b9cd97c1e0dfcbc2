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

Fetch v13+ names topics by id (KIP-516). Each partition's :class:`PartitionData` carries the
topic id the fetcher knows (None: unknown), and a request can name topics by id only when every
partition it fetches has one -- else the fetcher stays at v12, by name (Java's rule,
:attr:`FetchRequestData.can_use_topic_ids`). A partition whose topic id changed (its topic was
deleted and created again under the same name) is *replaced* in the session: the next request
forgets it under the old id and adds it under the new one. A session that switches between names
and ids is the broker's to refuse (FETCH_SESSION_TOPIC_ID_ERROR), which ends it like any
session error.

Recovery follows Kafka. A session error in the answer (FETCH_SESSION_ID_NOT_FOUND: the broker
evicted it or restarted; INVALID_FETCH_SESSION_EPOCH: a request was lost), an answer naming a
partition outside the session (or a topic id the request did not name), or a failed request (a
broken connection: the broker may or may not have taken the request in) all end in a full
fetch: with the old session id and epoch 0 where the broker may still hold the session, which
closes it there and opens a new one, with no id when the broker said it has none.
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
    if topic_ids is None:
        return forgotten_by_id({tp: None for tp in partitions}, by_id=False)
    return forgotten_by_id({tp: topic_ids[tp.topic] for tp in partitions}, by_id=True)


def forgotten_by_id(partitions: Mapping[TopicPartition, uuid.UUID | None], *, by_id: bool) -> list[dict[str, Any]]:
    """``forgotten_topics_data`` for ``partitions``, each under the topic id given with it (v13+,
    ``by_id``): a replaced partition is forgotten under its old id while its topic's name is
    fetched under the new one, so the entries group by (name, id)."""
    by_topic: dict[tuple[str, uuid.UUID | None], list[int]] = {}
    for tp, topic_id in partitions.items():
        by_topic.setdefault((tp.topic, topic_id if by_id else None), []).append(tp.partition)
    return [
        {"topic": topic, "topic_id": topic_id, "partitions": ps} if by_id else {"topic": topic, "partitions": ps}
        for (topic, topic_id), ps in by_topic.items()
    ]


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
    #: the topic's id as the fetcher knows it (KIP-516; None: unknown, the request names it)
    topic_id: uuid.UUID | None = None


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
    #: the session's partitions whose topic id changed, with the id the session knew (Java's
    #: ``toReplace``): v13+ forgets them under it, and they are in ``to_send`` under the new one
    replaced: dict[TopicPartition, uuid.UUID] = field(default_factory=dict)
    #: the ids the session knew the ``forgotten`` partitions by
    forgotten_ids: dict[TopicPartition, uuid.UUID | None] = field(default_factory=dict)
    #: whether the request may name topics by id (Fetch v13+): every partition it fetches or
    #: forgets has a known topic id (Java's ``canUseTopicIds``), else it must stay at v12
    can_use_topic_ids: bool = False

    @property
    def incremental(self) -> bool:
        return self.epoch != INITIAL_EPOCH

    @property
    def topic_names(self) -> dict[uuid.UUID, str]:
        """Topic id -> name for the topics the request fetches (resolving a v13+ answer)."""
        return {data.topic_id: tp.topic for tp, data in self.fetched.items() if data.topic_id is not None}

    def topic_ids(self) -> dict[str, uuid.UUID]:
        """Topic name -> id for the partitions the request sends (``fetch_topics`` at v13+)."""
        return {tp.topic: data.topic_id for tp, data in self.to_send.items() if data.topic_id is not None}

    def forgotten_topics(self, by_id: bool) -> list[dict[str, Any]]:
        """The request's ``forgotten_topics_data``: by id (v13+) the forgotten partitions and
        the replaced ones, each under the id the session knew; by name only the forgotten
        ones (a replaced partition is simply sent again)."""
        if not by_id:
            return forgotten_by_id(dict.fromkeys(self.forgotten), by_id=False)
        return forgotten_by_id({**self.forgotten_ids, **self.replaced}, by_id=True)


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
        with_ids = all(data.topic_id is not None for data in wanted.values())
        if self.epoch == INITIAL_EPOCH:
            request = FetchRequestData(
                self.session_id, INITIAL_EPOCH, dict(wanted), [], dict(wanted), can_use_topic_ids=with_ids
            )
        else:
            to_send: dict[TopicPartition, PartitionData] = {}
            replaced: dict[TopicPartition, uuid.UUID] = {}
            for tp, data in wanted.items():
                known = self.session.get(tp)
                if known == data:
                    continue
                if known is not None and known.topic_id not in (None, data.topic_id) and data.topic_id is not None:
                    replaced[tp] = known.topic_id
                to_send[tp] = data
            forgotten_ids = {tp: data.topic_id for tp, data in self.session.items() if tp not in wanted}
            with_ids = with_ids and None not in forgotten_ids.values()
            request = FetchRequestData(
                self.session_id,
                self.epoch,
                to_send,
                list(forgotten_ids),
                dict(wanted),
                replaced,
                forgotten_ids,
                with_ids,
            )
            if replaced:
                log.info(
                    "fetch session %d with %s: %s replaced (the topic id changed)",
                    self.session_id,
                    self.node,
                    ", ".join(map(str, list(replaced)[:5])),
                )
        self._pending = request
        return request

    def handle_response(
        self,
        error: ErrorCode,
        session_id: int,
        partitions: Iterable[TopicPartition],
        unknown_topic_ids: Iterable[uuid.UUID] = (),
    ) -> bool:
        """Take the answer to the last built request; False when it cannot be used (a session
        error, partitions the request did not fetch, or ``unknown_topic_ids``: v13+ topics the
        request did not name): the next request is a full one."""
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
        stray: list[Any] = [tp for tp in partitions if tp not in request.fetched]
        stray += [f"topic id {topic_id}" for topic_id in unknown_topic_ids]
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
    "forgotten_by_id",
    "forgotten_topics",
    "next_epoch",
]
