"""The admin client's ACL calls (KIP-140): DescribeAcls, CreateAcls, DeleteAcls.

Mixed into :class:`~odradek.client.admin.AsyncAdmin` (and so the blocking ``Admin``). Any broker
answers them -- an ACL goes to the metadata store and every broker's authorizer follows it -- so
they go to the least loaded one, retried on retriable errors like every admin call. Bindings and
filters are :mod:`odradek.security.acl`'s, the broker's own vocabulary; results come back per
binding or filter, ``None`` or the ``KafkaError``, as Kafka's ``Admin`` reports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import KafkaError
from ..protocol import ApiKey
from ..security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from .requests import RequestBuilder, error_or_none, raise_for, request_builder

#: the newest versions the client speaks (v2+ are flexible; v1 added pattern types)
_MAX_VERSION = 3


def _binding_of(resource: Any, entry: Any, pattern_type: Any) -> AclBinding:
    """The binding a response describes (``resource`` and ``entry`` may be one object)."""
    pattern = ResourcePattern(
        ResourceType(int(resource.resource_type)), resource.resource_name, PatternType(int(pattern_type))
    )
    operation, permission = AclOperation(int(entry.operation)), AclPermissionType(int(entry.permission_type))
    return AclBinding(pattern, AccessControlEntry(entry.principal, entry.host, operation, permission))


def _filter_fields(acl_filter: AclBindingFilter) -> dict[str, Any]:
    p, e = acl_filter.pattern, acl_filter.entry
    return {
        "resource_type_filter": int(p.resource_type),
        "resource_name_filter": p.name,
        "pattern_type_filter": int(p.pattern_type),
        "principal_filter": e.principal,
        "host_filter": e.host,
        "operation": int(e.operation),
        "permission_type": int(e.permission_type),
    }


class AclAdminMixin:
    """``describe_acls``, ``create_acls``, ``delete_acls`` for :class:`AsyncAdmin`."""

    if TYPE_CHECKING:  # provided by AsyncClient, which AsyncAdmin also derives from
        network: Any

        def _check_open(self) -> None: ...

        def _default_timeout(self, timeout: float | None) -> float: ...

    async def _to_any_broker(self, build: RequestBuilder, timeout: float | None, what: str) -> Any:
        async def attempt() -> Any:
            return await self.network.send_any(build)

        return await self.network.call_with_retries(attempt, timeout_s=self._default_timeout(timeout), what=what)

    async def describe_acls(
        self, acl_filter: AclBindingFilter = AclBindingFilter(), timeout: float | None = None
    ) -> list[AclBinding]:
        """The ACLs the filter matches (every ACL by default). Raises the broker's error:
        SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on
        the cluster, INVALID_REQUEST for a filter it refuses."""
        self._check_open()
        build = request_builder(ApiKey.DESCRIBE_ACLS, max_version=_MAX_VERSION, **_filter_fields(acl_filter))
        response = await self._to_any_broker(build, timeout, "describe ACLs")
        raise_for(response.error_code, "describe ACLs", response.error_message)
        return [
            _binding_of(resource, entry, getattr(resource, "pattern_type", PatternType.LITERAL))
            for resource in response.resources
            for entry in resource.acls
        ]

    async def create_acls(
        self, bindings: Sequence[AclBinding], timeout: float | None = None
    ) -> dict[AclBinding, KafkaError | None]:
        """Create ACLs; the outcome by binding (INVALID_REQUEST for one the broker refuses)."""
        self._check_open()
        creations = [
            {
                "resource_type": int(b.pattern.resource_type),
                "resource_name": b.pattern.name,
                "resource_pattern_type": int(b.pattern.pattern_type),
                "principal": b.entry.principal,
                "host": b.entry.host,
                "operation": int(b.entry.operation),
                "permission_type": int(b.entry.permission_type),
            }
            for b in bindings
        ]
        build = request_builder(ApiKey.CREATE_ACLS, min_version=1, max_version=_MAX_VERSION, creations=creations)
        response = await self._to_any_broker(build, timeout, "create ACLs")
        return {
            b: error_or_none(r.error_code, f"create ACL {b}", r.error_message)
            for b, r in zip(bindings, response.results, strict=True)
        }

    async def delete_acls(
        self, filters: Sequence[AclBindingFilter], timeout: float | None = None
    ) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
        """Delete the ACLs each filter matches; by filter, the ACLs it deleted or the error."""
        self._check_open()
        build = request_builder(
            ApiKey.DELETE_ACLS, min_version=1, max_version=_MAX_VERSION, filters=[_filter_fields(f) for f in filters]
        )
        response = await self._to_any_broker(build, timeout, "delete ACLs")
        out: dict[AclBindingFilter, list[AclBinding] | KafkaError] = {}
        for acl_filter, result in zip(filters, response.filter_results, strict=True):
            error = error_or_none(result.error_code, "delete ACLs", result.error_message)
            out[acl_filter] = (
                error if error is not None else [_binding_of(m, m, m.pattern_type) for m in result.matching_acls]
            )
        return out


__all__ = ["AclAdminMixin"]
