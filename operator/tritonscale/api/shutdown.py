"""How a replica stops: the triton container's preStop wait, the grace period and Triton's exit timeout
(``runtime.terminationGracePeriodSeconds``), shared by the spec, its rules and the rendering."""

from __future__ import annotations

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
