"""A DistributedSampler that can start an epoch part-way through.

After a restart the run must see exactly the samples an uninterrupted run would have seen next:
the same permutation (seed + epoch, as DistributedSampler does) with the batches already trained on
skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

from torch.utils.data import DistributedSampler


class ResumableDistributedSampler(DistributedSampler):  # type: ignore[type-arg]
    _skip = 0

    def set_position(self, epoch: int, samples_done: int) -> None:
        """Start `epoch`, skipping the first `samples_done` samples of this rank's share of it."""
        self.set_epoch(epoch)
        self._skip = samples_done

    def __iter__(self) -> Iterator[int]:
        return iter(list(super().__iter__())[self._skip :])

    def __len__(self) -> int:
        return max(0, self.num_samples - self._skip)
