"""``tritonscale render`` and ``tritonscale crd``: the objects the operator would create for the
InferenceServices in files (or a directory, as ``kubectl apply -f`` reads one), or the problems it would
report instead; and the CRD generated from the models. ``cli.build_parser`` wires them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from typing import Any


def _crd(_: argparse.Namespace) -> int:
    from tritonscale.render.crd_manifest import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


def _load_documents(path: str) -> tuple[list[Any], list[str]]:
    from tritonscale.api.manifests import read_documents

    return read_documents(path)


# The files kubectl apply -f DIR reads: these extensions, in the directory itself (-R would recurse).
KUBECTL_EXTENSIONS = (".json", ".yaml", ".yml")
_EXTENSIONS_TEXT = ".json, .yaml or .yml"


def manifest_files(path: str) -> tuple[list[str], list[str]]:
    """(the files ``path`` names, or problems): a directory's files as ``kubectl apply -f DIR`` reads
    them -- KUBECTL_EXTENSIONS, not its subdirectories, in name order; anything else is itself."""
    if path == "-" or not os.path.isdir(path):
        return [path], []
    try:
        names = sorted(e.name for e in os.scandir(path) if e.is_file() and e.name.endswith(KUBECTL_EXTENSIONS))
    except OSError as exc:
        return [], [f"{path}: cannot read: {exc.strerror}"]
    if not names:
        return [], [f"{path}: no {_EXTENSIONS_TEXT} file in this directory (kubectl apply -f reads those)"]
    return [os.path.join(path, n) for n in names], []


def render_documents(docs: Iterable[Any], path: str, require: bool = True) -> tuple[list[dict[str, Any]], list[str]]:
    """Objects the operator would create for each InferenceService in ``docs``, or problems. ``require``:
    no InferenceService in ``docs`` is a problem (not for one file of a directory: its others may hold them)."""
    from tritonscale.api.spec import GROUP, KIND, VERSION
    from tritonscale.api.validation import validate_body
    from tritonscale.reconcile.child_refusals import children_refusals
    from tritonscale.render.kubernetes_objects import build_children

    objects: list[dict[str, Any]] = []
    problems: list[str] = []
    found = 0
    seen: dict[tuple[str, str], int] = {}  # (namespace, name) -> the document that defined it first
    other_kinds: list[str] = []
    for i, doc in enumerate(docs, start=1):
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            if isinstance(doc, dict) and isinstance(doc.get("kind"), str) and doc["kind"] not in other_kinds:
                other_kinds.append(doc["kind"])
            continue
        found += 1
        if not isinstance(doc.get("metadata") or {}, dict):
            problems.append(f"{path}: document {i}: metadata: must be a mapping")
            continue
        meta = dict(doc.get("metadata") or {})
        name = meta.get("name")
        # a name that is no plain line (a final newline, a number) is quoted, so each problem stays one line;
        # named first: a List's items are counted as documents, which the file does not number
        label = (name if isinstance(name, str) and name.isprintable() else repr(name)) if name else f"document {i}"
        if doc.get("apiVersion") != f"{GROUP}/{VERSION}":
            problems.append(f"{path}: {label}: apiVersion: must be {GROUP}/{VERSION}")
            continue
        spec, errs = validate_body(doc)
        if errs or spec is None:  # no spec comes back without a problem
            problems += [f"{path}: {label}: {e}" for e in errs]
            continue
        meta.setdefault("namespace", "default")
        key = (str(meta["namespace"]), str(name))
        if key in seen:  # kubectl apply would keep the last; render would print both sets of children
            problems.append(f"{path}: {label}: document {i} defines {key[0]}/{key[1]} again (first in "
                            f"document {seen[key]})")
            continue
        seen[key] = i
        uid = meta.get("uid")
        if uid is not None and not isinstance(uid, str):  # it failed on each child's ownerReferences[0].uid
            problems.append(f"{path}: {label}: metadata.uid: must be a string, got {type(uid).__name__}")
            continue
        owner = {**doc, "metadata": meta}
        has_uid = bool(uid)
        if not has_uid:
            meta["uid"] = "00000000-0000-0000-0000-000000000000"
        children = build_children(spec, owner)
        # what the operator refuses before its dry runs (the API server's own checks need a cluster)
        refused = children_refusals(children, doc.get("spec"))
        if refused:
            problems += [f"{path}: {label}: {p}" for p in refused]
            continue
        for obj in children:
            if not has_uid:  # an ownerReference to a made-up uid would get the child garbage-collected
                obj["metadata"].pop("ownerReferences")
            objects.append(obj)
    if not found and not problems and require:
        kinds = f" (kind {', '.join(other_kinds)}: render reads only kind {KIND})" if other_kinds else ""
        problems.append(f"{path}: no {KIND} documents found{kinds}")
    return objects, problems


def _render(args: argparse.Namespace) -> int:
    """Every file given (``-f A -f B``, ``-f A B``, ``-f DIR``: as ``kubectl apply -f`` takes several; the
    last one alone was rendered, and a missing or invalid file before it passed with exit 0)."""
    from tritonscale.api.spec import KIND

    objects: list[dict[str, Any]] = []
    problems: list[str] = []
    first: dict[tuple[str, str, str], str] = {}  # (kind, namespace, name) -> the file that rendered it
    for given in args.file:
        paths, found_none = manifest_files(given)
        problems += found_none
        in_dir = paths != [given]
        before = len(objects)
        for path in paths:
            docs, found = _load_documents(path)
            if not found:
                rendered, found = render_documents(docs, path, require=not in_dir)
                for obj in rendered:
                    meta = obj["metadata"]
                    key = (obj["kind"], str(meta.get("namespace")), str(meta["name"]))
                    if key in first:  # said once per InferenceService: its Deployment has its name
                        if key[0] == "Deployment":
                            found.append(f"{path}: InferenceService {key[1]}/{key[2]} again (first in {first[key]})")
                        continue
                    first[key] = path
                    objects.append(obj)
            problems += found
        if in_dir and paths and len(objects) == before and not problems:
            problems.append(f"{given}: no {KIND} documents found in its {_EXTENSIONS_TEXT} files")
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        return 1
    from tritonscale.render.yaml_text import dump_all

    sys.stdout.write(dump_all(objects))
    return 0
