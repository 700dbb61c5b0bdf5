"""List-then-watch of one kind of object, the way client-go's informers keep a cache.

The sandbox's kubelet watches the Pods bound to its Nodes and its Service router
watches EndpointSlices; both need the same loop:

1. LIST (gives the objects and the collection's ``resourceVersion``);
2. WATCH from that ``resourceVersion`` (with bookmarks), applying ADDED / MODIFIED /
   DELETED to a cache keyed by uid and calling ``on_change`` after each;
3. when the watch ends (server timeout) resume from the last resourceVersion seen;
   when it fails (410 Gone: the version was compacted away, or any error), wait
   ``RELIST_DELAY_S`` and LIST again, so no change is lost, only coalesced.

It runs on a daemon thread because the official kubernetes client is synchronous;
``on_change`` is handed to the asyncio loop with ``call_soon_threadsafe``. It reads
raw JSON (``_preload_content=False``): the sandbox works on plain dicts, like the API.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# A server-side watch ends after this long and is resumed from the last version:
# bounded, so a connection the apiserver silently dropped is noticed within a minute.
WATCH_TIMEOUT_S = 60
# After a failed LIST or WATCH (the apiserver restarting, a 410), retry after 1 s: the
# objects here change a few times a second at most, so a relist costs little.
RELIST_DELAY_S = 1.0


class ListWatch:
    """Keep ``objects`` (uid -> object dict) in step with the API.

    ``list_fn`` is a generated client method such as ``CoreV1Api.list_pod_for_all_namespaces``;
    ``kwargs`` (``field_selector=``, ``label_selector=``, ``namespace`` positional via
    ``args``) go to every LIST and WATCH call.
    """

    def __init__(self, list_fn: Callable[..., Any], *args: Any, on_change: Callable[[], None],
                 loop: asyncio.AbstractEventLoop, name: str = "list-watch", **kwargs: Any) -> None:
        self._list_fn = list_fn
        self._args = args
        self._kwargs = kwargs
        self._on_change = on_change
        self._loop = loop
        self._stop = threading.Event()
        self._response: Any = None
        self._lock = threading.Lock()
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = threading.Event()  # set after the first successful LIST
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> ListWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            try:  # shuts the socket down, which wakes the watch thread's blocked read at once
                response.shutdown()  # (close() from this thread waits for that read: up to 20 s)
            except Exception:
                pass

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.objects.values())

    # ---- the loop (watch thread)

    def _notify(self) -> None:
        if not self._stop.is_set():
            try:
                self._loop.call_soon_threadsafe(self._on_change)
            except RuntimeError:  # the loop closed under us: the sandbox is shutting down
                self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._list()
                while version and not self._stop.is_set():
                    version = self._watch(version)
            except Exception as exc:  # apiserver unavailable, 410 Gone, a closed connection
                if self._stop.is_set():
                    return
                self.errors += 1
                log.debug("list-watch %s: %s; listing again in %.0f s", self._thread.name, exc, RELIST_DELAY_S)
            self._stop.wait(RELIST_DELAY_S)

    def _list(self) -> str:
        resp = self._list_fn(*self._args, _preload_content=False, **self._kwargs)
        body = json.loads(resp.data)
        items = {o["metadata"]["uid"]: o for o in body.get("items") or []}
        with self._lock:
            self.objects = items
        self.synced.set()
        self._notify()
        return (body.get("metadata") or {}).get("resourceVersion") or ""

    def _watch(self, version: str) -> str:
        """One WATCH call; returns the version to resume from ("" to relist)."""
        from kubernetes.watch.watch import iter_resp_lines

        resp = self._list_fn(*self._args, watch=True, resource_version=version, allow_watch_bookmarks=True,
                             timeout_seconds=WATCH_TIMEOUT_S, _preload_content=False, **self._kwargs)
        with self._lock:
            self._response = resp
        try:
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    return ""
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # 410 Gone and friends: list again
                    raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                meta = obj.get("metadata") or {}
                version = meta.get("resourceVersion") or version
                if kind == "BOOKMARK":
                    continue
                uid = meta.get("uid", "")  # every object the API server returns has one
                with self._lock:
                    if kind == "DELETED":
                        self.objects.pop(uid, None)
                    else:
                        self.objects[uid] = obj
                self._notify()
        finally:
            with self._lock:
                self._response = None
            resp.close()
            resp.release_conn()
        return version

