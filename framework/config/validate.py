"""Validate a composed config before any process starts, reporting every problem at once.

Checks, in one pass:
- keys the framework interprets (root, trainer, init, scheduler settings, a strategy's options)
  against typed schemas: unknown key (with the closest valid key), wrong type, value outside a
  choice set or outside its range (the schema field's, config/ranges.py);
- the component arguments every run depends on (``COMPONENT_RANGES``: batch size, lr, ...);
- ``???`` values that were never filled in, and interpolations that do not resolve;
- every ``_target_``: it imports (the original ImportError is shown) and its keys bind
  to the callable's signature (unknown argument with the closest name, missing argument);
- and the caller's further checks (``framework.job.preflight`` adds the strategy's topology
  against this machine, checkpoints, plug-in contracts and the run directory).

This module imports no torch: it is the bottom of the framework's layers.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import re
import types
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Optional, Union

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationToMissingValueError

from framework.config.durations import Duration
from framework.config.errors import ConfigError
from framework.config.gguf_files import GGUFError
from framework.config.group_keys import KEYED_GROUPS, group_keys, misplaced_key_message
from framework.config.intervals import validation_interval_problem
from framework.config.leftover_keys import SCHEDULER_KEYS, drop_auto_keys, settled_scheduler
from framework.config.location import group_options
from framework.config.optional_modules import install_hint, missing_problem
from framework.config.param_groups import ParamGroups
from framework.config.ranges import COMPONENT_RANGES, ArgumentRanges, is_number, range_of
from framework.config.schemas import (
    ROOT_KEYS,
    TYPO_CUTOFF,
    AdapterConfig,
    HarnessConfig,
    InitConfig,
    RootConfig,
    SchedulerConfig,
    TrainerConfig,
)
from framework.config.sizes import Size

# Keys the framework reads from a component node and removes before instantiating it.
FRAMEWORK_KEYS = {"scheduler": SCHEDULER_KEYS, "optimizer": {"param_groups"}}

# Arguments the framework supplies at run time (e.g. parameters exist only after wrapping).
RUNTIME_ARGS = {
    "optimizer": {"params"},
    "scheduler": {"optimizer"},
}
HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}
GROUP_SCHEMAS = {"trainer": TrainerConfig, "init": InitConfig, "harness": HarnessConfig, "adapter": AdapterConfig}
REQUIRED_GROUPS = ("model", "datamodule", "task", "optimizer")


def validate(
    cfg: DictConfig, checks: Iterable[Callable[[Any], list[str]]] = (), subject: Optional[Callable[[dict], Any]] = None
) -> dict:
    """Raise ``ConfigError`` listing every problem in ``cfg``; return its resolved container when valid
    (given ``subject``: ``subject(container)``, the typed run the checks read).

    ``checks``: further checks, each returning its problems (the layers above config add theirs:
    strategy topology, checkpoints, the run directory), of ``subject(container)``: built once from
    the resolved container for them all (job/experiment.py's ResolvedExperiment; else the container)."""
    problems: list[str] = []
    container = _resolve(cfg, problems)
    if "scheduler" in container:
        container["scheduler"] = settled_scheduler(container["scheduler"])
    if container.get("train") is False and not _names_a_class(container.get("optimizer")):
        container["optimizer"] = {}  # optimizer=none (an experiment's settings left on it): nothing trains
    problems += drop_auto_keys(container.get("strategy"))
    user_keys = {k for k in container if _users_own(k)}
    unreferenced = user_keys - referenced_keys(OmegaConf.to_yaml(cfg, resolve=False))
    groups = {g: container[g] for g in KEYED_GROUPS if isinstance(container.get(g), dict)}
    composed = [f"{group}.{key}" for group, node in groups.items() for key in node if not str(key).startswith("_")]
    problems += _misplaced_key_problems(unreferenced, composed) if unreferenced else []
    check_schema(container, RootConfig, "", problems, ignore={"hydra", *user_keys})
    for group, schema in GROUP_SCHEMAS.items():
        check_schema(container.get(group) or {}, schema, group, problems)
    problems += _unselected_adapter(container.get("adapter")) + _init_problems(container.get("init") or {})
    problems += _merge_without_adapter(container)
    _check_trainer_values(container.get("trainer") or {}, problems)
    named = {p.split(":")[0] for p in problems}
    problems.extend(p for p in oversized_integers(container) if p.split(":")[0] not in named)
    for group, ranges in COMPONENT_RANGES.items():
        problems += _range_problems(group, ranges, container.get(group))
    for group in REQUIRED_GROUPS:
        if group == "optimizer" and container.get("train") is False and not container.get(group):
            continue  # (optimizer=none: a run that only tests, predicts or scores builds none)
        problems += _required_group_problems(group, container.get(group))
    problems += _optimizer_problems(container.get("optimizer")) + _scheduler_problems(container.get("scheduler"))
    for group in ("logger", "callbacks"):
        problems += _named_nodes_problems(group, container.get(group))
    checked = subject(container) if subject else container
    for check in checks:
        problems.extend(_answers(check, checked))
    if problems:
        raise ConfigError(said_once(problems))
    return checked


def _answers(check: Callable[[Any], list[str]], subject: Any) -> list[str]:
    """``check``'s problems; where it stops on a library it imports and does not find (an optional extra
    not installed) or on a GGUF file that does not convert, that one, rather than a traceback."""
    try:
        return list(check(subject))
    except ModuleNotFoundError as err:
        problem = missing_problem(err)
        if problem is None:
            raise  # (a module of no extra: a bug, with its traceback)
        return [problem]
    except GGUFError as err:
        return [str(err)]


_INSTALL = re.compile(r"pip install '[^']*'(?: \(or pip install [^)]*\))?|pip install [\w.-]+(?: [\w.-]+)*")


def said_once(problems: list[str]) -> list[str]:
    """``problems`` with each said once: a library not installed by the first line that names its install
    command (several checks stop on it; one install ends them all), a file's failure that ``_answers`` caught
    (it begins with the file's quoted path) by the line of a check that names it with its key."""
    out, commands = [], set()
    for problem in dict.fromkeys(problems):
        command = _INSTALL.search(problem)
        keyed = problem.startswith("'") and any(problem in p and problem != p for p in problems)
        if (command and command.group() in commands) or keyed:
            continue
        commands.add(command.group() if command else None)
        out.append(problem)
    return out


def _unselected_adapter(node) -> list[str]:
    """An adapter node that is only some keys (an experiment's r and alpha left by ``~adapter``, or a
    ``+adapter.r=4``): no adapter=<option> laid out the others, so it would train adapters unasked."""
    if not isinstance(node, dict) or not node or "quantize" in node:
        return []
    keys = ", ".join(f"adapter.{k}" for k in node)
    removals = " ".join(f"~adapter.{k}" for k in node)
    return [
        f"adapter: {keys} set, but no adapter selected (an experiment's keys stay after ~adapter); "
        f"select adapter=lora or adapter=qlora, or remove them too to train the whole model: ~adapter {removals}"
    ]


def _merge_without_adapter(container: dict) -> list[str]:
    """``export_merge=true`` with no adapter to merge: refused rather than ignored, as a user who sets it
    expects a merge (an adapter that a sweep or ``~adapter`` left out) and would get the base alone."""
    if container.get("export_merge") is not True or container.get("adapter"):
        return []
    return [
        "export_merge: true merges adapters into the base weights, but this run has none (adapter: null); select "
        "one (adapter=lora), or leave export_merge out: the whole model is exported as it is"
    ]


def _users_own(key: str) -> bool:
    """A top-level key of the user's own: not ours, and not a typo of ours (``sed`` for ``seed``)."""
    return key not in ROOT_KEYS and key != "hydra" and not difflib.get_close_matches(key, ROOT_KEYS, 1, TYPO_CUTOFF)


def _misplaced_key_problems(keys: set[str], composed: list[str]) -> list[str]:
    """A user's top-level key that nothing refers to (``${lr}``) is refused when it is ours under a
    group (``tokenizer`` for ``datamodule.tokenizer``, ``composed``: the groups' keys as composed)."""
    misplaced = group_keys(composed=composed)
    return [misplaced_key_message(key, misplaced[key]) for key in sorted(keys) if key in misplaced]


def _init_problems(init: dict) -> list[str]:
    weights = init.get("weights")
    if weights and weights != "???" and not Path(str(weights)).exists():
        return [f"init.weights: nothing at '{weights}' (a checkpoint directory or a state_dict file)"]
    return []


def oversized_integers(node: Any, path: str = "") -> list[str]:
    """Integers that no tensor, sampler or RNG holds (beyond 64 bits): refused naming their key,
    instead of an OverflowError inside the ranks."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in oversized_integers(v, f"{path}.{k}" if path else str(k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in oversized_integers(v, f"{path}[{i}]")]
    if isinstance(node, int) and not isinstance(node, bool) and not -(2**63) <= node < 2**63:
        return [f"{path}: {node} does not fit in 64 bits"]
    return []


def referenced_keys(text: str) -> set[str]:
    """The top-level keys that an interpolation in ``text`` refers to (``${lr}``, ``${paths.data}``)."""
    return set(re.findall(r"\$\{\s*([A-Za-z_][\w\-]*)", text))


def _required_group_problems(group: str, node: Any) -> list[str]:
    """A group every run needs: its ``_target_`` imports and its keys bind to the signature."""
    if not isinstance(node, dict) or not node or (group == "optimizer" and not _names_a_class(node)):
        options = ", ".join(sorted(group_options(group) - {"none"}))
        none = " (optimizer=none: only with train=false, a run that does not train)" if group == "optimizer" else ""
        return [f"{group}: missing; choose an option of the '{group}' group: {options}{none}"]
    problems: list[str] = []
    check_target(node, group, problems, group)
    return problems


def _names_a_class(node: Any) -> bool:
    """A component's node with its ``_target_`` (not a selection of none, or the settings an experiment
    left on it: ``optimizer=none`` under an experiment that sets ``optimizer.lr``)."""
    return isinstance(node, dict) and "_target_" in node


def _optimizer_problems(optimizer: Any) -> list[str]:
    if not isinstance(optimizer, dict):
        return []
    return ParamGroups.problems(optimizer.get("param_groups"), optimizer_settings(optimizer))


def _scheduler_problems(scheduler: Any) -> list[str]:
    problems: list[str] = []
    if scheduler:
        check_target(scheduler, "scheduler", problems, "scheduler")
        settings = {k: v for k, v in scheduler.items() if k in FRAMEWORK_KEYS["scheduler"]}
        check_schema(settings, SchedulerConfig, "scheduler", problems)
    return problems


def _named_nodes_problems(group: str, nodes: Any) -> list[str]:
    """A group of named nodes (``callbacks``, ``logger``): each imports and binds; a null one is off."""
    problems: list[str] = []
    for name, node in (nodes or {}).items():
        if node is None:
            continue
        if not isinstance(node, dict):
            problems.append(f"{group}.{name}: expected a mapping with '_target_', got {node!r}")
            continue
        check_target(node, f"{group}.{name}", problems, group)
    return problems


def _resolve(node: Any, problems: list[str], path: str = "") -> Any:
    """A plain container of ``node`` with interpolations resolved; each key that does not
    resolve is reported and becomes None, so the other checks still run."""
    if isinstance(node, ListConfig):
        keys: Iterable = range(len(node))
        out: Any = [None] * len(node)
    else:
        keys, out = node.keys(), {}
    for key in keys:
        full = f"{path}[{key}]" if isinstance(node, ListConfig) else (f"{path}.{key}" if path else str(key))
        if OmegaConf.is_missing(node, key):
            problems.append(f"{full}: missing value ('???'); set it on the command line, e.g. {full}=...")
            out[key] = "???"
            continue
        try:
            value = node[key]
        except Exception as err:  # omegaconf raises several types; all mean "does not resolve"
            out[key] = None
            if isinstance(err, InterpolationToMissingValueError):
                continue  # what it points to is missing: that key's own problem names it
            reason = str(err).split("\n")[0]
            problems.append(f"{full}: cannot resolve {OmegaConf.to_container(node, resolve=False)[key]!r}: {reason}")
            continue
        out[key] = _resolve(value, problems, full) if isinstance(value, (DictConfig, ListConfig)) else value
    return out


def check_schema(node: Any, schema: type, path: str, problems: list[str], ignore: Iterable[str] = ()) -> None:
    """Check ``node``'s keys and value types against the dataclass ``schema``."""
    prefix = f"{path}." if path else ""
    if not isinstance(node, dict):
        problems.append(f"{path or '<root>'}: expected a mapping, got {type(node).__name__}")
        return
    hints = typing.get_type_hints(schema)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    # in the schema's order (where each key is declared), then the keys it does not know
    ordered = [k for k in fields if k in node] + [k for k in node if k not in fields]
    for key, value in ((k, node[k]) for k in ordered):
        if key in ignore:
            continue
        if key not in hints:
            problems.append(unknown_key_message(f"{prefix}{key}", key, fields))
            continue
        expected = hints[key]
        if (_checkable(value) or value is None) and not _is_mapping_type(expected) and not type_ok(value, expected):
            problems.append(f"{prefix}{key}: expected {type_name(expected)}, got {_describe(value)}")
        elif key in fields and range_of(fields[key]) is not None:
            problems.extend(range_of(fields[key]).problems(f"{prefix}{key}", value))


def known_valid_keys(node: dict, schema: type) -> dict:
    """The entries of ``node`` that ``schema`` has and whose values have its types."""
    hints = typing.get_type_hints(schema)
    return {k: v for k, v in node.items() if k in hints and (not _checkable(v) or type_ok(v, hints[k]))}


def unknown_key_message(full_key: str, key: str, valid: Iterable[str]) -> str:
    valid = sorted(valid)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"{full_key}: unknown key{hint} (valid keys: {', '.join(valid)})"


def _is_union(tp: Any) -> bool:
    """``Union[A, B]``, ``Optional[A]`` and ``A | B`` alike."""
    return typing.get_origin(tp) in (Union, types.UnionType)


def _alternatives(tp: Any) -> tuple:
    """A union's types but torch.Tensor (torch's ``lr: float | Tensor``): a config value is never one."""
    return tuple(
        a for a in typing.get_args(tp) if not (getattr(a, "__module__", "") == "torch" and a.__name__ == "Tensor")
    )


def _is_mapping_type(tp: Any) -> bool:
    return (
        tp is dict or typing.get_origin(tp) is dict or (_is_union(tp) and any(a is dict for a in typing.get_args(tp)))
    )


def type_ok(value: Any, tp: Any) -> bool:
    """Is ``value`` (a plain container value) acceptable for annotation ``tp``?"""
    if tp is Any or tp is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(tp)
    if _is_union(tp):
        return any(type_ok(value, arg) for arg in _alternatives(tp))
    if origin is Literal:
        return value in typing.get_args(tp)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin in (list, tuple) or tp in (list, tuple):
        return isinstance(value, (list, tuple))
    return True  # annotations we do not model are not checked


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if _is_union(tp):
        return " or ".join(type_name(a) for a in _alternatives(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _checkable(value: Any) -> bool:
    # '???' is already reported as missing; None where the schema's Optional allows it.
    return value is not None and value != "???"


def _describe(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {value!r}"


def _check_trainer_values(trainer: dict, problems: list[str]) -> None:
    """What no single key's range says (the ranges are the schema's: ``check_schema``)."""
    if trainer.get("val_check_interval") in (0, 0.0):
        problems.append("trainer.val_check_interval: must be > 0; use trainer.limit_val_batches=0 to skip validation")
    max_epochs, max_steps = trainer.get("max_epochs"), trainer.get("max_steps")
    if (
        (max_epochs is None or max_epochs == -1)
        and (max_steps is None or max_steps == -1)
        and not trainer.get("fast_dev_run")
    ):
        problems.append("trainer.max_epochs / trainer.max_steps: both unlimited; set one of them")
    for low, high in (("min_epochs", "max_epochs"), ("min_steps", "max_steps")):
        minimum, maximum = trainer.get(low), trainer.get(high)
        if is_number(minimum) and is_number(maximum) and maximum != -1 and maximum < minimum and minimum >= 0:
            problems.append(f"trainer.{low}: {minimum} is above trainer.{high}={maximum}")
    problems.extend(Duration.problems(trainer.get("max_time")))
    problems.extend(Size.problems("trainer.memory_limit", trainer.get("memory_limit")))
    limit = trainer.get("limit_train_batches")
    if (
        isinstance(limit, int)
        and not isinstance(limit, bool)
        and limit > 0
        and not trainer.get("fast_dev_run")
        and trainer.get("limit_val_batches") != 0
    ):
        problem = validation_interval_problem(
            trainer.get("val_check_interval"), limit, " at most (trainer.limit_train_batches)"
        )
        problems.extend([problem] if problem else [])


def _range_problems(group: str, ranges: dict, node: Any) -> list[str]:
    """The ranges of the component arguments every run depends on (``COMPONENT_RANGES``)."""
    node = node if isinstance(node, dict) else {}
    return [p for key, valid in ranges.items() for p in valid.problems(f"{group}.{key}", node.get(key))]


def import_target(path: str) -> Any:
    """Import ``a.b.C`` (module path, then attributes). Raises ImportError with the cause."""
    parts = path.split(".")
    last_error: Exception | None = None
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            # Only "this module does not exist" means try a shorter prefix; an import error
            # *inside* an existing module is the user's real problem and is reported as is.
            if err.name is not None and module_name.startswith(err.name):
                last_error = err
                continue
            raise
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                raise ImportError(f"module '{obj.__name__}' has no attribute '{attr}'")
            obj = getattr(obj, attr)
        return obj
    raise ImportError(str(last_error) if last_error else f"cannot import {path!r}")


def _unknown_argument_problems(unknown: list[str], path: str, target: str, valid: list[str]) -> list[str]:
    """Each key ``target`` does not take; with several, where they likely came from: a ``_target_``
    given on the command line keeps the selected option's other keys."""
    problems = [
        unknown_key_message(f"{path}.{key}", key, valid)
        .replace("unknown key", f"unknown argument of {target}")
        .replace("(valid keys: )", "(it takes no arguments)")
        for key in unknown
    ]
    if len(unknown) > 1:
        problems.append(
            f"{path}._target_: {target} takes none of {', '.join(unknown)}: a _target_ set on the command line "
            f"keeps the selected option's other keys; put your class in a config option of your own "
            f"(configs/{path.split('.')[0]}/mine.yaml with its _target_, selected by {path.split('.')[0]}=mine and "
            f"hydra.searchpath) or drop each key with ~{path}.<key>"
        )
    return problems


def check_target(node: dict, path: str, problems: list[str], group: str) -> None:
    """Check that ``node._target_`` imports and that ``node``'s keys bind to its signature."""
    target = node.get("_target_")
    if not isinstance(target, str) or not target:
        problems.append(f"{path}._target_: missing; every '{group}' config names a class or function in _target_")
        return
    try:
        obj = import_target(target)
    except Exception as err:
        missing = missing_problem(err) if isinstance(err, ModuleNotFoundError) else None
        hint = f"; {install_hint(err.name)}" if missing else ""
        problems.append(f"{path}._target_: cannot import '{target}': {type(err).__name__}: {err}{hint}")
        return
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return  # builtins without a signature: nothing more to check
    params = signature.parameters
    accepts_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    skip = FRAMEWORK_KEYS.get(group, set())
    supplied = RUNTIME_ARGS.get(group, set())
    names = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    unknown = [k for k in node if k not in HYDRA_KEYS and k not in skip and k not in params]
    if not accepts_kwargs:
        problems.extend(_unknown_argument_problems(unknown, path, target, [n for n in names if n not in supplied]))
    for key, value in node.items():
        if key in HYDRA_KEYS or key in skip or key not in params:
            continue
        annotation = _annotation(obj, key, params[key])
        if _checkable(value) and not type_ok(value, annotation):
            problems.append(f"{path}.{key}: expected {type_name(annotation)}, got {_describe(value)}")
        if isinstance(value, dict) and "_target_" in value:
            check_target(value, f"{path}.{key}", problems, group="")
    for name, param in params.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or name in supplied:
            continue
        if param.default is inspect.Parameter.empty and name not in node:
            problems.append(f"{path}.{name}: missing required argument of {target}")
    # A class may check its own values against the machine (e.g. a data directory exists).
    problems.extend(ArgumentRanges.of(obj).problems(node, f"{path}."))
    # (its messages name their key: in full, or relative to this node's, which is then prefixed)
    check_config = getattr(obj, "check_config", None)
    if callable(check_config):
        try:
            found = check_config(**{k: v for k, v in node.items() if k not in HYDRA_KEYS})
        except ModuleNotFoundError as err:  # (a library its check imports: named with its extra, keyed here)
            if missing_problem(err) is None:
                raise
            found = [missing_problem(err, path)]
        problems.extend(m if m.startswith((f"{path}.", f"{path}:", f"{path}=")) else f"{path}.{m}" for m in found)


def optimizer_settings(node: dict) -> list[str] | None:
    """The keyword arguments the optimizer's class takes besides its parameters (None: unknown)."""
    try:
        params = inspect.signature(import_target(node["_target_"])).parameters
    except Exception:  # noqa: BLE001 - an import failure is reported by the target check
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return [n for n, p in params.items() if n != "params" and p.kind is not p.VAR_POSITIONAL]


def _annotation(obj: Any, name: str, param: inspect.Parameter) -> Any:
    try:
        hints = typing.get_type_hints(obj.__init__ if inspect.isclass(obj) else obj)
        return hints.get(name, Any)
    except Exception:  # unresolvable forward references: do not type-check this argument
        return Any if isinstance(param.annotation, str) else param.annotation
