"""`dtjob logs`: every rank's log, each line labelled with its attempt and member and coloured by rank.
With follow, a gang restart does not end it: the new attempt's pods are followed as they start, until
the job ends. A gang restart deletes the pods it ends, so only the current attempt's logs can be read
after the fact; follow to keep them all."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

from dtjob.console import views
from dtjob.console.cluster import Reader, background
from dtjob.console.views import Obj


@dataclass(frozen=True)
class Choice:
    """Which pods' logs: an attempt (None: the current one, and with follow every later one too) and a
    rank (None: all)."""

    attempt: int | None = None
    rank: int | None = None

    def wants(self, job: Obj, pod: Obj, first_attempt: int) -> bool:
        attempt = views.attempt_of(pod)
        if (self.attempt is not None and attempt != self.attempt) or attempt < first_attempt:
            return False
        return self.rank is None or views.rank(job, pod) == self.rank


def started(pod: Obj) -> bool:
    """Whether the trainer container has a log to read (it runs or ran)."""
    container = views.trainer_container(pod)
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            state = status.get("state") or {}
            return "running" in state or "terminated" in state
    return False


def _attempt(job: Obj) -> int:
    return int((job.get("status") or {}).get("attempt", 1))


def _print(console: Console, job: Obj, pod: Obj, line: str) -> None:
    console.print(Text.assemble(views.log_prefix(job, pod), line), soft_wrap=True, highlight=False)


def show(reader: Reader, name: str, choice: Choice, console: Console, errors: Console) -> int:
    """The chosen pods' logs as they are now, one pod after another in rank order."""
    job = reader.job(name)
    current = _attempt(job)
    attempt = current if choice.attempt is None else choice.attempt
    chosen = Choice(attempt, choice.rank)
    pods = [p for p in views.in_rank_order(job, reader.pods(name)) if chosen.wants(job, p, 0)]
    if not pods:
        if attempt < current:
            why = f"the gang restarted since (attempt {current} now), and a gang restart deletes the pods it ends"
        elif views.phase(job) in views.TERMINAL_PHASES:
            why = f"the job is {views.phase(job)}, and its pods that had not ended went with it (runPolicy.cleanPodPolicy)"
        else:
            why = "none exists yet"
        rank = "" if choice.rank is None else f" rank {choice.rank}"
        errors.print(f"no pods of {name}{rank} in attempt {attempt}: {why}", highlight=False)
        return 1
    for pod in pods:
        if not started(pod):
            errors.print(f"{views.member(pod)}: no log yet ({views.pod_state(pod)})", highlight=False)
            continue
        for line in reader.log(pod, views.trainer_container(pod), follow=False):
            _print(console, job, pod, line)
    return 0


def _lines(reader: Reader, pod: Obj) -> Iterator[tuple[Obj, str]]:
    for line in reader.log(pod, views.trainer_container(pod), follow=True):
        yield pod, line


class _Following:
    """The pods whose logs are read: a wanted pod is followed once its trainer has started (its next
    event says so)."""

    def __init__(
        self, reader: Reader, events: queue.Queue[tuple[str, Any]], choice: Choice, first: int
    ) -> None:
        self.reader, self.events, self.choice, self.first = reader, events, choice, first
        self.seen: set[str] = set()  # uids whose logs were (or are being) read
        self.reading: set[str] = set()

    def offer(self, job: Obj, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self.seen or not started(pod) or not self.choice.wants(job, pod, self.first):
            return
        self.seen.add(uid)
        self.reading.add(uid)
        background(_lines(self.reader, pod), self.events, "log", end=uid)


def follow(reader: Reader, name: str, choice: Choice, console: Console, errors: Console) -> int:
    """The chosen pods' logs from their start, and each later attempt's as its pods start, until the job
    has ended and every log followed has ended. 0 when the job succeeded, 1 otherwise."""
    job = reader.job(name)
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    pods = _Following(reader, events, choice, choice.attempt or _attempt(job))
    for pod in views.in_rank_order(job, reader.pods(name)):
        pods.offer(job, pod)
    background(reader.watch_job(name), events, "job")
    background(reader.watch_pods(name), events, "pod")
    while True:
        kind, item = events.get()
        if kind.endswith("-error"):
            raise item
        if kind == "job":
            if item is None:
                errors.print(f"{name} was deleted", highlight=False)
                return 1
            job = item
        elif kind == "pod":
            pods.offer(job, item)
        elif kind == "log":
            _print(console, job, *item)
        elif kind == "log-end":
            pods.reading.discard(item)
        if not pods.reading and _over(job, choice):
            # The job's watch may run ahead of the pods': look at the pods once more before ending.
            for pod in reader.pods(name):
                pods.offer(job, pod)
            if not pods.reading:
                return 0 if views.phase(job) == "Succeeded" else 1


def _over(job: Obj, choice: Choice) -> bool:
    """The job has ended, or moved past the one attempt asked for."""
    return views.phase(job) in views.TERMINAL_PHASES or (
        choice.attempt is not None and _attempt(job) > choice.attempt
    )
