"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, built from Kubernetes' own Go modules
(see build.py), each in its own process group.

    plane = ControlPlane(Path("/tmp/k"))
    kubeconfig = plane.start()      # DIR/kubeconfig, cluster admin, written once ready
    ...
    plane.stop()                    # SIGTERM, then SIGKILL, of every process group

Identities are client certificates from one local CA (pki.py): the admin
(group system:masters), system:kube-controller-manager and system:kube-scheduler
(bound by Kubernetes' bootstrap RBAC), and any other through ``kubeconfig_for``
(e.g. ``system:node:NAME`` in ``system:nodes`` for a kubelet, which the Node
authorizer then restricts to its own Node and Pods). There are no kubelets: Nodes
and Pod status are whoever registers them.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from tritonscale import process_group
from tritonscale.cluster.build import ClusterError, ensure_binaries
from tritonscale.cluster.pki import Pki

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "tritonscale-admin"

Progress = Callable[[str], None]


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class _Component:
    name: str
    cmd: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None
    log: IO[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler under ``directory``.

    ``directory`` keeps its state between starts (etcd data, keys), so a second start
    of the same directory finds the objects of the first; ports are new each start.
    ``audit_policy`` (an audit.k8s.io/v1 Policy as a dict) turns on the API server's
    audit log at ``audit_log`` (JSON lines).
    """

    def __init__(self, directory: Path | str, *, audit_policy: dict[str, Any] | None = None,
                 apiserver_args: Sequence[str] = (), progress: Progress | None = None,
                 binaries: Path | None = None):
        self.dir = Path(directory).resolve()
        self.kubeconfig = self.dir / "kubeconfig"
        self.log_dir = self.dir / "logs"
        self.audit_log: Path | None = self.dir / "audit.log" if audit_policy is not None else None
        self.pki = Pki(self.dir / "pki")
        self.server = ""
        self._audit_policy = audit_policy
        self._apiserver_args = list(apiserver_args)
        self._progress = progress or (lambda line: None)
        self._binaries = binaries
        self._components: list[_Component] = []

    # ---- the API ---------------------------------------------------------------------

    @property
    def ca_file(self) -> Path:
        """The CA bundle that verifies the API server (its self-signed certificate)."""
        return self.pki.serving_cert

    def start(self, timeout: float = 180.0, before_controllers: Callable[[Path], object] | None = None) -> Path:
        """Start everything, wait until it serves, write and return ``DIR/kubeconfig``.

        ``before_controllers(admin_kubeconfig)`` runs once the API server is ready and
        before kube-controller-manager starts: CRDs installed there are known to the
        garbage collector from its first discovery (it rediscovers resources only every
        30 s, so children of a kind it does not know yet wait up to a minute for it)."""
        if self._components:
            raise ClusterError("the control plane is already started")
        started = time.monotonic()
        deadline = started + timeout
        bin_dir = self._binaries or ensure_binaries(self._progress)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.unlink(missing_ok=True)  # appears only once the control plane is ready
        self._stop_leftovers()
        self.pki.ensure()
        etcd_client, etcd_peer, apiserver, kcm, scheduler = _free_ports(5)
        self.server = f"https://127.0.0.1:{apiserver}"
        process_group.register(self)
        try:
            self._launch("etcd", etcd_client, [str(bin_dir / "etcd"), f"--data-dir={self.dir / 'etcd'}",
                                  f"--listen-client-url=http://127.0.0.1:{etcd_client}",
                                  f"--listen-peer-url=http://127.0.0.1:{etcd_peer}"])
            self._wait("etcd", f"http://127.0.0.1:{etcd_client}", "/health", deadline)

            self._launch("kube-apiserver", apiserver, [str(bin_dir / "kube-apiserver"),
                                            *self._apiserver_flags(etcd_client, apiserver)])
            admin = self.pki.client_cert(ADMIN_USER, ["system:masters"])
            self._wait_for_file("kube-apiserver", self.ca_file, deadline)  # written as it starts serving
            self._wait("kube-apiserver", self.server, "/readyz", deadline, verify=self._tls_context(admin))
            if before_controllers is not None:
                before_controllers(self.kubeconfig_for(ADMIN_USER, ["system:masters"]))

            kcm_config = self.kubeconfig_for("system:kube-controller-manager",
                                             path=self.dir / "kube-controller-manager.kubeconfig")
            self._launch("kube-controller-manager", kcm, [
                str(bin_dir / "kube-controller-manager"),
                f"--kubeconfig={kcm_config}", f"--authentication-kubeconfig={kcm_config}",
                f"--authorization-kubeconfig={kcm_config}",
                "--bind-address=127.0.0.1", f"--secure-port={kcm}",
                f"--cert-dir={self.dir / 'kube-controller-manager'}",
                # Every on-by-default controller: deployment, replicaset, garbage-collector,
                # endpointslice, disruption, serviceaccount(-token), node-lifecycle, namespace...
                "--controllers=*",
                # Each controller as its own ServiceAccount with its bootstrap role, as kubeadm
                # clusters run them, so their permissions are the real ones.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.ca_file}",
                "--cluster-name=tritonscale",
                # One replica: no 15 s lease acquisition before the controllers start.
                "--leader-elect=false",
            ])
            sched_config = self.kubeconfig_for("system:kube-scheduler",
                                               path=self.dir / "kube-scheduler.kubeconfig")
            self._launch("kube-scheduler", scheduler, [
                str(bin_dir / "kube-scheduler"),
                f"--kubeconfig={sched_config}", f"--authentication-kubeconfig={sched_config}",
                f"--authorization-kubeconfig={sched_config}",
                "--bind-address=127.0.0.1", f"--secure-port={scheduler}",
                f"--cert-dir={self.dir / 'kube-scheduler'}",
                "--leader-elect=false",
            ])
            # /healthz is readable without credentials (always-allow path); the
            # components' serving certificates are self-signed: no verification.
            self._wait("kube-controller-manager", f"https://127.0.0.1:{kcm}", "/healthz", deadline, verify=False)
            self._wait("kube-scheduler", f"https://127.0.0.1:{scheduler}", "/healthz", deadline, verify=False)
            # Pods need their namespace's ServiceAccount `default`, which the
            # serviceaccount controller creates: wait for the one in `default`.
            self._wait("kube-controller-manager", self.server, "/api/v1/namespaces/default/serviceaccounts/default",
                       deadline, verify=self._tls_context(admin))
        except BaseException:
            self.stop()
            raise
        self._write_kubeconfig(self.kubeconfig, admin.cert, admin.key)
        self._progress(f"control plane ready in {time.monotonic() - started:.1f} s "
                       f"(kube-apiserver {self.server}); kubeconfig: {self.kubeconfig}")
        return self.kubeconfig

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every component (scheduler first, etcd last) and its whole process group."""
        for comp in reversed(self._components):
            if comp.proc is not None:
                process_group.stop_group(comp.proc, timeout)
            if comp.log is not None:
                comp.log.close()
        self._components.clear()
        self.kubeconfig.unlink(missing_ok=True)  # it points at ports nothing listens on any more
        self._pids_file.unlink(missing_ok=True)
        process_group.unregister(self)

    def failed(self) -> str | None:
        """None while every component runs; else which one exited, with its log's tail."""
        for comp in self._components:
            if not comp.alive():
                code = comp.proc.returncode if comp.proc is not None else None
                return f"{comp.name} exited ({code}); the end of {comp.log_path}:\n{comp.log_tail()}"
        return None

    def pids(self) -> dict[str, int]:
        return {c.name: c.proc.pid for c in self._components if c.proc is not None}

    def kubeconfig_for(self, user: str, groups: Sequence[str] = (), path: Path | None = None) -> Path:
        """A kubeconfig with a client certificate for ``user`` in ``groups`` (the API
        server's authorizers decide what it may do)."""
        if not self.server:
            raise ClusterError("start the control plane first: the kubeconfig needs its address")
        cert = self.pki.client_cert(user, groups)
        path = path or self.dir / "kubeconfigs" / f"{cert.cert.stem}.kubeconfig"
        self._write_kubeconfig(path, cert.cert, cert.key, user=user)
        return path

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- internals -------------------------------------------------------------------

    def _apiserver_flags(self, etcd_port: int, port: int) -> list[str]:
        flags = [
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            # No --tls-cert-file: kube-apiserver writes a self-signed certificate (for
            # 127.0.0.1, kubernetes.default.svc, ...) and its CA into --cert-dir.
            f"--cert-dir={self.pki.serving_dir}",
            f"--client-ca-file={self.pki.ca_cert}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={self.pki.sa_pub}",
            f"--service-account-signing-key-file={self.pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # The default admission plugins, plus OwnerReferencesPermissionEnforcement
            # (on in OpenShift): setting blockOwnerDeletion on a child then needs
            # `update` on the owner's finalizers, which the chart grants for that reason.
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            # The `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints
            # validation rejects as loopback: no endpoint reconciler (nothing in a pod
            # here dials the API server through the Service).
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        ]
        if self._audit_policy is not None and self.audit_log is not None:
            policy = self.dir / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump(self._audit_policy, sort_keys=False))
            flags += [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
                      "--audit-log-format=json", "--audit-log-maxage=0", "--audit-log-maxbackup=0",
                      "--audit-log-maxsize=0"]
        return flags + self._apiserver_args

    def _launch(self, name: str, port: int, cmd: list[str]) -> None:
        log_path = self.log_dir / f"{name}.log"
        self._progress(f"starting {name} on 127.0.0.1:{port} (log: {log_path})")
        proc, log = process_group.spawn(cmd, log_path=log_path, env={**os.environ, "KUBECONFIG": os.devnull})
        self._components.append(_Component(name, cmd, log_path, proc, log))
        with open(self._pids_file, "a") as pids:
            pids.write(f"{proc.pid}\n")

    @property
    def _pids_file(self) -> Path:
        """The components' pids while they run (each leads its own session): a run killed with SIGKILL (the
        OOM killer, `kill -9`) stops none of them, and they keep DIR's etcd data and their ports."""
        return self.dir / "pids"

    def _stop_leftovers(self) -> None:
        """Stop the components a killed run on this DIR left running: a new etcd on the data dir an orphan
        held waited 180 s, and the error quoted the orphan's log (session 86's audit). A pid counts only
        while its command line names DIR (a pid reused since is someone else's)."""
        try:
            pids = [int(line) for line in self._pids_file.read_text().split() if line.isdigit()]
        except OSError:
            return
        left = []
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(self.dir) in cmdline:
                left.append(pid)
        if left:
            self._progress(f"stopping {len(left)} process(es) an earlier run on {self.dir} left running "
                           f"(pids {', '.join(map(str, left))})")
            process_group.stop_pids(left, timeout=10.0)
        self._pids_file.unlink(missing_ok=True)

    def _wait(self, name: str, base_url: str, path: str, deadline: float, **client_options: Any) -> None:
        t0 = time.monotonic()
        comp = next(c for c in self._components if c.name == name)
        ok = process_group.wait_http_ok_blocking(base_url, path, max(0.0, deadline - t0),
                                                 lambda: self.failed() is None, **client_options)
        if not ok:
            problem = self.failed() or (f"{name}: {base_url}{path} did not answer 200 before the deadline; "
                                        f"the end of {comp.log_path}:\n{comp.log_tail()}")
            raise ClusterError(problem)
        self._progress(f"{name}: {path} ok after {time.monotonic() - t0:.1f} s")

    def _wait_for_file(self, name: str, path: Path, deadline: float) -> None:
        while not (path.exists() and path.stat().st_size > 0):
            if self.failed() is not None or time.monotonic() > deadline:
                raise ClusterError(self.failed() or f"{name} did not write {path} before the deadline")
            time.sleep(0.05)

    def _tls_context(self, cert: Any) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
        return ctx

    def _write_kubeconfig(self, path: Path, cert: Path, key: Path, user: str = ADMIN_USER) -> None:
        """The CA, certificate and key by path (the files stay under the cluster's directory), not
        embedded: the Python client writes embedded ones to temporary files that it removes only at a
        clean exit, so every process that was killed left private keys in /tmp."""
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "tritonscale", "cluster": {
                "server": self.server, "certificate-authority": str(self.ca_file.resolve())}}],
            "users": [{"name": user, "user": {"client-certificate": str(cert.resolve()),
                                              "client-key": str(key.resolve())}}],
            "contexts": [{"name": "tritonscale", "context": {"cluster": "tritonscale", "user": user}}],
            "current-context": "tritonscale",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
        tmp.chmod(0o600)
        os.replace(tmp, path)  # readers never see half a kubeconfig

