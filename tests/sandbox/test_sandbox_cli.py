"""``tritonscale sandbox`` before it starts anything: the preflight names what is
missing with the command that fixes it, bad options are one-line errors, the load
shapes and the InferenceService are what the run will use. No processes start."""

from __future__ import annotations

import argparse
import sys

import pytest
import yaml

from tritonscale.cluster import build as cluster_build
from tritonscale.render import yaml_text  # as kubectl reads it back: a tensor named y stays a string
from tritonscale.sandbox import command
from tritonscale.sandbox import prometheus_server as prometheus_runtime
from tritonscale.sandbox import tritonserver as triton_runtime
from tritonscale.sandbox.scenario import (
    SAMPLE,
    SandboxError,
    Scenario,
    build_load,
    describe_config,
    load_service,
    model_store,
    scrape_interval_s,
)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_preflight_names_a_missing_tritonserver_and_the_command_that_installs_it(monkeypatch, capsys):
    def absent(*_a, **_k):
        raise RuntimeError("nvidia-pytriton is not installed (tritonserver binary not found); install with: ...")

    monkeypatch.setattr(triton_runtime, "find_tritonserver", absent)
    assert command.run(_args("--duration", "5")) == 1
    err = capsys.readouterr().err
    assert "tritonserver binary" in err and "nvidia-pytriton" in err
    assert f"{sys.executable} -m pip install 'nvidia-pytriton==0.7.0'" in err
    assert "Traceback" not in err


def test_preflight_names_a_missing_prometheus_and_a_missing_trace(monkeypatch, capsys, tmp_path):
    def absent():
        raise RuntimeError("prometheus binary not found on PATH or in /usr/bin")

    monkeypatch.setattr(prometheus_runtime, "find_prometheus", absent)
    assert command.run(_args("--load", f"trace:{tmp_path / 'nope.csv'}")) == 1
    err = capsys.readouterr().err
    assert "prometheus binary" in err and "apt-get install -y prometheus" in err
    assert f"trace file {tmp_path / 'nope.csv'}" in err
    assert "tritonserver" not in err  # only what is really missing
    assert ".ci/setup" in err


def test_a_mistyped_path_gets_no_install_advice(capsys, tmp_path):
    """.ci/setup installs programs, not a --service or trace file the user mistyped."""
    assert command.run(_args("--service", str(tmp_path / "nope.yaml"))) == 1
    err = capsys.readouterr().err
    assert f"InferenceService file {tmp_path / 'nope.yaml'}" in err and "check the path given to --service" in err
    assert ".ci/setup" not in err
    assert command.run(_args("--service", str(tmp_path))) == 1
    assert "it is a folder: give the YAML file in it" in capsys.readouterr().err


def test_preflight_names_a_control_plane_it_cannot_build_unless_a_cluster_is_given(monkeypatch, capsys):
    def no_go():
        raise cluster_build.ClusterError("Go >= 1.24 is needed to build the control plane once (found: none)")

    monkeypatch.setattr(cluster_build, "is_built", lambda _target: False)
    monkeypatch.setattr(cluster_build, "find_go", no_go)
    assert command.run(_args()) == 1
    err = capsys.readouterr().err
    assert "the Kubernetes control plane: Go >= 1.24 is needed" in err and "--kubeconfig FILE" in err
    # With a running cluster (--kubeconfig) the binaries are not needed.
    missing = command.preflight("step", external_cluster=True)
    assert not [m for m in missing if "control plane" in m.what]


def test_bad_options_are_one_line_errors(capsys, tmp_path):
    under_file = tmp_path / "file"
    under_file.write_text("a file where a folder is asked for")
    bad_config = tmp_path / "kubeconfig"
    bad_config.write_text("hello: [")
    used = tmp_path / "used"
    (used / "control-plane" / "etcd").mkdir(parents=True)  # a previous run's cluster state
    for argv, message in [
        (("--load", "sine"), "--load must be step, burst or trace[:FILE], not 'sine'"),
        (("--nodes", "0"), "--nodes must be within 1..256"),
        (("--nodes", "1000"), "--nodes must be within 1..256 (a /24 of the sandbox's pod network each)"),
        (("--kubeconfig", str(bad_config)),
         f"--kubeconfig {bad_config}: not a usable kubeconfig: line 1: invalid YAML: expected the node content"),
        (("--workdir", str(used)), f"--workdir {used} holds a previous sandbox's cluster"),
        (("--kubeconfig", str(tmp_path / "nope")), f"--kubeconfig {tmp_path / 'nope'}: no such file"),
        (("--kubeconfig", str(tmp_path)), f"--kubeconfig {tmp_path}: a folder, not a file"),
        (("--kill-at", "150"), "--kill-at must be at least 0 and less than --duration (150 s)"),
        (("--workdir", str(under_file / "w")), f"--workdir: cannot create {under_file / 'w'}: Not a directory"),
        (("--summary", str(under_file / "s.json")), f"--summary: {under_file} is a file, not a folder"),
        (("--summary", str(tmp_path)), f"--summary: {tmp_path} is a folder, not a file"),
        (("--summary", ""), "--summary: an empty path"),
        (("--plot", ""), "--plot: an empty path"),
        (("--plot", str(tmp_path / "p.json")), f"--plot: {tmp_path / 'p.json'}: name the image .png"),
        (("--load", "step:foo"), "--load must be step, burst or trace[:FILE], not 'step:foo'"),
    ]:
        assert command.run(_args(*argv)) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"tritonscale sandbox: {message}") and "\n" not in err, err


@pytest.mark.parametrize(("argv", "message"), [
    (("--duration", "nan"), "argument --duration: 'nan' is not a finite number"),
    (("--rate-scale", "inf"), "argument --rate-scale: 'inf' is not a finite number"),
    (("--kill-at", "-1"), "argument --kill-at: '-1': must be >= 0"),
    (("--workdir", ""), "argument --workdir: an empty path"),
    # it looked for a file named - ("missing: InferenceService file -")
    (("--service", "-"), "argument --service: - (standard input) is not read here: give a file name"),
    (("--seed", "-1"), "argument --seed: '-1': must be within 0..4294967295"),
])
def test_numbers_and_paths_argparse_refuses(capsys, argv, message):
    with pytest.raises(SystemExit):
        _args(*argv)
    assert message in capsys.readouterr().err


def test_a_service_file_that_is_no_manifest_names_the_flag(tmp_path):
    path = tmp_path / "two.yaml"
    doc = yaml.safe_load(SAMPLE.read_text())
    path.write_text(yaml_text.dump_all([doc, doc]))
    with pytest.raises(SandboxError, match=r"2 InferenceService documents; the sandbox serves one"):
        load_service(Scenario(service_file=path))
    with pytest.raises(SandboxError, match=r"^--service: .*none.yaml: cannot read: No such file or directory$"):
        load_service(Scenario(service_file=tmp_path / "none.yaml"))


def test_load_shapes_name_their_phases():
    step = build_load(Scenario(duration_s=100))
    assert [p.name for p in step.phases] == ["base", "high", "low"]
    assert step.phases[-1].end_s == pytest.approx(100)
    burst = build_load(Scenario(duration_s=100, load="burst"))
    assert {p.name for p in burst.phases} == {"base", "burst"}
    assert burst.arrivals.size and burst.arrivals.max() < 100


@pytest.mark.parametrize(("interval", "window", "scrape"), [
    (2, 10, 2.0),  # the sized sample: a scrape per tick
    (15, 60, 15.0),  # the CRD defaults
    (15, 20, 5.0),  # a short window: four scrapes in it, more often than the ticks
])
def test_prometheus_scrapes_as_often_as_the_autoscaler_ticks(interval, window, scrape):
    body = load_service(Scenario())
    body["spec"]["scaling"].update(intervalSeconds=interval, windowSeconds=window)
    assert scrape_interval_s(describe_config(body)) == scrape


def test_the_sized_sample_asks_one_gpu_per_replica_and_serves_from_its_claim():
    body = load_service(Scenario())
    resources = body["spec"]["runtime"]["resources"]
    assert resources["limits"] == {"nvidia.com/gpu": "1"} and resources["requests"]["cpu"] == "500m"
    assert body["spec"]["runtime"]["gpus"] == 0  # KIND_CPU: this tritonserver has no GPU
    assert model_store(body) == ("models", "linear")


def test_batching_tuner_from_turns_auto_tune_on_from_a_poor_start(capsys):
    scenario = command.scenario_from(_args("--batching-tuner-from", "150000"))
    batching = load_service(scenario)["spec"]["batching"]
    assert batching["autoTune"] == {"enabled": True}
    assert (batching["maxQueueDelayMicroseconds"], batching["preferredBatchSizes"]) == (150000, [])
    assert "autoTune" not in load_service(Scenario())["spec"]["batching"]
    assert command.run(_args("--batching-tuner-from", "-1")) == 1
    assert capsys.readouterr().err.strip() == "tritonscale sandbox: --batching-tuner-from must be >= 0"
    # past the spec's bound: the flag is named, not the sample file it was put into
    assert command.run(_args("--batching-tuner-from", "20000000")) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tritonscale sandbox: --batching-tuner-from 20000000: invalid InferenceService: "
                          "spec.batching.maxQueueDelayMicroseconds"), err


def test_a_service_the_sandbox_cannot_serve_is_refused_with_the_reason(tmp_path):
    body = yaml.safe_load(SAMPLE.read_text())
    body["spec"]["model"]["storageUri"] = "s3://bucket/linear"
    path = tmp_path / "s3.yaml"
    path.write_text(yaml_text.dump(body))
    with pytest.raises(SandboxError, match=r"storageUri is 's3://bucket/linear'.*pvc://CLAIM/PATH"):
        load_service(Scenario(service_file=path))


@pytest.mark.parametrize(("change", "message"), [
    ({"inputs": [{"name": "x", "dataType": "FP32", "dims": [8]}]},
     r"spec.model.inputs: the cost model takes one FP32 input 'x' with dims \[4\]; got x FP32 \[8\]"),
    ({"outputs": [{"name": "y", "dataType": "INT32", "dims": [4]}]}, r"spec.model.outputs: .* got y INT32 \[4\]"),
    ({"parameters": {"cost_base_ms": "abc"}}, r"spec.model.parameters.cost_base_ms: 'abc' is not a number of ms"),
    ({"parameters": {"cost_per_item_ms": "-1"}}, r"spec.model.parameters.cost_per_item_ms: '-1' is not a number"),
])
def test_a_model_the_cost_model_cannot_be_is_refused_before_the_run(tmp_path, change, message):
    """A shape the load does not send ran the whole run with every request failing, and a cost that is no
    number failed with a traceback after start-up."""
    body = yaml.safe_load(SAMPLE.read_text())
    body["spec"]["model"].update(change)
    path = tmp_path / "svc.yaml"
    path.write_text(yaml_text.dump(body))
    with pytest.raises(SandboxError, match=message):
        load_service(Scenario(service_file=path))


def test_fewer_gpus_than_the_warm_floor_is_refused(tmp_path):
    """The sized sample asks one GPU per replica: --gpus 0 holds none (two minutes of Pending before);
    a service that asks for none needs none; one asking 2 per replica fits half as many."""
    sample = Scenario(gpus_per_node=0)
    with pytest.raises(ValueError, match=r"^--gpus: 1 Node\(s\) with 0 GPU\(s\) each hold 0 replica\(s\) of 1 "
                                         r"GPU\(s\), below the service's warm floor of 1$"):
        command._check_gpus(sample, load_service(sample))
    body = yaml.safe_load(SAMPLE.read_text())  # as it is: no GPU asked for
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml_text.dump(body))
    command._check_gpus(Scenario(service_file=path, gpus_per_node=0), load_service(Scenario(service_file=path)))
    body["spec"]["runtime"]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    body["spec"]["scaling"].update(minReplicas=2, warmBuffer=0)
    path.write_text(yaml_text.dump(body))
    with pytest.raises(ValueError, match=r"hold 1 replica\(s\) of 2 GPU\(s\), below the service's warm floor of 2"):
        command._check_gpus(Scenario(service_file=path, gpus_per_node=3), load_service(Scenario(service_file=path)))


def test_the_final_line_of_a_run_stopped_before_any_sample_says_dash_not_none():
    import io

    summary = {"outcome": "interrupted", "requests": 0, "errors": 0, "peak_replicas": None, "final_replicas": None,
               "scale_events": [], "restarts": 0, "p95_ms_by_phase": {"base": None}, "wall_s": 7.0}
    out = io.StringIO()
    command.report(summary, out)
    assert "replicas peak -, final -;" in out.getvalue() and "None" not in out.getvalue()


def test_the_report_says_when_the_operator_exited_during_the_load():
    """A SIGKILLed operator went unnoticed: the run reported its scale events as if autoscaled to the end
    (an exploratory review); the orchestrator records when it was first seen gone (tried by hand: a run
    whose operator was killed at t=9 s said so live and at the end, and exited 1)."""
    import io

    summary = {"outcome": "completed", "requests": 10, "errors": 0, "peak_replicas": 3, "final_replicas": 3,
               "scale_events": [], "restarts": 0, "p95_ms_by_phase": {"base": 80.0}, "wall_s": 64.0,
               "operator_exited_at_s": 9.2}
    out = io.StringIO()
    command.report(summary, out)
    assert out.getvalue().splitlines()[-1] == ("sandbox: the operator exited at t=9 s of the load: what followed "
                                               "was not autoscaled")
    out = io.StringIO()
    command.report({**summary, "operator_exited_at_s": None}, out)
    assert "operator" not in out.getvalue()


@pytest.mark.parametrize("load", ["step", "burst"])
def test_a_load_too_large_to_draw_names_the_flag(load):
    """--rate-scale 1e6 asked numpy for 12.5 GiB of arrival times (1e30: numpy's 'lam value too large')."""
    with pytest.raises(ValueError, match=r"^--rate-scale and --duration: about .* requests in the run; the sandbox's "
                                         r"load generator"):
        build_load(Scenario(load=load, rate_scale=1e6))
    with pytest.raises(ValueError, match=r"^--rate-scale and --duration: about"):  # a long run at the usual rate
        build_load(Scenario(load=load, duration_s=1e12))


def test_a_trace_scaled_past_the_duration_is_refused_before_anything_starts(tmp_path, capsys):
    """--rate-scale 1e9 replayed the whole trace in under a second, and the cluster then ran with no load."""
    trace = tmp_path / "t.txt"
    trace.write_text("".join(f"{i * 0.5}\n" for i in range(201)))  # 100 s of arrivals at 2 rps
    shape = build_load(Scenario(load=f"trace:{trace}", rate_scale=1.0, duration_s=100))
    assert len(shape.arrivals) == 200  # the arrival at 100 s is past the run
    assert len(build_load(Scenario(load=f"trace:{trace}", rate_scale=2.0, duration_s=50)).arrivals) == 200
    with pytest.raises(ValueError, match=(r"^--rate-scale 4: the trace t.txt replays in 25 s at that scale, less "
                                          r"than --duration 50 s, and the rest of the run would have no load: give "
                                          r"--duration 25 or less, or a --rate-scale of 2 or less$")):
        build_load(Scenario(load=f"trace:{trace}", rate_scale=4.0, duration_s=50))
    assert command.run(_args("--load", f"trace:{trace}", "--rate-scale", "1e9", "--workdir",
                             str(tmp_path / "w"))) == 1
    assert "the rest of the run would have no load" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()  # refused before any folder is made


def test_an_output_may_not_replace_a_file_the_run_reads(tmp_path, capsys):
    """--summary svc.yaml replaced the --service manifest with the JSON summary after the run."""
    service = tmp_path / "svc.yaml"
    service.write_text(SAMPLE.read_text())
    trace = tmp_path / "t.txt"
    trace.write_text("".join(f"{i * 0.5}\n" for i in range(601)))
    for argv, message in [
        (("--service", str(service), "--summary", str(service)),
         f"--summary: {service} is the --service file this run reads; writing it would replace it"),
        (("--load", f"trace:{trace}", "--summary", str(trace)),
         f"--summary: {trace} is the --load trace file this run reads; writing it would replace it"),
    ]:
        before = service.read_bytes(), trace.read_bytes()
        assert command.run(_args(*argv)) == 1
        assert capsys.readouterr().err.strip() == f"tritonscale sandbox: {message}"
        assert (service.read_bytes(), trace.read_bytes()) == before


def test_a_refused_run_makes_no_folder(tmp_path, capsys):
    """The --workdir and --summary folders were made before the --gpus and --service checks."""
    invalid = tmp_path / "inv.yaml"
    doc = yaml.safe_load(SAMPLE.read_text())
    doc["spec"]["scaling"] = {"minReplicas": 12, "maxReplicas": 4}
    invalid.write_text(yaml_text.dump_all([doc]))
    for argv in [("--gpus", "0"), ("--service", str(invalid)), ("--plot", str(tmp_path / "new" / "p.json"))]:
        assert command.run(_args(*argv, "--workdir", str(tmp_path / "w"), "--summary",
                                 str(tmp_path / "new" / "s.json"))) == 1
        assert capsys.readouterr().err.startswith("tritonscale sandbox: ")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["inv.yaml"], argv


def test_a_first_ready_timeout_names_the_schedulers_reason():
    from types import SimpleNamespace as NS

    from tritonscale.sandbox.cluster_reader import unscheduled

    def pod(name, scheduled, reason="", message=""):
        cond = NS(type="PodScheduled", status="True" if scheduled else "False", reason=reason, message=message)
        return NS(metadata=NS(name=name), status=NS(conditions=[cond]))

    class Core:
        def __init__(self, pods):
            self.pods = pods

        def list_namespaced_pod(self, namespace, label_selector):
            assert label_selector == "tritonscale.io/inferenceservice=linear"
            return NS(items=self.pods)

    pending = pod("linear-1", False, "Unschedulable", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    assert unscheduled(Core([pod("linear-0", True), pending]), "ns", "linear") == (
        "pod linear-1 is not scheduled: Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    assert unscheduled(Core([pod("linear-0", True)]), "ns", "linear") is None


def test_a_run_refused_before_anything_started_leaves_no_temporary_folder(tmp_path, monkeypatch):
    """A run that failed keeps its temporary folder for its logs; one refused before anything wrote there
    (a name already taken on --kubeconfig's cluster) has none to keep, and left an empty folder."""
    import asyncio
    import tempfile

    from tritonscale.sandbox.orchestrator import _Run

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def failed_run(*files: str) -> _Run:
        run = _Run(Scenario(), asyncio.Event(), None)
        for name in files:
            (run.workdir / name).write_text("log")
        run.failed = True
        asyncio.run(run.tear_down())
        return run

    assert not failed_run().workdir.exists()
    kept = failed_run("operator.log")
    assert (kept.workdir / "operator.log").read_text() == "log"
