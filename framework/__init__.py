"""A declarative, config-driven experiment framework for PyTorch.

``compose``, ``fit`` and ``build_trainer`` (the Python API, framework/api.py; ``evaluate`` and
``predict`` of a checkpoint are ``framework.evaluate.evaluate`` and ``framework.predict.predict``)
import torch when first used, not when the package is imported: the
command-line apps answer ``--help`` without it. The layers, top-down (each imports only
those below it; docs/architecture.md draws them): the entry points here, cli, job, launch, rank,
callbacks / loggers / report, engine, strategies, data / models / tasks, config."""

from __future__ import annotations

__all__ = ["build_trainer", "compose", "fit"]


def __getattr__(name: str):
    if name in __all__:
        from framework import api

        return getattr(api, name)
    raise AttributeError(f"module 'framework' has no attribute {name!r}")
