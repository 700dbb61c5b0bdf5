"""``tritonscale sandbox``: the operator's closed loop on one machine, with real parts.

    tritonscale sandbox [--duration 150] [--load step|burst|trace[:FILE]] [--rate-scale X]
                        [--summary FILE.json] [--plot FILE.png] [--kill-at SECONDS]
                        [--service FILE] [--kubeconfig FILE] [--nodes N] [--gpus N]
                        [--batching-tuner-from DELAY_US]

A real Kubernetes control plane, the operator, kubelets whose pods are real
``tritonserver`` processes, a real Prometheus and an open-loop load (see
:mod:`orchestrator` for the order). At the end (also after Ctrl-C) it writes the
JSON summary and the PNG plot of what ran. ``add_arguments`` + ``run`` plug into
the main CLI.

Exit codes: 0 completed; 1 something is missing or failed to start (one message on
stderr naming it and how to fix it, no traceback), the operator exited during the
load, or a process outlived the teardown; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import signal
import sys
from typing import Any

from tritonscale.cli_numbers import int_in, non_negative_float, positive_float
from tritonscale.kube.client import API_ERRORS, describe_api_error
from tritonscale.output_paths import (
    check_file_name,
    check_image_name,
    ensure_distinct,
    ensure_folder,
    ensure_image,
    ensure_parent,
    input_path_arg,
    path_arg,
    replacing,
)
from tritonscale.sandbox.live_view import LiveView
from tritonscale.sandbox.pod_network import MAX_NODES
from tritonscale.sandbox.preflight import format_missing, preflight
from tritonscale.sandbox.scenario import (
    TRACE_RATE_SCALE,
    SandboxError,
    Scenario,
    build_load,
    describe_config,
    load_service,
    trace_file,
)
from tritonscale.sandbox.summary import write_plot, write_summary


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Run the operator's closed loop locally with real parts: a Kubernetes control plane, "
                     "kubelets whose pods are real tritonserver processes, a real Prometheus, the operator, "
                     "and a load generator routed by the Service's EndpointSlices.")
    p.add_argument("--duration", type=positive_float, default=150.0, metavar="SECONDS",
                   help="seconds of load (default 150); startup adds ~30 s")
    p.add_argument("--load", default="step", metavar="SHAPE",
                   help="step (15 -> 70 -> 10 rps), burst (15 rps with 12 s at 80 rps every 50 s), or "
                        "trace[:FILE] (arrival timestamps; default the Azure LLM trace "
                        "../shared/data/azure-llm-conv-2023.csv) (default step)")
    p.add_argument("--rate-scale", type=positive_float, metavar="X",
                   help=f"multiply the offered rate (default 1; trace: {TRACE_RATE_SCALE:g}, about 50 rps; a trace "
                        "must still last --duration at that rate)")
    p.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0,
                   help="random seed of the Poisson arrivals (default 0)")
    p.add_argument("--summary", metavar="FILE.json",
                   help="write the JSON summary here (not over the --service or trace file the run reads)")
    p.add_argument("--plot", metavar="FILE.png", help="draw offered load, p95 vs target and replicas here")
    p.add_argument("--kill-at", type=non_negative_float, metavar="SECONDS",
                   help="SIGKILL one ready tritonserver this many seconds into the load (its kubelet restarts it)")
    p.add_argument("--service", type=input_path_arg, metavar="FILE",
                   help="InferenceService to run instead of the sized python-cpu sample (python backend, gpus 0, "
                        "storageUri pvc://CLAIM/PATH)")
    p.add_argument("--kubeconfig", type=path_arg, metavar="FILE",
                   help="use this running cluster (e.g. `tritonscale cluster up --dir D`'s D/kubeconfig) "
                        "instead of starting a control plane; what the sandbox makes there goes when it stops")
    p.add_argument("--nodes", type=int, default=1, metavar="N",
                   help="sandbox kubelets (Nodes) sharing this machine's cores and memory (default 1)")
    p.add_argument("--gpus", type=int, metavar="N",
                   help="nvidia.com/gpu each Node advertises, i.e. how many tritonservers it runs "
                        "(default: 2 per core of the Node's share)")
    p.add_argument("--batching-tuner-from", type=int, metavar="DELAY_US",
                   help="turn the batching tuner on (batching.autoTune) and start it from this queue delay "
                        "with no preferred sizes; its changes roll the pods (kubectl get tis -o wide: QUEUEDELAY(US))")
    p.add_argument("--workdir", type=path_arg, metavar="DIR",
                   help="keep logs, the control plane, model repositories and Prometheus data here (default: a "
                        "temporary directory, removed after a clean run); not one that holds a previous run's")
    p.add_argument("--quiet", "-q", action="store_true", help="no live view")


def scenario_from(args: argparse.Namespace) -> Scenario:
    if args.duration <= 0:
        raise ValueError("--duration must be > 0")
    if args.rate_scale is not None and args.rate_scale <= 0:
        raise ValueError("--rate-scale must be > 0")
    shape, colon, _ = args.load.partition(":")
    if shape not in ("step", "burst", "trace") or (colon and shape != "trace"):
        raise ValueError(f"--load must be step, burst or trace[:FILE], not {args.load!r}")
    if not 1 <= args.nodes <= MAX_NODES:
        raise ValueError(f"--nodes must be within 1..{MAX_NODES} (a /24 of the sandbox's pod network each)")
    if args.gpus is not None and args.gpus < 0:
        raise ValueError("--gpus must be >= 0")
    if args.batching_tuner_from is not None and args.batching_tuner_from < 0:
        raise ValueError("--batching-tuner-from must be >= 0")
    if args.kubeconfig is not None and not args.kubeconfig.is_file():
        raise ValueError(f"--kubeconfig {args.kubeconfig}: "
                         + ("a folder, not a file" if args.kubeconfig.is_dir() else "no such file"))
    if args.kubeconfig is not None:
        import kubernetes

        from tritonscale.kube.client import load_kubeconfig

        try:  # read now, not after minutes of start-up (a parse error was a traceback)
            load_kubeconfig(str(args.kubeconfig), kubernetes.client.Configuration())
        except Exception as exc:  # noqa: BLE001 -- ConfigException, and whatever else the client raises: one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"--kubeconfig {args.kubeconfig}: not a usable kubeconfig: {first[:200]}") from None
    if args.kill_at is not None and not 0 <= args.kill_at < args.duration:
        raise ValueError(f"--kill-at must be at least 0 and less than --duration ({args.duration:g} s)")
    return Scenario(duration_s=args.duration, load=args.load, rate_scale=args.rate_scale, seed=args.seed,
                    service_file=args.service, kill_at_s=args.kill_at, workdir=args.workdir,
                    kubeconfig=args.kubeconfig, nodes=args.nodes, gpus_per_node=args.gpus,
                    tuner_from_delay_us=args.batching_tuner_from)


def _or_dash(value: Any) -> str:
    """A figure of the final line; '-' for one an early stop never measured (it printed None)."""
    return "-" if value is None else str(value)


def report(summary: dict[str, Any], out: Any) -> None:
    phases = ", ".join(f"{k} {v:.0f} ms" if v is not None else f"{k} -"
                       for k, v in (summary.get("p95_ms_by_phase") or {}).items())
    print(f"sandbox: {summary['outcome']}: {summary['requests']} requests, {summary['errors']} errors; "
          f"replicas peak {_or_dash(summary['peak_replicas'])}, final {_or_dash(summary['final_replicas'])}; "
          f"{len(summary['scale_events'])} scale events; {summary['restarts']} restarts; p95 by phase: {phases}; "
          f"wall {summary['wall_s']:.0f} s", file=out, flush=True)
    if summary.get("operator_exited_at_s") is not None:
        print(f"sandbox: the operator exited at t={summary['operator_exited_at_s']:.0f} s of the load: what "
              f"followed was not autoscaled", file=out, flush=True)


def run(args: argparse.Namespace) -> int:
    try:
        scenario = scenario_from(args)
        _check_outputs(args, scenario)
    except ValueError as exc:
        print(f"tritonscale sandbox: {exc}", file=sys.stderr)
        return 1
    missing = preflight(scenario.load, need_plot=bool(args.plot), service_file=scenario.service_file,
                        external_cluster=scenario.kubeconfig is not None)
    if missing:
        print(format_missing(missing), file=sys.stderr)
        return 1
    try:
        service = load_service(scenario)
        build_load(scenario)
        _check_gpus(scenario, service)
        _make_folders(args)  # last: a refusal above leaves no empty folder behind
    except (SandboxError, ValueError, OSError) as exc:
        print(f"tritonscale sandbox: {exc}", file=sys.stderr)
        return 1
    except MemoryError:
        print("tritonscale sandbox: out of memory drawing the load: lower --rate-scale or --duration", file=sys.stderr)
        return 1
    return asyncio.run(_main(scenario, args))


def _check_gpus(scenario: Scenario, service: dict[str, Any]) -> None:
    """Room for the warm floor on the sandbox's own Nodes: a replica asks for the nvidia.com/gpu of its
    resources (the sized sample: one), and with too few the first pods stay Pending until the sandbox
    gives up, two minutes later, without saying why. Not for a --kubeconfig cluster: its Nodes are its own."""
    from tritonscale.api.spec import GPU_RESOURCE
    from tritonscale.api.validation import validate_body
    from tritonscale.sandbox.node_registration import machine_resources

    spec, _ = validate_body(service)
    if spec is None or scenario.kubeconfig is not None:
        return
    resources = spec.runtime.resources
    asked = (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(GPU_RESOURCE)
    try:
        per_replica = int(str(asked)) if asked is not None else 0
    except ValueError:
        return  # not a whole count: the API server says so
    per_node = machine_resources(nodes=scenario.nodes, gpus=scenario.gpus_per_node).gpus
    fits = scenario.nodes * (per_node // per_replica) if per_replica else spec.scaling.floor
    if fits < spec.scaling.floor:
        raise ValueError(f"--gpus: {scenario.nodes} Node(s) with {per_node} GPU(s) each hold {fits} replica(s) "
                         f"of {per_replica} GPU(s), below the service's warm floor of {spec.scaling.floor}")


def _check_outputs(args: argparse.Namespace, scenario: Scenario) -> None:
    """Before anything starts, and before any folder is made: --summary and --plot name neither each
    other nor a file this run reads (the --service manifest, the --load trace), and none is a folder."""
    check_file_name("--summary", args.summary)
    check_image_name("--plot", args.plot)  # a folder given is refused there
    ensure_distinct({"--summary": args.summary, "--plot": args.plot},
                    {"--service": scenario.service_file, "--load trace": trace_file(scenario)})


def _make_folders(args: argparse.Namespace) -> None:
    """Once every other check has passed: the work directory and the folders of --summary and --plot
    (made if missing, and writable)."""
    if args.workdir is not None:
        ensure_folder("--workdir", args.workdir)
        # a previous run's cluster there: its objects would clash with the new run's (409)
        if args.kubeconfig is None and (args.workdir / "control-plane" / "etcd").exists():
            raise ValueError(f"--workdir {args.workdir} holds a previous sandbox's cluster ({args.workdir}/"
                             "control-plane): give a new or empty folder, or remove that one")
    ensure_parent("--summary", args.summary)
    ensure_image("--plot", args.plot)


async def _main(scenario: Scenario, args: argparse.Namespace) -> int:
    from tritonscale.sandbox.orchestrator import run_sandbox

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)

    def on_signal(signame: str) -> None:
        if stop.is_set():
            print(f"sandbox: {signame} again; still stopping (bounded: at most ~30 s a part)", file=sys.stderr,
                  flush=True)
        else:
            print(f"sandbox: {signame}: stopping everything and writing what ran", file=sys.stderr, flush=True)
        stop.set()

    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig.name)
    try:
        target = describe_config(load_service(scenario))["target_p95_ms"]
        result = await run_sandbox(scenario, stop=stop, view=LiveView(target, quiet=args.quiet))
    except SandboxError as exc:
        print(f"tritonscale sandbox: {exc}", file=sys.stderr)
        return 1
    except API_ERRORS as exc:  # the cluster refused or went away
        print(f"tritonscale sandbox: the Kubernetes API failed: {describe_api_error(exc)}", file=sys.stderr)
        return 1
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    summary = result.summary
    report(summary, sys.stdout)
    failed = False
    for flag, path, write in (("--summary", args.summary, write_summary), ("--plot", args.plot, write_plot)):
        if not path:
            continue
        try:  # the report above is out whatever happens here
            written = replacing(path, functools.partial(write, summary))
        except OSError as exc:
            print(f"tritonscale sandbox: {flag}: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
            failed = True
        else:
            print(f"sandbox: {flag[2:]} written to {written}", flush=True)
    if result.leftover_pids or failed or summary.get("operator_exited_at_s") is not None:
        return 1
    return 130 if result.interrupted else 0


def main_sandbox(argv: list[str] | None = None) -> int:
    """Standalone entry point: ``python -m tritonscale.sandbox.command ...``."""
    parser = argparse.ArgumentParser(prog="tritonscale sandbox")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main_sandbox())
