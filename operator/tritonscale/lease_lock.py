"""The Lease lock under the operator's leader election (tritonscale/leader_election.py): the kubernetes
client port's ``LeaseLock``, fenced -- it records when our renewals started (``renewed_at``, which
``Elector.may_act`` measures the renew deadline from) and refuses to write once released -- and made to
say its refusals, to hold back a takeover of a deleted, emptied or differently configured Lease until the
last holder's lease would have run out, to count ``spec.leaseTransitions``, and to hand the Lease back
on a graceful stop. It logs as leader_election does (``tritonscale.leader_election``)."""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

import kubernetes
from kubernetes.client import ApiException
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from tritonscale.kube.client import describe_api_error

log = logging.getLogger("tritonscale.leader_election")


class FencedLeaseLock(LeaseLock):
    """The port's LeaseLock, recording when our renewals started and refusing to write
    once released.

    ``renewed_at`` is the monotonic time at which the last attempt that wrote the Lease
    with us as holder *started* (before its GET). The write happened after that, and a
    standby counts its lease duration from when it saw the write, later still; so
    ``renewed_at + lease duration`` is a lower bound of any takeover.
    """

    def __init__(self, name: str, namespace: str, identity: str, lease_api: Any,
                 clock: Callable[[], float] = time.monotonic,
                 on_holder: Callable[[str | None], None] | None = None) -> None:
        super().__init__(name, namespace, identity)
        self.api_instance = lease_api  # a CoordinationV1Api (with timeouts: see Elector)
        self.clock = clock
        self.on_holder = on_holder or (lambda _: None)
        self.renewed_at: float | None = None
        self.released = False
        self._attempt_started: float | None = None
        self._last_error = {"read": "", "write": ""}
        # When we last saw the Lease held by another (monotonic), and for how long it held it:
        # a Lease gone since is free only once that would have expired.
        self._other_seen: tuple[float, float] | None = None
        # Another's holding as we last saw it change: (holder, renewTime), when we first saw that
        # record (monotonic), and the lease duration it records.
        self._other_record: tuple[str, Any] | None = None
        self._other_changed_at = 0.0
        self._other_lease_s = 0.0

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        self._attempt_started = self.clock()
        try:
            found, record = super().get(name, namespace)
        except Exception as exc:  # urllib3's connection errors are not ApiExceptions
            found, record = False, ApiException(status=0, reason=f"{type(exc).__name__}: {exc}")
        if found:
            self._report("read", "")
            self.on_holder(record.holder_identity)
            if record.holder_identity and record.holder_identity != self.identity:
                self._other_seen = (self._attempt_started, _seconds(record.lease_duration))
                seen = (record.holder_identity, record.renew_time)
                if seen != self._other_record:
                    self._other_record = seen
                    self._other_changed_at = self._attempt_started
                    self._other_lease_s = _seconds(record.lease_duration)
        elif record.status != 404:
            why = describe_api_error(record) if record.status else record.reason  # 0: no HTTP answer
            self._report("read", f"cannot read Lease {namespace}/{name}: {why}")
        return found, record

    def _last_holder_may_lead(self) -> bool:
        """Whether the other holder we last saw may still lead: the lease it recorded has not run out
        since we saw it (a deleted Lease, or one whose holder was emptied by hand, is free only then)."""
        if self._other_seen is None:
            return False
        seen, held_s = self._other_seen
        if self.clock() - seen < held_s:
            return True
        self._other_seen = None
        return False

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        if self._last_holder_may_lead():
            return False  # gone since we saw it held: free once that lease would have expired

        def create() -> None:
            spec = self.get_lease_spec(election_record)
            spec.lease_transitions = 0  # as client-go's first record
            body = kubernetes.client.V1Lease(metadata={"name": name}, spec=spec)
            self.lease_reference = self.api_instance.create_namespaced_lease(namespace, body)

        return self._write(create, name, namespace, election_record)

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        if self.lease_reference is None:  # as the port: nothing read or created yet
            return False
        if self._taking_over_too_soon(updated_record):
            return False

        def update() -> None:
            spec = self.lease_reference.spec
            previous = spec.holder_identity if spec is not None else None
            transitions = (spec.lease_transitions or 0) if spec is not None else 0
            self.lease_reference.spec = self.get_lease_spec(updated_record, spec)
            # client-go's count of holder changes (the port leaves it unset): kept on a renewal,
            # one more when the Lease changes hands (a released Lease's empty holder included).
            changed = bool(updated_record.holder_identity) and updated_record.holder_identity != previous
            self.lease_reference.spec.lease_transitions = transitions + 1 if changed else transitions
            self.api_instance.replace_namespaced_lease(name=name, namespace=namespace, body=self.lease_reference)

        return self._write(update, name, namespace, updated_record)

    def _taking_over_too_soon(self, record: Any) -> bool:
        """A takeover of another's Lease before the lease duration *it records* has passed since we saw
        its last renewal. client-go checks expiry against the record's duration; the port against its
        own (``election_config.lease_duration``), so a standby configured with a shorter lease than the
        holder's (between a ``helm upgrade`` of ``leaderElection`` and the rollout's end) took over while
        the holder could still act: a 5 s standby took a 15 s leader's Lease 6.2 s after its last
        renewal, 4 s before that leader's renew deadline (an exploration, session 55)."""
        spec = self.lease_reference.spec if self.lease_reference is not None else None
        holder = spec.holder_identity if spec is not None else None
        if record.holder_identity != self.identity or holder == self.identity:
            return False
        if not holder:
            # Released (release(): an empty holder and a 1 s lease, as client-go's) is free at once. An
            # holder emptied otherwise (a hand edit of the Lease) is as a deleted Lease (create): free
            # once the lease of the holder we last saw would have expired. Taken at once, the standby led
            # beside a leader that had not yet seen the edit (63 and 245 ms in an exploratory audit).
            released = spec is not None and (spec.lease_duration_seconds or 0) <= 1
            return not released and self._last_holder_may_lead()
        if self._other_record is None or self._other_record[0] != holder:
            return False
        return self.clock() - self._other_changed_at < self._other_lease_s

    def _write(self, write: Callable[[], None], name: str, namespace: str, record: Any) -> bool:
        """The port's create and update, but a refusal is said (the port logs it at INFO and returns
        False): a Lease that cannot be written is why a candidate never leads."""
        if self.released:
            return False
        started = self._attempt_started if self._attempt_started is not None else self.clock()
        try:
            write()
        except ApiException as exc:
            if exc.status != 409:  # 409: another candidate wrote first -- an election, not a fault
                self._report("write", f"cannot write Lease {namespace}/{name}: {describe_api_error(exc)}")
            return False
        except Exception as exc:  # noqa: BLE001  (as in get: urllib3's errors are no ApiException)
            self._report("write", f"cannot write Lease {namespace}/{name}: {describe_api_error(exc)}")
            return False
        self._report("write", "")
        if record.holder_identity == self.identity:
            self.renewed_at = started
        return True

    def release(self) -> bool:
        """Hand the Lease back (empty holder, 1 s duration, as client-go's release), if we
        still hold it. Further writes through this lock are refused."""
        self.released = True
        for attempt in range(RELEASE_ATTEMPTS):
            try:  # fresh: the port does not keep the resourceVersion its updates return
                lease = self.api_instance.read_namespaced_lease(self.name, self.namespace)
            except Exception as exc:  # noqa: BLE001  (it then simply expires)
                log.warning(f"could not release Lease {self.namespace}/{self.name}: {type(exc).__name__}: {exc}")
                return False
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return False
            now = datetime.datetime.now(datetime.timezone.utc)
            lease.spec.holder_identity = ""
            lease.spec.lease_duration_seconds = 1
            lease.spec.renew_time = now
            lease.spec.acquire_time = now
            try:
                self.api_instance.replace_namespaced_lease(name=self.name, namespace=self.namespace, body=lease)
                return True
            except Exception as exc:  # noqa: BLE001  (it then simply expires)
                # 409: a renewal already past the ``released`` check committed between the read and the
                # write (auditJ D6: the Lease was then not handed back, and the standby waited out the
                # lease). Read again: it is still ours, and no further renewal can slip in.
                if isinstance(exc, ApiException) and exc.status == 409 and attempt + 1 < RELEASE_ATTEMPTS:
                    continue
                log.warning(f"could not release Lease {self.namespace}/{self.name}: {type(exc).__name__}: {exc}")
                return False
        return False

    def _report(self, kind: str, error: str) -> None:
        """Log a lease error (``kind``: read or write) once when it starts and once when it clears, not
        every retry."""
        last = self._last_error[kind]
        if error and error != last:
            log.warning(error)
        elif not error and last:
            log.info(f"Lease {self.namespace}/{self.name} {'reachable' if kind == 'read' else 'writable'} again")
        self._last_error[kind] = error


# A release meeting a 409 reads the Lease again and retries: one renewal at most can have been in flight.
RELEASE_ATTEMPTS = 3


def _seconds(value: Any) -> float:
    """A LeaderElectionRecord's lease duration (the port keeps it as text); 0 if none."""
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return 0.0
