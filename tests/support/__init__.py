"""Helpers the tests import (``from support.cluster import sample, wait_for``); pytest puts
``tests/`` on ``sys.path`` (``pythonpath`` in pyproject.toml). Fixtures stay in
``tests/conftest.py``, which is built from these (and the chart tests' ``rendered`` in
``tests/install/conftest.py``).

- ``cluster``: the control plane, the chart installed with helm, namespaces, polling;
- ``audit_log``: the API server's audit log, per user;
- ``pod_ready_marker``: a stand-in kubelet that marks pods Ready (nothing runs);
- ``chart_render``: ``helm template`` of charts/tritonscale, and the one object of a kind in it;
- ``operator_cluster``: an InferenceService and its children in one namespace, as the integration
  tests read and write them, and the Warning events on an object;
- ``triton_exporter``: a fake Triton /metrics endpoint for a real Prometheus to scrape;
- ``spec_cases``: the table of spec mutations and the problems they must produce;
- ``cel_eval``: CEL rules and structural defaulting as kube-apiserver applies them;
- ``interrupt``: SIGTERM stops a run as Ctrl-C does (both conftests install it).
"""
