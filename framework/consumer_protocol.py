"""The consumer protocol: what consumers put inside JoinGroup and SyncGroup (protocol type "consumer").

The group coordinator treats member metadata and assignments as opaque bytes; only members read
them. Their layout is Kafka's ``ConsumerProtocolSubscription`` (v0 topics + user data, v1 owned
partitions, v2 generation id, v3 rack id) and ``ConsumerProtocolAssignment`` (partitions + user
data, one layout for v0-v3), each prefixed with an ``int16`` version. Encoding follows the Java
client byte for byte (topics sorted, owned partitions grouped by topic in sorted order) so odradek
members can share a group with librdkafka, kafka-python, aiokafka and Java members; decoding is
lenient the way Java's is: a newer version is read as the newest known one (fields appended later
are ignored), and fields missing at the end of an older client's blob take their defaults.

Also here: the user data of the sticky assignors (``StickyAssignorUserData`` v0/v1 of the eager
"sticky" assignor, ``CooperativeStickyAssignorUserData`` v0 holding the generation).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .errors import CorruptMessage
from .interfaces import TopicPartition
from .kafka_types import Reader, Writer

PROTOCOL_TYPE = "consumer"
#: newest ConsumerProtocolSubscription / ConsumerProtocolAssignment versions (what Java writes)
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3
#: generation id meaning "unknown" (DEFAULT_GENERATION in the Java client)
DEFAULT_GENERATION = -1


@dataclass(frozen=True, slots=True)
class Subscription:
    """A member's JoinGroup metadata for one assignor: the topics it wants and what it owns."""

    topics: Sequence[str]
    user_data: bytes | None = None
    owned_partitions: Sequence[TopicPartition] = ()
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None
    version: int = SUBSCRIPTION_VERSION


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the leader gives one member in SyncGroup."""

    partitions: Sequence[TopicPartition] = field(default_factory=tuple)
    user_data: bytes | None = None
    version: int = ASSIGNMENT_VERSION


def group_by_topic(partitions: Iterable[TopicPartition], *, sort: bool) -> list[tuple[str, list[int]]]:
    """(topic, partitions) pairs: sorted by topic and partition when ``sort``, else first-seen order."""
    by_topic: dict[str, list[int]] = {}
    items = sorted(partitions, key=_tp_key) if sort else partitions
    for tp in items:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return list(by_topic.items())


def java_string_key(s: str) -> bytes:
    """Sort key giving Java's ``String.compareTo`` order (UTF-16 code units, not code points)."""
    return s.encode("utf-16-be", "surrogatepass")


def _tp_key(tp: TopicPartition) -> tuple[bytes, int]:
    return (java_string_key(tp.topic), tp.partition)


def _write_topic_partitions(w: Writer, groups: Sequence[tuple[str, Sequence[int]]]) -> None:
    w.array_length(len(groups))
    for topic, parts in groups:
        w.string(topic)
        w.array_length(len(parts))
        for p in parts:
            w.int32(p)


def _read_topic_partitions(r: Reader) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    for _ in range(r.array_length()):
        topic = r.string()
        for _ in range(r.array_length()):
            out.append(TopicPartition(topic, r.int32()))
    return out


# -- subscription -------------------------------------------------------------------------------


def encode_subscription(sub: Subscription, version: int | None = None) -> bytes:
    """ConsumerProtocolSubscription bytes (version-prefixed) as the Java client writes them."""
    v = min(sub.version if version is None else version, SUBSCRIPTION_VERSION)
    if v < 0:
        raise ValueError(f"invalid consumer protocol subscription version {v}")
    w = Writer().int16(v)
    topics = sorted(set(sub.topics), key=java_string_key)
    w.array_length(len(topics))
    for t in topics:
        w.string(t)
    w.nullable_bytes(sub.user_data)
    if v >= 1:
        _write_topic_partitions(w, group_by_topic(sub.owned_partitions, sort=True))
    if v >= 2:
        w.int32(sub.generation_id)
    if v >= 3:
        w.nullable_string(sub.rack_id)
    return w.getvalue()


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """Parse ConsumerProtocolSubscription bytes of any version (raises CorruptMessage if garbled)."""
    r = Reader(data)
    version = r.int16()
    if version < 0:
        raise CorruptMessage(f"negative consumer protocol subscription version {version}")
    topics = [r.string() for _ in range(r.array_length())]
    # old clients may end right after the topics; every later field has a default
    user_data = r.nullable_bytes() if r.remaining() else None
    owned: list[TopicPartition] = []
    generation = DEFAULT_GENERATION
    rack: str | None = None
    if version >= 1 and r.remaining():
        owned = _read_topic_partitions(r)
    if version >= 2 and r.remaining():
        generation = r.int32()
    if version >= 3 and r.remaining():
        rack = r.nullable_string()
    return Subscription(topics, user_data, tuple(owned), generation, rack, version)


# -- assignment ---------------------------------------------------------------------------------


def encode_assignment(assignment: Assignment, version: int | None = None) -> bytes:
    """ConsumerProtocolAssignment bytes; partitions grouped by topic in first-seen order (as Java)."""
    v = min(assignment.version if version is None else version, ASSIGNMENT_VERSION)
    if v < 0:
        raise ValueError(f"invalid consumer protocol assignment version {v}")
    w = Writer().int16(v)
    _write_topic_partitions(w, group_by_topic(assignment.partitions, sort=False))
    w.nullable_bytes(assignment.user_data)
    return w.getvalue()


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """Parse ConsumerProtocolAssignment bytes; empty bytes (a member the leader left out) mean
    an empty assignment, as in the Java client."""
    if len(data) == 0:
        return Assignment((), None, 0)
    r = Reader(data)
    version = r.int16()
    if version < 0:
        raise CorruptMessage(f"negative consumer protocol assignment version {version}")
    partitions = _read_topic_partitions(r)
    user_data = r.nullable_bytes() if r.remaining() else None
    return Assignment(tuple(partitions), user_data, version)


# -- sticky assignors' user data --------------------------------------------------------------


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int | None) -> bytes:
    """StickyAssignorUserData v1 (v0 when ``generation`` is None): the previous assignment by
    topic (first-seen order, as Java's groupPartitionsByTopic) and the generation it belongs to."""
    w = Writer()
    _write_topic_partitions(w, group_by_topic(partitions, sort=False))
    if generation is not None:
        w.int32(generation)
    return w.getvalue()


def decode_sticky_user_data(data: bytes | None) -> tuple[list[TopicPartition], int | None]:
    """(previous assignment, generation or None) from StickyAssignorUserData v1 or v0.

    Like Java: unparseable data means "no previous assignment" with the default generation.
    """
    if not data:
        return [], None
    try:
        r = Reader(data)
        partitions = _read_topic_partitions(r)
    except CorruptMessage:
        return [], DEFAULT_GENERATION
    if r.remaining() >= 4:
        return partitions, r.int32()
    return partitions, None


def encode_cooperative_user_data(generation: int) -> bytes:
    """CooperativeStickyAssignorUserData v0: just the generation (for pre-v2 subscriptions)."""
    return Writer().int32(generation).getvalue()


def decode_cooperative_user_data(data: bytes | None) -> int | None:
    """The generation in cooperative-sticky user data; None when absent, -1 when unparseable."""
    if data is None:
        return None
    try:
        return Reader(data).int32()
    except CorruptMessage:
        return DEFAULT_GENERATION


__all__ = [
    "ASSIGNMENT_VERSION",
    "DEFAULT_GENERATION",
    "PROTOCOL_TYPE",
    "SUBSCRIPTION_VERSION",
    "Assignment",
    "Subscription",
    "decode_assignment",
    "decode_cooperative_user_data",
    "decode_sticky_user_data",
    "decode_subscription",
    "encode_assignment",
    "encode_cooperative_user_data",
    "encode_sticky_user_data",
    "group_by_topic",
    "java_string_key",
]
