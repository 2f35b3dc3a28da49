"""The rank's data: each of the datamodule's loaders re-created with the per-rank batch and the
strategy's sampler, and batches moved to the device."""

from __future__ import annotations

from typing import Optional

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler

from framework.data.batched import collate_for


def limit_batches(total: int, limit: int | float) -> int:
    """Lightning's limit_*_batches: a float is a fraction of ``total``, an int a count."""
    if isinstance(limit, float):
        return total if limit == 1.0 else int(total * limit)
    return min(total, limit)


def batch_size_of(batch) -> int:
    while isinstance(batch, (list, tuple)):
        batch = batch[0]
    if isinstance(batch, dict):
        return batch_size_of(next(iter(batch.values())))
    return batch.shape[0]


def move_to_device(batch, device: torch.device, dtype: Optional[torch.dtype] = None):
    """``batch``'s tensors on ``device``; its floating ones in ``dtype`` when given (*-true precision)."""
    if isinstance(batch, torch.Tensor):
        if dtype is not None and batch.is_floating_point():
            return batch.to(device, dtype, non_blocking=True)
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to_device(b, device, dtype) for b in batch)
    if isinstance(batch, dict):
        return {k: move_to_device(v, device, dtype) for k, v in batch.items()}
    return batch


class RankLoaders:
    """Makes this rank's loaders: ``batch_size / data-parallel size`` samples per batch, one
    seeded sampler whose union over the ranks' batch k is single-device batch k."""

    def __init__(
        self, strategy, seed: int, accumulate_grad_batches: int, overfit: bool, input_dtype: Optional[torch.dtype]
    ):
        self.strategy, self.seed = strategy, seed
        self.accumulate_grad_batches, self.overfit = accumulate_grad_batches, overfit
        self.input_dtype = input_dtype
        self._move = strategy.device.type != "cpu" or input_dtype is not None
        self.global_batch_size = 0  # samples per optimizer step (accumulation included)
        self.micro_batch_global_size = 0  # samples per micro-batch, over all ranks
        # Seeded per epoch: a resumed run's DataLoader draws the same worker seeds, and the
        # loader never consumes the global RNG that dropout and friends use.
        self.generator = torch.Generator()

    def on_device(self, batch):
        """The batch on the strategy's device, its floating tensors in a *-true precision's dtype."""
        return move_to_device(batch, self.strategy.device, self.input_dtype) if self._move else batch

    def make(self, loader: Optional[DataLoader], train: bool) -> Optional[DataLoader]:
        """Re-create ``loader`` with the per-rank batch and the strategy's sampler."""
        if loader is None:
            return None
        if isinstance(loader.dataset, IterableDataset) or loader.batch_size is None:
            raise ValueError(
                "datamodule: the engine shards map-style datasets with a batch_size; "
                "an IterableDataset or a custom batch_sampler cannot be split across ranks"
            )
        global_batch = loader.batch_size
        world = self.strategy.topology.data_parallel_size
        if global_batch % world:
            raise ValueError(
                f"datamodule.batch_size: the global batch {global_batch} does not divide "
                f"across {world} data-parallel ranks"
            )
        length = len(loader.dataset)
        if train:
            if length < global_batch:
                raise ValueError(
                    f"datamodule.batch_size: the global batch {global_batch} is larger than the "
                    f"training set ({length} samples)"
                )
            self.global_batch_size = global_batch * self.accumulate_grad_batches
            self.micro_batch_global_size = global_batch
        shuffle = train and isinstance(loader.sampler, RandomSampler) and not self.overfit
        # Training drops the tail that does not fill a global batch: every rank then runs
        # the same number of equal steps, and 1 rank and N ranks see the same batches.
        # a dataset of a corpus's windows shuffles by an order computed per position (its shuffle_order): no
        # permutation of every window held in each rank (passed only then: a strategy of one's own may
        # take the four arguments of earlier versions)
        order = getattr(loader.dataset, "shuffle_order", None)
        own = {"order": order} if order is not None else {}
        sampler = self.strategy.sampler(length, shuffle, self.seed, global_batch if train else None, **own)
        return DataLoader(
            loader.dataset,
            batch_size=global_batch // world,
            sampler=sampler,
            num_workers=loader.num_workers,
            collate_fn=collate_for(loader.collate_fn),
            pin_memory=self.strategy.device.type == "cuda",
            drop_last=False,
            persistent_workers=loader.persistent_workers,
            worker_init_fn=loader.worker_init_fn,
            timeout=loader.timeout,
            generator=self.generator,
        )

    def stand_in_batch(self, loader: DataLoader):
        """The dataset's first sample as a batch on the device, for forwards whose results are discarded."""
        return self.on_device(loader.collate_fn([loader.dataset[0]]))
