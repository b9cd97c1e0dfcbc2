"""Conformance suite for authorizers (``odradek_register_authorizers``).

An authorizer plugin -- the built-in ``acl`` or a third party's -- runs it against itself::

    class TestMyAuthorizer(AuthorizerConformance):
        factory = MY_AUTHORIZER_FACTORY        # the AuthorizerFactory the hook registers

The suite builds two authorizers, as two brokers would, over one metadata store (``meta_local``
in a temporary directory; override :meth:`AuthorizerConformance.open_store` for another) with
``super.users = User:admin`` and ``allow.everyone.if.no.acl.found = false``, and checks Kafka's
semantics, because clients and operators rely on them:

- with no ACL on a resource only super users may act on it;
- LITERAL, PREFIXED and the ``*`` wildcard resource; the ``User:*`` principal and ``*`` host
  wildcards; DENY wins over ALLOW; ALL; implied operations (READ, WRITE, DELETE, ALTER imply
  DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS), and nothing implied by a DENY;
- ``authorize`` answers one result per action in order; ``authorize_by_resource_type``;
- ``create_acls`` refuses bindings that are not LITERAL or PREFIXED, of type ANY, with a bad
  principal or a CLUSTER name other than ``kafka-cluster``, and creates the rest;
- ``acls`` and ``delete_acls`` select with filters (ANY, MATCH, null fields) and deleting returns
  what it deleted;
- an ACL created through one authorizer is enforced by the other once its ``run`` delivers it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trio

from ..config import load_config
from ..interfaces import MetadataStore
from ..manager import load_plugins
from ..principal import KafkaPrincipal
from ..security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from ..security.authorizer import ALLOWED, DENIED, Action, Authorizer, AuthorizerFactory, RequestContext

__all__ = ["AuthorizerConformance", "acl", "as_user"]

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def acl(
    resource_type: ResourceType,
    name: str,
    principal: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    *,
    pattern_type: PatternType = LITERAL,
    host: str = "*",
) -> AclBinding:
    """An :class:`AclBinding` in one call."""
    return AclBinding(
        ResourcePattern(resource_type, name, pattern_type), AccessControlEntry(principal, host, operation, permission)
    )


def as_user(name: str, host: str = "10.0.0.1") -> RequestContext:
    """The request context of ``User:<name>`` connecting from ``host``."""
    return RequestContext(KafkaPrincipal("User", name), host)


class AuthorizerConformance:
    """Base class of an authorizer's conformance tests; see the module docstring."""

    #: the AuthorizerFactory the plugin registers
    factory: ClassVar[AuthorizerFactory | None] = None
    #: extra broker config for ``factory.create`` (plugins' keys are loaded with the plugins)
    config_overrides: ClassVar[dict[str, Any]] = {}
    #: how long a change may take to reach the other authorizer
    wait_s: ClassVar[float] = 10.0

    pytestmark = pytest.mark.trio

    def open_store(self, tmp_path: Path) -> Callable[[], MetadataStore]:
        """A factory of sessions on one metadata store (each authorizer gets its own)."""
        from ..plugins.meta_local.store import FILE_NAME, LocalMetadataStore

        return lambda: LocalMetadataStore(tmp_path / FILE_NAME)

    def config(self) -> Any:
        overrides = {"super.users": "User:admin", "allow.everyone.if.no.acl.found": False, **self.config_overrides}
        return load_config(overrides=overrides, plugins=load_plugins())

    def _factory(self) -> AuthorizerFactory:
        factory = type(self).__dict__.get("factory", self.factory)
        if not isinstance(factory, AuthorizerFactory):
            pytest.fail(f"{type(self).__name__} must set `factory` to an AuthorizerFactory, not {factory!r}")
        return factory

    @asynccontextmanager
    async def authorizers(self, tmp_path: Path, count: int = 1) -> AsyncIterator[list[Authorizer]]:
        """``count`` started authorizers over one store, each running, closed on exit."""
        new_store = self.open_store(tmp_path)
        stores = [new_store() for _ in range(count)]
        made: list[Authorizer] = []
        try:
            for store in stores:
                await store.open(6000)
                authorizer = self._factory().create(self.config(), store)
                assert isinstance(authorizer, Authorizer), f"{authorizer!r} lacks Authorizer's methods"
                await authorizer.start()
                made.append(authorizer)
            async with trio.open_nursery() as nursery:
                for authorizer in made:
                    nursery.start_soon(authorizer.run)
                yield made
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                for authorizer in made:
                    await authorizer.close()
                for store in stores:
                    await store.close()

    @staticmethod
    def decide(
        authorizer: Authorizer, context: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        action = Action(operation, ResourcePattern(resource_type, name, LITERAL), log_if_denied=False)
        return authorizer.authorize(context, [action]) == [ALLOWED]

    async def create(self, authorizer: Authorizer, *bindings: AclBinding) -> None:
        results = await authorizer.create_acls(as_user("admin"), bindings)
        assert [r.error for r in results] == [None] * len(bindings)

    # -- decisions ---------------------------------------------------------------------------
    async def test_without_acls_only_super_users_are_allowed(self, tmp_path: Path) -> None:
        async with self.authorizers(tmp_path) as (authorizer,):
            assert not self.decide(authorizer, as_user("alice"), Op.READ, TOPIC, "t")
            assert self.decide(authorizer, as_user("admin"), Op.READ, TOPIC, "t")
            assert self.decide(authorizer, as_user("admin"), Op.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)

    async def test_literal_allow_and_implied_describe(self, tmp_path: Path) -> None:
        async with self.authorizers(tmp_path) as (authorizer,):
            await self.create(authorizer, acl(TOPIC, "orders", "User:alice", Op.READ))
            alice = as_user("alice")
            assert self.decide(authorizer, alice, Op.READ, TOPIC, "orders")
            assert self.decide(authorizer, alice, Op.DESCRIBE, TOPIC, "orders")  # READ implies DESCRIBE
            assert not self.decide(authorizer, alice, Op.WRITE, TOPIC, "orders")
            assert not self.decide(authorizer, alice, Op.READ, TOPIC, "orders2")
            assert not self.decide(authorizer, as_user("bob"), Op.READ, TOPIC, "orders")
            assert not self.decide(authorizer, alice, Op.READ, GROUP, "orders")

    async def test_alter_configs_implies_describe_configs_and_all_is_everything(self, tmp_path: Path) -> None:
        async with self.authorizers(tmp_path) as (authorizer,):
            await self.create(
                authorizer,
                acl(TOPIC, "t", "User:alice", Op.ALTER_CONFIGS),
                acl(GROUP, "g", "User:alice", Op.ALL),
            )
            alice = as_user("alice")
            assert self.decide(authorizer, alice, Op.DESCRIBE_CONFIGS, TOPIC, "t")
            assert not self.decide(authorizer, alice, Op.DESCRIBE, TOPIC, "t")
            for op in (Op.READ, Op.DESCRIBE, Op.DELETE):
                assert self.decide(authorizer, alice, op, GROUP, "g")

    async def test_deny_wins_and_implies_nothing(self, tmp_path: Path) -> None:
        async with self.authorizers(tmp_path) as (authorizer,):
            await self.create(
                authorizer,
                acl(TOPIC, "t", "User:*", Op.ALL),
                acl(TOPIC, "t", "User:mallory", Op.WRITE, DENY),
                acl(TOPIC, "t", "User:eve", Op.ALL, DENY, host="10.6.6.6"),
            )
            assert self.decide(authorizer, as_user("alice"), Op.WRITE, TOPIC, "t")
            assert not self.decide(authorizer, as_user("mallory"), Op.WRITE, TOPIC, "t")
            assert self.decide(authorizer, as_user("mallory"), Op.DESCRIBE, TOPIC, "t")  # a DENY implies nothing
            assert not self.decide(authorizer, as_user("eve", "10.6.6.6"), Op.READ, TOPIC, "t")
            assert self.decide(authorizer, as_user("eve", "10.0.0.2"), Op.READ, TOPIC, "t")

    async def test_prefixed_wildcard_resource_and_host(self, tmp_path: Path) -> None:
        async with self.authorizers(tmp_path) as (authorizer,):
            await self.create(
                authorizer,
                acl(TOPIC, "sales-", "User:alice", Op.WRITE, pattern_type=PREFIXED),
                acl(GROUP, "*", "User:alice", Op.READ),
                acl(TOPIC, "audit", "User:bob", Op.READ, host="10.0.0.9"),
            )
            alice = as_user("alice")
            assert self.decide(authorizer, alice, Op.WRITE, TOPIC, "sales-eu")
            assert self.decide(authorizer, alice, Op.WRITE, TOPIC, "sales-")
            assert not self.decide(authorizer, alice, Op.WRITE, TOPIC, "sales")
            assert not self.decide(authorizer, alice, Op.WRITE, TOPIC, "presales-eu")
            assert self.decide(authorizer, alice, Op.READ, GROUP, "any-group")
            assert self.decide(authorizer, as_user("bob", "10.0.0.9"), Op.READ, TOPIC, "audit")
            assert not self.decide(authorizer, as_user("bob", "10.0.0.8"), Op.READ, TOPIC, "audit")

    async def test_results_follow_the_actions_in_order(self, tmp_path: Path) -> None:
        async with self.authorizers(tmp_path) as (authorizer,):
            await self.create(authorizer, acl(TOPIC, "b", "User:alice", Op.WRITE))
            actions = [Action(Op.WRITE, ResourcePattern(TOPIC, n, LITERAL), log_if_denied=False) for n in "abcb"]
            assert authorizer.authorize(as_user("alice"), actions) == [DENIED, ALLOWED, DENIED, ALLOWED]

    async def test_authorize_by_resource_type(self, tmp_path: Path) -> None:
        async with self.authorizers(tmp_path) as (authorizer,):
            alice, bob = as_user("alice"), as_user("bob")
            assert authorizer.authorize_by_resource_type(alice, Op.WRITE, TOPIC) is DENIED
            await self.create(
                authorizer,
                acl(TOPIC, "logs-", "User:alice", Op.WRITE, pattern_type=PREFIXED),
                acl(TOPIC, "t", "User:bob", Op.WRITE),
                acl(TOPIC, "t", "User:bob", Op.WRITE, DENY),
            )
            assert authorizer.authorize_by_resource_type(alice, Op.WRITE, TOPIC) is ALLOWED
            assert authorizer.authorize_by_resource_type(bob, Op.WRITE, TOPIC) is DENIED  # its only ALLOW is denied
            assert authorizer.authorize_by_resource_type(alice, Op.WRITE, GROUP) is DENIED
            assert authorizer.authorize_by_resource_type(as_user("admin"), Op.WRITE, TOPIC) is ALLOWED

    # -- administration ------------------------------------------------------------------------
    async def test_invalid_bindings_are_refused_and_valid_ones_created(self, tmp_path: Path) -> None:
        async with self.authorizers(tmp_path) as (authorizer,):
            good = acl(TOPIC, "t", "User:alice", Op.READ)
            bad = [
                acl(TOPIC, "t", "User:alice", Op.READ, pattern_type=PatternType.MATCH),
                acl(ResourceType.ANY, "t", "User:alice", Op.READ),
                acl(TOPIC, "t", "alice", Op.READ),  # not <type>:<name>
                acl(CLUSTER, "my-cluster", "User:alice", Op.ALTER),
                acl(TOPIC, "t", "User:alice", Op.ANY),
                acl(TOPIC, "", "User:alice", Op.READ),
            ]
            results = await authorizer.create_acls(as_user("admin"), [*bad, good])
            assert [r.error is None for r in results] == [False] * len(bad) + [True]
            assert authorizer.acls(AclBindingFilter()) == [good]

    async def test_filters_select_and_delete_returns_what_it_deleted(self, tmp_path: Path) -> None:
        async with self.authorizers(tmp_path) as (authorizer,):
            literal = acl(TOPIC, "sales-eu", "User:alice", Op.READ)
            prefixed = acl(TOPIC, "sales-", "User:bob", Op.WRITE, pattern_type=PREFIXED)
            wildcard = acl(TOPIC, "*", "User:carol", Op.DESCRIBE)
            group = acl(GROUP, "sales-eu", "User:alice", Op.READ)
            await self.create(authorizer, literal, prefixed, wildcard, group)

            def found(**pattern: Any) -> set[AclBinding]:
                return set(authorizer.acls(AclBindingFilter(ResourcePatternFilter(**pattern))))

            assert found() == {literal, prefixed, wildcard, group}
            assert found(resource_type=TOPIC, name="sales-eu", pattern_type=PatternType.MATCH) == {
                literal,
                prefixed,
                wildcard,
            }
            assert found(resource_type=TOPIC, name="sales-eu") == {literal}  # ANY: the exact name
            assert found(pattern_type=PREFIXED) == {prefixed}
            by_principal = AclBindingFilter(entry=AccessControlEntryFilter(principal="User:alice"))
            assert set(authorizer.acls(by_principal)) == {literal, group}

            deleted = await authorizer.delete_acls(
                as_user("admin"),
                [by_principal, AclBindingFilter(ResourcePatternFilter(TOPIC, "nothing", LITERAL))],
            )
            assert [set(d.deleted) for d in deleted] == [{literal, group}, set()]
            assert [d.error for d in deleted] == [None, None]
            assert set(authorizer.acls(AclBindingFilter())) == {prefixed, wildcard}
            assert not self.decide(authorizer, as_user("alice"), Op.READ, TOPIC, "sales-eu")

    async def test_an_acl_created_through_one_is_enforced_by_the_other(self, tmp_path: Path) -> None:
        async with self.authorizers(tmp_path, 2) as (first, second):
            alice = as_user("alice")
            await self.create(first, acl(TOPIC, "shared", "User:alice", Op.WRITE))
            with trio.fail_after(self.wait_s):
                while not self.decide(second, alice, Op.WRITE, TOPIC, "shared"):
                    await trio.sleep(0.01)
            await second.delete_acls(as_user("admin"), [AclBindingFilter()])
            with trio.fail_after(self.wait_s):
                while self.decide(first, alice, Op.WRITE, TOPIC, "shared"):
                    await trio.sleep(0.01)
            assert first.acls(AclBindingFilter()) == []
