"""An emulated Kubernetes API: KMock's ``KubernetesEmulator`` plus the behaviour
Kopf and the kubernetes client need from a real API server.

KMock 0.8 (pinned) stores objects and streams watches but leaves out parts of
the API server contract. This subclass adds exactly those parts:

- ``metadata.uid``, ``resourceVersion``, ``creationTimestamp`` and
  ``generation`` (bumped when ``spec`` changes) -- Kopf's finalizer JSON-patch
  ``test`` and ownerReferences need them;
- optimistic concurrency: a merge patch that names a stale ``resourceVersion``
  gets 409, like the real server;
- a failed JSON-patch answers 422, not 500; create answers 201, not 200;
- ``metadata.namespace`` filled from the URL on create, and ``generateName``
  honoured (Kopf posts Events with it);
- watches subscribe *before* replaying existing objects, so no event between
  replay and subscription is lost; a list answers the current resourceVersion and
  a watch from ``?resourceVersion=X`` sends only what is newer than X (versions
  come from one global counter, so this is exact), as the real server does;
- server-side printing: a list of InferenceServices requested ``as=Table`` (what
  ``kubectl get tis`` asks for) is rendered with the CRD's additionalPrinterColumns,
  as the real API server does, so kubectl shows the same columns as on a cluster;
- ``/api/v1/namespaces`` (list and watch), which KMock's path parser cannot take
  apart and which Kopf reads in namespaced mode (``tritonscale run --namespace``):
  namespaces are those of the stored objects plus ``default``;
- a bounded request history (KMock rescans every earlier request on each
  dispatch) plus a compact log of (verb, group, resource, subresource) that the
  RBAC test compares with the chart's ClusterRole.

Not emulated (as with KMock): server-side apply, PUT, label/field selectors,
strategic merge, garbage collection, schema validation, controllers.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import secrets
import threading
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator

import aiohttp.web
import attrs
import jsonpatch
import kmock
from kmock._internal import enums, rendering
from kmock._internal.k8s import KubernetesError

from tritonscale.api import spec as S

_HISTORY_KEEP = 8  # KMock rescans its whole request history on every dispatch: keep it tiny

_VERBS = {
    enums.action.LIST: "list",
    enums.action.WATCH: "watch",
    enums.action.FETCH: "get",
    enums.action.CREATE: "create",
    enums.action.UPDATE: "patch",
    enums.action.DELETE: "delete",
}


@dataclass(frozen=True)
class ApiCall:
    verb: str
    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None


def _now() -> str:
    return datetime.datetime.now(tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@attrs.define(kw_only=True)
class KubernetesAPI(kmock.KubernetesEmulator):
    calls: list[ApiCall] = attrs.field(factory=list, init=False)
    _rv: Any = attrs.field(factory=lambda: itertools.count(1), init=False)
    _last_rv: int = attrs.field(default=0, init=False)
    extra_namespaces: set[str] = attrs.field(factory=set, init=False)  # namespaces that exist without objects

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.resources.load_bundled()
        self.resources[f"{S.GROUP}/{S.VERSION}/{S.PLURAL}"] = kmock.ResourceInfo(
            kind=S.KIND, singular=S.SINGULAR, namespaced=True, shortnames=set(S.SHORT_NAMES),
            verbs={"list", "watch", "get", "create", "patch", "update", "delete"}, subresources={"status"},
        )

    def _next_rv(self) -> str:
        self._last_rv = next(self._rv)
        return str(self._last_rv)

    async def _serve_list(self, request: rendering.Request) -> Any:
        payload = await super()._serve_list(request)
        payload["metadata"]["resourceVersion"] = str(self._last_rv)
        return payload

    def _record(self, request: rendering.Request) -> None:
        res = request.resource
        if res is None or request.action not in _VERBS:
            return
        self.calls.append(ApiCall(
            verb=_VERBS[request.action], group=res.group or "", resource=res.plural or "",
            subresource=request.subresource, namespace=request.namespace, name=request.name,
        ))

    def _prepare_create(self, request: rendering.Request) -> None:
        data = request.data
        if not isinstance(data, dict):
            return
        meta = data.setdefault("metadata", {})
        if request.namespace and not meta.get("namespace"):
            meta["namespace"] = request.namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta["resourceVersion"] = self._next_rv()
        meta.setdefault("generation", 1)

    def _prepare_update(self, request: rendering.Request) -> None:
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return  # KMock answers 404
        current = dict(self.objects[key].raw)
        meta = current.get("metadata", {})
        rv = self._next_rv()
        data = request.data
        spec_changed = False
        if isinstance(data, list):  # JSON-patch: check it applies, then stamp the new version
            try:
                patched = jsonpatch.apply_patch(current, data, in_place=False)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise KubernetesError(status=422, reason="Invalid", message=f"JSON patch failed: {exc}")
            spec_changed = patched.get("spec") != current.get("spec")
            data.append({"op": "add", "path": "/metadata/resourceVersion", "value": rv})
            if spec_changed and request.subresource is None:
                data.append({"op": "add", "path": "/metadata/generation", "value": meta.get("generation", 1) + 1})
        elif isinstance(data, dict):
            want = (data.get("metadata") or {}).get("resourceVersion")
            if want is not None and want != meta.get("resourceVersion"):
                raise KubernetesError(status=409, reason="Conflict",
                                      message="the object has been modified; please apply your changes "
                                      "to the latest version and try again")
            # /status may change only status; the main resource ignores status (as the real server does).
            for key in [k for k in data if (k != "status") == (request.subresource is not None) and k != "metadata"]:
                del data[key]
            spec_changed = "spec" in data and _merged(current.get("spec"), data["spec"]) != current.get("spec")
            md = data.setdefault("metadata", {})
            md["resourceVersion"] = rv
            if spec_changed:
                md["generation"] = meta.get("generation", 1) + 1

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw_request.path.rstrip("/") == "/api/v1/namespaces" and raw_request.method == "GET":
            return await self._serve_namespaces(raw_request)
        return await super().__call__(raw_request)

    def namespace_names(self) -> list[str]:
        return sorted({"default"} | self.extra_namespaces | {ns for (_, ns, _) in list(self.objects.keys()) if ns})

    async def _serve_namespaces(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        self.calls.append(ApiCall(verb="watch" if raw_request.query.get("watch") in ("true", "1") else "list",
                                  group="", resource="namespaces", subresource=None, namespace=None, name=None))
        items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "uid": n, "resourceVersion": "1"}}
                 for n in self.namespace_names()]
        if raw_request.query.get("watch") not in ("true", "1"):
            return aiohttp.web.json_response({"apiVersion": "v1", "kind": "NamespaceList",
                                              "metadata": {"resourceVersion": "1"}, "items": items})
        # A watch: announce new namespaces as objects appear in them, until the client's timeout.
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw_request)
        timeout = float(raw_request.query.get("timeoutSeconds") or 300)
        known = {i["metadata"]["name"] for i in items}
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            while asyncio.get_running_loop().time() < deadline:
                for name in set(self.namespace_names()) - known:
                    known.add(name)
                    event = {"type": "ADDED", "object": {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": name, "uid": name,
                                                                      "resourceVersion": "1"}}}
                    await response.write((json.dumps(event) + "\n").encode())
                await asyncio.sleep(0.5)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    def _wants_table(self, request: rendering.Request) -> bool:
        res = request.resource
        return (request.action in (enums.action.LIST, enums.action.FETCH) and res is not None
                and res.plural == S.PLURAL and request.subresource is None
                and "as=Table" in (request.headers.get("Accept") or request.headers.get("accept") or ""))

    def _table(self, request: rendering.Request) -> dict[str, Any]:
        from tritonscale.api.crd import PRINTER_COLUMNS

        objs = [dict(obj.raw) for (res, ns, _), obj in list(self.objects.items())
                if res == request.resource and not obj.deleted
                and (request.namespace is None or ns == request.namespace)
                and (request.name is None or obj.raw["metadata"]["name"] == request.name)]
        if request.name is not None and not objs:
            raise KubernetesError(status=404, reason="NotFound", message=f"{S.PLURAL} {request.name!r} not found")
        columns = [{"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}]
        columns += [{"name": c["name"], "type": c["type"], "format": "", "description": "",
                     "priority": c.get("priority", 0)} for c in PRINTER_COLUMNS]
        rows = []
        for obj in sorted(objs, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])):
            cells: list[Any] = [obj["metadata"]["name"]]
            for c in PRINTER_COLUMNS:
                value = jsonpath_first(obj, c["jsonPath"])
                cells.append(_age(value) if c["type"] == "date" and value else value)
            rows.append({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                     "metadata": obj["metadata"]}})
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(self._last_rv)},
                "columnDefinitions": columns, "rows": rows}

    async def _handle(self, request: rendering.Request) -> Any:
        self._record(request)
        if self._wants_table(request):
            try:
                return aiohttp.web.json_response(self._table(request))
            except KubernetesError as exc:
                return await self._render_error(exc)
        if len(self._requests) > 2 * _HISTORY_KEEP:
            del self._requests[:-_HISTORY_KEEP]
        if request.resource is not None:
            try:
                if request.action == enums.action.CREATE:
                    self._prepare_create(request)
                elif request.action == enums.action.UPDATE and request.name is not None:
                    self._prepare_update(request)
                elif request.action == enums.action.DELETE and request.name is not None:
                    key = (request.resource, request.namespace, request.name)
                    if key in self.objects and not self.objects[key].deleted:
                        # KMock marks a finalizer-blocked deletion (deletionTimestamp) without a
                        # new resourceVersion; a watch would take it for a repeat. Give it one.
                        self.objects[key].patch({"metadata": {"resourceVersion": self._next_rv()}})
            except KubernetesError as exc:
                return await self._render_error(exc)
        response = await super()._handle(request)
        if request.action == enums.action.CREATE and response.status == 200 and not response.prepared:
            response.set_status(201)  # the real API answers 201 Created; clients map types by status
        return response

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[Any]:
        # Subscribe first, then replay: an event published in between is delivered, not lost.
        yield b""
        assert request.resource is not None
        bus = self._buses[request.resource]
        mark = await bus.mark()
        try:
            async with self._lock:
                snapshot = [
                    {"type": "ADDED", "object": obj.raw}
                    for (res, ns, _), obj in self.objects.items()
                    if res == request.resource and not obj.deleted
                    and (request.namespace is None or ns == request.namespace)
                ]
            # Per object, a real watch never goes back in resourceVersion. An event still
            # buffered on the bus can repeat what the snapshot already showed: skip it.
            seen: dict[tuple[str, str], int] = {}
            try:  # watch from the version a LIST returned: only newer changes
                since = int(request.params.get("resourceVersion") or -1)
            except ValueError:
                since = -1

            def fresh(event: dict[str, Any]) -> bool:
                meta = (event.get("object") or {}).get("metadata", {})
                key = (meta.get("namespace", ""), meta.get("name", ""))
                try:
                    rv = int(meta.get("resourceVersion") or 0)
                except ValueError:
                    return True
                if event.get("type") != "DELETED" and rv <= max(seen.get(key, -1), since):
                    return False
                seen[key] = rv
                return True

            for event in snapshot:
                if fresh(event):
                    yield event
            async for event in bus.stream(since=mark):
                ns = (event.get("object") or {}).get("metadata", {}).get("namespace")
                if (request.namespace is None or ns == request.namespace) and fresh(event):
                    yield event
        finally:
            await bus.unmark(mark)

    # ---- conveniences for tests and the sandbox -------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        res = kmock.resource(resource) if isinstance(resource, str) else resource
        for (r, ns, n), obj in list(self.objects.items()):
            if r == res and ns == namespace and n == name and not obj.deleted:
                return dict(obj.raw)
        return None

    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        res = kmock.resource(resource)
        return [dict(obj.raw) for (r, ns, _), obj in list(self.objects.items())
                if r == res and not obj.deleted and (namespace is None or ns == namespace)]


def jsonpath_first(obj: Any, path: str) -> Any:
    """The first match of a Kubernetes printer-column JSONPath: ``.a.b`` steps and
    ``[?(@.k=="v")]`` filters -- the forms the InferenceService CRD uses."""
    import re

    tokens = re.findall(r'\.([A-Za-z0-9_]+)|\[\?\(@\.([A-Za-z0-9_]+)=="([^"]*)"\)\]', path)
    cur: Any = obj
    for key, fkey, fval in tokens:
        if key:
            cur = cur.get(key) if isinstance(cur, dict) else None
        else:
            cur = next((x for x in cur if isinstance(x, dict) and x.get(fkey) == fval), None) \
                if isinstance(cur, list) else None
        if cur is None:
            return None
    return cur


def _age(timestamp: str) -> str:
    then = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    secs = int((datetime.datetime.now(tz=datetime.timezone.utc) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{max(secs, 0)}s"


def _merged(base: Any, patch: Any) -> Any:
    if not isinstance(base, dict) or not isinstance(patch, dict):
        return patch
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merged(out.get(k), v)
    return out


class EmulatedCluster:
    """Runs :class:`KubernetesAPI` on 127.0.0.1 in a background thread with its own
    event loop, and writes a kubeconfig pointing at it.

    A separate loop keeps the emulator responsive whatever the caller does, and
    lets synchronous code (the sandbox, pytest) use it directly.
    """

    def __init__(self, port: int = 0) -> None:
        self._port = port
        self.api: KubernetesAPI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: kmock.Server | None = None
        self.url = ""

    def start(self) -> "EmulatedCluster":
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)

            async def boot() -> None:
                self.api = KubernetesAPI(strict=False)
                # Inside the handler's context, KMock renders errors as Kubernetes Status
                # responses (404, 409...) instead of letting aiohttp answer 500.
                await self.api.__aenter__()
                self._server = kmock.Server(self.api, port=self._port or None)
                await self._server.__aenter__()
                self.url = f"http://127.0.0.1:{self._server.port}"

            try:
                loop.run_until_complete(boot())
            except BaseException as exc:  # surfaced to the caller below
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._server.__aexit__(None, None, None))
            loop.run_until_complete(self.api.__aexit__(None, None, None))
            loop.close()

        self._thread = threading.Thread(target=run, name="kube-emulator", daemon=True)
        self._thread.start()
        ready.wait(30)
        if errors:
            raise RuntimeError(f"emulated Kubernetes API failed to start: {errors[0]}") from errors[0]
        return self

    def call(self, coro_fn: Any, *args: Any) -> Any:
        """Run ``coro_fn(*args)`` on the emulator's loop and wait for the result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro_fn(*args), self._loop).result(30)

    def write_kubeconfig(self, path: str) -> str:
        import yaml

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulated", "cluster": {"server": self.url}}],
            "users": [{"name": "emulated", "user": {"token": "emulated"}}],
            "contexts": [{"name": "emulated", "context": {"cluster": "emulated", "user": "emulated",
                                                           "namespace": "default"}}],
            "current-context": "emulated",
        }
        with open(path, "w") as fh:
            yaml.safe_dump(config, fh)
        return path

    def stop(self) -> None:
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> "EmulatedCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
