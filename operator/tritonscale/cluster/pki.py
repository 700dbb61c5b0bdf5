"""Keys and certificates for the local control plane, made with the ``openssl`` CLI.

- a CA that signs client certificates: the API server trusts it (``--client-ca-file``),
  and the user name and groups of a certificate are its CN and O fields;
- the service-account token key pair (RSA 2048): the API server signs tokens with the
  private key and verifies them with the public one; the controller manager's
  tokens controller signs with the private key too.

The API server's own serving certificate is not made here: ``--cert-dir`` lets
kube-apiserver generate a self-signed one (and its CA) on first start.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tritonscale.cluster.build import ClusterError

CLIENT_EXTENSIONS = "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"


def _openssl(*args: str) -> None:
    exe = shutil.which("openssl")
    if not exe:
        raise ClusterError("the openssl command is needed to make the control plane's certificates: "
                           "apt-get install -y openssl")
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise ClusterError(f"openssl {args[0]} failed: {proc.stderr.strip().splitlines()[-1:]}")


@dataclass(frozen=True)
class ClientCert:
    cert: Path
    key: Path


class Pki:
    """Files under ``directory``; each is made once and reused by later starts."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.ca_cert = directory / "ca.crt"
        self.ca_key = directory / "ca.key"
        self.sa_key = directory / "sa.key"
        self.sa_pub = directory / "sa.pub"
        self.serving_dir = directory / "serving"  # kube-apiserver --cert-dir

    @property
    def serving_cert(self) -> Path:
        """kube-apiserver's self-signed serving certificate followed by its CA (written at its first start)."""
        return self.serving_dir / "apiserver.crt"

    def ensure(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.serving_dir.mkdir(exist_ok=True)
        if not (self.ca_cert.exists() and self.ca_key.exists()):
            _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", str(self.ca_key), "-out", str(self.ca_cert), "-days", "3650",
                     "-subj", "/CN=tritonscale-local-client-ca",
                     "-addext", "basicConstraints=critical,CA:TRUE",
                     "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        if not (self.sa_key.exists() and self.sa_pub.exists()):
            _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(self.sa_key))
            _openssl("pkey", "-in", str(self.sa_key), "-pubout", "-out", str(self.sa_pub))
        for path in (self.ca_key, self.sa_key):
            path.chmod(0o600)

    def client_cert(self, user: str, groups: Sequence[str] = ()) -> ClientCert:
        """A client certificate for ``user`` in ``groups`` (CN and O), signed by the CA; reused if present."""
        stem = "client-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in user)
        if groups:
            stem += "-" + "-".join("".join(c if c.isalnum() else "_" for c in g) for g in groups)
        cert, key = self.dir / f"{stem}.crt", self.dir / f"{stem}.key"
        if cert.exists() and key.exists():
            return ClientCert(cert, key)
        for field in (user, *groups):
            if "/" in field or "=" in field or "\\" in field:
                raise ClusterError(f"user and group names with '/', '=' or '\\\\' are not supported: {field!r}")
        subject = "".join(f"/O={g}" for g in groups) + f"/CN={user}"
        csr, ext = self.dir / f"{stem}.csr", self.dir / f"{stem}.ext"
        ext.write_text(CLIENT_EXTENSIONS)
        try:
            _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                     "-keyout", str(key), "-out", str(csr), "-subj", subject)
            _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca_cert), "-CAkey", str(self.ca_key),
                     "-set_serial", "0x" + secrets.token_hex(16), "-days", "825", "-extfile", str(ext),
                     "-out", str(cert))
        finally:
            csr.unlink(missing_ok=True)
            ext.unlink(missing_ok=True)
        key.chmod(0o600)
        return ClientCert(cert, key)
