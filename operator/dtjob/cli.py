"""The `dtjob` command. Subcommands live in one registry: add one with `Subcommand(...)` in SUBCOMMANDS."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dtjob import crd, docs
from dtjob.console import options


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _generated_file(default: str) -> Callable[[argparse.ArgumentParser], None]:
    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--output", type=Path, default=Path(default), help=f"where to write (default {default})"
        )
        parser.add_argument(
            "--check", action="store_true", help="exit 1 if the file differs from what would be written"
        )

    return configure


def _write_or_check(render: Callable[[], str], command: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        path: Path = args.output
        text = render()
        if args.check:
            if not path.is_file() or path.read_text() != text:
                print(f"{path} is stale: run `dtjob {command}`", file=sys.stderr)
                return 1
            return 0
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
        return 0

    return run


def _configure_run(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    scope.add_argument(
        "-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)"
    )
    parser.add_argument(
        "--liveness", metavar="URL", help="serve /healthz here, e.g. http://0.0.0.0:8081/healthz"
    )
    parser.add_argument("--verbose", action="store_true", help="debug logging")


def _run_operator(args: argparse.Namespace) -> int:
    import kopf  # only the operator needs Kopf; `dtjob crd` and `dtjob docs` stay light

    import dtjob.runtime  # noqa: F401  (registers the Kopf hooks)
    from dtjob.settings import NAMESPACES_VARIABLE

    os.environ[NAMESPACES_VARIABLE] = ",".join(args.namespace)  # what the operator's readers watch

    kopf.configure(verbose=args.verbose)
    # No Kopf peering: replicas share a Lease of their own (dtjob.kube.leader) and only its holder acts.
    kopf.run(
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
    )
    return 0


def _console(command: str) -> Callable[[argparse.Namespace], int]:
    """A console command, imported when run (rich and the Kubernetes client are not needed before)."""

    def run(args: argparse.Namespace) -> int:
        chosen: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module("dtjob.console.commands"), command
        )
        return chosen(args)

    return run


# `kubectl dtj ...` (the kubectl-dtj plugin) offers these: the read-only views.
CONSOLE_SUBCOMMANDS: list[Subcommand] = [
    Subcommand(
        "get",
        "list jobs: phase, attempt, restarts by cause, progress",
        options.configure_get,
        _console("get"),
    ),
    Subcommand(
        "describe",
        "a job's state, last restart, conditions, pods and Events",
        options.configure_describe,
        _console("describe"),
    ),
    Subcommand(
        "watch",
        "a live view of a job until it ends (exit 0 when it succeeds)",
        options.configure_watch,
        _console("watch_job"),
    ),
    Subcommand(
        "logs",
        "every rank's log, labelled; -f follows across gang restarts",
        options.configure_logs,
        _console("logs"),
    ),
    Subcommand(
        "check",
        "what a job would get on this cluster, before it is applied: the network chosen and why, every "
        "refusal of its pods (a server-side dry run)",
        options.configure_check,
        _console("check"),
    ),
]

SUBCOMMANDS: list[Subcommand] = [
    *CONSOLE_SUBCOMMANDS,
    Subcommand(
        "crd",
        "generate the CustomResourceDefinition",
        _generated_file(crd.CRD_FILE),
        _write_or_check(crd.render_yaml, "crd"),
    ),
    Subcommand(
        "docs",
        "generate the API reference",
        _generated_file(docs.DOCS_FILE),
        _write_or_check(docs.render_markdown, "docs"),
    ),
    Subcommand("run", "run the operator", _configure_run, _run_operator),
]


def _dispatch(prog: str, description: str, subcommands: list[Subcommand], argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    commands = parser.add_subparsers(dest="command", required=True)
    for sub in subcommands:
        sub.configure(commands.add_parser(sub.name, help=sub.help))
    args = parser.parse_args(argv)
    chosen = next(sub for sub in subcommands if sub.name == args.command)
    return chosen.run(args)


def main(argv: Sequence[str] | None = None) -> int:
    return _dispatch("dtjob", "DistributedTrainingJob operator and tools", SUBCOMMANDS, argv)


def kubectl_plugin(argv: Sequence[str] | None = None) -> int:
    """`kubectl dtj`: kubectl runs the kubectl-dtj executable on PATH with the arguments after `dtj`."""
    return _dispatch("kubectl dtj", "DistributedTrainingJobs at a terminal", CONSOLE_SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
