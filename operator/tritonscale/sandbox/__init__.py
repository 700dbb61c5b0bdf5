"""Local sandbox: real tritonserver / Prometheus processes and an open-loop load generator.

Nothing here talks to Kubernetes.  It runs the real ``tritonserver`` binary bundled in
the ``nvidia-pytriton`` wheel (CPU only, python backend) with a cost model that sleeps
``a + b*n`` ms per batch, Debian's ``prometheus`` binary scraping it through
``file_sd_configs``, and an open-loop load generator (``loadgen``) that spreads requests
round-robin over the live replicas.
"""
