"""A real Kubernetes control plane for the tests, the sandbox and `tritonscale cluster up`:
kube-apiserver, kube-controller-manager, kube-scheduler and etcd built once from
Kubernetes' own Go modules (``e2e/cluster``) and started on 127.0.0.1."""

from tritonscale.cluster.build import ClusterError, ensure_binaries
from tritonscale.cluster.control_plane import ControlPlane

__all__ = ["ClusterError", "ControlPlane", "ensure_binaries"]
