"""Small helpers to build kio responses in a version-independent way.

kio has one module per API version, whose classes share names across versions but differ in
fields. Handlers build responses with :func:`make`, passing every field any version has; the
fields a version lacks are dropped, so one handler serves every version.
"""

from __future__ import annotations

import sys
from dataclasses import fields, is_dataclass, replace
from functools import cache
from typing import Any

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import kio_error, response_type, timedelta_ms
from odradek.sessions import MetadataUnavailable


# ``make``/``has_field`` take a bare ``type``: mypy does not treat ``type[Any]`` as Hashable, which
# the cached ``_field_names`` demands (python/mypy#11470).
@cache
def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def make(cls: type, **values: Any) -> Any:
    """``cls(**values)`` keeping only the fields ``cls`` has."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)


def response_class(api_key: int, api_version: int, name: str | None = None) -> type[Any]:
    """The response class of api/version, or the nested class ``name`` from its module."""
    cls = response_type(api_key, api_version)
    if name is None:
        return cls
    nested: type[Any] = getattr(sys.modules[cls.__module__], name)
    return nested


#: ``throttle_time`` of every response: odradek has no quotas, so no request is ever throttled
NO_THROTTLE = timedelta_ms(0)


def with_throttle_time(response: Any, throttle_ms: int) -> Any:
    """``response`` carrying at least ``throttle_ms`` as its throttle time (a request quota's
    throttle on top of whatever the handler put there, as Kafka takes the larger one); a
    response without the field (an old version) as it is."""
    current = getattr(response, "throttle_time_ms", None)
    if isinstance(current, int):  # odradek's own Produce, Fetch and Metadata responses
        return replace(response, throttle_time_ms=max(current, throttle_ms))
    if is_dataclass(response) and not isinstance(response, type) and has_field(type(response), "throttle_time"):
        old = getattr(response, "throttle_time", None)
        old_ms = int(old.total_seconds() * 1000) if old is not None else 0
        return replace(response, throttle_time=timedelta_ms(max(old_ms, throttle_ms)))
    return response


def error_of(exc: BaseException) -> ErrorCode:
    """The Kafka error code for an exception raised by the core (unknown ones: UNKNOWN_SERVER_ERROR).

    The metadata store out of reach is REQUEST_TIMED_OUT, what a ZooKeeper-mode Kafka broker's
    admin requests end with while ZooKeeper is away: retriable, so clients try again."""
    if isinstance(exc, KafkaError):
        return exc.code
    if isinstance(exc, MetadataUnavailable):
        return ErrorCode.REQUEST_TIMED_OUT
    return ErrorCode.UNKNOWN_SERVER_ERROR


def kerr(code: int) -> Any:
    """kio's ErrorCode for a Kafka code (what kio's error_code fields hold)."""
    return kio_error(int(code))


__all__ = ["NO_THROTTLE", "error_of", "has_field", "kerr", "make", "response_class", "with_throttle_time"]
