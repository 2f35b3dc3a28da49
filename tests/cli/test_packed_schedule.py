"""hydra/launcher=packed's schedule: the largest waiting job first, smaller ones filling the
devices it cannot use yet, never more than max_skips times in a row past it; and its device pool."""

from __future__ import annotations

import pytest

from framework.launch.packed_devices import pool
from hydra_plugins.framework_packed.schedule import DevicePool, Pending, largest_first


def jobs(*needs: int) -> list[Pending]:
    return largest_first([Pending(num, need, num) for num, need in enumerate(needs)])


def started(devices: DevicePool, waiting: list[Pending]) -> list[tuple[int, list[int]]]:
    return [(job.num, ids) for job, ids in devices.next_jobs(waiting)]


def test_the_largest_first_then_the_smaller_ones_on_what_is_left():
    devices, waiting = DevicePool([0, 1, 2, 3]), jobs(1, 2, 1, 4, 1)
    assert started(devices, waiting) == [(3, [0, 1, 2, 3])]  # the 4-device job, alone
    devices.give_back([0, 1, 2, 3])
    assert started(devices, waiting) == [(1, [0, 1]), (0, [2]), (2, [3])]
    devices.give_back([2])
    assert started(devices, waiting) == [(4, [2])] and not waiting


def test_a_waiting_large_job_is_passed_over_at_most_max_skips_times():
    devices, waiting = DevicePool([0, 1], max_skips=2), jobs(1, 2, 1, 1, 1)
    assert started(devices, waiting) == [(1, [0, 1])]
    devices.give_back([0, 1])
    waiting.insert(0, Pending(9, 2, 9))  # a 2-device job waits while 1-device jobs run
    devices.take(1)
    assert started(devices, waiting) == [(0, [1])]  # skipped past it once
    devices.give_back([1])
    assert started(devices, waiting) == [(2, [1])]  # twice: the limit
    devices.give_back([1])
    assert started(devices, waiting) == []  # a third 1-device job would fit, but waits behind it
    devices.give_back([0])
    assert started(devices, waiting) == [(9, [0, 1])]  # now it goes first, though smaller ones fit


def test_the_pool_is_this_processes_cores_or_what_the_launcher_names():
    kind, cores = pool("cpu", None)
    assert kind == "cpu" and cores and pool("cpu", 1) == ("cpu", cores[:1])
    with pytest.raises(ValueError, match="hydra.launcher.devices"):
        pool("cpu", len(cores) + 1)
    with pytest.raises(ValueError, match="hydra.launcher.kind"):
        pool("tpu", None)
