"""Start N local ranks: torch's elastic agent (torchrun's machinery) or torch.multiprocessing.spawn.

Ranks get the resolved config as a plain dict: they never re-parse argv or re-run Hydra.
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import torch
from omegaconf import OmegaConf

from framework.launch.env import detect_environment
from framework.engine.results import write_json
from framework.launch.rank_logging import configure_rank_logging
from framework.strategies import RankEnv
from framework.strategies.base import free_port


def _limit_threads(local_world_size: int) -> None:
    # N ranks on one CPU must not each start a thread per core (torchrun sets OMP_NUM_THREADS=1).
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world_size))


def _run_rank(container: dict, env: RankEnv) -> dict:
    from framework.run import run

    configure_rank_logging(container["output_dir"], env.rank)
    _limit_threads(env.local_world_size)
    return run(OmegaConf.create(container), env)


def _elastic_entry(container: dict) -> dict:
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(_run_rank)(container, detect_environment())


def _standard_start_method() -> None:
    # Spawned children inherit the parent's start-method name; inside a joblib (loky) worker
    # that is "loky", which a fresh child cannot set up. Use plain spawn there.
    import multiprocessing

    if multiprocessing.get_start_method(allow_none=True) not in (None, "spawn", "fork", "forkserver"):
        multiprocessing.set_start_method("spawn", force=True)


def launch_elastic(container: dict, nprocs: int) -> dict:
    """N ranks under torch's elastic agent on this machine; returns rank 0's results."""
    _standard_start_method()
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nprocs, run_id=uuid.uuid4().hex,
                          rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", max_restarts=0,
                          monitor_interval=0.1, start_method="spawn")
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        returns = elastic_launch(config, _elastic_entry)(container)
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()  # the root cause: the others were stopped after it
        message = failure.message.get("message", str(failure.message)) if isinstance(failure.message, dict) \
            else str(failure.message)
        raise _job_failed(container, rank, " | ".join(message.strip().splitlines()) or
                          f"exit code {failure.exitcode}") from None
    return returns[0]


def _job_failed(container: dict, rank: int, message: str) -> RuntimeError:
    """Record in results.json which rank failed first and why; return the error to raise."""
    path = Path(container["output_dir"]) / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results.update(status="failed", failed_rank=rank, error=message)
    write_json(path, results)
    return RuntimeError(f"rank {rank} failed: {message}")


def _spawn_entry(local_rank: int, container: dict, nprocs: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(local_rank),
                      LOCAL_RANK=str(local_rank), WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs))
    _run_rank(container, detect_environment())


def launch_spawn(container: dict, nprocs: int) -> dict:
    """N ranks by torch.multiprocessing.spawn; rank 0's results come back through results.json."""
    _standard_start_method()
    try:
        torch.multiprocessing.spawn(_spawn_entry, args=(container, nprocs, free_port()), nprocs=nprocs, join=True)
    except torch.multiprocessing.ProcessRaisedException as err:
        # The child's traceback: keep the exception lines after its last indented frame line.
        lines = str(err).strip().splitlines()
        last_frame = max((i for i, line in enumerate(lines) if line.startswith(" ")), default=-1)
        raise _job_failed(container, err.error_index, " | ".join(lines[last_frame + 1:]) or "failed") from None
    except torch.multiprocessing.ProcessExitedException as err:
        raise _job_failed(container, err.error_index, f"exited with code {err.exit_code}") from None
    return json.loads((Path(container["output_dir"]) / "results.json").read_text())
