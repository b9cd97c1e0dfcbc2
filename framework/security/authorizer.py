"""The authorizer role: Kafka's ``org.apache.kafka.server.authorizer.Authorizer`` as an odradek plugin.

A plugin offers :class:`AuthorizerFactory` objects through ``odradek_register_authorizers``; the
broker builds the one ``authorizer.class.name`` names (empty: no authorizer, every request is
allowed and the ACL APIs answer SECURITY_DISABLED, as Kafka without one). Kafka's class names of
its ACL authorizers, ``kafka.security.authorizer.AclAuthorizer`` and
``org.apache.kafka.metadata.authorizer.StandardAuthorizer``, select the built-in ``acl`` one, so a
Kafka broker's config works unchanged.

The request path calls :meth:`Authorizer.authorize` for every request that touches a resource, so
it must answer from memory without I/O (a dict lookup); creating and deleting ACLs are async and
may write to the metadata store. ``start`` loads what it needs before the listeners open and
``run`` keeps it current (a watch) in the broker's nursery until cancelled.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from ..principal import ANONYMOUS, KafkaPrincipal
from .acl import AclBinding, AclBindingFilter, AclOperation, ResourcePattern, ResourceType

#: Kafka's ``kafka.authorizer.logger``: one line per denied action (INFO), and per allowed one
#: an ACL asked to be logged (DEBUG)
AUTHORIZER_LOG = logging.getLogger("odradek.authorizer")

#: Kafka class names that select the built-in ACL authorizer
KAFKA_AUTHORIZER_ALIASES = {
    "kafka.security.authorizer.AclAuthorizer": "acl",
    "kafka.security.auth.SimpleAclAuthorizer": "acl",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer": "acl",
}


def authorizer_name(class_name: str) -> str:
    """The registered authorizer name ``authorizer.class.name`` selects ("" for none)."""
    name = class_name.strip()
    return KAFKA_AUTHORIZER_ALIASES.get(name, name)


class AuthorizationResult(enum.Enum):
    ALLOWED = "ALLOWED"
    DENIED = "DENIED"


ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED


class RequestContext(NamedTuple):
    """Kafka's ``AuthorizableRequestContext``: who asks, from where, with which request (a
    NamedTuple: one is built per authorized request, and it is cheaper than a dataclass)."""

    principal: KafkaPrincipal = ANONYMOUS
    #: the client's IP address as text (what an ACL's host matches)
    host: str = "127.0.0.1"
    listener_name: str = ""
    api_key: int = -1
    api_version: int = 0
    client_id: str = ""
    correlation_id: int = 0


class Action(NamedTuple):
    """Kafka's ``Action``: an operation on one resource, and whether to log its outcome."""

    operation: AclOperation
    resource: ResourcePattern
    log_if_allowed: bool = False
    log_if_denied: bool = True


@dataclass(frozen=True, slots=True)
class AclCreateResult:
    """One binding's creation: ``error`` is None when it was created (or already existed)."""

    error: Exception | None = None


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    """One filter's deletion: the bindings it deleted, or the ``error`` that stopped it."""

    deleted: tuple[AclBinding, ...] = ()
    error: Exception | None = None


@runtime_checkable
class Authorizer(Protocol):
    """What the broker asks an authorizer (Kafka's ``Authorizer``; see the module doc)."""

    async def start(self) -> None:
        """Load the ACLs before the broker serves its first request."""
        ...

    async def run(self) -> None:
        """Keep the ACLs current (follow the store) until cancelled."""
        ...

    async def close(self) -> None: ...

    def authorize(self, context: RequestContext, actions: Sequence[Action]) -> list[AuthorizationResult]:
        """One result per action, in order, from memory."""
        ...

    def authorize_by_resource_type(
        self, context: RequestContext, operation: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult:
        """ALLOWED if the principal may do ``operation`` on at least one resource of the type
        (Kafka's ``authorizeByResourceType``: an idempotent producer may WRITE some topic)."""
        ...

    async def create_acls(self, context: RequestContext, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        """Create ``bindings``; one result per binding, in order."""
        ...

    async def delete_acls(self, context: RequestContext, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        """Delete the ACLs each filter matches; one result per filter, in order."""
        ...

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches."""
        ...


@dataclass(frozen=True)
class AuthorizerFactory:
    """What ``odradek_register_authorizers`` registers: ``create(config, store)`` builds an
    :class:`Authorizer` for one broker over its metadata store."""

    name: str
    create: Any  # Callable[[Config, MetadataStore], Authorizer]
    description: str = ""


__all__ = [
    "ALLOWED",
    "AUTHORIZER_LOG",
    "DENIED",
    "KAFKA_AUTHORIZER_ALIASES",
    "AclCreateResult",
    "AclDeleteResult",
    "Action",
    "AuthorizationResult",
    "Authorizer",
    "AuthorizerFactory",
    "RequestContext",
    "authorizer_name",
]
