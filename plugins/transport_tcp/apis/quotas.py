"""Handlers for KIP-546's client quota APIs: DescribeClientQuotas (48) and AlterClientQuotas (49).

Over the quota entity configs in the metadata store (Kafka's rules are
:mod:`odradek.broker.quota_admin`'s). Any broker answers both: every broker's quota cache follows
the store, so a quota altered through one is enforced by all.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.quota_admin import (
    QuotaAlteration,
    QuotaOp,
    QuotaRequestError,
    alter_client_quotas,
    describe_client_quotas,
)
from odradek.errors import ErrorCode
from odradek.protocol import ApiKey

from . import Handler, RequestContext
from ._kio import NO_THROTTLE, kerr, make, response_class


async def handle_describe_client_quotas(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    cls = response_class(ApiKey.DESCRIBE_CLIENT_QUOTAS, version)
    try:
        described = await describe_client_quotas(
            ctx.broker.store,
            [(c.entity_type, int(c.match_type), c.match) for c in request.components],
            strict=bool(request.strict),
        )
    except QuotaRequestError as exc:
        return make(cls, throttle_time=NO_THROTTLE, error_code=kerr(exc.code), error_message=str(exc), entries=None)
    entry_cls = response_class(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, "EntryData")
    entity_cls = response_class(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, "EntityData")
    value_cls = response_class(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, "ValueData")
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=kerr(ErrorCode.NONE),
        error_message=None,
        entries=tuple(
            make(
                entry_cls,
                entity=tuple(make(entity_cls, entity_type=t, entity_name=n) for t, n in d.entity),
                values=tuple(make(value_cls, key=k, value=v) for k, v in sorted(d.values.items())),
            )
            for d in described
        ),
    )


async def handle_alter_client_quotas(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    alterations = [
        QuotaAlteration(
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            tuple(QuotaOp(op.key, float(op.value), bool(op.remove)) for op in entry.ops),
        )
        for entry in request.entries
    ]
    quotas = getattr(ctx.broker, "quotas", None)
    results = await alter_client_quotas(
        ctx.broker.store,
        alterations,
        validate_only=bool(request.validate_only),
        cache=None if quotas is None else quotas.configs,
        ip_cache=getattr(ctx.broker, "ip_connection_rates", None),
    )
    entry_cls = response_class(ApiKey.ALTER_CLIENT_QUOTAS, version, "EntryData")
    entity_cls = response_class(ApiKey.ALTER_CLIENT_QUOTAS, version, "EntityData")
    return make(
        response_class(ApiKey.ALTER_CLIENT_QUOTAS, version),
        throttle_time=NO_THROTTLE,
        entries=tuple(
            make(
                entry_cls,
                error_code=kerr(r.error),
                error_message=r.message,
                entity=tuple(make(entity_cls, entity_type=t, entity_name=n) for t, n in r.entity),
            )
            for r in results
        ),
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_CLIENT_QUOTAS: Handler(ApiKey.DESCRIBE_CLIENT_QUOTAS, handle_describe_client_quotas, ordered=False),
    ApiKey.ALTER_CLIENT_QUOTAS: Handler(ApiKey.ALTER_CLIENT_QUOTAS, handle_alter_client_quotas, ordered=True),
}

__all__ = ["HANDLERS"]
