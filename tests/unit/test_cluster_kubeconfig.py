"""The control plane's kubeconfigs name their CA, certificate and key by path.

The Python client writes embedded (``*-data``) credentials to temporary files that it removes only in
an ``atexit`` hook, so each process that was killed -- operators the tests stop, for one -- left a
client key in the temporary directory (earlier test and CI runs had left 236 PEM files in /tmp)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import kubernetes
import yaml

from tritonscale.cluster.control_plane import ControlPlane


def test_a_kubeconfig_loads_without_writing_credentials_to_temporary_files(tmp_path, monkeypatch):
    plane = ControlPlane(tmp_path / "cluster")
    plane.pki.ensure()  # makes the serving directory too
    plane.ca_file.write_bytes(plane.pki.ca_cert.read_bytes())  # kube-apiserver writes its own; any PEM loads
    plane.server = "https://127.0.0.1:6443"

    path = plane.kubeconfig_for("someone", ["some-group"])

    user = yaml.safe_load(path.read_text())["users"][0]["user"]
    assert not any(k.endswith("-data") for k in user), user
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(str(path), client_configuration=cfg)
    assert list(scratch.iterdir()) == []
    assert cfg.host == "https://127.0.0.1:6443"
    assert cfg.ssl_ca_cert == str(plane.ca_file)
    assert cfg.cert_file.startswith(str(plane.pki.dir)) and cfg.key_file.startswith(str(plane.pki.dir))
    assert Path(cfg.cert_file).read_text().startswith("-----BEGIN CERTIFICATE-----")
