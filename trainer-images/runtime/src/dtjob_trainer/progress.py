"""Training progress of rank 0 on an HTTP endpoint in Prometheus text format (GET /metrics).

Gauges: dtjob_trainer_step, dtjob_trainer_epoch, dtjob_trainer_loss, dtjob_trainer_samples_per_second
(all ranks together, over the last steps), dtjob_trainer_last_checkpoint_step (-1 before the first),
dtjob_trainer_attempt; counter dtjob_trainer_samples_total (since this process started).
"""

from __future__ import annotations

import time
from collections import deque
from types import TracebackType

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

_THROUGHPUT_WINDOW_STEPS = 20


class ProgressReporter:
    def __init__(self, port: int, attempt: int = 0, addr: str = "0.0.0.0") -> None:
        self.registry = CollectorRegistry()
        self._step = Gauge("dtjob_trainer_step", "Optimizer steps completed.", registry=self.registry)
        self._epoch = Gauge("dtjob_trainer_epoch", "Current epoch (0-based).", registry=self.registry)
        self._loss = Gauge("dtjob_trainer_loss", "Training loss of the latest step.", registry=self.registry)
        self._throughput = Gauge(
            "dtjob_trainer_samples_per_second",
            f"Training samples per second, all ranks, over the last {_THROUGHPUT_WINDOW_STEPS} steps.",
            registry=self.registry,
        )
        self._samples = Counter(
            "dtjob_trainer_samples", "Training samples processed by all ranks.", registry=self.registry
        )
        self._checkpoint = Gauge(
            "dtjob_trainer_last_checkpoint_step",
            "Step of the newest durable checkpoint, -1 if none.",
            registry=self.registry,
        )
        attempt_gauge = Gauge("dtjob_trainer_attempt", "Gang restart generation.", registry=self.registry)
        attempt_gauge.set(attempt)
        self._checkpoint.set(-1)
        self._recent: deque[tuple[float, int]] = deque(maxlen=_THROUGHPUT_WINDOW_STEPS + 1)
        self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def record_step(self, step: int, epoch: int, loss: float, samples: int) -> None:
        """`samples`: processed by all ranks in this step."""
        self._step.set(step)
        self._epoch.set(epoch)
        self._loss.set(loss)
        self._samples.inc(samples)
        self._recent.append((time.monotonic(), samples))
        if len(self._recent) > 1:
            elapsed = self._recent[-1][0] - self._recent[0][0]
            if elapsed > 0:
                # The first entry only marks the window's start; its samples came before it.
                self._throughput.set(sum(n for _, n in list(self._recent)[1:]) / elapsed)

    def record_checkpoint(self, step: int) -> None:
        self._checkpoint.set(step)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> ProgressReporter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
