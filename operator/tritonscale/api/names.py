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
# A label value: the same name, or empty.
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
