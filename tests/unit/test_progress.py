"""Progress reports: the ledger, status.progress, and hang detection in whole passes (reconcile)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from dtjob.api import DistributedTrainingJobSpec
from dtjob.core.frameworks import Gang
from dtjob.core.names import JobRef
from dtjob.core.plan import Event
from dtjob.core.progress import (
    Phase,
    Report,
    judge,
    received,
    slow_ranks,
    stall_message,
    summary,
    wake_delay,
)
from dtjob.core.render import render_children, render_pod
from tests.support.builders import NOW, SHARED_CHECKPOINTS, manifest, pods_of, running, service_of
from tests.support.plan import after, plan_for
from tests.support.progress import DEADLINE, JOB, MASTER, WORKER, at, reports


def running_job(job: dict[str, Any] = JOB) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    started = after(job, plan_for(job, [], NOW))
    children = [service_of(job), *(running(p) for p in pods_of(job).values())]
    return after(started, plan_for(started, children, NOW)), children


def test_a_report_names_the_field_it_gets_wrong_and_refuses_unknown_ones() -> None:
    with pytest.raises(ValidationError, match="step"):
        Report.model_validate({"step": -1})
    with pytest.raises(ValidationError, match="stepz"):
        Report.model_validate({"step": 1, "stepz": 2})
    with pytest.raises(ValidationError, match="loss"):
        Report.model_validate_json('{"step": 1, "loss": NaN}')
    assert (
        Report.model_validate({"step": 3, "totalSteps": 10, "phase": "checkpointing"}).phase
        == Phase.CHECKPOINTING
    )


def test_the_summary_is_rank_zeros_report_with_percent_and_an_eta_from_the_step_time() -> None:
    ledger = reports(
        (0, WORKER, {"step": 41}),
        (5, MASTER, {"step": 40, "totalSteps": 400, "epoch": 1, "loss": 0.123456, "stepSeconds": 0.5,
                     "samplesPerSecond": 1234.5678, "lastCheckpointStep": 20}),
    )  # fmt: skip
    assert ledger is not None
    progress = summary(ledger, MASTER)
    assert (progress.step, progress.total_steps, progress.percent, progress.epoch) == (40, 400, 10.0, 1)
    assert (progress.loss, progress.samples_per_second, progress.last_checkpoint_step) == (0.1235, 1235.0, 20)
    assert progress.updated_at == "2030-01-01T12:00:05Z"
    assert progress.eta == "2030-01-01T12:03:05Z"  # one report: 360 steps x the trainer's 0.5 s
    # Before rank 0 reports, the most advanced pod stands in.
    assert summary(reports((0, WORKER, {"step": 7})), MASTER).step == 7  # type: ignore[arg-type]


def test_the_eta_follows_the_attempts_average_pace_not_the_last_few_steps() -> None:
    # 100 steps in 50 s, a save included; the trainer's last steps alone say 0.1 s a step.
    ledger = reports(
        (0, MASTER, {"step": 0, "totalSteps": 300, "phase": "starting"}),
        (20, MASTER, {"step": 10, "totalSteps": 300, "stepSeconds": 0.1}),  # after a 20 s compile
        (70, MASTER, {"step": 110, "totalSteps": 300, "stepSeconds": 0.1}),
    )
    assert ledger is not None
    assert summary(ledger, MASTER).eta == "2030-01-01T12:02:45Z"  # 190 steps x 0.5 s after 70 s


def test_a_report_of_an_older_attempt_is_dropped_and_a_newer_attempt_starts_a_fresh_ledger() -> None:
    ledger = reports((0, MASTER, {"step": 9}), attempt=2)
    assert received(ledger, 1, MASTER, Report(step=50), at(1)) is None
    newer = received(ledger, 3, WORKER, Report(step=1), at(2))
    assert newer is not None and (newer.attempt, list(newer.pods)) == (3, [WORKER])


def test_the_clock_starts_at_the_first_step_and_stops_while_a_checkpoint_is_saved() -> None:
    starting = reports((0, MASTER, {"step": 0, "phase": "starting"}))
    assert judge(starting, None, 1, DEADLINE, at(1000)).stall is None  # compiling is not a hang
    stepping = reports((0, MASTER, {"step": 1}), (10, MASTER, {"step": 5}), (10, WORKER, {"step": 5}))
    assert judge(stepping, None, 1, DEADLINE, at(30)).left == pytest.approx(40)
    saving = received(stepping, 1, MASTER, Report(step=5, phase=Phase.CHECKPOINTING), at(20))
    assert judge(saving, None, 1, DEADLINE, at(1000)).stall is None  # a long save is not a hang
    saved = received(saving, 1, MASTER, Report(step=5), at(500))
    assert judge(saved, None, 1, DEADLINE, at(530)).left == pytest.approx(30)  # afresh from the save's end
    stall = judge(saved, None, 1, DEADLINE, at(560)).stall
    assert stall is not None and stall.step == 5


def test_a_pod_that_fell_behind_is_named_and_a_gang_stopped_together_is_said_to_be() -> None:
    ledger = reports(
        (0, MASTER, {"step": 1}), (0, WORKER, {"step": 1}),
        (10, MASTER, {"step": 2}), (12, WORKER, {"step": 2}),
        (20, WORKER, {"step": 3, "message": "in the data loader"}), (21, MASTER, {"step": 3}),
        (30, MASTER, {"step": 4}),  # the worker never reports step 4
    )  # fmt: skip
    stall = judge(ledger, None, 1, DEADLINE, at(95)).stall
    assert stall is not None and stall.behind is not None
    assert (stall.since, stall.step, stall.behind.pod, stall.reporting) == (at(30), 4, WORKER, 2)
    assert stall_message(stall, DEADLINE, at(95)).endswith(
        f"last step 4 at 2030-01-01T12:00:30Z; pod {WORKER} fell behind first, at step 3 (in the data loader)"
    )
    # Data-parallel: every rank stops at the same step, and which one hangs cannot be told from steps
    # (nor from when each report came: each pod reports on its own clock). No pod is blamed.
    together = received(ledger, 1, WORKER, Report(step=4), at(31))
    stall = judge(together, None, 1, DEADLINE, at(95)).stall
    assert stall is not None and stall.behind is None
    assert stall_message(stall, DEADLINE, at(95)).endswith("; all 2 reporting pods stopped at that step")


def test_without_reports_a_new_leader_judges_from_the_recorded_progress_of_the_attempt() -> None:
    recorded = summary(reports((0, MASTER, {"step": 12})), MASTER)  # type: ignore[arg-type]
    assert judge(None, recorded, 1, DEADLINE, at(59)).left == pytest.approx(1)
    assert judge(None, recorded, 1, DEADLINE, at(61)).stall is not None
    assert judge(None, recorded, 2, DEADLINE, at(61)) == judge(None, None, 2, DEADLINE, at(61))


def test_a_pass_writes_the_progress_and_requeues_for_the_deadline() -> None:
    job, children = running_job()
    ledger = reports((0, MASTER, {"step": 3, "totalSteps": 30}), (1, WORKER, {"step": 3}))
    plan = plan_for(job, children, at(10), ledger=ledger)
    assert plan.status is not None
    assert plan.status["progress"] == {
        "attempt": 1, "step": 3, "totalSteps": 30, "percent": 10.0, "updatedAt": "2030-01-01T12:00:00Z"
    }  # fmt: skip
    assert plan.requeue_after == pytest.approx(51)  # the worker's first report, at 1 s, is the latest
    quiet = plan_for(after(job, plan), children, at(11), ledger=ledger)
    assert quiet.status is None  # nothing new: nothing written


def test_a_hung_gang_restarts_as_its_own_cause_and_fails_past_max_hang_restarts() -> None:
    job, children = running_job()
    ledger = reports((0, MASTER, {"step": 3}), (0, WORKER, {"step": 2}))
    plan = plan_for(job, children, at(61), ledger=ledger)
    assert plan.status is not None
    assert plan.status["restarts"] == {"failures": 0, "preemptions": 0, "hangs": 1, "total": 1}
    assert plan.status["lastRestart"]["reason"] == "ProgressDeadlineExceeded"
    message = (
        "no step advance for 61s (progressDeadlineSeconds 60) while every member ran: last step 3 at "
        f"2030-01-01T12:00:00Z; pod {WORKER} fell behind first, at step 2"
    )
    assert plan.events == [Event("Warning", "ProgressDeadlineExceeded", f"attempt 2: {message}")]
    assert plan.requeue_after == 0.0  # no back-off: the next pass tears the hung gang down
    restarted = after(job, plan)
    second = [service_of(JOB), *(running(p) for p in pods_of(JOB, attempt=2).values())]
    ledger = reports((100, MASTER, {"step": 5}), attempt=2)
    failed = plan_for(restarted, second, at(161), ledger=ledger)
    assert failed.status is not None and failed.status["phase"] == "Failed"
    assert failed.status["conditions"][-1]["message"].startswith("maxHangRestarts (1) reached; last: no step")


def test_no_hang_is_judged_while_a_member_is_not_running_or_without_the_policy() -> None:
    job, children = running_job()
    stalled = reports((0, MASTER, {"step": 3}))
    pending = [child for child in children if child["metadata"]["name"] != WORKER]
    pending.append(pods_of(JOB)[WORKER])  # created, not running yet
    waiting = plan_for(job, pending, at(600), ledger=stalled).status
    assert waiting is not None and (waiting["attempt"], waiting["restarts"]["total"]) == (1, 0)
    plain = manifest(("Master", 1), ("Worker", 1), checkpoint=SHARED_CHECKPOINTS)
    plain_job, plain_children = running_job(plain)
    plan = plan_for(plain_job, plain_children, at(600), ledger=stalled)
    assert plan.status is not None and plan.status["restarts"]["total"] == 0  # progress is shown all the same
    assert plan.status["progress"]["step"] == 3


def test_pods_get_the_intake_url_and_a_token_for_its_audience_only_when_the_operator_has_one() -> None:
    plan = plan_for(JOB, [], NOW, progress_url="http://dtjob-progress.dtjob-system.svc:8082/v1/progress")
    pod = plan.create[0]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["DTJ_PROGRESS_URL"] == "http://dtjob-progress.dtjob-system.svc:8082/v1/progress"
    assert env["DTJ_PROGRESS_TOKEN_FILE"] == "/var/run/secrets/training.dtjob.io/progress/token"
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "dtj-progress-token")
    assert volume["projected"]["sources"] == [
        {
            "serviceAccountToken": {
                "audience": "training.dtjob.io/progress",
                "expirationSeconds": 3600,
                "path": "token",
            }
        }
    ]
    without = next(c for c in render_children(JOB, 1) if c["kind"] == "Pod")
    assert "DTJ_PROGRESS_URL" not in {e["name"] for e in without["spec"]["containers"][0]["env"]}


def test_a_progress_field_the_trainer_stops_sending_is_gone_from_the_stored_status() -> None:
    job, children = running_job()
    timed = reports((0, MASTER, {"step": 3, "totalSteps": 30, "stepSeconds": 0.5, "loss": 1.0}))
    stored = after(job, plan_for(job, children, at(1), ledger=timed))
    assert {"eta", "loss", "stepSeconds"} <= set(stored["status"]["progress"])
    plain = received(timed, 1, MASTER, Report(step=4), at(2))  # a script that reports the step alone
    stored = after(stored, plan_for(stored, children, at(3), ledger=plain))  # the merge patch, applied
    assert stored["status"]["progress"] == {"attempt": 1, "step": 4, "updatedAt": "2030-01-01T12:00:02Z"}


@pytest.mark.parametrize(
    ("own", "slow"),
    [
        pytest.param({"a": 0.004, "b": 0.030}, ["b"], id="two ranks, one of them slow"),
        pytest.param({"a": 0.004, "b": 0.005, "c": 0.004, "d": 0.031}, ["d"], id="the rest's median"),
        pytest.param({"a": 0.004, "b": 0.012}, [], id="3x, but 8 ms: noise of a millisecond step"),
        pytest.param({"a": 1.0, "b": 1.4}, [], id="40% above: not well above"),
        pytest.param({"a": 1.0, "b": 1.6}, ["b"], id="60% above a second"),
        pytest.param({"a": 0.004}, None, id="one rank: nothing to compare"),
    ],
)  # fmt: skip
def test_a_rank_whose_own_step_time_stays_well_above_the_rest_is_slow(
    own: dict[str, float], slow: list[str] | None
) -> None:
    ledger = reports(*((0, pod, {"step": 9, "ownStepSeconds": seconds}) for pod, seconds in own.items()))
    found = slow_ranks(ledger, 1)
    assert (None if found is None else [rank.pod for rank in found]) == slow
    assert slow_ranks(ledger, 2) is None  # another attempt's reports say nothing of this one


def test_a_slow_rank_is_named_with_its_node_in_a_condition_and_an_event_until_it_is_not() -> None:
    job, children = running_job()
    ledger = reports(
        (0, MASTER, {"step": 5, "ownStepSeconds": 0.004}), (0, WORKER, {"step": 5, "ownStepSeconds": 0.05})
    )
    plan = plan_for(job, children, at(10), ledger=ledger)
    assert plan.status is not None
    slow = next(c for c in plan.status["conditions"] if c["type"] == "SlowRank")
    said = (f"pod {WORKER} on node gpu-node-1 takes 0.05s of its own work a step against 0.004s for the "
            "rest of the gang (12x): the whole gang waits for it in every all-reduce")  # fmt: skip
    assert (slow["status"], slow["reason"], slow["message"]) == ("True", "SlowRank", said)
    assert Event("Warning", "SlowRank", said) in plan.events
    recovered = received(ledger, 1, WORKER, Report(step=9, own_step_seconds=0.005), at(20))
    plan = plan_for(after(job, plan), children, at(21), ledger=recovered)
    assert plan.status is not None
    slow = next(c for c in plan.status["conditions"] if c["type"] == "SlowRank")
    assert (slow["status"], slow["reason"]) == ("False", "NoSlowRank")
    # A job that never had a slow rank carries no such condition.
    quiet = plan_for(job, children, at(10), ledger=recovered)
    assert quiet.status is not None and all(c["type"] != "SlowRank" for c in quiet.status["conditions"])


def test_a_rank_slow_for_slow_rank_restart_seconds_restarts_the_gang_off_its_node() -> None:
    job, children = running_job(
        manifest(("Master", 1), ("Worker", 1), runPolicy={"slowRankRestartSeconds": 60})
    )
    ledger = reports(
        (0, MASTER, {"step": 5, "ownStepSeconds": 0.004}), (0, WORKER, {"step": 5, "ownStepSeconds": 0.05})
    )
    found = plan_for(job, children, at(10), ledger=ledger)  # SlowRank turns True: the clock starts
    assert found.requeue_after is not None and found.requeue_after <= 60
    job = after(job, found)
    waiting = plan_for(job, children, at(69), ledger=ledger)
    assert not waiting.delete and waiting.requeue_after is not None and waiting.requeue_after <= 1
    moved = plan_for(job, children, at(71), ledger=ledger)
    assert moved.status is not None
    assert moved.status["restarts"] == {"failures": 0, "preemptions": 0, "slowRanks": 1, "total": 1}
    assert (moved.status["attempt"], moved.status["avoidedNodes"]) == (2, ["gpu-node-1"])
    message = moved.status["lastRestart"]["message"]
    assert moved.status["lastRestart"]["reason"] == "SlowRank" and message.startswith(
        f"pod {WORKER} on node gpu-node-1 stayed slow for 60s (0.05s of its own work a step against 0.00s"
    ), message
    assert Event("Warning", "SlowRank", f"attempt 2: {message}") in moved.events
    # The new attempt is not judged yet: the ended attempt's slow rank is not carried over to it.
    slow = next(c for c in moved.status["conditions"] if c["type"] == "SlowRank")
    assert (slow["status"], slow["reason"]) == ("False", "NoSlowRank"), slow
    job = after(job, moved)
    stale = plan_for(job, children, at(72))  # the next pass deletes the old attempt's pods
    assert {d.name for d in stale.delete if d.kind == "Pod"} == {MASTER, WORKER}
    # The next attempt's pods, created once the old ones are gone, are kept off the node.
    restarted = plan_for(after(job, stale), [service_of(job)], at(73))
    avoid = {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-node-1"]}
    for pod in restarted.create:
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [{"matchFields": [avoid]}], pod["metadata"]["name"]
    assert {pod["metadata"]["name"] for pod in restarted.create} == {MASTER, WORKER}


def test_no_slow_rank_restart_without_the_opt_in_or_past_three_avoided_nodes() -> None:
    ledger = reports(
        (0, MASTER, {"step": 5, "ownStepSeconds": 0.004}), (0, WORKER, {"step": 5, "ownStepSeconds": 0.05})
    )
    for run_policy, avoided in (({}, []), ({"slowRankRestartSeconds": 60}, ["a", "b", "c"])):
        job, children = running_job(manifest(("Master", 1), ("Worker", 1), runPolicy=run_policy))
        job["status"]["avoidedNodes"] = avoided
        job = after(job, plan_for(job, children, at(10), ledger=ledger))
        late = plan_for(job, children, at(1000), ledger=ledger)
        assert not late.delete and (late.status is None or late.status["attempt"] == 1), run_policy


def test_avoided_nodes_are_kept_out_of_every_node_selector_term_of_the_template() -> None:
    job = manifest(("Worker", 1))
    terms = [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}], "matchFields": []},
    ]
    template = job["spec"]["replicas"][0]["template"]["spec"]
    template["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    }
    spec = DistributedTrainingJobSpec.model_validate(job["spec"])
    gang = replace(Gang.of(JobRef.of(job), spec, 1), avoided_nodes=("n1", "n2"))
    pod = render_pod(gang, gang.members[0])
    rendered = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    avoid = {"key": "metadata.name", "operator": "NotIn", "values": ["n1", "n2"]}
    assert rendered["nodeSelectorTerms"] == [
        {**terms[0], "matchFields": [avoid]},
        {**terms[1], "matchFields": [avoid]},
    ]
    assert (
        template["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        == terms
    )


def test_a_report_wakes_its_job_at_once_when_news_or_due_and_otherwise_at_the_end_of_the_interval() -> None:
    assert wake_delay(news=False, woken=None, now=100.0, interval=30.0) == 0.0  # the job's first report
    assert wake_delay(news=True, woken=95.0, now=100.0, interval=30.0) == 0.0  # a new pod or phase
    assert wake_delay(news=False, woken=60.0, now=100.0, interval=30.0) == 0.0  # the interval is over
    assert wake_delay(news=False, woken=95.0, now=100.0, interval=30.0) == 25.0  # owed, not dropped
