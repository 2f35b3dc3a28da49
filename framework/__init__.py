"""A declarative, config-driven experiment framework for PyTorch."""
from framework.api import compose, fit

__all__ = ["compose", "fit"]
