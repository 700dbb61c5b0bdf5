"""A pod's volumes as host directories, and container paths mapped onto them.

The sandbox runs containers as plain processes, with no mount namespace. So each
volume becomes a directory under the pod's directory (or an existing host
directory), and a container's view is kept as a list of ``(mountPath, host
directory)`` pairs. Paths in a container's command and args are rewritten through
that list: ``--model-repository=/models`` becomes ``--model-repository=<the
model-repository emptyDir>``, and ``cp /config/config.pbtxt /models/linear/`` in
the init container's script copies out of the ConfigMap volume into the emptyDir.

Volume types, as the kubelet's volume plugins fill them:

- ``emptyDir``: a fresh directory (``medium: Memory`` too: tmpfs needs root);
- ``configMap`` / ``secret``: one file per key (or per ``items`` entry), read from
  the API when the pod starts (the kubelet would also refresh them later);
- ``persistentVolumeClaim``: the bound PersistentVolume's ``hostPath`` or ``local``
  path; an unbound claim fails the mount, which is retried;
- ``projected``: ``serviceAccountToken`` from the TokenRequest API (bound to the
  pod), ``configMap``, ``secret`` and ``downwardAPI`` fields of the pod's metadata:
  what the ServiceAccount admission plugin adds to every pod;
- ``hostPath``: the path itself.

Anything else fails the mount with a message naming the volume type.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class MountError(Exception):
    """A volume could not be set up yet (missing object, unbound claim) or at all."""


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: Path


class VolumeAPI:
    """The reads a kubelet's volume plugins make, over the official client (plain dicts)."""

    def __init__(self, api_client: Any) -> None:
        import kubernetes

        self._core = kubernetes.client.CoreV1Api(api_client)
        self._exc = kubernetes.client.ApiException

    def _read(self, fn: Any, *args: Any) -> dict[str, Any] | None:
        try:
            return json.loads(fn(*args, _preload_content=False).data)
        except self._exc as exc:
            if exc.status == 404:
                return None
            raise

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self._core.read_namespaced_config_map, name, namespace)

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self._core.read_namespaced_secret, name, namespace)

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self._core.read_namespaced_persistent_volume_claim, name, namespace)

    def volume(self, name: str) -> dict[str, Any] | None:
        return self._read(self._core.read_persistent_volume, name)

    def token(self, namespace: str, service_account: str, pod: dict[str, Any], audience: str | None,
              expiration_s: int) -> str:
        body = {"spec": {"audiences": [audience] if audience else None, "expirationSeconds": expiration_s,
                         "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"],
                                            "uid": pod["metadata"]["uid"]}}}
        resp = self._core.create_namespaced_service_account_token(service_account, namespace, body,
                                                                  _preload_content=False)
        return json.loads(resp.data)["status"]["token"]


def _key_files(data: Mapping[str, bytes | str], items: list[dict[str, Any]] | None) -> dict[str, bytes | str]:
    if not items:
        return dict(data)
    return {item["path"]: data[item["key"]] for item in items if item.get("key") in data}


def _write(directory: Path, files: dict[str, bytes | str]) -> None:
    for rel, content in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


def _source_files(api: VolumeAPI, pod: dict[str, Any], kind: str, source: dict[str, Any]) -> dict[str, bytes | str]:
    ns = pod["metadata"]["namespace"]
    if kind == "configMap":
        cm = api.configmap(ns, source["name"])
        if cm is None:
            if source.get("optional"):
                return {}
            raise MountError(f'configmap "{source["name"]}" not found')
        return _key_files(cm.get("data") or {}, source.get("items"))
    if kind == "secret":
        name = source.get("secretName") or source["name"]  # the API server requires secretName
        secret = api.secret(ns, name)
        if secret is None:
            if source.get("optional"):
                return {}
            raise MountError(f'secret "{name}" not found')
        decoded = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        return _key_files(decoded, source.get("items"))
    if kind == "downwardAPI":
        out: dict[str, bytes | str] = {}
        for item in source.get("items") or []:
            field_path = (item.get("fieldRef") or {}).get("fieldPath", "")
            section, _, key = field_path.partition(".")
            value = (pod.get(section) or {}).get(key) if section == "metadata" else None
            if value is not None:
                out[item["path"]] = value if isinstance(value, str) else json.dumps(value)
        return out
    if kind == "serviceAccountToken":
        sa = pod["spec"].get("serviceAccountName") or "default"
        token = api.token(ns, sa, pod, source.get("audience"), int(source.get("expirationSeconds") or 3607))
        return {source["path"]: token}
    raise MountError(f"volume source {kind} is not supported by the sandbox's kubelet")


def set_up(api: VolumeAPI, pod: dict[str, Any], volumes_dir: Path) -> dict[str, Path]:
    """Host directory of every volume of ``pod`` (volume name -> path). Raises MountError."""
    out: dict[str, Path] = {}
    for vol in pod["spec"].get("volumes") or []:
        name = vol["name"]
        kinds = [k for k in vol if k != "name"]
        kind = kinds[0] if kinds else "emptyDir"
        source = vol.get(kind) or {}
        if kind == "hostPath":
            out[name] = Path(source["path"])
            continue
        if kind == "persistentVolumeClaim":
            out[name] = _claim_path(api, pod["metadata"]["namespace"], source["claimName"])
            continue
        directory = volumes_dir / name
        if kind == "emptyDir":
            directory.mkdir(parents=True, exist_ok=True)
        elif kind in ("configMap", "secret", "downwardAPI"):
            files = _source_files(api, pod, kind, source)
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            _write(directory, files)
        elif kind == "projected":
            files = {}
            for src in source.get("sources") or []:
                for sub_kind, sub in src.items():
                    files.update(_source_files(api, pod, sub_kind, sub))
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            _write(directory, files)
        else:
            raise MountError(f"volume {name}: {kind} volumes are not supported by the sandbox's kubelet")
        out[name] = directory
    return out


def _claim_path(api: VolumeAPI, namespace: str, claim_name: str) -> Path:
    claim = api.claim(namespace, claim_name)
    if claim is None:
        raise MountError(f'persistentvolumeclaim "{claim_name}" not found')
    volume_name = (claim.get("spec") or {}).get("volumeName")
    if not volume_name or (claim.get("status") or {}).get("phase") != "Bound":
        raise MountError(f'persistentvolumeclaim "{claim_name}" is not bound')
    pv = api.volume(volume_name)
    spec = (pv or {}).get("spec") or {}
    path = (spec.get("hostPath") or spec.get("local") or {}).get("path")
    if not path:
        raise MountError(f"persistentvolume {volume_name}: only hostPath and local volumes exist on this machine")
    return Path(path)


def mounts(container: dict[str, Any], volume_paths: dict[str, Path]) -> list[Mount]:
    """The container's ``volumeMounts`` resolved to host paths, longest mount path first."""
    out = []
    for m in container.get("volumeMounts") or []:
        host = volume_paths.get(m["name"])
        if host is None:
            raise MountError(f"container {container['name']}: volumeMount {m['name']} names no volume")
        if m.get("subPath"):
            host = host / m["subPath"]
        out.append(Mount(m["mountPath"].rstrip("/") or "/", host))
    return sorted(out, key=lambda m: len(m.container_path), reverse=True)


def rewrite_paths(text: str, container_mounts: list[Mount]) -> str:
    """Replace every container path under a mount in ``text`` by its host path.

    A mount path matches only as a whole path component: ``/models`` maps
    ``/models`` and ``/models/linear`` but not ``/models2``. One pass, longest mount
    first, so a host path put in is never rewritten again.
    """
    if not container_mounts:
        return text
    by_path = {m.container_path: str(m.host_path) for m in container_mounts}
    alternatives = "|".join(re.escape(p) for p in sorted(by_path, key=len, reverse=True))
    pattern = re.compile(r"(?<![\w./-])(" + alternatives + r")(?=/|$|[^\w.-])")
    return pattern.sub(lambda m: by_path[m.group(1)], text)
