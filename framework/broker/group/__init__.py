"""Consumer groups on the broker: the group coordinator and ``__consumer_offsets``.

- :mod:`.group_coordinator` -- :class:`GroupCoordinator`, what transports call;
- :mod:`.coordinator` -- the classic rebalance protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup);
- :mod:`.consumer_coordinator`, :mod:`.consumer_group`, :mod:`.consumer_schema` -- KIP-848's
  consumer group protocol (ConsumerGroupHeartbeat): heartbeats, state and reconciliation, records;
  :mod:`.consumer_runtime` writes a heartbeat's records before it is answered;
  :mod:`.consumer_classic` classic members in consumer groups and online migration;
- :mod:`.state` -- group and member state, the group state machine;
- :mod:`.metadata_manager` -- the group cache, loading, offset commits, expiry;
- :mod:`.schema` -- Kafka's ``__consumer_offsets`` key/value schemas;
- :mod:`.offsets_log` -- the topic itself, through the broker facade (or in memory);
- :mod:`.timers` -- session, rebalance and sync deadlines; :mod:`.hashing` -- group placement.

See docs/groups.md.
"""

from __future__ import annotations

from .group_coordinator import (
    FIND_COORDINATOR_LOAD_WAIT_S,
    FindCoordinatorResult,
    GroupCoordinator,
    GroupDescription,
    ListedGroup,
    MemberDescription,
)
from .hashing import java_string_hash, partition_for
from .metadata_manager import INVALID_OFFSET, PartitionOffset
from .offsets_log import OFFSETS_TOPIC, BrokerOffsetsLog, InMemoryOffsetsLog, OffsetsLog
from .state import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    GroupState,
    JoinGroupMember,
    JoinGroupResult,
    OffsetAndMetadata,
    SyncGroupResult,
)

__all__ = [
    "FIND_COORDINATOR_LOAD_WAIT_S",
    "INVALID_OFFSET",
    "NO_GENERATION",
    "OFFSETS_TOPIC",
    "UNKNOWN_MEMBER_ID",
    "BrokerOffsetsLog",
    "FindCoordinatorResult",
    "GroupCoordinator",
    "GroupDescription",
    "GroupState",
    "InMemoryOffsetsLog",
    "JoinGroupMember",
    "JoinGroupResult",
    "ListedGroup",
    "MemberDescription",
    "OffsetAndMetadata",
    "OffsetsLog",
    "PartitionOffset",
    "SyncGroupResult",
    "java_string_hash",
    "partition_for",
]
