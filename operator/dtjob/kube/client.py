"""One configured API client for the operator process (in-cluster, else KUBECONFIG).

Every call has a deadline. The official client waits forever by default, and a request whose packets a
partition drops (no reset, no close) would then hold a pass, and its place among the concurrent passes,
for the kernel's TCP retransmission timeout (about 15 minutes). A call may name a longer one (a watch).
"""

from __future__ import annotations

import os
import socket
from functools import cache
from importlib import metadata
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from kubernetes import client, config

# (connect, read) seconds: the apiserver answers a request in milliseconds to seconds; its own limit
# for a non-watch request is 60 s (--request-timeout).
REQUEST_TIMEOUT: Final = (10.0, 60.0)
# The apiserver sends every watch that allows bookmarks a BOOKMARK event each minute, busy or idle. A watch
# silent for longer is stalled (a half-open connection a partition or a middlebox left): reconnect it.
# Kopf's watches do the same after 70 s (settings.watching.inactivity_timeout).
WATCH_SILENCE_SECONDS: Final = 70.0
MUTATING: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class DeadlinedApiClient(client.ApiClient):
    """An ApiClient whose calls time out after REQUEST_TIMEOUT unless they say otherwise. A write given a
    deadline in seconds (a number, not a (connect, read) pair: the fenced writes, kube/gate.py) gives it to
    the apiserver as well (its `timeout` parameter): a write the apiserver has not committed by then, slow
    in an admission webhook or in etcd, is abandoned there, not landed late."""

    def call_api(
        self,
        method: str,
        url: str,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        timeout = _request_timeout or REQUEST_TIMEOUT
        if method in MUTATING and isinstance(timeout, int | float):
            url = _with_server_timeout(url, timeout)
        return super().call_api(method, url, header_params, body, post_params, _request_timeout=timeout)


def _with_server_timeout(url: str, seconds: float) -> str:
    """The URL with the apiserver's own deadline for the request (a Go duration; whole milliseconds, at
    least one: the apiserver reads 0 as its default)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "timeout"]
    query.append(("timeout", f"{max(1, int(seconds * 1000))}ms"))
    return urlunsplit(parts._replace(query=urlencode(query)))


# Where api_client() reads a kubeconfig from, outside a cluster: KUBECONFIG's current context unless a
# command says otherwise (use_kubeconfig).
_KUBECONFIG: dict[str, str | None] = {}


def use_kubeconfig(config_file: str | None, context: str | None) -> None:
    """Read this kubeconfig file and context (None: kubectl's defaults) outside a cluster: `dtjob check`
    takes kubectl's --kubeconfig and --context. Before the first api_client()."""
    _KUBECONFIG.update(config_file=config_file, context=context)


@cache
def api_client() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(**_KUBECONFIG)
    configuration = client.Configuration.get_default_copy()
    # One quick retry (a kept-alive connection the apiserver had closed); past that a pass fails and backs
    # off per job, and the readers have their own ladder: urllib3's default of three made each request
    # four connection attempts at once against an apiserver that is away.
    configuration.retries = 1
    api = DeadlinedApiClient(configuration)
    # The replica in the user agent, for audit logs: which of two replicas wrote what. (The field manager
    # is what comes before the first "/", the same for every replica.)
    api.user_agent = f"dtjob-operator/{_version()} ({identity()})"
    return api


def _version() -> str:
    try:
        return metadata.version("dtjob")
    except metadata.PackageNotFoundError:  # run from a source tree (PYTHONPATH), not installed
        return "0"


def identity() -> str:
    """This replica's name: its pod's (the chart sets POD_NAME), else host and process."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def core() -> client.CoreV1Api:
    return client.CoreV1Api(api_client())


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())


def apps() -> client.AppsV1Api:
    return client.AppsV1Api(api_client())


def coordination() -> client.CoordinationV1Api:
    return client.CoordinationV1Api(api_client())


def networking() -> client.NetworkingV1Api:
    return client.NetworkingV1Api(api_client())


def resource() -> client.ResourceV1Api:
    return client.ResourceV1Api(api_client())
