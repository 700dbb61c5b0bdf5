"""``tritonscale run``: the checks of its flags that argparse cannot make one at a time (leader
election, TLS, ports, series labels), then the operator started with them (``operator_main.run``).
``cli.build_parser`` defines the flags.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tritonscale.given_flags import was_given


def _election_settings(args: argparse.Namespace) -> Any:
    """The --leader-elect-* flags as ElectionSettings, or None without --leader-elect."""
    from tritonscale import leader_election as le

    if not args.leader_elect:
        return None
    return le.ElectionSettings(
        lease_name=args.leader_elect_resource_name,
        lease_namespace=args.leader_elect_resource_namespace or le.default_namespace(),
        identity=le.default_identity(),
        lease_duration_s=args.leader_elect_lease_duration,
        renew_deadline_s=args.leader_elect_renew_deadline,
        retry_period_s=args.leader_elect_retry_period,
    )


# The --leader-elect-* flags' defaults, for build_parser and for telling a given flag from a default (a
# Namespace no recording parser made: given if not these)
_ELECTION_FLAGS = {"leader_elect_resource_name": "tritonscale", "leader_elect_resource_namespace": "",
                   "leader_elect_lease_duration": 15, "leader_elect_renew_deadline": 10.0,
                   "leader_elect_retry_period": 2.0}


def _unelected_flags(args: argparse.Namespace) -> list[str]:
    """A --leader-elect-* flag given without --leader-elect, as a problem: an operator started with a Lease
    name but no election acts at once, beside the others that share the Lease."""
    given = [f"--{d.replace('_', '-')}" for d, default in _ELECTION_FLAGS.items() if was_given(args, d, default)]
    if not given:
        return []
    return [f"{given[0]} is read only with --leader-elect: add --leader-elect (or leave out "
            f"{'the --leader-elect-* flags' if len(given) > 1 else given[0]}); without it this operator acts "
            f"at once, whatever other replicas do"]


def _run(args: argparse.Namespace) -> int:
    from tritonscale.operator_main import OperatorOptions, run

    election = _election_settings(args)
    problems = election.problems() if election else _unelected_flags(args)
    if problems:
        for p in problems:
            print(f"tritonscale run: {p}", file=sys.stderr)
        return 2
    if args.prometheus_ca_file and args.prometheus_insecure_skip_tls_verify:
        print("tritonscale run: --prometheus-ca-file and --prometheus-insecure-skip-tls-verify exclude each other "
              "(the first checks the certificate against a CA, the second not at all)", file=sys.stderr)
        return 2
    problems = [p for p in (_port_problem("--metrics-port", args.metrics_port),
                            _port_problem("--liveness-port", args.liveness_port)) if p]
    if args.metrics_port and args.metrics_port == args.liveness_port:
        problems = [f"--metrics-port and --liveness-port are both {args.metrics_port}: give them different ports"]
    labels = [name for name, _ in args.series_label or []]
    twice = sorted({n for n in labels if labels.count(n) > 1})
    if twice:  # a later one silently replaced the earlier
        problems.append(f"--series-label {twice[0]} is given twice: a series has one value per label")
    if problems:
        for p in problems:
            print(f"tritonscale run: {p}", file=sys.stderr)
        return 2
    return run(OperatorOptions(
        namespaces=args.namespace or [],
        prometheus_url=args.prometheus_url,
        allowed_prometheus_urls=tuple(args.allowed_prometheus_url or ()),
        prometheus_tls_verify=(False if args.prometheus_insecure_skip_tls_verify
                               else args.prometheus_ca_file or True),
        metrics_port=args.metrics_port,
        liveness_port=args.liveness_port,
        verbose=args.verbose,
        selector_labels=dict(args.series_label or []),
        leader_election=election,
        max_upgrade_rollouts=args.max_upgrade_rollouts,
    ))


def _port_problem(flag: str, port: int) -> str | None:
    """Why the operator could not serve on ``port`` (all interfaces, as its /metrics and /healthz
    servers bind), or None: checked before anything starts, so a port in use is one line naming the
    flag, not a traceback from the server's thread (or Kopf's health reporter) once it runs."""
    from tritonscale.http_listener import listening_socket

    if not port:
        return None
    try:
        listening_socket(port).close()
    except OSError as exc:
        return f"{flag} {port}: {(exc.strerror or str(exc)).lower()} (0 disables)"
    return None
