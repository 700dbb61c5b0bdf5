"""String formats of the spec's fields, each one object for both checks: the CRD's CEL rule and the
operator's field validator, with the same message. Also the label and annotation maps' rules and the
Prometheus URL check (``prometheus_base_url``), which ``tritonscale run --prometheus-url`` shares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tritonscale.api.names import DNS1123_SUBDOMAIN, LABEL_VALUE, is_label_key, label_key_cel


@dataclass(frozen=True)
class _Format:
    """A string field's format, one object for both checks: the CRD's (a CEL rule with our message,
    not an OpenAPI ``pattern``, whose message from the API server is the regex itself: "should match
    '^(s3://[^/\\s]+...'") and the operator's (the field validator, the same message)."""

    pattern: re.Pattern[str]
    message: str
    # ... and what the value may not contain (searched, unanchored: CEL's ``matches`` too), each said apart
    forbidden: tuple[tuple[re.Pattern[str], str], ...] = ()

    def schema(self) -> dict[str, Any]:
        rules = [{"rule": f"self.matches(r'{self.pattern.pattern}')", "message": self.message}]
        rules += [{"rule": f"!self.matches(r'{p.pattern}')", "message": m} for p, m in self.forbidden]
        return {"x-kubernetes-validations": rules}

    def check(self, value: str | None) -> str | None:
        if value is not None and not self.pattern.fullmatch(value):  # not match: "$" also matches before a final "\n"
            raise ValueError(self.message)
        for pattern, message in self.forbidden:
            if value is not None and pattern.search(value):
                raise ValueError(message)
        return value


# A size above 0 as a Kubernetes quantity (1Gi, 512Mi, 2G, 1e9): Kubernetes' grammar, without a sign.
_SUFFIX = r"(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?$"
_SIZE = _Format(re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)" + _SUFFIX),
                "must be a Kubernetes quantity above 0, e.g. 1Gi or 8Gi",
                ((re.compile(r"^([0]+(\.0*)?|\.0+)" + _SUFFIX), "must be above 0, e.g. 1Gi or 8Gi"),))
_SUBDOMAIN = _Format(DNS1123_SUBDOMAIN, "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.'; "
                                        "starts and ends with a letter or digit)")
# An extended resource a device plugin advertises: DOMAIN/NAME, the domain outside Kubernetes' own.
_EXTENDED_RESOURCE = _Format(
    re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}"
               r"[A-Za-z0-9])?$"),
    "must be an extended resource name, DOMAIN/NAME (e.g. nvidia.com/gpu, nvidia.com/mig-1g.10gb, "
    "nvidia.com/gpu.shared)",
    ((re.compile(r"^([-a-z0-9.]*\.)?kubernetes\.io/"), "must not be in the kubernetes.io domain, which names "
      "Kubernetes' own resources"),))
_NODE_SELECTOR_MESSAGE = ("keys must be label keys ([PREFIX/]NAME, NAME of letters, digits, '-', '_' and '.', at "
                          "most 63, PREFIX a DNS subdomain of at most 253) and values label values (the NAME's "
                          "format, or empty)")
# The CRD bounds the lists and maps its rules iterate: the API server estimates a rule's cost from them.
MAX_PULL_SECRETS = 64
MAX_NODE_SELECTOR = 64
MAX_POD_METADATA = 64
# The pods' labels and annotations the operator sets itself (render.kubernetes_objects.labels, the
# config hash): a user's may not replace them -- the Deployment's selector and the Service select the
# pods by them, and the config hash rolls them.
OPERATOR_PREFIX = "tritonscale.io/"
OPERATOR_POD_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by")
_RESERVED_MESSAGE = (f"keys may not be the operator's own ({OPERATOR_PREFIX}..., "
                     f"{', '.join(OPERATOR_POD_LABELS)}): it sets them on every pod")
# A map of Kubernetes labels (a nodeSelector, the pods' labels): keys label keys, values label values.
_LABEL_MAP_RULE: Any = {"rule": f"self.all(k, {label_key_cel('k')} && self[k].matches(r'{LABEL_VALUE.pattern}'))",
                   "message": _NODE_SELECTOR_MESSAGE}
_POD_LABELS_RULES: list[Any] = [
    _LABEL_MAP_RULE,
    {"rule": f"self.all(k, !k.startsWith('{OPERATOR_PREFIX}') && !(k in {list(OPERATOR_POD_LABELS)!r}))",
     "message": _RESERVED_MESSAGE},
]

def _label_map(v: dict[str, str]) -> dict[str, str]:
    """``_LABEL_MAP_RULE``'s Python twin."""
    for key, value in v.items():
        if not is_label_key(key) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
            raise ValueError(f"{key!r}: {value!r}: {_NODE_SELECTOR_MESSAGE}")
    return v


_ANNOTATION_KEY_MESSAGE = ("keys must be annotation keys ([PREFIX/]NAME, NAME of letters, digits, '-', '_' and '.', "
                           "at most 63, PREFIX a DNS subdomain of at most 253)")
_RESERVED_ANNOTATION_MESSAGE = f"keys may not be the operator's own ({OPERATOR_PREFIX}...): it sets them on every pod"
MAX_ANNOTATION_VALUE = 8192
# Kubernetes refuses an object whose annotations' keys and values add up to more than 256 KiB (bytes of
# UTF-8); the pod template also carries the operator's config hash and, after `kubectl rollout restart`,
# kubectl's restartedAt (under 100 bytes each), so the user's may take all but 1 KiB of it.
MAX_POD_ANNOTATIONS_BYTES = 256 * 1024 - 1024
_ANNOTATIONS_SIZE_MESSAGE = (f"keys and values may add up to at most {MAX_POD_ANNOTATIONS_BYTES} bytes: Kubernetes "
                             f"allows 256 KiB of annotations on a pod, the operator's own included")
_POD_ANNOTATIONS_RULES: list[Any] = [
    {"rule": f"self.all(k, {label_key_cel('k')})", "message": _ANNOTATION_KEY_MESSAGE},
    {"rule": f"self.map(k, size(bytes(k)) + size(bytes(self[k]))).sum() <= {MAX_POD_ANNOTATIONS_BYTES}",
     "message": _ANNOTATIONS_SIZE_MESSAGE},
    {"rule": f"self.all(k, !k.startsWith('{OPERATOR_PREFIX}'))", "message": _RESERVED_ANNOTATION_MESSAGE},
]

_STORAGE_URI = _Format(
    # CLAIM: a PersistentVolumeClaim's name, a DNS-1123 subdomain (pvc://models.v2/m was refused)
    re.compile(r"^(s3://[^/\s]+(/\S*)?|gs://[^/\s]+(/\S*)?"
               r"|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/\S+)$"),
    "must be s3://BUCKET/PATH, gs://BUCKET/PATH or pvc://CLAIM/PATH",
    forbidden=(
        # pvc://models/../../etc linked the container's own /etc in place of the claim's model
        (re.compile(r"/\.\.(/|$)"), "PATH may not contain '..' segments"),
        # a claim's name is at most 253 characters: the Deployment took a longer one, whose pods then waited
        # for a claim no one can make
        (re.compile(r"^pvc://[^/]{254}"), "CLAIM is a PersistentVolumeClaim's name, at most 253 characters"),
        # \S takes them, and the fetch container's script got pvc://models/<NUL> quoted (session 104's fuzzing)
        (re.compile(r"[\x00-\x1f\x7f]"), "may not contain control characters"),
    ))
_MODEL_NAME = _Format(re.compile(r"^[A-Za-z0-9_.-]*[A-Za-z0-9_-][A-Za-z0-9_.-]*$"),
                      "must be letters, digits, '_', '-' and '.', and not dots alone")
# A Prometheus base URL: http(s), optional user:password@, a host name or [IPv6] address, an optional
# port and path; no query or fragment (the client appends /api/v1/query to it).
# No backslash anywhere: with one before the @ (http://evil<backslash>@prom:9090), urllib's urlsplit reads the
# host as prom and requests (urllib3) as evil -- a URL checked as one host and queried at another.
# A host in brackets is an IPv6 address (Python's urlsplit refuses an IPv4 one there, and ":::"): 2-7 groups
# and a colon, then a last group or an IPv4 address; "::" at most once (forbidden, below).
_HTTP_URL = _Format(re.compile(r"^https?://([^/?#@\s\\]+@)?([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|"
                               r"\[([0-9A-Fa-f]{0,4}:){2,7}([0-9A-Fa-f]{0,4}|[0-9]{1,3}(\.[0-9]{1,3}){3})\])"
                               r"(:[0-9]{1,5})?(/[^?#\s\\]*)?$"),
                    "must be an http:// or https:// URL: [USER:PASSWORD@]HOST[:PORT][/PATH], no query or fragment",
                    forbidden=(
                        # In the CRD too, not only in the operator: `kubectl apply` took port 0 or 99999, and the
                        # object was then refused in status. Five digits at most (above): 0s, or 65536-99999.
                        (re.compile(r"^https?://([^/?#@\s\\]+@)?([-A-Za-z0-9.]*|\[[0-9A-Fa-f:.]+\]):(0+|6553[6-9]|"
                                    r"655[4-9][0-9]|65[6-9][0-9]{2}|6[6-9][0-9]{3}|[7-9][0-9]{4})(/|$)"),
                         "the port must be 1-65535"),
                        # the client adds the API's path: this one doubled, the queries went to
                        # .../api/v1/query/api/v1/query
                        (re.compile(r"/api/v1(/query|/query_range)?/?$"),
                         "give the server's base URL, without /api/v1, /api/v1/query or /api/v1/query_range: the "
                         "client adds the API's path"),
                        (re.compile(r"^https?://([^/?#@\s\\]+@)?\[[^\]]*(:::|::.*::)"),
                         "an IPv6 address has \"::\" at most once"),
                    ))


def url_without_credentials(url: str) -> str:
    """``url`` with its credentials (``http://user:pass@host``) replaced by ``***``, as messages, logs,
    metric labels and the Deployment's record of the spec show it: they are readable by more people
    than the InferenceService (``view`` reads Deployments). Not a URL at all: ``***``."""
    try:
        parts = urlsplit(url)
        if "@" not in parts.netloc:
            return url
        return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))
    except ValueError:  # nothing in it is known to be safe to show
        return "***"


# The Prometheus API's own path at the end of a URL (the chart's Deployment template refuses the same)
_API_PATH = _HTTP_URL.forbidden[1][0]


def prometheus_base_url(url: str) -> str:
    """``url`` if it is a Prometheus base URL (``_HTTP_URL``: a port within 1-65535, no API path), else
    ValueError with the reason: the one check for ``spec.scaling.prometheus.url`` and ``tritonscale run
    --prometheus-url``. The CRD's rules say the same, but for the base URL to give, which only this
    names."""
    try:
        parts = urlsplit(url) if _HTTP_URL.pattern.fullmatch(url) else None  # (urlsplit raises on some others)
    except ValueError:
        _HTTP_URL.check(url)  # the CRD's words for it ("::" twice), where it has them
        raise
    if parts is not None and (api := _API_PATH.search(parts.path)):
        base = urlunsplit(parts._replace(path=parts.path[:api.start()]))
        raise ValueError(f"give the server's base URL, without {api.group().rstrip('/')}: "
                         f"{url_without_credentials(base)}")
    _HTTP_URL.check(url)
    return url
