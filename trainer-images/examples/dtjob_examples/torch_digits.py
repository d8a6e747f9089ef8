"""An MLP on the digits data set with the dtjob runtime: replicated (DDP), sharded (FSDP2) or split
across the ranks layer by layer (tensor parallel: DTensor's `parallelize_module`).

Resumes exactly: with the same seed, a run that was stopped and restarted ends with the same weights
as one that was not (sampler position, RNG states, optimizer and LR scheduler are all checkpointed).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from dtjob_trainer.environment import TrainerEnvironment
from dtjob_trainer.process_end import end_process
from dtjob_trainer.pytorch.distributed import DistributedContext
from dtjob_trainer.pytorch.rng import seed_everything
from dtjob_trainer.pytorch.rounds import train_in_rounds
from dtjob_trainer.pytorch.sampler import ResumableDistributedSampler
from dtjob_trainer.pytorch.session import TrainingSession, open_session
from dtjob_trainer.pytorch.state import TrainingState
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from dtjob_examples.digits import CLASSES, FEATURES, DigitsSplit, load_digits_split
from dtjob_examples.reporting import configure_logging, print_result

Parallelism = Literal["ddp", "fsdp", "tp"]


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps")
    parser.add_argument("--async-checkpoints", action="store_true")
    parser.add_argument("--min-accuracy", type=float, default=0.95, help="exit 1 below this test accuracy")
    # Faults to show hang detection with (docs/progress.md); both act in the first attempt only.
    parser.add_argument("--hang-at-step", type=int, help="rank --hang-rank stops stepping after this step")
    parser.add_argument("--hang-rank", type=int, default=1)
    # A deterministic bug (docs/fault-tolerance.md, RepeatedFailure): it fails every attempt.
    parser.add_argument("--fail-at-step", type=int, help="rank --fail-rank raises after this step")
    parser.add_argument("--fail-rank", type=int, default=1)
    # A straggler (docs/progress.md#slow-ranks): this rank's every step takes --slow-step-seconds more.
    parser.add_argument("--slow-rank", type=int, help="this rank sleeps in every step")
    parser.add_argument("--slow-step-seconds", type=float, default=0.05)
    parser.add_argument(
        "--slow-save-seconds", type=float, default=0.0, help="the first save takes this long more"
    )
    return parser


def build_model() -> nn.Sequential:
    # Dropout makes the run depend on the RNG streams, which the checkpoints therefore must carry.
    return nn.Sequential(
        nn.Linear(FEATURES, 128),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(128, 64),
        nn.ReLU(),
        nn.Linear(64, CLASSES),
    )


def settled(ddp: DistributedDataParallel, device: torch.device) -> DistributedDataParallel:
    """`ddp` with its gradient buckets already in the layout it keeps (docs/trainer-runtime.md, exact
    resume): DDP lays them out again after a fresh instance's first backward, and more than two ranks'
    sums round by where a value sits in its bucket, so a resumed run's first step would part from the
    uninterrupted run's. One backward on zeros in eval mode (no dropout: no RNG drawn), its gradients
    dropped, makes every run, fresh or resumed, step in the rebuilt layout from its first step."""
    ddp.eval()
    ddp(torch.zeros(1, FEATURES, device=device)).sum().backward()
    ddp.zero_grad(set_to_none=True)
    ddp.train()
    return ddp


def parallelize(model: nn.Sequential, parallelism: Parallelism, context: DistributedContext) -> nn.Module:
    if parallelism == "ddp":
        device_ids = [context.device.index] if context.device.type == "cuda" else None
        return settled(DistributedDataParallel(model, device_ids=device_ids), context.device)
    if parallelism == "tp":
        # Megatron's pairing: the first layer's output features split across the ranks (columns), the
        # second's input features (rows), so the hidden activations stay local and one all-reduce a layer
        # pair joins them. The small last layer is replicated: every rank computes it on the same input.
        mesh = init_device_mesh(context.device.type, (context.world_size,))
        return parallelize_module(model, mesh, {"0": ColwiseParallel(), "3": RowwiseParallel()})
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)  # shards in place: the module is now also an FSDPModule
    return model


def full_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """Unsharded, unwrapped weights on the CPU; collective for sharded models."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {name: tensor.detach().cpu() for name, tensor in state.items() if isinstance(tensor, torch.Tensor)}


def weights_digest(weights: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(weights[name].contiguous().numpy().tobytes())
    return digest.hexdigest()


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    return float((model(x).argmax(dim=1) == y).float().mean())


def epoch_loader(
    train_set: TensorDataset,
    sampler: ResumableDistributedSampler,
    args: argparse.Namespace,
    *,
    drop_last: bool = False,
) -> DataLoader[tuple[torch.Tensor, ...]]:
    # A private generator: DataLoader draws a seed from the global RNG each epoch otherwise, which a
    # resumed run would not replay.
    return DataLoader(
        train_set,
        batch_size=args.batch_size,
        sampler=sampler,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(args.seed),
    )


def training_batches(
    session: TrainingSession,
    sampler: ResumableDistributedSampler,
    loader: DataLoader[tuple[torch.Tensor, ...]],
    args: argparse.Namespace,
) -> Iterator[tuple[torch.Tensor, ...]]:
    """The batches left to train on, from where the session resumed: the rest of its epoch, then whole
    epochs up to --epochs; the model in training mode."""
    progress = session.state.progress
    for epoch in range(progress.epoch, args.epochs):
        sampler.set_position(epoch, progress.batches_in_epoch * args.batch_size)
        session.state.model.train()
        yield from loader
        session.end_of_epoch()


def finish(
    args: argparse.Namespace,
    env: TrainerEnvironment,
    rank: int,
    *,
    step: int,
    resumed_from: int | None,
    weights: dict[str, torch.Tensor],
    test_accuracy: float,
) -> int:
    """Rank 0 saves the weights where Vertex AI's contract puts models (AIP_MODEL_DIR); every rank prints
    its result line; the exit code: 1 below --min-accuracy."""
    if rank == 0 and env.model_dir is not None:
        Path(env.model_dir).mkdir(parents=True, exist_ok=True)
        torch.save(weights, Path(env.model_dir) / "model.pt")
    print_result(
        rank=rank,
        step=step,
        resumed_from_step=resumed_from,
        test_accuracy=test_accuracy,
        weights_sha256=weights_digest(weights),
    )
    return 0 if test_accuracy >= args.min_accuracy else 1


def _faults(args: argparse.Namespace, session: TrainingSession, rank: int, attempt: int) -> None:
    step = session.state.progress.step
    if args.fail_at_step is not None and step == args.fail_at_step and rank == args.fail_rank:
        raise ValueError(f"rank {rank} fails after step {step} (--fail-at-step)")
    if attempt > 1:
        return
    if args.slow_save_seconds and step == args.checkpoint_every:
        with session.saving():  # as a save to a slow store would: every rank waits for it
            time.sleep(args.slow_save_seconds)
    if args.hang_at_step is not None and step == args.hang_at_step and rank == args.hang_rank:
        print(f"rank {rank} hangs after step {step} (--hang-at-step)", flush=True)
        threading.Event().wait()  # as a rank wedged in a collective: alive, silent, never stepping


@dataclass(frozen=True)
class Outcome:
    rank: int
    step: int
    resumed_from: int | None
    weights: dict[str, torch.Tensor]
    test_accuracy: float


def train(
    parallelism: Parallelism,
    args: argparse.Namespace,
    data: DigitsSplit,
    context: DistributedContext,
    env: TrainerEnvironment,
) -> Outcome:
    """One round: the model built, resumed from the newest checkpoint, trained to the end."""
    seed_everything(args.seed)
    device = context.device
    model = parallelize(build_model().to(device), parallelism, context)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    train_set = TensorDataset(torch.from_numpy(data.x_train), torch.from_numpy(data.y_train))
    # Tensor parallel ranks hold parts of one model replica: they all train on the same batch.
    data_replicas, data_rank = (1, 0) if parallelism == "tp" else (context.world_size, context.rank)
    sampler = ResumableDistributedSampler(
        train_set, num_replicas=data_replicas, rank=data_rank, shuffle=True, seed=args.seed
    )
    steps_per_epoch = math.ceil(sampler.num_samples / args.batch_size)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * steps_per_epoch)
    loader = epoch_loader(train_set, sampler, args)
    state = TrainingState(model, optimizer, scheduler)
    with open_session(
        env,
        context,
        state,
        checkpoint_every_steps=args.checkpoint_every,
        checkpoint_layout="replicated" if parallelism == "ddp" else "sharded",
        asynchronous_checkpoints=args.async_checkpoints,
        total_steps=args.epochs * steps_per_epoch,
    ) as session:
        resumed_from = session.resume()
        for x, y in training_batches(session, sampler, loader, args):
            if context.rank == args.slow_rank:
                time.sleep(args.slow_step_seconds)  # as a throttled GPU or a slow data path would
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            # The session counts a step's samples as this rank's times the world size.
            session.end_of_step(loss.item(), samples=len(y) * data_replicas // context.world_size)
            _faults(args, session, context.rank, env.attempt)
    weights = full_weights(model)
    test_accuracy = accuracy(
        model, torch.from_numpy(data.x_test).to(device), torch.from_numpy(data.y_test).to(device)
    )
    return Outcome(context.rank, state.progress.step, resumed_from, weights, test_accuracy)


def run(parallelism: Parallelism, argv: Sequence[str]) -> int:
    args = argument_parser().parse_args(argv)
    configure_logging()
    env = TrainerEnvironment.from_environ()
    data = load_digits_split()
    # Under runPolicy.restartStrategy InPlace, a gang restart trains the next attempt in this process.
    outcome = train_in_rounds(
        env, lambda context, round_env: train(parallelism, args, data, context, round_env)
    )
    return finish(
        args,
        env,
        outcome.rank,
        step=outcome.step,
        resumed_from=outcome.resumed_from,
        weights=outcome.weights,
        test_accuracy=outcome.test_accuracy,
    )


def main(parallelism: Parallelism) -> None:
    end_process(run(parallelism, sys.argv[1:]))
