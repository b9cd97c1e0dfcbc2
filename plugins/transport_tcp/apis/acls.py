"""Handlers for the ACL admin APIs (KIP-140): DescribeAcls, CreateAcls, DeleteAcls.

odradek has no authorizer, and Kafka without one (no ``authorizer.class.name``) still serves these
APIs: it answers SECURITY_DISABLED, so ``kafka-acls.sh`` and the admin clients' ``describe_acls`` /
``create_acls`` / ``delete_acls`` report "security is disabled". Not advertising them instead made
clients report a broker too old for ACLs (librdkafka: "requires broker version >= 0.11.0.0";
kafka-python: IncompatibleBrokerVersion), which sends operators looking for the wrong cause.
"""

from __future__ import annotations

from typing import Any

from odradek.errors import ErrorCode
from odradek.protocol import ApiKey

from . import Handler, RequestContext
from ._kio import NO_THROTTLE, kerr, make, response_class

#: Kafka's messages (``AclApis``): DescribeAcls words it differently from the other two
DESCRIBE_MESSAGE = "No Authorizer is configured on the broker"
ALTER_MESSAGE = "No Authorizer is configured."


async def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    """SECURITY_DISABLED for the whole request, no resources: there are no ACLs to match."""
    return make(
        response_class(ApiKey.DESCRIBE_ACLS, ctx.api_version),
        throttle_time=NO_THROTTLE,
        error_code=kerr(ErrorCode.SECURITY_DISABLED),
        error_message=DESCRIBE_MESSAGE,
        resources=(),
    )


async def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    """SECURITY_DISABLED for each ACL the request would create, in request order."""
    version = ctx.api_version
    result_cls = response_class(ApiKey.CREATE_ACLS, version, "AclCreationResult")
    results = tuple(
        make(result_cls, error_code=kerr(ErrorCode.SECURITY_DISABLED), error_message=ALTER_MESSAGE)
        for _ in request.creations
    )
    return make(response_class(ApiKey.CREATE_ACLS, version), throttle_time=NO_THROTTLE, results=results)


async def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    """SECURITY_DISABLED for each filter, none matching anything, in request order."""
    version = ctx.api_version
    result_cls = response_class(ApiKey.DELETE_ACLS, version, "DeleteAclsFilterResult")
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


HANDLERS: dict[int, Handler] = {
    # no state is read or changed: the answer is the same whatever ran before
    ApiKey.DESCRIBE_ACLS: Handler(ApiKey.DESCRIBE_ACLS, handle_describe_acls, ordered=False),
    ApiKey.CREATE_ACLS: Handler(ApiKey.CREATE_ACLS, handle_create_acls, ordered=False),
    ApiKey.DELETE_ACLS: Handler(ApiKey.DELETE_ACLS, handle_delete_acls, ordered=False),
}

__all__ = ["HANDLERS"]
