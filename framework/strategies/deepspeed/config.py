"""The DeepSpeed config a run trains with: the user's own (``strategy.config``, a path to a
``ds_config.json`` or a mapping) merged with the keys this framework owns, which come from the
rest of the experiment (the micro-batch from ``datamodule.batch_size``, the accumulation, the
clipping, the precision, the ZeRO stage and offload from ``strategy.*``).

A key of the user's file that disagrees with the framework's value is a conflict, named with
both keys before any process starts; a key that agrees, or one the framework does not own
(bucket sizes, ``overlap_comm``, ...), is kept as written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from framework.config.experiment import Experiment
from framework.config.ranges import ranged
from framework.config.schemas import StrategyConfig
from framework.config.topology import Topology

STAGES = (1, 2, 3)
# Sections DeepSpeed would build objects from, which come from this framework's own groups here.
BUILT_HERE = {
    "optimizer": "the optimizer group (optimizer=adamw, ...: a torch.optim optimizer)",
    "scheduler": "the scheduler group (scheduler=cosine, ...)",
}
# Precisions DeepSpeed trains in here (bf16-true: DeepSpeed's bf16 with fp32 master weights).
PRECISIONS = ("32-true", "bf16-mixed", "bf16-true")


@dataclass
class DeepSpeedOptions(StrategyConfig):
    name: str = "deepspeed"
    # ZeRO stage 1 (optimizer state sharded), 2 (+ gradients), 3 (+ parameters); null: the user's
    # file's zero_optimization.stage, else 2.
    stage: Optional[int] = ranged(None, low=1)
    # Optimizer state (and, with offload_parameters, stage 3's parameters) kept on the CPU; null:
    # the user's file's setting, else false.
    offload_optimizer: Optional[bool] = None
    offload_parameters: Optional[bool] = None  # stage 3's parameters on the CPU (see offload_optimizer)
    # The user's DeepSpeed config: a path to a ds_config.json, or a mapping (null: none). The ranks
    # get the merged config here, as a mapping.
    config: Union[str, dict, None] = None


def user_config(config) -> tuple[dict, str]:
    """(the user's DeepSpeed config as a mapping, how to name it in a message); raises ValueError
    naming ``strategy.config`` when the file cannot be read as JSON."""
    if config is None:
        return {}, "strategy.config"
    if isinstance(config, dict):
        return config, "strategy.config"
    path = Path(str(config)).expanduser()
    if not path.is_file():
        raise ValueError(f"strategy.config: no file {path} (a DeepSpeed ds_config.json, or a mapping)")
    try:
        loaded = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"strategy.config: {path} is not a JSON file: {err}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"strategy.config: {path} holds {type(loaded).__name__}, not a JSON object")
    return loaded, f"strategy.config ({path.name})"


def _get(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _set(config: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        config = config.setdefault(part, {})
    config[last] = value


def _offload(user: dict, section: str, option: Optional[bool]) -> Optional[bool]:
    """The offload a strategy option asks for, else the file's (device cpu or nvme: on)."""
    if option is not None:
        return option
    device = _get(user, f"zero_optimization.{section}.device")
    return None if device is None else device not in ("none", None)


def owned_keys(
    options: DeepSpeedOptions,
    user: dict,
    micro_batch: int,
    accumulate: int,
    data_parallel: int,
    clip_val: Optional[float],
    precision: str,
) -> dict:
    """{DeepSpeed key: (value, the framework key that sets it)} for the keys the framework owns."""
    stage = options.stage if options.stage is not None else (_get(user, "zero_optimization.stage") or 2)
    owned = {
        "train_micro_batch_size_per_gpu": (
            micro_batch,
            f"datamodule.batch_size over {data_parallel} data-parallel rank(s), {micro_batch} per rank",
        ),
        "gradient_accumulation_steps": (accumulate, "trainer.accumulate_grad_batches"),
        "train_batch_size": (
            micro_batch * accumulate * data_parallel,
            "datamodule.batch_size x trainer.accumulate_grad_batches",
        ),
        "gradient_clipping": (float(clip_val or 0.0), "trainer.gradient_clip_val"),
        "bf16.enabled": (precision == "bf16-true", f"trainer.precision={precision}"),
        "fp16.enabled": (False, f"trainer.precision={precision}"),
        "zero_optimization.stage": (stage, "strategy.stage"),
    }
    for section, option, key in (
        ("offload_optimizer", options.offload_optimizer, "strategy.offload_optimizer"),
        ("offload_param", options.offload_parameters, "strategy.offload_parameters"),
    ):
        wanted = _offload(user, section, option)
        if wanted is not None:
            owned[f"zero_optimization.{section}.device"] = ("cpu" if wanted else "none", key)
    return owned


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (a in (0, 1) and b in (0, 1) and bool(a) == bool(b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def merged_config(user: dict, owned: dict, named: str) -> tuple[dict, list[str]]:
    """(the config DeepSpeed gets, the conflicts between the user's file and the framework's keys)."""
    problems = [
        f"{named}: '{section}' is built by DeepSpeed there, but comes from {where} here; remove it from the file"
        for section, where in BUILT_HERE.items()
        if section in user
    ]
    merged = json.loads(json.dumps({k: v for k, v in user.items() if k not in BUILT_HERE}))
    for key, (value, source) in owned.items():
        theirs = _get(user, key)
        if theirs is not None and theirs != "auto" and not _same(theirs, value):
            problems.append(
                f"{named}: {key}={theirs!r} conflicts with {source} (which gives {value!r}); remove "
                f"{key} from the file (the framework sets it) or change {source.split(' ')[0]}"
            )
        _set(merged, key, value)
    if merged.get("managed_gradient_accumulation") not in (None, False):
        problems.append(
            f"{named}: managed_gradient_accumulation={merged['managed_gradient_accumulation']!r}: the "
            "framework's loop calls step() once per accumulation window (false); remove it from the file"
        )
    # The framework's loop: one step() per accumulation window, torch optimizers, a quiet log.
    for key, value in (
        ("managed_gradient_accumulation", False),
        ("zero_allow_untested_optimizer", True),
        ("zero_force_ds_cpu_optimizer", False),
        ("steps_per_print", 2**31 - 1),
        ("wall_clock_breakdown", False),
    ):
        merged.setdefault(key, value)
    return merged, problems


def framework_values(run: Experiment, topology: Topology) -> dict:
    trainer, batch = run.trainer, run.datamodule.get("batch_size")
    batch = batch if isinstance(batch, int) else topology.data_parallel_size
    return {
        "micro_batch": max(batch // topology.data_parallel_size, 1),
        "accumulate": int(trainer.accumulate_grad_batches or 1),
        "data_parallel": topology.data_parallel_size,
        "clip_val": trainer.gradient_clip_val,
        "precision": str(trainer.precision),
    }


def deepspeed_config(options: DeepSpeedOptions, run: Experiment, topology: Topology) -> tuple[dict, list[str]]:
    """(the DeepSpeed config of this run, every problem of it)."""
    try:
        user, named = user_config(options.config)
    except ValueError as err:
        return {}, [str(err)]
    values = framework_values(run, topology)
    merged, problems = merged_config(user, owned_keys(options, user, **values), named)
    zero = merged["zero_optimization"]
    if zero["stage"] not in STAGES:
        key = "strategy.stage" if options.stage is not None else f"{named}: zero_optimization.stage"
        problems.append(f"{key}: {zero['stage']!r} is no ZeRO stage here (valid: 1, 2, 3)")
    elif zero.get("offload_param", {}).get("device") not in (None, "none") and zero["stage"] != 3:
        problems.append(
            f"strategy.offload_parameters: parameters are partitioned (and so offloaded) by ZeRO stage 3 "
            f"only, and the stage is {zero['stage']}; use strategy.stage=3"
        )
    if values["precision"] not in PRECISIONS:
        problems.append(
            f"trainer.precision: {values['precision']} is not built for strategy=deepspeed (valid: "
            f"{', '.join(PRECISIONS)}; 16-mixed would need DeepSpeed's own fp16 loss scaling)"
        )
    if run.trainer.gradient_clip_algorithm == "value" and values["clip_val"]:
        problems.append(
            "trainer.gradient_clip_algorithm: DeepSpeed clips by the gradients' norm only "
            "(gradient_clipping); use gradient_clip_algorithm=norm"
        )
    return merged, problems
