"""Leader election: judge() decides acquire, renew or wait from what this process saw and when; the
Lease specs it writes; the environment that turns it on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from dtjob.election import LeaseRecord, Sighting, Verdict, claimed, judge, micro_time, released
from dtjob.kube.leader import Leadership, from_env

ME, PEER = "op-b", "op-a"
WALL = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
T0 = "2030-01-01T12:00:00.000000Z"
T1 = "2030-01-01T12:00:02.000000Z"
ANCIENT = "2000-01-01T00:00:00.000000Z"


def held(holder: str, renew_time: str | None = T0, duration: float = 10) -> LeaseRecord:
    return LeaseRecord(holder=holder, renew_time=renew_time, duration_seconds=duration)


CASES = [
    ("a Lease nobody holds is acquired at once", LeaseRecord(renew_time=T0, duration_seconds=10), None, 100.0,
     Verdict.ACQUIRE, 100.0),
    ("a Lease its holder released is acquired at once, though we saw it held a moment ago", held("", T1, 1),
     Sighting(PEER, T0, 99.0), 100.0, Verdict.ACQUIRE, 100.0),
    ("our own Lease is renewed", held(ME), Sighting(ME, T0, 95.0), 100.0, Verdict.RENEW, 95.0),
    ("our own Lease is renewed even after a restart that forgot it, however old its renewTime", held(ME, ANCIENT),
     None, 100.0, Verdict.RENEW, 100.0),
    ("someone else's Lease seen for the first time is waited on, however old its renewTime (no clock trust)",
     held(PEER, ANCIENT), None, 100.0, Verdict.WAIT, 100.0),
    ("someone else's Lease unchanged for less than its duration is waited on", held(PEER),
     Sighting(PEER, T0, 100.0), 109.9, Verdict.WAIT, 100.0),
    ("someone else's Lease unchanged for its whole duration of local time is taken over", held(PEER),
     Sighting(PEER, T0, 100.0), 110.0, Verdict.ACQUIRE, 100.0),
    ("a renewal by the holder restarts the clock", held(PEER, T1), Sighting(PEER, T0, 100.0), 130.0,
     Verdict.WAIT, 130.0),
    ("a new holder with the same renewTime restarts the clock", held("op-c"), Sighting(PEER, T0, 100.0), 130.0,
     Verdict.WAIT, 130.0),
    ("the duration the holder wrote counts, not ours", held(PEER, duration=30), Sighting(PEER, T0, 100.0), 120.0,
     Verdict.WAIT, 100.0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("record", "last", "now", "verdict", "since"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_judge(
    record: LeaseRecord, last: Sighting | None, now: float, verdict: Verdict, since: float
) -> None:
    decided, seen = judge(record, last, now, ME)
    assert decided is verdict
    assert seen == Sighting(record.holder, record.renew_time, since)


def test_a_dead_leaders_standby_takes_over_between_one_lease_and_one_lease_plus_one_retry_later() -> None:
    """The leader renews at local time 0 and dies; the standby reads every 2 s from some phase on."""
    for phase in (0.0, 0.5, 1.0, 1.99):
        last: Sighting | None = None
        now = phase
        while True:
            verdict, last = judge(held(PEER), last, now, ME)
            if verdict is Verdict.ACQUIRE:
                break
            assert verdict is Verdict.WAIT
            now += 2.0
        assert 10.0 <= now < 12.0, (phase, now)


def test_creating_the_lease_names_us_from_now_with_no_transitions() -> None:
    assert claimed(None, ME, 10, WALL) == {
        "holderIdentity": ME,
        "leaseDurationSeconds": 10,
        "acquireTime": "2030-01-01T12:00:00.000000Z",
        "renewTime": "2030-01-01T12:00:00.000000Z",
        "leaseTransitions": 0,
    }


def test_renewing_moves_only_the_renew_time() -> None:
    spec = claimed(None, ME, 10, WALL)
    later = claimed(spec, ME, 10, WALL + timedelta(seconds=2, microseconds=5))
    assert later == {**spec, "renewTime": "2030-01-01T12:00:02.000005Z"}


@pytest.mark.parametrize(
    "before",
    [
        pytest.param({"holderIdentity": PEER, "leaseTransitions": 3}, id="from a peer that stopped renewing"),
        pytest.param({"holderIdentity": "", "leaseTransitions": 3}, id="from nobody after a release"),
    ],
)
def test_taking_over_counts_a_transition_sets_the_acquire_time_and_keeps_foreign_fields(
    before: dict[str, Any],
) -> None:
    spec = {**before, "leaseDurationSeconds": 1, "acquireTime": T0, "renewTime": T0, "preferredHolder": PEER}
    taken = claimed(spec, ME, 10, WALL + timedelta(seconds=30))
    assert taken["holderIdentity"] == ME and taken["leaseTransitions"] == 4
    assert taken["acquireTime"] == taken["renewTime"] == "2030-01-01T12:00:30.000000Z"
    assert taken["leaseDurationSeconds"] == 10 and taken["preferredHolder"] == PEER


def test_a_released_lease_has_no_holder_is_already_expired_and_is_acquired_by_the_standby_at_once() -> None:
    spec = claimed(None, PEER, 10, WALL)
    gone = released(spec, WALL + timedelta(seconds=5))
    assert gone["holderIdentity"] == "" and gone["leaseDurationSeconds"] == 1
    assert gone["renewTime"] < micro_time(WALL + timedelta(seconds=5))
    assert gone["leaseTransitions"] == spec["leaseTransitions"]
    standby_saw = Sighting(PEER, spec["renewTime"], 100.0)
    assert judge(LeaseRecord.of(gone, 10), standby_saw, 100.5, ME)[0] is Verdict.ACQUIRE


def test_lease_times_are_micro_times_in_utc_with_six_fractional_digits_even_on_a_whole_second() -> None:
    assert micro_time(WALL) == "2030-01-01T12:00:00.000000Z"
    assert micro_time(WALL.astimezone(timezone(timedelta(hours=2)))) == micro_time(WALL)


def test_a_record_without_a_duration_falls_back_to_ours() -> None:
    assert LeaseRecord.of({"holderIdentity": PEER}, 10).duration_seconds == 10
    assert LeaseRecord.of(None, 10) == LeaseRecord(duration_seconds=10)


def test_no_lease_name_means_no_election() -> None:
    assert from_env({}) is None


def test_the_environment_names_the_lease_its_namespace_and_our_identity() -> None:
    env = {
        "DTJOB_LEADER_ELECTION_LEASE": "dtjob",
        "DTJOB_LEADER_ELECTION_NAMESPACE": "dtjob-system",
        "POD_NAME": "dtjob-7c9-x",
    }
    leadership = from_env(env)
    assert leadership is not None
    assert (leadership.namespace, leadership.name, leadership.identity) == (
        "dtjob-system",
        "dtjob",
        "dtjob-7c9-x",
    )
    assert (leadership.lease_seconds, leadership.renew_deadline_seconds, leadership.retry_seconds) == (
        10,
        7,
        2,
    )
    assert not leadership.acting.is_set()


def test_without_a_pod_name_the_identity_is_host_and_process() -> None:
    leadership = from_env({"DTJOB_LEADER_ELECTION_LEASE": "dtjob", "DTJOB_LEADER_ELECTION_NAMESPACE": "ns"})
    assert leadership is not None
    host, _, pid = leadership.identity.rpartition("-")
    assert host and pid.isdigit()


def test_timings_that_could_let_two_leaders_act_at_once_are_refused() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        Leadership("ns", "dtjob", ME, lease_seconds=10, renew_deadline_seconds=10)
