"""``tritonscale sandbox``: the operator's closed loop on one machine, with real parts.

A real Kubernetes control plane (``tritonscale.cluster``), the real operator process,
kubelets of our own whose pods are real ``tritonserver`` processes (the CPU build bundled
in the ``nvidia-pytriton`` wheel, python backend, a cost model that sleeps ``a + b*n`` ms
per batch), Debian's ``prometheus`` scraping them, and an open-loop load routed by the
Service's EndpointSlices. Modules, by job:

* the command: ``command`` (CLI), ``preflight`` (what is missing and how to get it),
  ``scenario`` (the InferenceService, its sizing, load shapes), ``orchestrator`` (start,
  run, stop everything, in order), ``load_phase`` (the load and what is recorded meanwhile),
  ``cluster_reader`` (its reads of the cluster), ``stoppable_waits`` (waits a stop cuts short);
* cluster side: ``cluster_setup`` (CRD, model store), ``operator_process``
  (``tritonscale run`` as a subprocess; the integration tests use it too);
* the kubelet: ``kubelet``, ``node_registration``, ``list_watch``, ``pod_worker``,
  ``pod_status``, ``pod_volumes``, ``pod_network``, ``probes``, ``containers``,
  ``service_routing``;
* what runs in the pods and around them: ``tritonserver``, ``model/``,
  ``prometheus_server``, ``loadgen``, ``model_control`` (batcher settings read back from a
  live tritonserver, or reloaded: the way e2e/bench_batching_apply.py measured and the
  operator does not use);
* what the user sees: ``live_view``, ``summary``.
"""
