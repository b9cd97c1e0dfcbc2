"""Handlers for the ACL admin APIs (KIP-140): DescribeAcls, CreateAcls, DeleteAcls.

With an authorizer (``authorizer.class.name``) they describe, create and delete its ACLs (the
dispatcher has checked DESCRIBE, resp. ALTER, on the cluster first, see ``authz``). A binding or
filter Kafka refuses -- an unknown code, a pattern type other than LITERAL/PREFIXED in an ACL,
ANY or MATCH only in filters, a principal that is not ``<type>:<name>`` -- is INVALID_REQUEST
for that binding or filter, with the reason.

Without one, as Kafka without ``authorizer.class.name``, the APIs are still served: they answer
SECURITY_DISABLED, so ``kafka-acls.sh`` and the admin clients' ``describe_acls`` /
``create_acls`` / ``delete_acls`` report "security is disabled". Not advertising them instead made
clients report a broker too old for ACLs (librdkafka: "requires broker version >= 0.11.0.0";
kafka-python: IncompatibleBrokerVersion), which sends operators looking for the wrong cause.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kio.static.primitive import i8

from odradek.errors import ErrorCode
from odradek.protocol import ApiKey
from odradek.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclError,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    operation,
    pattern_type,
    permission_type,
    resource_type,
    validate_filter,
)

from . import Handler, RequestContext
from ._kio import NO_THROTTLE, error_of, kerr, make, response_class
from .authz import auth_context, authorizer_of

T = TypeVar("T")

#: Kafka's messages (``AclApis``): DescribeAcls words it differently from the other two
DESCRIBE_MESSAGE = "No Authorizer is configured on the broker"
ALTER_MESSAGE = "No Authorizer is configured."


def _filter(item: Any) -> AclBindingFilter:
    """The filter of a DescribeAcls request or a DeleteAcls filter (v0 has only LITERAL)."""
    acl_filter = AclBindingFilter(
        ResourcePatternFilter(
            resource_type(item.resource_type_filter),
            item.resource_name_filter,
            pattern_type(getattr(item, "pattern_type_filter", PatternType.LITERAL)),
        ),
        AccessControlEntryFilter(
            item.principal_filter, item.host_filter, operation(item.operation), permission_type(item.permission_type)
        ),
    )
    validate_filter(acl_filter)
    return acl_filter


def _binding(item: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            resource_type(item.resource_type),
            item.resource_name,
            pattern_type(getattr(item, "resource_pattern_type", PatternType.LITERAL)),
        ),
        AccessControlEntry(item.principal, item.host, operation(item.operation), permission_type(item.permission_type)),
    )


def _parse_each(items: Sequence[Any], parse: Callable[[Any], T]) -> tuple[list[Exception | None], list[tuple[int, T]]]:
    """Each wire item parsed: an error per item (its AclError, else None for now) and the
    parsed ones with their index, for the authorizer to act on in one call."""
    errors: list[Exception | None] = [None] * len(items)
    parsed: list[tuple[int, T]] = []
    for i, item in enumerate(items):
        try:
            parsed.append((i, parse(item)))
        except AclError as exc:
            errors[i] = exc
    return errors, parsed


def _error_message(exc: Exception) -> str:
    return str(exc) if isinstance(exc, AclError) else f"{type(exc).__name__}: {exc}"


def _error_code(exc: Exception) -> ErrorCode:
    return ErrorCode.INVALID_REQUEST if isinstance(exc, AclError) else error_of(exc)


async def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    """The ACLs the filter matches, grouped by resource pattern; without an authorizer
    SECURITY_DISABLED for the whole request, no resources: there are no ACLs to match."""
    authorizer = authorizer_of(ctx)
    version = ctx.api_version
    if authorizer is not None:
        cls = response_class(ApiKey.DESCRIBE_ACLS, version)
        try:
            acl_filter = _filter(request)
        except AclError as exc:
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=kerr(ErrorCode.INVALID_REQUEST),
                error_message=str(exc),
                resources=(),
            )
        by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
        for binding in authorizer.acls(acl_filter):
            by_pattern.setdefault(binding.pattern, []).append(binding.entry)
        resource_cls = response_class(ApiKey.DESCRIBE_ACLS, version, "DescribeAclsResource")
        acl_cls = response_class(ApiKey.DESCRIBE_ACLS, version, "AclDescription")
        resources = tuple(
            make(
                resource_cls,
                resource_type=_i8(p.resource_type),
                resource_name=p.name,
                pattern_type=_i8(p.pattern_type),
                acls=tuple(
                    make(
                        acl_cls,
                        principal=e.principal,
                        host=e.host,
                        operation=_i8(e.operation),
                        permission_type=_i8(e.permission_type),
                    )
                    for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission_type))
                ),
            )
            for p, entries in sorted(by_pattern.items(), key=lambda kv: (kv[0].resource_type, kv[0].name))
        )
        return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(ErrorCode.NONE), error_message=None,
                    resources=resources)  # fmt: skip
    return make(
        response_class(ApiKey.DESCRIBE_ACLS, ctx.api_version),
        throttle_time=NO_THROTTLE,
        error_code=kerr(ErrorCode.SECURITY_DISABLED),
        error_message=DESCRIBE_MESSAGE,
        resources=(),
    )


async def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    """Create each ACL (one result per creation, in request order); without an authorizer
    SECURITY_DISABLED for each."""
    version = ctx.api_version
    result_cls = response_class(ApiKey.CREATE_ACLS, version, "AclCreationResult")
    authorizer = authorizer_of(ctx)
    if authorizer is not None:
        errors, bindings = _parse_each(request.creations, _binding)
        created = await authorizer.create_acls(auth_context(ctx), [b for _, b in bindings])
        for (i, _), result in zip(bindings, created, strict=True):
            errors[i] = result.error
        answers = tuple(
            make(result_cls, error_code=kerr(ErrorCode.NONE), error_message=None)
            if e is None
            else make(result_cls, error_code=kerr(_error_code(e)), error_message=_error_message(e))
            for e in errors
        )
        return make(response_class(ApiKey.CREATE_ACLS, version), throttle_time=NO_THROTTLE, results=answers)
    results = tuple(
        make(result_cls, error_code=kerr(ErrorCode.SECURITY_DISABLED), error_message=ALTER_MESSAGE)
        for _ in request.creations
    )
    return make(response_class(ApiKey.CREATE_ACLS, version), throttle_time=NO_THROTTLE, results=results)


async def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    """Delete what each filter matches (one result per filter, in request order, listing the
    ACLs it deleted); without an authorizer SECURITY_DISABLED for each, none matching."""
    version = ctx.api_version
    result_cls = response_class(ApiKey.DELETE_ACLS, version, "DeleteAclsFilterResult")
    authorizer = authorizer_of(ctx)
    if authorizer is not None:
        return await _delete_acls(ctx, authorizer, request)
    results = tuple(
        make(
            result_cls,
            error_code=kerr(ErrorCode.SECURITY_DISABLED),
            error_message=ALTER_MESSAGE,
            matching_acls=(),
        )
        for _ in request.filters
    )
    return make(response_class(ApiKey.DELETE_ACLS, version), throttle_time=NO_THROTTLE, filter_results=results)


async def _delete_acls(ctx: RequestContext, authorizer: Any, request: Any) -> Any:
    version = ctx.api_version
    result_cls = response_class(ApiKey.DELETE_ACLS, version, "DeleteAclsFilterResult")
    matching_cls = response_class(ApiKey.DELETE_ACLS, version, "DeleteAclsMatchingAcl")
    errors, filters = _parse_each(request.filters, _filter)
    deleted: list[tuple[AclBinding, ...]] = [()] * len(request.filters)
    results = await authorizer.delete_acls(auth_context(ctx), [f for _, f in filters])
    for (i, _), result in zip(filters, results, strict=True):
        errors[i], deleted[i] = result.error, result.deleted
    answers = []
    for error, bindings in zip(errors, deleted, strict=True):
        matching = tuple(
            make(
                matching_cls,
                error_code=kerr(ErrorCode.NONE),
                error_message=None,
                resource_type=_i8(b.pattern.resource_type),
                resource_name=b.pattern.name,
                pattern_type=_i8(b.pattern.pattern_type),
                principal=b.entry.principal,
                host=b.entry.host,
                operation=_i8(b.entry.operation),
                permission_type=_i8(b.entry.permission_type),
            )
            for b in bindings
        )
        code = ErrorCode.NONE if error is None else _error_code(error)
        message = None if error is None else _error_message(error)
        answers.append(make(result_cls, error_code=kerr(code), error_message=message, matching_acls=matching))
    return make(response_class(ApiKey.DELETE_ACLS, version), throttle_time=NO_THROTTLE, filter_results=tuple(answers))


def _i8(value: int) -> Any:
    return i8(int(value))


HANDLERS: dict[int, Handler] = {
    # creating and deleting change the ACLs: in order, so a pipelined DescribeAcls sees them
    ApiKey.DESCRIBE_ACLS: Handler(ApiKey.DESCRIBE_ACLS, handle_describe_acls, ordered=False),
    ApiKey.CREATE_ACLS: Handler(ApiKey.CREATE_ACLS, handle_create_acls, ordered=True),
    ApiKey.DELETE_ACLS: Handler(ApiKey.DELETE_ACLS, handle_delete_acls, ordered=True),
}

__all__ = ["HANDLERS"]
