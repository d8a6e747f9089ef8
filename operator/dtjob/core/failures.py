"""How a failed member failed, in a form two attempts can be compared by, and whether they failed alike.
Pure.

A pod's termination message is the end of its log (FallbackToLogsOnError): for a Python trainer, the
traceback of the error that killed it (each line prefixed with "[rankN]: " by torch.distributed). Its last exception line ("ValueError: ...") and innermost frame
("train.py:42") say what failed and where; memory addresses are masked, as they change from run to run.
Two consecutive attempts that failed with the same line from the same place, with the same exit code,
at about the same step fail deterministically: a third will too (RepeatedFailure, docs/fault-tolerance.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from dtjob.api import FailureSignature, LastRestart
from dtjob.core.observed import PodView

# At most this many distinct ways the members of one attempt failed are kept in the status: the one that
# ended first, and the peers it took down (a gang of hundreds fails in a few ways, not hundreds).
KEPT_SIGNATURES: Final = 4
ERROR_CHARS: Final = 256
# Steps "about the same": the progress step is the last one a report carried, so it lags the real one.
STEP_SLACK: Final = 10
STEP_SLACK_FRACTION: Final = 0.1

_TRACEBACK: Final = "Traceback (most recent call last):"
# A launcher's own traceback when its child failed (torchrun): the same in every failure, so not the error.
LAUNCHER_ERRORS: Final = ("ChildFailedError",)
_FRAME: Final = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+)')
_ADDRESS: Final = re.compile(r"0x[0-9a-fA-F]+")
# torch.distributed prefixes each line of a rank's uncaught error with its rank.
_RANK: Final = re.compile(r"^\[rank\d+\]: ?")


def signature(pod: PodView) -> FailureSignature:
    """What `pod`'s end says: its error line and where it was raised (a Python traceback's last exception
    and innermost frame; without a traceback, the message's last line), its reason and exit code."""
    lines = [_RANK.sub("", line).rstrip() for line in pod.message.splitlines() if line.strip()]
    tracebacks = _tracebacks(lines)
    own = [found for found in tracebacks if not any(name in found[0] for name in LAUNCHER_ERRORS)]
    said = [line.strip() for line in lines if any(c.isalnum() for c in line)]
    if own:
        error, where = own[-1]
    elif tracebacks or any(name in line for line in said for name in LAUNCHER_ERRORS):
        error, where = "", None  # only the launcher's words: the trainer's own error was cut off
    else:
        error, where = (said[-1] if said else ""), None
    return FailureSignature(
        reason=pod.reason or str(pod.state),
        exit_code=pod.exit_code,
        error=_ADDRESS.sub("0x…", error)[:ERROR_CHARS],
        where=where,
    )


def _tracebacks(lines: list[str]) -> list[tuple[str, str | None]]:
    """Each Python traceback in `lines`: its exception line and innermost frame (file:line)."""
    found: list[tuple[str, str | None]] = []
    for start in (i for i, line in enumerate(lines) if line.strip() == _TRACEBACK):
        frames = lines[start + 1 :]
        end = next((i for i, line in enumerate(frames) if not line[:1].isspace()), None)
        if end is None:
            continue
        innermost = [m for line in frames[:end] if (m := _FRAME.match(line))]
        where = f"{innermost[-1]['file'].rsplit('/', 1)[-1]}:{innermost[-1]['line']}" if innermost else None
        found.append((frames[end].strip(), where))
    return found


def signatures(pods: Iterable[PodView]) -> tuple[FailureSignature, ...]:
    """The distinct ways `pods` failed, in their order (the first to end first), at most KEPT_SIGNATURES."""
    distinct: list[FailureSignature] = []
    for pod in pods:
        if (found := signature(pod)) not in distinct:
            distinct.append(found)
    return tuple(distinct[:KEPT_SIGNATURES])


def repeated(
    previous: LastRestart | None, failed: Sequence[FailureSignature], step: int | None
) -> FailureSignature | None:
    """How this attempt failed exactly as the one before it did (`previous`, the restart that started
    this attempt: it keeps failures only when a failure caused it), at about the same `step`; None when it
    did not. Both steps unknown (no progress reports) is the same step, but then only an error line can
    say the failure was the same one."""
    if previous is None:
        return None
    if previous.step is None and step is None:
        return next((s for s in failed if s in previous.failures and s.error), None)
    if not _close(previous.step, step):
        return None
    return next((s for s in failed if s in previous.failures), None)


def _close(before: int | None, now: int | None) -> bool:
    if before is None or now is None:
        return False
    return abs(before - now) <= max(STEP_SLACK, STEP_SLACK_FRACTION * max(before, now))


def describe(failure: FailureSignature) -> str:
    where = f" at {failure.where}" if failure.where else ""
    code = f", exit code {failure.exit_code}" if failure.exit_code is not None else ""
    return f"{failure.error or failure.reason}{where} ({failure.reason}{code})"
