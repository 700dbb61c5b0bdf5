"""Module state of scaling/tick.py and prometheus_events.py that every InferenceService's tick shares: the
ticks run on a pool of threads (handlers.autoscale_daemon, asyncio.to_thread), so one tick's loop over a shared
dict meets another's insertion. Session 83's concurrency audit failed a tick with "dictionary changed size
during iteration" both ways below (and 14 of ~152,000 _census calls from 8 threads, the clock sped up)."""

from __future__ import annotations

import logging
import threading

from tritonscale.scaling import prometheus_events as pe
from tritonscale.scaling import tick


class Kube:
    def node_unschedulable(self, name: str) -> bool:
        return name == "cordoned"


class Now(float):
    """A tick's clock reading whose subtraction runs ``hook`` once, after ``countdown`` subtractions:
    where the interpreter may switch to another tick's thread."""

    hook = None
    countdown = 0

    def __sub__(self, other: float) -> float:  # type: ignore[override]
        if Now.hook is not None:
            Now.countdown -= 1
            if Now.countdown <= 0:
                hook, Now.hook = Now.hook, None
                hook()
        return float(self) - float(other)


def test_a_node_another_tick_adds_while_this_one_drops_old_nodes_fails_nothing():
    tick._nodes.clear()
    now = Now(1000.0)
    assert tick._cordoned(Kube(), frozenset({"a", "cordoned"}), now) == frozenset({"cordoned"})
    # the first subtraction is node a's age check, the second the clean-up's first step: another
    # service's tick sees a new node there
    Now.countdown, Now.hook = 2, lambda: tick._nodes.__setitem__("new", (1000.0, False))
    assert tick._cordoned(Kube(), frozenset({"a"}), now) == frozenset()
    assert set(tick._nodes) == {"a", "cordoned", "new"}
    tick._nodes.clear()


def test_the_outage_warning_is_said_once_while_other_ticks_say_theirs():
    pe._outages_said.clear()
    pe._outages_said[("Old", "long ago")] = 0.0
    other: list[int] = []

    def another_tick() -> None:  # another service's tick, at the same moment, with another outage
        t = threading.Thread(target=lambda: other.append(pe.transition_level(("Warning", "X", "y"), 1000.5)))
        t.start()
        t.join(0.2)
        assert not other, "another tick changed the outages while this one went through them"
        threads.append(t)

    threads: list[threading.Thread] = []
    Now.countdown, Now.hook = 1, another_tick
    assert pe.transition_level(("Warning", "PrometheusUnavailable", "down"), Now(1000.0)) == logging.WARNING
    threads[0].join(5)
    assert other == [logging.WARNING]
    assert pe.transition_level(("Warning", "PrometheusUnavailable", "down"), 1001.0) == logging.INFO
    assert set(pe._outages_said) == {("PrometheusUnavailable", "down"), ("X", "y")}
    pe._outages_said.clear()
