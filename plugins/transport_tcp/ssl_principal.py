"""The principal of a TLS client, as Kafka builds it: Kafka's ``SslPrincipalMapper``.

Kafka's default principal builder names a TLS client by its certificate's subject distinguished
name in RFC 2253 form (Java's ``X500Principal.getName()``: the most specific part first,
``CN=alice,OU=eng,O=Example,C=US``) passed through ``ssl.principal.mapping.rules`` (KIP-371), as
``User:<result>``; a client without a certificate is ``User:ANONYMOUS``.

Rules, tried in order, the first that matches wins:

- ``DEFAULT``: the distinguished name as it is;
- ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash: when the
  regular expression matches the *whole* name, every match of it is replaced by
  ``replacement`` (``$1`` names a group, as in Java), then lower- or upper-cased.

A name no rule matches has no principal: the connection is refused, as Kafka fails its
authentication. Patterns are Python regular expressions, which agree with Java's for what rules
use (groups, classes, ``.*?``, anchors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

from odradek.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal

#: Attribute keywords Java's RFC 2253 form spells out; any other attribute is ``<oid>=#<DER hex>``.
RFC2253_KEYWORDS = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}
_SPECIAL = set(',+"\\<>;')


def _escape(value: str) -> str:
    """RFC 2253 escaping: ``,+"\\<>;`` anywhere, a leading ``#`` or space, a trailing space."""
    out = "".join("\\" + ch if ch in _SPECIAL else ch for ch in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _der_hex(attribute: x509.NameAttribute) -> str:
    """The attribute value's DER encoding in hex (how Java prints attributes without a keyword)."""
    value = attribute.value
    raw = value if isinstance(value, bytes) else value.encode(_STRING_ENCODINGS.get(attribute._type.value, "utf-8"))
    length = len(raw)
    if length < 0x80:
        size = bytes([length])
    else:
        body = length.to_bytes((length.bit_length() + 7) // 8, "big")
        size = bytes([0x80 | len(body)]) + body
    return (bytes([attribute._type.value]) + size + raw).hex()


#: ASN.1 string tags whose bytes are not UTF-8: BMPString, UniversalString
_STRING_ENCODINGS = {30: "utf-16-be", 28: "utf-32-be"}


def distinguished_name(name: x509.Name) -> str:
    """``name`` in RFC 2253 form as Java's ``X500Principal.getName()`` prints it."""
    parts = []
    for rdn in reversed(name.rdns):
        values = []
        for attribute in rdn:
            keyword = RFC2253_KEYWORDS.get(attribute.oid)
            if keyword is not None:
                values.append(f"{keyword}={_escape(str(attribute.value))}")
            else:
                values.append(f"{attribute.oid.dotted_string}=#{_der_hex(attribute)}")
        parts.append("+".join(values))
    return ",".join(parts)


def certificate_subject(der: bytes) -> str:
    """The RFC 2253 subject distinguished name of a DER certificate."""
    return distinguished_name(x509.load_der_x509_certificate(der).subject)


@dataclass(frozen=True)
class Rule:
    """One of ``ssl.principal.mapping.rules``: ``DEFAULT`` (``pattern`` None) or a RULE."""

    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        """The mapped name, or None when this rule does not match ``dn``."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self.replacement, dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


def _java_replacement(replacement: str) -> str:
    """Java's ``$1`` group references as Python's ``\\g<1>``; a literal backslash stays one."""
    out = []
    i = 0
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            nxt = replacement[i + 1]
            out.append("\\\\" if nxt == "\\" else nxt)
            i += 2
        elif ch == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit():
                j += 1
            out.append(f"\\g<{replacement[i + 1 : j]}>")
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _until_slash(text: str, start: int) -> tuple[str, int]:
    """The text from ``start`` to the next unescaped ``/`` (kept as written), and where it is."""
    i = start
    while i < len(text) and text[i] != "/":
        i += 2 if text[i] == "\\" else 1
    if i >= len(text):
        raise ValueError("a RULE needs the form RULE:pattern/replacement/ (with an optional L or U)")
    return text[start:i], i


def parse_rules(text: str) -> list[Rule]:
    """``ssl.principal.mapping.rules``: rules separated by commas or new lines; ``ValueError``
    saying what is wrong otherwise. Commas inside a RULE's pattern belong to the pattern."""
    rules: list[Rule] = []
    i = 0
    while i < len(text):
        if text[i] in ", \t\r\n":
            i += 1
            continue
        if text.startswith("DEFAULT", i):
            rules.append(Rule())
            i += len("DEFAULT")
        elif text.startswith("RULE:", i):
            pattern, i = _until_slash(text, i + len("RULE:"))
            replacement, i = _until_slash(text, i + 1)
            i += 1
            case = ""
            if i < len(text) and text[i] in "LU":
                case = text[i]
                i += 1
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid pattern {pattern!r}: {exc}") from None
            rules.append(Rule(compiled, _java_replacement(replacement), case))
        else:
            raise ValueError(f"invalid rule at {text[i:]!r}: expected DEFAULT or RULE:pattern/replacement/[LU]")
        while i < len(text) and text[i] not in ",\n":  # Kafka ignores what follows a rule up to the separator
            if not text[i].isspace():
                raise ValueError(f"unexpected {text[i:]!r} after a rule")
            i += 1
    if not rules:
        raise ValueError("no rules (DEFAULT keeps the distinguished name as it is)")
    return rules


class SslPrincipalMapper:
    """Distinguished name -> principal name through ``ssl.principal.mapping.rules``."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = parse_rules(rules)

    def principal_name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise ValueError(f"no ssl.principal.mapping.rules apply to {dn}")

    def principal(self, der: bytes | None) -> KafkaPrincipal:
        """The principal of a client presenting certificate ``der`` (None: no certificate)."""
        if der is None:
            return ANONYMOUS
        return KafkaPrincipal(USER_TYPE, self.principal_name(certificate_subject(der)))


__all__ = ["Rule", "SslPrincipalMapper", "certificate_subject", "distinguished_name", "parse_rules"]
