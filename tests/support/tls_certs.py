"""Throwaway TLS material for a test broker: a CA, a server and a client certificate.

Everything is generated with ``cryptography`` (EC P-256 keys, SHA-256
signatures, a validity of a few days) and written as PEM files into a
directory of the test's choosing. ``generate(dir)`` returns their paths:

* ``ca_cert``: the CA certificate (basicConstraints CA:true), what clients
  and the broker trust;
* ``server_cert`` / ``server_key``: the broker certificate (SAN IP 127.0.0.1
  and DNS localhost, serverAuth) and its unencrypted PKCS#8 key;
* ``server_keystore``: the unencrypted PKCS#8 key followed by the certificate
  chain (server, CA) in one file: the ``ssl.keystore.type=PEM`` keystore
  Kafka 3.9 reads, without ``ssl.key.password``. (An encrypted PKCS#8 key, as
  ``cryptography`` writes it, uses PBES2, which Kafka 3.9 on Java 17 refuses:
  "PBES2 SecretKeyFactory not available". So the key stays unencrypted, in a
  0600 file of the test's temporary directory.)
* ``client_cert`` / ``client_key``: a client certificate (clientAuth) for
  mutual TLS;
* ``other_ca_cert``: an unrelated CA, to check that a wrong trust anchor fails.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=2)
# clocks of the test machine and the JVM may differ a little
BACKDATE = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    server_keystore: Path
    client_cert: Path
    client_key: Path
    other_ca_cert: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "privstream tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    common_name: str,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    usage: x509.ObjectIdentifier,
    san: list[x509.GeneralName] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def generate(directory: Path) -> TlsFiles:
    """Write a fresh CA, broker and client certificate into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _ca("privstream test CA")
    other_ca, _ = _ca("privstream unrelated CA")
    server_cert, server_key = _leaf(
        "localhost",
        ca_cert,
        ca_key,
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
        ],
    )
    client_cert, client_key = _leaf(
        "privstream-test-client", ca_cert, ca_key, ExtendedKeyUsageOID.CLIENT_AUTH
    )
    return TlsFiles(
        ca_cert=_write(directory / "ca.pem", _cert_pem(ca_cert)),
        server_cert=_write(directory / "server.pem", _cert_pem(server_cert)),
        server_key=_write(directory / "server.key", _key_pem(server_key), private=True),
        server_keystore=_write(
            directory / "server-keystore.pem",
            _key_pem(server_key) + _cert_pem(server_cert) + _cert_pem(ca_cert),
            private=True,
        ),
        client_cert=_write(directory / "client.pem", _cert_pem(client_cert)),
        client_key=_write(directory / "client.key", _key_pem(client_key), private=True),
        other_ca_cert=_write(directory / "other-ca.pem", _cert_pem(other_ca)),
    )
