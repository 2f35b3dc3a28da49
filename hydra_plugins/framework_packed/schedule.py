"""Which waiting job starts next, and on which devices: the largest first (a job needing many
devices would otherwise wait behind a stream of small ones), smaller ones filling devices the
largest cannot use yet, but never more than ``max_skips`` times in a row past it, so no job starves.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Pending:
    num: int  # Hydra's job number
    need: int  # devices the job asks for (at most the pool's)
    index: int  # its place in the batch Hydra gave


@dataclass
class DevicePool:
    devices: list[int]
    free: list[int] = field(default_factory=list)
    max_skips: int = 0
    skips: int = 0

    def __post_init__(self) -> None:
        self.free = list(self.devices)
        self.max_skips = self.max_skips or len(self.devices)

    def take(self, need: int) -> list[int]:
        taken, self.free = self.free[:need], self.free[need:]
        return taken

    def give_back(self, devices: list[int]) -> None:
        self.free = sorted(self.free + devices)

    def next_jobs(self, waiting: list[Pending]) -> list[tuple[Pending, list[int]]]:
        """The jobs to start now (removed from ``waiting``, which is kept largest first) and their devices."""
        started = []
        for job in list(waiting):
            head = waiting[0]
            if job.need > len(self.free):
                continue
            if job is not head:
                if self.skips >= self.max_skips:
                    break  # the largest waiting job has been passed over enough: it goes next
                self.skips += 1
            else:
                self.skips = 0
            waiting.remove(job)
            started.append((job, self.take(job.need)))
        return started


def largest_first(jobs: list[Pending]) -> list[Pending]:
    return sorted(jobs, key=lambda job: (-job.need, job.num))
