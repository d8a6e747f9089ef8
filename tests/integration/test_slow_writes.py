"""A deposed leader's write that is slow rather than cut does not land after its lease: each write carries
the time its replica may still write in, and the apiserver abandons one it has not committed by then.

The slowness is the apiserver's own, as on a busy cluster: a validating admission webhook (a local HTTPS
server registered by URL, for pods carrying one label only) that answers seconds later."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dtjob.kube.gate import Gate
from dtjob.kube.writer import Writer
from dtjob.settings import DEFAULT_API_BURST, DEFAULT_API_QPS
from localcluster import Cluster
from tests.support.waiting import wait_for

SLOW_LABEL = "dtjob-test/slow-admission"
DELAY_SECONDS = 4.0


@dataclass
class SlowAdmission:
    url: str
    ca_bundle: str
    answered: list[str] = field(default_factory=list)
    """The pods it has answered for, once its delay was over."""


@pytest.fixture
def slow_admission(tmp_path: Path) -> Iterator[SlowAdmission]:
    """An admission webhook on the loopback (its own self-signed certificate) that allows every pod, after
    DELAY_SECONDS."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    answered: list[str] = []

    class Admission(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(DELAY_SECONDS)
            request = review["request"]
            answered.append(request["object"]["metadata"]["name"])
            body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "response": {"uid": request["uid"], "allowed": True}}).encode()  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Admission) as server:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        bundle = base64.b64encode(cert.read_bytes()).decode()
        yield SlowAdmission(f"https://127.0.0.1:{server.server_address[1]}/validate", bundle, answered)
        server.shutdown()


@pytest.fixture
def registered(
    slow_admission: SlowAdmission, api_client: client.ApiClient, namespace: str
) -> Iterator[SlowAdmission]:
    """The webhook registered for the pods of this test's namespace that carry SLOW_LABEL, and no others."""
    api = client.AdmissionregistrationV1Api(api_client)
    name = f"slow-admission-{namespace}"
    api.create_validating_webhook_configuration({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "slow.dtjob.test", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 15,
            "clientConfig": {"url": slow_admission.url, "caBundle": slow_admission.ca_bundle},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "objectSelector": {"matchLabels": {SLOW_LABEL: "true"}},
        }],
    })  # fmt: skip
    try:
        yield slow_admission
    finally:
        api.delete_validating_webhook_configuration(name)


def slow_pod(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {SLOW_LABEL: "true"}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:1"}]},
    }  # fmt: skip


def test_a_write_slowed_past_the_lease_it_was_started_under_does_not_land(
    cluster_a: Cluster, registered: SlowAdmission, core: client.CoreV1Api, namespace: str
) -> None:
    # A leader with 1.5 s of its lease left: the apiserver takes 4 s to admit the pod.
    until = time.monotonic() + 1.5
    leader = Writer(Gate(DEFAULT_API_QPS, DEFAULT_API_BURST, fence=lambda: until - time.monotonic()))
    started = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017 - the client's deadline or the apiserver's answer, whichever first
        leader.create_pod(slow_pod(namespace, "late"))
    assert time.monotonic() - started < DELAY_SECONDS
    wait_for(lambda: "late" in registered.answered, "the webhook's late answer", timeout=30)

    # The same write with no deadline of its own (before this fence, a deposed leader's) lands, late; by
    # then the first one would have landed long since, had the apiserver gone on with it.
    Writer(Gate(DEFAULT_API_QPS, DEFAULT_API_BURST)).create_pod(slow_pod(namespace, "landed"))
    assert registered.answered == ["late", "landed"]
    assert [p.metadata.name for p in core.list_namespaced_pod(namespace).items] == ["landed"]
