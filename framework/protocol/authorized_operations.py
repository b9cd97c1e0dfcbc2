"""The ``authorized_operations`` bit fields of Metadata, DescribeCluster and DescribeGroups.

odradek has no authorizer, and a Kafka broker without one answers, when a client asks, every
operation Kafka's ``AclEntry.supportedOperations`` lists for the resource type: everything is
allowed. A client that did not ask gets INT32_MIN. Bits are Kafka's ``AclOperation`` codes
(READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10,
ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12).
"""

from __future__ import annotations

#: the value of an ``authorized_operations`` field the client did not ask for
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def _bits(*operations: int) -> int:
    return sum(1 << op for op in operations)


#: CLUSTER: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE
CLUSTER_OPERATIONS = _bits(5, 7, 8, 9, 10, 11, 12)
#: TOPIC: READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
TOPIC_OPERATIONS = _bits(3, 4, 5, 6, 7, 8, 10, 11)
#: GROUP: READ, DELETE, DESCRIBE
GROUP_OPERATIONS = _bits(3, 6, 8)


def authorized_operations(asked: bool, operations: int) -> int:
    """What to put in an ``authorized_operations`` field: ``operations`` if the client asked."""
    return operations if asked else AUTHORIZED_OPERATIONS_OMITTED


__all__ = [
    "AUTHORIZED_OPERATIONS_OMITTED",
    "CLUSTER_OPERATIONS",
    "GROUP_OPERATIONS",
    "TOPIC_OPERATIONS",
    "authorized_operations",
]
