"""Every API call the operator makes has a deadline: a server that accepts and then never answers (what a
partition that drops packets looks like) ends the call in seconds, not after TCP gives up."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import urllib3
from kubernetes import client

from dtjob.core.plan import Event
from dtjob.kube import client as dtjob_client
from dtjob.kube import events
from dtjob.kube.events import EventRecorder
from dtjob.kube.gate import Deposed, Gate
from dtjob.kube.refusals import link_failure, refusal
from dtjob.settings import DEFAULT_API_BURST, DEFAULT_API_QPS


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A listening socket on the loopback that accepts connections (the kernel's backlog) but never reads
    or writes a byte."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def api_at(server: str) -> client.CoreV1Api:
    configuration = client.Configuration(host=server)
    configuration.retries = False  # one attempt: the deadline is what is timed
    return client.CoreV1Api(dtjob_client.DeadlinedApiClient(configuration))


def seconds_to_time_out(call: Callable[[], object]) -> float:
    start = time.monotonic()
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        call()
    return time.monotonic() - start


def test_a_call_to_a_server_that_never_answers_times_out_by_default(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dtjob_client, "REQUEST_TIMEOUT", (1.0, 0.5))
    api = api_at(silent_server)
    assert seconds_to_time_out(lambda: api.read_namespace("default")) < 5


def test_a_call_may_name_a_longer_deadline_than_the_default(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dtjob_client, "REQUEST_TIMEOUT", (1.0, 0.2))
    api = api_at(silent_server)
    # The call's own deadline, not the default's 0.2 s.
    assert seconds_to_time_out(lambda: api.read_namespace("default", _request_timeout=(1.0, 1.5))) >= 1.4


def test_an_event_the_api_server_never_answers_is_dropped_without_failing_the_pass(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The status is written by then: a failed pass would back off without ever posting the event again.
    monkeypatch.setattr(dtjob_client, "REQUEST_TIMEOUT", (1.0, 0.2))
    monkeypatch.setattr(events, "core", lambda: api_at(silent_server))
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u1", "resourceVersion": "1"}}
    EventRecorder(Gate(DEFAULT_API_QPS, DEFAULT_API_BURST)).post(
        job, Event("Normal", "Created", "the gang is created")
    )


def test_a_call_to_a_closed_port_is_a_link_failure_said_in_one_line_not_a_refusal() -> None:
    """What a pass meets while the apiserver restarts: logged as a warning that names it, no traceback."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]  # closed when the block ends: nothing listens there any more
    with pytest.raises(urllib3.exceptions.HTTPError) as cut:
        api_at(f"http://127.0.0.1:{port}").list_namespaced_pod("default")
    assert refusal(cut.value) is None
    assert "Connection refused" in (link_failure(cut.value) or ""), link_failure(cut.value)
    assert link_failure(ValueError("a bug")) is None  # anything else still gets its traceback


@pytest.fixture
def recording_server() -> Iterator[tuple[str, list[str]]]:
    """A server that answers every request `{}` and keeps each one's method and path (query included)."""
    seen: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_POST = do_PATCH = do_DELETE = _answer

        def log_message(self, *_: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
        server.shutdown()


def test_a_fenced_write_gives_the_apiserver_the_time_it_has_left_and_a_read_gives_none(
    recording_server: tuple[str, list[str]],
) -> None:
    """A write of a leader must land inside its lease or not at all: its deadline goes to the apiserver
    (which abandons a write it has not committed by then), not only to the client's socket."""
    server, seen = recording_server
    api = api_at(server)
    gate = Gate(DEFAULT_API_QPS, DEFAULT_API_BURST, fence=lambda: 2.5)
    api.create_namespaced_pod("ns", {"metadata": {"name": "p"}}, _preload_content=False, **gate.write())
    api.read_namespaced_pod("p", "ns", _preload_content=False, _request_timeout=2.5)
    assert seen == ["POST /api/v1/namespaces/ns/pods?timeout=2500ms", "GET /api/v1/namespaces/ns/pods/p"]


def test_a_write_without_leader_election_has_the_default_deadline_and_none_past_the_lease_is_sent() -> None:
    assert Gate(DEFAULT_API_QPS, DEFAULT_API_BURST).write() == {}
    with pytest.raises(Deposed):
        Gate(DEFAULT_API_QPS, DEFAULT_API_BURST, fence=lambda: 0.0).write()
