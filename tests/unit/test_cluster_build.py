"""tritonscale.cluster.build: where the Go module is, the Go version check, the cache key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tritonscale.cluster import build


def _fake_go(tmp_path: Path, version: str) -> str:
    go = tmp_path / "go"
    go.write_text(f"#!/bin/sh\necho {version}\n")
    go.chmod(0o755)
    return str(go)


def test_old_go_is_a_one_line_error_naming_what_to_install(tmp_path):
    with pytest.raises(build.ClusterError) as err:
        build.check_go(_fake_go(tmp_path, "go1.19.8"))
    message = str(err.value)
    assert "\n" not in message and "Go >= 1.25" in message and "go1.19.8" in message


def test_go_minimum_is_the_go_line_of_the_module(tmp_path):
    go_line = next(line for line in (build.module_dir() / "go.mod").read_text().splitlines()
                   if line.startswith("go "))
    assert tuple(int(x) for x in go_line.split()[1].split(".")[:2]) == build.GO_MINIMUM
    with pytest.raises(build.ClusterError):
        build.check_go(_fake_go(tmp_path, "go1.24.9"))


def test_new_enough_go_passes(tmp_path):
    assert build.check_go(_fake_go(tmp_path, "go1.25.0")) == "go1.25.0"
    assert build.check_go(_fake_go(tmp_path, "go1.26.8")) == "go1.26.8"


def test_missing_go_names_what_to_install(monkeypatch):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    monkeypatch.setattr(build.os, "access", lambda path, mode: False)
    with pytest.raises(build.ClusterError, match=r"Go >= 1\.25 is needed .*found: none"):
        build.find_go()


def test_module_without_the_repository_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "__file__", str(tmp_path / "site-packages" / "tritonscale" / "cluster" / "build.py"))
    with pytest.raises(build.ClusterError, match="installed without its repository"):
        build.module_dir()


def test_cache_key_is_version_and_a_hash_of_the_sources(tmp_path):
    module = tmp_path / "cluster"
    shutil.copytree(build.module_dir(), module, ignore=shutil.ignore_patterns("README.md"))
    assert build.kubernetes_version(module) == "v1.35.8"
    before = build.source_hash(module)
    assert len(before) == 12 and before == build.source_hash(module)
    (module / "cmd" / "etcd" / "main.go").write_text((module / "cmd" / "etcd" / "main.go").read_text() + "\n// x\n")
    assert build.source_hash(module) != before


def test_version_is_stamped_into_the_binaries():
    flags = build.build_flags("v1.35.8")
    assert "-X k8s.io/component-base/version.gitVersion=v1.35.8" in flags[-1]
    assert "-X k8s.io/component-base/version.gitMinor=35" in flags[-1]


def test_cached_binaries_are_used_without_go(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target = build.binaries_dir()
    assert str(target).startswith(str(tmp_path / "tritonscale" / "control-plane" / "v1.35.8-"))
    target.mkdir(parents=True)
    for name in build.BINARIES:
        (target / name).write_text("#!/bin/sh\n")
        (target / name).chmod(0o755)
    monkeypatch.setattr(build, "find_go", lambda: pytest.fail("go must not be needed when cached"))
    lines: list[str] = []
    assert build.ensure_binaries(lines.append) == target
    assert len(lines) == 1 and "cached" in lines[0]


def test_cluster_up_refuses_a_dir_it_cannot_use_before_starting_anything(tmp_path, capsys):
    import argparse

    from tritonscale.cluster import command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    a_file = tmp_path / "state"
    a_file.write_text("not a folder")
    for path, message in [(a_file, f"--dir: {a_file} is a file, not a folder"),
                          (a_file / "sub", f"--dir: cannot create {a_file / 'sub'}: Not a directory")]:
        assert command.run(parser.parse_args(["up", "--dir", str(path)])) == 1
        assert capsys.readouterr().err.strip() == f"tritonscale cluster: {message}"


@pytest.mark.parametrize("process_ends", [True, False])
def test_cluster_up_keeps_stop_signals_ignored_only_when_the_process_ends(monkeypatch, tmp_path, process_ends):
    """Stopped by Ctrl-C: the stop runs with SIGTERM/SIGINT ignored (a second signal must not cut it
    short). Afterwards an in-process caller gets its handlers back; the `tritonscale` process keeps them
    ignored until it exits, since SIG_DFL back let a late second SIGTERM kill it after a clean stop."""
    import signal

    from tritonscale.cluster import command

    seen: dict[str, object] = {}

    class Plane:
        def __init__(self, directory, progress):
            pass

        def start(self):
            return tmp_path / "kubeconfig"

        def failed(self):
            raise KeyboardInterrupt

        def stop(self):
            seen["during stop"] = signal.getsignal(signal.SIGTERM)

    monkeypatch.setattr(command, "ControlPlane", Plane)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        assert command._up(tmp_path, process_ends=process_ends) == 0  # noqa: SLF001
        after = {sig: signal.getsignal(sig) for sig in before}
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert seen["during stop"] == signal.SIG_IGN
    assert after == ({sig: signal.SIG_IGN for sig in before} if process_ends else before)


def _recording_go(tmp_path: Path, build_step: str = "") -> tuple[str, Path]:
    """A `go` that answers `env`, and for `build` records GOOS/GOARCH/GOFLAGS and writes an executable -o."""
    log = tmp_path / "go.log"
    go = tmp_path / "bin" / "go"
    go.parent.mkdir()
    go.write_text(f"""#!/bin/sh
if [ "$1" = env ]; then
  if [ "$2" = GOVERSION ]; then echo go1.26.8; else echo linux; echo amd64; fi
  exit 0
fi
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
echo "GOOS=$GOOS GOARCH=$GOARCH GOFLAGS=$GOFLAGS" >> {log}
{build_step}
printf '#!/bin/sh\\n' > "$out"; chmod +x "$out"
""")
    go.chmod(0o755)
    return str(go), log


def test_the_build_targets_this_machine_whatever_the_callers_shell_exports(monkeypatch, tmp_path):
    """Session 86's audit: GOARCH=arm64 (or GOFLAGS=-race) in the caller's shell reached `go build` but not the
    cache's key, and every later `up` was served the foreign binaries."""
    go, log = _recording_go(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("GOARCH", "arm64")
    monkeypatch.setenv("GOOS", "darwin")
    monkeypatch.setenv("GOFLAGS", "-race")
    monkeypatch.setattr(build, "find_go", lambda: go)
    target = build.ensure_binaries()
    assert build.is_built(target)
    assert log.read_text().splitlines() == ["GOOS=linux GOARCH=amd64 GOFLAGS="] * len(build.BINARIES)


def test_a_killed_builders_staging_directory_goes_at_the_next_build(monkeypatch, tmp_path):
    go, _ = _recording_go(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "find_go", lambda: go)
    target = build.binaries_dir()
    leftover = target.with_name(target.name + ".partial-99999")
    leftover.mkdir(parents=True)
    (leftover / "etcd").write_bytes(b"x" * 1000)
    build.ensure_binaries()
    assert not leftover.exists() and build.is_built(target)
    assert [p.name for p in target.parent.iterdir() if ".partial-" in p.name] == []


def test_an_interrupted_build_stops_gos_processes_too(monkeypatch, tmp_path):
    """subprocess.run killed only `go`: its compile and link processes ran on (SIGTERM, Ctrl-C)."""
    import os
    import signal
    import threading
    import time

    pidfile = tmp_path / "child.pid"
    go, _ = _recording_go(tmp_path, build_step=f"sleep 60 & echo $! > {pidfile}; wait")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "find_go", lambda: go)

    def interrupt_once_go_runs() -> None:
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            time.sleep(0.05)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    # Python turns SIGINT into KeyboardInterrupt only if it was not ignored when the interpreter started, and
    # a shell without job control starts its background jobs with SIGINT ignored: a CI run started as
    # `.ci/run &` from a script lost the signal, and the four fake builds ran their 60 s each (session 89).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_once_go_runs, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            build.ensure_binaries()
    finally:
        signal.signal(signal.SIGINT, previous)
    child = int(pidfile.read_text())
    for _ in range(100):  # reaped by init once killed
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("go's child process outlived the interrupted build")
    assert not build.is_built(build.binaries_dir())


def test_a_long_build_says_it_is_still_going(monkeypatch, tmp_path):
    """kube-apiserver builds for minutes on 2 cores, and a module proxy that never answers was as silent."""
    go, _ = _recording_go(tmp_path, build_step='case "$out" in */etcd) sleep 0.5;; esac')
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "find_go", lambda: go)
    monkeypatch.setattr(build, "HEARTBEAT_S", 0.2)
    lines: list[str] = []
    build.ensure_binaries(lines.append)
    still = [line for line in lines if line.startswith("still building")]
    assert still and all(line.startswith("still building etcd (") for line in still), lines
