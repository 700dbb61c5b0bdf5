"""How a replica stops: the triton container's preStop wait, the grace period and Triton's exit timeout
(``runtime.terminationGracePeriodSeconds``), shared by the spec, its rules and the rendering."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # spec_runtime.py imports this module
    from tritonscale.api.spec import RuntimeSpec

# A replica's shutdown (a scale-down, a rollout, a drain). On SIGTERM tritonserver finishes the requests
# it holds, but refuses every new one at once: new HTTP requests are disconnected, and new gRPC calls, on
# connections old or new, are answered NOT_FOUND ("unknown model") until it exits (session 86's audit, a
# real tritonserver 2.51). The pod's removal from the Service's endpoints reaches kube-proxy, ingresses
# and meshes some seconds later, and a gRPC client keeps its connection until Triton closes it at its
# age. So the triton container's preStop waits first, while Triton still serves: ENDPOINTS_LAG_S, and one
# connection age with gRPC's +10% jitter, so that every client has moved to another replica (an age past
# MAX_DRAINED_AGE_S is a choice of connections that outlive a drain, and the wait stops there). Then Triton
# has its exit timeout to finish what it holds, KILL_MARGIN_S before the kubelet's SIGKILL.
ENDPOINTS_LAG_S = 5
MAX_DRAINED_AGE_S = 60
TRITON_EXIT_TIMEOUT_S = 30  # tritonserver's own default --exit-timeout-secs: the default grace's share
KILL_MARGIN_S = 5


def drain_delay_seconds(grpc_max_connection_age_s: int) -> int:
    """The triton container's preStop wait: seconds a terminating replica keeps serving."""
    return ENDPOINTS_LAG_S + min(MAX_DRAINED_AGE_S, (11 * grpc_max_connection_age_s + 9) // 10)


def min_grace_seconds(grpc_max_connection_age_s: int) -> int:
    """The shortest grace period that leaves tritonserver a second to finish its requests."""
    return drain_delay_seconds(grpc_max_connection_age_s) + KILL_MARGIN_S + 1


def min_grace_cel(age: str) -> str:
    """``min_grace_seconds`` in CEL, of the integer expression ``age``."""
    capped = 10 * MAX_DRAINED_AGE_S // 11  # the largest age whose +10% is within MAX_DRAINED_AGE_S
    return (f"({ENDPOINTS_LAG_S + KILL_MARGIN_S + 1} + ({age} > {capped} ? {MAX_DRAINED_AGE_S} : "
            f"(11 * {age} + 9) / 10))")


_EXIT_TIMEOUT_FLAG = re.compile(r"^--exit-timeout-secs[= ]([0-9]+)$")


def _exit_timeout_given(extra_args: list[str]) -> int | None:
    """The ``--exit-timeout-secs`` of runtime.extraArgs (the last: tritonserver takes the last), if any."""
    given = [int(m.group(1)) for a in extra_args if (m := _EXIT_TIMEOUT_FLAG.match(a.strip()))]
    return given[-1] if given else None


def drain_wait(runtime: RuntimeSpec) -> int:
    """The preStop wait: the replica serves on while clients move to others."""
    return drain_delay_seconds(runtime.grpc_max_connection_age_seconds)


def grace(runtime: RuntimeSpec) -> int:
    """The pod's terminationGracePeriodSeconds: the spec's, else the wait, Triton's exit timeout (the one
    runtime.extraArgs gives, which tritonserver takes over ours: a grace of the default 30 s killed Triton
    long before the 300 s a user gave it; session 86's review) and the margin."""
    if runtime.termination_grace_period_seconds is not None:
        return runtime.termination_grace_period_seconds
    exit_s = _exit_timeout_given(runtime.extra_args)
    return drain_wait(runtime) + (TRITON_EXIT_TIMEOUT_S if exit_s is None else exit_s) + KILL_MARGIN_S


def exit_timeout(runtime: RuntimeSpec) -> int:
    """tritonserver's --exit-timeout-secs: what the grace leaves after the wait, less the margin (at least 1:
    the spec's rule, ``rules._grace_after_drain``). runtime.extraArgs' own, rendered after it, wins."""
    return max(1, grace(runtime) - drain_wait(runtime) - KILL_MARGIN_S)
