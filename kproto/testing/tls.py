"""A throwaway certificate authority for TLS tests (needs the ``cryptography`` package).

    ca = TestCA(tmp_path)
    server = ca.issue("CN=broker", hosts=["127.0.0.1", "localhost"])
    alice = ca.issue("CN=alice,OU=Eng,O=Acme")
    broker_ctx = ca.server_context(server)                 # trusts the CA's client certificates
    client_ctx = ca.client_context(alice)                  # presents alice's certificate
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

__all__ = ["TestCA", "Issued"]


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM files."""

    cert: str
    key: str


def _name(subject: str) -> Any:
    """An RFC 4514 string (the first RDN last, as written) as a cryptography Name."""
    from cryptography import x509
    return x509.Name.from_rfc4514_string(subject)


class TestCA:
    """A self-signed EC P-256 CA under ``directory`` that issues leaf certificates."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str | os.PathLike[str], subject: str = "CN=kproto test CA") -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self._name = _name(subject)
        self._cert = (x509.CertificateBuilder().subject_name(self._name).issuer_name(self._name)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(minutes=5))
                      .not_valid_after(now + datetime.timedelta(days=2))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .sign(self._key, hashes.SHA256()))
        self.cert = self._write("ca.pem", self._cert, None).cert

    def _write(self, stem: str, cert: Any, key: Any) -> Issued:
        from cryptography.hazmat.primitives import serialization

        cert_path = self.dir / stem
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path = self.dir / (stem[:-4] + "-key.pem")
        if key is not None:
            key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                   serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
        return Issued(str(cert_path), str(key_path))

    def issue(self, subject: str, hosts: Sequence[str] = ("127.0.0.1", "localhost"),
              name: Optional[str] = None) -> Issued:
        """A certificate for ``subject`` (RFC 4514, e.g. ``CN=alice,O=Acme``) valid for
        ``hosts`` (IP addresses or DNS names), signed by this CA."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        alt: list[x509.GeneralName] = []
        for h in hosts:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                alt.append(x509.DNSName(h))
        builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(self._name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1)))
        if alt:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        stem = name or f"cert-{cert.serial_number:x}"
        return self._write(f"{stem}.pem", cert, key)

    def server_context(self, issued: Issued) -> ssl.SSLContext:
        """A server context presenting ``issued`` and trusting this CA's client certificates
        (whether it asks for one is the broker's ``ssl_client_auth``)."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.cert)
        ctx.load_cert_chain(issued.cert, issued.key)
        return ctx

    def client_context(self, issued: Optional[Issued] = None) -> ssl.SSLContext:
        """A client context trusting this CA, presenting ``issued`` when given."""
        ctx = ssl.create_default_context(cafile=self.cert)
        if issued is not None:
            ctx.load_cert_chain(issued.cert, issued.key)
        return ctx
