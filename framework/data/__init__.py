"""DataModules: setup(stage) and *_dataloader(); the engine supplies the sampler (a component
layer, with the sampler and batched fetching). May import: config.

The datamodules import when first named (``framework.data.TextDataModule``), not with the package:
``framework-prepare-data``'s worker processes import its modules without torch or torchvision."""

from __future__ import annotations

import importlib

_MODULES = {
    "BaseDataModule": "base",
    "DigitsDataModule": "digits",
    "SyntheticDataModule": "synthetic",
    "MNISTDataModule": "vision",
    "CIFAR10DataModule": "vision",
    "ImageFolderDataModule": "vision",
    "TextDataModule": "text",
    "TextClassificationDataModule": "text_classification",
    "TokensDataModule": "tokens",
    "InstructionsDataModule": "instructions",
    "PreferencesDataModule": "preferences",
    "PromptsDataModule": "rl_prompts",
    "ReasoningGymDataModule": "reasoning_gym_prompts",
}

__all__ = list(_MODULES)


def __getattr__(name: str):
    if name in _MODULES:
        return getattr(importlib.import_module(f"framework.data.{_MODULES[name]}"), name)
    raise AttributeError(f"module 'framework.data' has no attribute {name!r}")
