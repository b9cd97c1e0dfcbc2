"""KafkaPrincipal: Kafka's ``<type>:<name>`` text form both ways, and the anonymous default a
request context carries when no security layer authenticated the connection."""

from __future__ import annotations

import pytest

from odradek.plugins.transport_tcp.apis import RequestContext
from odradek.principal import ANONYMOUS, KafkaPrincipal


def test_text_form_round_trips() -> None:
    alice = KafkaPrincipal.parse("User:alice")
    assert alice == KafkaPrincipal("User", "alice")
    assert str(alice) == "User:alice"
    assert KafkaPrincipal.parse("User:svc:reports").name == "svc:reports"
    assert str(ANONYMOUS) == "User:ANONYMOUS"


@pytest.mark.parametrize("text", ["alice", "User:", ":alice", ""])
def test_parse_refuses_what_is_not_type_and_name(text: str) -> None:
    with pytest.raises(ValueError, match="expected <type>:<name>"):
        KafkaPrincipal.parse(text)


def test_request_context_defaults_to_anonymous() -> None:
    assert RequestContext.__dataclass_fields__["principal"].default is ANONYMOUS
