"""A declarative, config-driven experiment framework for PyTorch.

``compose`` and ``fit`` (the Python API) import torch when first used, not when the package
is imported: the command-line apps answer ``--help`` without it."""
from __future__ import annotations

__all__ = ["compose", "fit"]


def __getattr__(name: str):
    if name in __all__:
        from framework import api

        return getattr(api, name)
    raise AttributeError(f"module 'framework' has no attribute {name!r}")
