"""The digits data set, split for training and testing the same way on every rank."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

FEATURES = 64
CLASSES = 10


@dataclass(frozen=True)
class DigitsSplit:
    x_train: NDArray[np.float32]
    y_train: NDArray[np.int64]
    x_test: NDArray[np.float32]
    y_test: NDArray[np.int64]


def load_digits_split(seed: int = 0) -> DigitsSplit:
    """8x8 images scaled to [0, 1]; a stratified 80/20 split that is the same on every rank."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    return DigitsSplit(x_train, y_train, x_test, y_test)
