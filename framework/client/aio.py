"""odradek's trio-native client API: use each client inside ``async with``.

::

    from odradek.client.aio import AsyncAdmin, AsyncConsumer, AsyncProducer

See :mod:`odradek.client` for the blocking facade with the same names minus ``Async``.
"""

from __future__ import annotations

from ..interfaces import TopicPartition
from .accumulator import RecordMetadata
from .admin import (
    AlterConfigOp,
    AsyncAdmin,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ClusterDescription,
    ConfigEntry,
    ConfigResourceType,
    GroupDescription,
    ListedGroup,
    MemberDescription,
    NewTopic,
    PartitionReassignment,
    TopicDescription,
)
from .base import ClientClosedError
from .consumer import AsyncConsumer
from .coordinator import CommitFailedError
from .decoding import ConsumerRecord
from .fetcher import LogTruncationError, NoOffsetForPartition
from .group_ops import OffsetAndMetadata
from .offsets import OffsetAndTimestamp
from .producer import AsyncProducer, RecordFuture

__all__ = [
    "AlterConfigOp",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "ClientClosedError",
    "ClientQuotaAlteration",
    "ClientQuotaFilterComponent",
    "ClusterDescription",
    "CommitFailedError",
    "ConfigEntry",
    "ConfigResourceType",
    "ConsumerRecord",
    "GroupDescription",
    "ListedGroup",
    "LogTruncationError",
    "MemberDescription",
    "NewTopic",
    "NoOffsetForPartition",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionReassignment",
    "RecordFuture",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
]
