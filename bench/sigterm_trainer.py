"""A rank of the SIGTERM benchmark: trains bench/checkpoint_stall.py's ~100 MB model on random data
through the runtime's session until it is told to stop. Started by bench/sigterm_checkpoint.py."""

from __future__ import annotations

import argparse
import logging

import torch
from checkpoint_stall import model_of_size
from dtjob_trainer.environment import TrainerEnvironment
from dtjob_trainer.pytorch.distributed import distributed
from dtjob_trainer.pytorch.session import open_session
from dtjob_trainer.pytorch.state import TrainingState
from torch.nn.parallel import DistributedDataParallel

BATCH = 16


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-mb", type=float, default=100)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    env = TrainerEnvironment.from_environ()
    torch.manual_seed(0)
    with distributed(env.torch, env.rendezvous_timeout_s) as context:
        model = DistributedDataParallel(model_of_size(args.state_mb))
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
        state = TrainingState(model, optimizer)
        # Checkpoints only on SIGTERM: the measurement is of that save alone.
        with open_session(env, context, state, checkpoint_every_steps=10**9) as session:
            while True:
                optimizer.zero_grad(set_to_none=True)
                loss = model(torch.randn(BATCH, 2048)).pow(2).mean()
                loss.backward()
                optimizer.step()
                session.end_of_step(loss.item(), samples=BATCH)


if __name__ == "__main__":
    main()
