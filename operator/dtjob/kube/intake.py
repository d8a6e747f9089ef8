"""The progress intake: the HTTP endpoint trainers POST their progress reports to (docs/progress.md).

    POST /v1/progress
    Authorization: Bearer <the pod's projected service account token, audience training.dtjob.io/progress>
    Content-Type: application/json
    {"step": 120, "totalSteps": 1000, "epoch": 2, "loss": 0.31, "samplesPerSecond": 850, ...}

204: taken. 400: the body is not a report (the message names the field). 401: no token, or one the
apiserver does not accept for that audience. 404: the token's pod is not a pod of a job this operator
reads. 429: too many new tokens to review this second (report again later). 503: this replica is a standby (the next try may reach the leader through the Service), or the
apiserver could not check the token.

Who reports is the pod the token is bound to, as the apiserver's TokenReview says: a pod can report
for itself only, and needs no Kubernetes RBAC. A token's review is remembered
until the token expires (projected tokens live an hour), so the apiserver sees one review per pod and
token, not per report; the pod must still be in the operator's pod cache, with the token's uid, for each
report to be taken.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from aiohttp import web
from pydantic import ValidationError

from dtjob.api.errors import describe
from dtjob.core.progress import AUDIENCE, Report
from dtjob.kube.reads import PodIdentity
from dtjob.kube.throttle import TokenBucket

PATH: Final = "/v1/progress"
MAX_BODY_BYTES: Final = 16 * 1024
# A review is remembered until its token expires (the kubelet rotates a projected token at 80% of its
# life), at most this long: one review per pod and token, not per report.
REVIEW_MEMORY_SECONDS: Final = 3600.0
# A token the apiserver refused is refused again for this long without asking (a misconfigured pod
# retrying must not turn into a TokenReview a second).
REFUSAL_MEMORY_SECONDS: Final = 30.0
# New tokens reviewed a second, at most (429 past it: the trainer tries with its next report). Reviews
# share the operator's API rate limit with the passes: made-up tokens from inside the cluster must not
# starve them. 8,000 pods reporting after an operator restart are all reviewed within 7 minutes.
REVIEWS_PER_SECOND: Final = 20.0
REVIEW_BURST: Final = 100
REVIEWS_REMEMBERED: Final = 20_000

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reporter:
    """The pod a report is from, as the operator's pod cache knows it."""

    namespace: str
    job: str
    pod: str
    attempt: int


Lookup = Callable[[PodIdentity], Reporter | None]
"""The pod of a job this operator reads, if the token's pod (name and uid) is one."""
Take = Callable[[Reporter, Report], None]
Review = Callable[[str, str], PodIdentity | None]
"""The apiserver's TokenReview of a token for an audience (Reader.review_token)."""


class Busy(Exception):
    """More new tokens than REVIEWS_PER_SECOND: this one is not reviewed now."""


class Intake:
    def __init__(self, lookup: Lookup, take: Take, acting: Callable[[], bool], review: Review) -> None:
        self._lookup, self._take, self._acting, self._review = lookup, take, acting, review
        self._reviews: OrderedDict[str, tuple[float, PodIdentity | None]] = OrderedDict()
        self._new_tokens = TokenBucket(REVIEWS_PER_SECOND, REVIEW_BURST)
        self._runner: web.AppRunner | None = None

    async def serve(self, port: int, host: str = "0.0.0.0") -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post(PATH, self._report)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        log.info("progress intake listening on %s:%d%s", host, port, PATH)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _report(self, request: web.Request) -> web.Response:
        if not self._acting():
            return web.Response(status=503, text="a standby replica: try again (the leader takes reports)\n")
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return web.Response(
                status=401, text=f"no bearer token (the pod's projected token for {AUDIENCE})\n"
            )
        try:
            identity = await self._identity(token.strip())
        except Busy:
            return web.Response(status=429, text="too many new tokens to check now: report again later\n")
        except Exception as err:  # the apiserver away: the trainer tries again with its next report
            log.warning("could not review a progress reporter's token: %s", err)
            return web.Response(status=503, text="cannot check the token now: try again\n")
        if identity is None:
            return web.Response(status=401, text=f"the token is not valid for audience {AUDIENCE}\n")
        reporter = self._lookup(identity)
        if reporter is None:
            text = f"pod {identity.namespace}/{identity.pod} is not a pod of a job this operator reads\n"
            return web.Response(status=404, text=text)
        try:
            report = Report.model_validate_json(await request.read())
        except ValidationError as error:
            return web.Response(status=400, text=f"not a progress report: {describe(error)}\n")
        self._take(reporter, report)
        return web.Response(status=204)

    async def _identity(self, token: str) -> PodIdentity | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        if (known := self._reviews.get(key)) is not None and known[0] > now:
            return known[1]
        if not self._new_tokens.try_take():
            raise Busy
        identity = await asyncio.to_thread(self._review, token, AUDIENCE)
        memory = (
            min(REVIEW_MEMORY_SECONDS, _lifetime(token)) if identity is not None else REFUSAL_MEMORY_SECONDS
        )
        self._reviews[key] = (now + memory, identity)
        self._reviews.move_to_end(key)
        while len(self._reviews) > REVIEWS_REMEMBERED:
            self._reviews.popitem(last=False)
        return identity


def _lifetime(token: str) -> float:
    """Seconds until a reviewed JWT expires (its `exp` claim; the review vouched for the token)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return max(0.0, float(claims["exp"]) - time.time())
    except (IndexError, ValueError, KeyError, TypeError):
        return 0.0
