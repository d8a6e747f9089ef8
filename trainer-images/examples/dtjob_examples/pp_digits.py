"""PyTorch pipeline parallelism (torch.distributed.pipelining) on the digits data set:
`python -m dtjob_examples.pp_digits`.

The MLP of torch_digits is cut into one stage per rank (2 or 3 ranks); each batch is split into
microbatches that flow through the stages with the GPipe schedule, activations and gradients passed
between pods point to point. Every rank trains on the same batches (rank 0 feeds them in, the last rank
computes the loss). Each rank checkpoints its own stage with torch.distributed.checkpoint and resumes
exactly after a gang restart. Target: test accuracy >= 0.95.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from dtjob_trainer.environment import TrainerEnvironment
from dtjob_trainer.process_end import end_process
from dtjob_trainer.pytorch.distributed import distributed
from dtjob_trainer.pytorch.rng import seed_everything
from dtjob_trainer.pytorch.sampler import ResumableDistributedSampler
from dtjob_trainer.pytorch.session import open_session
from dtjob_trainer.pytorch.state import TrainingState
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
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

# Where each stage starts in build_model's layers, by number of stages: cuts before a Linear layer, so
# a stage hands the next one a plain activation tensor.
STAGE_STARTS = {2: (0, 3), 3: (0, 3, 5)}


def stage_of(model: nn.Sequential, stage: int, stages: int) -> nn.Sequential:
    """`model` with the other stages' layers replaced by Identity: the stage keeps its layers' names
    (so the stages' checkpoint keys never collide and join into the whole model's state dict)."""
    starts = STAGE_STARTS[stages]
    first, end = starts[stage], (*starts, len(model))[stage + 1]
    for index in range(len(model)):
        if not first <= index < end:
            model[index] = nn.Identity()
    return model


def whole_model_weights(stage_module: nn.Module) -> dict[str, torch.Tensor]:
    """Every stage's weights joined on every rank (collective)."""
    parts: list[dict[str, torch.Tensor] | None] = [None] * dist.get_world_size()
    own = {name: tensor.detach().cpu() for name, tensor in stage_module.state_dict().items()}
    dist.all_gather_object(parts, own)
    return {name: tensor for part in parts if part is not None for name, tensor in part.items()}


def run(argv: Sequence[str]) -> int:
    parser = argument_parser()
    parser.add_argument("--microbatches", type=int, default=4, help="a batch's split through the pipeline")
    args = parser.parse_args(argv)
    configure_logging()
    env = TrainerEnvironment.from_environ()
    seed_everything(args.seed)
    data = load_digits_split()
    with distributed(env.torch, env.rendezvous_timeout_s, env.termination_message_path) as context:
        stages, rank, device = context.world_size, context.rank, context.device
        if stages not in STAGE_STARTS:
            raise SystemExit(f"pp_digits cuts its model into {sorted(STAGE_STARTS)} stages, not {stages}")
        # Built whole with the same seed on every rank, so each stage's weights are the whole model's.
        stage_module = stage_of(build_model(), rank, stages).to(device)
        stage = PipelineStage(stage_module, rank, stages, device)
        schedule = ScheduleGPipe(stage, n_microbatches=args.microbatches, loss_fn=F.cross_entropy)
        optimizer = torch.optim.SGD(stage_module.parameters(), lr=args.lr, momentum=0.9)
        train_set = TensorDataset(torch.from_numpy(data.x_train), torch.from_numpy(data.y_train))
        sampler = ResumableDistributedSampler(train_set, num_replicas=1, rank=0, shuffle=True, seed=args.seed)
        # Whole batches only: every microbatch of every step has the shape the stages agreed on.
        steps_per_epoch = math.floor(sampler.num_samples / args.batch_size)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * steps_per_epoch)
        loader = epoch_loader(train_set, sampler, args, drop_last=True)
        state = TrainingState(stage_module, optimizer, scheduler)
        with open_session(
            env,
            context,
            state,
            checkpoint_every_steps=args.checkpoint_every,
            checkpoint_layout="sharded",
            total_steps=args.epochs * steps_per_epoch,
        ) as session:
            resumed_from = session.resume()
            for x, y in training_batches(session, sampler, loader, args):
                optimizer.zero_grad(set_to_none=True)
                losses: list[torch.Tensor] = []
                if rank == 0:
                    schedule.step(x.to(device))
                elif rank == stages - 1:
                    schedule.step(target=y.to(device), losses=losses)
                else:
                    schedule.step()
                optimizer.step()
                scheduler.step()
                # Only the last stage has the loss; every rank reports it.
                loss = torch.stack(losses).mean().detach() if losses else torch.zeros((), device=device)
                dist.broadcast(loss, src=stages - 1)
                # The session counts a step's samples as this rank's times the world size.
                session.end_of_step(loss.item(), samples=len(y) // stages)
        weights = whole_model_weights(stage_module)
        model = build_model()
        model.load_state_dict(weights)
        test_accuracy = accuracy(model, torch.from_numpy(data.x_test), torch.from_numpy(data.y_test))
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
