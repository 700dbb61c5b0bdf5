"""One lock per InferenceService for the operator's status and replica writes.

The reconciler and the autoscaler tick both write status, and a merge patch replaces
the whole conditions list: each reads the freshest object, merges its own conditions
and writes under this lock, so neither overwrites the other's.
"""

from __future__ import annotations

import threading
from collections import defaultdict

_locks: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


def object_lock(namespace: str, name: str) -> threading.Lock:
    return _locks[(namespace, name)]
