"""The operator's Kubernetes client: every read and write the reconciler and the
autoscaler make goes through ``client.Kube`` (Kopf's own watches, Events and finalizer,
and the leader Lease, aside), and ``object_lock`` serialises their status writes."""
