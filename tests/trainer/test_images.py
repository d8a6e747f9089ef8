"""The trainer images' recipes agree with the runtime they package (checked without building them)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.paths import REPO

IMAGES = REPO / "trainer-images"
RUNTIME_PROJECT = tomllib.loads((IMAGES / "runtime" / "pyproject.toml").read_text())["project"]


def direct_pins(*extras: str) -> dict[str, str]:
    lines = [*RUNTIME_PROJECT["dependencies"]]
    for extra in extras:
        lines += RUNTIME_PROJECT["optional-dependencies"][extra]
    pins = {}
    for line in lines:
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"{line} is not pinned"
        pins[normalized(requirement.name)] = specifier.version
    return pins


def locked(image: str) -> dict[str, str]:
    pins = {}
    for line in (IMAGES / image / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[normalized(name)] = version
    return pins


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("image", ["torch", "tensorflow"])
def test_each_image_locks_the_runtimes_direct_pins_at_the_same_versions(image: str) -> None:
    lock = locked(image)
    for name, version in direct_pins(image, "examples").items():
        assert lock.get(name) == version, (
            f"{image}/requirements.txt has {name}=={lock.get(name)}, runtime pins {version}"
        )


def test_the_torch_image_carries_the_frameworks_its_examples_launch_at_the_runtimes_pins() -> None:
    lock = locked("torch")
    for name in ("transformers", "accelerate"):
        assert lock.get(name) == direct_pins("integrations")[name], f"torch/requirements.txt: {name}"
    # DeepSpeed is an sdist built against the image's torch: the Dockerfile installs it, by this pin.
    (deepspeed,) = RUNTIME_PROJECT["optional-dependencies"]["deepspeed"]
    assert (
        f"pip install --no-deps --no-build-isolation {deepspeed}"
        in (IMAGES / "torch" / "Dockerfile").read_text()
    )


@pytest.mark.parametrize(
    ("image", "command"),
    [("torch", "dtjob_examples.ddp_digits"), ("tensorflow", "dtjob_examples.tf_mwms_digits")],
)
def test_each_image_takes_its_base_as_an_argument_runs_as_non_root_and_starts_a_module(
    image: str, command: str
) -> None:
    dockerfile = (IMAGES / image / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}\n" in dockerfile
    assert re.search(r"^USER 1000:1000$", dockerfile, re.MULTILINE)
    assert f'CMD ["python", "-m", "{command}"]' in dockerfile
    for copied in re.findall(r"^COPY (\S+) ", dockerfile, re.MULTILINE):
        assert (REPO / copied).exists(), f"{image}/Dockerfile copies {copied}, which does not exist"


@pytest.mark.parametrize("manifest", sorted(p.name for p in (REPO / "examples").glob("*digits.yaml")))
def test_each_example_manifest_runs_a_module_that_exists_in_its_image(manifest: str) -> None:
    text = (REPO / "examples" / manifest).read_text()
    # `python -m MODULE`, or a launcher's `-m MODULE` (accelerate launch) or `--module MODULE` (torchrun)
    (module,) = set(re.findall(r"(?:-m|--module),? (dtjob_examples\.\w+)", text))
    assert (IMAGES / "examples" / Path(*module.split("."))).with_suffix(".py").is_file()
