"""Certificates for TLS peer-link tests, made with the openssl command: a CA and, per router, a
key and a certificate it signed. Nothing here is secret; every test makes its own."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Credentials:
    certificate: Path
    key: Path
    ca: Path
    password: str | None = None

    def tls_xml(self, cipher_suites: str | None = None) -> str:
        password = f"<certificate-key-password>{self.password}</certificate-key-password>" if self.password else ""
        ciphers = f"<cipher-suites>{cipher_suites}</cipher-suites>" if cipher_suites else ""
        return (f"<tls><certificate>{self.certificate}</certificate><certificate-key>{self.key}</certificate-key>"
                f"{password}<trusted-certificates>{self.ca}</trusted-certificates>{ciphers}</tls>")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str = "ca") -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
             "-days", "36500", "-subj", f"/CN=umrouter test {name}")
    return cert, key


def issue(directory: Path, name: str, ca: tuple[Path, Path], password: str | None = None) -> Credentials:
    """A key and a certificate for `name`, signed by `ca` (the pair make_ca returned)."""
    key, request, cert = directory / f"{name}.key", directory / f"{name}.csr", directory / f"{name}.pem"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(request),
             "-subj", f"/CN={name}")
    _openssl("x509", "-req", "-in", str(request), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-out", str(cert), "-days", "36500")
    if password:
        encrypted = directory / f"{name}.enc.key"
        _openssl("pkey", "-in", str(key), "-out", str(encrypted), "-aes256", "-passout", f"pass:{password}")
        key = encrypted
    return Credentials(cert, key, ca[0], password)
