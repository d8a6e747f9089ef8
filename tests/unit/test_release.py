"""One release number: the operator package, the chart's version and appVersion (the operator image's tag)
and the newest CHANGELOG entry agree, and that entry names the CRD's schema revision."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from dtjob import crd

REPO = Path(__file__).resolve().parents[2]
SEMVER = re.compile(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?")


def newest_changelog_entry() -> tuple[str, str]:
    """The newest `## X.Y.Z` heading of CHANGELOG.md and the text under it."""
    text = (REPO / "CHANGELOG.md").read_text()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    heading, _, body = sections[0].partition("\n")
    return heading.strip(), body


def test_the_package_the_chart_and_the_changelog_name_one_release() -> None:
    package = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((REPO / "helm" / "dtjob-operator" / "Chart.yaml").read_text())
    version, _ = newest_changelog_entry()
    assert SEMVER.fullmatch(package), package
    assert (chart["version"], chart["appVersion"], version) == (package, package, package)


def test_the_newest_changelog_entry_names_the_crds_schema_revision() -> None:
    _, body = newest_changelog_entry()
    assert f"CRD schema revision {crd.SCHEMA_REVISION}" in body, (
        "CHANGELOG.md: say which schema revision ships"
    )
