"""The PyTorch checkpoint manager in one process: what a restore brings back, asynchronous saves, and a
checkpoint held in memory and sent to a rank without it (between pods: test_pytorch_gang.py's in-place
restarts and hot spares)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from dtjob_trainer.environment import TorchRendezvous
from dtjob_trainer.pytorch import held_checkpoint
from dtjob_trainer.pytorch.checkpoint import TRAINER_STATE_FILE, CheckpointManager
from dtjob_trainer.pytorch.distributed import DistributedContext, distributed, init_distributed
from dtjob_trainer.pytorch.sampler import ResumableDistributedSampler
from dtjob_trainer.pytorch.state import TrainingProgress, TrainingState
from torch import nn
from torch.multiprocessing import spawn

from tests.support.ports import free_port


@pytest.fixture
def context() -> Iterator[DistributedContext]:
    context = init_distributed(TorchRendezvous("127.0.0.1", 29500, world_size=1, rank=0, local_rank=0), 10)
    yield context
    dist.destroy_process_group()


def new_state(seed: int) -> TrainingState:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return TrainingState(model, optimizer, scheduler)


def train(state: TrainingState, steps: int) -> None:
    for _ in range(steps):
        state.optimizer.zero_grad()
        state.model(torch.randn(4, 8)).sum().backward()
        state.optimizer.step()
        assert state.scheduler is not None
        state.scheduler.step()
        state.progress.step += 1
        state.progress.batches_in_epoch += 1


def assert_same_training_state(restored: TrainingState, saved: TrainingState) -> None:
    for (name, left), right in zip(
        restored.model.state_dict().items(), saved.model.state_dict().values(), strict=True
    ):
        assert torch.equal(left, right), name
    for key, left in restored.optimizer.state_dict()["state"].items():
        assert torch.equal(
            left["momentum_buffer"], saved.optimizer.state_dict()["state"][key]["momentum_buffer"]
        )
    assert restored.scheduler is not None and saved.scheduler is not None
    assert restored.scheduler.state_dict() == saved.scheduler.state_dict()
    assert restored.progress == saved.progress


def test_a_restore_brings_back_model_optimizer_scheduler_progress_and_rng(
    context: DistributedContext, tmp_path: Path
) -> None:
    saved = new_state(seed=0)
    train(saved, steps=3)
    saved.progress.epoch = 1
    CheckpointManager(tmp_path, context).save(saved)
    next_draws = torch.rand(5)

    restored = new_state(seed=1)
    step = CheckpointManager(tmp_path, context).restore_latest(restored)

    assert step == 3
    assert_same_training_state(restored, saved)
    assert torch.equal(torch.rand(5), next_draws)


def test_nothing_to_restore_leaves_the_state_alone(context: DistributedContext, tmp_path: Path) -> None:
    state = new_state(seed=0)
    assert CheckpointManager(tmp_path, context).restore_latest(state) is None
    assert state.progress == TrainingProgress()


def test_an_asynchronous_save_keeps_the_state_as_it_was_when_called(
    context: DistributedContext, tmp_path: Path
) -> None:
    state = new_state(seed=0)
    train(state, steps=2)
    snapshot = copy.deepcopy(state)
    manager = CheckpointManager(tmp_path, context)
    manager.save_async(state)
    train(state, steps=2)  # goes on mutating the live tensors while the write may be in flight
    manager.close()
    assert manager.published_step == 2

    restored = new_state(seed=1)
    CheckpointManager(tmp_path, context).restore_latest(restored)
    assert_same_training_state(restored, snapshot)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["save", "save_async"])
def test_a_held_checkpoint_resumes_from_memory_as_often_as_asked_and_never_changes(
    context: DistributedContext, tmp_path: Path, caplog: pytest.LogCaptureFixture, asynchronous: bool
) -> None:
    saved = new_state(seed=0)
    train(saved, steps=3)
    manager = CheckpointManager(tmp_path, context, hold_in_memory=True)
    (manager.save_async if asynchronous else manager.save)(saved)
    manager.close()
    snapshot = copy.deepcopy(saved)
    train(saved, steps=2)  # the live tensors the save copied go on changing
    # The volume's copy gone: only the step `latest` names is asked of it.
    (manager.files.path_for(3) / TRAINER_STATE_FILE).unlink()

    for _ in range(2):
        restored = new_state(seed=1)
        caplog.clear()
        with caplog.at_level("INFO", logger="dtjob_trainer"):
            assert CheckpointManager(tmp_path, context, hold_in_memory=True).restore_latest(restored) == 3
        assert "read from this process's memory" in caplog.text
        assert_same_training_state(restored, snapshot)
        train(restored, steps=2)  # the optimizer's momentum buffers change in place


@pytest.mark.parametrize("held", ["older", "newer"])
def test_a_held_checkpoint_of_another_step_than_the_volumes_newest_is_not_used(
    context: DistributedContext, tmp_path: Path, caplog: pytest.LogCaptureFixture, held: str
) -> None:
    state = new_state(seed=0)
    train(state, steps=3)
    CheckpointManager(tmp_path, context, hold_in_memory=True).save(state)
    if held == "older":
        train(state, steps=2)
        CheckpointManager(tmp_path, context).save(state)  # a process that holds nothing saved step 5
    else:
        # The ranks copied step 5's state and rank 0 was killed before `latest` named it.
        held_checkpoint.hold(tmp_path, 5, {"format": -1})  # loading it would fail on the format
    newest = state.progress.step

    restored = new_state(seed=1)
    with caplog.at_level("INFO", logger="dtjob_trainer"):
        assert CheckpointManager(tmp_path, context, hold_in_memory=True).restore_latest(restored) == newest
    assert "read from the volume" in caplog.text
    assert_same_training_state(restored, state)
    assert held_checkpoint.held_step(tmp_path) == newest  # the step read is held from then on


def test_only_replicated_checkpoints_are_held_in_memory(context: DistributedContext, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="replicated models only"):
        CheckpointManager(tmp_path, context, layout="sharded", hold_in_memory=True)


def test_a_resumed_sampler_yields_exactly_the_rest_of_the_epoch() -> None:
    dataset = list(range(101))
    uninterrupted = ResumableDistributedSampler(dataset, num_replicas=2, rank=1, seed=7)
    uninterrupted.set_position(epoch=4, samples_done=0)
    resumed = ResumableDistributedSampler(dataset, num_replicas=2, rank=1, seed=7)
    resumed.set_position(epoch=4, samples_done=10)
    assert list(resumed) == list(uninterrupted)[10:]
    assert len(resumed) == len(uninterrupted) - 10


def transfer_rank(rank: int, port: int, chunk_bytes: int) -> None:
    """Rank 0 sends `awkward_state()` to rank 1, in chunks of `chunk_bytes`; rank 1 checks what it got."""
    rendezvous = TorchRendezvous("127.0.0.1", port, world_size=2, rank=rank, local_rank=0)
    with distributed(rendezvous, rendezvous_timeout_s=30) as context:
        sent = awkward_state()
        if rank == 0:
            held_checkpoint.send_copy(sent, 1, context, chunk_bytes)
            return
        received = held_checkpoint.received_copy(0, context, chunk_bytes)
        assert received.keys() == sent.keys()
        assert received["progress"] == sent["progress"] and received["rng"][1] == sent["rng"][1]
        assert isinstance(received["rng"], tuple) and received["empty"].shape == (0, 3)
        for name in ("weight", "transposed", "step", "half", "empty"):
            assert received[name].dtype == sent[name].dtype and torch.equal(received[name], sent[name]), name
            assert received[name].device.type == "cpu"
        assert torch.equal(received["rng"][0], sent["rng"][0])


def awkward_state() -> dict[str, object]:
    """Tensors that span chunks, share one, are not contiguous, 0-dimensional, empty, of four types."""
    generator = torch.Generator().manual_seed(0)
    return {
        "weight": torch.randn(10, 7, generator=generator),  # 280 bytes: 3 chunks of 128
        "transposed": torch.randn(3, 5, generator=generator).t(),
        "step": torch.tensor(12, dtype=torch.int64),
        "half": torch.randn(9, generator=generator).to(torch.bfloat16),
        "empty": torch.empty(0, 3),
        "rng": (torch.randint(0, 255, (20,), dtype=torch.uint8, generator=generator), "mt19937"),
        "progress": {"epoch": 1, "step": 12},
    }


@pytest.mark.parametrize(
    ("holders", "givers"),
    [
        pytest.param([True, False], {1: 0}, id="a new pod beside rank 0"),
        pytest.param([False, True, True, True], {0: 1}, id="rank 0 lost: the lowest holder sends"),
        pytest.param([True, False, True, False, False], {1: 0, 3: 2, 4: 0}, id="three lost over two holders"),
        pytest.param([True, True], {}, id="every rank holds"),
    ],
)  # fmt: skip
def test_the_ranks_without_a_copy_are_spread_over_the_holders(
    holders: list[bool], givers: dict[int, int]
) -> None:
    assert held_checkpoint.givers(holders) == givers


def test_a_held_checkpoint_is_sent_to_a_rank_without_one_whole_in_chunks() -> None:
    spawn(transfer_rank, args=(free_port(), 128), nprocs=2)
