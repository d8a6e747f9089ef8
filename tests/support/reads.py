"""Reads of what lands after what a test waited for, each a poll with a deadline (reads are polls).

The operator posts its Events last in a pass, after the status write a test waits for, and best effort;
it writes the status once a pass, after the pass's pods are created; and a pod's log may still be growing
when its job's status says the job ended (a rank still finishing). A test that read one of these once,
right after waiting for something else, failed under load. A negative assertion ("no such Event", "said
once") stays a single read, made after the positive wait it follows. Where the operator is stopped by
the test, the wait goes before the stop: a stopping operator writes nothing more."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from tests.support.jobs import Jobs, dump, events_of, status_of
from tests.support.waiting import wait_for


def wait_event(
    core: client.CoreV1Api,
    namespace: str,
    involved_name: str,
    reason: str,
    contains: str = "",
    timeout: float = 60,
    type_: str = "",
) -> client.CoreV1Event:
    """The first Event about `involved_name` with `reason` (and `type_`, given one) whose message holds
    `contains`, once there is one; the failure lists the Events seen."""

    def matching() -> client.CoreV1Event | None:
        return next(
            (e for e in events_of(core, namespace, involved_name)
             if e.reason == reason and (not type_ or e.type == type_) and contains in (e.message or "")),
            None,
        )  # fmt: skip

    what = f"{type_ or 'a'} {reason} Event on {involved_name}" + (f" saying {contains!r}" if contains else "")
    try:
        return wait_for(matching, what, timeout=timeout)
    except AssertionError as timed_out:
        seen = events_seen(core, namespace, involved_name)
        raise AssertionError(f"{timed_out}; Events seen: {seen}") from None


def events_seen(core: client.CoreV1Api, namespace: str, involved_name: str) -> str:
    """The Events about `involved_name`, one line each, for a failure's message."""
    try:
        events = events_of(core, namespace, involved_name)
    except client.ApiException as err:
        return f"(not listed: {err.status} {err.reason})"
    lines = [f"{e.type} {e.reason} (x{e.count}): {e.message}" for e in events]
    return ("\n" + "\n".join(lines))[-3000:] if lines else "none"


def wait_log(core: client.CoreV1Api, namespace: str, pod: str, contains: str, timeout: float = 60) -> str:
    """The pod's log once it holds `contains` (not empty); the failure shows the log's end."""
    last = [""]

    def holding() -> str | None:
        last[0] = str(core.read_namespaced_pod_log(pod, namespace))
        return last[0] if contains in last[0] else None

    try:
        return wait_for(holding, f"{contains!r} in the log of {pod}", timeout=timeout)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; the log's end:\n{last[0][-3000:]}") from None


def wait_status(
    jobs: Jobs, name: str, holds: Callable[[dict[str, Any]], object], what: str, timeout: float = 60
) -> dict[str, Any]:
    """The job's status once `holds(status)`, for a field that a later write brings than the one awaited;
    the failure shows the last status read."""
    last: list[dict[str, Any]] = [{}]

    def holding() -> tuple[dict[str, Any]] | None:
        last[0] = status_of(jobs, name)
        return (last[0],) if holds(last[0]) else None  # a tuple: an empty status may be what holds

    try:
        return wait_for(holding, f"{what} in the status of {name}", timeout=timeout)[0]
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; status: {dump(last[0])}") from None
