"""Joining and leaving the job's process group (nccl on CUDA, gloo on CPU), as plain functions."""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from framework.config.environment import RankEnv, free_port


def _attempt_store(world_size: int, timeout: datetime.timedelta):
    """Under an elastic agent (torchrun, our launcher), the agent's store, with keys of this
    attempt's own: the store outlives a restart, and the failed attempt's rank addresses in it
    would send the new ranks to dead peers. None elsewhere (init_process_group's own rendezvous)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size, is_master=False, timeout=timeout
    )
    return dist.PrefixStore(f"attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/", store)


def join_process_group(env: RankEnv, device: torch.device, timeout_s: float, always: bool = False) -> None:
    """Select ``device`` and join the job's group when it has several processes (or ``always``:
    wrappers such as DDP and FSDP need a group even for one process)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not (env.world_size > 1 or always) or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    # The timeout turns a hung collective (a rank that died, a mismatched call) into an error
    # instead of a job that waits forever.
    timeout = datetime.timedelta(seconds=float(timeout_s))
    init_method, store = None, _attempt_store(env.world_size, timeout)
    if env.world_size == 1 and "MASTER_ADDR" not in os.environ:
        init_method = f"tcp://127.0.0.1:{free_port()}"  # a one-process group, in this process
    try:
        dist.init_process_group(
            backend, init_method=init_method, store=store, rank=env.rank, world_size=env.world_size, timeout=timeout
        )
    except Exception as err:
        if "EADDRINUSE" in str(err) or "address already in use" in str(err).lower():
            where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
            raise RuntimeError(
                f"MASTER_PORT: the rendezvous port {where} is already in use; set "
                f"MASTER_PORT (torchrun --master-port) to a free port"
            ) from err
        raise


def leave_process_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
