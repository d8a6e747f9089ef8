"""Who may act: the pure decisions of a Lease-based leader election, in plain data.

The shape is client-go's `leaderelection`. A candidate never compares the Lease's `renewTime` with its
own clock (the clocks of two nodes may disagree): it remembers the record it last saw and the local
monotonic time at which it first saw it, and the Lease has expired when that record has not changed
for `leaseDurationSeconds` of local time. The I/O (read, create, replace with the read
resourceVersion) and the timers live in `dtjob.kube.leader`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any


class Verdict(enum.StrEnum):
    ACQUIRE = "acquire"  # the Lease is free or expired: write ourselves in as the holder
    RENEW = "renew"  # we hold it: write a fresh renewTime
    WAIT = "wait"  # someone else holds it and it has not expired yet


@dataclass(frozen=True)
class LeaseRecord:
    """The fields of a Lease's spec that the election reads."""

    holder: str = ""
    renew_time: str | None = None
    acquire_time: str | None = None
    duration_seconds: float = 0.0
    transitions: int = 0

    @classmethod
    def of(cls, spec: Mapping[str, Any] | None, default_duration: float) -> LeaseRecord:
        spec = spec or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            renew_time=spec.get("renewTime"),
            acquire_time=spec.get("acquireTime"),
            duration_seconds=float(spec.get("leaseDurationSeconds") or default_duration),
            transitions=int(spec.get("leaseTransitions") or 0),
        )


@dataclass(frozen=True)
class Sighting:
    """A (holder, renewTime) record as this process saw it, and the local monotonic time it first did."""

    holder: str
    renew_time: str | None
    since: float


def judge(record: LeaseRecord, last: Sighting | None, now: float, identity: str) -> tuple[Verdict, Sighting]:
    """What to do about the Lease we just read, and what to remember about it for the next round.

    `now` is local monotonic time. A record seen for the first time (or changed since) starts its
    clock now: it expires `record.duration_seconds` later unless it changes again.
    """
    seen = last
    if seen is None or (seen.holder, seen.renew_time) != (record.holder, record.renew_time):
        seen = Sighting(record.holder, record.renew_time, now)
    if record.holder == identity:
        return Verdict.RENEW, seen
    if not record.holder or now - seen.since >= record.duration_seconds:
        return Verdict.ACQUIRE, seen
    return Verdict.WAIT, seen


def micro_time(at: datetime) -> str:
    """A metav1.MicroTime: RFC 3339 in UTC with exactly six fractional digits (what the apiserver parses)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claimed(
    spec: Mapping[str, Any] | None, identity: str, duration_seconds: float, now: datetime
) -> dict[str, Any]:
    """The Lease spec that makes `identity` the holder as of `now` (wall clock, UTC).

    Renewing keeps acquireTime and leaseTransitions; taking over from anyone else (or from nobody,
    after a release) sets acquireTime and counts a transition. A new Lease starts at 0 transitions.
    Fields the election does not own (preferredHolder, strategy) are kept.
    """
    old = LeaseRecord.of(spec, duration_seconds)
    renewing = old.holder == identity
    taking_over = spec is not None and not renewing
    return {
        **(spec or {}),
        "holderIdentity": identity,
        "leaseDurationSeconds": max(1, math.ceil(duration_seconds)),
        "acquireTime": old.acquire_time if renewing and old.acquire_time else micro_time(now),
        "renewTime": micro_time(now),
        "leaseTransitions": old.transitions + 1 if taking_over else old.transitions,
    }


def released(spec: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The spec a holder writes when it stops gracefully (client-go's ReleaseOnCancel): no holder, a
    1-second duration, a renewTime already in the past. A standby takes over at its next round."""
    return {
        **spec,
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "renewTime": micro_time(now - timedelta(seconds=1)),
    }
