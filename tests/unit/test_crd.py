"""The CRD's schema revision: pinned to the generated schema, and how an installed CRD compares."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob import crd

# Each revision's fingerprint. A change of the generated schema fails here until SCHEMA_REVISION is bumped
# and its fingerprint added: an operator upgrades (or refuses) a CRD of an older revision only.
FINGERPRINTS = {
    1: "915db321f8fe540f",
    2: "ab2c0ba43dfbb752",
    3: "8724693b27604454",
    4: "18083f109f4bbbef",
    5: "1d94f55e16056bd4",
    6: "5ad4d6bf47c01f1e",
}


def test_the_schema_revision_changes_with_the_generated_schema() -> None:
    got = crd.fingerprint(crd.custom_resource_definition())
    assert FINGERPRINTS.get(crd.SCHEMA_REVISION) == got, (
        f"the CRD schema changed: bump SCHEMA_REVISION to {crd.SCHEMA_REVISION + 1} and add {got!r} here"
    )
    assert len(set(FINGERPRINTS.values())) == len(FINGERPRINTS)


def installed(revision: str | None) -> dict[str, Any]:
    annotations = {crd.REVISION_ANNOTATION: revision} if revision is not None else {}
    return {"metadata": {"name": "x", "annotations": annotations}, "spec": {}}


@pytest.mark.parametrize(
    ("found", "standing", "refused", "refused_if_may_upgrade"),
    [
        pytest.param(installed(str(crd.SCHEMA_REVISION)), crd.Standing.CURRENT, False, False, id="the same revision"),
        pytest.param(installed(str(crd.SCHEMA_REVISION + 1)), crd.Standing.NEWER, False, False, id="a later release's (rollback)"),
        pytest.param(installed(str(crd.SCHEMA_REVISION - 1)), crd.Standing.STALE, True, False, id="an older revision"),
        pytest.param(installed(None), crd.Standing.STALE, True, False, id="from before revisions"),
        pytest.param(installed("banana"), crd.Standing.STALE, True, False, id="a revision that is no number"),
        pytest.param(None, crd.Standing.MISSING, True, True, id="not installed"),
    ],
)  # fmt: skip
def test_an_installed_crd_is_upgraded_or_refused_only_when_older_or_missing(
    found: dict[str, Any] | None, standing: crd.Standing, refused: bool, refused_if_may_upgrade: bool
) -> None:
    verdict = crd.standing(found)
    assert verdict.standing == standing
    assert (verdict.refusal(may_upgrade=False) is not None) == refused
    assert (verdict.refusal(may_upgrade=True) is not None) == refused_if_may_upgrade


def test_a_refusal_says_what_to_run() -> None:
    message = crd.standing(installed(None)).refusal(may_upgrade=False)
    assert message is not None
    assert f"kubectl apply --server-side --force-conflicts -f {crd.CRD_FILE}" in message
    assert (
        "no revision" in message and f"revision {crd.SCHEMA_REVISION}" in message and "manageCRD" in message
    )


def test_the_generated_crd_carries_its_revision() -> None:
    annotations = crd.custom_resource_definition()["metadata"]["annotations"]
    assert annotations == {crd.REVISION_ANNOTATION: str(crd.SCHEMA_REVISION)}
