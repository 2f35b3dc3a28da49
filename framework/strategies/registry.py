"""Strategies by name (the built-in ones) or by ``strategy._target_`` (a user's ``Strategy``
subclass): the registry, the check that runs before any process starts, and the factory."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from framework.config.environment import RankEnv, detect_environment, resolve_accelerator
from framework.config.experiment import Experiment
from framework.config.layout import Layout
from framework.config.schemas import AutoStrategyConfig, StrategyConfig
from framework.config.validate import check_schema, import_target, known_valid_keys
from framework.strategies.bagua import BaguaStrategy
from framework.strategies.base import Preset, Strategy
from framework.strategies.ddp import DDPStrategy
from framework.strategies.ddp2 import DDP2Strategy
from framework.strategies.deepspeed.zero import DeepSpeedStrategy
from framework.strategies.dp import DataParallelStrategy
from framework.strategies.horovod.strategy import HorovodStrategy
from framework.strategies.parallel import ParallelStrategy
from framework.strategies.pipeline.strategy import PipelineStrategy
from framework.strategies.zero import ZeroStrategy

# Each name a user types (strategy=<name>) and the class that runs it; a preset (a YAML of
# conf/strategy that only sets options of another's class) is its class under a name of its own.
_CLASSES = (
    Strategy,
    DataParallelStrategy,
    DDPStrategy,
    DDP2Strategy,
    ZeroStrategy,
    HorovodStrategy,
    BaguaStrategy,
    ParallelStrategy,
    PipelineStrategy,
    DeepSpeedStrategy,
)
STRATEGIES: dict[str, type[Strategy]] = {cls.name: cls for cls in _CLASSES} | {
    preset: cls
    for cls in _CLASSES
    for preset in vars(cls).get("presets", {})  # a class's own, not inherited
}


def strategy_class(name: str, devices: int = 1, num_nodes: int = 1) -> type[Strategy]:
    """The class for ``strategy.name``; ``auto`` picks single for one process, else ddp."""
    if name == "auto":
        name = "single" if devices * num_nodes == 1 else "ddp"
    return STRATEGIES[name]


def concrete(options: dict) -> dict:
    """The strategy node a run builds: an ``auto`` node the job resolved (job/strategy_choice.py)
    is its first candidate until the ranks choose; an unresolved one keeps the shared options only."""
    if options.get("_target_") or options.get("name", "auto") != "auto":
        return options
    candidates = options.get("candidates") or []
    if candidates and isinstance(candidates[0], dict):
        return candidates[0]
    return {k: v for k, v in options.items() if k in ("name", "timeout_s")}


def selected_class(options: dict, devices: int = 1, num_nodes: int = 1) -> type[Strategy]:
    """The class ``strategy._target_`` names, else the built-in one of ``strategy.name``."""
    options = concrete(options)
    if options.get("_target_"):
        return import_target(str(options["_target_"]))
    return strategy_class(options.get("name", "auto"), devices, num_nodes)


def _options(options: dict, cls: type[Strategy]) -> dict:
    """The schema's keys of ``options``: its ``_target_`` out; its name the preset's, or the class's
    own (a class of the user's without a name: its class name); a preset's settings where the node
    leaves them unset, and its own option names read as the class's (given, they win)."""
    preset = options.get("name") if STRATEGIES.get(options.get("name")) is cls else None
    own = cls.name if cls is Strategy or cls.name != Strategy.name else cls.__name__
    given = _preset(options, cls)
    old_names = given.old_names()
    node = {k: v for k, v in options.items() if k != "_target_" and k not in old_names}
    node |= {k: v for k, v in given.sets.items() if node.get(k) is None}
    node |= {given.names[k]: v for k, v in options.items() if k in given.names}
    node |= {new: read(options[k], options) for k, (new, read) in given.converts.items() if k in options}
    return {**node, "name": preset or own}


def _preset(options: dict, cls: type[Strategy]) -> Preset:
    """The preset ``options`` names, when it is one of ``cls``'s (else one that sets nothing)."""
    preset = cls.presets.get(options.get("name")) if STRATEGIES.get(options.get("name")) is cls else None
    return preset or Preset()


def typed_options(options: dict, cls: type[Strategy]) -> StrategyConfig:
    """The typed options of a strategy node (``{name, ...}``) for ``cls``, a preset's settings in."""
    return cls.schema(**_options(options, cls))


def variant_of(cls: type[Strategy], typed: StrategyConfig) -> type[Strategy]:
    """The class that runs ``typed``: strategy=parallel with a pipeline degree runs the pipeline's
    (which sits above parallel), another family's member as its class says."""
    if cls is ParallelStrategy and typed.pp > 1:
        return PipelineStrategy
    return cls.variant(typed)


def layout_of(options: dict, devices: int = 1, num_nodes: int = 1, target: Optional[str] = None) -> Layout:
    """The layout of the strategy node ``options`` (``{name, ...}`` or ``{_target_, ...}``) on
    ``devices`` per node of ``num_nodes`` nodes: the one place a strategy's class is worked out.
    ValueError naming the keys when the options cannot lay these devices out."""
    options = dict(concrete(options))
    cls = selected_class(options, devices, num_nodes)
    typed = typed_options(options, cls)
    cls = variant_of(cls, typed)
    return Layout(cls, typed, cls.make_topology(devices, num_nodes, typed), target or options.get("_target_"))


def resolve(run: Experiment) -> Layout:
    """The layout of a run whose config passed the schema check: the one it was launched with, or
    its strategy node's on its trainer's devices."""
    if run.layout is not None:
        return run.layout
    return layout_of(run.strategy, run.trainer.devices, run.trainer.num_nodes)


def launched_layout(run: Experiment) -> Layout:
    """The layout the ranks get: its options completed from the rest of the experiment (the
    strategy's ``job_options``: DeepSpeed's merged config)."""
    layout = resolve(run)
    return replace(layout, options=layout.strategy.job_options(layout.options, layout.topology, run))


def resolved_options(run: Experiment) -> dict:
    """The strategy node the ranks get: every option with its schema's default filled in, ``auto``
    resolved, and a user's ``_target_`` kept (the ranks import it again)."""
    return launched_layout(run).node()


def adapter_strategies() -> list[str]:
    """The names of the built-in strategies that run adapters (a class's ``runs_adapters``)."""
    return sorted(name for name, cls in STRATEGIES.items() if cls.runs_adapters)


def auto_candidates() -> list[str]:
    """The names strategy=auto can choose among: one process per device, started by the elastic agent."""
    return sorted(
        name
        for name, cls in STRATEGIES.items()
        if cls.process_per_device and cls.start_method(typed_options({"name": name}, cls)) == "elastic"
    )


def strategy_of(options: dict) -> tuple[type[Strategy], StrategyConfig]:
    """The class and typed options of a named strategy node (``{name, ...}``), before any devices lay
    it out (framework-plan lays it out on each count). KeyError for a name no strategy has."""
    cls = STRATEGIES[options["name"]]
    typed = typed_options(options, cls)
    return variant_of(cls, typed), typed


def is_named(name: str) -> bool:
    """Whether ``name`` is a built-in strategy's (or a preset's)."""
    return name in STRATEGIES


def planned() -> list[str]:
    """The strategies framework-plan compares on every model, in order (a class's ``planned``)."""
    return [name for cls in _CLASSES for name in vars(cls).get("planned", ())]  # (a class's own)


class StrategyNode:
    """A run's strategy node as config.yaml gives it, on its trainer's devices as given: the class it
    selects (a built-in name, or a user's ``_target_``), its options against that class's schema, and
    the layout they make checked against this machine, the launcher and the batch; ``problems`` is
    every reason it cannot run, before any process starts."""

    def __init__(self, run: Experiment):
        self.run = run
        options = run.strategy
        if isinstance((options.get("candidates") or [None])[0], dict):
            options = concrete(options)  # an auto node the job resolved: checked as the candidate it runs
        self.options = options
        trainer = run.config.get("trainer") or {}  # (as given: the trainer's schema names a wrong type)
        self.devices, self.nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)

    def problems(self) -> list[str]:
        """Strategy class and options, accelerator, topology against the launcher, batch divisibility."""
        options, devices, nodes = self.options, self.devices, self.nodes
        cls, schema, problems = self._selection()
        if problems:  # an unknown name, a target that is no Strategy: nothing to check the options against
            return problems
        check_schema(_options(options, cls) if cls else options, schema, "strategy", problems)
        if cls is None or not isinstance(devices, int) or not isinstance(nodes, int) or devices < 1 or nodes < 1:
            return problems  # bad devices / num_nodes are reported by the trainer schema
        if options.get("name", "auto") == "auto" and not options.get("_target_"):
            options = concrete(options)  # the candidates are checked one by one (job/strategy_choice.py)
        renamed = _renamed(options, cls)
        # The remaining checks go on with the options that are valid (the others are reported above).
        options = {
            **known_valid_keys(_options(options, cls), schema),
            **({"_target_": options["_target_"]} if options.get("_target_") else {}),
        }
        return problems + self._layout_problems(options, renamed)

    def _selection(self) -> tuple[type[Strategy] | None, type, list[str]]:
        """(the class, its schema, problems) of the strategy the node selects."""
        options = self.options
        if options.get("_target_"):
            cls, problems = self._user_class()
            return cls, cls.schema if cls else StrategyConfig, problems
        name = options.get("name", "auto")
        if name not in STRATEGIES and name != "auto":
            valid = ", ".join(sorted([*STRATEGIES, "auto"]))
            return (
                None,
                StrategyConfig,
                [
                    f"strategy.name: unknown strategy {name!r} (valid: {valid}; or your own "
                    "Strategy subclass with strategy._target_)"
                ],
            )
        if name != "auto":  # (a named class whatever the devices: a wrong trainer.devices is the trainer's problem)
            return STRATEGIES[name], STRATEGIES[name].schema, []
        devices, nodes = self.devices, self.nodes
        cls = strategy_class(name, devices, nodes) if isinstance(devices, int) and isinstance(nodes, int) else None
        return cls, AutoStrategyConfig, []

    def _user_class(self) -> tuple[type[Strategy] | None, list[str]]:
        """The class of ``strategy._target_``, or why it cannot be one."""
        target = self.options["_target_"]
        try:
            cls = import_target(str(target))
        # (what importing a user's module raises: import_target's ImportError, an attribute it lacks,
        # a syntax error in it, a malformed dotted path)
        except (ImportError, AttributeError, SyntaxError, ValueError) as err:
            return None, [f"strategy._target_: cannot import '{target}': {type(err).__name__}: {err}"]
        if not (isinstance(cls, type) and issubclass(cls, Strategy)):
            return None, [
                f"strategy._target_: {target} is not a Strategy (a strategy of your own subclasses "
                "framework.strategies.Strategy, with its options in a schema extending StrategyConfig)"
            ]
        return cls, []

    def _layout_problems(self, options: dict, renamed: str = "") -> list[str]:
        """The layout ``options`` make on these devices, and its checks: the accelerator, the strategy's
        own, the cores, the rest of the experiment, the launcher, the batch."""
        run = self.run
        try:
            layout = layout_of(options, self.devices, self.nodes)
        except ValueError as err:  # the options cannot lay out these devices (hsdp's factors)
            return [str(err) + renamed]
        cls, typed, topology = layout.strategy, layout.options, layout.topology
        resolved = resolve_accelerator(run.trainer.accelerator)
        missing = topology.accelerator_problems(resolved)
        if missing:
            return missing
        problems = cls.check(typed, topology, resolved) + topology.core_problems(resolved, run.trainer.oversubscribe)
        problems += cls.config_problems(typed, topology, run)
        launched = detect_environment()
        problems += topology.launch_problems(typed.name, launched, layout.start == "spawn")
        if launched is not None and launched.launcher == "horovodrun" and getattr(typed, "backend", "") != "horovod":
            problems.append(
                f"strategy={cls.name}: horovodrun started this process, and only strategy=horovod "
                "strategy.backend=horovod runs under it; start the others with torchrun, srun or python"
            )
        return problems + topology.batch_problems(run.datamodule.get("batch_size"))


def _renamed(options: dict, cls: type[Strategy]) -> str:
    """What a preset's own option names given in ``options`` set, said after a layout's refusal."""
    old_names = _preset(options, cls).old_names().items()
    given = [f"strategy.{old} sets strategy.{new}" for old, new in old_names if old in options]
    return f" (strategy={options['name']}: {', '.join(given)})" if given else ""


def build_strategy(run: Experiment, env: RankEnv) -> Strategy:
    """The strategy of a resolved, validated run, for the rank ``env``."""
    layout, trainer = resolve(run), run.trainer
    return layout.strategy(
        layout.options, resolve_accelerator(trainer.accelerator), layout.topology, env, trainer.accumulate_grad_batches
    )
