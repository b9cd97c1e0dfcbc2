"""KIP-554's DescribeUserScramCredentials and AlterUserScramCredentials, with Kafka's errors.

The rules are Kafka's (``ZkAdminManager``): an empty user name is refused
(RESOURCE_NOT_FOUND when describing, UNACCEPTABLE_CREDENTIAL when altering), a user named twice
in one describe gets DUPLICATE_RESOURCE, an unknown mechanism UNSUPPORTED_SASL_MECHANISM,
iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL, a (user, mechanism) pair altered twice
DUPLICATE_RESOURCE, and deleting a credential that does not exist RESOURCE_NOT_FOUND. A user
with any error is not changed at all; every other user's changes are applied atomically per user.
The broker derives the stored and server keys from the salted password the client sent (the
password itself never travels), exactly as Kafka does.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import ErrorCode
from .credentials import ScramCredentialStore
from .scram import MAX_ITERATIONS, SCRAM_BY_TYPE, ScramCredential, credential_from_salted

log = logging.getLogger(__name__)

USERNAME_MUST_NOT_BE_EMPTY = "Username must not be empty"
ALTERED_TWICE = "A user credential cannot be altered twice in the same request"
DELETE_MISSING = "Attempt to delete a user credential that does not exist"


@dataclass(frozen=True, slots=True)
class UserScramResult:
    """One user's outcome: an error (code, message) or, for describe, its mechanisms' iterations."""

    user: str
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    #: mechanism type (1 SCRAM-SHA-256, 2 SCRAM-SHA-512) -> iterations
    credentials: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


async def describe_user_scram_credentials(
    store: ScramCredentialStore, users: Sequence[str] | None
) -> list[UserScramResult]:
    """Every user with credentials when ``users`` is None or empty, else the users asked for."""
    if not users:
        return [
            UserScramResult(user, credentials=_by_type(infos))
            for user, infos in sorted((await store.describe_all()).items())
        ]
    counts = Counter(users)
    out: list[UserScramResult] = []
    for user in dict.fromkeys(users):  # once each, in request order
        if not user:
            out.append(UserScramResult(user, ErrorCode.RESOURCE_NOT_FOUND, USERNAME_MUST_NOT_BE_EMPTY))
        elif counts[user] > 1:
            out.append(
                UserScramResult(
                    user,
                    ErrorCode.DUPLICATE_RESOURCE,
                    f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}",
                )
            )
        else:
            infos = await store.describe(user)
            if infos:
                out.append(UserScramResult(user, credentials=_by_type(infos)))
            else:
                out.append(
                    UserScramResult(
                        user,
                        ErrorCode.RESOURCE_NOT_FOUND,
                        f"Attempt to describe a user credential that does not exist: {user}",
                    )
                )
    return out


def _by_type(infos: dict[str, int]) -> dict[int, int]:
    return {m.type_code: infos[m.mechanism_name] for m in SCRAM_BY_TYPE.values() if m.mechanism_name in infos}


async def alter_user_scram_credentials(
    store: ScramCredentialStore, deletions: Sequence[tuple[str, int]], upsertions: Sequence[ScramUpsertion]
) -> list[UserScramResult]:
    """Apply deletions ((user, mechanism type)) and upsertions; one result per user."""
    errors: dict[str, tuple[ErrorCode, str]] = {}
    for user, mechanism in deletions:
        if not user:
            errors[user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, USERNAME_MUST_NOT_BE_EMPTY)
        elif mechanism not in SCRAM_BY_TYPE:
            errors[user] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    for up in upsertions:
        if not up.user:
            errors[up.user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, USERNAME_MUST_NOT_BE_EMPTY)
        elif up.mechanism not in SCRAM_BY_TYPE:
            errors[up.user] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif up.iterations > MAX_ITERATIONS:
            errors[up.user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        elif up.iterations < SCRAM_BY_TYPE[up.mechanism].min_iterations:
            errors[up.user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif not up.salt or not up.salted_password:
            errors[up.user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
    pairs = Counter(
        [(u, m) for u, m in deletions if u not in errors]
        + [(up.user, up.mechanism) for up in upsertions if up.user not in errors]
    )
    for (user, _), count in pairs.items():
        if count > 1 and user not in errors:
            errors[user] = (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
    users = list(dict.fromkeys([u for u, _ in deletions] + [up.user for up in upsertions]))
    out: list[UserScramResult] = []
    for user in users:
        if user in errors:
            code, message = errors[user]
            out.append(UserScramResult(user, code, message))
            continue
        deleting = [SCRAM_BY_TYPE[m].mechanism_name for u, m in deletions if u == user]
        existing = await store.describe(user)
        if any(name not in existing for name in deleting):
            out.append(
                UserScramResult(
                    user, ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
                )
            )
            continue
        upserting: dict[str, ScramCredential] = {}
        for up in upsertions:
            if up.user == user:
                scram = SCRAM_BY_TYPE[up.mechanism]
                upserting[scram.mechanism_name] = credential_from_salted(
                    scram, up.salt, up.salted_password, up.iterations
                )
        try:
            await store.alter(user, upserting, deleting)
        except Exception as exc:  # the store is away: this user fails, the others may not
            log.warning("altering the SCRAM credentials of user %r failed: %r", user, exc)
            out.append(UserScramResult(user, ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"))
            continue
        out.append(UserScramResult(user))
    return out


__all__ = [
    "USERNAME_MUST_NOT_BE_EMPTY",
    "ScramUpsertion",
    "UserScramResult",
    "alter_user_scram_credentials",
    "describe_user_scram_credentials",
]
