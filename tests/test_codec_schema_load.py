"""Schema lookup: a schema kio does not have is an unsupported version (the client's doing); one
that cannot be loaded (EMFILE during kio's lazy import) is the broker's trouble, named as such."""

from __future__ import annotations

import errno
from typing import Any

import pytest
from kio.index import UnknownEntity

from odradek.errors import UnsupportedVersion
from odradek.protocol import ApiKey, codec
from odradek.protocol.codec import SchemaUnavailable


def _failing(exc: BaseException) -> Any:
    def load(api_key: int, api_version: int) -> Any:
        raise exc

    return load


@pytest.mark.parametrize(
    "exc",
    [
        UnknownEntity("no such version"),
        ModuleNotFoundError("No module named 'kio.schema.list_groups.v99'", name="kio.schema.list_groups.v99"),
        AttributeError("module has no attribute 'ListGroupsRequest'"),
    ],
)
def test_a_schema_kio_does_not_have_is_an_unsupported_version(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    monkeypatch.setattr(codec, "load_request_schema", _failing(exc))
    monkeypatch.setattr(codec, "load_response_schema", _failing(exc))
    with pytest.raises(UnsupportedVersion, match="no request schema for api 16 v0"):
        codec.request_type.__wrapped__(ApiKey.LIST_GROUPS, 0)
    with pytest.raises(UnsupportedVersion, match="no response schema for api 16 v0"):
        codec.response_type.__wrapped__(ApiKey.LIST_GROUPS, 0)


@pytest.mark.parametrize(
    ("exc", "named"),
    [
        (OSError(errno.EMFILE, "Too many open files"), "EMFILE"),
        (ModuleNotFoundError("No module named 'kio.serial._native'", name="kio.serial._native"), "kio.serial._native"),
        (SyntaxError("bad"), "SyntaxError"),
    ],
)
def test_a_schema_that_cannot_be_loaded_names_the_cause(
    monkeypatch: pytest.MonkeyPatch, exc: Exception, named: str
) -> None:
    monkeypatch.setattr(codec, "load_request_schema", _failing(exc))
    with pytest.raises(SchemaUnavailable, match=named) as info:
        codec.request_type.__wrapped__(ApiKey.LIST_GROUPS, 0)
    assert not isinstance(info.value, UnsupportedVersion)
    assert "request schema for api 16 v0" in str(info.value)


def test_a_failed_load_is_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    real = codec.load_request_schema
    codec.request_type.cache_clear()
    monkeypatch.setattr(codec, "load_request_schema", _failing(OSError(errno.EMFILE, "Too many open files")))
    with pytest.raises(SchemaUnavailable):
        codec.request_type(ApiKey.LIST_GROUPS, 0)
    monkeypatch.setattr(codec, "load_request_schema", real)
    assert codec.request_type(ApiKey.LIST_GROUPS, 0).__name__ == "ListGroupsRequest"
