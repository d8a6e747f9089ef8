"""What jobs, their pods and their Events look like at a terminal, built from the objects the apiserver
returns (plain dicts) with no I/O. Read leniently: a field a newer operator adds is ignored, a missing one
shows as '-', so the views work whatever version of the operator wrote the status, or none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from dtjob.api import FRAMEWORK_ROLES, Framework, parse_timestamp
from dtjob.core.names import ATTEMPT_LABEL, REPLICA_INDEX_LABEL, ROLE_LABEL, TRAINER_CONTAINER

Obj = Mapping[str, Any]

TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed", "Invalid"})
PHASE_STYLES: Final = {
    "Succeeded": "green",
    "Failed": "bold red",
    "Invalid": "bold red",
    "Restarting": "yellow",
    "Running": "cyan",
}
# Conditions that only repeat the phase: the views show the phase and, for an ending, its message.
PHASE_CONDITIONS: Final = frozenset(
    {"Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended", "Invalid", "Queued", "Admitted"}
)
RESTART_KINDS: Final = (
    ("failures", "failure"),
    ("preemptions", "preemption"),
    ("hangs", "hang"),
    ("slowRanks", "slow rank"),
    ("requeues", "requeue"),
)
# Colours a rank's log prefix takes, in turn (rich's standard names: readable on dark and light).
RANK_COLOURS: Final = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")


def _add_row(table: Table, *cells: RenderableType | str) -> None:
    """Strings as plain text: messages and log lines hold brackets that rich would read as markup."""
    table.add_row(*(Text(cell) if isinstance(cell, str) else cell for cell in cells))


def _status(job: Obj) -> Obj:
    return job.get("status") or {}


def duration(seconds: float) -> str:
    """kubectl's short form: 45s, 5m12s, 47m, 5h12m, 30h, 5d3h, 12d."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 600:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if s < 3 * 3600:
        return f"{minutes}m"
    if s < 8 * 3600:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if s < 2 * 86400:
        return f"{hours}h"
    if s < 8 * 86400:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def age(since: str | None, now: datetime) -> str:
    if not since:
        return "-"
    return duration((now - parse_timestamp(since)).total_seconds())


def phase(job: Obj) -> str:
    return str(_status(job).get("phase") or "Pending")


def styled_phase(job: Obj) -> Text:
    name = phase(job)
    return Text(name, style=PHASE_STYLES.get(name, "dim"))


def restarts(job: Obj) -> str:
    """'0', or the total with its causes: '3 (2 failures, 1 preemption)'; an elastic gang's members
    replaced without a restart after them: '0 (1 member replaced)'."""
    counts = _status(job).get("restarts") or {}
    parts = [
        f"{counts[key]} {noun}{'' if counts[key] == 1 else 's'}"
        for key, noun in RESTART_KINDS
        if counts.get(key)
    ]
    if replaced := int(counts.get("replacements") or 0):
        parts.append(f"{replaced} member{'' if replaced == 1 else 's'} replaced")
    total = sum(int(counts.get(key) or 0) for key, _ in RESTART_KINDS)
    return f"{total} ({', '.join(parts)})" if parts else str(total)


def progress(job: Obj) -> str:
    """'120/1380 (8.7%)', 'step 120' when the total is unknown, '-' before the first report (or for a
    report from an earlier attempt)."""
    status = _status(job)
    report = status.get("progress")
    if not report or report.get("attempt") != status.get("attempt", 1):
        return "-"
    total, percent = report.get("totalSteps"), report.get("percent")
    if total:
        return f"{report['step']}/{total}" + (f" ({percent:g}%)" if percent is not None else "")
    return f"step {report['step']}"


def loss(job: Obj) -> str:
    value = (_status(job).get("progress") or {}).get("loss")
    return "-" if value is None else f"{value:.4g}"


def jobs_table(jobs: Sequence[Obj], now: datetime, with_namespace: bool) -> Table:
    """`dtjob get`: one row a job."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["NAMESPACE"] * with_namespace + [
        "NAME", "PHASE", "READY", "ATTEMPT", "RESTARTS", "PROGRESS", "LOSS", "AGE",
    ]  # fmt: skip
    for column in columns:
        table.add_column(column, no_wrap=True)
    for job in sorted(jobs, key=lambda j: (j["metadata"].get("namespace", ""), j["metadata"]["name"])):
        status, meta = _status(job), job["metadata"]
        _add_row(
            table,
            *[meta.get("namespace", "")] * with_namespace,
            meta["name"],
            styled_phase(job),
            str(status.get("replicasReady") or "-"),
            str(status.get("attempt", 1)),
            restarts(job),
            progress(job),
            loss(job),
            age(meta.get("creationTimestamp"), now),
        )
    return table


# --- pods -----------------------------------------------------------------------------------------------


def member(pod: Obj) -> str:
    """The pod's place in the gang, as logs and tables name it: 'worker-1'."""
    labels = pod["metadata"].get("labels") or {}
    return f"{str(labels.get(ROLE_LABEL, '?')).lower()}-{labels.get(REPLICA_INDEX_LABEL, '?')}"


def attempt_of(pod: Obj) -> int:
    label = (pod["metadata"].get("labels") or {}).get(ATTEMPT_LABEL, "0")
    return int(label) if str(label).isdigit() else 0


def rank(job: Obj, pod: Obj) -> int | None:
    """The pod's rank: the framework's roles in order, then the index (dtjob.core.gang). None for a
    pod the spec does not account for."""
    labels = pod["metadata"].get("labels") or {}
    try:
        roles = FRAMEWORK_ROLES[Framework(job["spec"]["framework"])]
        counts = {r["role"]: int(r.get("count", 1)) for r in job["spec"]["replicas"]}
        role, index = labels[ROLE_LABEL], int(labels[REPLICA_INDEX_LABEL])
    except (KeyError, ValueError):
        return None
    if role not in counts or role not in roles:
        return None
    return sum(counts.get(r, 0) for r in roles[: roles.index(role)]) + index


def in_rank_order(job: Obj, pods: Sequence[Obj]) -> list[Obj]:
    def key(pod: Obj) -> tuple[int, int, str]:
        r = rank(job, pod)
        return attempt_of(pod), 1 << 30 if r is None else r, pod["metadata"]["name"]

    return sorted(pods, key=key)


def trainer_container(pod: Obj) -> str:
    """The container the operator wired (the one named 'trainer', else the first)."""
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    return TRAINER_CONTAINER if TRAINER_CONTAINER in names or not names else names[0]


def pod_state(pod: Obj) -> str:
    """What the trainer container is doing, as `kubectl get pods` would say: Running, Pending
    (Unschedulable), ContainerCreating, Error (exit 1), Completed, Terminating."""
    status, meta = pod.get("status") or {}, pod["metadata"]
    if meta.get("deletionTimestamp"):
        return "Terminating"
    container = trainer_container(pod)
    for c in status.get("containerStatuses") or []:
        if c.get("name") != container:
            continue
        state = c.get("state") or {}
        if "terminated" in state:
            ended = state["terminated"]
            return f"{ended.get('reason') or 'Terminated'} (exit {ended.get('exitCode')})"
        if "waiting" in state:
            return str(state["waiting"].get("reason") or "Waiting")
        if "running" in state:
            return "Running"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"Pending ({condition.get('reason') or 'unscheduled'})"
    return str(status.get("phase") or "Pending")


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _container_restarts(pod: Obj) -> int:
    return sum(
        int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


def pods_table(job: Obj, pods: Sequence[Obj], now: datetime) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("POD", "RANK", "ATTEMPT", "STATE", "READY", "RESTARTS", "NODE", "AGE"):
        table.add_column(column, no_wrap=True)
    for pod in in_rank_order(job, pods):
        r = rank(job, pod)
        _add_row(
            table,
            pod["metadata"]["name"],
            "-" if r is None else str(r),
            str(attempt_of(pod)),
            pod_state(pod),
            "yes" if _ready(pod) else "no",
            str(_container_restarts(pod)),
            str((pod.get("spec") or {}).get("nodeName") or "-"),
            age(pod["metadata"].get("creationTimestamp"), now),
        )
    return table


# --- describe -------------------------------------------------------------------------------------------


def _fields(rows: Sequence[tuple[str, RenderableType | str | None]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for label, value in rows:
        if value is not None and value != "":
            _add_row(grid, label, value)
    return grid


def _section(title: str, body: RenderableType) -> Group:
    return Group(Text(""), Text(title, style="bold underline"), body)


def _progress_fields(job: Obj, now: datetime) -> Table:
    report = _status(job).get("progress") or {}
    step_seconds, throughput = report.get("stepSeconds"), report.get("samplesPerSecond")
    return _fields(
        [
            ("Step", progress(job)),
            ("Epoch", _opt(report.get("epoch"))),
            ("Loss", loss(job) if report.get("loss") is not None else None),
            ("Samples/s", f"{throughput:.1f}" if throughput is not None else None),
            ("Step time", f"{step_seconds:.3g}s" if step_seconds is not None else None),
            ("Last checkpoint", _opt(report.get("lastCheckpointStep"), "step {}")),
            ("ETA", _opt(report.get("eta"))),
            (
                "Step advanced",
                f"{age(report.get('updatedAt'), now)} ago" if report.get("updatedAt") else None,
            ),
        ]
    )


def _opt(value: Any, form: str = "{}") -> str | None:
    return None if value is None else form.format(value)


def _restart_fields(job: Obj, now: datetime) -> Table:
    last = _status(job).get("lastRestart") or {}
    rows: list[tuple[str, RenderableType | str | None]] = [("Restarts", restarts(job))]
    if last:
        rows += [
            ("Last restart", f"{last.get('reason', '?')}, {age(last.get('time'), now)} ago"
             + (f" at step {last['step']}" if last.get("step") is not None else "")),
            ("Why", last.get("message")),
        ]  # fmt: skip
        for failure in last.get("failures") or []:
            how = f"{failure.get('reason', '?')}" + (
                f" (exit {failure['exitCode']})" if failure.get("exitCode") is not None else ""
            )
            where = f" at {failure['where']}" if failure.get("where") else ""
            rows.append(("Failed with", f"{how}: {failure.get('error', '')}{where}"))
    avoided = _status(job).get("avoidedNodes") or []
    if avoided:
        rows.append(("Avoided nodes", ", ".join(avoided)))
    rows += _goodput_rows(_status(job).get("goodput") or {})
    return _fields(rows)


# status.goodput.lastRestart's phases, as `dtjob describe` names them.
RESTART_PHASES: Final = (
    ("detection", "detectionSeconds"),
    ("teardown", "teardownSeconds"),
    ("start", "startSeconds"),
    ("restore", "restoreSeconds"),
    ("lost work", "lostWorkSeconds"),
)
# Where the ended attempt stopped and the new one resumed: the lost work's reason.
RESTART_STEPS: Final = (("stopped at", "stoppedAtStep"), ("resumed from", "resumedFromStep"))


def _goodput_rows(goodput: Obj) -> list[tuple[str, RenderableType | str | None]]:
    """What the job's wall time went to (status.goodput, docs/fault-tolerance.md#goodput-what-restarts-cost)."""
    if not goodput:
        return []
    trained = f"{goodput.get('productiveSeconds', 0):.1f}s of {goodput.get('wallSeconds', 0):.1f}s trained"
    percent = goodput.get("percent")
    rows: list[tuple[str, RenderableType | str | None]] = [
        ("Goodput", f"{percent}% ({trained})" if percent is not None else None)
    ]
    cost = goodput.get("lastRestart") or {}
    phases = ", ".join(
        f"{name} {cost[key]:.1f}s" for name, key in RESTART_PHASES if cost.get(key) is not None
    )
    if phases:
        total = cost.get("totalSeconds")
        steps = [f"{name} step {cost[key]}" for name, key in RESTART_STEPS if cost.get(key) is not None]
        rows.append(
            (
                "Restart cost",
                (f"{total:.1f}s: " if total is not None else "so far: ") + "; ".join([phases, *steps]),
            )
        )
    return rows


def _network_fields(job: Obj) -> Table | None:
    status = _status(job)
    nccl, preflight = status.get("nccl") or {}, status.get("preflight") or {}
    rows: list[tuple[str, RenderableType | str | None]] = []
    if nccl:
        rows.append(
            ("NCCL", f"{nccl.get('profile')} (attempt {nccl.get('attempt')}) {nccl.get('reason', '')}")
        )
    if preflight:
        bandwidth = preflight.get("busBandwidthGbps")
        rows.append(
            (
                "Preflight",
                f"{'passed' if preflight.get('passed') else 'FAILED'} (attempt {preflight.get('attempt')})"
                + (f", bus bandwidth {bandwidth:g} GB/s" if bandwidth is not None else "")
                + (f": {preflight['message']}" if preflight.get("message") else ""),
            )
        )
    return _fields(rows) if rows else None


def conditions_table(job: Obj, now: datetime) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("TYPE", "STATUS", "REASON", "AGE"):
        table.add_column(column, no_wrap=True)
    table.add_column("MESSAGE", overflow="fold")
    for c in _status(job).get("conditions") or []:
        _add_row(
            table,
            c.get("type", "?"),
            c.get("status", "?"),
            c.get("reason", ""),
            age(c.get("lastTransitionTime"), now),
            one_line(c.get("message", "")),
        )
    return table


def events_table(events: Sequence[Obj], now: datetime, last: int = 12) -> Table:
    """The latest Events about the job, oldest first (as `kubectl describe`)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("AGE", "TYPE", "REASON"):
        table.add_column(column, no_wrap=True)
    table.add_column("MESSAGE", overflow="fold")

    def when(event: Obj) -> str:
        return str(
            event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
        )

    for event in sorted(events, key=when)[-last:]:
        _add_row(
            table,
            age(when(event), now),
            event.get("type", ""),
            event.get("reason", ""),
            event.get("message", ""),
        )
    return table


def describe(job: Obj, pods: Sequence[Obj], events: Sequence[Obj], now: datetime) -> Group:
    """`dtjob describe`: the job's state, why it last restarted, its conditions, pods and Events."""
    meta, status = job["metadata"], _status(job)
    header = _fields(
        [
            ("Name", meta["name"]),
            ("Namespace", meta.get("namespace")),
            ("Framework", job.get("spec", {}).get("framework")),
            ("Phase", styled_phase(job)),
            ("Attempt", str(status.get("attempt", 1))),
            ("Ready", status.get("replicasReady")),
            ("Queue", (meta.get("labels") or {}).get("kueue.x-k8s.io/queue-name")),
            ("Created", f"{meta.get('creationTimestamp')} ({age(meta.get('creationTimestamp'), now)} ago)"),
            ("Started", status.get("startTime")),
            ("Completed", status.get("completionTime")),
        ]
    )
    parts: list[RenderableType] = [header]
    if status.get("progress"):
        parts.append(_section("Progress", _progress_fields(job, now)))
    parts.append(_section("Restarts", _restart_fields(job, now)))
    if (network := _network_fields(job)) is not None:
        parts.append(_section("Network", network))
    conditions = conditions_table(job, now) if status.get("conditions") else Text("none", style="dim")
    parts.append(_section("Conditions", conditions))
    parts.append(_section("Pods", pods_table(job, pods, now) if pods else Text("none", style="dim")))
    parts.append(_section("Events", events_table(events, now) if events else Text("none", style="dim")))
    return Group(*parts)


# --- watch ----------------------------------------------------------------------------------------------


def _true_conditions(job: Obj) -> dict[str, Obj]:
    return {c["type"]: c for c in _status(job).get("conditions") or [] if c.get("status") == "True"}


def one_line(message: str) -> str:
    """A message that carries a log tail (a failure's traceback) as one line: its first and last lines."""
    lines = [line.strip(" :") for line in message.splitlines() if line.strip(" :")]
    if len(lines) <= 1:
        return lines[0] if lines else ""
    return f"{lines[0].removesuffix('...').rstrip(' :')} ... {lines[-1]}"


def happenings(before: Obj | None, after: Obj) -> list[str]:
    """What changed between two versions of a job that a person watching it wants a line for: the phase
    (with the ending's message), a new attempt (with why the gang restarted), a condition such as
    Unschedulable or SlowRank coming or going."""
    lines: list[str] = []
    now_phase, now_attempt = phase(after), _status(after).get("attempt", 1)
    conditions = _true_conditions(after)
    if before is None:
        lines.append(f"{now_phase}, attempt {now_attempt}")
    else:
        if now_attempt != _status(before).get("attempt", 1):
            last = _status(after).get("lastRestart") or {}
            why = f": {last.get('reason')}: {one_line(last.get('message', ''))}" if last else ""
            lines.append(f"attempt {now_attempt} began{why}".rstrip(": "))
        if now_phase != phase(before):
            ending = conditions.get(now_phase, {}).get("message") if now_phase in TERMINAL_PHASES else None
            lines.append(f"{phase(before)} -> {now_phase}" + (f": {one_line(ending)}" if ending else ""))
    earlier = _true_conditions(before) if before is not None else {}
    for kind, condition in conditions.items():
        if kind in PHASE_CONDITIONS:
            continue
        if kind not in earlier or earlier[kind].get("message") != condition.get("message"):
            lines.append(f"{kind}: {one_line(condition.get('message', ''))}")
    lines += [
        f"{kind} cleared" for kind in earlier if kind not in conditions and kind not in PHASE_CONDITIONS
    ]
    return lines


def time_left(job: Obj) -> str | None:
    """Training time left as of the trainers' last report (its ETA less the report's time: a line that
    says it changes only with the report); None without one from this attempt, or once the job ended."""
    report = _status(job).get("progress") or {}
    if progress(job) == "-" or not report.get("eta") or phase(job) in TERMINAL_PHASES:
        return None
    return duration((parse_timestamp(report["eta"]) - parse_timestamp(report["updatedAt"])).total_seconds())


def progress_line(job: Obj) -> str:
    """One line of a job's state, for a log of the watch where no live view can be drawn."""
    left, step = time_left(job), progress(job).removeprefix("step ")  # not "step step 9" without a total
    return (
        f"{phase(job)}, attempt {_status(job).get('attempt', 1)}, ready {_status(job).get('replicasReady') or '-'}"
        f", step {step}, loss {loss(job)}{f', {left} left' if left else ''}, restarts {restarts(job)}"
    )


def log_lines(before: Obj | None, after: Obj) -> list[str]:
    """What a watch without a live view prints for a new version of a job: a line a happening, then
    the progress line when it changed."""
    lines = happenings(before, after)
    if before is None or progress_line(before) != progress_line(after):
        lines.append(progress_line(after))
    return lines


def watch_frame(job: Obj, seen: Sequence[tuple[str, str]], now: datetime) -> Panel:
    """`dtjob watch`'s live view: the job's state with a bar for its steps, and the latest happenings
    (time, line)."""
    status = _status(job)
    report = status.get("progress") or {}
    rows: list[tuple[str, RenderableType | str | None]] = [
        ("Phase", styled_phase(job)),
        ("Attempt", str(status.get("attempt", 1))),
        ("Ready", status.get("replicasReady") or "-"),
        ("Step", progress(job)),
        ("Loss", loss(job)),
        ("ETA", report.get("eta") if progress(job) != "-" and phase(job) not in TERMINAL_PHASES else None),
        ("Restarts", restarts(job)),
    ]
    total = report.get("totalSteps")
    if total and progress(job) != "-":
        rows.insert(4, ("", ProgressBar(total=float(total), completed=float(report["step"]), width=40)))
    body: list[RenderableType] = [_fields(rows)]
    if seen:
        log = Table.grid(padding=(0, 1))
        log.add_column(style="dim", no_wrap=True)
        log.add_column(overflow="fold")
        for moment, line in seen[-8:]:
            _add_row(log, moment, line)
        body += [Text(""), log]
    meta = job["metadata"]
    title = f"{meta.get('namespace')}/{meta['name']}  ({age(meta.get('creationTimestamp'), now)})"
    return Panel(Group(*body), title=title, title_align="left", expand=False)


def log_prefix(job: Obj, pod: Obj) -> Text:
    """A log line's label: the attempt and the member, coloured by rank ('[attempt 2 worker-1] ')."""
    r = rank(job, pod)
    colour = RANK_COLOURS[(r or 0) % len(RANK_COLOURS)]
    return Text(f"[attempt {attempt_of(pod)} {member(pod)}] ", style=colour)
