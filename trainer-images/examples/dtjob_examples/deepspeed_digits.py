"""DeepSpeed ZeRO on the digits data set: `python -m dtjob_examples.deepspeed_digits`.

The MLP of torch_digits trained by a DeepSpeed engine with ZeRO stage 2 (--zero-stage 1 or 2): each rank
keeps only its partition of the optimizer state and of the gradients. DeepSpeed joins the process group
the runtime opened from the operator's env (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), gloo on CPU,
NCCL on GPUs. The engine checkpoints its partitions through the runtime (every rank writes its own) and
resumes exactly after a gang restart. Target: test accuracy >= 0.95.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import deepspeed
import torch
import torch.nn.functional as F
from deepspeed.accelerator import get_accelerator
from dtjob_trainer.environment import TrainerEnvironment
from dtjob_trainer.process_end import end_process
from dtjob_trainer.pytorch.distributed import distributed
from dtjob_trainer.pytorch.rng import seed_everything
from dtjob_trainer.pytorch.sampler import ResumableDistributedSampler
from dtjob_trainer.pytorch.session import open_session
from dtjob_trainer.pytorch.state import TrainingState
from torch.utils.data import TensorDataset

from dtjob_examples.digits import load_digits_split
from dtjob_examples.reporting import configure_logging
from dtjob_examples.torch_digits import (
    accuracy,
    argument_parser,
    build_model,
    epoch_loader,
    finish,
    training_batches,
)


def without_shared_memory_kernel() -> None:
    """On CPUs DeepSpeed compiles a shared-memory all-reduce for ranks that share a host when its
    communication backend starts (deepspeed/comm/torch.py, build_shm_op). A dtjob pod is one rank, so
    the kernel could never be used, and the image carries no compiler to build it: mark it unavailable."""
    if get_accelerator().device_name() == "cpu":
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def run(argv: Sequence[str]) -> int:
    parser = argument_parser()
    parser.add_argument("--zero-stage", type=int, choices=(1, 2), default=2)
    args = parser.parse_args(argv)
    configure_logging()
    env = TrainerEnvironment.from_environ()
    seed_everything(args.seed)
    data = load_digits_split()
    with distributed(env.torch, env.rendezvous_timeout_s, env.termination_message_path) as context:
        without_shared_memory_kernel()
        device = context.device
        model = build_model().to(device)
        # A torch optimizer handed to DeepSpeed: ZeRO partitions its state (DeepSpeed's own Adam needs a
        # compiled op on CPUs). The scheduler drives it through the param groups ZeRO keeps in it.
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        train_set = TensorDataset(torch.from_numpy(data.x_train), torch.from_numpy(data.y_train))
        sampler = ResumableDistributedSampler(
            train_set, num_replicas=context.world_size, rank=context.rank, shuffle=True, seed=args.seed
        )
        steps_per_epoch = math.ceil(sampler.num_samples / args.batch_size)
        engine, _, _, _ = deepspeed.initialize(
            model=model,
            optimizer=optimizer,
            config={
                "train_micro_batch_size_per_gpu": args.batch_size,
                "gradient_accumulation_steps": 1,
                "zero_optimization": {"stage": args.zero_stage},
                "zero_allow_untested_optimizer": True,
                "steps_per_print": 1 << 30,  # progress goes to the operator, not to the log
            },
        )
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * steps_per_epoch)
        loader = epoch_loader(train_set, sampler, args)
        state = TrainingState(engine, optimizer, scheduler)
        with open_session(
            env,
            context,
            state,
            checkpoint_every_steps=args.checkpoint_every,
            checkpoint_layout="deepspeed",
            total_steps=args.epochs * steps_per_epoch,
        ) as session:
            resumed_from = session.resume()
            for x, y in training_batches(session, sampler, loader, args):
                loss = F.cross_entropy(engine(x.to(device)), y.to(device))
                engine.backward(loss)
                engine.step()
                scheduler.step()
                session.end_of_step(loss.item(), samples=len(y))
        # ZeRO 1 and 2 partition optimizer state and gradients only: every rank holds all the weights.
        weights = {name: tensor.detach().cpu() for name, tensor in engine.module.state_dict().items()}
        test_accuracy = accuracy(
            engine.module, torch.from_numpy(data.x_test).to(device), torch.from_numpy(data.y_test).to(device)
        )
    return finish(
        args,
        env,
        context.rank,
        step=state.progress.step,
        resumed_from=resumed_from,
        weights=weights,
        test_accuracy=test_accuracy,
    )


if __name__ == "__main__":
    end_process(run(sys.argv[1:]))
