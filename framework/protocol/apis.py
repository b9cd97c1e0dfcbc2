"""Which Kafka APIs odradek speaks, at which versions: the one table the broker advertises from.

The ranges follow ../shared/design/PROTOCOL.md (what librdkafka, kafka-python and aiokafka need);
admin and group-listing APIs are added at the versions those clients send. ``SUPPORTED_VERSIONS``
is what the codec accepts and the broker may advertise; ApiVersions advertises the subset that
has a request handler registered (:func:`advertised_versions`), so an API appears in ApiVersions
the moment a handler module for it is plugged in, never before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import IntEnum
from functools import cache
from types import MappingProxyType
from typing import NamedTuple

import kio.schema.index as kio_index
from kio.index import load_request_schema


class ApiKey(IntEnum):
    """Kafka's API keys (``org.apache.kafka.common.protocol.ApiKeys``) that odradek knows."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


class VersionRange(NamedTuple):
    """An inclusive range of API versions."""

    min: int
    max: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min <= version <= self.max


#: Every API odradek can decode and answer, with the version range it advertises.
SUPPORTED_VERSIONS: Mapping[int, VersionRange] = MappingProxyType(
    {
        # PROTOCOL.md's table: what the real clients need.
        # v0-2 advertised for old librdkafka, answered UNSUPPORTED_VERSION; v8 record errors (KIP-467),
        # v9 flexible, v10 current leader and node endpoints (KIP-951), v11 TRANSACTION_ABORTABLE
        # (KIP-890); v12 (transactions V2: a Produce adds its partitions) and v13 (topic ids) not
        ApiKey.PRODUCE: VersionRange(0, 11),
        # v12 flexible (KIP-482), v13 topic ids (KIP-516), v15 ReplicaState (KIP-903), v16 current
        # leader and node endpoints on leadership errors (KIP-951); v17 (KIP-853 directory ids) not
        ApiKey.FETCH: VersionRange(4, 16),
        # v7 MAX_TIMESTAMP (KIP-734), v8 EARLIEST_LOCAL (KIP-405), v9 LATEST_TIERED (KIP-1005), v10
        # timeout_ms (KIP-1075: taken; remote.list.offsets.request.timeout.ms bounds remote searches)
        ApiKey.LIST_OFFSETS: VersionRange(1, 10),
        ApiKey.METADATA: VersionRange(0, 12),  # v10 topic ids (KIP-848 consumers need them), v12 asks by id
        # v9 (KIP-848): a consumer group member commits with its member epoch (v10 names topics by id)
        ApiKey.OFFSET_COMMIT: VersionRange(2, 9),
        # v7 require_stable (KIP-447), v8 batched groups (KIP-709), v9 member id and epoch (KIP-848)
        ApiKey.OFFSET_FETCH: VersionRange(1, 9),
        ApiKey.FIND_COORDINATOR: VersionRange(0, 4),  # v4 batched keys (KIP-699)
        # v6 flexible, v7 nullable protocol name, v8 reason (KIP-800, logged), v9 skip_assignment
        # (KIP-814: a static leader rejoining a Stable group gets the members and skips assigning)
        ApiKey.JOIN_GROUP: VersionRange(0, 9),
        ApiKey.HEARTBEAT: VersionRange(0, 4),  # v4 flexible
        ApiKey.LEAVE_GROUP: VersionRange(0, 5),  # v4 flexible, v5 reason (KIP-800, logged)
        ApiKey.SYNC_GROUP: VersionRange(0, 5),  # v4 flexible, v5 protocol type and name (KIP-559)
        # KIP-848's consumer group protocol (v1: the client makes its member id; librdkafka needs v1)
        ApiKey.CONSUMER_GROUP_HEARTBEAT: VersionRange(0, 1),
        ApiKey.CONSUMER_GROUP_DESCRIBE: VersionRange(0, 1),  # v1 member type
        ApiKey.API_VERSIONS: VersionRange(0, 4),
        # v3 KIP-360 epoch bumps, v4 PRODUCER_FENCED (KIP-588), v5 may answer TRANSACTION_ABORTABLE
        # (KIP-890), which odradek's coordinator never does; v6 (KIP-939 two-phase commit) not
        ApiKey.INIT_PRODUCER_ID: VersionRange(0, 5),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: VersionRange(2, 4),  # v4 flexible
        ApiKey.ADD_PARTITIONS_TO_TXN: VersionRange(0, 2),
        ApiKey.ADD_OFFSETS_TO_TXN: VersionRange(0, 2),
        ApiKey.END_TXN: VersionRange(0, 2),
        ApiKey.WRITE_TXN_MARKERS: VersionRange(0, 1),  # inter-broker; v0 is odradek's schema (kio has v1+)
        ApiKey.TXN_OFFSET_COMMIT: VersionRange(0, 2),
        # KIP-664 tooling (kafka-transactions.sh); v2 of ListTransactions (a Java regex, Kafka 4.1) is not offered
        ApiKey.DESCRIBE_PRODUCERS: VersionRange(0, 0),
        ApiKey.DESCRIBE_TRANSACTIONS: VersionRange(0, 0),
        ApiKey.LIST_TRANSACTIONS: VersionRange(0, 2),
        # Admin and group-inspection APIs, at every version kio models that needs no topic ids.
        ApiKey.CREATE_TOPICS: VersionRange(2, 7),
        ApiKey.DELETE_TOPICS: VersionRange(1, 5),  # v6 may name topics by id only
        ApiKey.CREATE_PARTITIONS: VersionRange(0, 3),
        ApiKey.DESCRIBE_CONFIGS: VersionRange(1, 4),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 1),
        ApiKey.ALTER_CONFIGS: VersionRange(0, 2),  # legacy, replacing; confluent-kafka's alter_configs
        ApiKey.DELETE_RECORDS: VersionRange(0, 2),
        ApiKey.DESCRIBE_GROUPS: VersionRange(0, 6),  # v6 error message (KIP-1043): non-classic groups are errors
        ApiKey.LIST_GROUPS: VersionRange(0, 5),  # v4 states filter (KIP-518), v5 types filter (KIP-848)
        ApiKey.DELETE_GROUPS: VersionRange(0, 2),
        ApiKey.OFFSET_DELETE: VersionRange(0, 0),  # Kafka has only v0 (KIP-496)
        ApiKey.DESCRIBE_CLUSTER: VersionRange(0, 2),  # v2 include_fenced_brokers: none in ZooKeeper mode
        ApiKey.ALTER_REPLICA_LOG_DIRS: VersionRange(1, 2),  # kio has no v0 (Kafka 4 dropped it); v2 flexible
        ApiKey.DESCRIBE_LOG_DIRS: VersionRange(1, 4),  # kio has no v0 (Kafka 4 dropped it); v4 volume bytes
        ApiKey.ELECT_LEADERS: VersionRange(0, 2),  # v1 election type (KIP-460), v2 flexible
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: VersionRange(0, 1),  # KIP-455; v1 KIP-860
        ApiKey.LIST_PARTITION_REASSIGNMENTS: VersionRange(0, 0),  # KIP-455
        # No authorizer: answered SECURITY_DISABLED, as Kafka without one. kio has no v0 (Kafka 4 dropped it).
        ApiKey.DESCRIBE_ACLS: VersionRange(1, 3),
        ApiKey.CREATE_ACLS: VersionRange(1, 3),
        ApiKey.DELETE_ACLS: VersionRange(1, 3),
        # Listed as Kafka lists them on every listener; without SASL both answer ILLEGAL_SASL_STATE.
        ApiKey.SASL_HANDSHAKE: VersionRange(0, 1),
        ApiKey.SASL_AUTHENTICATE: VersionRange(0, 2),
        # KIP-554: SCRAM users in the metadata store (Kafka has only v0 of both)
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: VersionRange(0, 0),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: VersionRange(0, 0),
        # KIP-546: client quotas in the metadata store (v1 is flexible; Kafka also has only v0-1)
        ApiKey.DESCRIBE_CLIENT_QUOTAS: VersionRange(0, 1),
        ApiKey.ALTER_CLIENT_QUOTAS: VersionRange(0, 1),
    }
)

#: Produce versions the broker implements; older advertised ones get UNSUPPORTED_VERSION.
PRODUCE_IMPLEMENTED = VersionRange(3, 11)


def api_name(api_key: int) -> str:
    """Kafka's name of an API key (``Produce``), or ``ApiKey(n)`` for unknown keys; for logs."""
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return f"ApiKey({api_key})"


def is_supported(api_key: int, api_version: int) -> bool:
    """Whether the codec accepts this API at this version."""
    rng = SUPPORTED_VERSIONS.get(api_key)
    return rng is not None and api_version in rng


def advertised_versions(handled: Iterable[int]) -> dict[int, VersionRange]:
    """The ApiVersions key list: supported APIs that have a handler, ordered by key.

    ApiVersions itself is always included: the codec answers it even with no handler.
    """
    keys = set(handled) | {ApiKey.API_VERSIONS}
    return {k: SUPPORTED_VERSIONS[k] for k in sorted(keys) if k in SUPPORTED_VERSIONS}


#: First flexible request version of each API odradek serves (Kafka's message JSON
#: "flexibleVersions"). Asking kio instead imports every version's schema module of the API:
#: ~50-90 ms per API, paid by the first requests a broker serves. A test checks it against kio.
#: None: no version is flexible (OffsetDelete).
_FIRST_FLEXIBLE: dict[int, int | None] = {
    0: 9, 1: 12, 2: 6, 3: 9, 8: 8, 9: 6, 10: 3, 11: 6, 12: 4, 13: 4, 14: 4, 15: 5, 16: 3, 18: 3,
    19: 5, 20: 4, 21: 2, 22: 2, 23: 4, 24: 3, 25: 3, 26: 3, 27: 1, 28: 3, 32: 4, 33: 2, 37: 2, 42: 2, 44: 1, 47: None,
    17: None, 36: 2, 34: 2, 35: 2, 60: 0, 43: 2, 61: 0, 65: 0, 66: 0, 29: 2, 30: 2, 31: 2, 50: 0, 51: 0,
    45: 0, 46: 0,
    48: 1, 49: 1, 68: 0, 69: 0,
}  # fmt: skip


def first_flexible_version(api_key: int) -> int | None:
    """The first version of an API whose messages are flexible (KIP-482), None if none is.

    From the table for the APIs odradek serves, else from kio's schemas (generated from Kafka's
    message JSON), so it is right for APIs odradek does not serve too: the request header of
    an unsupported API still parses.
    """
    if api_key in _FIRST_FLEXIBLE:
        return _FIRST_FLEXIBLE[api_key]
    return kio_first_flexible_version(api_key)


@cache
def kio_first_flexible_version(api_key: int) -> int | None:
    """:func:`first_flexible_version` as kio's schemas say (imports them all: slow, cached)."""
    name = kio_index.api_key_map.get(api_key)
    if name is None:
        return None
    for version in sorted(kio_index.schema_name_map[name]):
        if load_request_schema(api_key, version).__flexible__:
            return version
    return None


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether (api_key, api_version) uses compact encodings and tagged fields."""
    first = first_flexible_version(api_key)
    return first is not None and api_version >= first


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header v2 (tagged fields) for flexible versions, v1 otherwise."""
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header v1 for flexible versions, v0 otherwise; ApiVersions always v0.

    ApiVersions stays on v0 so a client can read the header before it knows what the broker
    speaks (KIP-511).
    """
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


__all__ = [
    "PRODUCE_IMPLEMENTED",
    "SUPPORTED_VERSIONS",
    "ApiKey",
    "VersionRange",
    "advertised_versions",
    "api_name",
    "first_flexible_version",
    "is_flexible",
    "is_supported",
    "request_header_version",
    "response_header_version",
]
