"""One run, typed and read-only, built once from its resolved config after the schema check: the
top-level keys (RootConfig's), the trainer's, init's, harness's and adapter's options as their
schemas' dataclasses, and each component as a ``Spec`` (its class and its arguments). The layers
above read a run from it; the raw dict stays at the boundaries (Hydra in; config.yaml out)."""

from __future__ import annotations

import inspect
from functools import cached_property
from typing import Any, Optional

from framework.config.layout import Layout
from framework.config.schemas import ROOT_KEYS, AdapterConfig, HarnessConfig, InitConfig, RootConfig, TrainerConfig
from framework.config.validate import HYDRA_KEYS, import_target, known_valid_keys

COMPONENTS = ("model", "datamodule", "task", "optimizer", "scheduler")


class Spec:
    """One component's config node: the class its ``_target_`` names, and its arguments."""

    def __init__(self, key: str, node: Any):
        self.key = key  # where it sits in the config: model, callbacks.checkpoint, ...
        self.given = isinstance(node, dict)
        self.node: dict = node if self.given else {}

    def __repr__(self) -> str:
        return f"Spec({self.key}: {self.target})"

    def __contains__(self, key: str) -> bool:
        return key in self.node

    def __getitem__(self, key: str) -> Any:
        return self.node[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.node.get(key, default)

    @property
    def target(self) -> Optional[str]:
        target = self.node.get("_target_")
        return target if isinstance(target, str) else None

    @property
    def name(self) -> str:
        """The class's own name (GPT for framework.models.gpt.GPT), or ? without a target."""
        return str(self.target or "?").rsplit(".", 1)[-1]

    @property
    def options(self) -> dict:
        """The arguments the class is built with."""
        return {k: v for k, v in self.node.items() if k not in HYDRA_KEYS}

    @cached_property
    def cls(self) -> Any:
        """What ``_target_`` names, or None where it names nothing that imports (the target check says why)."""
        try:
            return import_target(self.target) if self.target else None
        except Exception:  # noqa: BLE001 - reported by the config checks
            return None

    @property
    def is_class(self) -> bool:
        """Whether the target is a class (a function or other factory: what it returns is unknown before it runs)."""
        return inspect.isclass(self.cls)

    def declared(self, attribute: str, default: Any = None) -> Any:
        """What the class declares of itself (``inputs``, ``train_samples``, ...), or ``default``."""
        return getattr(self.cls, attribute, default) if self.cls is not None else default

    def sizes(self) -> dict:
        """The node's keys, with the sizes the class declares for these arguments where the node does
        not say them (``declared_sizes(**options)``: a Hugging Face model's, read from its config)."""
        declared = self.declared("declared_sizes")
        try:
            sizes = declared(**self.options) if callable(declared) else {}
        except Exception:  # noqa: BLE001 - a model that does not load is reported by its own check
            sizes = {}
        return {**sizes, **self.node}


class Experiment:
    """One run's config, typed and read-only: ``run.trainer.devices``, ``run.model.cls``, ``run.train``."""

    def __init__(self, container: dict, layout: Optional[Layout] = None):
        self.config = container  # the boundary form (config.yaml's)
        self._layout = layout  # (the strategy's, where the run was built with it resolved)
        self._root = RootConfig(**known_valid_keys(container, RootConfig))
        self.trainer = TrainerConfig(**known_valid_keys(_node(container.get("trainer")), TrainerConfig))
        self.init = InitConfig(**known_valid_keys(_node(container.get("init")), InitConfig))
        self.harness = HarnessConfig(**known_valid_keys(_node(container.get("harness")), HarnessConfig))
        adapter = container.get("adapter")  # (empty, as ~adapter.<key> leaves it: none, the whole model trains)
        self.adapter = AdapterConfig(**known_valid_keys(adapter, AdapterConfig)) if adapter else None
        for group in COMPONENTS:
            setattr(self, group, Spec(group, container.get(group)))
        self.strategy: dict = _node(container.get("strategy"))  # named, not targeted: strategies/registry.py reads it
        self.callbacks = _specs("callbacks", container.get("callbacks"))
        self.loggers = _specs("logger", container.get("logger"))
        self._built = True

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_built"):
            raise AttributeError(f"an Experiment is read-only ({name}); with_config(...) makes another run")
        super().__setattr__(name, value)

    def __reduce__(self):
        """Pickled (to a spawned rank) as its config and its layout: what else it worked out (a model on
        the meta device) is worked out again there, if asked."""
        return Experiment, (self.config, self.layout)

    @property
    def layout(self) -> Optional[Layout]:
        """The strategy's layout (config/layout.py), resolved once where the run was built: the job
        launches a run with it, the ranks read it (None: a run built from a config alone, whose layout
        strategies/registry.py's ``resolve`` works out)."""
        return self._layout

    @classmethod
    def of(cls, cfg: Any) -> Experiment:
        """The typed run of ``cfg``: a composed config (DictConfig, resolved here) or its container, at
        the public functions' boundary; a run of this class is itself."""
        if isinstance(cfg, cls):
            return cfg
        if isinstance(cfg, Experiment):
            return cls(cfg.config)
        from omegaconf import DictConfig, OmegaConf

        return cls(OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg)

    def __getattr__(self, name: str) -> Any:
        """The other top-level keys, typed as RootConfig has them (``run.ckpt_path``, ``run.seed``)."""
        if name in ROOT_KEYS and not name.startswith("_"):
            return getattr(self.__dict__["_root"], name)
        raise AttributeError(name)

    def with_config(self, **changes: Any) -> Experiment:
        """This run with top-level keys replaced (``strategy={...}``): a new run, this one unchanged (its
        layout kept unless the strategy or the trainer changes)."""
        keeps = not {"strategy", "trainer"} & set(changes)
        return type(self)({**self.config, **changes}, self._layout if keeps else None)

    def launched(self, layout: Layout, **changes: Any) -> Experiment:
        """The run as the job launches it: ``layout`` resolved once (its options completed), the
        strategy node of config.yaml its own, and top-level keys ``changes`` (the attempt; strategy=auto's
        node of candidates, which the ranks choose among)."""
        return Experiment({**self.config, "strategy": layout.node(), **changes}, layout)

    @property
    def windowed(self) -> bool:
        """Whether the run reads windows of tokens (training or testing; prediction reads prompts)."""
        return bool(self.train or self.test)


def _node(node: Any) -> dict:
    return node if isinstance(node, dict) else {}


def _specs(group: str, nodes: Any) -> dict[str, Spec]:
    """A group of named components (callbacks, logger) as their specs."""
    return {name: Spec(f"{group}.{name}", node) for name, node in _node(nodes).items()}
