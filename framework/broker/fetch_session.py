"""Incremental fetch sessions (KIP-227): Kafka's ``FetchSessionCache`` and fetch contexts.

A consumer (or follower) that fetches the same partitions over and over may open a session with
a full fetch (session id 0, epoch 0): the broker remembers the partitions and what it last told
the client about each. Each later request carries the session id and the next epoch, names only
the partitions whose fetch position changed (and the ones to forget), and gets back only the
partitions with something new: records, a moved high watermark, last stable or log start offset,
or an error. A consumer of many partitions then sends and receives a few bytes per idle
partition instead of about thirty.

What a request gets, as in Kafka's ``FetchManager.newContext``:

- **full** (epoch 0 or -1): a session it names is closed first. Epoch -1 (what librdkafka always
  sends) fetches without a session (response session id 0); epoch 0 fetches and opens a session
  when the cache has, or can make, room (otherwise the answer's session id 0 says "no session":
  the client keeps sending full fetches);
- **incremental** (epoch > 0): an unknown session id is FETCH_SESSION_ID_NOT_FOUND, a wrong epoch
  INVALID_FETCH_SESSION_EPOCH (top-level errors, no partitions); otherwise the session takes the
  request's partitions (added, or their positions updated), drops the forgotten ones, and the
  fetch covers every partition of the session. A session left empty is closed and the request
  answered without one. Its epoch advances when the request is taken in; an answer whose session
  moved on meanwhile (two requests in flight on one session) is INVALID_FETCH_SESSION_EPOCH.
- **topic ids**: a session opened by a Fetch v13+ keys its partitions by topic id (the handler
  passes them in that form); asked by a request of the other kind it is
  FETCH_SESSION_TOPIC_ID_ERROR, and the other way round.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (0: none). When it is full a
new session may evict, in this order, a session unused for ``EVICTION_MS``, or else the least
valuable evictable session: followers' sessions outrank consumers', then bigger sessions outrank
smaller ones; a session younger than ``EVICTION_MS`` is evictable only by a follower's, and only
if it is a consumer's. Nothing is evicted for a session worth less than every candidate.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import ErrorCode
from ..interfaces import TopicPartition
from .api import FetchPartition, FetchPartitionResult

#: The fetch epochs with a meaning of their own (Kafka's FetchMetadata).
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: Session id 0: no session.
INVALID_SESSION_ID = 0
#: How long a session must go unused before any new session may evict it, and how old a
#: session must be before a bigger consumer session may evict it (Kafka's
#: MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS).
EVICTION_MS = 120_000


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: it wraps from 2^31-1 to 1 (0 means a new session)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """What a session remembers of one partition: the fetcher's last position and what it was
    last told (-1 high watermark: nothing yet, or an error, so the next answer includes it)."""

    request: FetchPartition
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def would_respond(self, result: FetchPartitionResult) -> bool:
        """Whether an incremental answer includes this partition, remembering nothing (what a
        throttled answer's size is computed from: Kafka's ``getResponseSize``)."""
        return (
            result.error != ErrorCode.NONE
            or (result.records is not None and result.records.size > 0)
            or result.preferred_read_replica >= 0
            or result.diverging_epoch is not None
            or self.high_watermark != result.high_watermark
            # a transaction's end moves the LSO without records a read_committed consumer sees
            or self.last_stable_offset != result.last_stable_offset
            or self.log_start_offset != result.log_start_offset
        )

    def must_respond(self, result: FetchPartitionResult) -> bool:
        """Whether an incremental answer includes this partition; remembers what it says."""
        changed = self.would_respond(result)
        if result.error != ErrorCode.NONE or result.diverging_epoch is not None:
            self.high_watermark = -1  # re-sent once the error (or divergence) goes away
        else:
            self.high_watermark = result.high_watermark
            self.last_stable_offset = result.last_stable_offset
            self.log_start_offset = result.log_start_offset
        return changed


@dataclass(eq=False, slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's
    created_ms: float
    last_used_ms: float
    epoch: int
    partitions: dict[TopicPartition, CachedPartition] = field(default_factory=dict)
    #: opened by a Fetch v13+ (partitions keyed by topic id): only such requests may go on with it
    uses_topic_ids: bool = False


@dataclass(slots=True)
class FetchContext:
    """What one Fetch request fetches, and how its answer is shaped (see :meth:`respond`)."""

    #: the partitions to read, in order (an incremental request: the whole session's)
    partitions: list[FetchPartition]
    #: a session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH): answer it alone
    error: ErrorCode = ErrorCode.NONE
    #: an incremental request's session and the epoch it left the session at
    session: FetchSession | None = None
    expected_epoch: int = 0
    #: a full request that may open a session (epoch 0)
    create: bool = False
    follower: bool = False
    uses_topic_ids: bool = False


class FetchSessionCache:
    """The broker's fetch sessions (one cache per broker, shared by every listener)."""

    def __init__(self, max_sessions: int, *, clock_ms: Callable[[], float] | None = None) -> None:
        self.max_sessions = max(0, max_sessions)
        self._clock_ms = clock_ms or (lambda: time.monotonic() * 1000)
        self.sessions: dict[int, FetchSession] = {}
        #: sessions evicted to make room (IncrementalFetchSessionEvictionsPerSec)
        self.evictions = 0

    @property
    def cached_partitions(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    # -- a request's context ---------------------------------------------------------------------
    def new_context(
        self,
        session_id: int,
        epoch: int,
        requested: Sequence[FetchPartition],
        forgotten: Iterable[TopicPartition],
        *,
        follower: bool,
        uses_topic_ids: bool = False,
    ) -> FetchContext:
        """``uses_topic_ids``: the request is a Fetch v13+, whose partitions are keyed by topic
        id; a session opened by one kind of request is FETCH_SESSION_TOPIC_ID_ERROR to the other
        (Kafka's ``FetchManager.newContext``: a client that changes version mid-session starts
        a new one)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.sessions.pop(session_id, None)  # a full request closes the session it names
            return FetchContext(
                list(requested),
                create=epoch == INITIAL_EPOCH and self.max_sessions > 0,
                follower=follower,
                uses_topic_ids=uses_topic_ids,
            )
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext([], ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext([], ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext([], ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        cached = session.partitions
        for p in requested:
            entry = cached.get(p.tp)
            if entry is None:
                cached[p.tp] = CachedPartition(p)
            else:
                entry.request = p
        for tp in forgotten:
            cached.pop(tp, None)
        if not cached:
            del self.sessions[session.id]
            return FetchContext(list(requested), follower=follower)
        session.last_used_ms = self._clock_ms()
        session.epoch = next_epoch(session.epoch)
        return FetchContext(
            [c.request for c in cached.values()], session=session, expected_epoch=session.epoch, follower=follower
        )

    def respond(
        self, context: FetchContext, results: Mapping[TopicPartition, FetchPartitionResult]
    ) -> tuple[list[TopicPartition], int, ErrorCode]:
        """The partitions the answer carries (in order), its session id and top-level error.

        A full request answers every partition; an incremental one only those that changed, and
        those move to the end of the session's order (so that, under a byte limit, the others
        get their turn first next time, as Kafka rotates them)."""
        session = context.session
        if session is None:
            order = [p.tp for p in context.partitions]
            session_id = INVALID_SESSION_ID
            if context.create:
                session_id = self._maybe_create(context, results)
            return order, session_id, ErrorCode.NONE
        if session.epoch != context.expected_epoch or self.sessions.get(session.id) is not session:
            # another request moved the session on (or closed it) while this one was served
            return [], session.id, ErrorCode.INVALID_FETCH_SESSION_EPOCH
        selected = []
        cached = session.partitions
        for p in context.partitions:
            entry = cached.get(p.tp)
            result = results.get(p.tp)
            if entry is None or result is None:
                continue
            if entry.must_respond(result):
                selected.append(p.tp)
                del cached[p.tp]
                cached[p.tp] = entry
        return selected, session.id, ErrorCode.NONE

    def response_partitions(
        self, context: FetchContext, results: Mapping[TopicPartition, FetchPartitionResult]
    ) -> list[TopicPartition]:
        """The partitions :meth:`respond` would answer, in order, changing nothing: what a
        consumer's Fetch is charged for against its byte rate before the broker decides whether
        to send them (Kafka's ``FetchContext.getResponseSize``)."""
        session = context.session
        if session is None:
            return [p.tp for p in context.partitions]
        if session.epoch != context.expected_epoch or self.sessions.get(session.id) is not session:
            return []
        cached = session.partitions
        return [
            p.tp
            for p in context.partitions
            if (entry := cached.get(p.tp)) is not None
            and (result := results.get(p.tp)) is not None
            and entry.would_respond(result)
        ]

    # -- the cache -------------------------------------------------------------------------------
    def _maybe_create(self, context: FetchContext, results: Mapping[TopicPartition, FetchPartitionResult]) -> int:
        now = self._clock_ms()
        size = len(context.partitions)
        if len(self.sessions) >= self.max_sessions and not self._evict_for(context.follower, size, now):
            return INVALID_SESSION_ID
        partitions: dict[TopicPartition, CachedPartition] = {}
        for p in context.partitions:
            entry = CachedPartition(p)
            result = results.get(p.tp)
            if result is not None:
                entry.must_respond(result)  # what this full answer tells the client
            partitions[p.tp] = entry
        session = FetchSession(
            self._new_id(), context.follower, now, now, next_epoch(INITIAL_EPOCH), partitions, context.uses_topic_ids
        )
        self.sessions[session.id] = session
        return session.id

    def _evict_for(self, privileged: bool, size: int, now: float) -> bool:
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stalest.last_used_ms > EVICTION_MS:
            self._evict(stalest)
            return True
        candidates = [
            s for s in self.sessions.values() if now - s.created_ms > EVICTION_MS or (privileged and not s.privileged)
        ]
        if not candidates:
            return False
        weakest = min(candidates, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size) <= (weakest.privileged, len(weakest.partitions)):
            return False
        self._evict(weakest)
        return True

    def _evict(self, session: FetchSession) -> None:
        del self.sessions[session.id]
        self.evictions += 1

    def _new_id(self) -> int:
        while True:
            candidate = random.randint(1, 2**31 - 1)
            if candidate not in self.sessions:
                return candidate


__all__ = [
    "EVICTION_MS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "next_epoch",
]
