"""Build the control-plane binaries once, from the Go module in the repository
(``e2e/cluster``), and cache them by version under the user's cache directory.

The cache key is Kubernetes' version plus a hash of everything that decides the
binaries: go.mod, go.sum, the sources under cmd/, and the build flags. A changed
pin builds into a new directory; an unchanged one is reused across runs and clones.
A cold build takes 5-8 minutes on 2 cores, most of it kube-apiserver (see the README's measurements).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tritonscale import process_group

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# e2e/cluster/go.mod's `go` line, which k8s.io/kubernetes v1.35.8's own go.mod sets (go 1.25.0):
# an older go would fetch a newer toolchain through the proxy, or fail with GOTOOLCHAIN=local.
GO_MINIMUM = (1, 25)
# CGO off: the binaries are static and the build needs no C compiler (Kubernetes'
# own release builds of the server binaries are CGO-free too).
BUILD_ENV = {"CGO_ENABLED": "0"}


def build_flags(version: str) -> tuple[str, ...]:
    """``go build`` flags: stripped, reproducible paths, and the version stamped where
    Kubernetes' own build (hack/lib/version.sh) stamps it, so /version and
    `kubectl version` report e.g. v1.35.8 instead of v0.0.0-master."""
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = [f"-X {pkg}.{var}={value}"
              for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
              for var, value in (("gitVersion", version), ("gitMajor", major), ("gitMinor", minor),
                                 ("gitTreeState", "clean"))]
    return ("-trimpath", "-ldflags=-s -w " + " ".join(stamps))

Progress = Callable[[str], None]


class ClusterError(RuntimeError):
    """A problem the user can fix, described in one line."""


def module_dir() -> Path:
    """``e2e/cluster`` of the repository this package was installed from (editable installs)."""
    repo = Path(__file__).resolve().parents[3]
    module = repo / "e2e" / "cluster"
    if not (module / "go.mod").is_file():
        raise ClusterError(
            f"the Go module that builds the control plane is not at {module}: tritonscale was installed "
            "without its repository; install it from a clone with `pip install -e .` (or run .ci/setup)")
    return module


def kubernetes_version(module: Path) -> str:
    """The ``k8s.io/kubernetes`` version go.mod requires, e.g. ``v1.35.8``."""
    found = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", (module / "go.mod").read_text(), re.MULTILINE)
    if not found:
        raise ClusterError(f"{module / 'go.mod'} does not require k8s.io/kubernetes")
    return found.group(1)


def source_hash(module: Path) -> str:
    """sha256 over go.mod, go.sum, every file under cmd/ and the build settings (12 hex digits)."""
    digest = hashlib.sha256()
    files = [module / "go.mod", module / "go.sum", *sorted(p for p in (module / "cmd").rglob("*") if p.is_file())]
    for path in files:
        digest.update(str(path.relative_to(module)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(repr((sorted(BUILD_ENV.items()), build_flags(kubernetes_version(module)))).encode())
    return digest.hexdigest()[:12]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tritonscale" / "control-plane"


def find_go() -> str:
    """The ``go`` command: on PATH, else the usual /usr/local/go install."""
    for candidate in (shutil.which("go"), "/usr/local/go/bin/go"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ClusterError(_go_needed("none on PATH or in /usr/local/go/bin"))


def _go_needed(found: str) -> str:
    want = ".".join(map(str, GO_MINIMUM))
    return (f"Go >= {want} is needed to build the control plane once (found: {found}); install Go {want} "
            "or newer from https://go.dev/dl/ and put its bin/ on PATH")


def check_go(go: str) -> str:
    """Fail unless ``go`` is at least GO_MINIMUM; return its version, e.g. ``go1.26.8``."""
    try:
        version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60,
                                 check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(_go_needed(f"{go}, which does not run: {exc}")) from exc
    parsed = re.match(r"go(\d+)\.(\d+)", version)
    if not parsed or (int(parsed.group(1)), int(parsed.group(2))) < GO_MINIMUM:
        raise ClusterError(_go_needed(f"{version or 'unknown version'} at {go}"))
    return version


# What the caller's environment may say that changes the binaries go builds, but not the cache's key: a
# shell with GOARCH=arm64 exported cached arm64 binaries under this machine's key (session 86's audit).
# The build targets this machine, with Go's defaults for the rest (GOFLAGS -race or -tags, an experiment).
_TARGET_FREE = ("GOFLAGS", "GOEXPERIMENT", "GOAMD64", "GOARM", "GOARM64", "GO386", "GORISCV64", "GOPPC64")


def _build_env(go: str) -> dict[str, str]:
    try:
        host = subprocess.run([go, "env", "GOHOSTOS", "GOHOSTARCH"], capture_output=True, text=True, timeout=60,
                              check=True).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(_go_needed(f"{go}, which does not run: {exc}")) from exc
    return {**os.environ, **BUILD_ENV, **{k: "" for k in _TARGET_FREE}, "GOOS": host[0], "GOARCH": host[1]}


def binaries_dir(module: Path | None = None) -> Path:
    """Where the binaries for this checkout live (built or not)."""
    module = module or module_dir()
    return cache_root() / f"{kubernetes_version(module)}-{source_hash(module)}"


def is_built(target: Path) -> bool:
    return all(os.access(target / name, os.X_OK) for name in BINARIES)


# A line while one binary builds: kube-apiserver takes minutes on 2 cores, and a module proxy that
# accepts connections and never answers was silent for as long (session 86's audit).
HEARTBEAT_S = 60.0


def _go_build(cmd: list[str], module: Path, env: dict[str, str], name: str = "",
              progress: Progress = lambda line: None) -> subprocess.CompletedProcess[str]:
    """Run one ``go build`` in its own process group, stopped whole if this process is interrupted (Ctrl-C,
    or SIGTERM turned into an exception by the caller): subprocess.run killed only ``go``, and its compile
    and link processes ran on for minutes, into a staging directory nothing would read."""
    started = time.monotonic()
    with subprocess.Popen(cmd, cwd=module, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            while True:
                try:
                    out, err = proc.communicate(timeout=HEARTBEAT_S)
                    break
                except subprocess.TimeoutExpired:
                    progress(f"still building {name or cmd[-1]} ({time.monotonic() - started:.0f} s)")
        except BaseException:
            process_group.kill_group(proc)
            proc.wait()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def ensure_binaries(progress: Progress = lambda line: None) -> Path:
    """The directory holding the four binaries, building them first if this version is not cached.

    Builds go to a temporary sibling directory that is renamed into place when all
    four are done, so an interrupted build never looks cached. A lock file serialises
    concurrent builders (two test sessions): the second one finds the first's result.
    """
    module = module_dir()
    target = binaries_dir(module)
    if is_built(target):
        progress(f"control plane binaries (k8s.io/kubernetes {kubernetes_version(module)}) cached in {target}")
        return target
    go = find_go()
    go_version = check_go(go)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built(target):  # another process built it while we waited
            progress(f"control plane binaries built by another process in {target}")
            return target
        # Under the lock no builder runs: a staging directory here is a killed one's (up to 280 MB each)
        for leftover in target.parent.glob("*.partial-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        staging = target.with_name(target.name + f".partial-{os.getpid()}")
        staging.mkdir()
        env = _build_env(go)
        progress(f"building the control plane once with {go_version} from {module} "
                 f"(k8s.io/kubernetes {kubernetes_version(module)}) into {target}")
        started = time.monotonic()
        try:
            for i, name in enumerate(BINARIES, 1):
                t0 = time.monotonic()
                cmd = [go, "build", *build_flags(kubernetes_version(module)), "-o", str(staging / name),
                       f"./cmd/{name}"]
                proc = _go_build(cmd, module, env, name, progress)
                if proc.returncode != 0:
                    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
                    raise ClusterError(f"`{' '.join(cmd)}` in {module} failed ({proc.returncode}):\n{tail}")
                progress(f"built {name} ({i}/{len(BINARIES)}) in {time.monotonic() - t0:.0f} s")
            shutil.rmtree(target, ignore_errors=True)  # an incomplete leftover (a binary deleted by hand)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        progress(f"control plane built in {time.monotonic() - started:.0f} s, cached in {target}")
    return target
