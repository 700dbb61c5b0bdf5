"""Run the real ``tritonserver`` bundled in the ``nvidia-pytriton`` wheel as a subprocess.

Recipe (see /work/shared/TESTING.md):

* binary: ``site-packages/pytriton/tritonserver/bin/tritonserver`` (Triton 2.51, CPU);
* libs: ``site-packages/nvidia_pytriton.libs``;
* a backend directory holding ``python/`` with ``libtriton_python.so``,
  ``triton_python_backend_utils.py`` and the ``triton_python_backend_stub`` built for the
  running interpreter (the wheel ships stubs for 3.8 .. 3.13 separately);
* ``LD_LIBRARY_PATH`` = pytriton libs + ``sysconfig.get_config_var("LIBDIR")`` (libpython);
* the venv's ``bin/`` first on ``PATH`` (the stub's python environment);
* ``--allow-gpu-metrics=false`` on a GPU-less machine.

Every :class:`TritonProcess` runs in its own session/process group, so ``stop()`` also
takes down the python-backend stub children; an ``atexit`` hook stops any process that
is still running when the interpreter exits.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from tritonscale import process_group

__all__ = [
    "TritonInstall",
    "TritonProcess",
    "find_tritonserver",
    "free_port",
    "install_model",
    "cost_model_config",
    "MODEL_SOURCE",
    "read_metrics",
    "parse_metrics_text",
    "metric_value",
]

INSTALL_HINT = "install with: .venv/bin/pip install nvidia-pytriton==0.7.0"

#: The python-backend cost model shipped with this package (copied by :func:`install_model`).
MODEL_SOURCE = Path(__file__).resolve().parent / "model" / "model.py"


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- install


@dataclass(frozen=True)
class TritonInstall:
    """Where the bundled tritonserver lives and how to run it."""

    binary: Path
    libs_dir: Path
    backend_dir: Path  # contains python/{libtriton_python.so,triton_python_backend_utils.py,stub}
    python_libdir: Path  # directory of libpython3.X.so for the running interpreter
    venv_bin: Path  # put first on PATH

    @property
    def ld_library_path(self) -> str:
        return os.pathsep.join([str(self.libs_dir), str(self.python_libdir)])

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for the tritonserver process (LD_LIBRARY_PATH and PATH set)."""
        env = dict(os.environ if base is None else base)
        ld = self.ld_library_path
        if env.get("LD_LIBRARY_PATH"):
            ld = ld + os.pathsep + env["LD_LIBRARY_PATH"]
        env["LD_LIBRARY_PATH"] = ld
        env["PATH"] = str(self.venv_bin) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        return env


_INSTALL_CACHE: dict[str, TritonInstall] = {}


def _site_root_of_pytriton() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"nvidia-pytriton is not installed (tritonserver binary not found); {INSTALL_HINT}")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def find_tritonserver(cache_dir: Path | str | None = None) -> TritonInstall:
    """Locate the bundled tritonserver and build (once) a backend directory for it.

    ``cache_dir``: where to build ``<cache_dir>/backends/python``.  Defaults to a
    directory under the system tempdir keyed by the pytriton location, the Python
    version and the uid, so it is shared by every test and process on this machine.
    The build is atomic (built in a temp dir, then renamed into place).
    """
    key = str(cache_dir) if cache_dir is not None else ""
    if key in _INSTALL_CACHE:
        return _INSTALL_CACHE[key]

    pkg = _site_root_of_pytriton()
    dist = pkg / "tritonserver"
    binary = dist / "bin" / "tritonserver"
    libs_dir = pkg.parent / "nvidia_pytriton.libs"
    if not libs_dir.is_dir():  # editable pytriton installs keep them here
        libs_dir = dist / "external_libs"
    pyver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stub = dist / "python_backend_stubs" / pyver / "triton_python_backend_stub"
    src_backend = dist / "backends" / "python"
    for p, what in (
        (binary, "tritonserver binary"),
        (libs_dir, "nvidia_pytriton.libs"),
        (src_backend / "libtriton_python.so", "python backend"),
        (stub, f"python backend stub for Python {pyver}"),
    ):
        if not p.exists():
            raise RuntimeError(f"{what} not found at {p}; {INSTALL_HINT}")

    if cache_dir is None:
        tag = hashlib.sha1(f"{dist}|{pyver}".encode()).hexdigest()[:10]
        cache_root = Path(tempfile.gettempdir()) / f"tritonscale-triton-{os.getuid()}-{tag}"
    else:
        cache_root = Path(cache_dir)
    backend_dir = cache_root / "backends"
    python_dir = backend_dir / "python"
    wanted = ("libtriton_python.so", "triton_python_backend_utils.py", "triton_python_backend_stub")
    if not all((python_dir / f).exists() for f in wanted):
        backend_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".python-", dir=backend_dir))
        shutil.copy2(src_backend / "libtriton_python.so", tmp / "libtriton_python.so")
        shutil.copy2(src_backend / "triton_python_backend_utils.py", tmp / "triton_python_backend_utils.py")
        shutil.copy2(stub, tmp / "triton_python_backend_stub")
        os.chmod(tmp / "triton_python_backend_stub", 0o755)
        try:
            os.rename(tmp, python_dir)
        except OSError:  # someone else won the race (or a stale partial dir exists)
            if all((python_dir / f).exists() for f in wanted):
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                shutil.rmtree(python_dir, ignore_errors=True)
                os.rename(tmp, python_dir)

    libdir = sysconfig.get_config_var("LIBDIR") or str(Path(sys.base_prefix) / "lib")
    inst = TritonInstall(
        binary=binary,
        libs_dir=libs_dir,
        backend_dir=backend_dir,
        python_libdir=Path(libdir),
        venv_bin=Path(sys.prefix) / "bin",
    )
    _INSTALL_CACHE[key] = inst
    return inst


# --------------------------------------------------------------------------- model repo


def cost_model_config(
    name: str,
    *,
    max_batch_size: int = 16,
    dynamic_batching: bool = True,
    max_queue_delay_us: int = 2000,
    preferred_batch_sizes: Sequence[int] | None = None,
    cost_base_ms: float = 20.0,
    cost_per_item_ms: float = 2.0,
    instance_count: int = 1,
) -> str:
    """config.pbtxt for the cost model (``x``/``y`` FP32 dims [4], python backend, CPU).

    ``dynamic_batching=False`` omits the ``dynamic_batching`` block: Triton then runs
    each request on its own even though ``max_batch_size`` > 0.
    """
    lines = [
        f'name: "{name}"',
        'backend: "python"',
        f"max_batch_size: {int(max_batch_size)}",
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]',
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]',
        f"instance_group [ {{ count: {int(instance_count)} kind: KIND_CPU }} ]",
        f'parameters {{ key: "cost_base_ms" value: {{ string_value: "{cost_base_ms:g}" }} }}',
        f'parameters {{ key: "cost_per_item_ms" value: {{ string_value: "{cost_per_item_ms:g}" }} }}',
    ]
    if dynamic_batching and max_batch_size > 0:
        db = ["dynamic_batching {"]
        if preferred_batch_sizes:
            db.append(f"  preferred_batch_size: [ {', '.join(str(int(s)) for s in preferred_batch_sizes)} ]")
        db.append(f"  max_queue_delay_microseconds: {int(max_queue_delay_us)}")
        db.append("}")
        lines.extend(db)
    return "\n".join(lines) + "\n"


def install_model(repo: Path | str, model_name: str, config_pbtxt: str, version: int = 1) -> Path:
    """Write ``<repo>/<model_name>/config.pbtxt`` and ``<repo>/<model_name>/<version>/model.py``.

    ``model.py`` is the packaged cost model (:data:`MODEL_SOURCE`).  Returns the model dir.
    """
    model_dir = Path(repo) / model_name
    (model_dir / str(version)).mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(config_pbtxt)
    shutil.copyfile(MODEL_SOURCE, model_dir / str(version) / "model.py")
    return model_dir


# --------------------------------------------------------------------------- process

@dataclass(eq=False)
class TritonProcess:
    """One tritonserver process serving ``model_repository`` on 127.0.0.1."""

    model_repository: Path
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path | None = None
    extra_args: Sequence[str] = ()
    install: TritonInstall | None = None
    #: A pod container's args (after the binary), paths and ports already mapped by the
    #: kubelet: they replace the flags below except those only this machine needs.
    container_args: Sequence[str] | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # the container's env, over the runtime's
    _proc: subprocess.Popen | None = field(default=None, init=False, repr=False)
    _log: IO[bytes] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.model_repository = Path(self.model_repository)
        if self.log_path is not None:
            self.log_path = Path(self.log_path)

    # ---- addresses
    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def http_address(self) -> str:
        """``127.0.0.1:PORT`` (what tritonclient wants: no scheme)."""
        return f"127.0.0.1:{self.http_port}"

    @property
    def metrics_address(self) -> str:
        return f"127.0.0.1:{self.metrics_port}"

    @property
    def shm_prefix(self) -> str:
        return f"tritonscale_{os.getpid()}_{self.http_port}_"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def command(self) -> list[str]:
        inst = self.install or find_tritonserver()
        # What this machine needs whatever the pod asked for: bind the loopback interface
        # only (a container would have its own network namespace), the bundled python
        # backend, and a unique shm prefix so stop() can remove the /dev/shm regions a
        # SIGKILL leaves behind.
        runtime = [
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            f"--backend-directory={inst.backend_dir}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
        ]
        if self.container_args is not None:
            return [str(inst.binary), *runtime, *self.container_args]
        return [
            str(inst.binary),
            f"--model-repository={self.model_repository}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--metrics-config=summary_latencies=true",
            "--allow-gpu-metrics=false",
            *runtime,
            *self.extra_args,
        ]

    # ---- lifecycle
    def start(self) -> TritonProcess:
        if self.is_alive():
            raise RuntimeError(f"tritonserver already running (pid {self.pid})")
        inst = self.install = self.install or find_tritonserver()
        env = {**inst.env(), **self.env}
        self._proc, self._log = process_group.spawn(self.command(), log_path=self.log_path, env=env,
                                                    cwd=self.model_repository)
        process_group.register(self)
        return self

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    async def wait_ready(self, model: str | None = None, timeout: float = 30.0) -> bool:
        """Poll ``/v2/models/<model>/ready`` (or ``/v2/health/ready``) until 200.

        Returns False on timeout or if the process exits first.
        """
        path = f"/v2/models/{model}/ready" if model else "/v2/health/ready"
        return await process_group.wait_http_ok(self.http_url, path, timeout, self.is_alive)

    def wait_ready_blocking(self, model: str | None = None, timeout: float = 30.0) -> bool:
        """Synchronous :meth:`wait_ready` (for sync fixtures and scripts)."""
        path = f"/v2/models/{model}/ready" if model else "/v2/health/ready"
        return process_group.wait_http_ok_blocking(self.http_url, path, timeout, self.is_alive)

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM the process group, then SIGKILL after ``timeout``.  Returns the exit code."""
        rc = process_group.stop_group(self._proc, timeout) if self._proc is not None else None
        if self._log is not None:
            self._log.close()
            self._log = None
        self._remove_shm()
        process_group.unregister(self)
        return rc

    def _remove_shm(self) -> None:
        shm = Path("/dev/shm")
        if shm.is_dir():
            for f in shm.glob(self.shm_prefix + "*"):
                try:
                    f.unlink()
                except OSError:
                    pass

    def kill(self) -> None:
        """SIGKILL the whole process group at once (crash simulation)."""
        if self._proc is not None:
            process_group.kill_group(self._proc)
        self.stop(timeout=0)

    def read_log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> TritonProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @classmethod
    def with_free_ports(
        cls,
        model_repository: Path,
        log_path: Path | None = None,
        extra_args: Iterable[str] = (),
    ) -> TritonProcess:
        """Build a process on three freshly picked free ports."""
        ports: list[int] = []
        while len(ports) < 3:
            p = free_port()
            if p not in ports:
                ports.append(p)
        return cls(model_repository, ports[0], ports[1], ports[2], log_path, tuple(extra_args))


# --------------------------------------------------------------------------- metrics


_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


_UNESCAPE_RE = re.compile(r"\\(.)")


def _unescape(m: re.Match[str]) -> str:
    return "\n" if m.group(1) == "n" else m.group(1)


def parse_metrics_text(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Parse Prometheus text exposition into ``[(sample_name, labels, value), ...]``.

    Sample names are kept exactly as exposed (``prometheus_client``'s parser would
    rename Triton's counters to ``*_total``).
    """
    out: list[tuple[str, dict[str, str], float]] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            continue
        name, labels_text, value = m.groups()
        labels = {k: _UNESCAPE_RE.sub(_unescape, v) for k, v in _LABEL_RE.findall(labels_text or "")}
        try:
            out.append((name, labels, float(value)))
        except ValueError:
            continue
    return out


def read_metrics(url_or_port: str | int, timeout: float = 5.0) -> list[tuple[str, dict[str, str], float]]:
    """Scrape a Prometheus text endpoint; return ``[(sample_name, labels, value), ...]``.

    ``url_or_port``: a full URL or tritonserver's metrics port.
    """
    url = f"http://127.0.0.1:{url_or_port}/metrics" if isinstance(url_or_port, int) else url_or_port
    r = httpx.get(url, timeout=timeout, trust_env=False)
    r.raise_for_status()
    return parse_metrics_text(r.text)


def metric_value(
    samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str
) -> float | None:
    """Sum of samples called ``name`` whose labels include ``labels``; None if none match."""
    vals = [v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items())]
    return sum(vals) if vals else None
