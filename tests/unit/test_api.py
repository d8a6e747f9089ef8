"""The API contract: models accept what the CRD accepts, reject what it rejects in the same words, and the
generated CRD is structural and committed up to date."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from dtjob.api import DistributedTrainingJobSpec, NcclProfileName, RestartPolicy, parse_job
from dtjob.api.errors import describe
from dtjob.api.semantics import semantic_problems
from dtjob.cli import main
from dtjob.crd import CRD_FILE, custom_resource_definition, structural
from dtjob.docs import DOCS_FILE
from tests.support.bad_manifests import ALLOWED_UPDATES, BAD_MANIFESTS, BAD_UPDATES, merge_patch
from tests.support.builders import manifest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def rejection(manifest: Mapping[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        parse_job(manifest)
    return describe(caught.value)


@pytest.mark.parametrize("bad", BAD_MANIFESTS, ids=[b.id for b in BAD_MANIFESTS])
def test_the_model_rejects_each_bad_manifest_in_the_apiservers_words(bad: Any) -> None:
    assert bad.message in rejection(bad.manifest)


@pytest.mark.parametrize("update", ALLOWED_UPDATES, ids=[u.id for u in ALLOWED_UPDATES])
def test_the_manifests_of_allowed_updates_are_valid_before_and_after(update: Any) -> None:
    parse_job(update.manifest)
    parse_job({**update.manifest, "spec": merge_patch(update.manifest["spec"], update.spec_patch)})


def _validations(node: Mapping[str, Any]) -> Iterator[dict[str, str]]:
    yield from node.get("x-kubernetes-validations", [])
    for child in node.get("properties", {}).values():
        yield from _validations(child)
    if "items" in node:
        yield from _validations(node["items"])


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = custom_resource_definition()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_every_cel_rule_that_needs_no_old_object_is_exercised_by_a_bad_manifest() -> None:
    messages = {v["message"] for v in _validations(_schema()) if "oldSelf" not in v["rule"]}
    covered = {m for m in messages if any(m.startswith(b.message) or b.message in m for b in BAD_MANIFESTS)}
    assert messages - covered == set()


@pytest.mark.parametrize("update", BAD_UPDATES, ids=[u.id for u in BAD_UPDATES])
def test_each_bad_update_is_caught_by_a_transition_rule_of_the_crd(update: Any) -> None:
    transition = [v["message"] for v in _validations(_schema()) if "oldSelf" in v["rule"]]
    assert any(update.message in message for message in transition)
    parse_job(update.manifest)  # the stored object itself is valid


def test_suspend_stays_mutable_because_no_transition_rule_reads_it_but_as_the_escape_hatch() -> None:
    for validation in _validations(_schema()):
        if "oldSelf" in validation["rule"] and "suspend" in validation["rule"]:
            assert "oldSelf.runPolicy" not in validation["rule"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_is_a_valid_manifest(path: Path) -> None:
    job = parse_job(yaml.safe_load(path.read_text()))
    assert job.spec.replicas


def test_defaults_follow_the_api_contract() -> None:
    spec = DistributedTrainingJobSpec.model_validate(
        {
            "framework": "PyTorch",
            "replicas": [{"role": "Worker", "template": {"spec": {"containers": [{"name": "t"}]}}}],
        }
    )
    assert (spec.replicas[0].count, spec.torch.port, spec.torch.nproc_per_node, spec.tensorflow.port) == (
        1,
        29500,
        "auto",
        2222,
    )
    assert (spec.nccl.profile, spec.nccl.debug, spec.shared_memory.enabled, spec.checkpoint.path) == (
        NcclProfileName.AUTO, "WARN", True, "/checkpoints")  # fmt: skip
    policy = spec.run_policy
    assert (policy.restart_policy, policy.backoff_limit, policy.max_preemptions, policy.clean_pod_policy) == (
        RestartPolicy.ON_FAILURE, 3, 50, "Running")  # fmt: skip
    assert (policy.success_policy, policy.suspend, policy.active_deadline_seconds) == (
        "RankZero",
        False,
        None,
    )


def structural_problems(node: Any, path: str = "") -> Iterator[str]:
    """What the apiserver's structural-schema check would complain about (the parts we can get wrong)."""
    if not isinstance(node, dict):
        return
    for key in ("$ref", "$defs", "title", "allOf", "oneOf", "const", "default", "nullable"):
        if key in node:
            yield f"{path or '<root>'}: has {key}"
    for branch in node.get("anyOf", []):
        if branch.get("type") == "null":
            yield f"{path}: anyOf with null"
    typed = (
        "type" in node
        or node.get("x-kubernetes-int-or-string")
        or node.get("x-kubernetes-preserve-unknown-fields")
    )
    if not typed:
        yield f"{path or '<root>'}: neither a type, int-or-string nor preserve-unknown-fields"
    if node.get("x-kubernetes-int-or-string") and "type" in node:
        yield f"{path}: int-or-string with a type"
    if "properties" in node and "additionalProperties" in node:
        yield f"{path}: properties and additionalProperties together"
    if node.get("x-kubernetes-list-type") == "map":
        for key in node["x-kubernetes-list-map-keys"]:
            if key not in node["items"].get("required", []):
                yield f"{path}: list-map key {key} is not required"
    for name, child in node.get("properties", {}).items():
        yield from structural_problems(child, f"{path}.{name}")
    if "items" in node:
        yield from structural_problems(node["items"], f"{path}[]")


def test_the_crd_schema_is_structural() -> None:
    assert list(structural_problems(_schema())) == []


@pytest.mark.parametrize(
    ("pydantic_schema", "expected"),
    [
        pytest.param({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}], "default": None, "title": "X"},
                     {"type": "integer", "minimum": 0}, id="an optional integer becomes a plain integer"),
        pytest.param({"anyOf": [{"type": "integer"}, {"type": "string"}], "default": "auto"},
                     {"description": "Defaults to auto.", "x-kubernetes-int-or-string": True}, id="int or string is marked"),
        pytest.param({"$defs": {"E": {"enum": ["A"], "type": "string", "title": "E", "description": "An E."}},
                      "$ref": "#/$defs/E", "description": "The field's own words.", "default": "A"},
                     {"description": "The field's own words. Defaults to A.", "type": "string", "enum": ["A"]},
                     id="a reference is inlined and the field's description wins"),
        pytest.param({"type": "object", "additionalProperties": True}, {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                     id="a free-form dict preserves unknown fields"),
        pytest.param({"type": "object", "properties": {"a": {"const": "x", "type": "string"}}, "additionalProperties": False},
                     {"type": "object", "properties": {"a": {"type": "string", "enum": ["x"]}}},
                     id="a closed model drops additionalProperties and a const becomes an enum"),
    ],
)  # fmt: skip
def test_structural_rewrites_pydantic_constructs(
    pydantic_schema: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert structural(pydantic_schema) == expected


def test_structural_refuses_what_it_cannot_rewrite() -> None:
    with pytest.raises(ValueError, match="anyOf"):
        structural({"anyOf": [{"type": "integer"}, {"type": "boolean"}]})


def test_the_crd_names_columns_and_subresources_match_the_contract() -> None:
    crd = custom_resource_definition()
    names, version = crd["spec"]["names"], crd["spec"]["versions"][0]
    assert (names["kind"], names["plural"], names["shortNames"], names["categories"]) == (
        "DistributedTrainingJob", "distributedtrainingjobs", ["dtj"], ["all"])  # fmt: skip
    assert crd["spec"]["scope"] == "Namespaced" and version["subresources"] == {"status": {}}
    columns = [
        (c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"] if not c.get("priority")
    ]
    assert columns == [("Framework", ".spec.framework"), ("Ready", ".status.replicasReady"), ("Phase", ".status.phase"),
                       ("Step", ".status.progress.step"), ("Progress", ".status.progress.percent"),
                       ("Restarts", ".status.restarts.total"), ("Age", ".metadata.creationTimestamp")]  # fmt: skip
    replicas = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"]
    assert (replicas["x-kubernetes-list-type"], replicas["x-kubernetes-list-map-keys"]) == ("map", ["role"])


@pytest.mark.parametrize("command, path", [("crd", CRD_FILE), ("docs", DOCS_FILE)])
def test_the_committed_generated_files_are_up_to_date(command: str, path: str) -> None:
    assert main([command, "--check", "--output", str(REPO / path)]) == 0, f"run `dtjob {command}`"


def test_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "crd.yaml"
    stale.write_text("kind: Stale\n")
    assert main(["crd", "--check", "--output", str(stale)]) == 1
    assert main(["crd", "--output", str(stale)]) == 0
    assert main(["crd", "--check", "--output", str(stale)]) == 0


@pytest.mark.parametrize(
    ("container", "pod_spec", "problem"),
    [
        pytest.param({"env": 1000}, {}, "spec.replicas[0].template.spec.containers[0].env must be a list", id="env a number"),
        pytest.param({"env": ["X=1"]}, {}, "spec.replicas[0].template.spec.containers[0].env[0] must be an object",
                     id="an env entry a string"),
        pytest.param({"resources": []}, {}, "spec.replicas[0].template.spec.containers[0].resources must be an object",
                     id="resources a list"),
        pytest.param({}, {"volumes": {"a": 1}}, "spec.replicas[0].template.spec.volumes must be a list", id="volumes a map"),
        pytest.param({}, {"nodeSelector": "gpu"}, "spec.replicas[0].template.spec.nodeSelector must be an object",
                     id="nodeSelector a string"),
    ],
)  # fmt: skip
def test_template_fields_the_operator_merges_into_must_have_their_type(
    container: dict[str, Any], pod_spec: dict[str, Any], problem: str
) -> None:
    trainer = {"name": "trainer", "image": "trainer:1", **container}
    spec = DistributedTrainingJobSpec.model_validate(
        manifest({"role": "Worker", "count": 1, "template": {"spec": {"containers": [trainer], **pod_spec}}})[
            "spec"
        ]
    )
    assert semantic_problems(spec) == [problem]
