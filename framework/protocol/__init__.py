"""Kafka's wire protocol, sans-IO: headers, the version table, request/response codecs.

Import as ``odradek.protocol``. The broker's transport and odradek's own client share it, so
both speak exactly the versions in :data:`SUPPORTED_VERSIONS`. Nothing here touches a socket;
see docs/protocol.md for the supported APIs and the zero-copy Fetch path.
"""

from __future__ import annotations

from .apis import (
    PRODUCE_IMPLEMENTED,
    SUPPORTED_VERSIONS,
    ApiKey,
    VersionRange,
    advertised_versions,
    api_name,
    is_flexible,
    is_supported,
    request_header_version,
    response_header_version,
)
from .codec import (
    api_versions_fallback,
    api_versions_response,
    datetime_ms,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    kio_error,
    ms,
    produce_unsupported_response,
    produce_version_implemented,
    request_type,
    response_type,
    timedelta_ms,
)
from .fetch import (
    FETCH_ENVELOPE_VERSIONS,
    FetchEnvelope,
    FetchPartitionData,
    FetchRequestData,
    FetchRequestPartition,
    FetchRequestTopic,
    FetchResponseData,
    FetchTopicData,
    RecordsSlice,
    build_fetch_envelope,
    decode_fetch_request,
)
from .headers import (
    RequestHeader,
    encode_request_header,
    encode_response_header,
    parse_request_header,
    parse_response_header,
    peek_correlation_id,
)
from .metadata import MetadataResponseData, encode_metadata_response
from .produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequestData,
    ProduceResponseData,
    TopicProduceData,
    TopicProduceResponse,
)

__all__ = [
    "FETCH_ENVELOPE_VERSIONS",
    "PRODUCE_IMPLEMENTED",
    "SUPPORTED_VERSIONS",
    "ApiKey",
    "FetchEnvelope",
    "FetchPartitionData",
    "FetchRequestData",
    "FetchRequestPartition",
    "FetchRequestTopic",
    "FetchResponseData",
    "FetchTopicData",
    "MetadataResponseData",
    "PartitionProduceData",
    "PartitionProduceResponse",
    "ProduceRequestData",
    "ProduceResponseData",
    "RecordsSlice",
    "RequestHeader",
    "TopicProduceData",
    "TopicProduceResponse",
    "VersionRange",
    "advertised_versions",
    "api_name",
    "api_versions_fallback",
    "api_versions_response",
    "build_fetch_envelope",
    "datetime_ms",
    "decode_fetch_request",
    "decode_request",
    "decode_response",
    "encode_metadata_response",
    "encode_request",
    "encode_request_header",
    "encode_response",
    "encode_response_header",
    "is_flexible",
    "is_supported",
    "kio_error",
    "ms",
    "parse_request_header",
    "parse_response_header",
    "peek_correlation_id",
    "produce_unsupported_response",
    "produce_version_implemented",
    "request_header_version",
    "request_type",
    "response_header_version",
    "response_type",
    "timedelta_ms",
]
