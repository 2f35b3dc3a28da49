"""Where this process sits in a job, and what it runs on: the lowest layer, used by every other.

``RankEnv`` comes from the variables of the launcher that started this process (torchrun or
the elastic agent, SLURM's ``srun``, submitit's local executor, ``horovodrun``); ``resolve_accelerator``
turns ``auto`` into a device type; ``free_port`` finds a TCP port for a local rendezvous.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits in the job (all 0 / 1 for a single process)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    # What started the ranks, when a launcher did: torchrun, srun, submitit, horovodrun.
    launcher: str = ""


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# How many jobs of a sweep run at once on this machine (hydra/launcher=joblib's n_jobs), set by
# the job for its ranks: they share the cores with the jobs beside them.
PARALLEL_JOBS = "FRAMEWORK_PARALLEL_JOBS"
# Set in a job of hydra/launcher=packed (its own process): the launcher, not the job, writes the
# sweep's report when a signal stops the sweep.
PACKED_JOB = "FRAMEWORK_PACKED_JOB"
# The pid of the process that launched a job or its ranks, for a process forked from a fork server
# (which outlives the launcher while its children run): the process it watches and ends with.
LAUNCHER_PID = "FRAMEWORK_LAUNCHER_PID"


def cpu_cores() -> list[int]:
    """The ids of the CPU cores this process may run on (its affinity mask; all of the machine's elsewhere)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def available_cores() -> int:
    """How many CPU cores this process may run on."""
    return len(cpu_cores())


def resolve_accelerator(name: str) -> str:
    """``auto`` -> cuda if available, else mps, else cpu; ``gpu`` (Lightning's name) -> cuda, or mps
    where that is the one here; other names unchanged."""
    if name not in ("auto", "gpu"):
        return name
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu" if name == "auto" else "cuda"  # (gpu without one: the cuda check names it)


def detect_environment(environ: dict | None = None) -> RankEnv | None:
    """RankEnv from torchrun's (or the elastic agent's), SLURM's or submitit's local executor's
    variables; None outside them.

    SLURM counts only inside a job step (``srun``), where every task has its own
    SLURM_PROCID; a batch script's own shell is not a rank. For SLURM, MASTER_ADDR and
    MASTER_PORT are derived (first node of the job, a port from the job id) unless set.
    """
    env = os.environ if environ is None else environ
    for launcher in (_torchrun, _slurm, _submitit_local, _horovodrun):
        found = launcher(env)
        if found is not None:
            return found
    return None


def _torchrun(env) -> RankEnv | None:
    if not ("RANK" in env and "WORLD_SIZE" in env and "LOCAL_RANK" in env):
        return None
    return RankEnv(
        rank=int(env["RANK"]),
        local_rank=int(env["LOCAL_RANK"]),
        world_size=int(env["WORLD_SIZE"]),
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
        launcher="torchrun",
    )


def _slurm(env) -> RankEnv | None:
    if not ("SLURM_PROCID" in env and "SLURM_STEP_ID" in env and int(env.get("SLURM_NTASKS", "1")) > 1):
        return None
    world = int(env["SLURM_NTASKS"])
    nodes = int(env.get("SLURM_NNODES", env.get("SLURM_JOB_NUM_NODES", "1")))
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "127.0.0.1")
    env.setdefault("MASTER_ADDR", first_host(nodelist))
    env.setdefault("MASTER_PORT", str(15000 + int(env.get("SLURM_JOB_ID", "0")) % 20000))
    return RankEnv(
        rank=int(env["SLURM_PROCID"]),
        local_rank=int(env.get("SLURM_LOCALID", "0")),
        world_size=world,
        local_world_size=world // max(1, nodes),
        launcher="srun",
    )


def _submitit_local(env) -> RankEnv | None:
    """submitit's local executor (hydra/launcher=slurm_local): a SLURM job's tasks on this
    machine, with the same one-task-per-device layout and its own variable names."""
    if not ("SUBMITIT_LOCAL_GLOBALID" in env and int(env.get("SUBMITIT_LOCAL_NTASKS", "1")) > 1):
        return None
    world = int(env["SUBMITIT_LOCAL_NTASKS"])
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", str(15000 + int(env.get("SUBMITIT_LOCAL_JOB_ID", "0")) % 20000))
    return RankEnv(
        rank=int(env["SUBMITIT_LOCAL_GLOBALID"]),
        local_rank=int(env.get("SUBMITIT_LOCAL_LOCALID", "0")),
        world_size=world,
        local_world_size=world,
        launcher="submitit",
    )


def _horovodrun(env) -> RankEnv | None:
    """horovodrun: its own rendezvous, no MASTER_ADDR; strategy.backend=horovod makes the
    torch.distributed group from Horovod's (HorovodStrategy.setup_environment)."""
    if not ("HOROVOD_RANK" in env and "HOROVOD_SIZE" in env):
        return None
    return RankEnv(
        rank=int(env["HOROVOD_RANK"]),
        local_rank=int(env.get("HOROVOD_LOCAL_RANK", "0")),
        world_size=int(env["HOROVOD_SIZE"]),
        local_world_size=int(env.get("HOROVOD_LOCAL_SIZE", env["HOROVOD_SIZE"])),
        launcher="horovodrun",
    )


def first_host(nodelist: str) -> str:
    """First host of a SLURM node list: 'gpu[03-05,09],cpu1' -> 'gpu03'."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        return nodelist
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    return prefix + re.split(r"[-,]", ranges)[0]
