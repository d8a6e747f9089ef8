"""The writes the core decides for a corpus of generated worlds, recorded, so that a change meant to keep
behaviour (a reorganisation) can show that it did: `check` reruns the corpus and names every pass whose
writes differ from the record; `show` prints one walk's writes whole, to explain a difference (run it in
a worktree of the recorded commit too, and diff).

The corpus: WALKS seeded random walks of each kind of job in tests/support/worlds.py (a fixed gang,
InPlace with spares, elastic, in a Kueue queue, watched for hangs and slow ranks), each a series of passes.
A pass's writes are everything the operator would execute or read again: pods created, objects applied,
relabels, deletes, the status patch, Events, the job's deletion, the Workload's writes, the reads asked for
and the requeue. The record keeps a digest per pass (RECORD); the commit that last changed the operator
when it was made is in its header.

    python -m hack.plan_corpus record     # at the commit behaviour is measured against
    python -m hack.plan_corpus check      # after the change: 0 when every pass writes what it did
    python -m hack.plan_corpus show queued 7
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dtjob.core.plan import Plan
from dtjob.core.status.codec import status_patch
from dtjob.core.world import Needs
from tests.support.worlds import GANGS, job_of, passes

RECORD = Path(__file__).parent / "data" / "plan-corpus.json"
WALKS = 60


def writes(job: dict[str, Any], plan: Plan, asked: Needs | None) -> dict[str, Any]:
    """What the operator does with a plan, and the reads the core asked for first, in a form that does not
    depend on how the core shapes them (as the record's Plan did, when it carried the read-again flags)."""
    whole = dataclasses.asdict(plan)
    if whole["job_labels"] is None:  # a field later than the record: absent unless used
        del whole["job_labels"]
    stored = job.get("status") or {}
    whole["status"] = status_patch(stored, plan.status) if plan.status is not None else None
    asked = asked or Needs()
    whole |= {
        "read_networks": asked.networks,
        "read_priority": asked.priority,
        "confirm_missing": asked.listing,
    }
    return whole


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def walks() -> Iterator[tuple[str, int, list[dict[str, Any]]]]:
    """(kind, walk, each pass's writes) for the whole corpus, in its fixed order."""
    for kind in GANGS:
        choose = random.Random(f"corpus of {kind}").choice
        for walk in range(WALKS):
            yield (
                kind,
                walk,
                [writes(one.job, one.plan, one.asked) for one in passes(job_of(choose, kind), choose)],
            )


def record() -> int:
    # The commit that last changed the operator: the behaviour recorded is its.
    git = ["git", "log", "-1", "--format=%h", "--", "operator"]
    commit = subprocess.run(git, capture_output=True, text=True, cwd=Path(__file__).parent.parent).stdout
    corpus = {f"{kind} {walk}": [digest(w) for w in each] for kind, walk, each in walks()}
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps({"commit": commit.strip(), "walks": corpus}, indent=0) + "\n")
    print(
        f"recorded {sum(map(len, corpus.values()))} passes of {len(corpus)} walks at {commit.strip()}: {RECORD}"
    )
    return 0


def check() -> int:
    recorded = json.loads(RECORD.read_text())
    differ = same = 0
    for kind, walk, each in walks():
        was = recorded["walks"].get(f"{kind} {walk}", [])
        now = [digest(w) for w in each]
        if was == now:
            same += len(now)
            continue
        first = next(
            (i for i, (a, b) in enumerate(zip(was, now, strict=False)) if a != b), min(len(was), len(now))
        )
        differ += 1
        print(f"differs: {kind} walk {walk} from pass {first} ({len(was)} passes recorded, {len(now)} now)")
    print(f"{same} passes of walks as recorded at {recorded['commit']}; {differ} walks differ")
    return 1 if differ else 0


def show(kind: str, walk: int) -> int:
    for k, w, each in walks():
        if (k, w) == (kind, walk):
            json.dump(each, sys.stdout, indent=1, sort_keys=True, default=str)
            print()
            return 0
    print(
        f"no walk {walk} of kind {kind!r} (kinds: {', '.join(GANGS)}; walks 0-{WALKS - 1})", file=sys.stderr
    )
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.plan_corpus", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("record", help="record the corpus's digests at this commit")
    sub.add_parser("check", help="compare the corpus with the record")
    one = sub.add_parser("show", help="print one walk's writes")
    one.add_argument("kind", choices=GANGS)
    one.add_argument("walk", type=int)
    args = parser.parse_args(argv)
    if args.command == "record":
        return record()
    if args.command == "check":
        return check()
    return show(args.kind, args.walk)


if __name__ == "__main__":
    sys.exit(main())
