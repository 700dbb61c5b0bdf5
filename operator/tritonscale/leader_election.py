"""Active/standby operator replicas behind a ``coordination.k8s.io/v1`` Lease.

The election itself is the kubernetes Python client's
``kubernetes.leaderelection`` (a port of client-go's leaderelection with a
``LeaseLock``): candidates poll the Lease every retry period; the holder renews
it, and a candidate takes it over only when it has seen no change to the Lease
for a whole lease duration, measured on its own clock from when it observed the
last change. What this module adds is what the port leaves out and the
operator needs:

- **Fencing by deadline.** The port checks its renew deadline only between
  attempts and makes its requests without a timeout, so a leader whose renewal
  hangs would keep acting past the moment a standby may take over. Here the
  leader may act only while ``now - start of its last successful renewal <
  renew deadline`` (10 s by default). A standby can take over no earlier than
  lease duration (15 s) after it observed that renewal, which the renewal's
  start precedes: 5 s of margin. A watchdog checks the deadline every 100 ms
  and ends the process once it has passed (the standby then takes over; the
  Pod restarts as a standby), and every write the operator's own client makes
  checks it first (``may_act``).
- **Request timeouts and non-HTTP errors** (a refused connection raises
  urllib3's errors, not ``ApiException``, which would end the port's loop).
- **Release on a graceful stop** (client-go's ``ReleaseOnCancel``): after the
  operator stopped writing, the Lease is handed back, so a rolling update's
  standby takes over within one retry period instead of a lease duration.
- A lease held by someone else while we lead (we were too slow and a standby
  took over) ends the process at once.
- **A deleted Lease is not free at once.** The port creates the Lease as soon as
  its GET answers 404; a standby that raced the leader's next renewal to it (a
  `kubectl delete lease`) led beside it until the old leader saw the new holder
  (1.5-1.7 s in a test of three replicas). A candidate that saw another holder
  waits a lease duration from then, as for an expiry; the holder itself creates
  the Lease again at its next renewal.
- **Refused writes are said**: the port logs a failed create or update at INFO
  (which the operator hides) and returns False, so a candidate without RBAC to
  create the Lease, or a leader whose renewals are refused, stood by or exited
  without a word of why. Each refusal other than a lost race (409) is logged
  once, with the API server's message.
- ``spec.leaseTransitions`` counts the Lease's changes of holder, as client-go's does (the port
  leaves it unset), so ``kubectl get lease -o yaml`` shows how often leadership moved.
- **The port's clock runs at the monotonic clock's rate.** It measures expiry (when it observed the
  last change, against now) and its renew loop's deadline with ``time.time()``, so a standby whose
  wall clock was stepped back (an NTP correction) took over that much later: 76 s after the leader's
  last renewal for a 60 s step, 616 s for 600 s (auditJ D3). ``_SteadyTime`` replaces the port
  module's ``time``: the wall clock at start plus monotonic time since (client-go gets this from Go's
  monotonic clock readings). The renewTime it writes into the Lease is informational; candidates
  compare records, not times.
- The ``tritonscale_leader`` gauge and the ``/healthz`` answer.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kubernetes
from kubernetes.leaderelection import electionconfig, leaderelection
from prometheus_client import Gauge

from tritonscale.kube.client import WithTimeout
from tritonscale.lease_lock import FencedLeaseLock as FencedLeaseLock  # tests import it from here
from tritonscale.process_exit import flush_and_exit

log = logging.getLogger("tritonscale.leader_election")

LEADER = Gauge("tritonscale_leader", "1 while this operator replica holds the leader Lease and acts, else 0")

WATCHDOG_PERIOD_S = 0.1  # against a 5 s margin (lease 15 s - renew deadline 10 s): negligible


class _SteadyTime:
    """What the port module reads as ``time``: ``time()`` is the wall clock when this was made plus the
    monotonic time since, so a step of the wall clock moves no expiry; ``sleep`` is time's."""

    def __init__(self, wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic) -> None:
        self._mono = mono
        self._offset = wall() - mono()

    def time(self) -> float:
        return self._offset + self._mono()

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(seconds)


leaderelection.time = _SteadyTime()


class NotLeader(RuntimeError):
    """A write was attempted by a replica that may not act (standby, or past its renew deadline)."""


@dataclass(frozen=True)
class ElectionSettings:
    """client-go's defaults: a 15 s lease, renewed every 2 s, given up 10 s after the last renewal."""

    lease_name: str = "tritonscale"
    lease_namespace: str = ""
    identity: str = ""
    lease_duration_s: int = 15
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def problems(self) -> list[str]:
        """What makes these settings unsafe or unusable, one line each (empty: fine)."""
        out = []
        if not self.lease_namespace:
            out.append("--leader-elect-resource-namespace is required outside a Pod "
                       "(in a Pod it defaults to POD_NAMESPACE or the ServiceAccount's namespace)")
        if self.retry_period_s < 1:
            out.append(f"--leader-elect-retry-period must be >= 1 s (got {self.retry_period_s:g})")
        # The port's own rule (client-go's JitterFactor 1.2): at least one retry fits in the deadline.
        if self.renew_deadline_s <= 1.2 * self.retry_period_s:
            out.append(f"--leader-elect-renew-deadline ({self.renew_deadline_s:g} s) must be greater than "
                       f"1.2 x --leader-elect-retry-period ({1.2 * self.retry_period_s:g} s)")
        # The fencing margin: the leader stops acting at the renew deadline, before the
        # lease can be taken.
        if self.lease_duration_s <= self.renew_deadline_s:
            out.append(f"--leader-elect-lease-duration ({self.lease_duration_s} s) must be greater than "
                       f"--leader-elect-renew-deadline ({self.renew_deadline_s:g} s)")
        return out


def default_namespace() -> str:
    """POD_NAMESPACE if set (the downward API), else the ServiceAccount's namespace. The chart passes
    --leader-elect-resource-namespace itself, so this is for a Deployment of your own."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def default_identity() -> str:
    """Unique per process, as client-go's ``hostname_uuid``: a restarted container must
    not mistake its predecessor's lease for its own."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"


def _exit_now(reason: str) -> None:
    log.critical(f"{reason}; exiting so that nothing more is written (a standby takes over, the Pod restarts)")
    flush_and_exit(1)


class Elector:
    """Runs the election in a daemon thread and answers ``may_act()``.

    ``lose`` ends the process (default): once the deadline passed, Kopf's tasks and
    worker threads may be anywhere, and only ending the process stops them all at once.
    """

    def __init__(self, settings: ElectionSettings, lease_api: Any = None,
                 clock: Callable[[], float] = time.monotonic, lose: Callable[[str], None] = _exit_now) -> None:
        self.settings = settings
        self.clock = clock
        self._lose = lose
        self.holder: str | None = None
        self.acquired = threading.Event()
        self.acquired_at: float | None = None  # monotonic
        self.stopping = False  # set once the operator has stopped writing (graceful stop)
        self.started_at = clock()
        if lease_api is None:  # its own connection pool: renewals never queue behind the operator's requests
            lease_api = WithTimeout(kubernetes.client.CoordinationV1Api(kubernetes.client.ApiClient()),
                                     settings.renew_deadline_s / 2)  # one attempt (GET + PUT) fits the deadline
        self.lock = FencedLeaseLock(settings.lease_name, settings.lease_namespace, settings.identity, lease_api,
                                    clock=clock, on_holder=self._saw_holder)
        self._threads: list[threading.Thread] = []
        LEADER.set(0)

    # ---- queries ---------------------------------------------------------------------------

    def may_act(self) -> bool:
        """True while we hold the Lease and are within the renew deadline of our last renewal."""
        renewed = self.lock.renewed_at
        return (self.acquired.is_set() and not self.lock.released and renewed is not None
                and self.clock() - renewed < self.settings.renew_deadline_s)

    def check_may_act(self) -> None:
        if not self.may_act():
            lease = f"Lease {self.settings.lease_namespace}/{self.settings.lease_name}"
            renewed = self.lock.renewed_at
            if self.acquired.is_set() and renewed is not None and not self.lock.released:
                # Still the holder on record, but past the deadline: the watchdog is about to end us.
                raise NotLeader(f"not acting: the last renewal of {lease} started {self.clock() - renewed:.1f} s ago, "
                                f"past the renew deadline ({self.settings.renew_deadline_s:g} s): no writes")
            raise NotLeader(f"not the leader ({lease}, holder {self.holder or 'none'}): no writes")

    def role(self) -> str:
        return "leader" if self.acquired.is_set() else "standby"

    # ---- running ---------------------------------------------------------------------------

    def start(self) -> Elector:
        s = self.settings
        config = electionconfig.Config(self.lock, lease_duration=s.lease_duration_s,
                                       renew_deadline=s.renew_deadline_s, retry_period=s.retry_period_s,
                                       onstarted_leading=self._started_leading,
                                       onstopped_leading=self._stopped_leading)
        election = leaderelection.LeaderElection(config)
        log.info(f"leader election: candidate {s.identity} for Lease {s.lease_namespace}/{s.lease_name} "
                 f"(lease {s.lease_duration_s} s, renew deadline {s.renew_deadline_s:g} s, "
                 f"retry {s.retry_period_s:g} s)")
        for target, name in ((self._run_election, "leader-election"), (self._watchdog, "leader-watchdog")):
            t = threading.Thread(target=target, args=(election,) if target == self._run_election else (),
                                 name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def alive(self) -> bool:
        return all(t.is_alive() for t in self._threads)

    def release(self) -> bool:
        """Called once the operator has stopped writing: stop acting and hand the Lease back."""
        self.stopping = True
        LEADER.set(0)
        released = self.lock.release()
        if released:
            log.info(f"released Lease {self.settings.lease_namespace}/{self.settings.lease_name}")
        return released

    def _run_election(self, election: leaderelection.LeaderElection) -> None:
        try:
            election.run()  # returns only after a renewal failed for the renew deadline
        except Exception as exc:  # noqa: BLE001
            if not self.stopping:
                self._lose(f"leader election failed: {type(exc).__name__}: {exc}")

    def _started_leading(self) -> None:
        self.acquired_at = self.clock()
        log.info(f"became the leader: acquired Lease {self.settings.lease_namespace}/{self.settings.lease_name} "
                 f"as {self.settings.identity} after {self.acquired_at - self.started_at:.1f} s as a candidate")
        LEADER.set(1)
        self.acquired.set()

    def _stopped_leading(self) -> None:
        if not self.stopping:
            self._lose("leader election lost: could not renew the Lease")

    def _saw_holder(self, holder: str | None) -> None:
        if holder != self.holder:
            if not self.acquired.is_set() and holder and holder != self.settings.identity:
                log.info(f"standby: Lease {self.settings.lease_namespace}/{self.settings.lease_name} "
                         f"is held by {holder}")
            self.holder = holder
        if self.acquired.is_set() and not self.stopping and holder and holder != self.settings.identity:
            self._lose(f"leader election lost: Lease now held by {holder}")

    def _watchdog(self) -> None:
        deadline = self.settings.renew_deadline_s
        while True:
            time.sleep(WATCHDOG_PERIOD_S)
            if self.stopping or not self.acquired.is_set():
                continue
            renewed = self.lock.renewed_at
            if renewed is None or self.clock() - renewed >= deadline:
                since = "never" if renewed is None else f"{self.clock() - renewed:.1f} s ago"
                self._lose(f"leader election lost: last successful renewal started {since} "
                           f"(renew deadline {deadline:g} s)")
                return
