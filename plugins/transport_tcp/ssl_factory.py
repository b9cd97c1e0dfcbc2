"""TLS contexts from Kafka's ``ssl.*`` configs: Kafka's ``SslFactory`` / ``DefaultSslEngineFactory``.

One module turns settings -- a broker listener's (``listener.name.<listener>.ssl.*`` over the
broker-wide ``ssl.*``), or a client's -- into an ``ssl.SSLContext``, and every mistake into a
:class:`~odradek.config.ConfigError` naming the key (a missing file, a wrong password, a key that
does not belong to its certificate, an unknown store type), raised when the listener is built,
so a broker with a bad TLS config does not start, with one line saying why.

Key material, as Kafka takes it:

- a keystore (``ssl.keystore.location``) of type ``PKCS12`` (password ``ssl.keystore.password``)
  or ``PEM`` (the private key and its certificate chain in one file, the key encrypted with
  ``ssl.key.password`` or not at all); or the key and chain inline in the config
  (``ssl.keystore.key``, ``ssl.keystore.certificate.chain``: KIP-651). ``JKS`` is Java's own
  format: refused, naming PKCS12 and PEM (``keytool -importkeystore -deststoretype PKCS12``
  converts one). Without a type the file says which it is (PEM text, else PKCS12);
- a truststore (``ssl.truststore.location``, ``PEM`` or ``PKCS12``) or inline PEM certificates
  (``ssl.truststore.certificates``); without either, the system's CAs (Java's default
  truststore plays that part in Kafka).

odradek's own client also takes librdkafka's names (``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``): see
:func:`client_context`.

Python's ``ssl`` loads a certificate chain only from a file; key material that is not one (PKCS12,
inline PEM) is written, decrypted, to an anonymous in-memory file (``memfd_create``) that is
loaded and closed at once, never to disk.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from odradek.config import ConfigError

#: Kafka's ``ssl.client.auth`` values -> what the server asks of the client's certificate
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
STORE_TYPES = ("PKCS12", "PEM")


def _problem(key: str, what: str) -> ConfigError:
    return ConfigError(f"invalid value for {key!r}: {what}")


def _text(settings: Mapping[str, Any], key: str) -> str:
    value = settings.get(key)
    return "" if value is None else str(value).strip()


def _read(settings: Mapping[str, Any], key: str) -> bytes:
    path = _text(settings, key)
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise _problem(key, f"{path}: no such file") from None
    except OSError as exc:
        raise _problem(key, f"{path}: cannot read it ({exc.strerror or exc})") from None


def store_type(settings: Mapping[str, Any], type_key: str, data: bytes) -> str:
    """The store's type: the ``*.type`` key's (PEM, PKCS12), else what the file holds."""
    given = _text(settings, type_key).upper()
    if given == "JKS":
        raise _problem(
            type_key,
            "JKS keystores are Java's own format and are not supported; use PKCS12 or PEM "
            "(keytool -importkeystore -srcstoretype JKS -deststoretype PKCS12 converts one)",
        )
    if given and given not in STORE_TYPES:
        raise _problem(type_key, f"unknown store type {given!r}; supported: {', '.join(STORE_TYPES)}")
    if given:
        return given
    return "PEM" if b"-----BEGIN" in data[:4096] else "PKCS12"


def _pkcs12(data: bytes, password: str, location_key: str, password_key: str) -> Any:
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise _problem(
            location_key, f"not a PKCS12 store, or {password_key} is not its password (Invalid password or PKCS12 data)"
        ) from None


def _pem_of_certificates(certs: list[Any]) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding

    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)


def _load_chain(context: ssl.SSLContext, pem: bytes, password: str, key_names: str) -> None:
    """Load a private key and its certificate chain given as PEM bytes (through an in-memory file:
    ``load_cert_chain`` takes paths only). ``key_names`` names the keys in errors."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("odradek-ssl-keystore", os.MFD_CLOEXEC)
        path = f"/proc/self/fd/{fd}"
    else:  # pragma: no cover -- not Linux
        fd, path = tempfile.mkstemp(prefix="odradek-ssl-")
    try:
        os.write(fd, pem)
        _load_cert_chain(context, path, None, password, key_names)
    finally:
        os.close(fd)
        if not path.startswith("/proc/"):  # pragma: no cover
            os.unlink(path)


def _load_cert_chain(
    context: ssl.SSLContext, certfile: str, keyfile: str | None, password: str, key_names: str
) -> None:
    # a password is always passed: without one, OpenSSL asks for it on the terminal
    try:
        context.load_cert_chain(certfile, keyfile, password=lambda: password.encode())
    except FileNotFoundError as exc:
        raise ConfigError(f"invalid value for {key_names}: {exc.filename}: no such file") from None
    except ssl.SSLError as exc:
        reason = str(getattr(exc, "reason", "") or "")
        if reason == "KEY_VALUES_MISMATCH":
            what = "the private key does not belong to the certificate"
        elif reason in {"BAD_DECRYPT", "BAD_PASSWORD_READ"} or _encrypted_key(certfile, keyfile):
            what = "the private key cannot be decrypted: wrong or missing ssl.key.password"
        else:
            what = f"no private key and certificate chain in it ({reason or exc})"
        raise ConfigError(f"invalid value for {key_names}: {what}") from None


def _encrypted_key(*paths: str | None) -> bool:
    """Whether one of the PEM files holds an encrypted private key (a load failure then means a
    wrong or missing password: OpenSSL only says "PEM lib")."""
    for path in paths:
        try:
            if path and b"ENCRYPTED" in Path(path).read_bytes():
                return True
        except OSError:
            pass
    return False


def load_keystore(context: ssl.SSLContext, settings: Mapping[str, Any], *, required: bool) -> bool:
    """Load the keystore (Kafka's keys) into ``context``; False when none is configured (an
    error when ``required``, as a listener's is)."""
    chain = _text(settings, "ssl.keystore.certificate.chain")
    key = _text(settings, "ssl.keystore.key")
    location = _text(settings, "ssl.keystore.location")
    key_password = _text(settings, "ssl.key.password")
    if chain or key:
        if not (chain and key):
            missing = "ssl.keystore.key" if chain else "ssl.keystore.certificate.chain"
            raise ConfigError(f"{missing!r} must be set with the other inline PEM keystore key (KIP-651)")
        if location:
            raise ConfigError(
                "set either 'ssl.keystore.location' or 'ssl.keystore.certificate.chain' and "
                "'ssl.keystore.key', not both"
            )
        store_type(settings, "ssl.keystore.type", b"-----BEGIN")
        _load_chain(context, f"{key}\n{chain}\n".encode(), key_password, "'ssl.keystore.key'")
        return True
    if not location:
        if required:
            raise ConfigError(
                "an SSL listener needs a keystore: set 'ssl.keystore.location' (PKCS12 or PEM), or "
                "'ssl.keystore.certificate.chain' and 'ssl.keystore.key'"
            )
        return False
    data = _read(settings, "ssl.keystore.location")
    if store_type(settings, "ssl.keystore.type", data) == "PEM":
        _load_chain(context, data, key_password, "'ssl.keystore.location'")
        return True
    store = _pkcs12(data, _text(settings, "ssl.keystore.password"), "ssl.keystore.location", "ssl.keystore.password")
    if store.key is None or store.cert is None:
        raise _problem("ssl.keystore.location", f"{location}: the PKCS12 store holds no private key and certificate")
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    pem = (
        store.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        + _pem_of_certificates([store.cert.certificate, *(c.certificate for c in store.additional_certs)]).encode()
    )
    _load_chain(context, pem, "", "'ssl.keystore.location'")
    return True


def load_truststore(context: ssl.SSLContext, settings: Mapping[str, Any]) -> None:
    """Load the CAs to trust (Kafka's keys), else the system's."""
    inline = _text(settings, "ssl.truststore.certificates")
    location = _text(settings, "ssl.truststore.location")
    if inline:
        _load_cas(context, inline, "ssl.truststore.certificates")
    elif location:
        data = _read(settings, "ssl.truststore.location")
        if store_type(settings, "ssl.truststore.type", data) == "PEM":
            _load_cas(context, data.decode("ascii", "replace"), "ssl.truststore.location")
        else:
            store = _pkcs12(
                data, _text(settings, "ssl.truststore.password"), "ssl.truststore.location", "ssl.truststore.password"
            )
            certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
            if not certs:
                raise _problem("ssl.truststore.location", f"{location}: the PKCS12 store holds no certificate")
            _load_cas(context, _pem_of_certificates(certs), "ssl.truststore.location")
    else:
        context.load_default_certs()


def _load_cas(context: ssl.SSLContext, pem: str, key: str) -> None:
    try:
        context.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise _problem(key, f"no PEM certificates in it ({getattr(exc, 'reason', None) or exc})") from None


def _protocols(context: ssl.SSLContext, settings: Mapping[str, Any]) -> None:
    """``ssl.enabled.protocols`` bound the versions; ``ssl.protocol`` TLSv1.2 caps them there."""
    enabled = settings.get("ssl.enabled.protocols") or ["TLSv1.2", "TLSv1.3"]
    if isinstance(enabled, str):
        enabled = [p.strip() for p in enabled.split(",") if p.strip()]
    for name in enabled:
        if name not in PROTOCOLS:
            raise _problem("ssl.enabled.protocols", f"{name!r} is not supported; supported: TLSv1.2, TLSv1.3")
    versions = sorted(PROTOCOLS[name] for name in enabled)
    protocol = _text(settings, "ssl.protocol") or "TLSv1.3"
    if protocol not in ("TLS", "TLSv1.2", "TLSv1.3"):
        raise _problem("ssl.protocol", f"{protocol!r} is not supported; supported: TLSv1.2, TLSv1.3, TLS")
    highest = versions[-1]
    if protocol == "TLSv1.2":
        highest = min(highest, ssl.TLSVersion.TLSv1_2)
        if versions[0] > highest:
            raise _problem("ssl.protocol", "TLSv1.2 allows none of ssl.enabled.protocols")
    context.minimum_version = versions[0]
    context.maximum_version = highest


#: TLS 1.3 suites: always on in OpenSSL, not selectable from Python
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})


def openssl_cipher_name(name: str) -> str:
    """A Java/IANA suite name (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``) as OpenSSL spells it
    (``ECDHE-RSA-AES128-GCM-SHA256``); an OpenSSL name is returned as it is."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, cipher = name[4:].partition("_WITH_")
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256")
    if cipher.startswith("CHACHA20_POLY1305"):
        cipher = "CHACHA20_POLY1305"
    parts = ([] if kx == "RSA" else kx.split("_")) + cipher.split("_")
    return "-".join(parts)


def _ciphers(context: ssl.SSLContext, settings: Mapping[str, Any]) -> None:
    suites = settings.get("ssl.cipher.suites") or []
    if isinstance(suites, str):
        suites = [s.strip() for s in suites.split(",") if s.strip()]
    tls12 = [openssl_cipher_name(s) for s in suites if s not in TLS13_SUITES]
    if not tls12:
        return
    try:
        context.set_ciphers(":".join(tls12))
    except ssl.SSLError:
        raise _problem("ssl.cipher.suites", f"none of {', '.join(suites)} is a cipher suite OpenSSL knows") from None
    known = {c["name"] for c in context.get_ciphers()}
    unknown = [s for s, o in zip(suites, tls12, strict=False) if o not in known and s not in TLS13_SUITES]
    if unknown:
        raise _problem("ssl.cipher.suites", f"unknown cipher suite(s): {', '.join(unknown)}")


def server_context(settings: Mapping[str, Any]) -> ssl.SSLContext:
    """The context of an SSL listener (Kafka's ``ssl.*`` keys, already resolved per listener)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.options |= ssl.OP_NO_RENEGOTIATION
    _protocols(context, settings)
    _ciphers(context, settings)
    load_keystore(context, settings, required=True)
    auth = (_text(settings, "ssl.client.auth") or "none").lower()
    if auth not in CLIENT_AUTH:
        raise _problem("ssl.client.auth", f"{auth!r}; expected one of none, requested, required")
    context.verify_mode = CLIENT_AUTH[auth]
    if auth != "none":
        load_truststore(context, settings)
    return context


def client_context(settings: Mapping[str, Any]) -> ssl.SSLContext:
    """The context of a client connection to an SSL listener: odradek's client (librdkafka's
    keys) or a broker reaching another broker (Kafka's keys, the inter-broker listener's).

    The broker's certificate is always verified; ``ssl.endpoint.identification.algorithm``
    ``https`` (the default since Kafka 2.0) also checks it names the host connected to, an
    empty value or ``none`` does not. A client certificate (mutual TLS) comes from
    ``ssl.certificate.location`` + ``ssl.key.location`` or from a Kafka keystore."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.options |= ssl.OP_NO_RENEGOTIATION
    # not given: https, Kafka's default since 2.0; given empty: off (how Kafka users turn it off)
    algorithm = str(settings.get("ssl.endpoint.identification.algorithm", "https") or "").strip().lower()
    if algorithm not in ("", "https", "none"):
        raise _problem("ssl.endpoint.identification.algorithm", f"{algorithm!r}; expected https or none")
    context.check_hostname = algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    _protocols(context, settings)
    _ciphers(context, settings)
    ca = _text(settings, "ssl.ca.location")
    if ca:
        try:
            context.load_verify_locations(cafile=ca)
        except FileNotFoundError:
            raise _problem("ssl.ca.location", f"{ca}: no such file") from None
        except ssl.SSLError as exc:
            raise _problem("ssl.ca.location", f"{ca}: no PEM certificates in it ({exc.reason})") from None
    else:
        load_truststore(context, settings)
    certificate = _text(settings, "ssl.certificate.location")
    key = _text(settings, "ssl.key.location")
    if certificate or key:
        if not certificate:
            raise ConfigError("'ssl.key.location' is set without 'ssl.certificate.location'")
        _load_cert_chain(
            context, certificate, key or None, _text(settings, "ssl.key.password"), "'ssl.certificate.location'"
        )
    else:
        load_keystore(context, settings, required=False)
    return context


__all__ = [
    "CLIENT_AUTH",
    "PROTOCOLS",
    "client_context",
    "load_keystore",
    "load_truststore",
    "openssl_cipher_name",
    "server_context",
    "store_type",
]
