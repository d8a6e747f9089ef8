"""python -m localcluster up|down|status|env|build|image — see docs/local-cluster.md."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from localcluster.cluster import Cluster, ClusterError, Tier


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="bring the cluster up to a tier (incremental, idempotent)")
    up.add_argument("--tier", type=Tier, choices=list(Tier), default=Tier.C)
    up.add_argument(
        "--fake-nodes",
        type=int,
        default=200,
        help="fake GKE GPU nodes (tier B and up); 0: no kwok at all (tier C's real node alone)",
    )
    up.add_argument("--addons", default="", help="comma-separated optional components (tier B and up): kueue")
    up.add_argument(
        "--real-nodes", type=int, default=1, help="tier C: 2 adds a second real node (a second kubelet)"
    )
    sub.add_parser("down", help="stop every component and remove all state, interfaces and rules")
    sub.add_parser("status", help="print which tier runs and each component's PID")
    sub.add_parser("env", help="print `export KUBECONFIG=...` for a shell")
    build = sub.add_parser("build", help="build the Go components (cached)")
    build.add_argument("--tier", type=Tier, choices=list(Tier), default=Tier.C)
    build.add_argument("--helm", action="store_true")
    image = sub.add_parser("image", help="build a Dockerfile with buildah and import it into the node")
    image.add_argument("context", type=Path)
    image.add_argument("name", help="localhost/NAME:TAG")
    args = parser.parse_args(argv)

    cluster = Cluster()
    try:
        if args.command == "up":
            addons = tuple(a for a in args.addons.split(",") if a)
            cluster.up(args.tier, fake_nodes=args.fake_nodes, addons=addons, real_nodes=args.real_nodes)
        elif args.command == "down":
            cluster.down()
        elif args.command == "status":
            print(json.dumps(cluster.status(), indent=2))
        elif args.command == "env":
            print(f"export KUBECONFIG={cluster.kubeconfig}")
        elif args.command == "build":
            cluster.build(args.tier, with_helm=args.helm)
        elif args.command == "image":
            cluster.build_image(args.context, args.name)
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
