"""Handlers for KIP-554's SCRAM credential APIs: DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51), over the users' entity configs in the metadata store (see
:mod:`odradek.security.scram_admin` for Kafka's rules). Any broker answers both: the store is
shared, so a user created through one broker authenticates at every other.
"""

from __future__ import annotations

from typing import Any

from odradek.errors import ErrorCode
from odradek.protocol import ApiKey
from odradek.security.scram_admin import (
    ScramUpsertion,
    alter_user_scram_credentials,
    describe_user_scram_credentials,
)

from . import Handler, RequestContext
from ._kio import NO_THROTTLE, kerr, make, response_class


async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    users = None if request.users is None else [u.name for u in request.users]
    results = await describe_user_scram_credentials(ctx.broker.scram_credentials, users)
    result_cls = response_class(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, version, "DescribeUserScramCredentialsResult")
    info_cls = response_class(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, version, "CredentialInfo")
    return make(
        response_class(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, version),
        throttle_time=NO_THROTTLE,
        error_code=kerr(ErrorCode.NONE),
        error_message=None,
        results=tuple(
            make(
                result_cls,
                user=r.user,
                error_code=kerr(r.error),
                error_message=r.message,
                credential_infos=tuple(
                    make(info_cls, mechanism=m, iterations=i) for m, i in sorted(r.credentials.items())
                ),
            )
            for r in results
        ),
    )


async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    results = await alter_user_scram_credentials(
        ctx.broker.scram_credentials,
        [(d.name, int(d.mechanism)) for d in request.deletions],
        [
            ScramUpsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password))
            for u in request.upsertions
        ],
    )
    result_cls = response_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, version, "AlterUserScramCredentialsResult")
    return make(
        response_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, version),
        throttle_time=NO_THROTTLE,
        results=tuple(
            make(result_cls, user=r.user, error_code=kerr(r.error), error_message=r.message) for r in results
        ),
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Handler(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, handle_describe_user_scram_credentials, ordered=False
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Handler(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, handle_alter_user_scram_credentials, ordered=True
    ),
}

__all__ = ["HANDLERS"]
