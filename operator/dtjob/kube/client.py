"""One configured API client for the operator process (in-cluster, else KUBECONFIG)."""

from __future__ import annotations

from functools import cache

from kubernetes import client, config


@cache
def api_client() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def core() -> client.CoreV1Api:
    return client.CoreV1Api(api_client())


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client())


def coordination() -> client.CoordinationV1Api:
    return client.CoordinationV1Api(api_client())
