"""The NCCL preflight's trainer side: the figures (nccl-tests' algbw/busbw), the transport read from
NCCL's INFO log, the verdict, and a real 2-rank gloo sweep between local "pods" rendered by the operator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dtjob_trainer.exit_codes import PREFLIGHT_FAILED
from dtjob_trainer.nccl_env import Source
from dtjob_trainer.preflight import Measurement, judge, noting_the_fallback, transport_from_nccl_log

from dtjob.core.preflight import PREFLIGHT_CONTAINER
from tests.support.local_gang import local_job, rendered_pods, running
from tests.trainer.test_nccl_env import a3_ultra_env, script

# NCCL INFO lines as GKE's pages and public GKE lab write-ups show them (read 2026-11-23): a healthy
# A3 High (TCPX plugin v3.1.x, "GPUDirectTCPX_v7"), A3 Mega (TCPXO "FasTrak"), A3 Ultra/A4 ("gIB", from
# GKE's "Run NCCL on GKE" troubleshooting page), InfiniBand, and the silent fall-back to TCP sockets.
RECORDED = {
    "GPUDirectTCPX_v7": [
        "gke-a3-0:41:98 [0] NCCL INFO NET/Plugin: Loaded net plugin GPUDirectTCPX_v7 (v7)",
        "gke-a3-0:41:98 [0] NCCL INFO Using network GPUDirectTCPX_v7",
        "gke-a3-0:41:98 [0] NCCL INFO NET/GPUDirectTCPX : GPUDirectTCPX enable: 1",
    ],
    "FasTrak": ["a3mega-0:77:120 [3] NCCL INFO Using network FasTrak",
                "a3mega-0:77:120 [3] NCCL INFO Initializing network FasTrak, version: 1.0.17"],
    "gIB": ["a3ultra-vm-0:606:642 [ 6 ] NCCL INFO Using network gIB",
            "a3ultra-vm-0:606:642 [ 6 ] NCCL INFO NET/gIB : Initializing gIB v1.0.2"],
    "IB": ["server3:15221:15221 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB enp41s0f1:<0>"],
    "Socket": [
        "vm:3048391:3048566 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).",
        "vm:3048391:3048566 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.6<0>",
        "vm:3048391:3048566 [0] NCCL INFO Using network Socket",
    ],
}  # fmt: skip


@pytest.mark.parametrize("transport", RECORDED)
def test_the_transport_is_read_from_nccls_info_log(transport: str) -> None:
    assert transport_from_nccl_log(RECORDED[transport]) == transport


def test_no_network_line_means_the_transport_is_unknown() -> None:
    assert transport_from_nccl_log(["NCCL INFO cudaDriverVersion 12040", "NCCL version 2.20.5"]) is None


def test_busbw_is_algbw_times_2_n_minus_1_over_n() -> None:
    measured = Measurement(size_bytes=64 << 20, seconds=0.01, world_size=8)
    assert measured.alg_bandwidth_gbps == pytest.approx(6.7108864)
    assert measured.bus_bandwidth_gbps == pytest.approx(6.7108864 * 2 * 7 / 8)
    assert (
        Measurement(1 << 20, 0.001, 2).bus_bandwidth_gbps == Measurement(1 << 20, 0.001, 2).alg_bandwidth_gbps
    )


FAST = Measurement(size_bytes=64 << 20, seconds=0.001, world_size=16)  # ~126 GB/s busbw


@pytest.mark.parametrize(
    ("transport", "floor", "expected", "passed", "says"),
    [
        ("GPUDirectTCPX_v7", 10.0, "GPUDirectTCPX", True, "busbw 125.83 GB/s at 64 MiB over 16 ranks"),
        ("Socket", None, "GPUDirectTCPX", False, "NCCL fell back to TCP sockets where the profile expects GPUDirectTCPX"),
        ("Socket", None, None, True, "transport Socket"),
        ("gIB", 1000.0, "gIB", False, "below the floor of 1000 GB/s"),
        ("gloo", None, None, True, "transport gloo"),
    ],
)  # fmt: skip
def test_the_verdict(
    transport: str, floor: float | None, expected: str | None, passed: bool, says: str
) -> None:
    verdict = judge(FAST, transport, floor, expected)
    assert verdict.passed is passed and says in verdict.message


def preflight_pods(workdir: Path, **preflight: Any) -> list[dict[str, Any]]:
    """The DDP example's pods, each running its dtj-preflight init container as its one container."""
    job = local_job("ddp-digits.yaml", workdir)
    job["spec"].setdefault("nccl", {})["preflight"] = {"enabled": True, **preflight}
    pods = []
    for pod in rendered_pods(job, 1):
        init = next(c for c in pod["spec"]["initContainers"] if c["name"] == PREFLIGHT_CONTAINER)
        pod["spec"]["containers"] = [{**init, "name": "trainer"}]
        pods.append(pod)
    return pods


@pytest.mark.parametrize(
    ("preflight", "code", "reason"),
    [
        pytest.param({}, 0, "PreflightPassed", id="gloo between two local pods passes with no floor"),
        pytest.param({"minBusBandwidthGBps": 100000}, PREFLIGHT_FAILED, "PreflightFailed", id="an impossible floor fails"),
    ],
)  # fmt: skip
def test_a_two_rank_sweep_reports_its_figures_and_every_rank_exits_with_the_verdict(
    tmp_path: Path, preflight: dict[str, Any], code: int, reason: str
) -> None:
    with running(preflight_pods(tmp_path, **preflight), tmp_path) as gang:
        codes = gang.wait_all(timeout=120)
        messages = [gang.pod_named(suffix).termination_message() for suffix in ("worker-0", "worker-1")]
    assert set(codes.values()) == {code}, gang.logs()
    assert {m["reason"] for m in messages} == {reason}
    rank0 = messages[0]
    assert rank0["backend"] == "gloo" and rank0["transport"] == "gloo" and rank0["worldSize"] == 2
    assert rank0["sizeBytes"] == 64 << 20 and rank0["busBandwidthGbps"] > 0
    assert rank0["busBandwidthGbps"] == pytest.approx(rank0["algBandwidthGbps"])  # 2(n-1)/n = 1 for n = 2
    assert json.dumps(messages[1]["busBandwidthGbps"]) == json.dumps(rank0["busBandwidthGbps"])  # agreed


@pytest.mark.parametrize("present", [True, False], ids=["set_nccl_env.sh present", "set_nccl_env.sh absent"])
def test_the_preflight_starts_with_the_nodes_nccl_env_as_the_trainer_does(
    tmp_path: Path, present: bool
) -> None:
    """The two local pods get the NCCL env the operator renders for A3 Ultra (gloo reads none of it): the
    preflight applies the script (or, without it, the fallback) as init_distributed does for the trainer,
    says which in its termination message, and says the fallback in its verdict (the operator's Event)."""
    gib = {k: v for k, v in a3_ultra_env().items() if k.startswith(("NCCL_", "DTJ_NCCL_"))}
    if present:
        gib["DTJ_NCCL_ENV_SCRIPT"] = str(script(tmp_path))
    pods = preflight_pods(tmp_path)
    for pod in pods:
        pod["spec"]["containers"][0]["env"] += [{"name": k, "value": v} for k, v in gib.items()]
    with running(pods, tmp_path) as gang:
        codes = gang.wait_all(timeout=120)
        rank0 = gang.pod_named("worker-0")
        message, log = rank0.termination_message(), rank0.log()
    assert set(codes.values()) == {0}, gang.logs()
    assert message["ncclEnv"] == ("script" if present else "fallback")
    if present:
        assert f"NCCL env from {gib['DTJ_NCCL_ENV_SCRIPT']}: " in log and "NCCL_IB_TC=106" in log, log
        assert "fallback" not in message["message"]
    else:
        assert "using dtjob's fallback values" in log and "NCCL_IB_TC=52" in log, log
        assert (
            "NCCL ran with dtjob's fallback values: /usr/local/gib/scripts/set_nccl_env.sh"
            in message["message"]
        )


def test_the_operators_mirror_of_the_preflight_agrees_with_the_runtime() -> None:
    """The operator does not import the trainer runtime: what it renders and reads must match it."""
    from dtjob_trainer import preflight as runtime

    from dtjob.core import preflight as operator

    assert (operator.PASSED, operator.FAILED) == (runtime.PASSED, runtime.FAILED)
    assert ("python", "-m", runtime.__name__) == operator.COMMAND
    written = runtime.outcome(judge(FAST, "gloo", None, None), FAST, "gloo", "gloo", 1.0, Source.SCRIPT)
    assert set(operator.RESULT_FIELDS) <= set(written)
    assert operator.result_of(json.dumps(written)) == {
        "passed": True, "message": written["message"], **{k: written[k] for k in operator.RESULT_FIELDS}
    }  # fmt: skip


def test_the_fallback_reaches_the_operator_in_the_verdicts_message() -> None:
    """status.preflight.message and the PreflightPassed Event carry it (the operator keeps no other field)."""
    from dtjob_trainer import preflight as runtime

    from dtjob.core import preflight as operator

    script = "/usr/local/gib/scripts/set_nccl_env.sh"
    assert noting_the_fallback(judge(FAST, "gIB", None, "gIB"), Source.SCRIPT, script).message.endswith("gIB")
    verdict = noting_the_fallback(judge(FAST, "gIB", None, "gIB"), Source.FALLBACK, script)
    written = runtime.outcome(verdict, FAST, "gIB", "nccl", 1.0, Source.FALLBACK)
    read = operator.result_of(json.dumps(written))
    assert read is not None and read["passed"] and written["ncclEnv"] == "fallback"
    assert read["message"].endswith(
        f"NCCL ran with dtjob's fallback values: {script} is absent or did not run on this node"
    )
