"""The response to a request whose handler failed (Kafka's ``AbstractRequest.getErrorResponse``).

A handler maps the errors it expects (an unknown topic, a fenced producer) into its response. When
something else escapes it -- a bug, a storage or metadata failure nobody mapped -- Kafka does not
drop the connection: it answers the request with that error in every error field, and the client
sees a failed request while its connection and its other in-flight requests carry on. This module
builds that answer for every API odradek serves:

- the top-level ``error_code`` (and ``error_message`` where the version has one) is the error
  (tagged error fields, such as CreateTopics' ``topic_config_error_code``, keep their default);
- every topic, partition, group, member or config resource the request named gets an entry of
  its own carrying the error, identified as the request identified it (topic name, partition
  index, group id, ...); a request that names them in a list of plain values (OffsetFetch's
  ``partition_indexes``, DescribeGroups' ``groups``) gets one entry per value;
- every other field is the schema's default, or Kafka's "unknown" value (-1 for numbers, empty or
  null for the rest).

Produce and Fetch have odradek's own request and response types and are built directly.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from odradek.errors import ErrorCode
from odradek.protocol import ApiKey, produce_error_response, response_type
from odradek.protocol.fetch import FetchPartitionData, FetchRequestData, FetchResponseData, FetchTopicData

from ._kio import kerr, response_class

#: fields that say *which* topic, partition, group, member or resource an entry is about: copied
#: from the request's entry into the response's, and what pairs a response list with a request list
IDENTITY_FIELDS = frozenset(
    {
        "name",
        "topic",
        "topic_id",
        "partition_index",
        "partition",
        "partition_id",  # ElectLeaders
        "group_id",
        "member_id",
        "group_instance_id",
        "transactional_id",
        "producer_id",  # WriteTxnMarkers answers per producer
        "resource_type",
        "resource_name",
        "key",
    }
)

#: request lists of plain values that name entities, and the response entry field they fill
_VALUE_LISTS = {
    "partitions": "partition_index",
    "partition_indexes": "partition_index",
    "groups": "group_id",
    "groups_names": "group_id",
    "group_ids": "group_id",  # ConsumerGroupDescribe
    "topic_names": "name",
    "coordinator_keys": "key",  # FindCoordinator v4
    "transactional_ids": "transactional_id",  # DescribeTransactions
}

#: response lists that describe state rather than answer what the request named (a created
#: topic's resulting configs): empty in an error response, as Kafka's
_NOT_ANSWERED = frozenset({"configs"})

_UNKNOWN: dict[str, Any] = {
    "int8": -1,
    "int16": -1,
    "int32": -1,
    "int64": -1,
    "uint8": 0,
    "uint16": 0,
    "uint32": 0,
    "uint64": 0,
    "float64": 0.0,
    "string": "",
    "bytes": b"",
    "records": b"",
    "bool": False,
    "uuid": uuid.UUID(int=0),
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, tz=datetime.UTC),
}


def error_response(api_key: int, api_version: int, request: Any, code: ErrorCode, message: str) -> Any:
    """A response to ``request`` (api/version) reporting ``code`` everywhere it has room to.

    Raises when no response can be built (the connection is then closed, as Kafka does when
    ``getErrorResponse`` fails)."""
    if api_key == ApiKey.PRODUCE:
        return produce_error_response(request, code)
    if api_key == ApiKey.FETCH:
        return fetch_error_response(request, code)
    if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        return alter_user_scram_credentials_error_response(api_version, request, code, message)
    if api_key == ApiKey.ALTER_CLIENT_QUOTAS:
        return alter_client_quotas_error_response(api_version, request, code, message)
    if api_key == ApiKey.ALTER_REPLICA_LOG_DIRS:
        return alter_replica_log_dirs_error_response(api_version, request, code)
    if api_key in _ONE_PER_ITEM:
        return one_result_per_item_error_response(api_key, api_version, request, code, message)
    return _entry(response_type(api_key, api_version), request, code, message, top=True)


def alter_replica_log_dirs_error_response(api_version: int, request: Any, code: ErrorCode) -> Any:
    """Kafka's ``AlterReplicaLogDirsRequest.getErrorResponse``: every partition of every dir's
    topics answered with ``code``, one result per topic (the request groups them by dir)."""
    topic_cls = response_class(ApiKey.ALTER_REPLICA_LOG_DIRS, api_version, "AlterReplicaLogDirTopicResult")
    partition_cls = response_class(ApiKey.ALTER_REPLICA_LOG_DIRS, api_version, "AlterReplicaLogDirPartitionResult")
    results = tuple(
        topic_cls(
            topic_name=t.name,
            partitions=tuple(partition_cls(partition_index=p, error_code=kerr(code)) for p in t.partitions),
        )
        for d in request.dirs
        for t in d.topics
    )
    return response_type(ApiKey.ALTER_REPLICA_LOG_DIRS, api_version)(
        throttle_time=datetime.timedelta(0), results=results
    )


#: APIs whose results pair with the request's items by position only (no identity field to
#: match them by): the request list, the response list and its entry class
_ONE_PER_ITEM = {
    ApiKey.CREATE_ACLS: ("creations", "results", "AclCreationResult"),
    ApiKey.DELETE_ACLS: ("filters", "filter_results", "DeleteAclsFilterResult"),
}


def one_result_per_item_error_response(
    api_key: int, api_version: int, request: Any, code: ErrorCode, message: str
) -> Any:
    """Kafka's ``CreateAclsRequest``/``DeleteAclsRequest.getErrorResponse``: one result per
    creation or filter, in order, each carrying ``code`` (clients pair them by position:
    librdkafka aborts on a count that differs)."""
    items, results, entry = _ONE_PER_ITEM[api_key]
    entry_cls = response_class(api_key, api_version, entry)
    answers = tuple(_entry(entry_cls, None, code, message) for _ in getattr(request, items))
    return response_type(api_key, api_version)(throttle_time=datetime.timedelta(0), **{results: answers})


def alter_user_scram_credentials_error_response(api_version: int, request: Any, code: ErrorCode, message: str) -> Any:
    """Kafka's ``AlterUserScramCredentialsRequest.getErrorResponse``: one result per user the
    request names (its deletions, then its upsertions), each carrying ``code``."""
    cls = response_type(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, api_version)
    result = response_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, api_version, "AlterUserScramCredentialsResult")
    users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    return cls(
        throttle_time=datetime.timedelta(0),
        results=tuple(result(user=u, error_code=kerr(code), error_message=message) for u in users),
    )


def alter_client_quotas_error_response(api_version: int, request: Any, code: ErrorCode, message: str) -> Any:
    """Kafka's ``AlterClientQuotasRequest.getErrorResponse``: one entry per entity the request
    names, with its components, each carrying ``code``."""
    cls = response_type(ApiKey.ALTER_CLIENT_QUOTAS, api_version)
    entry = response_class(ApiKey.ALTER_CLIENT_QUOTAS, api_version, "EntryData")
    entity = response_class(ApiKey.ALTER_CLIENT_QUOTAS, api_version, "EntityData")
    return cls(
        throttle_time=datetime.timedelta(0),
        entries=tuple(
            entry(
                error_code=kerr(code),
                error_message=message,
                entity=tuple(entity(entity_type=e.entity_type, entity_name=e.entity_name) for e in r.entity),
            )
            for r in request.entries
        ),
    )


def fetch_error_response(request: FetchRequestData, code: ErrorCode) -> FetchResponseData:
    """``code`` at the top level (v7+) and for every partition of a Fetch request, no records."""
    return FetchResponseData(
        [
            FetchTopicData(
                t.topic,
                [FetchPartitionData(p.partition, int(code), records=None) for p in t.partitions],
                bytes.fromhex(t.topic_id) if t.topic_id else b"",  # v13+ names topics by id
            )
            for t in request.topics
        ],
        error_code=int(code),
    )


def _entry(cls: type[Any], source: Any, code: ErrorCode, message: str, *, top: bool = False) -> Any:
    """An instance of the kio entity ``cls`` for ``source`` (the request entity it answers, or
    None): identity fields copied from it, errors set, nested lists answered the same way. The
    response itself (``top``) copies no identity: a failed JoinGroup names no member, as Kafka's."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        kind = classify_field(f)
        name = f.name
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if isinstance(kind, PrimitiveField):
            schema_type = get_schema_field_type(f)
            if schema_type == "error_code" and get_field_tag(f) is None:
                values[name] = kerr(code)
            elif name == "error_message" and schema_type == "string":
                values[name] = message
            elif name in IDENTITY_FIELDS and not top and source is not None and hasattr(source, name):
                values[name] = getattr(source, name)
            elif not has_default:
                values[name] = None if is_optional(f) else _UNKNOWN[schema_type]
        elif isinstance(kind, EntityTupleField):
            items = [] if name in _NOT_ANSWERED else _answered(source, kind.type_)
            values[name] = tuple(_entry(kind.type_, item, code, message) for item in items)
        elif isinstance(kind, EntityField) and not has_default:
            values[name] = None if is_optional(f) else _entry(kind.type_, None, code, message)
        elif isinstance(kind, PrimitiveTupleField) and not has_default:
            values[name] = None if is_optional(f) else ()
    return cls(**values)


def _answered(source: Any, entry_cls: type[Any]) -> list[Any]:
    """The request's entities that ``entry_cls`` entries answer: the request list whose entries
    share the most identity fields with ``entry_cls``, else entries made from a list of values
    (partition indexes, group ids, topic names), else none."""
    if source is None or not is_dataclass(source):
        return []
    wanted = {f.name for f in fields(entry_cls)} & IDENTITY_FIELDS
    best: tuple[int, Any] = (0, None)
    for f in fields(source):
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField):
            shared = len({g.name for g in fields(kind.type_)} & wanted)
            if shared > best[0]:
                best = (shared, f.name)
    if best[1] is not None:
        return list(getattr(source, best[1]) or ())
    for f in fields(source):
        target = _VALUE_LISTS.get(f.name)
        if target == "partition_index" and target not in wanted and "partition_id" in wanted:
            target = "partition_id"  # ElectLeaders' results name their partitions so
        if target is not None and target in wanted and isinstance(classify_field(f), PrimitiveTupleField):
            return [_Named(target, value) for value in getattr(source, f.name) or ()]
    return []


class _Named:
    """A stand-in request entity for one value of a list of plain values."""

    def __init__(self, field_name: str, value: Any) -> None:
        setattr(self, field_name, value)


__all__ = ["IDENTITY_FIELDS", "error_response", "fetch_error_response"]
