"""A rank that joins the process group through the runtime, all-reduces its rank + 1, and prints the sum.

Run as `python -m tests.trainer.rendezvous_probe` with the torch rendezvous env set.
"""

from __future__ import annotations

import json
import logging

import torch
import torch.distributed as dist
from dtjob_trainer.environment import TrainerEnvironment
from dtjob_trainer.pytorch.distributed import distributed


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    env = TrainerEnvironment.from_environ()
    with distributed(env.torch, env.rendezvous_timeout_s) as context:
        total = torch.tensor([context.rank + 1.0])
        dist.all_reduce(total)
        print(json.dumps({"event": "result", "rank": context.rank, "sum": total.item()}), flush=True)


if __name__ == "__main__":
    main()
