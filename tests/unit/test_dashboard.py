"""The Grafana dashboard only charts metrics the operator exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import dtjob.metrics  # noqa: F401  (registers the metrics)

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def family(sample_name: str) -> str:
    """The metric family a sample belongs to (labelled metrics have no samples before first use)."""
    return re.sub(r"_(total|bucket|count|sum|created)$", "", sample_name)


def test_every_metric_the_dashboard_queries_is_exported() -> None:
    exported = {f.name for f in REGISTRY.collect()}
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    queried = {family(name) for expr in exprs for name in re.findall(r"\b(dtjob_[a-z_]+)", expr)}
    assert queried, "the dashboard queries dtjob metrics"
    assert queried <= exported, queried - exported
