"""Everything checked before any process starts, every problem reported at once.

``framework.config.validate`` checks what the config itself says (schemas, types, targets
and their signatures); this module adds what needs the layers above it: the strategy's
topology against this machine and the launcher, the plug-in contracts of callbacks,
loggers, datamodule and task, the checkpoint to resume, and the run directory.
"""
from __future__ import annotations

from omegaconf import DictConfig

from framework.config import validate
from framework.config.param_groups import match_problems, structure_problems
from framework.config.validate import check_target, import_target
from framework.engine.checkpoint_files import check_ckpt_path
from framework.engine.protocols import contract_problems
from framework.job.run_directory import check_output_dir
from framework.rank.tested_weights import test_ckpt_problems
from framework.strategies import check_strategy


def preflight(cfg: DictConfig) -> dict:
    """Raise ``ConfigError`` listing every problem of the experiment ``cfg``; return its resolved
    container when it can run."""
    return validate(cfg, checks=[check_strategy, check_contracts, check_predict, check_model_names,
                                 check_task_metrics, test_ckpt_problems,
                                 lambda c: check_ckpt_path(c.get("ckpt_path"), c.get("output_dir") or "."),
                                 check_output_dir])


def check_contracts(container: dict) -> list[str]:
    """Each configured class against the contract the engine calls it by (engine/protocols.py)."""
    nodes = [(group, group, container.get(group)) for group in ("datamodule", "task")]
    for group in ("callbacks", "logger"):
        nodes += [(group, f"{group}.{name}", node) for name, node in (container.get(group) or {}).items()]
    problems = []
    for group, key, node in nodes:
        if not isinstance(node, dict) or not isinstance(node.get("_target_"), str):
            continue  # reported by the config checks
        try:
            obj = import_target(node["_target_"])
        except Exception:  # noqa: BLE001 - an import failure is reported by the config checks
            continue
        problems += contract_problems(obj, group, key)
    return problems


def check_predict(container: dict) -> list[str]:
    """``predict=true`` needs a datamodule with ``predict_dataloader()``."""
    target = (container.get("datamodule") or {}).get("_target_")
    if not container.get("predict") or not isinstance(target, str):
        return []
    try:
        cls = import_target(target)
    except Exception:  # noqa: BLE001 - reported by the config checks
        return []
    if callable(getattr(cls, "predict_dataloader", None)):
        return []
    other = " or set predict=false" if container.get("train") or container.get("test") else ""
    return [f"predict: true, but datamodule._target_ {target} has no predict_dataloader(); add one (it returns "
            f"the DataLoader of the samples to predict), choose a datamodule that has one{other}"]


def check_model_names(container: dict) -> list[str]:
    """What names the model's parameters and submodule classes: ``optimizer.param_groups`` (each
    entry must take some parameter) and ``trainer.activation_checkpointing`` (each class must be
    one of a submodule). The model is built on the meta device (no memory, no weights read)."""
    specs = (container.get("optimizer") or {}).get("param_groups")
    specs = None if not specs or structure_problems(specs, None) else specs
    checkpointed = (container.get("trainer") or {}).get("activation_checkpointing")
    checkpointed = checkpointed if isinstance(checkpointed, list) and checkpointed else None
    if not (specs or checkpointed) or not isinstance(container.get("model"), dict):
        return []
    import torch  # here: only a run that names parameters or classes pays for it before its ranks start
    from hydra.utils import instantiate

    from framework.engine.activation_checkpointing import checkpoint_problems

    try:
        with torch.device("meta"):
            model = instantiate(container["model"], _convert_="all")
    except Exception:  # noqa: BLE001 - the model's own errors surface when the ranks build it
        return []
    problems = match_problems([name for name, _ in model.named_parameters()], specs) if specs else []
    return problems + (checkpoint_problems(model, [str(c) for c in checkpointed]) if checkpointed else [])


def check_task_metrics(container: dict) -> list[str]:
    """Each ``task.metrics`` entry imports, builds (on the CPU, no data) and is a metric."""
    metrics = (container.get("task") or {}).get("metrics")
    if not metrics:
        return []
    if not isinstance(metrics, dict):
        return [f"task.metrics: expected a mapping of name -> {{_target_: ...}}, got {metrics!r}"]
    from hydra.utils import instantiate

    from framework.tasks.metrics import metric_problems

    problems: list[str] = []
    for name, node in metrics.items():
        key, before = f"task.metrics.{name}", len(problems)
        if not isinstance(node, dict):
            problems.append(f"{key}: expected a mapping with '_target_' (a torchmetrics class), got {node!r}")
            continue
        check_target(node, key, problems, "metric")
        if len(problems) > before:
            problems += _misspelled_arguments(node, key)
            continue
        try:
            metric = instantiate(node, _convert_="all")
        except Exception as err:  # noqa: BLE001 - the metric's own message names what is wrong
            cause = err.__cause__ or err
            problems.append(f"{key}: {node['_target_']} does not build: {type(cause).__name__}: {cause}")
            continue
        problems += metric_problems({name: metric})
    return problems


def _misspelled_arguments(node: dict, key: str) -> list[str]:
    """Keys of ``node`` close to, but not, an argument of its ``_target_`` (torchmetrics classes
    take **kwargs, so a typo there reads as a missing argument)."""
    import difflib
    import inspect

    try:
        names = [n for n in inspect.signature(import_target(node["_target_"])).parameters if n != "kwargs"]
    except Exception:  # noqa: BLE001 - no signature to compare with
        return []
    out = []
    for given in node:
        close = difflib.get_close_matches(given, names, n=1)
        if given not in names and not given.startswith("_") and close:
            out.append(f"{key}.{given}: not an argument of {node['_target_']}; did you mean {close[0]}?")
    return out
