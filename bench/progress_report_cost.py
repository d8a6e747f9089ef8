"""What progress reporting adds to a training step: the runtime's `TrainingSession.end_of_step` on one
gloo rank, without and with a ProgressPoster (DTJ_PROGRESS_URL set, posting to a local HTTP server that
takes every report), the two alternating in one run:

    python -m bench.progress_report_cost

The step itself (forward, backward, optimizer) is left out: this is the session's bookkeeping alone,
the part the poster changes. The DDP digits example's whole step is about 3.7 ms on the 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@contextmanager
def taking_intake() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local HTTP server taking every progress report, as the operator's intake would."""
    taken: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            taken.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/progress", taken
    finally:
        server.shutdown()
        server.server_close()


def microseconds_a_step(steps: int, posting: bool, url: str, workdir: Path) -> float:
    import torch
    from dtjob_trainer.environment import TrainerEnvironment
    from dtjob_trainer.pytorch.distributed import distributed
    from dtjob_trainer.pytorch.session import open_session
    from dtjob_trainer.pytorch.state import TrainingState

    token = workdir / "token"
    token.write_text("bench")
    environ = {"DTJ_CHECKPOINT_DIR": str(workdir / f"checkpoints-{posting}-{time.monotonic_ns()}"),
               "DTJ_METRICS_PORT": "0", "WORLD_SIZE": "1", "RANK": "0"}  # fmt: skip
    progress = {"DTJ_PROGRESS_URL": url, "DTJ_PROGRESS_TOKEN_FILE": str(token)}
    for name in progress:
        os.environ.pop(name, None)
    if posting:
        os.environ.update(progress)
    env = TrainerEnvironment.from_environ(environ)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = TrainingState(model, optimizer, torch.optim.lr_scheduler.ConstantLR(optimizer))
    with (
        distributed(env.torch, 30) as context,
        open_session(env, context, state, checkpoint_every_steps=10**9, total_steps=steps) as session,
    ):
        start = time.perf_counter()
        for _ in range(steps):
            session.end_of_step(0.5, samples=32)
        return (time.perf_counter() - start) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures: dict[bool, list[float]] = {False: [], True: []}
    with taking_intake() as (url, taken), tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.rounds):
            for posting in (False, True):
                figures[posting].append(microseconds_a_step(args.steps, posting, url, Path(workdir)))
    without, with_poster = statistics.median(figures[False]), statistics.median(figures[True])
    print(f"end_of_step without a poster: {', '.join(f'{v:.1f}' for v in figures[False])} us")
    print(f"end_of_step with a poster:    {', '.join(f'{v:.1f}' for v in figures[True])} us")
    print(
        f"added: {with_poster - without:.1f} us a step (x{with_poster / without:.2f}); reports taken: {len(taken)}"
    )


if __name__ == "__main__":
    main()
