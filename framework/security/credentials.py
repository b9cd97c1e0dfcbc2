"""SCRAM credentials of users, kept in the metadata store as Kafka keeps them in ZooKeeper.

A user's credentials are properties of its entity config (``/config/users/<user>``), one per
mechanism: ``SCRAM-SHA-256`` -> ``salt=...,stored_key=...,server_key=...,iterations=...``
(see :mod:`odradek.entity_configs`). Every broker of a cluster reads the same keys, so a user
created through one broker (AlterUserScramCredentials, ``odradek scram``) logs in at any other.
Read on demand, at each SCRAM login: no cache to go stale, no watch to keep.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..entity_configs import USERS, EntityConfigs
from ..interfaces import MetadataStore
from .scram import SCRAM_MECHANISMS, ScramCredential, ScramMechanism

log = logging.getLogger(__name__)


class ScramCredentialStore:
    """Users' SCRAM credentials over a metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self.entities = EntityConfigs(store)

    async def credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """The user's credential for ``mechanism``; None when there is none (or it is unreadable,
        which is logged: a login then fails as for an unknown user)."""
        text = (await self.entities.get(USERS, user)).get(mechanism.mechanism_name)
        if text is None:
            return None
        try:
            return ScramCredential.from_text(text)
        except ValueError:
            log.error(
                "the %s credential of user %r in the metadata store is unreadable", mechanism.mechanism_name, user
            )
            return None

    async def describe(self, user: str) -> dict[str, int]:
        """The user's mechanisms and their iterations (never the keys)."""
        return _infos(await self.entities.get(USERS, user))

    async def describe_all(self) -> dict[str, dict[str, int]]:
        """Every user with at least one SCRAM credential."""
        out: dict[str, dict[str, int]] = {}
        for user, config in (await self.entities.list(USERS)).items():
            infos = _infos(config)
            if infos:
                out[user] = infos
        return out

    async def alter(self, user: str, upsert: dict[str, ScramCredential], delete: Iterable[str] = ()) -> None:
        """Set and remove a user's credentials (mechanism names) in one atomic change."""
        await self.entities.alter(USERS, user, set={m: c.to_text() for m, c in upsert.items()}, delete=tuple(delete))


def _infos(config: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in SCRAM_MECHANISMS:
        text = config.get(name)
        if text is None:
            continue
        try:
            out[name] = ScramCredential.from_text(text).iterations
        except ValueError:
            continue
    return out


__all__ = ["ScramCredentialStore"]
