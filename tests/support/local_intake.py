"""A local HTTP server standing in for the operator's progress intake, and trainers reporting to it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Intake:
    """Records every POST (its bearer token and body); answers with the scripted codes, then 204."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.answers: list[int] = []
        self.lock = threading.Lock()

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [body for _, body in self.received]


@contextmanager
def intake() -> Iterator[tuple[Intake, str]]:
    state = Intake()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.received.append((self.headers["Authorization"], body))
                code = state.answers.pop(0) if state.answers else 204
            self.send_response(code)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_port}/v1/progress"
    finally:
        server.shutdown()
        server.server_close()


def reporting_to(url: str, pods: list[dict[str, Any]], tmp_path: Path) -> None:
    """Each pod's trainer reports to `url` (as the operator wires it) with its own name as its token."""
    for pod in pods:
        name = pod["metadata"]["name"]
        token = tmp_path / f"{name}.token"
        token.write_text(name)  # the intake tells the pods apart by their token
        env = pod["spec"]["containers"][0].setdefault("env", [])
        env += [{"name": "DTJ_PROGRESS_URL", "value": url}, {"name": "DTJ_PROGRESS_TOKEN_FILE", "value": str(token)},
                {"name": "DTJ_PROGRESS_INTERVAL_SECONDS", "value": "0.2"}]  # fmt: skip


def last_reports(server: Intake) -> dict[str, dict[str, Any]]:
    """Each pod's last report, by pod name."""
    with server.lock:
        return {auth.removeprefix("Bearer "): body for auth, body in server.received}
