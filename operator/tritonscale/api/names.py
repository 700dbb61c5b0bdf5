"""Kubernetes' own name formats (apimachinery's validation), for the CRD's rules, the operator's
checks and the CLI's flags alike. Match them with ``fullmatch``: ``$`` in ``match`` also matches before
a final newline, which the API server's RE2 does not allow."""

from __future__ import annotations

import re

# A namespace, a Service's port name: lowercase letters, digits, '-' (at most 63).
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A ServiceAccount, a Secret, a Lease: labels joined by '.' (at most 253).
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A label key: an optional subdomain prefix and '/', then a name of at most 63.
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
# ... whose prefix is at most 253 characters (a subdomain's bound), which LABEL_KEY does not bound:
# RE2, the API server's regex engine, has no lookahead, so it is a second pattern. Use ``is_label_key``.
LABEL_KEY_PREFIX = re.compile(r"^([^/]{1,253}/)?[^/]+$")
MAX_LABEL_KEY = 253 + 1 + 63
# A label value: the same name, or empty.
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def is_label_key(key: str) -> bool:
    """A Kubernetes label or annotation key (apimachinery's IsQualifiedName)."""
    return len(key) <= MAX_LABEL_KEY and bool(LABEL_KEY.fullmatch(key)) and bool(LABEL_KEY_PREFIX.fullmatch(key))


def label_key_cel(var: str) -> str:
    """``is_label_key`` as a CEL expression on the string ``var`` (its size first: the API server's cost
    estimate of the regexes needs the bound)."""
    return (f"size({var}) <= {MAX_LABEL_KEY} && {var}.matches(r'{LABEL_KEY.pattern}') "
            f"&& {var}.matches(r'{LABEL_KEY_PREFIX.pattern}')")
