"""The deepspeed package itself: whether it is here, its import without the lines it would add to
every run's log, and the process groups it keeps in module globals between runs of one process."""

from __future__ import annotations

import logging
import warnings

from framework.config.optional_modules import install_hint

INSTALL = install_hint("deepspeed")


def deepspeed_missing() -> str | None:
    """Why there is no deepspeed package here, or None (found, not imported: that takes seconds,
    and the ranks import it anyway)."""
    import importlib.util

    return None if importlib.util.find_spec("deepspeed") is not None else "No module named 'deepspeed'"


def quiet_import():
    """``import deepspeed`` on this rank's accelerator, without the lines it would add to every
    run's log (its accelerator guess, torch's CUDA_HOME note, the deprecation warnings of the
    collectives it calls) and without compiling its inference all-reduce."""
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=r"`torch\.distributed\.\w+` is deprecated", category=FutureWarning)
    import deepspeed

    for name in ("DeepSpeed", "compilers", "distutils"):
        logging.getLogger(name).setLevel(logging.WARNING)
    _without_inference_all_reduce()
    return deepspeed


def _without_inference_all_reduce() -> None:
    """DeepSpeed's first process group on CPU compiles a shared-memory all-reduce (C++: about 40 s
    on 2 cores, again in every virtual environment, since they share torch's extension cache).
    Only DeepSpeed's inference path calls it; training's collectives go through torch.distributed.
    Without it, ``inference_all_reduce`` uses torch.distributed's all-reduce instead."""
    import importlib

    # by its module's name: the attribute ``deepspeed.comm.torch`` is the torch package itself
    backend = importlib.import_module("deepspeed.comm.torch")
    if hasattr(backend, "build_shm_op"):
        backend.build_shm_op = lambda: None


def forget_process_groups() -> None:
    """DeepSpeed keeps the process groups of its first initialize in module globals; the next run in
    this process (a sweep's, a notebook's) has a new process group, which it must not mistake for them."""
    import sys

    groups, comm = sys.modules.get("deepspeed.utils.groups"), sys.modules.get("deepspeed.comm.comm")
    for name, value in list(vars(groups).items()) if groups else ():
        if name.endswith(("_GROUP", "_GROUP_RANKS")) and name.startswith("_"):
            setattr(groups, name, {} if isinstance(value, dict) else None)
    if groups is not None:
        groups.mpu = groups.mesh_device = None
    if comm is not None:
        comm.cdb = None
