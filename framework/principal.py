"""Who sent a request: Kafka's ``KafkaPrincipal``, set per connection by its security layer.

A connection starts as ``User:ANONYMOUS`` (Kafka's principal for PLAINTEXT and for TLS without a
client certificate). A SASL exchange replaces it with the authenticated user, a TLS client
certificate with its distinguished name. Handlers read it from ``RequestContext.principal``: an
authorizer decides on it, quotas are counted per user, and logs name it. The type stays a
separate field because Kafka's ACLs and quota entities match ``<type>:<name>`` (``User:alice``),
and principal builders may use other types.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the principal type of every principal Kafka's own authenticators build
USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """``<principal_type>:<name>``, as Kafka prints and parses it (``User:alice``)."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``"User:alice"`` -> ``KafkaPrincipal("User", "alice")``; the name may contain ``:``
        (a certificate's distinguished name does not, but SASL user names may)."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"invalid principal {text!r}: expected <type>:<name>, such as User:alice")
        return cls(kind, name)


#: the principal of a connection nothing authenticated
ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")

__all__ = ["ANONYMOUS", "USER_TYPE", "KafkaPrincipal"]
