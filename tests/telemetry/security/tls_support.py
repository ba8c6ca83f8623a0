"""A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(*attributes: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])


def _write(path: Path, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Path:
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name((NameOID.COMMON_NAME, "kip714 test CA"))
    ca = _issue(ca_name, ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue(
        _name((NameOID.COMMON_NAME, "localhost")),
        server_key,
        ca_name,
        ca_key,
        ca=False,
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue(
        _name((NameOID.ORGANIZATION_NAME, "kip714"), (NameOID.COMMON_NAME, "alice")),
        client_key,
        ca_name,
        ca_key,
        ca=False,
    )
    return Certificates(
        ca=_write(directory / "ca.pem", ca, ca_key),
        server_cert=_write(directory / "server.pem", server, server_key),
        server_key=directory / "server.key",
        client_cert=_write(directory / "client.pem", client, client_key),
        client_key=directory / "client.key",
    )
