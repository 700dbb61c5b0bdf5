"""The kube-apiserver audit log (JSON lines) as the record of what a client did.

The session's control plane logs, at level Metadata, every request of the
ServiceAccounts in the operator's namespace (see support.cluster.AUDIT_POLICY): who,
which verb on which resource, and the response code the real authorizer and
admission gave it.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def epoch(rfc3339: str | datetime.datetime) -> float:
    """Seconds since the epoch of an RFC 3339 time (or a datetime, as the client returns)."""
    if isinstance(rfc3339, datetime.datetime):
        return rfc3339.timestamp()
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Request:
    user: str
    verb: str
    group: str  # "" for the core API
    resource: str  # with "/subresource" when there is one; "" for non-resource URLs
    namespace: str
    name: str
    code: int
    stage: str
    uri: str
    credential: str = ""  # "JTI=<the token's jti>": which token made the request
    at: float = 0.0  # epoch seconds the API server received it

    @property
    def triple(self) -> tuple[str, str, str]:
        """(apiGroup, resource[/subresource], verb): what an RBAC rule grants."""
        return self.group, self.resource, self.verb


class AuditLog:
    def __init__(self, path: Path):
        self.path = path

    def mark(self) -> int:
        """A position: ``requests(since=mark)`` returns only what came after it."""
        return self.path.stat().st_size if self.path.exists() else 0

    def requests(self, since: int = 0, user: str | None = None) -> Iterator[Request]:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            f.seek(since)
            for line in f:
                if not line.endswith(b"\n"):  # being written
                    break
                event = json.loads(line)
                who = (event.get("user") or {}).get("username", "")
                if user is not None and who != user:
                    continue
                ref = event.get("objectRef") or {}
                resource = ref.get("resource", "")
                if resource and ref.get("subresource"):
                    resource += "/" + ref["subresource"]
                yield Request(user=who, verb=event.get("verb", ""), group=ref.get("apiGroup", ""),
                              resource=resource, namespace=ref.get("namespace", ""), name=ref.get("name", ""),
                              code=int((event.get("responseStatus") or {}).get("code") or 0),
                              stage=event.get("stage", ""), uri=event.get("requestURI", ""),
                              credential=(((event.get("user") or {}).get("extra") or {})
                                          .get("authentication.kubernetes.io/credential-id") or [""])[0],
                              at=epoch(event.get("requestReceivedTimestamp") or "1970-01-01T00:00:00Z"))
