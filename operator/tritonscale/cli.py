"""`tritonscale`: the single entry point (also `python -m tritonscale`)."""

from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import sys
import threading
from typing import Any, NoReturn

from tritonscale.api.names import DNS1123_LABEL, DNS1123_SUBDOMAIN
from tritonscale.cli_numbers import int_in, positive_float
from tritonscale.given_flags import record_given
from tritonscale.output_paths import name_arg
from tritonscale.render_command import _crd, _render
from tritonscale.run_command import _ELECTION_FLAGS, _run


def _ca_bundle(text: str) -> str:
    """A readable PEM file of CA certificates (loaded once here, so a wrong file is a usage error
    at start, not a failed query on every tick)."""
    import ssl

    try:
        ssl.create_default_context(cafile=text)
    except FileNotFoundError:
        raise argparse.ArgumentTypeError(f"{text!r}: no such file") from None
    except OSError as exc:  # ssl.SSLError too: no certificate in it, a damaged one
        detail = re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(exc.strerror or exc))
        raise argparse.ArgumentTypeError(f"{text!r} is not a readable PEM file of CA certificates "
                                         f"({detail})") from None
    return text


def _or_env(check: Any, env: str) -> Any:
    """``check`` (an argparse type) whose error says the value came from ``env`` when it did: a flag's
    default read from the environment (the chart sets them) was named as if given on the command line."""
    def checked(text: str) -> Any:
        try:
            return check(text)
        except argparse.ArgumentTypeError as exc:
            if os.environ.get(env) == text:
                raise argparse.ArgumentTypeError(f"{exc} (the value of {env})") from None
            raise

    checked.__name__ = getattr(check, "__name__", "value")  # argparse names a type in "invalid <name> value"
    return checked


def _namespace(text: str) -> str:
    if len(text) > 63 or not DNS1123_LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a namespace name (a DNS-1123 label: lower-case "
                                         "letters, digits and '-', at most 63 characters)")
    return text


def _optional_namespace(text: str) -> str:
    return _namespace(text) if text else text


def _lease_name(text: str) -> str:
    if len(text) > 253 or not DNS1123_SUBDOMAIN.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Lease name (a DNS-1123 subdomain)")
    return text


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0..65535 (0 disables), got {text!r}")
    return port


def _http_url(text: str) -> str | None:
    """A Prometheus base URL, checked as ``spec.scaling.prometheus.url`` is: a query or fragment would
    end up before the ``/api/v1/query`` the client appends."""
    from tritonscale.api.spec import prometheus_base_url

    if not text:
        return None  # as unset (the chart's "empty: none")
    from tritonscale.scaling.prometheus_http import shown_url

    try:
        return prometheus_base_url(text)
    except ValueError as exc:  # the URL as shown everywhere else: a password as *** (it may come from a Secret)
        raise argparse.ArgumentTypeError(f"{exc}, got {shown_url(text)!r}") from None


def _label_pair(text: str) -> tuple[str, str]:
    from tritonscale.scaling.promql_queries import is_label_name

    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    if not is_label_name(name):  # it reached SeriesSelector and ended the operator in a traceback
        raise argparse.ArgumentTypeError(f"{name!r} is not a Prometheus label name (letters, digits and '_', "
                                         "not starting with a digit)")
    try:  # argv bytes that are not UTF-8 arrive as surrogates; every query's request would fail to encode
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"the value of {name} is not valid UTF-8 (Prometheus label values are "
                                         "UTF-8)") from None
    return name, value


class _OneLineParser(argparse.ArgumentParser):
    """A usage error in one line that names the flag and where help is, not the whole usage block
    above it (argparse's own): ``tritonscale run: error: argument --metrics-port: expected a port
    0..65535 (see tritonscale run --help)``. Exit code 2, as argparse's. Subcommands' parsers are of
    this class too (argparse makes them of their parent's).

    No abbreviated long flags (``allow_abbrev``): ``--names`` is not ``--namespace``. A flag is a
    contract that scripts and the chart's ``extraArgs`` check rely on, and an abbreviation that
    matches one flag today becomes ambiguous, or another flag, when a flag is added."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="tritonscale",
        description="Serve models on NVIDIA Triton and autoscale them on p95 latency.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run the operator (in-cluster credentials or KUBECONFIG)")
    p.add_argument("--namespace", "-n", action="append", metavar="NS", type=_namespace,
                   help="watch only this namespace (repeatable); default: cluster-wide")
    p.add_argument("--prometheus-url", default=os.environ.get("TRITONSCALE_PROMETHEUS_URL"),
                   type=_or_env(_http_url, "TRITONSCALE_PROMETHEUS_URL"),
                   help="Prometheus base URL (env TRITONSCALE_PROMETHEUS_URL)")
    p.add_argument("--allowed-prometheus-url", action="append", metavar="URL", type=_http_url,
                   help="a Prometheus URL spec.scaling.prometheus.url may name, itself or a path under it "
                        "(repeatable; the same scheme, host and port). Given: any other URL in a spec is not "
                        "queried (MetricsAvailable=False). Default: any URL")
    p.add_argument("--prometheus-ca-file", default=os.environ.get("TRITONSCALE_PROMETHEUS_CA_FILE") or None,
                   type=_or_env(_ca_bundle, "TRITONSCALE_PROMETHEUS_CA_FILE"), metavar="PEM",
                   help="CA certificate(s) to check an https Prometheus against, for every Prometheus URL "
                        "(env TRITONSCALE_PROMETHEUS_CA_FILE; default: the system's CAs)")
    p.add_argument("--prometheus-insecure-skip-tls-verify", action="store_true",
                   help="do not check an https Prometheus's certificate (anyone on the path can then feed "
                        "the autoscaler its metrics)")
    # String defaults from the environment go through `type` too: a bad value is a usage error.
    p.add_argument("--metrics-port", type=_or_env(_port, "TRITONSCALE_METRICS_PORT"),
                   default=os.environ.get("TRITONSCALE_METRICS_PORT", "8080"),
                   help="port of the operator's own /metrics (0 disables; default 8080)")
    p.add_argument("--liveness-port", type=_or_env(_port, "TRITONSCALE_LIVENESS_PORT"),
                   default=os.environ.get("TRITONSCALE_LIVENESS_PORT", "8081"),
                   help="port of /healthz (0 disables; default 8081)")
    # The default is upgrade_rollouts.DEFAULT_MAX_ROLLOUTS (a test holds them equal): that module's imports
    # would slow every command's start.
    p.add_argument("--max-upgrade-rollouts", type=_or_env(int_in(0), "TRITONSCALE_MAX_UPGRADE_ROLLOUTS"),
                   default=os.environ.get("TRITONSCALE_MAX_UPGRADE_ROLLOUTS", "1"), metavar="N",
                   help="after an operator upgrade that changes the pod template of unchanged specs, roll a fleet "
                        "only while fewer than N other fleets roll out (env TRITONSCALE_MAX_UPGRADE_ROLLOUTS; "
                        "default 1: room for one fleet's surge pods, and a new template whose "
                        "pods fail stops at the first fleet; 0: every fleet at once)")
    p.add_argument("--series-label", action="append", type=_label_pair, metavar="NAME=VALUE",
                   help="extra label matcher for Triton's series, e.g. job=triton (repeatable; values are escaped)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="log at DEBUG: every autoscaler tick, and Kopf's routine lines (each child event handled, "
                        "each daemon cancelled at stop)")
    g = p.add_argument_group(
        "leader election", "Run several replicas: one holds a coordination.k8s.io/v1 Lease and acts, the others "
                           "stand by (serving /healthz and /metrics) and take over when the Lease expires. "
                           "Defaults are client-go's.")
    g.add_argument("--leader-elect", action="store_true",
                   help="act only while holding the Lease (default: act at once, as the only replica)")
    g.add_argument("--leader-elect-resource-name", default=_ELECTION_FLAGS["leader_elect_resource_name"],
                   metavar="NAME", type=_lease_name,
                   help="name of the Lease (default tritonscale). One Lease elects one acting operator: "
                        "operators that watch different namespaces need different Leases, or all but one "
                        "stand by (the chart names it after the release)")
    g.add_argument("--leader-elect-resource-namespace",
                   default=_ELECTION_FLAGS["leader_elect_resource_namespace"], metavar="NS", type=_optional_namespace,
                   help="namespace of the Lease (default: env POD_NAMESPACE, else the ServiceAccount's)")
    # At most the Lease's int32 leaseDurationSeconds: a larger one could never be written.
    g.add_argument("--leader-elect-lease-duration", type=int_in(1, 2**31 - 1),
                   default=_ELECTION_FLAGS["leader_elect_lease_duration"], metavar="SECONDS",
                   help="how long a standby waits after the last renewal it saw before taking over (default 15)")
    g.add_argument("--leader-elect-renew-deadline", type=positive_float,
                   default=_ELECTION_FLAGS["leader_elect_renew_deadline"], metavar="SECONDS",
                   help="the leader stops acting this long after its last successful renewal started "
                        "(default 10; must be below the lease duration)")
    g.add_argument("--leader-elect-retry-period", type=positive_float,
                   default=_ELECTION_FLAGS["leader_elect_retry_period"], metavar="SECONDS",
                   help="how often the leader renews and standbys try to acquire (default 2, at least 1)")
    p.set_defaults(func=_run)
    record_given(p)

    p = sub.add_parser("crd", help="print the InferenceService CRD generated from the models")
    p.set_defaults(func=_crd)

    p = sub.add_parser("render", help="print the objects the operator would create for a file")
    p.add_argument("-f", "--file", required=True, action="extend", nargs="+", metavar="FILE", type=name_arg,
                   help="YAML file with InferenceService(s), a directory (its .json, .yaml and .yml files, "
                        "as kubectl apply -f reads one), or - for stdin; several (-f A -f B, or -f A B) are "
                        "rendered in turn")
    p.set_defaults(func=_render)

    _optional_command(sub, "simulate", "tritonscale.simulate.command",
                      "replay a trace against simulated Triton replicas and compare autoscalers")
    _optional_command(sub, "cluster", "tritonscale.cluster.command",
                      "a real Kubernetes control plane on 127.0.0.1 (built once from Kubernetes' Go modules)")
    _optional_command(sub, "sandbox", "tritonscale.sandbox.command",
                      "run the closed loop locally: a real control plane, tritonserver pods, Prometheus, the operator")
    return parser


def _optional_command(sub: Any, name: str, module: str, help_text: str) -> None:
    """Commands whose dependencies (numpy, numba, matplotlib, nvidia-pytriton) live in the
    `sandbox` extra: the operator image does not need them, so a missing one becomes a
    one-line error instead of breaking `tritonscale run`."""
    import importlib

    p = sub.add_parser(name, help=help_text)
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or str(exc)

        def unavailable(_: argparse.Namespace) -> int:
            print(f"tritonscale {name}: missing Python package {missing!r}; install the extra with: "
                  ".venv/bin/pip install -e '.[sandbox]' (or run .ci/setup)", file=sys.stderr)
            return 1

        p.set_defaults(func=unavailable)
        return
    mod.add_arguments(p)
    # simulate has no signal handling of its own (cluster and sandbox stop their processes themselves):
    # SIGTERM ends it as Ctrl-C does, and either says so
    p.set_defaults(func=mod.run, interruptible=name == "simulate")


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` chose: ``tritonscale cluster up``'s for that command."""
    while True:
        chosen = None
        for action in parser._actions:  # noqa: SLF001 -- argparse keeps its subparsers only here
            if isinstance(action, argparse._SubParsersAction) and action.dest in vars(args):  # noqa: SLF001
                chosen = action.choices.get(getattr(args, action.dest))
        if chosen is None:
            return parser
        parser = chosen


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # no command at all: the usage says which there are
        parser.print_usage(sys.stderr)
        parser.exit(2, f"{parser.prog}: error: a command is required (see {parser.prog} --help)\n")
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser: "tritonscale run: ... (see tritonscale run --help)"
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    # argv None: the process's own command line (the `tritonscale` script, `python -m tritonscale`),
    # so the process ends when the command returns; in-process callers pass argv.
    args.process_ends = argv is None
    terminated: list[int] = []
    if getattr(args, "interruptible", False) and threading.current_thread() is threading.main_thread():
        def interrupt(signum: int, _frame: Any) -> None:
            terminated.append(signum)
            raise KeyboardInterrupt
        # SIGTERM's default ended the process at once, and a suite's worker processes ran on, orphaned
        signal.signal(signal.SIGTERM, interrupt)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        if getattr(args, "interruptible", False):
            print(f"{_innermost(parser, args).prog}: interrupted" + (" (SIGTERM)" if terminated else ""),
                  file=sys.stderr)
        return 128 + signal.SIGTERM if terminated else 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # its output could not be written (a full disk): one line, not a traceback
        name = _innermost(parser, args).prog
        out_of_space = exc.filename is None and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
        where = " standard output:" if out_of_space else (f" {exc.filename}:" if exc.filename else "")
        try:
            sys.stdout.flush()
        except OSError:
            where = " standard output:"
            # what is still buffered would fail again in the interpreter's flush at exit, with a message
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"{name}:{where} {exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
