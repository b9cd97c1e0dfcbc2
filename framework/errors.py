"""Kafka's error codes and the exceptions that carry them.

Every error odradek reports to a client is one of Kafka's error codes, by Kafka's name, so that
unmodified clients react to it as they would with Kafka (retry, refresh metadata, fail the
record). Code inside the broker raises :class:`KafkaError` subclasses; the transport turns them
into the error code field of the response for the affected partition, group or request.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from enum import IntEnum
from typing import ClassVar, ParamSpec, TypeVar


class ErrorCode(IntEnum):
    """Kafka protocol error codes (``org.apache.kafka.common.protocol.Errors``)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    TRANSACTION_ABORTABLE = 120
    INVALID_REGULAR_EXPRESSION = 128

    @property
    def retriable(self) -> bool:
        """Whether a Kafka client retries a request that failed with this code."""
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.NOT_CONTROLLER,  # Kafka's NotControllerException is retriable
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        ErrorCode.UNKNOWN_TOPIC_ID,
    }
)


class OdradekError(Exception):
    """Base of every exception odradek raises on purpose."""


class KafkaError(OdradekError):
    """An error that maps to one Kafka error code.

    Raise a subclass (``CorruptMessage``) or ``KafkaError(ErrorCode.X, "why")``. The message is
    for logs and for the error-message fields of responses that have one; clients act on the code.
    """

    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR

    #: the records that made a produced batch invalid, as (index in the batch, why): Produce
    #: v8+ answers them (KIP-467); empty when the error is not about particular records
    record_errors: tuple[tuple[int, str | None], ...] = ()

    def __init__(
        self,
        message: str = "",
        *,
        code: ErrorCode | None = None,
        record_errors: tuple[tuple[int, str | None], ...] = (),
    ) -> None:
        if code is not None:
            self.code = code  # type: ignore[misc]  # per-instance override of the class default
        if record_errors:
            self.record_errors = record_errors
        super().__init__(message or self.code.name)

    @property
    def retriable(self) -> bool:
        return self.code.retriable

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}: {self.args[0]!r})"


def _error(name: str, code: ErrorCode, doc: str) -> type[KafkaError]:
    cls = type(name, (KafkaError,), {"code": code, "__doc__": doc})
    return cls


CorruptMessage = _error("CorruptMessage", ErrorCode.CORRUPT_MESSAGE, "CRC or framing of a batch is wrong.")
InvalidRecord = _error("InvalidRecord", ErrorCode.INVALID_RECORD, "A batch's fields contradict each other.")
MessageTooLarge = _error("MessageTooLarge", ErrorCode.MESSAGE_TOO_LARGE, "A batch exceeds max.message.bytes.")


class DecompressionLimitExceeded(KafkaError):
    """A compressed records section inflates past the bound its reader set.

    Raised by a codec's ``decompress(data, max_size=n)`` as soon as its output would pass ``n``
    bytes, before it allocates much more (a few compressed bytes can claim gigabytes: a
    "decompression bomb"). The broker bounds what a produced batch may inflate to
    (``message.max.decompressed.bytes``) and answers MESSAGE_TOO_LARGE, on which Kafka's producers
    split the batch. ``limit`` is the bound; ``declared`` the size the compressed data claims, when
    its framing says (snappy's preamble, a zstd or lz4 frame's content size), else None.
    """

    code: ClassVar[ErrorCode] = ErrorCode.MESSAGE_TOO_LARGE

    def __init__(self, limit: int, *, codec: str = "", declared: int | None = None) -> None:
        self.limit = limit
        self.declared = declared
        what = f"{codec} data" if codec else "compressed data"
        size = f"declares {declared} bytes, more than" if declared is not None else "inflates past"
        super().__init__(f"{what} {size} the {limit}-byte limit on its decompressed size")


OffsetOutOfRange = _error("OffsetOutOfRange", ErrorCode.OFFSET_OUT_OF_RANGE, "An offset outside [log start, log end].")
UnknownTopicOrPartition = _error(
    "UnknownTopicOrPartition", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic or partition."
)
InvalidTopic = _error("InvalidTopic", ErrorCode.INVALID_TOPIC_EXCEPTION, "A topic name Kafka would refuse.")
TopicAlreadyExists = _error("TopicAlreadyExists", ErrorCode.TOPIC_ALREADY_EXISTS, "CreateTopics for an existing topic.")
InvalidPartitions = _error("InvalidPartitions", ErrorCode.INVALID_PARTITIONS, "A partition count that is not allowed.")
InvalidReplicationFactor = _error(
    "InvalidReplicationFactor", ErrorCode.INVALID_REPLICATION_FACTOR, "More replicas than brokers, or < 1."
)
InvalidConfig = _error("InvalidConfig", ErrorCode.INVALID_CONFIG, "A config key or value that is not allowed.")
UnsupportedVersion = _error(
    "UnsupportedVersion", ErrorCode.UNSUPPORTED_VERSION, "An API version odradek does not serve."
)
UnsupportedCompressionType = _error(
    "UnsupportedCompressionType", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "No codec for a batch's compression id."
)
InvalidRequest = _error(
    "InvalidRequest", ErrorCode.INVALID_REQUEST, "A request that cannot be parsed or is inconsistent."
)
KafkaStorageError = _error(
    "KafkaStorageError", ErrorCode.KAFKA_STORAGE_ERROR, "The storage engine failed (disk full, I/O error)."
)
LogDirNotFound = _error(
    "LogDirNotFound", ErrorCode.LOG_DIR_NOT_FOUND, "A log dir that is not one of the broker's log.dirs (KIP-113)."
)
ReplicaNotAvailable = _error(
    "ReplicaNotAvailable", ErrorCode.REPLICA_NOT_AVAILABLE, "The broker does not host a replica of the partition yet."
)
OffsetMovedToTieredStorage = _error(
    "OffsetMovedToTieredStorage",
    ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE,
    "An offset below the local log start that remote storage holds (KIP-405): a consumer's fetch is served "
    "from remote storage, a follower's is answered with this error and restarts at the local log start.",
)
RemoteStorageError = _error(
    "RemoteStorageError",
    ErrorCode.KAFKA_STORAGE_ERROR,
    "Remote storage (tiered storage) failed or holds nothing for what was asked.",
)
NotLeaderOrFollower = _error(
    "NotLeaderOrFollower", ErrorCode.NOT_LEADER_OR_FOLLOWER, "This broker does not host the partition as asked."
)
NotEnoughReplicas = _error("NotEnoughReplicas", ErrorCode.NOT_ENOUGH_REPLICAS, "ISR below min.insync.replicas.")
OutOfOrderSequence = _error("OutOfOrderSequence", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "A producer sequence gap.")
DuplicateSequence = _error(
    "DuplicateSequence", ErrorCode.DUPLICATE_SEQUENCE_NUMBER, "A producer sequence already written."
)
InvalidProducerEpoch = _error(
    "InvalidProducerEpoch", ErrorCode.INVALID_PRODUCER_EPOCH, "A producer epoch older than the current one."
)
UnknownProducerId = _error("UnknownProducerId", ErrorCode.UNKNOWN_PRODUCER_ID, "No state for this producer id.")
FencedLeaderEpoch = _error("FencedLeaderEpoch", ErrorCode.FENCED_LEADER_EPOCH, "A request with an older leader epoch.")
UnknownLeaderEpoch = _error(
    "UnknownLeaderEpoch", ErrorCode.UNKNOWN_LEADER_EPOCH, "A request with a newer leader epoch."
)
RequestTimedOut = _error("RequestTimedOut", ErrorCode.REQUEST_TIMED_OUT, "A delayed operation expired.")

_P = ParamSpec("_P")
_T = TypeVar("_T")
#: what a decoder of stored bytes raises on bytes it cannot read, besides CorruptMessage
_UNREADABLE = (ValueError, struct.error, IndexError, KeyError, TypeError, OverflowError)


def record_decoder(what: str) -> Callable[[Callable[_P, _T]], Callable[_P, _T]]:
    """Mark a decoder of stored records (an internal topic's keys and values): any error it
    meets on bytes it cannot read (a status byte outside the enum, bad UTF-8, a short field)
    leaves as CorruptMessage naming ``what``, which the loaders skip with a warning. Such a
    stray ValueError ended a coordinator's load, and with it the broker, on every start."""

    def wrap(decode: Callable[_P, _T]) -> Callable[_P, _T]:
        @functools.wraps(decode)
        def decoded(*args: _P.args, **kwargs: _P.kwargs) -> _T:
            try:
                return decode(*args, **kwargs)
            except _UNREADABLE as exc:
                raise CorruptMessage(f"unreadable {what}: {exc!r}") from exc

        return decoded

    return wrap


__all__ = [
    "CorruptMessage",
    "DecompressionLimitExceeded",
    "DuplicateSequence",
    "ErrorCode",
    "FencedLeaderEpoch",
    "InvalidConfig",
    "InvalidPartitions",
    "InvalidProducerEpoch",
    "InvalidRecord",
    "InvalidReplicationFactor",
    "InvalidRequest",
    "InvalidTopic",
    "KafkaError",
    "KafkaStorageError",
    "LogDirNotFound",
    "MessageTooLarge",
    "NotEnoughReplicas",
    "NotLeaderOrFollower",
    "OdradekError",
    "OffsetMovedToTieredStorage",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "RemoteStorageError",
    "ReplicaNotAvailable",
    "RequestTimedOut",
    "TopicAlreadyExists",
    "UnknownLeaderEpoch",
    "UnknownProducerId",
    "UnknownTopicOrPartition",
    "UnsupportedCompressionType",
    "UnsupportedVersion",
    "record_decoder",
]
