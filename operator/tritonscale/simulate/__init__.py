"""Trace-driven autoscaling simulator: Triton replicas with dynamic batching and cold starts.

Modules, from the inside out:

* ``arrivals`` -- trace files read (their contents parsed in ``trace_parsing``: Azure CSV, plain text,
  JSON Lines), rate scaling and built-in shapes;
* ``replica`` -- one replica: Triton's dynamic batcher and an ``a + b*n`` ms batch cost;
* ``metrics_view`` -- what Prometheus shows the autoscalers (scrape, window, summary);
* ``engine`` -- the cluster: round-robin routing, cold starts, scale-down with drain;
* ``capacity`` -- per-replica capacity at the SLO, which configures the baselines;
* ``policies`` -- tritonscale (the operator's own decider), hpa, keda, kpa, static, oracle;
* ``report`` -- attainment, replica-hours, table, JSON, plot;
* ``benchmark`` / ``command`` -- one comparison, and the ``tritonscale simulate`` CLI (its flags made
  into a replay's inputs in ``replay_inputs``, its text in ``replay_report``);
* ``suite`` -- the scenario suite: ``suite_scenarios`` (the matrix, each scenario's arrivals), ``suite_scoring``
  (scores, check, JSON), run by ``suite``.
"""
