"""The console subcommands' options: kubectl's names where kubectl has the option (--kubeconfig,
--context, -n, -A). Only argparse here, so that `dtjob --help` stays light."""

from __future__ import annotations

import argparse


def _connection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig", help="the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)"
    )
    parser.add_argument("--context", help="the kubeconfig context (default: the current context)")
    parser.add_argument("-n", "--namespace", help="the namespace (default: the context's, else default)")


def configure_get(parser: argparse.ArgumentParser) -> None:
    _connection(parser)
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="jobs of every namespace")


def configure_describe(parser: argparse.ArgumentParser) -> None:
    _connection(parser)
    parser.add_argument("name", help="the DistributedTrainingJob")


def configure_watch(parser: argparse.ArgumentParser) -> None:
    configure_describe(parser)


def configure_logs(parser: argparse.ArgumentParser) -> None:
    configure_describe(parser)
    parser.add_argument(
        "-f", "--follow", action="store_true", help="follow, across gang restarts, until the job ends"
    )
    parser.add_argument("--attempt", type=int, help="only this attempt (default: the current one)")
    parser.add_argument("--rank", type=int, help="only this rank (default: every rank)")


def configure_check(parser: argparse.ArgumentParser) -> None:
    _connection(parser)
    parser.add_argument(
        "-f",
        "--filename",
        required=True,
        help="the DistributedTrainingJob manifest to check (one YAML document)",
    )
