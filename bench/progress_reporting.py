"""bench.scale's `reporting` phase: every pod of every job posting progress reports to the operator's
intake as the trainer runtime's poster does while training, and what that costs the operator and the
apiserver (docs/progress.md).

Each pod gets a token bound to it by the apiserver's TokenRequest API, with the intake's audience, as the
kubelet projects one into a real pod. The reporters run in one thread of the benchmark (asyncio, aiohttp,
64 connections kept alive): each pod posts a report every --report-interval s (10 s: the poster's
fastest while the step advances), the pods spread evenly over the interval, the step advancing every
time, so every report is news to the operator. Warm-up: until every pod has had a report taken (new
tokens are reviewed 20 a second; 429 meanwhile). Then a window as the idle phase's: the operator's CPU
and memory, the apiserver's requests by verb and resource (TokenReviews, status writes), and the
reports' answers and latency as the reporters saw them. The reporters' own CPU is the benchmark's, on
the same machine: said, not subtracted.
"""

from __future__ import annotations

import asyncio
import resource
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import aiohttp
from kubernetes import client

from dtjob.core.progress import AUDIENCE

CONNECTIONS: Final = 64
TOKEN_THREADS: Final = 16


def pod_tokens(core: client.CoreV1Api, namespace: str, pods: Mapping[str, str]) -> dict[str, str]:
    """A token for each pod (name: uid), bound to it, for the intake's audience."""

    def one(name: str) -> tuple[str, str]:
        spec = client.V1TokenRequestSpec(
            audiences=[AUDIENCE],
            expiration_seconds=3600,
            bound_object_ref=client.V1BoundObjectReference(
                api_version="v1", kind="Pod", name=name, uid=pods[name]
            ),
        )
        made = core.create_namespaced_service_account_token(
            "default", namespace, client.AuthenticationV1TokenRequest(spec=spec)
        )
        return name, str(made.status.token)

    with ThreadPoolExecutor(TOKEN_THREADS) as pool:
        return dict(pool.map(one, sorted(pods)))


class Reporters(threading.Thread):
    """Every pod reporting every `interval` s; the answers and latencies since the last `reset`."""

    def __init__(self, url: str, tokens: Mapping[str, str], interval: float) -> None:
        super().__init__(name="reporters", daemon=True)
        self.url, self.tokens, self.interval = url, dict(tokens), interval
        self.lock = threading.Lock()
        self.taken: set[str] = set()
        self.answers: Counter[int] = Counter()
        self.latencies: list[float] = []
        self._stopping = threading.Event()
        self.failure: BaseException | None = None

    def reset(self) -> None:
        with self.lock:
            self.answers, self.latencies = Counter(), []

    def stop(self) -> None:
        self._stopping.set()
        self.join(30)

    def run(self) -> None:
        try:
            asyncio.run(self._all())
        except BaseException as err:  # said by `figures`: a dead reporter must not pass for a quiet one
            self.failure = err

    async def _all(self) -> None:
        connector = aiohttp.TCPConnector(limit=CONNECTIONS)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            spread = self.interval / max(1, len(self.tokens))
            await asyncio.gather(
                *(self._pod(session, pod, i * spread) for i, pod in enumerate(sorted(self.tokens)))
            )

    async def _pod(self, session: aiohttp.ClientSession, pod: str, offset: float) -> None:
        headers = {"Authorization": f"Bearer {self.tokens[pod]}"}
        await asyncio.sleep(offset)
        step, due = 0, time.monotonic()
        while not self._stopping.is_set():
            step += 100
            body = {"step": step, "totalSteps": 10**9, "epoch": 0, "loss": 0.5, "samplesPerSecond": 800.0,
                    "stepSeconds": 0.1, "ownStepSeconds": 0.05}  # fmt: skip
            sent = time.monotonic()
            try:
                async with session.post(self.url, json=body, headers=headers) as response:
                    await response.read()
                    status = response.status
            except (TimeoutError, aiohttp.ClientError):
                status = 0
            with self.lock:
                self.answers[status] += 1
                self.latencies.append(time.monotonic() - sent)
                if status == 204:
                    self.taken.add(pod)
            due += self.interval
            await asyncio.sleep(max(0.0, due - time.monotonic()))

    def figures(self, seconds: float) -> dict[str, Any]:
        if self.failure is not None:
            raise RuntimeError(f"the reporters died: {self.failure!r}")
        with self.lock:
            latencies, answers = sorted(self.latencies), dict(self.answers)
        return {
            "pods": len(self.tokens),
            "reports_per_s": round(sum(answers.values()) / seconds, 1),
            "answers": {str(k): v for k, v in sorted(answers.items())},
            "latency_ms": {
                q: round(1000 * latencies[min(len(latencies) - 1, int(p * len(latencies)))], 2)
                for q, p in (("p50", 0.5), ("p99", 0.99))
            }
            if latencies
            else {},
        }


def intake_answers(url: str) -> bool:
    """Whether an intake listens at `url` (an operator from before progress reports has none)."""

    async def probe() -> bool:
        try:
            timeout = aiohttp.ClientTimeout(total=5)
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(url, json={"step": 1}) as response,
            ):
                return response.status == 401  # no token: an intake, refusing it
        except aiohttp.ClientError:
            return False

    return asyncio.run(probe())


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def reporting(
    core: client.CoreV1Api,
    namespace: str,
    pods: Mapping[str, str],
    url: str,
    interval: float,
    window: Callable[[float], dict[str, Any]],
    seconds: float,
    note: Callable[[str], None],
) -> dict[str, Any] | None:
    """The phase: tokens, warm-up, then `window(seconds)` (the idle phase's measure) while every pod
    reports; None when no intake answers at `url`."""
    if not intake_answers(url):
        note(f"reporting: no progress intake answers at {url} (an operator from before it): skipped")
        return None
    started = time.monotonic()
    tokens = pod_tokens(core, namespace, pods)
    note(f"reporting: {len(tokens)} pod-bound tokens made in {time.monotonic() - started:.1f}s")
    reporters = Reporters(url, tokens, interval)
    reporters.start()
    try:
        warm_up = time.monotonic()
        deadline = warm_up + 120 + len(tokens) / 10
        while len(reporters.taken) < len(tokens):
            if time.monotonic() > deadline or not reporters.is_alive():
                raise TimeoutError(
                    f"reporting: {len(reporters.taken)}/{len(tokens)} pods had a report taken; answers "
                    f"{dict(reporters.answers)}, reporters alive: {reporters.is_alive()}"
                )
            time.sleep(1.0)
        note(f"reporting: every pod's report taken after {time.monotonic() - warm_up:.0f}s; measuring")
        time.sleep(interval)  # the warm-up's bursts of retries over
        reporters.reset()
        cpu = own_cpu_seconds()
        measured = window(seconds)
        measured["benchmark_cpu_pct"] = round(100 * (own_cpu_seconds() - cpu) / measured["seconds"], 1)
        measured["reports"] = reporters.figures(measured["seconds"])
        return measured
    finally:
        reporters.stop()
