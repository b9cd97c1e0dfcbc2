"""odradek's own Kafka client: Producer, Consumer and Admin.

Two APIs over one implementation:

- :mod:`odradek.client.aio` -- trio-native ``AsyncProducer``, ``AsyncConsumer``, ``AsyncAdmin``,
  used inside ``async with``;
- this module -- ``Producer``, ``Consumer``, ``Admin``: blocking, thread-safe, for plain scripts,
  threads and Spark executors (each object runs its trio loop in a background thread).

Config keys are Kafka's client property names (``bootstrap.servers``, ``linger.ms``,
``enable.idempotence``, ``group.id`` ...); unknown keys are rejected. See docs/client.md.
"""

from __future__ import annotations

from ..errors import KafkaError
from ..interfaces import TopicPartition
from .accumulator import RecordMetadata
from .admin import (
    AlterConfigOp,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ConfigResourceType,
    NewTopic,
    TopicPartitionReplica,
    UserScramCredentialUpsertion,
)
from .base import ClientClosedError
from .coordinator import CommitFailedError
from .decoding import ConsumerRecord
from .fetcher import LogTruncationError, NoOffsetForPartition
from .group_ops import OffsetAndMetadata
from .offsets import OffsetAndTimestamp
from .sync import Admin, Consumer, Producer

__all__ = [
    "Admin",
    "AlterConfigOp",
    "ClientClosedError",
    "ClientQuotaAlteration",
    "ClientQuotaFilterComponent",
    "CommitFailedError",
    "ConfigResourceType",
    "Consumer",
    "ConsumerRecord",
    "KafkaError",
    "LogTruncationError",
    "NewTopic",
    "NoOffsetForPartition",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
    "TopicPartitionReplica",
    "UserScramCredentialUpsertion",
]
