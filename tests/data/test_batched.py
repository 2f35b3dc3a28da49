"""Batched fetching: a batch is one gather, with the same samples, order and losses as before."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset, default_collate

from framework import compose, fit
from framework.data.batched import GatheredSamples, GatheringTensorDataset, collate_for
from framework.data.sampler import ShardedSampler
from tests.helpers.configs import TINY, train_losses


def test_a_gathered_batch_is_the_collated_samples_on_every_rank():
    x, y = torch.randn(100, 1, 8, 8), torch.randint(0, 10, (100,))
    for rank in (0, 1):
        plain = DataLoader(TensorDataset(x, y), batch_size=8, sampler=ShardedSampler(100, 2, rank, True, 3, 16))
        gathered = DataLoader(
            GatheringTensorDataset(x, y),
            batch_size=8,
            collate_fn=collate_for(default_collate),
            sampler=ShardedSampler(100, 2, rank, True, 3, 16),
        )
        pairs = list(zip(plain, gathered))
        assert len(pairs) == len(plain) == 6
        for a, b in pairs:
            assert type(a) is type(b) is list and all(torch.equal(u, v) for u, v in zip(a, b))


def test_a_users_own_collate_still_sees_samples():
    dataset = GatheringTensorDataset(torch.arange(10.0), torch.arange(10))
    seen = []
    loader = DataLoader(dataset, batch_size=4, collate_fn=collate_for(lambda samples: seen.append(samples) or 0))
    list(loader)
    assert isinstance(seen[0], GatheredSamples) and len(seen[0]) == 4
    assert [tuple(int(v) for v in s) for s in seen[0]] == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_training_losses_are_bit_identical_to_fetching_sample_by_sample(tmp_path):
    fit(compose(TINY + ["logger=csv"]), output_dir=str(tmp_path / "gathered"))
    fit(
        compose(TINY + ["logger=csv", "datamodule._target_=tests.helpers.probes.plain_digits"]),
        output_dir=str(tmp_path / "plain"),
    )
    assert train_losses(tmp_path / "gathered") == train_losses(tmp_path / "plain")
