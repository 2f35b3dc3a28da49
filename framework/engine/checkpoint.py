"""Checkpoints: one directory per checkpoint, the same layout for every strategy.

    <name>/.metadata, *.distcp   model and optimizer, torch.distributed.checkpoint (DCP):
                                 each rank writes its shards; a checkpoint saved with N
                                 ranks loads with M (DCP reshards on load)
    <name>/trainer.pt            loop state (epoch, step, position in the epoch), scheduler,
                                 grad scaler, callbacks, (zero) the consolidated optimizer
    <name>/rng/<rank>.pt         each rank's RNG states
    <name>/buffers/<rank>.pt     each rank's model buffers (BatchNorm statistics differ between
                                 data-parallel ranks; DCP keeps one rank's copy of a replicated tensor)
    <name>/manifest.json         written last: step, strategy, world size, every file's size

Saves are atomic: everything is written to ``.tmp-<name>`` beside the target and renamed
into place only once complete, so an interrupted save never leaves a broken checkpoint,
and the previous one under the same name stays loadable until the new one replaces it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import random
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch

from framework.engine.checkpoint_files import (
    MANIFEST,
    TRAINER_FILE,
    CheckpointError,
    is_checkpoint,
    remove_entry,
    resolve_ckpt_path,
    verify_checkpoint,
    write_manifest,
)
from framework.engine.safe_load import UntrustedCheckpoint, dcp_planner, dcp_reader, load_file, read_dcp_metadata
from framework.strategies.comm.collectives import barrier

__all__ = [
    "CheckpointError",
    "link_checkpoint",
    "is_checkpoint",
    "load_checkpoint",
    "load_model_checkpoint",
    "load_model_weights",
    "resolve_ckpt_path",
    "save_checkpoint",
]


@contextlib.contextmanager
def _single_process_ok():
    # DCP warns when no process group exists; one process is a supported, intended case here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _dcp():
    # Imported when a checkpoint is written or read (~0.75 s), not by every run that imports this module.
    import torch.distributed.checkpoint as dcp

    return dcp


def rng_state() -> dict:
    """Every RNG's state as tensors and plain values (numpy's keys as a tensor): data that loads
    with ``weights_only``."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.copy()),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    saved = state["numpy"]
    if isinstance(saved, dict):
        np.random.set_state(
            (saved["name"], saved["keys"].numpy(), saved["pos"], saved["has_gauss"], saved["cached_gaussian"])
        )
    else:  # a checkpoint of an earlier version: numpy's own tuple
        np.random.set_state(saved)
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def staging_dir(path: Path) -> Path:
    """Where a checkpoint for ``path`` is written before its rename into place."""
    return path.parent / f".tmp-{path.name}"


def save_checkpoint(path: Path, trainer) -> None:
    """Save ``trainer``'s model, optimizer and loop state to the directory ``path`` (collective)."""
    path = Path(path)
    tmp = staging_dir(path)
    try:
        write_files(tmp, trainer)
    except BaseException as err:  # DCP's CheckpointException is a BaseException
        raise_save_failure(err, tmp, path, trainer.strategy.is_global_zero)
    if trainer.strategy.is_global_zero:  # every rank's files are written: list them, then commit
        commit(tmp, path, checkpoint_about(trainer))
    barrier()


def checkpoint_about(trainer) -> dict:
    """What a checkpoint's manifest says of it besides its files (the data it trained on too, read
    before a resume starts any process)."""
    strategy = trainer.strategy
    about = {
        "step": trainer.global_step,
        "epoch": trainer.current_epoch,
        "strategy": strategy.name,
        "world_size": strategy.world_size,
    }
    model = strategy.unwrap(trainer.model) if trainer.model is not None else None
    base = getattr(model, "adapter_base", None)
    if base is not None:  # an adapter's checkpoint: the frozen base it trained on, and the adapter's settings
        about["adapter_base"] = base
        settings = getattr(model, "adapter_settings", None)
        about.update({"adapter": dataclasses.asdict(settings)} if dataclasses.is_dataclass(settings) else {})
    data = trainer.datamodule_state() if getattr(trainer, "datamodule", None) is not None else None
    try:
        return {**about, **({"datamodule": json.loads(json.dumps(data))} if data is not None else {})}
    except (TypeError, ValueError):  # a datamodule's state that is not JSON stays in trainer.pt alone
        return about


def load_datamodule_state(path: Path, trust: bool = False) -> dict | None:
    """The datamodule's state a checkpoint saved (None: none, or a checkpoint of earlier versions)."""
    return load_file(Path(path) / TRAINER_FILE, trust).get("datamodule")


def raise_save_failure(err: BaseException, tmp: Path, path: Path, is_global_zero: bool) -> None:
    """Remove what a failed save wrote (rank 0) and raise: a full disk as itself, else ``err``."""
    # torch's zip writer hides ENOSPC ("unexpected pos ..."): the free space tells
    full = _io_failure(err) and (
        isinstance(err, OSError)
        and err.errno == errno.ENOSPC
        or "No space left on device" in str(err)
        or shutil.disk_usage(path.parent).free < 2**20
    )
    if is_global_zero:  # nothing half-written stays behind; the committed ones are untouched
        remove_entry(tmp)
    if full:
        raise OSError(
            errno.ENOSPC,
            f"the disk is full: saving checkpoint '{path}' failed and its partial "
            f"files are removed; the checkpoints saved before are intact "
            f"(free space on {path.parent})",
        ) from err
    raise err


def write_files(tmp: Path, trainer, background: bool = False, group=None):
    """Every rank's files of a checkpoint into ``tmp`` (collective). ``background``: the model and
    optimizer state is staged to CPU memory here and written by a thread (DCP's async_save,
    coordinating over ``group``, None without a process group); returns its future."""
    strategy = trainer.strategy
    if strategy.is_global_zero:
        remove_entry(tmp)  # a link there (planted, or left) is removed, never written through
        (tmp / "rng").mkdir(parents=True)
        (tmp / "buffers").mkdir()
    barrier()
    state, extra = strategy.checkpoint_state(trainer.model, trainer.optimizer)
    state["callbacks"] = trainer.sharded_callback_state()
    future = None
    with _single_process_ok():
        if background:
            future = _dcp().async_save(state, checkpoint_id=str(tmp), process_group=group, no_dist=group is None)
        else:
            _dcp().save(state, checkpoint_id=str(tmp))
    torch.save(rng_state(), tmp / "rng" / f"{strategy.rank}.pt")
    torch.save(_buffers(trainer), tmp / "buffers" / f"{strategy.rank}.pt")
    if strategy.is_global_zero:
        torch.save(
            {**trainer.state_dict(), "strategy_extra": extra, "world_size": strategy.world_size}, tmp / TRAINER_FILE
        )
    barrier()
    return future


def commit(tmp: Path, path: Path, about: dict) -> None:
    """Rank 0, once every rank's files are in ``tmp``: the manifest, then ``tmp`` renamed to ``path``."""
    write_manifest(tmp, **about)
    _commit(tmp, path)


def _commit(tmp: Path, path: Path) -> None:
    old = path.parent / f".old-{path.name}"
    remove_entry(old)
    if path.exists() or path.is_symlink():
        os.replace(path, old)
    os.replace(tmp, path)  # the commit point: a rename within one directory
    remove_entry(old)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # a file system without hard links
        shutil.copy2(src, dst)


def link_checkpoint(src: Path, path: Path) -> None:
    """Make ``path`` the checkpoint ``src`` saved at this very step, without writing it again
    (rank 0): hard links to its files (a save never rewrites a file in place), then the same
    atomic rename as a save."""
    tmp = staging_dir(path)
    remove_entry(tmp)
    shutil.copytree(src, tmp, copy_function=_link_or_copy)
    _commit(tmp, path)


@contextlib.contextmanager
def _reading(path: Path, expected: dict | None = None):
    """Name the checkpoint, and what is wrong with it, when reading it fails (``expected``: the
    state it is loaded into, whose keys and shapes are compared with the checkpoint's)."""
    problems = verify_checkpoint(path, contents=True)
    if problems:
        raise CheckpointError("; ".join(problems))
    try:
        yield
    except BaseException as err:
        if not _io_failure(err) or isinstance(err, UntrustedCheckpoint):
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        checked = (
            "sizes and checksums"
            if "crc32" in json.loads((path / MANIFEST).read_text())
            else "sizes; its manifest has no checksums, so changed contents would not show"
        )
        differences = _differences(path, expected) + _adapter_hint(path, expected)
        cause = (
            f"was it saved with another model or optimizer?{differences}"
            if differences or not expected
            else (
                "its keys and shapes are this run's, so a file's contents are damaged in a way its manifest does not "
                "show (a manifest written after the damage?)"
            )
        )
        raise CheckpointError(
            f"checkpoint '{path}' is whole (its files match their {checked}) but cannot be "
            f"loaded into this run ({type(err).__name__}: {first}); {cause}"
        ) from err


def _shapes(state, prefix: str = "") -> dict[str, tuple]:
    """{DCP's flattened key: shape} of the tensors in a nested state dict."""
    out: dict[str, tuple] = {}
    for key, value in state.items() if isinstance(state, dict) else ():
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            out[name] = tuple(value.shape)
        elif isinstance(value, dict):
            out.update(_shapes(value, f"{name}."))
    return out


def _differences(path: Path, expected: dict | None) -> str:
    """The keys this run expects that the checkpoint lacks, and those whose shapes differ."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    if not expected:
        return ""
    try:
        saved = {
            k: tuple(m.size)
            for k, m in read_dcp_metadata(path).state_dict_metadata.items()
            if isinstance(m, TensorStorageMetadata)
        }
    except Exception:  # noqa: BLE001 - the comparison is a hint; the error above stands
        return ""
    wanted = _shapes(expected)
    missing = sorted(k for k in wanted if k not in saved)
    shapes = sorted(
        f"{k} (saved {list(saved[k])}, here {list(wanted[k])})" for k in wanted if k in saved and saved[k] != wanted[k]
    )
    parts = (
        [f"not in the checkpoint: {', '.join(missing[:5])}" + (" ..." if len(missing) > 5 else "")] if missing else []
    ) + ([f"other shapes: {', '.join(shapes[:5])}" + (" ..." if len(shapes) > 5 else "")] if shapes else [])
    return f" ({'; '.join(parts)})" if parts else ""


def _adapter_hint(path: Path, expected: dict | None) -> str:
    """What an adapter checkpoint loaded into a model without adapters needs: the adapter its manifest
    records (the checks before start say it with the command line that selects it: job/cross_checks.py)."""
    manifest = json.loads((path / MANIFEST).read_text())
    if "adapter_base" not in manifest or any(k.endswith("lora_a") for k in _shapes(expected or {})):
        return ""
    settings = ", ".join(f"{k}={v}" for k, v in (manifest.get("adapter") or {}).items())
    return f"; it holds adapters alone ({settings or 'their settings unrecorded'}): load it into a model with them"


def _io_failure(err: BaseException) -> bool:
    """A failure of the checkpoint I/O (DCP raises CheckpointException, a BaseException), not a
    stop of the process (Ctrl-C, exit), which passes through unchanged."""
    return not isinstance(err, (KeyboardInterrupt, SystemExit))


def load_checkpoint(path: Path, trainer, trust: bool = False) -> None:
    """Restore a checkpoint saved by ``save_checkpoint`` (possibly with another world size), as
    data unless ``trust`` (engine/safe_load.py)."""
    strategy = trainer.strategy
    path = Path(path)
    state, _ = strategy.checkpoint_state(trainer.model, trainer.optimizer)
    with _reading(path, state), _single_process_ok():
        saved = load_file(path / TRAINER_FILE, trust)
        state["callbacks"] = _sharded_callbacks(trainer, saved)
        _dcp().load(state, storage_reader=dcp_reader(path, trust), planner=dcp_planner(trust))
    strategy.load_checkpoint_state(trainer.model, trainer.optimizer, state, saved.get("strategy_extra"))
    trainer.load_state_dict(saved)
    # RNG: this rank's own states when the world size is unchanged, else rank 0's.
    same_world = saved.get("world_size") == strategy.world_size
    rng_file = path / "rng" / f"{strategy.rank}.pt"
    if not same_world or not rng_file.exists():
        rng_file = path / "rng" / "0.pt"
    set_rng_state(load_file(rng_file, trust))
    # Buffers: this rank's own when the world size is unchanged (else what DCP restored).
    buffers_file = path / "buffers" / f"{strategy.rank}.pt"
    if same_world and buffers_file.exists():
        _restore_buffers(trainer, load_file(buffers_file, trust))


def _buffers(trainer) -> dict:
    """This rank's model buffers by name (BatchNorm running statistics and the like)."""
    return {name: b.detach().cpu().clone() for name, b in trainer.strategy.unwrap(trainer.model).named_buffers()}


def _restore_buffers(trainer, saved: dict) -> None:
    with torch.no_grad():
        for name, buffer in trainer.strategy.unwrap(trainer.model).named_buffers():
            if name in saved and saved[name].shape == buffer.shape:
                buffer.copy_(saved[name])


def load_model_checkpoint(path: Path, trainer, trust: bool = False) -> None:
    """Load only the model weights of a checkpoint into ``trainer.model`` (set up by any strategy,
    any world size): for evaluation."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    from framework.strategies.base import state_options

    model = trainer.strategy.unwrap(trainer.model)  # (a pipeline's stage: the model's own names)
    options = state_options(model)  # (an adapted model's checkpoint holds its adapters)
    with trainer.strategy.whole_parameters(trainer.model):  # (DeepSpeed's stage 3 partitions them)
        state = {"model": get_model_state_dict(model, options=options)}
        with _reading(Path(path), state), _single_process_ok():
            saved = load_file(Path(path) / TRAINER_FILE, trust)
            state["callbacks"] = _sharded_callbacks(trainer, saved)
            _dcp().load(state, storage_reader=dcp_reader(Path(path), trust), planner=dcp_planner(trust))
        set_model_state_dict(model, state["model"], options=options)
    # the averaged weights it holds (EMA, SWA) come with them, for the callbacks that test on them
    trainer.callbacks.load_states(saved.get("callbacks", {}), only=list(state["callbacks"]))


def _sharded_callbacks(trainer, saved: dict) -> dict:
    """The callbacks' sharded tensors to load in place: those the checkpoint holds (a callback
    added since keeps what it has; it starts from the loaded weights)."""
    held = set(saved.get("sharded_callbacks", ()))
    return {key: tensors for key, tensors in trainer.sharded_callback_state().items() if key in held}


def load_model_weights(path: Path, model: torch.nn.Module, strict: bool = True, trust: bool = False) -> dict:
    """Load only the model weights of a checkpoint directory (or a ``model.pt`` / ``.safetensors`` file)
    into a plain, unwrapped ``model``, as data unless ``trust``. Returns {'loaded': [...],
    'missing': [...], 'unexpected': [...], 'mismatched': [...]}; with ``strict=False`` only names
    with matching shapes are loaded."""
    path = Path(path)
    if path.is_dir():
        saved = _checkpoint_model_tensors(path, trust)
    elif path.suffix == ".safetensors":
        from safetensors.torch import load_file as load_safetensors

        saved = load_safetensors(str(path))
    else:
        saved = load_file(path, trust)
    own = model.state_dict()
    matching = {k: v for k, v in saved.items() if k in own and own[k].shape == v.shape}
    report = {
        "loaded": sorted(matching),
        "missing": sorted(set(own) - set(saved)),
        "unexpected": sorted(set(saved) - set(own)),
        "mismatched": sorted(k for k in saved if k in own and own[k].shape != saved[k].shape),
    }
    if strict and (report["missing"] or report["unexpected"] or report["mismatched"]):
        raise RuntimeError(
            f"strict weight loading from {path} failed: missing {report['missing']}, "
            f"unexpected {report['unexpected']}, shape mismatch {report['mismatched']}"
        )
    model.load_state_dict(matching, strict=False)
    return report


def _checkpoint_model_tensors(path: Path, trust: bool) -> dict[str, torch.Tensor]:
    """Every model tensor of a checkpoint directory, whole, on the CPU (from its metadata: names,
    shapes and dtypes, then read into tensors of those; never written anywhere)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = read_dcp_metadata(path, trust)
    tensors = {
        key[len("model.") :]: torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in metadata.state_dict_metadata.items()
        if key.startswith("model.") and isinstance(meta, TensorStorageMetadata)
    }
    state = {"model": tensors}
    with _single_process_ok():  # each rank reads the whole tensors itself: no collective
        _dcp().load(state, storage_reader=dcp_reader(path, trust), planner=dcp_planner(trust), no_dist=True)
    return state["model"]
