"""Seed and snapshot the random number generators a training step may draw from.

Snapshots hold only tensors, ints, floats, lists and tuples, so checkpoints load with
torch.load(weights_only=True) and never unpickle code.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

RngState = dict[str, Any]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def capture_rng_state() -> RngState:
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    state: RngState = {
        "python": random.getstate(),
        "numpy": (kind, np.asarray(keys).tolist(), position, has_gauss, cached_gaussian),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: RngState) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, position, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
