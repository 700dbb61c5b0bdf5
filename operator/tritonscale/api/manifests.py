"""Reading manifests (YAML files of Kubernetes objects) as a user gives them: every problem is one
line naming the file, never a traceback.

``tritonscale render -f`` and ``tritonscale sandbox --service`` read InferenceServices this way.
Beyond what the YAML parser refuses, three kinds of document parse but are refused: one whose
aliases expand past what any request to the API server could carry (a "billion laughs": a few
lines that expand to billions of values, which writing them out would never finish), one whose
aliases refer to themselves (no finite object is that document), and one nested far deeper than
any Kubernetes object.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import yaml

# The API server takes at most 3 MiB per request; a value takes at least two bytes of YAML or JSON,
# so no object it accepts holds more than about 1.5 million. Past this a document is refused.
MAX_VALUES = 1_500_000
# No Kubernetes object nests deeper than a few dozen levels (a Deployment's deepest field is about
# 15 down); far deeper documents are refused rather than written out (the YAML writer recurses).
MAX_DEPTH = 100
# The most bytes one input is read for. The stream's values are capped at MAX_VALUES, so what a larger
# input could add is only long strings, and an object holds at most 3 MiB: 64 MiB is far past any set of
# manifests (`kubectl get tis -A -o yaml` of thousands of services). Read without it, /dev/zero or an
# endless pipe grew to 5.9 GB in 10 s with no word.
MAX_INPUT_BYTES = 64 * 2**20


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: PyYAML keeps the last
    silently, so ``minReplicas: 2`` written twice, the second left at 0, would scale to zero,
    where kubectl refuses the file ("key already set in map"). Keys a merge (``<<``) brings in
    may be overridden, as YAML intends.

    And reading plain scalars as kubectl does (``kubectl_tag``): a tensor named ``y`` is a boolean to
    the API server ("must be of type string"), so it must be one here too, not a file that renders and
    then fails to apply; an annotation ``released: 2024-05-01`` is a string to kubectl, not a date this
    refuses."""

    bool_values = {**yaml.SafeLoader.bool_values, "y": True, "n": False}

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode and implicit[0]:
            return kubectl_tag(value)
        tag: str = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return tag

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # an unhashable key: the base constructor refuses it in its own words
            if duplicate:
                raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                        f"found key {key!r} twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


# How kubectl reads a plain (unquoted) scalar: sigs.k8s.io/yaml over go-yaml v2, YAML 1.1 with Go's
# number parsing, and not PyYAML's YAML 1.1. Where they differ: y/Y/n/N are booleans; 1e3, 08 and 0o17
# are numbers (Go's ParseInt with base 0, then ParseFloat, once underscores are removed); and a date
# (2024-05-01), a base-60 number (1:30) and "=" are strings.
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_BOOLS = frozenset("y Y yes Yes YES n N no No NO true True TRUE false False FALSE on On ON off Off OFF".split())
_SPECIAL_FLOATS = frozenset(".inf .Inf .INF +.inf +.Inf +.INF -.inf -.Inf -.INF .nan .NaN .NAN".split())
_GO_INT = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|0[oO][0-7]+|0[0-7]*|[1-9][0-9]*)")
# go-yaml v2's yamlStyleFloat: no inf or nan but .inf and .nan (``_SPECIAL_FLOATS``)
_GO_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_TAG = "tag:yaml.org,2002:"


def invalid_yaml(exc: yaml.YAMLError) -> str:
    """A YAML parser's error on one line, where it is and what: ``line 2: invalid YAML: expected ...``
    (PyYAML's own text spans several lines, with the context quoted)."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}: " if mark else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}invalid YAML: {problem}"


def kubectl_tag(value: str) -> str:
    """The tag kubectl gives the plain scalar ``value`` (go-yaml v2's resolve)."""
    if value == "<<":
        return _TAG + "merge"
    if value in _NULLS:
        return _TAG + "null"
    if value in _BOOLS:
        return _TAG + "bool"
    if value in _SPECIAL_FLOATS:
        return _TAG + "float"
    if value[0] in "+-0123456789":  # go-yaml tries numbers only on these (a timestamp is a string)
        plain = value.replace("_", "")
        if _GO_INT.fullmatch(plain) and -2**63 <= _go_int(plain) < 2**64:  # ParseInt, then ParseUint
            return _TAG + "int"
        if _GO_FLOAT.fullmatch(plain):
            return _TAG + "float"
    elif value[0] == "." and _GO_FLOAT.fullmatch(value):
        return _TAG + "float"
    return _TAG + "str"


def _construct_go_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """An int as Go reads it (``0X1F``, ``0o17``, ``0755``): PyYAML's own constructor knows only lower-case
    prefixes and base 8 for a leading 0, and raised on ``0X1F``."""
    return _go_int(str(loader.construct_scalar(node)).replace("_", ""))


def _go_int(plain: str) -> int:
    """``plain`` (no underscores) as Go's strconv.ParseInt with base 0 reads it: Python's base 0 but for a
    leading 0, which is octal to Go (0755) and refused by Python."""
    sign = -1 if plain[0] == "-" else 1
    digits = plain.lstrip("+-")
    if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
        return sign * int(digits, 8)
    return sign * int(digits, 0)


def read_documents(path: str, flag: str = "") -> tuple[list[Any], list[str]]:
    """(the non-empty documents of ``path``, or problems): ``-`` reads stdin. ``flag`` (e.g.
    ``--service``) prefixes each problem."""
    label = f"{flag}: {path}" if flag else path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(path, "rb") as stream:
                raw = stream.read(MAX_INPUT_BYTES + 1)
        if len(raw) > MAX_INPUT_BYTES:
            return [], [f"{label}: more than {MAX_INPUT_BYTES // 2**20} MiB, far more than any manifest (an object "
                        "holds at most 3 MiB): not read further"]
        text = raw.decode("utf-8")
    except IsADirectoryError:  # one YAML stream (``tritonscale render`` expands a directory before this)
        return [], [f"{label}: is a directory: give one YAML file (each of several in turn)"]
    except OSError as exc:
        return [], [f"{label}: cannot read: {exc.strerror}"]
    except UnicodeDecodeError as exc:
        return [], [f"{label}: cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})"]
    try:
        docs = [d for d in yaml.load_all(text, Loader=_UniqueKeyLoader) if d is not None]
    except yaml.YAMLError as exc:
        return [], [f"{label}: {invalid_yaml(exc)}"]
    except RecursionError:
        return [], [f"{label}: invalid YAML: nested too deeply"]
    try:
        values = expanded_size(docs)
    except ValueError as exc:
        return [], [f"{label}: {exc}"]
    if values > MAX_VALUES:
        return [], [f"{label}: its aliases expand to more than {MAX_VALUES:,} values, more than any object "
                    "the API server accepts (3 MiB per request)"]
    converted = []
    for number, doc in enumerate(docs, 1):
        try:
            converted.append(as_json(doc, ""))
        except ValueError as exc:
            return [], [f"{label}: document {number}: {exc}"]
    docs = converted
    return unlisted(docs), []


def as_json(node: Any, where: str) -> Any:
    """``node`` as kubectl sends it, JSON: a map key YAML read as an int or a bool is its text (kubectl's
    sigs.k8s.io/yaml writes ``1:`` as "1", ``true:`` as "true"); ValueError naming the place for a key that
    is null or a float, and for a string no UTF-8 holds (a lone surrogate escape, ``"\\ud800"``, which kubectl
    refuses as "invalid Unicode character escape code"). Both had ended `render` in a traceback. Recursive
    to MAX_DEPTH (``expanded_size`` has checked it)."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if isinstance(key, bool):
                text = "true" if key else "false"
            elif isinstance(key, int):
                text = str(key)
            elif isinstance(key, str):
                text = _utf8(key, f"{where or 'a'} key")
            else:
                what = "null" if key is None else f"the number {key!r}"
                raise ValueError(f"{where or 'a'} key YAML reads as {what}: kubectl sends only text keys "
                                 "(and ints and booleans as their text); quote it")
            out[text] = as_json(value, f"{where}.{text}" if where else text)
        return out
    if isinstance(node, list):
        return [as_json(item, f"{where}[{i}]") for i, item in enumerate(node)]
    if isinstance(node, str):
        return _utf8(node, where)
    return node


def _utf8(text: str, where: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{where or 'the document'}: invalid Unicode: {text[exc.start]!r} (a lone surrogate "
                         "escape) is no character UTF-8 holds, and the API server takes only UTF-8") from None
    return text


def unlisted(docs: list[Any]) -> list[Any]:
    """Each list document (``kind: List``, or ``InferenceServiceList``: what ``kubectl get tis -o
    yaml`` prints) replaced by its items, as kubectl reads one."""
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            out.extend(item for item in doc["items"] if item is not None)
        else:
            out.append(doc)
    return out


def expanded_size(root: Any) -> int:
    """How many values ``root`` holds with every alias written out (a shared list or map counts each
    time it appears), computed once per distinct container; ValueError for a container inside
    itself, or one nested deeper than MAX_DEPTH. Iterative: a deeply nested document must not
    exhaust Python's recursion limit."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool, int]] = [(root, False, 1)]
    while stack:
        node, finished, depth = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if depth > MAX_DEPTH:
            raise ValueError(f"nested more than {MAX_DEPTH} levels deep (a Deployment nests about 15)")
        key = id(node)
        children = list(node.values()) if isinstance(node, dict) else node
        if finished:
            sizes[key] = 1 + sum(sizes[id(c)] if isinstance(c, (dict, list)) else 1 for c in children)
            on_path.discard(key)
            continue
        if key in sizes:
            continue
        on_path.add(key)
        stack.append((node, True, depth))
        for child in children:
            if isinstance(child, (dict, list)):
                if id(child) in on_path:
                    raise ValueError("an alias refers to a list or map that contains it: no object is infinite")
                if id(child) not in sizes:
                    stack.append((child, False, depth + 1))
    return sizes.get(id(root), 1)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _construct_go_int)
