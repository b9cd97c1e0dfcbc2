"""Certificates for the TLS tests: one throwaway CA (trustme), a broker certificate for
``localhost``/``127.0.0.1`` and client certificates with chosen subjects, written to a temp dir
as PEM (and PKCS12 where a test wants one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
    pkcs12,
)
from cryptography.x509 import load_pem_x509_certificate

#: the password of every encrypted key and PKCS12 store the helpers write
PASSWORD = "s3cret"


@dataclass
class Pki:
    """Files of one test CA: ``ca`` (its certificate), the broker's keystore as PEM (key and
    chain in one file) and the client ``alice``'s certificate and key."""

    dir: Path
    ca: trustme.CA
    ca_pem: Path
    server_pem: Path
    client_crt: Path
    client_key: Path

    def client(self, name: str, **subject: str) -> tuple[Path, Path]:
        """A client certificate (CN ``name``, more subject fields by trustme's names) and its key."""
        cert = self.ca.issue_cert(f"{name}@example.com", common_name=name, **subject)
        crt, key = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        cert.cert_chain_pems[0].write_to_path(str(crt))
        cert.private_key_pem.write_to_path(str(key))
        return crt, key

    def server_pkcs12(self, password: str = PASSWORD) -> Path:
        """The broker's key and certificate as a PKCS12 store."""
        pem = self.server_pem.read_bytes()
        key = load_pem_private_key(pem, None)
        cert = load_pem_x509_certificate(pem[pem.index(b"-----BEGIN CERTIFICATE") :])
        path = self.dir / "server.p12"
        path.write_bytes(
            pkcs12.serialize_key_and_certificates(
                b"broker", key, cert, None, BestAvailableEncryption(password.encode())
            )  # type: ignore[arg-type]
        )
        return path

    def server_key_and_chain(self, password: str | None = None) -> tuple[str, str]:
        """The broker's private key (PKCS#8 PEM, encrypted with ``password`` if given) and chain."""
        pem = self.server_pem.read_bytes()
        key = load_pem_private_key(pem, None)
        encryption = BestAvailableEncryption(password.encode()) if password else NoEncryption()
        key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, encryption).decode()
        chain = pem[pem.index(b"-----BEGIN CERTIFICATE") :].decode()
        return key_pem, chain


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="odradek test CA")
    ca_pem = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    server = ca.issue_cert("localhost", "127.0.0.1", common_name="broker")
    server_pem = directory / "server.pem"
    server.private_key_and_cert_chain_pem.write_to_path(str(server_pem))
    pki = Pki(directory, ca, ca_pem, server_pem, directory / "alice.crt", directory / "alice.key")
    pki.client("alice", organization_name="Example", organization_unit_name="eng")
    return pki
