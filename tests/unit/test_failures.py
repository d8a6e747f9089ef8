"""How a failed pod failed, and whether two attempts failed alike (dtjob.core.failures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtjob.api import FailureSignature, LastRestart
from dtjob.core.failures import describe, repeated, signature, signatures
from dtjob.core.observed import PodState, PodView

TORCHRUN_LOG = Path(__file__).parent / "data" / "torchrun-child-failed.log"

CHAINED = """\
step 29: loss 0.41
Traceback (most recent call last):
  File "/app/data.py", line 12, in batch
    return next(self.it)
           ^^^^^^^^^^^^^
StopIteration

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/app/train.py", line 88, in <module>
    main()
  File "/app/train.py", line 61, in main
    loss = step(model, batch(loader))
  File "/app/model.py", line 7, in step
    raise RuntimeError(f"tensor at {hex(id(x))} is on the wrong device")
RuntimeError: tensor at 0x7f3a2c1b9e50 is on the wrong device
"""


def failed(message: str, exit_code: int | None = 1, reason: str = "Error") -> PodView:
    return PodView("job-worker-0", "uid", None, 0, 1, PodState.FAILED, reason, message, exit_code)


def sig(error: str, where: str | None = "train.py:9", exit_code: int = 1) -> FailureSignature:
    return FailureSignature(reason="Error", exit_code=exit_code, error=error, where=where)


def test_a_traceback_gives_its_last_exception_line_and_innermost_frame_with_addresses_masked() -> None:
    assert signature(failed(CHAINED)) == FailureSignature(
        reason="Error",
        exit_code=1,
        error="RuntimeError: tensor at 0x… is on the wrong device",
        where="model.py:7",
    )


def test_the_rank_prefix_torch_distributed_puts_on_each_line_is_not_part_of_the_traceback() -> None:
    # As the DDP example's rank 1 ended in tests/e2e/test_repeated_failure.py (torch 2.15, 2026-11-25).
    log = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/opt/dtjob/examples/dtjob_examples/torch_digits.py", line 164, in run
[rank1]:     _faults(args, session, context.rank, env.attempt)
[rank1]:   File "/opt/dtjob/examples/dtjob_examples/torch_digits.py", line 106, in _faults
[rank1]:     raise ValueError(f"rank {rank} fails after step {step} (--fail-at-step)")
[rank1]: ValueError: rank 1 fails after step 30 (--fail-at-step)
"""
    assert signature(failed(log)) == sig(
        "ValueError: rank 1 fails after step 30 (--fail-at-step)", "torch_digits.py:106"
    )


def test_a_torchrun_log_gives_the_childs_error_not_the_launchers() -> None:
    log = "\n".join(line for line in TORCHRUN_LOG.read_text().splitlines() if not line.startswith("# "))
    assert signature(failed(log)) == sig("ValueError: bad batch at step 30", "boom.py:2")
    # The kubelet's tail of the same log: the child's traceback is cut, and the launcher's says nothing
    # of the error (the same ChildFailedError ends every torchrun failure).
    after_the_child = log[log.index("\nE11") :]
    inside_the_launchers_traceback = log[log.index("call last):", log.index("\nE11")) :]
    for tail in (after_the_child, inside_the_launchers_traceback):
        assert "ValueError" not in tail and signature(failed(tail)) == sig("", None), tail


def test_without_a_traceback_the_last_line_is_the_error_and_without_a_message_there_is_none() -> None:
    assert signature(failed("epoch 1\nloss is NaN\n=====\n\n")) == sig("loss is NaN", None)
    assert signature(failed("", 137, "OOMKilled")) == FailureSignature(reason="OOMKilled", exit_code=137)


def test_the_distinct_ways_a_gang_failed_are_kept_in_order_and_capped() -> None:
    pods = [failed("a"), failed("b"), failed("a"), *(failed(str(n)) for n in range(5))]
    assert [s.error for s in signatures(pods)] == ["a", "b", "0", "1"]


BOOM = sig("ValueError: boom")
PEER = sig("RuntimeError: Connection closed by peer", "distributed.py:1")
AFTER_FAILURE = LastRestart(reason="PodFailed", time="2030-01-01T12:00:00Z", step=300, failures=[BOOM, PEER])


@pytest.mark.parametrize(
    ("previous", "failed_now", "step", "same"),
    [
        pytest.param(AFTER_FAILURE, [BOOM], 300, BOOM, id="the same error at the same step"),
        pytest.param(AFTER_FAILURE, [PEER, BOOM], 327, PEER, id="any way it failed, within 10% of the step"),
        pytest.param(AFTER_FAILURE, [BOOM], 340, None, id="a step further on"),
        pytest.param(AFTER_FAILURE, [BOOM], None, None, id="no step known now"),
        pytest.param(AFTER_FAILURE, [sig("ValueError: boom", "train.py:10")], 300, None, id="raised elsewhere"),
        pytest.param(AFTER_FAILURE, [sig("ValueError: boom", exit_code=2)], 300, None, id="another exit code"),
        pytest.param(AFTER_FAILURE, [sig("ValueError: bang")], 300, None, id="another error"),
        pytest.param(AFTER_FAILURE.model_copy(update={"step": None}), [BOOM], None, BOOM,
                     id="no steps known, the same error line"),
        pytest.param(LastRestart(reason="PodFailed", time="2030-01-01T12:00:00Z", failures=[sig("", None)]),
                     [sig("", None)], None, None, id="no steps known and nothing said"),
        pytest.param(LastRestart(reason="PodFailed", time="2030-01-01T12:00:00Z", step=8, failures=[sig("", None)]),
                     [sig("", None)], 9, sig("", None), id="nothing said, at the same step"),
        pytest.param(LastRestart(reason="Preempted", time="2030-01-01T12:00:00Z", step=300), [BOOM], 300, None,
                     id="after a preemption"),
        pytest.param(None, [BOOM], 300, None, id="the first attempt"),
    ],
)  # fmt: skip
def test_repeated(
    previous: LastRestart | None,
    failed_now: list[FailureSignature],
    step: int | None,
    same: FailureSignature | None,
) -> None:
    assert repeated(previous, failed_now, step) == same


def test_describe_says_what_where_and_how() -> None:
    assert describe(BOOM) == "ValueError: boom at train.py:9 (Error, exit code 1)"
    assert (
        describe(FailureSignature(reason="OOMKilled", exit_code=137))
        == "OOMKilled (OOMKilled, exit code 137)"
    )
