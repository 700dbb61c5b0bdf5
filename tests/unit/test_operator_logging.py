"""The operator's log: Kopf's per-object lines open with [namespace/name] (with many InferenceServices,
"Handler ... failed temporarily" said nothing of which one), the operator's own lines are unchanged."""

from __future__ import annotations

import logging

import pytest

from tritonscale.operator_logging import configure_logging


@pytest.fixture
def restored_root():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    objects = logging.getLogger("kopf.objects")
    filters = objects.filters[:]
    access = logging.getLogger("aiohttp.access")
    access_level = access.level
    yield root
    root.handlers[:], root.level = handlers, level
    objects.filters[:] = filters
    access.setLevel(access_level)


# An InferenceService as Kopf refers to it in its per-object log records.
BERT = {"apiVersion": "tritonscale.io/v1alpha1", "kind": "InferenceService", "name": "bert", "namespace": "team-a",
        "uid": "u"}


def _format(root: logging.Logger, logger: str, message: str, **extra: object) -> str:
    """The line the handler writes for an ERROR record (its filters applied, as ``Handler.handle`` does)."""
    record = logging.getLogger(logger).makeRecord(logger, logging.ERROR, __file__, 1, message, (), None,
                                                  extra=extra or None)
    (handler,) = [h for h in root.handlers if type(h).__name__ == "_KopfStreamHandler"]
    assert handler.filter(record)
    return handler.format(record)


def test_kopf_object_lines_name_the_object(restored_root: logging.Logger) -> None:
    configure_logging(verbose=False)
    line = _format(restored_root, "kopf.objects", "Handler 'reconcile_inference_service' failed with an exception. "
                   "Will retry.", k8s_ref=BERT)
    assert " ERROR kopf.objects: [team-a/bert] Handler 'reconcile_inference_service' failed with an exception." in line
    own = _format(restored_root, "tritonscale", "team-a/bert: scaled up from 1 to 2")
    assert own.endswith(" ERROR tritonscale: team-a/bert: scaled up from 1 to 2")


def test_a_liveness_probe_is_not_a_log_line_unless_verbose(restored_root: logging.Logger) -> None:
    """Kopf's own /healthz (the operator without --leader-elect) is aiohttp's: a line per probe."""
    access = logging.getLogger("aiohttp.access")
    configure_logging(verbose=False)
    assert not access.isEnabledFor(logging.INFO)
    access.setLevel(logging.NOTSET)
    configure_logging(verbose=True)
    assert access.isEnabledFor(logging.INFO)


@pytest.mark.parametrize("verbose", [False, True])
def test_credentials_in_urls_are_hidden_in_every_log_line(restored_root: logging.Logger, verbose: bool) -> None:
    """--verbose has Kopf log whole objects at DEBUG, a Prometheus URL with a password in it included."""
    configure_logging(verbose=verbose)
    (handler,) = [h for h in restored_root.handlers if type(h).__name__ == "_KopfStreamHandler"]
    body = {"spec": {"scaling": {"prometheus": {"url": "http://alice:tenantpw@prom.team-a:9090/prom"}}},
            "note": "see https://docs.example/x@y and git+ssh://git@host/repo"}
    record = logging.getLogger("kopf.objects").makeRecord("kopf.objects", logging.DEBUG, __file__, 1,
                                                         "Creation is in progress: %r", (body,), None)
    assert all(f.filter(record) for f in handler.filters)
    line = handler.format(record)
    assert "tenantpw" not in line and "alice" not in line
    assert "'http://***@prom.team-a:9090/prom'" in line
    assert "https://docs.example/x@y" in line  # an @ in a path is no credential
    assert "git+ssh://***@host/repo" in line


def test_a_temporary_handler_failure_is_a_warning(restored_root: logging.Logger) -> None:
    """A name another object holds is reported in status and retried: Kopf's ERROR at each retry said more."""
    configure_logging(verbose=False)
    line = _format(restored_root, "kopf.objects", "Handler 'reconcile_inference_service' failed temporarily: "
                   "another object holds the name of Deployment/bert (see the Ready condition)", k8s_ref=BERT)
    assert " WARNING kopf.objects: [team-a/bert] Handler 'reconcile_inference_service' failed temporarily: " in line
    other = _format(restored_root, "kopf.objects", "Handler 'reconcile_inference_service' failed with an exception. "
                    "Will retry.", k8s_ref=BERT)
    assert " ERROR kopf.objects: " in other  # a bug stays an error
