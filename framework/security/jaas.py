"""Kafka's JAAS text (``sasl.jaas.config``): one login module, its control flag, its options.

The grammar is Java's JAAS configuration file entry, as Kafka's ``JaasConfig`` reads it::

    <login module class> <required|requisite|sufficient|optional> [<name>=<value> ...] ;

Values are quoted strings (``"a b"``, with ``\\"`` and ``\\\\`` escapes) or bare words; ``//``
and ``/* */`` comments are skipped. Kafka wants exactly one login module in
``sasl.jaas.config``; so does this parser. Errors name the position, never the text around it
(it holds passwords).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class JaasError(ValueError):
    """The JAAS text does not parse; the message says where and why (and never quotes values)."""


@dataclass(frozen=True, slots=True)
class JaasConfigEntry:
    """One login module: ``PlainLoginModule required username="admin" ...;``."""

    login_module: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # options hold passwords
        return f"JaasConfigEntry({self.login_module!r}, {self.control_flag!r}, options={sorted(self.options)})"

    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's users: ``user_<name>="<password>"`` options."""
        return {k[len("user_") :]: v for k, v in self.options.items() if k.startswith("user_") and len(k) > 5}


_WORD_END = frozenset(' \t\r\n=;"')


def _tokens(text: str) -> Iterator[tuple[str, str, int]]:
    """(kind, value, position): kinds ``word``, ``quoted``, ``=`` and ``;``."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JaasError(f"unterminated comment at position {i}")
            i = end + 2
        elif c in "=;":
            yield c, c, i
            i += 1
        elif c == '"':
            start, i, out = i, i + 1, []
            while True:
                if i >= n:
                    raise JaasError(f"unterminated quoted value at position {start}")
                ch = text[i]
                if ch == "\\" and i + 1 < n:
                    out.append(text[i + 1])
                    i += 2
                elif ch == '"':
                    i += 1
                    break
                else:
                    out.append(ch)
                    i += 1
            yield "quoted", "".join(out), start
        else:
            start = i
            while i < n and text[i] not in _WORD_END and not text.startswith("//", i) and not text.startswith("/*", i):
                i += 1
            yield "word", text[start:i], start


def parse_jaas_config(text: str, *, key: str = "sasl.jaas.config") -> JaasConfigEntry:
    """The one login module of a ``sasl.jaas.config`` value; :class:`JaasError` naming ``key``."""
    try:
        entries = list(_entries(text))
    except JaasError as exc:
        raise JaasError(f"invalid value for {key!r}: {exc}") from None
    if len(entries) != 1:
        raise JaasError(
            f"invalid value for {key!r}: JAAS config property contains {len(entries)} login modules, should be 1 module"
        )
    return entries[0]


def _entries(text: str) -> Iterator[JaasConfigEntry]:
    tokens = _tokens(text)
    for kind, value, pos in tokens:
        if kind != "word":
            raise JaasError(f"expected a login module class name at position {pos}")
        module = value
        flag_token = next(tokens, None)
        if flag_token is None or flag_token[0] != "word":
            raise JaasError(f"expected a control flag ({', '.join(CONTROL_FLAGS)}) after the login module")
        flag = flag_token[1].lower()
        if flag not in CONTROL_FLAGS:
            raise JaasError(
                f"invalid control flag {flag_token[1]!r} at position {flag_token[2]} "
                f"(one of {', '.join(CONTROL_FLAGS)})"
            )
        options: dict[str, str] = {}
        while True:
            tok = next(tokens, None)
            if tok is None:
                raise JaasError("the login module's options do not end with ';'")
            if tok[0] == ";":
                break
            if tok[0] != "word":
                raise JaasError(f"expected an option name at position {tok[2]}")
            equals = next(tokens, None)
            if equals is None or equals[0] != "=":
                raise JaasError(f"option {tok[1]!r} at position {tok[2]} has no '=<value>'")
            val = next(tokens, None)
            if val is None or val[0] not in ("word", "quoted"):
                raise JaasError(f"option {tok[1]!r} at position {tok[2]} has no value")
            if tok[1] in options:
                raise JaasError(f"option {tok[1]!r} appears twice")
            options[tok[1]] = val[1]
        yield JaasConfigEntry(module, flag, options)


__all__ = [
    "CONTROL_FLAGS",
    "PLAIN_LOGIN_MODULE",
    "SCRAM_LOGIN_MODULE",
    "JaasConfigEntry",
    "JaasError",
    "parse_jaas_config",
]
