"""What ``operator_main.configure`` plugs into Kopf's settings: its annotation diff-base and progress
storages, adapted (a diff-base that fits an annotation and survives hand edits, a retry delay a spec edit
ends), and the backoffs of its API requests (a watch in one namespace of several retries without end)."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections.abc import Iterator
from typing import Any

import kopf

# Kopf's diff-base is a copy of the object's spec, labels and annotations in one annotation, and an
# object's annotations may take 256 KiB in all -- kubectl apply's own copy of the object among them.
# Past this size the diff-base holds digests of its largest parts instead (``elide_essence``), so a
# spec of about 128 KiB applied with kubectl no longer made every write of Kopf's fail (422, "Too
# long") with two tracebacks at each event of the object.
DIFFBASE_MAX_BYTES = 16 * 1024
DIFFBASE_PART_BYTES = 1024  # parts larger than this are what a too large diff-base digests


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _digest(text: str) -> str:
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()} ({len(text)} bytes, elided)"


def _elide(node: Any, part_bytes: int) -> Any:
    text = _json(node)
    if len(text) <= part_bytes:
        return node
    if isinstance(node, dict):
        node = {k: _elide(v, part_bytes) for k, v in node.items()}
    elif isinstance(node, list):
        node = [_elide(v, part_bytes) for v in node]
    else:
        return _digest(text)
    return node if len(_json(node)) <= part_bytes else _digest(text)


def elide_essence(essence: dict[str, Any], max_bytes: int = DIFFBASE_MAX_BYTES,
                  part_bytes: int = DIFFBASE_PART_BYTES) -> dict[str, Any]:
    """``essence`` as it is when its JSON fits ``max_bytes``; else, below spec and metadata, every
    part larger than ``part_bytes`` (a large parameter, a long env list, a whole block of them)
    replaced by the digest of its JSON. Deterministic, so the essence stored and the one Kopf builds
    at the next event compare part by part: a change of an elided part still shows as a change (and
    reconciles, which reads the whole object, not the diff). ``status`` is never elided: it holds only
    the fields Kopf's field handlers follow (``status.batching.*``), whose diffs need their values.
    The top-level stanzas stay dicts."""
    if len(_json(essence)) <= max_bytes:
        return essence
    return {key: value if key == "status" or not isinstance(value, dict)
            else {k: _elide(v, part_bytes) for k, v in value.items()} for key, value in essence.items()}


class TolerantDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """Kopf's annotation diff-base, read as none where it is not JSON: hand-edited or truncated, it
    made Kopf fail every event of the object with a traceback (JSONDecodeError), and spec changes
    reached the children only through the periodic resync. Without a diff-base the next event is
    handled as a resume: reconciled from the spec as it is, and the annotation written afresh.
    Built small enough for an annotation (``elide_essence``).

    Read as none, too, on an object with no status: the API server drops status when an object is
    created (status is a subresource), and this operator writes one at its first reconcile, so such
    an object was never handled here. It is one restored from its own YAML (``kubectl get -o yaml``
    then ``apply``, ``replace --force``, a GitOps move), which carries the old object's diff-base:
    equal to its spec, it read as "nothing changed", and the object got no children, no status and
    no autoscaler, with nothing logged, until its spec was edited or the operator restarted."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        essence = super().build(body=body, extra_fields=extra_fields)
        return elide_essence(dict(essence))

    def fetch(self, *, body: Any) -> Any:
        if not body.get("status"):
            return None
        try:
            return super().fetch(body=body)
        except (ValueError, RecursionError):  # json.JSONDecodeError, or a nesting deeper than json recurses
            return None


class EditsCutRetryDelays(kopf.AnnotationsProgressStorage):
    """Kopf's annotation progress storage, except that a spec edit ends a handler's retry delay. A handler
    that raised ``kopf.TemporaryError`` (an API refusal: RBAC, a ResourceQuota, a webhook; ChildWriteFailed in
    status) is retried after its delay, doubled at each retry up to 5 minutes, and Kopf ran no handler for
    an edit made meanwhile: an edit that fixed the cause (resources lowered under the quota), or followed a
    fix of it, waited for the retry (32 s in an exploratory audit; up to 5 minutes). Here a record stored
    with a delay at one generation is read without it once the object has another: the edit is handled
    at once, and a failure again is delayed from then on. In this process's memory only: after a restart
    the delay stands, as before."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._delayed_at: dict[tuple[str, str], Any] = {}  # (uid, handler) -> generation a delay was set at

    @staticmethod
    def _ids(key: Any, body: Any) -> tuple[tuple[str, str], Any]:
        meta = body.get("metadata") or {}
        return (str(meta.get("uid")), str(key)), meta.get("generation")

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        ids, generation = self._ids(key, body)
        if record.get("delayed"):
            self._delayed_at[ids] = generation
        else:
            self._delayed_at.pop(ids, None)
        super().store(key=key, record=record, body=body, patch=patch)

    def fetch(self, *, key: Any, body: Any) -> Any:
        record = super().fetch(key=key, body=body)
        ids, generation = self._ids(key, body)
        if record and record.get("delayed") and ids in self._delayed_at and self._delayed_at[ids] != generation:
            record = {**record, "delayed": None}
        return record

    def purge(self, *, key: Any, body: Any, patch: Any) -> None:
        self._delayed_at.pop(self._ids(key, body)[0], None)
        super().purge(key=key, body=body, patch=patch)


class NamespaceWatchRetries:
    """Kopf's backoffs for its own API requests: its default ones (1, 1, 2, 3, 5, 8, 13, 21 s), and,
    for its watches in one namespace of several (``--namespace``: the InferenceServices' and their
    children's), then every ``RETRY_EVERY_S`` for as long as it takes.

    Kopf fails as a whole when one watch's backoffs run out: a namespace the operator may not read (a
    tenant deleted and recreated it, and the chart's Role in it went too) stopped it for every
    namespace, and Kopf 1.45 could then hang in its own cancellation with the Lease still renewed. Now
    that namespace's watch fails at each retry (said as ApiRetryDigest says Kopf's retries: a WARNING at most
    every 60 s), and the others are served. Every
    other request keeps Kopf's bounded backoffs: its fallbacks for a namespace list or a CRD watch it may
    not make (it falls back to the --namespace list) need them to run out, and a cluster-wide watch
    that may not list InferenceServices serves nothing -- it still fails, and the process exits 1.

    Kopf reads these backoffs at each request, in the task that makes it: a watch's is named
    ``watcher for RESOURCE@NAMESPACE`` (``@None`` cluster-wide, e.g.
    ``watcher for inferenceservices.v1alpha1.tritonscale.io@team-a``). Not Sized: Kopf then retries
    without end."""

    RETRY_EVERY_S = 30.0
    FIRST = (1, 1, 2, 3, 5, 8, 13, 21)
    WATCHER = "watcher for "

    def __iter__(self) -> Iterator[float]:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop
            task = None
        name = task.get_name() if task is not None else ""
        if name.startswith(self.WATCHER) and "@" in name and not name.endswith("@None"):
            return itertools.chain(self.FIRST, itertools.repeat(self.RETRY_EVERY_S))
        return iter(self.FIRST)
