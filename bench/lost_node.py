"""What a lost node costs a real training gang with a hot spare, on two real nodes.

    .venv/bin/python -m bench.lost_node [--losses 5] [--epochs 120] [--how reclaim|vanish]
                                        [--workers 2] [--spares 1]

Tier C with a second real node (`localcluster up --real-nodes 2`; brought up if needed, left up): the DDP
example (2 workers over gloo on the CPU, or `--workers`, restartStrategy InPlace, one hot spare or
`--spares`; the members spread evenly over the two nodes, the spares on the first) runs through the operator in-process, with its progress intake, once uninterrupted and then
once a loss: after a fresh checkpoint, with the spare waiting, the node that holds a member and not the
spare is lost, and a machine of the same name comes back once the gang has restarted. `--how reclaim`
(the default): as GKE reclaims a Spot VM, the node's graceful shutdown (`Cluster.shut_down_node`: the
real kubelet stops its pods on SIGTERM and marks them Failed with DisruptionTarget TerminationByKubelet),
then the machine gone. `--how vanish`: gone at once with no notice (`Cluster.lose_node`: its kubelet,
containerd and every process of its pods SIGKILLed, the API told nothing). Prints, for each loss, the
restart's reason, whether it was in place, its cost phase by phase (status.goodput.lastRestart), the
pause in training (from the loss's start to the next attempt's first step) and whether the final
weights are the uninterrupted run's (docs/fault-tolerance.md#measured).

A job a loss: a takeover leaves both members on the surviving node, so the next loss would take the gang.
"""

from __future__ import annotations

import argparse
import os
import statistics
from datetime import UTC, datetime
from typing import Any

from localcluster.layout import Layout

# The kubernetes client (and Kopf's login through it) reads KUBECONFIG once, when first imported.
os.environ["KUBECONFIG"] = str(Layout.from_env().kubeconfig())


from bench.recovery_cost import PHASES, SPARE, Run, operator_in_a_namespace, pause, wait
from dtjob.core.names import JOB_NAME_LABEL, SPARE_LABEL
from hack import images
from localcluster import Cluster, Tier
from localcluster.node import NODE_LABEL, Node


def spread(run: Run, cluster: Cluster, spares: int) -> None:
    """The job's members spread evenly over the two real nodes (kwok's are no domain of the spread), and
    its `spares` spares prefer the first node: the second is the one to lose (it has a graceful
    shutdown), with half the members and no spare."""
    run.job["spec"]["replicas"][0]["spares"] = run.spares = spares
    pod_spec = run.job["spec"]["replicas"][0]["template"]["spec"]
    pod_spec["nodeSelector"] = {NODE_LABEL: "true"}
    first = {"key": "kubernetes.io/hostname", "operator": "In", "values": [cluster.node.real.name]}
    pod_spec["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [first]}}
            ]
        }
    }
    pod_spec["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {JOB_NAME_LABEL: run.name},
                           "matchExpressions": [{"key": SPARE_LABEL, "operator": "DoesNotExist"}]}}
    ]  # fmt: skip


def lose_a_member_node(cluster: Cluster, run: Run, how: str) -> tuple[dict[str, Any], str, str]:
    """Once attempt 1 has a fresh checkpoint and every spare waits, the second node lost (half the
    members, no spare); a machine of its name back once the gang has restarted. The restart's cost
    (with `pauseSeconds`), its reason and the node lost."""
    wait(lambda: run.running(1), "attempt 1 running")
    wait(lambda: (run.checkpoints.latest_step() or 0) > 0, "a checkpoint")
    wait(lambda: run.still_on() and len(run.spares_waiting()) == run.spares, "every spare waiting")
    pods = run.core.list_namespaced_pod(run.namespace, label_selector=f"{JOB_NAME_LABEL}={run.name}").items
    placed = {p.metadata.name: (p.spec.node_name, (p.metadata.labels or {}).get(SPARE_LABEL)) for p in pods}
    lost: Node = cluster.nodes[1]
    there = [(name, bool(is_spare)) for name, (node, is_spare) in placed.items() if node == lost.real.name]
    assert sorted(spare for _, spare in there) == [False] * (run.workers // 2), f"{lost.real.name}: {placed}"
    lost_at = datetime.now(UTC)
    if how == "reclaim":
        cluster.shut_down_node(lost)
    else:
        cluster.lose_node(lost)

    def cost() -> dict[str, Any] | None:
        last = (run.status().get("goodput") or {}).get("lastRestart") or {}
        return last if last.get("attempt") == 2 and last.get("totalSeconds") is not None else None

    # A replacement machine once the gang has restarted (the spread would keep a recreated member off
    # the surviving node, where the spare already is).
    wait(lambda: (run.status().get("attempt") or 1) >= 2, "the restart", timeout=900)
    if how == "reclaim":
        cluster.lose_node(lost)  # the machine ends (GCE ends it 30 s after the notice)
    cluster.start_node(lost)
    done = wait(cost, "the cost of the restart", timeout=900)
    reason = str((run.status().get("lastRestart") or {}).get("reason"))
    in_place = (run.status().get("lastRestart") or {}).get("inPlace")
    return done | {"pauseSeconds": pause(done, lost_at), "inPlace": in_place}, reason, lost.real.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--losses", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=120, help="23 steps an epoch")
    parser.add_argument("--how", choices=("reclaim", "vanish"), default="reclaim")
    parser.add_argument("--workers", type=int, default=2, help="half of them on the node lost")
    parser.add_argument("--spares", type=int, default=1, help="all on the node kept")
    args = parser.parse_args(argv)

    cluster = Cluster()
    if cluster.running_tier() != Tier.C:
        cluster.up(Tier.C)
    second = cluster.nodes[1]
    if not cluster.procs.running(second.kubelet):
        cluster.start_node(second)
    cluster.share_image(images.ensure(cluster, images.TORCH_TRAINER))
    losses = []
    with operator_in_a_namespace(cluster, "lost-node") as (api, namespace):
        # Each node's first pods of the image pay its unpacking there: not the runs' cost.
        warm_up = Run(
            api, namespace, "warm-up", 1, "--min-accuracy", "0", strategy=SPARE, workers=args.workers
        )
        spread(warm_up, cluster, args.spares)
        warm_up.train(0)
        plain = Run(api, namespace, "uninterrupted", args.epochs, strategy=SPARE, workers=args.workers)
        spread(plain, cluster, args.spares)
        plain_weights = plain.train(0)[3]
        for k in range(1, args.losses + 1):
            run = Run(api, namespace, f"lost-{k}", args.epochs, strategy=SPARE, workers=args.workers)
            spread(run, cluster, args.spares)
            run.create()
            cost, reason, node = lose_a_member_node(cluster, run, args.how)
            losses.append((cost, reason, node, run.finish()))

    print(f"\n{args.workers} workers, InPlace, {args.spares} hot spares; {len(losses)} nodes lost ({args.how}), "
          "a job each")  # fmt: skip
    print(f"{'loss':>5} {'node':>11} {'reason':>14} {'in place':>9} "
          + " ".join(f"{p.removesuffix('Seconds'):>10}" for p in PHASES) + f" {'total':>8} {'pause':>8}  weights")  # fmt: skip
    for k, (cost, reason, node, weights) in enumerate(losses, start=1):
        cells = " ".join(f"{float(cost.get(p) or 0.0):10.2f}" for p in PHASES)
        same = "identical" if weights == plain_weights else "DIFFERENT"
        print(f"{k:>5} {node:>11} {reason:>14} {cost['inPlace']!s:>9} {cells} "
              f"{float(cost['totalSeconds']):8.2f} {cost['pauseSeconds']:8.2f}  {same}")  # fmt: skip
    pauses = [cost["pauseSeconds"] for cost, *_ in losses]
    print(f"training paused (loss to the next attempt's first step): median {statistics.median(pauses):.2f} s, "
          f"min {min(pauses):.2f}, max {max(pauses):.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
