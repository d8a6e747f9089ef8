"""The TensorFlow examples as local gangs with the operator's rendered TF_CONFIG (see local_gang)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from dtjob_trainer.environment import DEFAULT_PREEMPTION_BUDGET_SECONDS
from dtjob_trainer.exit_codes import PREEMPTED_CHECKPOINT_SAVED

from dtjob.core.progress import Report
from tests.support.local_gang import RUN_TIMEOUT_S, local_job, rendered_pods, running, scrape, train
from tests.support.local_intake import intake, last_reports, reporting_to

MIN_ACCURACY = 0.93  # what the examples state
EPOCHS = 10  # in the manifests

# Kubernetes' default terminationGracePeriodSeconds (the operator renders none): SIGKILL follows it.
KILL_GRACE_SECONDS = 30.0


def test_multi_worker_mirrored_two_workers_train_to_completion_from_tf_config_reporting_progress(
    tmp_path: Path,
) -> None:
    """Every worker reports to the operator's intake (a local stand-in): its steps to the last, the
    total, and the step of the last backup (BackupAndRestore's, every epoch)."""
    job = local_job("tf-mwms-digits.yaml", tmp_path)
    pods = rendered_pods(job, attempt=0)
    with intake() as (server, url):
        reporting_to(url, pods, tmp_path)
        with running(pods, tmp_path) as gang:
            codes = gang.wait_all(RUN_TIMEOUT_S)
            assert set(codes.values()) == {0}, f"exit codes {codes}\n{gang.logs()}"
            results = {name: pod.result() for name, pod in gang.pods.items()}
    assert sorted(result["task"] for result in results.values()) == ["worker-0", "worker-1"]
    assert {result["epochs_run"] for result in results.values()} == {EPOCHS}
    assert min(result["test_accuracy"] for result in results.values()) >= MIN_ACCURACY
    last = last_reports(server)
    assert set(last) == {pod["metadata"]["name"] for pod in pods}
    for report in map(Report.model_validate, last.values()):
        assert report.total_steps is not None and report.total_steps % EPOCHS == 0, report
        assert report.step == report.total_steps == report.last_checkpoint_step, report
        assert report.loss is not None and report.samples_per_second, report


def test_parameter_server_chief_worker_and_ps_train_to_completion_from_tf_config(tmp_path: Path) -> None:
    job = local_job("tf-ps-digits.yaml", tmp_path)
    with running(rendered_pods(job, attempt=0), tmp_path) as gang:
        chief = gang.pod_named("chief-0")
        assert chief.wait(RUN_TIMEOUT_S) == 0, gang.logs()
        # Worker and parameter server serve until the job ends (the operator then deletes them).
        assert gang.pod_named("worker-0").process.poll() is None, gang.logs()
        assert gang.pod_named("ps-0").process.poll() is None, gang.logs()
    result = chief.result()
    assert result["epochs_run"] == EPOCHS
    assert result["test_accuracy"] >= MIN_ACCURACY
    assert (Path(job["spec"]["output"]["modelDir"]) / "saved_model.pb").is_file()


def test_sigterm_to_a_mwms_worker_backs_up_exits_preempted_and_the_next_attempt_resumes(
    tmp_path: Path,
) -> None:
    job = local_job("tf-mwms-digits.yaml", tmp_path)
    with running(rendered_pods(job, attempt=0), tmp_path) as gang:
        chief = gang.pod_named("worker-0")
        gang.wait_for(lambda: scrape(chief.metrics_port)["dtjob_trainer_epoch"] >= 1, "the second epoch")
        codes, stopped_after = gang.stop_with_sigterm(
            "worker-1", timeout=DEFAULT_PREEMPTION_BUDGET_SECONDS + 30
        )
        messages = [pod.termination_message() for pod in gang.pods.values()]
    assert set(codes.values()) == {PREEMPTED_CHECKPOINT_SAVED}, f"{codes}\n{gang.logs()}"
    # Saved before the kubelet's SIGKILL (the pod's default grace, and GKE Spot's notice). The trainer's own
    # 10 s budget is a target for bench.sigterm_checkpoint: the MWMS gang's collective backup met it alone
    # and took 11.9 and 14.7 s beside the cluster tests on two cores (2026-11-28).
    assert stopped_after < KILL_GRACE_SECONDS
    assert {message["reason"] for message in messages} == {"PreemptedCheckpointSaved"}

    resumed = train(job, attempt=1, workdir=tmp_path)

    # BackupAndRestore restarts `fit` in the epoch it was backed up in, so fewer epochs are left.
    assert max(result["epochs_run"] for result in resumed.values()) < EPOCHS
    assert min(result["test_accuracy"] for result in resumed.values()) >= MIN_ACCURACY


def test_sigterm_to_the_parameter_server_chief_backs_up_its_epoch_and_the_next_attempt_resumes(
    tmp_path: Path,
) -> None:
    job = local_job("tf-ps-digits.yaml", tmp_path)
    chief_backup = Path(job["spec"]["checkpoint"]["path"]) / "backup" / "chief" / "checkpoint"
    with running(rendered_pods(job, attempt=0), tmp_path) as gang:
        chief = gang.pod_named("chief-0")
        gang.wait_for(chief_backup.exists, "the chief's first epoch backup")
        signalled = time.monotonic()
        chief.signal(signal.SIGTERM)
        code = chief.wait(timeout=DEFAULT_PREEMPTION_BUDGET_SECONDS + 30)
        stopped_after = time.monotonic() - signalled
    assert code == PREEMPTED_CHECKPOINT_SAVED, gang.logs()
    assert stopped_after < KILL_GRACE_SECONDS  # as above: 10.2 s beside the cluster tests (2026-11-28)
    assert chief.termination_message()["reason"] == "PreemptedCheckpointSaved"

    with running(rendered_pods(job, attempt=1), tmp_path) as gang:
        chief = gang.pod_named("chief-0")
        assert chief.wait(RUN_TIMEOUT_S) == 0, gang.logs()
    result = chief.result()
    assert result["epochs_run"] < EPOCHS
    assert result["test_accuracy"] >= MIN_ACCURACY
