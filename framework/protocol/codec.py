"""Request/response codec over kio's schemas, both directions, sans-IO.

The broker uses :func:`decode_request` and :func:`encode_response`; odradek's own client uses
:func:`encode_request` and :func:`decode_response`; both sides share the version table in
:mod:`odradek.protocol.apis`. Messages are kio's frozen dataclasses
(``kio.schema.<api>.v<N>.{request,response}``) except two hand-written hot paths: Produce
(:mod:`.produce`, decoded into writable buffers) and the Fetch response envelope
(:mod:`.fetch`, written around sendfile'd slices).

Framing: functions that read take a frame *without* its int32 size prefix; functions that write
return a frame without it (the transport adds it), except the Fetch envelope, which carries its
own size because it is streamed in parts.
"""

from __future__ import annotations

import datetime
import errno
import io
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

import kio.schema.errors as kio_errors
from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import DecodeError

from ..errors import ErrorCode, InvalidRequest, UnsupportedVersion
from . import write_txn_markers as write_txn_markers_v0
from .apis import PRODUCE_IMPLEMENTED, SUPPORTED_VERSIONS, ApiKey, VersionRange
from .fetch import decode_fetch_request
from .guard import check_message
from .headers import encode_request_header, encode_response_header, parse_response_header
from .metadata import MetadataResponseData, encode_metadata_response
from .produce import (
    ProduceRequestData,
    ProduceResponseData,
    decode_produce_request,
    decode_produce_response,
    encode_produce_request,
    encode_produce_response,
)

Buffer = bytes | bytearray | memoryview

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_API_VERSION_V0 = struct.Struct(">hhh")


# -- kio type helpers ---------------------------------------------------------------------------


def kio_error(code: int) -> kio_errors.ErrorCode:
    """kio's ErrorCode member for a Kafka error code (what kio response fields hold)."""
    try:
        return kio_errors.ErrorCode(code)
    except ValueError:
        return kio_errors.ErrorCode.unknown_server_error


def ms(value: datetime.timedelta | datetime.datetime | None) -> int:
    """Milliseconds of a kio timedelta field, or ms since the epoch of a kio datetime (-1 for None)."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return round(value.total_seconds() * 1000)


def timedelta_ms(value: int) -> datetime.timedelta:
    """A kio ``i32Timedelta``/``i64Timedelta`` field value from milliseconds."""
    return datetime.timedelta(milliseconds=value)


def datetime_ms(value: int) -> datetime.datetime | None:
    """A kio ``datetime_i64`` field value from ms since the epoch (None for -1)."""
    if value < 0:
        return None
    return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)


# -- schema lookup ------------------------------------------------------------------------------


class SchemaUnavailable(RuntimeError):
    """kio has a schema for this API version but it cannot be loaded now: its lazy import failed
    for a reason of the broker's own (out of file descriptors, an I/O error), not the client's.

    Not an ``UnsupportedVersion``: at the fd limit a valid ListGroups v0 was refused as "no
    request schema for api 16 v0", which blames the client for the broker's trouble. The
    lookup is not cached when it fails, so the same request works once the cause is gone.
    """


#: kio-shaped schemas of versions kio does not model (Kafka 4.x dropped them): (key, version) ->
#: (request class, response class)
_OWN_SCHEMAS: dict[tuple[int, int], tuple[type[Any], type[Any]]] = {
    (ApiKey.WRITE_TXN_MARKERS, 0): (
        write_txn_markers_v0.WriteTxnMarkersRequest,
        write_txn_markers_v0.WriteTxnMarkersResponse,
    ),
}


@cache
def request_type(api_key: int, api_version: int) -> type[Any]:
    """kio's request class for api/version (raises ``UnsupportedVersion`` when kio has none,
    ``SchemaUnavailable`` when it has one that cannot be loaded)."""
    own = _OWN_SCHEMAS.get((api_key, api_version))
    if own is not None:
        return own[0]
    return _load_schema(load_request_schema, "request", api_key, api_version)


@cache
def response_type(api_key: int, api_version: int) -> type[Any]:
    """kio's response class for api/version (raises ``UnsupportedVersion`` when kio has none,
    ``SchemaUnavailable`` when it has one that cannot be loaded)."""
    own = _OWN_SCHEMAS.get((api_key, api_version))
    if own is not None:
        return own[1]
    return _load_schema(load_response_schema, "response", api_key, api_version)


def _load_schema(load: Callable[[int, int], type[Any]], kind: str, api_key: int, api_version: int) -> type[Any]:
    """``load(api_key, api_version)``, telling a schema kio does not have (its index has no entry,
    or the module or class it names does not exist) from one whose import failed."""
    try:
        return load(api_key, api_version)
    except (KioIndexError, AttributeError) as exc:
        raise UnsupportedVersion(f"no {kind} schema for api {api_key} v{api_version}") from exc
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("kio.schema"):
            raise UnsupportedVersion(f"no {kind} schema for api {api_key} v{api_version}") from exc
        cause: Exception = exc
    except Exception as exc:  # EMFILE, an I/O or a syntax error inside kio: the broker's problem
        cause = exc
    code = errno.errorcode.get(cause.errno, "") if isinstance(cause, OSError) and cause.errno else ""
    message = f"cannot load the {kind} schema for api {api_key} v{api_version}: {cause!r}" + (
        f" ({code})" if code else ""
    )
    raise SchemaUnavailable(message) from cause


# Callers hold the classes they pass to these cached lookups as bare ``type``: mypy does not treat
# ``type[Any]`` as Hashable, which ``functools.cache`` demands (python/mypy#11470).
@cache
def _reader(cls: type[Any]) -> Any:
    return entity_reader(cls)


@cache
def _writer(cls: type[Any]) -> Any:
    return entity_writer(cls)


def _readonly(buf: Buffer) -> bytes | memoryview:
    # kio's native readers refuse writable buffers
    if isinstance(buf, bytes):
        return buf
    return memoryview(buf).toreadonly()


def is_native_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a panic of kio's native (Rust, pyo3) code: pyo3 raises it as a
    ``BaseException`` (so ``except Exception`` misses it), e.g. when an allocation fails while
    decoding a huge request under a memory limit. It is the request's failure, not the broker's:
    the callers turn it into InvalidRequest or close the one connection."""
    kind = type(exc)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


def _kio_decode(cls: type, buf: Buffer, offset: int, what: str) -> Any:
    # kio's native reader must never see an implausible length, nor a tag it does not know
    stripped = check_message(cls, buf, offset)
    if stripped is not None:  # unknown tagged fields (KIP-482): kio reads a copy without them
        buf, offset = stripped, 0
    try:
        value, consumed = _reader(cls)(_readonly(buf), offset)
    except (DecodeError, ValueError, TypeError, IndexError, OverflowError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"cannot decode {what}: {exc}") from None
    except Exception as exc:  # kio's native reader raises a few other types on garbage
        raise InvalidRequest(f"cannot decode {what}: {type(exc).__name__}: {exc}") from None
    except BaseException as exc:
        if not is_native_panic(exc):
            raise
        raise InvalidRequest(f"cannot decode {what}: kio panicked: {exc}") from None
    if offset + consumed != len(buf):
        raise InvalidRequest(f"{len(buf) - offset - consumed} unexpected bytes after {what}")
    return value


# -- server direction ---------------------------------------------------------------------------


def decode_request(api_key: int, api_version: int, frame: Buffer, offset: int) -> Any:
    """The request body in ``frame`` from ``offset`` (the header's ``body_offset``).

    Produce gives a :class:`~odradek.protocol.produce.ProduceRequestData` (any advertised
    version, so v0-2 can be answered with UNSUPPORTED_VERSION), Fetch a
    :class:`~odradek.protocol.fetch.FetchRequestData`; everything else a kio request.
    Raises ``UnsupportedVersion`` for versions outside the table, ``InvalidRequest`` for bytes
    that do not decode (or leave bytes over).
    """
    rng = SUPPORTED_VERSIONS.get(api_key)
    if rng is None or api_version not in rng:
        raise UnsupportedVersion(f"api {api_key} v{api_version} is not supported")
    if api_key == ApiKey.PRODUCE:
        return decode_produce_request(api_version, frame, offset)
    if api_key == ApiKey.FETCH:
        return decode_fetch_request(api_version, frame, offset)
    if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        frame = _without_trailing_zero(frame, offset)
    elif api_key == ApiKey.METADATA and api_version >= 9:
        frame = _librdkafka_all_topics(api_version, frame, offset)
    return _kio_decode(request_type(api_key, api_version), frame, offset, f"api {api_key} v{api_version} request")


def _librdkafka_all_topics(api_version: int, frame: Buffer, offset: int) -> Buffer:
    """librdkafka (2.x) asks a flexible Metadata (v9+) for all topics with the topic array's
    placeholder left as it reserved it, a 4-byte int32 0, where a one-byte compact null belongs.
    Kafka's parser reads the first zero as the null array and the next three as the two flags
    and an empty tag buffer, and never looks at the real ones that follow. Here the three
    surplus zeros are dropped when the message does not parse as it is and parses without them,
    so the request means what librdkafka meant: every topic, with its own flags. A message
    that parses without them can only be that: a genuine one starting with four zeros (null
    topics, false flags, no tags) ends there or carries tagged fields after its tag count."""
    view = memoryview(frame)
    if bytes(view[offset : offset + 4]) != b"\x00\x00\x00\x00":
        return frame
    repaired = bytes(view[: offset + 1]) + bytes(view[offset + 4 :])
    try:
        check_message(request_type(ApiKey.METADATA, api_version), repaired, offset)
    except InvalidRequest:
        return frame
    return repaired


def _without_trailing_zero(frame: Buffer, offset: int) -> Buffer:
    """librdkafka (2.x, confluent-kafka's ``alter_user_scram_credentials``) ends its
    AlterUserScramCredentials request with one empty tagged-field byte too many, which Kafka's
    parser, reading no further than the message, never notices. One extra zero byte is dropped
    when the message ends before it (anything else stays an error)."""
    view = memoryview(frame)
    if len(view) and view[-1] == 0:
        try:
            check_message(request_type(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0), view[:-1], offset)
        except InvalidRequest:
            return frame
        return view[:-1]
    return frame


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    """A response frame (header + body, no size prefix) for a request of api/version."""
    out = io.BytesIO()
    out.write(encode_response_header(api_key, api_version, correlation_id))
    if isinstance(response, ProduceResponseData):
        out.write(encode_produce_response(api_version, response))
    elif isinstance(response, MetadataResponseData):
        if api_key != ApiKey.METADATA or response.version != api_version:
            raise TypeError(f"a Metadata v{response.version} body answers api {api_key} v{api_version}")
        out.write(encode_metadata_response(response))
    else:
        expected: type = response_type(api_key, api_version)
        write = _writer(expected)  # before the identity test, which narrows ``expected`` back to type[Any]
        if type(response) is not expected:
            raise TypeError(f"api {api_key} v{api_version} needs a {expected.__module__}.{expected.__name__}")
        write(out, response)
    return out.getvalue()


def produce_error_response(request: ProduceRequestData, code: ErrorCode) -> ProduceResponseData:
    """``code`` for every partition of a Produce request."""
    from .produce import PartitionProduceResponse, TopicProduceResponse

    return ProduceResponseData(
        [
            TopicProduceResponse(t.name, [PartitionProduceResponse(p.index, int(code)) for p in t.partition_data])
            for t in request.topic_data
        ]
    )


def produce_unsupported_response(request: ProduceRequestData) -> ProduceResponseData:
    """UNSUPPORTED_VERSION for every partition of a Produce request the broker does not serve."""
    return produce_error_response(request, ErrorCode.UNSUPPORTED_VERSION)


def produce_version_implemented(api_version: int) -> bool:
    """Whether the broker serves this Produce version (older advertised ones are refused)."""
    return api_version in PRODUCE_IMPLEMENTED


# -- ApiVersions --------------------------------------------------------------------------------


def api_versions_response(api_version: int, advertised: dict[int, VersionRange], error_code: int = 0) -> Any:
    """A kio ApiVersions response of ``api_version`` (0-4) listing ``advertised``."""
    cls = response_type(ApiKey.API_VERSIONS, api_version)
    module = __import__(cls.__module__, fromlist=["ApiVersion"])
    keys = tuple(module.ApiVersion(api_key=k, min_version=r.min, max_version=r.max) for k, r in advertised.items())
    kwargs: dict[str, Any] = {"error_code": kio_error(error_code), "api_keys": keys}
    if api_version >= 1:
        kwargs["throttle_time"] = timedelta_ms(0)
    return cls(**kwargs)


def api_versions_fallback(correlation_id: int, advertised: dict[int, VersionRange]) -> bytes:
    """The frame answering an ApiVersions request of a version the broker does not know.

    Kafka's rule (KIP-511, ``ApiVersionsRequest.getErrorResponse``): do not parse the body;
    answer with header v0 and a *v0* body carrying UNSUPPORTED_VERSION and one key, ApiVersions
    with its range, so the client can retry with a version both know.
    """
    own = advertised.get(ApiKey.API_VERSIONS, SUPPORTED_VERSIONS[ApiKey.API_VERSIONS])
    out = bytearray(_I32.pack(correlation_id))
    out += _I16.pack(ErrorCode.UNSUPPORTED_VERSION)
    out += _I32.pack(1)
    out += _API_VERSION_V0.pack(ApiKey.API_VERSIONS, own.min, own.max)
    return bytes(out)


# -- client direction ---------------------------------------------------------------------------


def encode_request(request: Any, *, correlation_id: int, client_id: str | None) -> bytes:
    """A request frame (header + body, no size prefix) for a kio request or ``ProduceRequestData``."""
    if isinstance(request, ProduceRequestData):
        body = encode_produce_request(request)
        return encode_request_header(ApiKey.PRODUCE, request.version, correlation_id, client_id) + body
    api_key, api_version = int(request.__api_key__), int(request.__version__)
    out = io.BytesIO()
    out.write(encode_request_header(api_key, api_version, correlation_id, client_id))
    request_cls: type = type(request)
    _writer(request_cls)(out, request)
    return out.getvalue()


def decode_response(api_key: int, api_version: int, frame: Buffer) -> tuple[int, Any]:
    """(correlation_id, response) from a response frame to a request of api/version.

    Produce responses decode to :class:`~odradek.protocol.produce.ProduceResponseData`. An
    ApiVersions reply with UNSUPPORTED_VERSION is read as the v0 body the broker falls back to.
    """
    correlation_id, pos = parse_response_header(api_key, api_version, frame)
    if api_key == ApiKey.PRODUCE:
        try:
            return correlation_id, decode_produce_response(api_version, frame, pos)
        except (struct.error, InvalidRequest) as exc:
            raise InvalidRequest(f"cannot decode Produce v{api_version} response: {exc}") from None
    if api_key == ApiKey.API_VERSIONS and api_version > 0 and len(frame) >= pos + 2:
        (error,) = _I16.unpack_from(frame, pos)
        if error == ErrorCode.UNSUPPORTED_VERSION:
            api_version = 0
    cls = response_type(api_key, api_version)
    return correlation_id, _kio_decode(cls, frame, pos, f"api {api_key} v{api_version} response")


__all__ = [
    "SchemaUnavailable",
    "api_versions_fallback",
    "api_versions_response",
    "datetime_ms",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "is_native_panic",
    "kio_error",
    "ms",
    "produce_error_response",
    "produce_unsupported_response",
    "produce_version_implemented",
    "request_type",
    "response_type",
    "timedelta_ms",
]
