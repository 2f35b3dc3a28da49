"""Epoch-level metrics that are exact under data parallelism (``task.metrics``).

F1, AUROC, R² or precision are not means of batch values, so the engine cannot average
them like a loss. Each declared metric (a torchmetrics object, or anything with
``update``/``compute``/``reset``) is cloned once per stage; the task feeds every batch to
its stage's clones; at the end of a validation or test pass (and of a training epoch when
train metrics are on) the engine calls ``compute``, which gathers the metric's state from
every rank (torchmetrics' own sync over torch.distributed) before it computes, then resets.
A task of your own exposes one as its ``epoch_metrics`` attribute and calls ``update``.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from typing import Any, Iterator, Mapping

import torch

from framework.config.validate import check_target, import_target

METRIC_METHODS = ("update", "compute", "reset")


class EpochMetrics:
    """Per-stage clones of ``metrics`` (name -> metric), for ``stages`` ("train", "val", "test")."""

    def __init__(self, metrics: Mapping[str, Any] | None, stages: tuple[str, ...] = ("val", "test")):
        problems = self.problems(metrics or {})
        if problems:
            raise TypeError("; ".join(problems))
        # A clone per stage: a validation pass in the middle of a training epoch must not
        # mix its samples into the training epoch's state (or the other way round).
        self._stages = {stage: {name: copy.deepcopy(m) for name, m in (metrics or {}).items()} for stage in stages}
        for clones in self._stages.values():
            for metric in clones.values():
                if getattr(metric, "dist_sync_fn", False) is None:  # torchmetrics' default: make it ragged-safe
                    metric.dist_sync_fn = gather_states
        self._paused = False

    @classmethod
    def problems(cls, metrics: Any, key: str = "task.metrics") -> list[str]:
        """What is wrong with ``metrics`` (name -> metric object) as epoch metrics: what ``__init__``
        refuses, and the job asks of each ``task.metrics`` entry before start."""
        if not isinstance(metrics, Mapping):
            return [f"{key}: expected a mapping of name -> metric, got {type(metrics).__name__}"]
        problems = []
        for name, metric in metrics.items():
            missing = [m for m in METRIC_METHODS if not callable(getattr(metric, m, None))]
            if not isinstance(name, str) or "/" in name:
                problems.append(f"{key}.{name}: a metric's name is a word without '/' (it is logged as <stage>/<name>)")
            elif missing:
                problems.append(
                    f"{key}.{name}: {type(metric).__qualname__} is not a metric (it has no "
                    f"{', '.join(missing)}); use a torchmetrics class, e.g. {{_target_: "
                    "torchmetrics.classification.MulticlassF1Score, num_classes: 10}"
                )
        return problems

    @classmethod
    def config_problems(cls, metrics: Any, key: str = "task.metrics") -> list[str]:
        """Each entry of the config ``task.metrics`` imports, builds (on the CPU, no data) and is a metric."""
        if not metrics:
            return []
        if not isinstance(metrics, Mapping):
            return [f"{key}: expected a mapping of name -> {{_target_: ...}}, got {metrics!r}"]
        problems: list[str] = []
        for name, node in metrics.items():
            problems += cls._built_problems(name, node, f"{key}.{name}")
        return problems

    @classmethod
    def _built_problems(cls, name: str, node: Any, key: str) -> list[str]:
        from hydra.errors import InstantiationException
        from hydra.utils import instantiate

        if not isinstance(node, Mapping):
            return [f"{key}: expected a mapping with '_target_' (a torchmetrics class), got {node!r}"]
        problems: list[str] = []
        check_target(node, key, problems, "metric")
        if problems:
            return problems + _misspelled_arguments(node, key)
        try:
            metric = instantiate(node, _convert_="all")
        except InstantiationException as err:  # (hydra's wrap of the metric's own message: what is wrong)
            cause = err.__cause__ or err
            return [f"{key}: {node['_target_']} does not build: {type(cause).__name__}: {cause}"]
        return cls.problems({name: metric}, key.rsplit(".", 1)[0])

    def __bool__(self) -> bool:
        return any(self._stages.values())

    def tracks(self, stage: str) -> bool:
        return bool(self._stages.get(stage))

    def to(self, device: torch.device) -> "EpochMetrics":
        for metrics in self._stages.values():
            for metric in metrics.values():
                if callable(getattr(metric, "to", None)):
                    metric.to(device)
        return self

    def update(self, stage: str, *args, **kwargs) -> None:
        """Feed one batch (e.g. ``preds, target``) to ``stage``'s metrics."""
        if self._paused:
            return
        for name, metric in self._stages.get(stage, {}).items():
            with _named(name, "update"):
                metric.update(*args, **kwargs)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Updates are ignored inside: forwards whose results the engine discards."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def reset(self, stage: str) -> None:
        for metric in self._stages.get(stage, {}).values():
            metric.reset()

    def compute(self, stage: str) -> dict[str, float]:
        """``stage``'s values over every rank's samples since the last reset, then reset.
        Collective: every rank calls it at the same point."""
        out: dict[str, float] = {}
        for name, metric in self._stages.get(stage, {}).items():
            with warnings.catch_warnings():
                # A rank without a sample this pass still joins the gather, with empty state.
                warnings.filterwarnings("ignore", message=".*was called before the ``update`` method.*")
                with _named(name, "compute"):
                    out.update(_flat(name, metric.compute()))
        self.reset(stage)
        return out


@contextlib.contextmanager
def _named(name: str, method: str) -> Iterator[None]:
    """A metric's failure names its config key (the metric's own message says what is wrong)."""
    try:
        yield
    except Exception as err:
        raise RuntimeError(f"task.metrics.{name}: {method}() failed: {type(err).__name__}: {err}") from err


def gather_states(state: torch.Tensor, group=None) -> list[torch.Tensor]:
    """torchmetrics' ``gather_all_tensors`` that also takes the state of a rank without samples:
    torchmetrics makes that an empty 1-D float tensor, which gloo cannot gather beside the other
    ranks' (N, C) integer ones (it aborts the process). It gets their trailing shape and dtype."""
    import torch.distributed as dist
    from torchmetrics.utilities.distributed import gather_all_tensors

    layouts: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(layouts, (tuple(state.shape), state.dtype) if state.numel() else None, group=group)
    filled = [layout for layout in layouts if layout is not None]
    if not state.numel() and filled:
        shape, dtype = filled[0]
        state = state.new_zeros((0, *shape[1:]), dtype=dtype)
    return gather_all_tensors(state, group)


def _flat(name: str, value: Any) -> dict[str, float]:
    """A metric's value as floats: a scalar as ``name``, a vector (per class) as ``name_<i>``,
    a mapping as ``name_<key>``."""
    if isinstance(value, Mapping):
        return {k: v for key, item in value.items() for k, v in _flat(f"{name}_{key}", item).items()}
    tensor = torch.as_tensor(value).detach().float().cpu()
    if tensor.numel() == 1:
        return {name: tensor.item()}
    return {f"{name}_{i}": v for i, v in enumerate(tensor.flatten().tolist())}


def _misspelled_arguments(node: Mapping, key: str) -> list[str]:
    """Keys of ``node`` close to, but not, an argument of its ``_target_`` (torchmetrics classes
    take **kwargs, so a typo there reads as a missing argument)."""
    import difflib
    import inspect

    try:
        names = [n for n in inspect.signature(import_target(node["_target_"])).parameters if n != "kwargs"]
    except (ImportError, ValueError, TypeError):  # no signature to compare with
        return []
    out = []
    for given in node:
        close = difflib.get_close_matches(given, names, n=1)
        if given not in names and not given.startswith("_") and close:
            out.append(f"{key}.{given}: not an argument of {node['_target_']}; did you mean {close[0]}?")
    return out
