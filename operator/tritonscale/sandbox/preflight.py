"""What ``tritonscale sandbox`` needs and this machine lacks, each with the command that fixes it.

Checked before anything starts, so a fresh machine gets one list instead of a
traceback halfway through: the control plane (its binaries cached, or Go to build
them once, and openssl for its certificates), the tritonserver bundled in
nvidia-pytriton, Debian's Prometheus, the Python packages, the trace and the
InferenceService file.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tritonscale.sandbox import prometheus_server as prometheus_runtime
from tritonscale.sandbox import tritonserver as triton_runtime
from tritonscale.sandbox.scenario import DEFAULT_TRACE, REPO, SAMPLE


@dataclass(frozen=True)
class Missing:
    what: str
    fix: str
    installable: bool = True  # False: a path the user gave, which no installer provides


def _pip(requirement: str) -> str:
    return f"{sys.executable} -m pip install '{requirement}'"


def _control_plane() -> list[Missing]:
    from tritonscale.cluster import build

    missing = []
    if shutil.which("openssl") is None:
        missing.append(Missing("openssl (makes the control plane's certificates)", "apt-get install -y openssl"))
    try:
        if build.is_built(build.binaries_dir()):
            return missing
        build.check_go(build.find_go())  # not cached: it is built on the first start
    except build.ClusterError as exc:
        missing.append(Missing(f"the Kubernetes control plane: {exc}",
                               "install Go, or pass --kubeconfig FILE to use a running cluster "
                               "(e.g. one from `tritonscale cluster up --dir DIR`)"))
    return missing


def preflight(load: str = "step", need_plot: bool = False, service_file: Path | None = None,
              external_cluster: bool = False) -> list[Missing]:
    """Everything missing, in the order the sandbox would trip over it."""
    missing: list[Missing] = [] if external_cluster else _control_plane()
    try:
        triton_runtime.find_tritonserver()
    except RuntimeError as exc:
        missing.append(Missing(f"tritonserver binary, bundled in the nvidia-pytriton wheel ({str(exc).split(';')[0]})",
                               _pip("nvidia-pytriton==0.7.0")))
    try:
        prometheus_runtime.find_prometheus()
    except RuntimeError:
        sudo = "" if os.geteuid() == 0 else "sudo "
        missing.append(Missing("prometheus binary (Debian package 'prometheus'), not on PATH nor in /usr/bin",
                               f"{sudo}apt-get install -y prometheus"))
    modules = [("kubernetes", "kubernetes>=29", "kubernetes (the Python client)"),
               ("tritonclient", "tritonclient[http]>=2.40", "tritonclient (the load generator)"),
               ("aiohttp", "tritonclient[http]>=2.40", "aiohttp (tritonclient's asyncio HTTP transport)")]
    if need_plot:
        modules.append(("matplotlib", "matplotlib>=3.8", "matplotlib (for --plot)"))
    for module, requirement, what in modules:
        if importlib.util.find_spec(module) is None:
            missing.append(Missing(f"Python package {what}", _pip(requirement)))
    kind, _, arg = load.partition(":")
    if kind == "trace":
        trace = Path(arg) if arg else DEFAULT_TRACE
        if not trace.is_file():
            missing.append(Missing(f"trace file {trace}",
                                   "pass --load trace:FILE, a CSV with a TIMESTAMP column, one arrival per line "
                                   "or Mooncake JSON Lines "
                                   "(the Azure LLM trace is ../shared/data/azure-llm-conv-2023.csv next to the repo)",
                                   installable=False))
    sf = service_file or SAMPLE
    if not sf.is_file():
        missing.append(Missing(f"InferenceService file {sf}",
                               ("it is a folder: give the YAML file in it" if sf.is_dir() else
                                "check the path given to --service") if service_file else
                               "run from a clone of the repository, or pass --service FILE", installable=False))
    return missing


def format_missing(missing: list[Missing]) -> str:
    lines = ["tritonscale sandbox: cannot start; missing:"]
    for m in missing:
        lines += [f"  - {m.what}", f"      fix: {m.fix}"]
    if any(m.installable for m in missing):  # not for a mistyped --service or trace path
        lines.append(f"Or install everything at once: {REPO / '.ci' / 'setup'} (from a clone of the repository).")
    return "\n".join(lines)
