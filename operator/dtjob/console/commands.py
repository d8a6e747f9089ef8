"""The console's subcommands run (their options are in dtjob.console.options), with one way of failing:
a message on stderr and exit 1."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import UTC, datetime

import urllib3
from kubernetes.client import ApiException
from kubernetes.config import ConfigException
from rich.console import Console

from dtjob.console import views
from dtjob.console.cluster import NotFound, Reader, connect
from dtjob.console.live import watch
from dtjob.console.logs import Choice, follow, show

# Output to a pipe or a file is not cut to a terminal's width (as kubectl's is not).
UNCUT_WIDTH = 1000


def _consoles() -> tuple[Console, Console]:
    out = Console(highlight=False, markup=False)
    if not out.is_terminal:
        out.width = UNCUT_WIDTH
    return out, _errors()


def _errors() -> Console:
    return Console(stderr=True, highlight=False, markup=False, soft_wrap=True)


def _reader(args: argparse.Namespace) -> Reader:
    return Reader(connect(args.kubeconfig, args.context, args.namespace))


def _get(args: argparse.Namespace) -> int:
    reader, (out, _) = _reader(args), _consoles()
    jobs = reader.jobs(args.all_namespaces)
    if not jobs:
        where = "any namespace" if args.all_namespaces else f'namespace "{reader.namespace}"'
        out.print(f"No DistributedTrainingJobs in {where}.")
        return 0
    out.print(views.jobs_table(jobs, datetime.now(UTC), with_namespace=args.all_namespaces))
    return 0


def _describe(args: argparse.Namespace) -> int:
    reader, (out, _) = _reader(args), _consoles()
    job = reader.job(args.name)
    out.print(views.describe(job, reader.pods(args.name), reader.events(job), datetime.now(UTC)))
    return 0


def _watch(args: argparse.Namespace) -> int:
    return watch(_reader(args), args.name, *_consoles())


def _logs(args: argparse.Namespace) -> int:
    choice = Choice(attempt=args.attempt, rank=args.rank)
    return (follow if args.follow else show)(_reader(args), args.name, choice, *_consoles())


def _check(args: argparse.Namespace) -> int:
    from dtjob.console.check import check  # the operator's core and Kubernetes edge: only this command

    out, _ = _consoles()
    return check(args, out.print)


def reporting_failures(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A missing job, a bad kubeconfig or an unreachable apiserver: one line on stderr, exit 1."""

    def guarded(args: argparse.Namespace) -> int:
        errors = _errors()
        try:
            return run(args)
        except NotFound as err:
            errors.print(f"Error: {err}")
        except ConfigException as err:
            errors.print(f"Error: kubeconfig: {err}")
        except ApiException as err:
            errors.print(f"Error: the apiserver answered {err.status} {err.reason}: {_message(err)}")
        except urllib3.exceptions.MaxRetryError as err:
            errors.print(f"Error: cannot reach the apiserver: {err.reason}")
        except KeyboardInterrupt:
            return 130
        return 1

    return guarded


def _message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body or "")["message"])
    except (TypeError, ValueError, KeyError):
        return str(err.body or "")


get = reporting_failures(_get)
describe = reporting_failures(_describe)
watch_job = reporting_failures(_watch)
logs = reporting_failures(_logs)
check = reporting_failures(_check)
