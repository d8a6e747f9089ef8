"""The runtime's NCCL env step: the node's set_nccl_env.sh applied at start, under the pod's own values,
with dtjob's fallback only where the script is absent; with the env the operator renders for A3 Ultra."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dtjob_trainer import nccl_env
from dtjob_trainer.nccl_env import Source

from dtjob.core.gke import NCCL_FALLBACK_PREFIX
from tests.support.builders import manifest, pods_of
from tests.support.paths import REPO

RDMA_RECIPE = REPO / "tests" / "data" / "gke_recipes" / "rdma.yaml"
# A stand-in for the gIB installer's script (the real one is not published): exports, a value built from
# another variable, a condition, output on stdout that must not reach the parse, and an unexported one.
SCRIPT = """\
echo "setting NCCL env for gIB"
export NCCL_NET=gIB
export NCCL_IB_TC=106
export NCCL_IB_QPS_PER_CONNECTION=8
export NCCL_SOCKET_IFNAME=eth1
export NCCL_TUNER_CONFIG_PATH=/usr/local/gib/configs/tuner_config.txtpb
if [[ -z "${NCCL_CROSS_NIC:-}" ]]; then export NCCL_CROSS_NIC=0; fi
export NCCL_GIB_LIB="${GIB_HOME:-/usr/local/gib}/lib64"
export NCCL_MULTILINE="a
b"
UNEXPORTED=1
"""


def script(tmp_path: Path, text: str = SCRIPT) -> Path:
    path = tmp_path / "set_nccl_env.sh"
    path.write_text(text)
    return path


def a3_ultra_env(**spec_nccl: Any) -> dict[str, str]:
    """The trainer env the operator renders for an A3 Ultra RDMA pod (spec.nccl as given)."""
    job = manifest(
        ("Worker", 2),
        accelerator={"type": "nvidia-h200-141gb", "count": 8},
        nccl={"profile": "RDMA", **spec_nccl},
    )
    trainer = pods_of(job)["mnist-worker-0"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in trainer["env"]}


def test_a_script_present_is_applied_under_the_pods_own_values(tmp_path: Path) -> None:
    environ = {
        "PATH": os.environ["PATH"],
        nccl_env.SCRIPT_VARIABLE: str(script(tmp_path)),
        "GIB_HOME": "/opt/gib",
        "NCCL_SOCKET_IFNAME": "eth0",  # the pod's (a recipe override, or the user's): it wins
        f"{NCCL_FALLBACK_PREFIX}NCCL_IB_TC": "52",  # not used: the script is there
    }
    assert nccl_env.apply(environ) is Source.SCRIPT
    assert environ["NCCL_IB_TC"] == "106" and environ["NCCL_IB_QPS_PER_CONNECTION"] == "8"
    assert environ["NCCL_CROSS_NIC"] == "0" and environ["NCCL_GIB_LIB"] == "/opt/gib/lib64"
    assert environ["NCCL_MULTILINE"] == "a\nb"
    assert environ["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "UNEXPORTED" not in environ and environ[nccl_env.APPLIED_VARIABLE] == "script"


def test_a_script_absent_leaves_the_fallback_under_the_pods_own_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {
        nccl_env.SCRIPT_VARIABLE: str(tmp_path / "set_nccl_env.sh"),
        f"{NCCL_FALLBACK_PREFIX}NCCL_IB_TC": "52",
        f"{NCCL_FALLBACK_PREFIX}NCCL_CROSS_NIC": "0",
        "NCCL_CROSS_NIC": "1",  # the user's
    }
    with caplog.at_level(logging.WARNING, logger=nccl_env.__name__):
        assert nccl_env.apply(environ) is Source.FALLBACK
    assert environ["NCCL_IB_TC"] == "52" and environ["NCCL_CROSS_NIC"] == "1"
    assert environ[nccl_env.APPLIED_VARIABLE] == "fallback"
    (warning,) = caplog.messages
    assert f"{tmp_path / 'set_nccl_env.sh'} is absent" in warning
    assert "dtjob's fallback values" in warning and "NCCL_IB_TC=52" in warning
    assert "the pod's own values win for NCCL_CROSS_NIC" in warning


@pytest.mark.parametrize(
    ("text", "says"),
    [
        pytest.param("export NCCL_IB_TC=106\nexit 3\n", "ended the shell (exit 3)", id="a script that exits"),
        pytest.param("export NCCL_IB_TC=106\nkill -9 $$\n", "ended the shell", id="a shell that dies"),
    ],
)
def test_a_script_that_does_not_run_through_counts_as_absent(tmp_path: Path, text: str, says: str) -> None:
    environ = {
        "PATH": os.environ["PATH"],
        nccl_env.SCRIPT_VARIABLE: str(script(tmp_path, text)),
        f"{NCCL_FALLBACK_PREFIX}NCCL_IB_TC": "52",
    }
    resolved = nccl_env.nccl_env(environ)
    assert resolved is not None and resolved.source is Source.FALLBACK, resolved
    assert says in resolved.why_fallback and resolved.applied == {"NCCL_IB_TC": "52"}


def test_without_a_script_named_nothing_changes_and_a_second_call_changes_nothing(tmp_path: Path) -> None:
    environ = {"NCCL_SOCKET_IFNAME": "eth0", f"{NCCL_FALLBACK_PREFIX}NCCL_IB_TC": "52"}
    assert nccl_env.apply(environ) is None
    assert environ == {"NCCL_SOCKET_IFNAME": "eth0", f"{NCCL_FALLBACK_PREFIX}NCCL_IB_TC": "52"}
    path = script(tmp_path)
    environ = {"PATH": os.environ["PATH"], nccl_env.SCRIPT_VARIABLE: str(path)}
    assert nccl_env.apply(environ) is Source.SCRIPT
    path.write_text("export NCCL_IB_TC=1\n")  # a second call (or a child process) does not source again
    applied = dict(environ)
    assert nccl_env.apply(environ) is Source.SCRIPT and environ == applied


def test_the_a3_ultra_pod_runs_with_the_nodes_script_and_its_recipe_overrides(tmp_path: Path) -> None:
    """The operator's rendered env, the script where the gIB hostPath puts it: the script's tuning,
    the recipe's overrides (tuner config, socket interfaces) and the user's spec.nccl.env over it."""
    environ = a3_ultra_env(env=[{"name": "NCCL_IB_QPS_PER_CONNECTION", "value": "2"}])
    environ |= {"PATH": os.environ["PATH"], nccl_env.SCRIPT_VARIABLE: str(script(tmp_path))}
    assert nccl_env.apply(environ) is Source.SCRIPT
    overrides = yaml.safe_load(RDMA_RECIPE.read_text())["nccl_env_profile"]
    assert {k: environ[k] for k in overrides} == overrides  # NCCL_NET, the A3 Ultra tuner config
    assert environ["NCCL_SOCKET_IFNAME"] == "eth0"  # dtjob's pods have no gvnic-1 (docs/gke.md)
    assert environ["NCCL_IB_TC"] == "106"  # the script's, not the fallback's 52
    assert environ["NCCL_IB_QPS_PER_CONNECTION"] == "2"  # the user's


def test_the_a3_ultra_pod_without_the_script_runs_with_the_fallback_and_the_overrides() -> None:
    """The rendered script path does not exist here, as on a node without the gIB installer: the NCCL
    env is then what dtjob set before the script was applied (the recipe data's profile and fallback)."""
    environ = a3_ultra_env()
    assert not Path(environ[nccl_env.SCRIPT_VARIABLE]).exists()
    assert nccl_env.apply(environ) is Source.FALLBACK
    recipe = yaml.safe_load(RDMA_RECIPE.read_text())
    expected = {**recipe["nccl_env_profile"], **recipe["nccl_env_fallback"]}
    assert {k: environ.get(k) for k in expected} == expected


def test_the_runtime_and_the_operator_agree_on_the_names() -> None:
    """The operator does not import the trainer runtime: the names it renders must be the runtime's."""
    from dtjob.core.gke.profiles import RDMA

    assert nccl_env.FALLBACK_PREFIX == NCCL_FALLBACK_PREFIX
    assert nccl_env.SCRIPT_VARIABLE in dict(RDMA.env)


def test_a_process_that_starts_after_the_step_inherits_it(tmp_path: Path) -> None:
    """A child (torchrun's workers, say) gets the applied env and does not source the script again."""
    environ = {"PATH": os.environ["PATH"], nccl_env.SCRIPT_VARIABLE: str(script(tmp_path))}
    nccl_env.apply(environ)
    script(tmp_path, "export NCCL_IB_TC=1\n")
    probe = "from dtjob_trainer import nccl_env; import os; print(nccl_env.apply(), os.environ['NCCL_IB_TC'])"
    runtime = str(REPO / "trainer-images" / "runtime" / "src")
    shown = subprocess.run(
        [sys.executable, "-c", probe], env={**environ, "PYTHONPATH": runtime}, capture_output=True, check=True
    )
    assert shown.stdout.decode().split() == ["script", "106"]
