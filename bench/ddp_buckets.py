"""What keeping DDP's gradient-bucket layout costs a step (docs/trainer-runtime.md, exact resume): the
digits example's MLP over gloo, as `torch_digits` wraps it (`settled`: plain DDP, its layout rebuilt
before the first step) against a bucket a parameter (`bucket_cap_mb_list=[0]`) and
`find_unused_parameters=True`, each for 2 and 4 ranks of local processes, in one run:

    python -m bench.ddp_buckets [--steps 1000]

Prints the seconds for the steps and each way's ratio to `settled` (torch warns, once a rank, that
find_unused_parameters found none unused: the cost the example avoids).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from tests.support.local_gang import EXAMPLE_CODE

WAYS = ("settled", "bucket a parameter", "find unused parameters")


def _rank(rank: int, world_size: int, port: int, way: str, steps: int, out: Any) -> None:
    sys.path.insert(0, str(EXAMPLE_CODE))  # the examples are the image's, not the venv's
    import torch
    import torch.distributed as dist
    from dtjob_examples.digits import FEATURES
    from dtjob_examples.torch_digits import build_model, settled
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = build_model()
    if way == "settled":
        ddp = settled(DistributedDataParallel(model), torch.device("cpu"))
    elif way == "bucket a parameter":
        ddp = DistributedDataParallel(model, bucket_cap_mb_list=[0])
    else:
        ddp = DistributedDataParallel(model, find_unused_parameters=True)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(32, FEATURES), torch.randint(0, 10, (32,))

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(ddp(x), y).backward()
        optimizer.step()

    for _ in range(50):
        step()
    dist.barrier()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    if rank == 0:
        out.put(time.perf_counter() - started)
    dist.destroy_process_group()


def seconds(world_size: int, way: str, steps: int) -> float:
    import torch.multiprocessing as mp

    from tests.support.ports import free_port

    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_rank, args=(world_size, free_port(), way, steps, queue), nprocs=world_size)
    return float(queue.get())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    for world_size in (2, 4):
        taken = {way: seconds(world_size, way, args.steps) for way in WAYS}
        for way in WAYS:
            ratio = taken[way] / taken["settled"]
            print(f"{world_size} ranks  {way:24}  {taken[way]:6.2f} s / {args.steps} steps  {ratio:4.2f}x")


if __name__ == "__main__":
    main()
