"""JSON merge patch (RFC 7386), applied as the API server applies one.

Every write tritonscale makes is a merge patch (``kube/client.py``), so this is also how
it predicts what a write will store: the reconciler's child patches, the status writers'
"did anything change?" (``status.status_patch``). The one deep merge in tritonscale: the
sandbox sizes its sample with it and the tests apply planned patches with it.
"""

from __future__ import annotations

import copy
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` applied: objects merge key by key, ``None`` removes a key,
    anything else (a list, a scalar) replaces. Neither argument is changed."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
