"""Building kio request objects of any version from plain values, and reading responses.

The client decides *what* to ask (a Metadata request for these topics) before it knows *which
version* the broker speaks; kio has one dataclass per version with fields that come and go
(``group_instance_id`` appears in JoinGroup v5). :func:`make_request` takes the request's fields
as keyword arguments in kio's names -- nested structures as plain dicts or lists of dicts -- and
builds the class for the negotiated version, keeping only the fields that version has. Durations
(kio's ``timedelta`` fields) are given as integer milliseconds, timestamps as ms since the epoch.
Produce is not built here: it has its own hand-written codec (:mod:`odradek.protocol.produce`).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, TypeAlias

from ..errors import ErrorCode, KafkaError
from ..protocol import request_type

if TYPE_CHECKING:
    from .connection import BrokerConnection

#: What ``NetworkClient.send`` takes: builds the request once the connection's versions are known.
RequestBuilder: TypeAlias = "Callable[[BrokerConnection], Any]"

_MISSING = dataclasses.MISSING


class _Kind(enum.Enum):
    PLAIN = 0
    ENTITY = 1
    ENTITIES = 2
    DURATION = 3
    TIMESTAMP = 4


@cache
def _plan(cls: type[Any]) -> tuple[tuple[str, _Kind, Any, bool], ...]:
    """(field name, kind, nested class, required) for every field of a kio dataclass."""
    hints = typing.get_type_hints(cls)
    out: list[tuple[str, _Kind, Any, bool]] = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        kafka_type = f.metadata.get("kafka_type")
        required = f.default is _MISSING and f.default_factory is _MISSING
        args = typing.get_args(tp)
        if typing.get_origin(tp) in (typing.Union, types.UnionType):  # Optional[...]: look inside
            inner = [a for a in args if a is not type(None)]
            if len(inner) == 1:
                tp = inner[0]
                args = typing.get_args(tp)
        if kafka_type in ("timedelta_i32", "timedelta_i64"):
            out.append((f.name, _Kind.DURATION, None, required))
        elif kafka_type == "datetime_i64":
            out.append((f.name, _Kind.TIMESTAMP, None, required))
        elif typing.get_origin(tp) is tuple and args and dataclasses.is_dataclass(args[0]):
            out.append((f.name, _Kind.ENTITIES, args[0], required))
        elif dataclasses.is_dataclass(tp):
            out.append((f.name, _Kind.ENTITY, tp, required))
        else:
            nested = next((a for a in args if dataclasses.is_dataclass(a)), None)
            if nested is not None:  # Optional[Entity]
                out.append((f.name, _Kind.ENTITY, nested, required))
            else:
                out.append((f.name, _Kind.PLAIN, None, required))
    return tuple(out)


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """An instance of kio dataclass ``cls`` from ``values``; keys the class lacks are dropped
    (they belong to other versions), missing required fields raise ``TypeError`` naming them."""
    # ``cls`` is a bare ``type``: mypy does not see ``type[Any]`` as Hashable (python/mypy#11470),
    # which the cached ``_plan`` requires of its argument.
    kwargs: dict[str, Any] = {}
    for name, kind, nested, required in _plan(cls):
        if name not in values:
            if required:
                raise TypeError(f"{cls.__module__}.{cls.__name__} needs field {name!r}")
            continue
        value = values[name]
        if kind is _Kind.PLAIN or value is None:
            kwargs[name] = value
        elif kind is _Kind.ENTITIES:
            kwargs[name] = tuple(v if isinstance(v, nested) else build(nested, v) for v in value)
        elif kind is _Kind.ENTITY:
            kwargs[name] = value if isinstance(value, nested) else build(nested, value)
        elif kind is _Kind.DURATION:
            kwargs[name] = value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)
        else:
            kwargs[name] = (
                value
                if isinstance(value, datetime.datetime)
                else datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)
            )
    return cls(**kwargs)


def make_request(api_key: int, version: int, **fields: Any) -> Any:
    """The kio request of ``api_key`` at ``version`` holding ``fields`` (see module doc)."""
    return build(request_type(api_key, version), fields)


def request_builder(
    api_key: int, *, min_version: int | None = None, max_version: int | None = None, **fields: Any
) -> RequestBuilder:
    """A ``build(conn)`` for ``NetworkClient.send``: the request of ``api_key`` at the highest version
    both sides speak (within the bounds) holding ``fields``, which are fixed when the builder is made."""

    def build(conn: BrokerConnection) -> Any:
        return make_request(api_key, conn.version(api_key, min_version=min_version, max_version=max_version), **fields)

    return build


def error_code(value: Any) -> ErrorCode:
    """A response field's error code (kio's enum or an int) as odradek's :class:`ErrorCode`."""
    raw = value.value if isinstance(value, enum.Enum) else int(value)
    try:
        return ErrorCode(raw)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def error_or_none(value: Any, what: str, message: str | None = None) -> KafkaError | None:
    """The KafkaError of a response's error code field, named ``<what>: <CODE> (<message>)``;
    None for NONE (a per-item result of a batch call)."""
    code = error_code(value)
    if code is ErrorCode.NONE:
        return None
    return KafkaError(f"{what}: {code.name}" + (f" ({message})" if message else ""), code=code)


def raise_for(value: Any, what: str, message: str | None = None) -> None:
    """Raise the KafkaError for a non-zero error code field (``what`` says where it came from)."""
    code = error_code(value)
    if code is not ErrorCode.NONE:
        detail = f": {message}" if message else ""
        raise KafkaError(f"{what} failed with {code.name}{detail}", code=code)


def millis(value: Any) -> int:
    """Milliseconds of a kio duration or timestamp field (-1 for None); ints pass through."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)
