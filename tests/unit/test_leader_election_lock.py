"""lease_lock.py, under leader_election.py: the fencing the operator adds to the kubernetes client's election --
the Lease lock.

An in-memory Lease API with the API server's optimistic concurrency (a PUT with a stale
resourceVersion gets 409, tests/support/lease_api.py) stands in for kube-apiserver; the real one is in
tests/integration/test_operator_failover.py. Fake clocks: the arithmetic is the point. The elector on
top of the lock is in test_leader_election_elector.py, the settings in test_leader_election_settings.py.
"""

from __future__ import annotations

import copy
import json
import time

import pytest
from kubernetes.client import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection

from support.lease_api import FakeClock, LeaseStore
from tritonscale.leader_election import FencedLeaseLock

# ---- the lock ---------------------------------------------------------------------------

def _election(lock: FencedLeaseLock, lease_s: int = 15, renew_s: float = 10, retry_s: float = 2):
    config = electionconfig.Config(lock, lease_duration=lease_s, renew_deadline=renew_s, retry_period=retry_s,
                                   onstarted_leading=lambda: None, onstopped_leading=lambda: None)
    return leaderelection.LeaderElection(config)


@pytest.mark.parametrize("step_s", [0.0, 60.0, 600.0])
def test_a_standby_whose_wall_clock_steps_back_takes_over_at_the_lease_s_expiry(step_s, monkeypatch):
    """auditJ D3: the port measured expiry with time.time(), so a standby whose wall clock was stepped back
    (an NTP correction) took over that much later (76 s after the leader's last renewal for 60 s, 616 s
    for 600 s). The port now reads the wall clock once and monotonic time since."""
    from tritonscale import leader_election

    assert isinstance(leaderelection.time, leader_election._SteadyTime)  # installed on import
    store, mono, wall = LeaseStore(), FakeClock(), [1.75e9]
    steady = leader_election._SteadyTime(wall=lambda: wall[0], mono=mono)
    monkeypatch.setattr(leaderelection, "time", steady)
    a = _election(FencedLeaseLock("tritonscale", "ops", "a", store, clock=mono))
    b = _election(FencedLeaseLock("tritonscale", "ops", "b", store, clock=mono))
    assert a.try_acquire_or_renew()  # a leads, and dies after this renewal
    assert not b.try_acquire_or_renew()  # b sees it held
    wall[0] -= step_s
    took_over = None
    for waited in range(2, 3600, 2):  # b retries every 2 s
        mono.t += 2
        wall[0] += 2
        if b.try_acquire_or_renew():
            took_over = waited
            break
    assert took_over == 16, took_over  # the first retry past the 15 s lease, whatever the step


def test_a_renewal_counts_from_when_its_attempt_started():
    store, clock = LeaseStore(), FakeClock()

    class SlowStore(LeaseStore):
        def replace_namespaced_lease(self, *a, **kw):
            clock.t += 3.0  # the PUT takes 3 s: the lease was written up to 3 s after the attempt began
            return store.replace_namespaced_lease(*a, **kw)

        def read_namespaced_lease(self, *a, **kw):
            return store.read_namespaced_lease(*a, **kw)

        def create_namespaced_lease(self, *a, **kw):
            return store.create_namespaced_lease(*a, **kw)

    lock = FencedLeaseLock("tritonscale", "ops", "a", SlowStore(), clock=clock)
    election = _election(lock)
    assert election.try_acquire_or_renew()  # creates the Lease
    assert lock.renewed_at == 1000.0 and store.holder() == "a"
    clock.t = 1002.0
    assert election.try_acquire_or_renew()  # renews: started at 1002, written at 1005
    assert lock.renewed_at == 1002.0 and clock.t == 1005.0


def test_a_refused_connection_is_a_failed_attempt_not_a_crash():
    store = LeaseStore()
    lock = FencedLeaseLock("tritonscale", "ops", "a", store, clock=FakeClock())
    election = _election(lock)
    assert election.try_acquire_or_renew()
    renewed = lock.renewed_at
    store.down = True
    # Without the lock's conversion urllib3's error would end the port's loop (and the
    # standby's election with it).
    assert election.try_acquire_or_renew() is False
    assert lock.renewed_at == renewed


def test_someone_elses_lease_is_not_a_renewal():
    store, clock = LeaseStore(), FakeClock()
    a = FencedLeaseLock("tritonscale", "ops", "a", store, clock=clock)
    b = FencedLeaseLock("tritonscale", "ops", "b", store, clock=clock)
    assert _election(a).try_acquire_or_renew()
    eb = _election(b)
    assert eb.try_acquire_or_renew() is False  # held, not expired
    assert b.renewed_at is None and store.holder() == "a"


def test_release_hands_the_lease_back_once_and_refuses_further_writes():
    store = LeaseStore()
    lock = FencedLeaseLock("tritonscale", "ops", "a", store, clock=FakeClock())
    election = _election(lock)
    assert election.try_acquire_or_renew()
    assert election.try_acquire_or_renew()  # a renewal: the lock's own copy is now stale
    assert lock.release()
    released = store.leases["tritonscale"].spec
    assert released.holder_identity == "" and released.lease_duration_seconds == 1
    assert election.try_acquire_or_renew() is False  # the port would otherwise take it straight back
    assert store.holder() == ""
    # A standby takes a released Lease at its next attempt, without waiting a lease duration.
    b = FencedLeaseLock("tritonscale", "ops", "b", store, clock=FakeClock())
    assert _election(b).try_acquire_or_renew() and store.holder() == "b"


def test_a_release_that_meets_a_renewal_committing_under_it_reads_again_and_hands_the_lease_back():
    """auditJ D6: a renewal already past the ``released`` check that committed between the release's read
    and write made the release's write a 409; the Lease stayed ours, and the standby waited out the lease."""
    store = LeaseStore()
    lock = FencedLeaseLock("tritonscale", "ops", "a", store, clock=FakeClock())
    election = _election(lock)
    assert election.try_acquire_or_renew()
    lock.get("tritonscale", "ops")  # the next renewal: read, its write in flight
    in_flight = copy.deepcopy(lock.lease_reference)
    read = store.read_namespaced_lease
    landed = []

    def read_then_the_renewal_lands(name, namespace, **kw):
        lease = read(name, namespace, **kw)
        if not landed:
            store.replace_namespaced_lease(name, namespace, in_flight)
            landed.append(True)
        return lease

    store.read_namespaced_lease = read_then_the_renewal_lands
    assert lock.release() and landed
    assert store.holder() == "" and store.leases["tritonscale"].spec.lease_duration_seconds == 1


def test_lease_transitions_count_changes_of_holder_as_client_go_does():
    """`kubectl get lease -o yaml` shows how often leadership moved: kept on renewals, one more per
    change of holder (the port leaves the field unset)."""
    store = LeaseStore()
    a = FencedLeaseLock("tritonscale", "ops", "a", store, clock=FakeClock())
    ea = _election(a)
    assert ea.try_acquire_or_renew() and ea.try_acquire_or_renew() and ea.try_acquire_or_renew()
    assert store.leases["tritonscale"].spec.lease_transitions == 0
    assert a.release()
    assert store.leases["tritonscale"].spec.lease_transitions == 0  # a release is no new holder
    b = FencedLeaseLock("tritonscale", "ops", "b", store, clock=FakeClock())
    eb = _election(b)
    assert eb.try_acquire_or_renew() and eb.try_acquire_or_renew()
    assert store.holder() == "b" and store.leases["tritonscale"].spec.lease_transitions == 1
    assert b.release()
    c = FencedLeaseLock("tritonscale", "ops", "c", store, clock=FakeClock())
    assert _election(c).try_acquire_or_renew()
    assert store.holder() == "c" and store.leases["tritonscale"].spec.lease_transitions == 2


def test_release_leaves_someone_elses_lease_alone():
    store = LeaseStore()
    a = FencedLeaseLock("tritonscale", "ops", "a", store, clock=FakeClock())
    assert _election(a).try_acquire_or_renew()
    writes = len(store.writes)
    b = FencedLeaseLock("tritonscale", "ops", "b", store, clock=FakeClock())
    assert b.release() is False
    assert len(store.writes) == writes and store.holder() == "a"



def _a_leads_b_waits() -> tuple[LeaseStore, FakeClock, leaderelection.LeaderElection, leaderelection.LeaderElection]:
    """Two candidates on one clock (15 s leases): a holds the Lease, and b has seen it held at t = 1000."""
    store, clock = LeaseStore(), FakeClock()
    a = FencedLeaseLock("tritonscale", "ops", "a", store, clock=clock)
    b = FencedLeaseLock("tritonscale", "ops", "b", store, clock=clock)
    ea, eb = _election(a, lease_s=15), _election(b, lease_s=15)
    assert ea.try_acquire_or_renew()
    assert eb.try_acquire_or_renew() is False
    return store, clock, ea, eb


def test_a_deleted_lease_is_free_only_once_its_holders_lease_would_have_expired():
    """`kubectl delete lease`: the port creates the Lease at the first 404, so a standby that raced
    the leader's next renewal led beside it (1.5-1.7 s with three replicas on a real API server)."""
    store, clock, ea, eb = _a_leads_b_waits()
    del store.leases["tritonscale"]
    clock.t += 2.0
    assert eb.try_acquire_or_renew() is False and store.holder() is None  # a might still lead
    # The holder itself takes it straight back at its next renewal: nobody else may lead meanwhile.
    assert ea.try_acquire_or_renew() and store.holder() == "a"
    assert eb.try_acquire_or_renew() is False
    # A holder that is gone for good: the standby takes the Lease one lease duration after it last
    # saw it held, as after an expiry.
    del store.leases["tritonscale"]
    clock.t += 14.0  # 14 s after b last saw a's Lease (at t = 1002)
    assert eb.try_acquire_or_renew() is False
    clock.t += 1.5
    assert eb.try_acquire_or_renew() and store.holder() == "b"


def test_a_lease_whose_holder_is_emptied_by_hand_is_free_only_once_its_holders_lease_would_have_expired():
    """`kubectl patch lease ... holderIdentity: ""` (an exploratory audit): the standby took it at once, as a
    released Lease, and led beside the leader for up to a retry period (63 and 245 ms seen on a real API
    server). A release writes a 1 s lease; a hand edit leaves the holder's, and waits as a deleted Lease does."""
    store, clock, ea, eb = _a_leads_b_waits()
    store.leases["tritonscale"].spec.holder_identity = ""  # the hand edit; leaseDurationSeconds stays 15
    clock.t += 1.0
    assert eb.try_acquire_or_renew() is False and store.holder() == ""  # a might still lead
    assert ea.try_acquire_or_renew() and store.holder() == "a"  # the leader takes it back at its renewal
    store.leases["tritonscale"].spec.holder_identity = ""
    clock.t += 1.0
    assert eb.try_acquire_or_renew() is False  # b last saw a holder at t = 1000 (a), 15 s before it may take it
    clock.t += 13.5  # a gone for good: free once its lease would have expired
    assert eb.try_acquire_or_renew() and store.holder() == "b"


def test_a_standby_waits_the_lease_duration_the_holder_recorded(monkeypatch):
    """client-go measures an expiry against the Lease's own leaseDurationSeconds; the port against the
    candidate's setting. A standby with a 5 s lease (a `helm upgrade` of leaderElection, mid-rollout)
    took a 15 s leader's Lease 6.2 s after its last renewal, while that leader could act for 4 s more
    (an exploration on a real API server, session 55)."""
    import types

    store, clock = LeaseStore(), FakeClock()
    monkeypatch.setattr(leaderelection, "time", types.SimpleNamespace(time=clock, sleep=time.sleep))
    a = FencedLeaseLock("tritonscale", "ops", "a", store, clock=clock)
    b = FencedLeaseLock("tritonscale", "ops", "b", store, clock=clock)
    ea, eb = _election(a, lease_s=15), _election(b, lease_s=5, renew_s=4, retry_s=1)
    assert ea.try_acquire_or_renew() and store.holder() == "a"
    assert eb.try_acquire_or_renew() is False  # b sees a's renewal at t = 1000
    clock.t += 6.0  # past b's own 5 s, within the 15 s a's Lease records
    assert eb.try_acquire_or_renew() is False and store.holder() == "a"
    clock.t += 8.9  # 14.9 s
    assert eb.try_acquire_or_renew() is False and store.holder() == "a"
    clock.t += 0.2  # 15.1 s
    assert eb.try_acquire_or_renew() and store.holder() == "b"
    # The other way round: a 15 s candidate waits its own 15 s for a 5 s holder's Lease (the port's check).
    clock.t += 1.0
    assert eb.try_acquire_or_renew()  # b renews at t = 1016.1
    assert ea.try_acquire_or_renew() is False
    clock.t += 6.0
    assert ea.try_acquire_or_renew() is False and store.holder() == "b"
    clock.t += 9.5
    assert ea.try_acquire_or_renew() and store.holder() == "a"


def test_a_lease_no_one_held_is_created_at_once():
    store, clock = LeaseStore(), FakeClock()
    b = FencedLeaseLock("tritonscale", "ops", "b", store, clock=clock)
    assert _election(b).try_acquire_or_renew() and store.holder() == "b"


def _forbidden(verb: str) -> ApiException:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps({"kind": "Status", "code": 403, "message": (
        f'leases.coordination.k8s.io is forbidden: User "system:serviceaccount:ops:ts" cannot {verb} resource '
        f'"leases" in API group "coordination.k8s.io" in the namespace "ops"')})
    return exc


def test_a_refused_lease_write_is_logged_once_with_the_api_servers_reason(caplog):
    """The port logs a failed create or update at INFO (hidden) and returns False: a candidate without
    RBAC to create the Lease stood by for ever, and a leader whose renewals were refused exited at its
    deadline, neither saying why."""

    class NoCreate(LeaseStore):
        def create_namespaced_lease(self, namespace, body, **_):
            raise _forbidden("create")

    lock = FencedLeaseLock("tritonscale", "ops", "a", NoCreate(), clock=FakeClock())
    election = _election(lock)
    with caplog.at_level("INFO", logger="tritonscale.leader_election"):
        for _ in range(3):
            assert election.try_acquire_or_renew() is False
    said = [r for r in caplog.records if r.name == "tritonscale.leader_election"]
    assert [r.levelname for r in said] == ["WARNING"], [r.getMessage() for r in said]
    assert said[0].getMessage() == (
        'cannot write Lease ops/tritonscale: 403 Forbidden: leases.coordination.k8s.io is forbidden: User '
        '"system:serviceaccount:ops:ts" cannot create resource "leases" in API group "coordination.k8s.io" in '
        'the namespace "ops"')


def test_a_lost_race_for_the_lease_is_no_error(caplog):
    store, clock = LeaseStore(), FakeClock()
    a = FencedLeaseLock("tritonscale", "ops", "a", store, clock=clock)
    b = FencedLeaseLock("tritonscale", "ops", "b", store, clock=clock)
    ea, eb = _election(a), _election(b)
    with caplog.at_level("INFO", logger="tritonscale.leader_election"):
        assert eb.try_acquire_or_renew()  # b creates it
        b.lease_reference = None
        del store.leases["tritonscale"]
        assert ea.try_acquire_or_renew()  # a never saw b's: creates it
        assert eb.try_acquire_or_renew() is False  # reads a's: held, not expired
        # Both read the Lease, a renews first; b's update carries the old resourceVersion: 409.
        clock.t += 20.0
        assert ea.election_config.lock.get("tritonscale", "ops")[0]
        assert b.get("tritonscale", "ops")[0]
        assert a.update("tritonscale", "ops", ea.observed_record)
        assert b.update("tritonscale", "ops", ea.observed_record) is False
    assert not [r for r in caplog.records if r.name == "tritonscale.leader_election" and r.levelname == "WARNING"]
