"""Test PKI made with the ``openssl`` command: a CA and leaf certificates it signs.

Used by the TLS tests of the KEDA scaler and of the external metrics API server. Every file is
written under the directory the caller gives (a pytest ``tmp_path``); keys are 2048-bit RSA, the
certificates valid for one day.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Ca", "Leaf", "make_ca"]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Leaf:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Ca:
    cert: Path
    key: Path
    workdir: Path

    def issue(self, name: str, *, cn: str, sans: tuple[str, ...] = (), client: bool = False) -> Leaf:
        """A certificate for ``cn`` signed by this CA; ``sans`` like ``("DNS:localhost", "IP:127.0.0.1")``."""
        key, csr, cert = (self.workdir / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
        ext = self.workdir / f"{name}.ext"
        usage = "clientAuth" if client else "serverAuth"
        lines = [
            "basicConstraints=CA:FALSE",
            "keyUsage=digitalSignature,keyEncipherment",
            f"extendedKeyUsage={usage}",
        ]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-subj",
            f"/CN={cn}",
            "-out",
            str(csr),
        )
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-days", "1", "-sha256", "-extfile", str(ext), "-out", str(cert),
        )  # fmt: skip
        return Leaf(cert, key)


def make_ca(workdir: Path, name: str = "ca") -> Ca:
    """A self-signed CA under ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    key, cert = workdir / f"{name}.key", workdir / f"{name}.crt"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
        "-days", "1", "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return Ca(cert, key, workdir)
