"""HTTP requests to the operator's endpoints, whatever they answer: (status, body), 0 while nothing serves."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def health(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:  # not serving yet
        return 0, str(err)


def post(url: str, body: Any, bearer: str | None) -> tuple[int, str]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {
        "Content-Type": "application/json",
        **({"Authorization": f"Bearer {bearer}"} if bearer else {}),
    }
    request = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
