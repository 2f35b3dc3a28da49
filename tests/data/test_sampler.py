"""The sampler that makes 1 rank and N ranks see the same global batches."""

from __future__ import annotations

from framework.data.sampler import ShardedSampler, feistel


def test_union_of_rank_batches_is_the_single_device_batch():
    length, global_batch, world = 103, 8, 4
    single = list(ShardedSampler(length, 1, 0, shuffle=True, seed=7, drop_last_multiple=global_batch))
    shards = [
        list(ShardedSampler(length, world, r, shuffle=True, seed=7, drop_last_multiple=global_batch))
        for r in range(world)
    ]
    per_rank = global_batch // world
    assert len(single) == 96 and all(len(s) == 24 for s in shards)
    for k in range(len(single) // global_batch):
        union = sorted(i for s in shards for i in s[k * per_rank : (k + 1) * per_rank])
        assert union == sorted(single[k * global_batch : (k + 1) * global_batch])


def test_epochs_reshuffle_identically_on_every_rank():
    a, b = ShardedSampler(50, 2, 0, seed=1), ShardedSampler(50, 2, 1, seed=1)
    first = list(a) + list(b)
    a.set_epoch(1)
    b.set_epoch(1)
    second = list(a) + list(b)
    assert sorted(first) == sorted(second) == list(range(50)) and first != second


def test_evaluation_shards_cover_every_sample_once():
    shards = [list(ShardedSampler(11, 3, r, shuffle=False)) for r in range(3)]
    assert sorted(i for s in shards for i in s) == list(range(11))
    assert [len(ShardedSampler(11, 3, r)) for r in range(3)] == [4, 4, 3]


def test_a_bijection_computed_per_position_gives_the_same_global_batches_and_resumes():
    import numpy as np

    for length in (1, 2, 3, 7, 100, 4097):
        assert sorted(feistel(np.arange(length), length, [5, 0]).tolist()) == list(range(length))
    single = list(ShardedSampler(103, 1, 0, True, 7, 8, order=feistel))
    shards = [list(ShardedSampler(103, 4, r, True, 7, 8, order=feistel)) for r in range(4)]
    assert len(single) == 96 and single != sorted(single)
    for k in range(12):
        assert sorted(i for s in shards for i in s[2 * k : 2 * k + 2]) == sorted(single[8 * k : 8 * k + 8])
    resumed = ShardedSampler(103, 4, 1, True, 7, 8, order=feistel)
    resumed.set_start(5)
    assert list(resumed) == shards[1][5:]
    resumed.set_epoch(1)
    resumed.set_start(0)
    assert sorted(list(resumed)) != sorted(shards[1]) or list(resumed) != shards[1]  # another epoch's order
