"""The per-object write lock: one lock per name while it is in use, nothing kept once it is not."""

from __future__ import annotations

import gc
import threading

from tritonscale.kube import object_lock as ol


def test_one_name_gets_one_lock_while_it_is_held() -> None:
    held = ol.object_lock("ns", "a")
    with held:
        assert ol.object_lock("ns", "a") is held  # a second writer waits on the same lock
        assert not ol.object_lock("ns", "a").acquire(blocking=False)
    assert ol.object_lock("ns", "b") is not held


def test_two_threads_asking_at_once_share_one_lock() -> None:
    got: list[threading.Lock] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        lock = ol.object_lock("ns", "race")
        with lock:
            got.append(lock)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8  # every writer ran, one at a time (a held lock would have hung one)


def test_names_no_longer_written_leave_no_lock_behind() -> None:
    """Session 85's churn audit: one lock per name ever written, for the life of the process."""
    for i in range(300):
        with ol.object_lock("churn", f"svc-{i}"):
            pass
    gc.collect()
    assert not [key for key in ol._locks.keys() if key[0] == "churn"]
