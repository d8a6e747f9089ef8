"""Properties of the pure core under generated worlds (tests/support/worlds.py): drawn by Hypothesis, and
walked at random from fixed seeds to show that the worlds reach every path the properties are meant to
check. At every pass:

- the same inputs give the same plan (determinism: the operator can redo any pass);
- the attempt, every restart counter and createdAttempt never go down; total is failures + preemptions
  + hangs + slowRanks (as the API documents it), and every restart moved the attempt;
- a live pod of the current attempt is deleted only when the job is finishing, suspending, past its
  deadline or taken off Kueue's admission, or when an elastic gang replaces it with its replacement
  in the status, never in the middle of a run;
- no pod is created for an attempt other than the current one (a spare is of none), none twice, and
  never a pod that exists;
- a finished job stays finished.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dtjob.core.names import ATTEMPT_LABEL, SPARE_LABEL
from dtjob.core.plan import Plan
from dtjob.core.status.codec import status_patch
from dtjob.core.workload_match import holds_quota
from tests.support.builders import merged
from tests.support.worlds import GANGS, Choose, job_of, passes, plan_of

FINISHED = {"Succeeded", "Failed"}


def drawn(draw: Callable[[st.SearchStrategy[Any]], Any]) -> Choose[Any]:
    return lambda options: draw(st.sampled_from(options))


@st.composite
def jobs(draw: st.DrawFn, kind: str | None = None) -> dict[str, Any]:
    return job_of(drawn(draw), kind)


def reached(job: dict[str, Any], plan: Plan) -> set[str]:
    """The paths a pass took (REACHED names those the generated worlds must reach)."""
    old = (job.get("status") or {}).get("restarts") or {}
    new = ((plan.status or {}).get("restarts")) or old
    paths = {f"restart: {c}" for c in COUNTED if new.get(c, 0) > old.get(c, 0)}
    if any(r.labels.get(SPARE_LABEL, "") is None for r in plan.relabel):
        paths.add("a spare takes a rank")
    if any(SPARE_LABEL in p["metadata"]["labels"] for p in plan.create):
        paths.add("a spare created")
    if plan.create and job["metadata"].get("labels"):
        paths.add("an admitted gang created")
    conditions = {
        c["type"]: c.get("reason") for c in (plan.status or {}).get("conditions", []) if c["status"] == "True"
    }
    paths |= {f"{t}: {r}" for t, r in conditions.items() if t in ("Failed", "Succeeded", "SlowRank")}
    if plan.workload is not None:
        paths.add("workload created")
    if plan.workload_status is not None:
        paths.add("workload status")
    return paths


COUNTED = ("failures", "preemptions", "hangs", "slowRanks", "total", "replacements", "preflightFailures")


def counters(status: dict[str, Any]) -> tuple[int, ...]:
    restarts = status.get("restarts") or {}
    return (
        status.get("attempt", 1),
        status.get("createdAttempt") or 0,
        *(restarts.get(c, 0) for c in COUNTED),
    )


def check_pass(job: dict[str, Any], children: list[dict[str, Any]], plan: Plan) -> dict[str, Any]:
    old = job.get("status") or {}
    new = plan.status if plan.status is not None else old
    attempt = old.get("attempt", 1)
    assert all(a <= b for a, b in zip(counters(old), counters(new), strict=True)), (old, new)
    restarts = new.get("restarts") or {}
    causes = ("failures", "preemptions", "hangs", "slowRanks")
    assert restarts.get("total", 0) == sum(restarts.get(c, 0) for c in causes), (
        f"total is not the sum: {restarts}"
    )
    assert new.get("attempt", 1) - 1 >= restarts.get("total", 0), "a restart that did not move the attempt"
    if old.get("phase") in FINISHED:
        assert new.get("phase") == old.get("phase"), "a finished job stays finished"

    live = {c["metadata"]["uid"]: c for c in children if not c["metadata"].get("deletionTimestamp")}
    for delete in plan.delete:
        pod = live.get(delete.uid or "")
        if pod is not None and pod["metadata"]["labels"].get(ATTEMPT_LABEL) == str(attempt):
            # Queued: Kueue evicted the gang, or never admitted it (a pod made around the queue). A member
            # an elastic gang replaces goes while the others train on, its replacement in the status.
            replaced = {(r.get("pod"), r.get("uid")) for r in (new.get("elastic") or {}).get("replaced", [])}
            assert (
                (delete.name, delete.uid) in replaced
                or new.get("phase")
                in FINISHED
                | {
                    "Suspended",
                    "Queued",
                }
                or ((job["spec"].get("runPolicy") or {}).get("suspend"))
            ), f"deleted {delete.name} of the current attempt while the job is {new.get('phase')}"

    names = [p["metadata"]["name"] for p in plan.create]
    assert len(names) == len(set(names)), "a pod created twice in one pass"
    present = {  # a spare is of no attempt until it takes a rank
        c["metadata"]["name"]
        for c in children
        if c["metadata"]["labels"].get(ATTEMPT_LABEL, str(attempt)) == str(attempt)
    }
    for pod in plan.create:
        labels = pod["metadata"]["labels"]
        assert labels.get(ATTEMPT_LABEL) == str(attempt) or SPARE_LABEL in labels, "a pod for another attempt"
        assert pod["metadata"]["name"] not in present, f"{pod['metadata']['name']} exists already"
    if plan.create:
        assert new.get("attempt", 1) == attempt and new.get("phase") not in FINISHED | {"Suspended"}
    return new


def live_through(job: dict[str, Any], choose: Choose[Any]) -> set[str]:
    """The job through chosen passes, each checked (check_pass); the paths they took."""
    paths: set[str] = set()
    for one in passes(job, choose):
        again = plan_of(one.job, one.children, one.nodes, one.now, one.workload, one.ledger)
        assert again == (one.plan, one.asked), "the same inputs gave another plan"
        paths |= reached(one.job, one.plan)
        rewritten = one.plan.workload_spec is not None and "podSets" in one.plan.workload_spec["spec"]
        assert not (rewritten and holds_quota(one.workload)), "a Workload holding quota rewritten"
        stored = one.job.get("status") or {}
        decided = check_pass(one.job, one.children, one.plan)
        assert merged(stored, status_patch(stored, decided)) == (one.plan.status or stored), (
            "the stored status is not the one the pass decided"
        )
    return paths


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs(), data=st.data())
def test_a_job_through_generated_passes_keeps_the_cores_promises(
    job: dict[str, Any], data: st.DataObject
) -> None:
    for path in live_through(job, drawn(data.draw)):
        event(path)  # pytest --hypothesis-show-statistics counts them


# Every kind of restart and counter, spares, elastic replacements, Kueue's admission and the ends: a
# property the worlds never reach is not checked.
WALKS = 60
REACHED = {
    *(f"restart: {c}" for c in COUNTED if c != "total"),
    "a spare created", "a spare takes a rank", "an admitted gang created", "workload created", "workload status",
    "Failed: BackoffLimitExceeded", "Failed: MaxPreemptionsExceeded", "Failed: DeadlineExceeded",
    "Failed: WorkloadFinished", "Succeeded: RankZeroSucceeded", "SlowRank: SlowRank",
}  # fmt: skip


def test_the_generated_worlds_reach_every_path_the_properties_are_meant_to_check() -> None:
    """Each kind of job through seeded uniform random walks of the same worlds (Hypothesis favours the
    simplest choices, which rarely reach the long paths): together they reach every path in REACHED, and
    each walk is checked as the property test checks it."""
    seen: set[str] = set()
    for kind in GANGS:
        choose = random.Random(f"worlds of {kind}").choice
        for _ in range(WALKS):
            seen |= live_through(job_of(choose, kind), choose)
    assert seen >= REACHED, f"never reached: {sorted(REACHED - seen)}"


# What a status holds: no nulls (dump_status leaves them out).
JSON = st.recursive(
    st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
    max_leaves=10,
)
STATUSES = st.dictionaries(st.sampled_from("abcd"), JSON, max_size=4)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stored=STATUSES, new=STATUSES)
def test_the_status_patch_leaves_exactly_the_decided_status_on_the_server(
    stored: dict[str, Any], new: dict[str, Any]
) -> None:
    assert merged(stored, status_patch(stored, new)) == new
